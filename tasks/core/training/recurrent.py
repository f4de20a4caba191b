"""Which kernel runs the model's GRU on a GPU: cuDNN's, or PyTorch's own fused GRU cells (cuDNN off for that module
alone; the same equations). Every element of every snapshot is one sequence (snapshots x elements: 244 k of them per
step at the gpu profile), and cuDNN's backward reduces the bias gradients over that batch inside its element-wise
kernel: ``GRU_elementWise_bp2`` took 172 of the 205 ms that the ten busiest kernels took over five profiled steps on
an H200 (``bench/results/train.json``, ``top_kernels``; ``faultline bench train``). ``auto`` times both on the run's
own shape before the first step and keeps the faster; a kernel that fails to run is skipped."""

from __future__ import annotations

import statistics
import time

import torch
from torch import nn

from tasks.core.training.model import KERNELS, recurrent_kernel


def time_kernel(gru: nn.GRU, x: torch.Tensor, kernel: str, bf16: bool, repeats: int = 3) -> float:
    """Median seconds of one forward and backward of ``gru`` on ``x`` with ``kernel``, after one warm-up."""
    seconds = []
    for _ in range(repeats + 1):
        torch.cuda.synchronize(x.device)
        t = time.perf_counter()
        with recurrent_kernel(kernel), torch.autocast(x.device.type, dtype=torch.bfloat16, enabled=bf16):
            _, last = gru(x)
        last.float().sum().backward()
        torch.cuda.synchronize(x.device)
        seconds.append(time.perf_counter() - t)
    return statistics.median(seconds[1:])


def choose_kernel(
    gru: nn.GRU, rows: int, window: int, device: torch.device, bf16: bool, requested: str = "auto"
) -> tuple[str, dict]:
    """The kernel for ``gru`` on ``rows`` sequences of ``window`` steps, and how it was chosen: ``requested`` where
    it names one, cuDNN's off a GPU (the only one timed there would be the CPU's), else the faster of the two timed
    here (seconds per forward and backward; an error in place of a kernel that failed). The RNG state and the
    module's gradients are as they were before."""
    if requested != "auto":
        return requested, {"requested": requested}
    if device.type != "cuda":
        return "cudnn", {"requested": "auto", "timed_s": {}}
    timed: dict[str, float | str] = {}
    with torch.random.fork_rng(devices=[device]):
        x = torch.randn(rows, window, gru.input_size, device=device)
        for kernel in KERNELS:
            try:
                timed[kernel] = round(time_kernel(gru, x, kernel, bf16), 5)
            except RuntimeError as e:  # e.g. a build without the fused cells: the other kernel runs
                timed[kernel] = f"{type(e).__name__}: {str(e).splitlines()[0][:200]}"
    gru.zero_grad(set_to_none=True)
    return fastest(timed), {"requested": "auto", "timed_s": timed, "rows": rows, "window": window}


def fastest(timed: dict[str, float | str]) -> str:
    """The kernel of fewest seconds among those that ran (a string is a kernel's error); cuDNN's where none ran."""
    ran = {k: v for k, v in timed.items() if isinstance(v, float)}
    return min(ran, key=ran.__getitem__) if ran else "cudnn"
