"""The host's hardware, probed once: CPU cores, memory, every GPU (NVML, else ``nvidia-smi``), the driver and
the GPU topology. GPU libraries are imported only inside functions."""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import asdict, dataclass, field
from functools import lru_cache
from typing import Any


@dataclass(frozen=True)
class GPU:
    index: int
    name: str
    memory_gb: float


@dataclass(frozen=True)
class Hardware:
    cpu_count: int
    memory_gb: float
    gpus: tuple[GPU, ...] = ()
    driver: str | None = None
    nvlink_topology: str | None = None
    source: str = "none"
    notes: tuple[str, ...] = field(default_factory=tuple)
    cpu_cores: int | None = None  # physical cores, where cpu_count counts hardware threads (None: not known)

    @property
    def gpu_count(self) -> int:
        return len(self.gpus)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@lru_cache(maxsize=1)
def detect_hardware() -> Hardware:
    """GPU count and memory via NVML (nvidia-smi as fallback); works with no GPU at all."""
    import psutil

    cpus = os.cpu_count() or 1
    mem = psutil.virtual_memory().total / 2**30
    gpus, driver, source, notes = _probe_nvml()
    if not gpus:
        gpus, driver, source = _probe_nvidia_smi()
    topo = _nvidia_smi_topo() if gpus else None
    # physical cores, beside the hardware threads: the benchmarks' core scaling is read against them (16 CPUs may
    # be 8 cores with two threads each)
    cores = psutil.cpu_count(logical=False)
    return Hardware(cpus, round(mem, 1), tuple(gpus), driver, topo, source, tuple(notes), cores)


def _probe_nvml() -> tuple[list[GPU], str | None, str, list[str]]:
    try:
        import pynvml  # type: ignore[import-not-found]
    except ImportError:
        return [], None, "none", ["pynvml not installed"]
    try:
        pynvml.nvmlInit()
    except Exception as exc:  # no driver: a CPU machine
        return [], None, "none", [f"NVML unavailable: {exc}"]
    try:
        driver = pynvml.nvmlSystemGetDriverVersion()
        gpus = []
        for i in range(pynvml.nvmlDeviceGetCount()):
            h = pynvml.nvmlDeviceGetHandleByIndex(i)
            name = pynvml.nvmlDeviceGetName(h)
            gpus.append(
                GPU(
                    i,
                    name.decode() if isinstance(name, bytes) else name,
                    round(pynvml.nvmlDeviceGetMemoryInfo(h).total / 2**30, 1),
                )
            )
        return gpus, driver.decode() if isinstance(driver, bytes) else driver, "nvml", []
    finally:
        pynvml.nvmlShutdown()


def _probe_nvidia_smi() -> tuple[list[GPU], str | None, str]:
    if not shutil.which("nvidia-smi"):
        return [], None, "none"
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=index,name,memory.total,driver_version", "--format=csv,noheader,nounits"],
            capture_output=True,
            text=True,
            timeout=20,
            check=True,
        ).stdout
    except (subprocess.SubprocessError, OSError):
        return [], None, "none"
    gpus, driver = [], None
    for line in out.strip().splitlines():
        idx, name, mem, drv = (x.strip() for x in line.split(","))
        gpus.append(GPU(int(idx), name, round(float(mem) / 1024, 1)))
        driver = drv
    return gpus, driver, "nvidia-smi"


def _nvidia_smi_topo() -> str | None:
    try:
        return subprocess.run(["nvidia-smi", "topo", "-m"], capture_output=True, text=True, timeout=20).stdout
    except (subprocess.SubprocessError, OSError):
        return None


# ---------------------------------------------------------------- Spark
