"""Live probes of the machine: NCCL pairwise bandwidth, NVLink topology, the software stack.

The pairwise probe runs one process per rank through ``torch.distributed`` (NCCL on GPUs; Gloo on
CPUs, which is how its logic is tested on a machine without GPUs).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from tasks.core.ports import free_port


# ---------------------------------------------------------------- pairwise bandwidth
def _one_pair(dist, buf, rank: int, src: int, dst: int, iters: int, sync) -> float:
    """Seconds for ``iters`` sends of ``buf`` from ``src`` to ``dst`` after one warm-up send (on every rank)."""
    dist.barrier()
    seconds = 0.0
    for n in (1, iters):  # the first pass warms the link up and is not timed
        sync()
        t0 = time.perf_counter()
        for _ in range(n):
            if rank == src:
                dist.send(buf, dst)
            elif rank == dst:
                dist.recv(buf, src)
        sync()
        seconds = time.perf_counter() - t0
    return seconds


def _pairwise_worker(rank: int, world: int, port: int, backend: str, nbytes: int, iters: int, out: str) -> None:
    import torch
    import torch.distributed as dist

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group(backend, rank=rank, world_size=world)
    device = torch.device("cuda", rank) if backend == "nccl" else torch.device("cpu")
    if backend == "nccl":
        torch.cuda.set_device(device)
    sync = torch.cuda.synchronize if backend == "nccl" else (lambda: None)
    buf = torch.ones(nbytes // 4, dtype=torch.float32, device=device)
    matrix = torch.zeros(world, world, dtype=torch.float64)
    for src in range(world):
        for dst in range(world):
            if src != dst:
                dt = _one_pair(dist, buf, rank, src, dst, iters, sync)
                if rank == dst:
                    matrix[src, dst] = nbytes * iters / dt / 1e9
    dist.all_reduce(matrix)  # each cell was written by exactly one rank (the receiver); others hold 0
    if rank == 0:
        torch.save(matrix, out)
    dist.destroy_process_group()


def pairwise_bandwidth(world: int, backend: str = "nccl", size_mb: float = 64, iters: int = 5) -> dict[str, Any]:
    """GB/s from every rank to every other rank (``matrix[src][dst]``), one process per rank."""
    import tempfile

    import torch
    import torch.multiprocessing as mp

    if world < 2:
        raise ValueError("a pairwise probe needs at least 2 ranks")
    nbytes = int(size_mb * 2**20) // 4 * 4
    with tempfile.TemporaryDirectory() as tmp:
        out = str(Path(tmp) / "matrix.pt")
        mp.spawn(_pairwise_worker, args=(world, free_port(), backend, nbytes, iters, out), nprocs=world, join=True)
        matrix = torch.load(out).tolist()
    return {"backend": backend, "world": world, "bytes": nbytes, "iters": iters, "matrix_gbps": matrix}


def asymmetry(matrix: list[list[float]]) -> tuple[float, tuple[int, int] | None]:
    """The largest relative difference |m[i][j] - m[j][i]| / max of the two, and where it is."""
    worst, where = 0.0, None
    n = len(matrix)
    for i in range(n):
        if len(matrix[i]) != n:
            raise ValueError(f"bandwidth matrix is not square: row {i} has {len(matrix[i])} entries, expected {n}")
        for j in range(i + 1, n):
            a, b = float(matrix[i][j]), float(matrix[j][i])
            rel = abs(a - b) / max(a, b) if max(a, b) > 0 else 1.0
            if rel > worst or where is None:
                worst, where = rel, (i, j)
    return worst, where


# ---------------------------------------------------------------- NVLink topology
def parse_topo_matrix(text: str) -> dict[str, Any]:
    """``nvidia-smi topo -m`` -> GPU names and the link type between every pair (NV18, PIX, SYS, ...)."""
    text = re.sub(r"\x1b\[[0-9;]*m", "", text or "")  # nvidia-smi underlines the header
    lines = [ln.rstrip() for ln in text.splitlines() if ln.strip()]
    header = next((ln for ln in lines if ln[:1].isspace() and re.search(r"\bGPU0\b", ln)), None)
    if header is None:
        return {"gpus": [], "links": {}}
    cols = header.split()
    gpu_cols = [c for c in cols if re.fullmatch(r"GPU\d+", c)]
    links: dict[str, dict[str, str]] = {}
    for ln in lines:
        parts = ln.split()
        if parts and re.fullmatch(r"GPU\d+", parts[0]) and len(parts) > len(gpu_cols):
            links[parts[0]] = dict(zip(gpu_cols, parts[1 : 1 + len(gpu_cols)]))
    nvlinks = sorted(
        {v for row in links.values() for v in row.values() if re.fullmatch(r"NV\d+", v)},
        key=lambda s: int(s[2:]),
    )
    return {"gpus": gpu_cols, "links": links, "nvlink_types": nvlinks}


# ---------------------------------------------------------------- software stack
def _run(cmd: list[str], timeout: int = 60) -> tuple[int, str]:
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
        return p.returncode, (p.stdout + p.stderr).strip()
    except (OSError, subprocess.SubprocessError) as exc:
        return 127, str(exc)


def java_home() -> str | None:
    """The Java Spark uses: JAVA_HOME when the user set it, else the runtime ``make setup`` put in the virtual
    environment (``<venv>/jre``, made with jlink), else None (then whatever ``java`` is on PATH)."""
    if os.environ.get("JAVA_HOME"):
        return os.environ["JAVA_HOME"]
    jre = Path(sys.prefix) / "jre"
    return str(jre) if (jre / "bin" / "java").is_file() else None


def java_version() -> dict[str, Any]:
    home = java_home()
    java = str(Path(home, "bin", "java")) if home else shutil.which("java")
    if not java or not Path(java).exists():
        return {"found": False}
    rc, out = _run([java, "-version"], 30)
    m = re.search(r'version "(\d+)(?:\.(\d+))?', out)
    major = int(m.group(1)) if m else None
    if major == 1 and m and m.group(2):
        major = int(m.group(2))
    return {"found": rc == 0, "path": java, "major": major, "text": out.splitlines()[0] if out else ""}


def parse_check_build(text: str) -> dict[str, Any]:
    """``horovodrun --check-build`` -> {'frameworks': {...}, 'controllers': {...}, 'tensor_operations': {...}}."""
    sections: dict[str, dict[str, bool]] = {}
    current = None
    for ln in text.splitlines():
        head = re.match(r"^\s*Available (Frameworks|Controllers|Tensor Operations):", ln)
        if head:
            current = head.group(1).lower().replace(" ", "_")
            sections[current] = {}
            continue
        item = re.match(r"^\s*\[(X| )\]\s+(.+?)\s*$", ln)
        if item and current:
            sections[current][item.group(2)] = item.group(1) == "X"
    return sections


def horovod_build() -> dict[str, Any]:
    exe = shutil.which("horovodrun") or str(Path(os.sys.executable).with_name("horovodrun"))
    if not Path(exe).exists():
        return {"found": False}
    rc, out = _run([exe, "--check-build"], 120)
    return {"found": rc == 0, **parse_check_build(out), "text": out}


def importable(module: str) -> dict[str, Any]:
    import importlib

    try:
        mod = importlib.import_module(module)
    except Exception as exc:  # ImportError, or a CUDA library that fails to load
        return {"found": False, "error": f"{type(exc).__name__}: {exc}"[:300]}
    return {"found": True, "version": getattr(mod, "__version__", "?")}


def nccl_version() -> dict[str, Any]:
    try:
        import torch

        if not torch.cuda.is_available():
            return {"found": False, "error": "torch sees no CUDA device"}
        v = torch.cuda.nccl.version()
        return {"found": True, "version": ".".join(map(str, v)) if isinstance(v, tuple) else str(v)}
    except Exception as exc:
        return {"found": False, "error": f"{type(exc).__name__}: {exc}"}


def infiniband_devices(sys_root: Path = Path("/sys/class/infiniband")) -> list[str]:
    return sorted(p.name for p in sys_root.iterdir()) if sys_root.is_dir() else []
