"""The checklist's GPU checks: kernel timeline, NCCL matrix, GPU utilization, the memory fraction."""

from __future__ import annotations

from typing import Any

from tasks.core.checklist.report import FAIL, NA, PASS, WARN, Outcome, manifest, requires_stage

GPU_UTIL_TARGET = 85.0
NCCL_SYMMETRY_TOL = 0.15


def _gpu_run(ev: dict[str, Any]) -> bool:
    train = manifest(ev, "train")
    return bool(train and train.get("device") == "cuda")


def _run_gpus(ev: dict[str, Any]) -> list[dict[str, Any]]:
    return list(((ev.get("environment") or {}).get("hardware") or {}).get("gpus") or [])


@requires_stage("train")
def check_kernel_timeline(ev: dict[str, Any], train: dict[str, Any]) -> Outcome:
    kt = train.get("kernel_timeline") or {}
    if train.get("device") != "cuda":
        return Outcome(NA, f"training ran on {train.get('device')}: there are no CUDA kernels to time")
    kind = kt.get("kind") or ""
    top = kt.get("top_kernels") or []
    if kind.startswith("nsys") or (kt.get("file") and kt.get("cuda_kernels", 0) > 0 and top):
        listing = "; ".join(f"{k['kernel'][:60]} {k['total_us'] / 1000:.2f} ms x{k['calls']}" for k in top[:5])
        return Outcome(
            PASS, f"{kind} `{kt.get('file')}` with {kt.get('cuda_kernels')} CUDA kernels; top: {listing}", top
        )
    if kt.get("file"):
        return Outcome(FAIL, f"{kind} `{kt['file']}` holds no CUDA kernel events")
    return Outcome(FAIL, "no nsys report or profiler trace was recorded for training")


def check_nccl_matrix(ev: dict[str, Any]) -> Outcome:
    probes = ev.get("probes") or {}
    gpus = (probes.get("hardware") or {}).get("gpus") or []
    topo = probes.get("topo") or {}
    shown = f"; nvidia-smi topo -m: {topo['links']}" if topo.get("links") else ""
    if len(gpus) < 2:
        return Outcome(NA, f"{len(gpus)} GPU on this machine: a pairwise matrix needs at least 2{shown}", topo or None)
    nccl = probes.get("nccl")
    if not nccl:
        return Outcome(FAIL, f"the pairwise probe did not run: {probes.get('nccl_error', 'not attempted')}{shown}")
    from tasks.core.probes import asymmetry

    worst, where = asymmetry(nccl["matrix_gbps"])
    m = nccl["matrix_gbps"]
    rows = " / ".join(" ".join(f"{v:.0f}" for v in row) for row in m)
    text = f"{len(m)}x{len(m)} GB/s matrix [{rows}], worst asymmetry {worst:.1%} at {where}{shown}"
    return Outcome(PASS if worst <= NCCL_SYMMETRY_TOL else FAIL, text, {"nccl": nccl, "topo": topo})


@requires_stage("train")
def check_gpu_utilization(ev: dict[str, Any], train: dict[str, Any]) -> Outcome:
    if train.get("device") != "cuda":
        return Outcome(NA, f"training ran on {train.get('device')}: no GPU to utilise")
    u = train.get("gpu_utilization") or {}
    if not u.get("available"):
        return Outcome(FAIL, f"no GPU utilization samples were recorded for training ({u.get('reason')})")
    busy = u.get("kernel_busy_fraction")
    extra = f"; kernel-busy {busy:.1%} over the profiled steps" if busy is not None else ""
    if not u.get("sufficient") or u.get("steady_mean") is None:
        return Outcome(
            WARN,
            f"insufficient evidence: {u.get('steady_samples', 0)} samples over {u.get('steady_seconds', 0):.1f} s of "
            f"steady-state training (at least 10 s and 20 samples are needed to judge){extra}",
        )
    text = (
        f"steady-state {u['steady_mean']:.1f} % over {u['steady_samples']} samples in {u['steady_seconds']:.0f} s "
        f"({u.get('source', 'NVML')}; {u.get('steady_definition')}); whole launch {u['mean']:.1f} %{extra}; "
        f"target > {GPU_UTIL_TARGET:.0f} %"
    )
    return Outcome(PASS if u["steady_mean"] > GPU_UTIL_TARGET else FAIL, text)


@requires_stage("train", "training did not run on a GPU")
def check_memory_fraction(ev: dict[str, Any], train: dict[str, Any]) -> Outcome:
    if train.get("device") != "cuda":
        return Outcome(NA, "training did not run on a GPU")
    f = train.get("memory_fraction")
    if f is None or not 0 < float(f) < 1:
        return Outcome(FAIL, f"GPU memory fraction is {f!r}: the caching allocator may take the whole device")
    return Outcome(PASS, f"torch.cuda.set_per_process_memory_fraction({f})")
