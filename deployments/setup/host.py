"""What the machine is (GPU or not, which Python, a CUDA torch already installed) and the target it needs.

Standard library only: this runs before any virtual environment exists.
"""

from __future__ import annotations

import json
import os
import platform
import shutil
import subprocess
import sys
from dataclasses import asdict, dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
CACHE = Path(os.environ.get("FAULTLINE_CACHE") or Path.home() / ".cache" / "faultline")


@dataclass(frozen=True)
class Target:
    """What a bundle or an install is for: a Python version on Linux x86_64, CPU or CUDA 13, and whether the
    host brings its own CUDA build of torch (NVIDIA's containers) or setup installs the lock's."""

    name: str
    python: str
    gpu: bool
    torch: str  # "lock": installed from the lock; "host": the host's CUDA torch is used as it is

    def as_dict(self) -> dict:
        return asdict(self)


TARGETS = {
    "cpu-py311": Target("cpu-py311", "3.11", False, "lock"),
    "cpu-py312": Target("cpu-py312", "3.12", False, "lock"),
    "cu13-py311": Target("cu13-py311", "3.11", True, "lock"),
    "cu13-py312": Target("cu13-py312", "3.12", True, "host"),
}


def run(cmd: list[str], **kw) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, capture_output=True, text=True, **kw)


def python_version(python: str) -> str:
    out = run([python, "-c", "import sys; print('%d.%d' % sys.version_info[:2])"], check=True)
    return out.stdout.strip()


def has_gpu() -> bool:
    """An NVIDIA GPU is here (nvidia-smi lists one), or the user says so (PROFILE=gpu|dgx, FAULTLINE_GPU=1)."""
    if os.environ.get("FAULTLINE_GPU") in ("0", "1"):
        return os.environ["FAULTLINE_GPU"] == "1"
    if os.environ.get("PROFILE") in ("gpu", "dgx"):
        return True
    smi = shutil.which("nvidia-smi")
    if not smi:
        return False
    try:
        return "GPU" in run([smi, "-L"], timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        return False


def host_torch(python: str) -> dict | None:
    """A CUDA build of torch importable by ``python`` (NVIDIA's containers): its version and site directory."""
    code = (
        "import json, os, torch; print(json.dumps({'version': torch.__version__, 'cuda': torch.version.cuda,"
        " 'site': os.path.dirname(os.path.dirname(torch.__file__))}))"
    )
    try:
        out = run([python, "-c", code], timeout=120)
    except (OSError, subprocess.SubprocessError):
        return None
    if out.returncode != 0:
        return None
    info = json.loads(out.stdout.strip().splitlines()[-1])
    return info if info.get("cuda") else None


def detect(python: str) -> tuple[Target, dict | None]:
    """This machine's target, and the host torch it reuses (GPU hosts with a CUDA torch)."""
    version = python_version(python)
    gpu = has_gpu()
    torch = host_torch(python) if gpu else None
    name = f"{'cu13' if gpu else 'cpu'}-py{version.replace('.', '')}"
    return Target(name, version, gpu, "host" if torch else "lock"), torch


def target(name: str, python: str) -> tuple[Target, dict | None]:
    if name == "host":
        return detect(python)
    if name not in TARGETS:
        raise SystemExit(f"unknown TARGET={name!r}: choose host or one of {', '.join(TARGETS)}")
    return TARGETS[name], None


def machine() -> dict:
    return {"machine": platform.machine(), "system": platform.system(), "python": sys.version.split()[0]}
