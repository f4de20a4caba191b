"""Where training time goes: data wait vs compute per step, and a kernel timeline of a few steps."""

from __future__ import annotations

import time
from pathlib import Path

import torch


class StepTimer:
    """Data-wait vs compute split per step; CUDA events on the GPU so timing adds no synchronisation."""

    def __init__(self, device: torch.device) -> None:
        self.cuda = device.type == "cuda"
        self.events: list[list] = []
        self._cur: list = []

    def mark(self, i: int) -> None:
        if self.cuda:
            e = torch.cuda.Event(enable_timing=True)
            e.record()
        else:
            e = time.perf_counter()
        self._cur = [e] if i == 0 else [*self._cur, e]
        if i == 2:
            self.events.append(self._cur)

    def totals(self) -> tuple[float, float]:
        """(data wait, compute) seconds since the last call; synchronises the device."""
        if self.cuda:
            torch.cuda.synchronize()
            wait = sum(a.elapsed_time(b) for a, b, _ in self.events) / 1000
            comp = sum(b.elapsed_time(c) for _, b, c in self.events) / 1000
        else:
            wait = sum(b - a for a, b, _ in self.events)
            comp = sum(c - b for _, b, c in self.events)
        self.events = []
        return wait, comp


class StepProfiler:
    """A PyTorch profiler trace (CUDA kernels on the GPU) of ``n`` training steps, after a few warm-up steps,
    driven by ``torch.profiler.schedule``; call ``step()`` after every step and ``finish()`` at the epoch's end."""

    def __init__(self, device: torch.device, trace: Path, steps: int, n: int) -> None:
        from torch.profiler import ProfilerActivity, profile, schedule

        wait = 2 if steps > 3 + n else 0
        warmup = 1 if steps > 1 + n else 0
        active = max(1, min(n, steps - wait - warmup))
        acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
        self.trace = Path(trace)
        self.prof = profile(
            activities=acts,
            schedule=schedule(wait=wait, warmup=warmup, active=active, repeat=1),
            on_trace_ready=lambda p: p.export_chrome_trace(str(self.trace)),
            record_shapes=False,
        )
        self.prof.start()
        self.done = False

    def step(self) -> None:
        if not self.done:
            self.prof.step()

    def finish(self) -> None:
        if not self.done:
            self.prof.stop()  # exports the trace if the active steps were reached
            self.done = True
