"""``faultline doctor``: the environment half of the checklist, runnable before any pipeline run."""

from __future__ import annotations

from typing import Any

from tasks.core.checklist.checks import CHECKS
from tasks.core.checklist.report import FAIL, NA, PASS, WARN, Check, Outcome

JAVA_MIN = 17


def gather() -> dict[str, Any]:
    from tasks.core.checklist.evidence import live_probes
    from tasks.core.probes import horovod_build, importable, java_version, nccl_version

    probes = live_probes(nccl=True)
    gpus = (probes["hardware"] or {}).get("gpus") or []
    return {
        "probes": probes,
        "doctor": {
            "java": java_version(),
            "pyspark": importable("pyspark"),
            "horovod": horovod_build(),
            "nccl": nccl_version() if gpus else {"found": False, "error": "no GPU"},
            "cudf": importable("cudf") if gpus else {"found": False, "error": "no GPU"},
            "dask_cuda": importable("dask_cuda") if gpus else {"found": False, "error": "no GPU"},
            "cupy": importable("cupy") if gpus else {"found": False, "error": "no GPU"},
        },
    }


def _d(ev: dict[str, Any]) -> dict[str, Any]:
    return ev.get("doctor") or {}


def _gpus(ev: dict[str, Any]) -> list[dict[str, Any]]:
    return ((ev.get("probes") or {}).get("hardware") or {}).get("gpus") or []


def check_java(ev: dict[str, Any]) -> Outcome:
    j = _d(ev).get("java") or {}
    if not j.get("found"):
        return Outcome(FAIL, "no java on PATH or JAVA_HOME")
    ok = (j.get("major") or 0) >= JAVA_MIN
    return Outcome(PASS if ok else FAIL, f"{j.get('text')} ({j.get('path')})")


def check_spark(ev: dict[str, Any]) -> Outcome:
    p = _d(ev).get("pyspark") or {}
    if not p.get("found"):
        return Outcome(FAIL, f"pyspark does not import: {p.get('error')}")
    return Outcome(PASS, f"pyspark {p.get('version')}")


def check_horovod(ev: dict[str, Any]) -> Outcome:
    h = _d(ev).get("horovod") or {}
    if not h.get("found"):
        return Outcome(FAIL, "horovodrun not found or --check-build failed")
    fw = h.get("frameworks") or {}
    ctl = h.get("controllers") or {}
    ops = h.get("tensor_operations") or {}
    on = lambda d: ", ".join(k for k, v in d.items() if v) or "none"
    text = f"frameworks: {on(fw)}; controllers: {on(ctl)}; tensor operations: {on(ops)}"
    if not fw.get("PyTorch"):
        return Outcome(FAIL, text + " (PyTorch missing)")
    if not (ctl.get("Gloo") or ctl.get("MPI")):
        return Outcome(FAIL, text + " (no controller)")
    if _gpus(ev) and not ops.get("NCCL"):
        return Outcome(WARN, text + " (GPUs present but Horovod was built without NCCL)")
    return Outcome(PASS, text)


def check_gpus(ev: dict[str, Any]) -> Outcome:
    gpus = _gpus(ev)
    if not gpus:
        notes = ((ev.get("probes") or {}).get("hardware") or {}).get("notes") or []
        return Outcome(NA, f"no GPU visible ({'; '.join(notes) or 'no NVML, no nvidia-smi'}): CPU profiles only")
    return Outcome(PASS, ", ".join(f"GPU{g['index']} {g['name']} {g['memory_gb']} GB" for g in gpus))


def check_driver(ev: dict[str, Any]) -> Outcome:
    if not _gpus(ev):
        return Outcome(NA, "no GPU visible")
    drv = ((ev.get("probes") or {}).get("hardware") or {}).get("driver")
    return Outcome(PASS if drv else FAIL, f"driver {drv}")


def _gpu_import(key: str, label: str) -> Any:
    def fn(ev: dict[str, Any]) -> Outcome:
        if not _gpus(ev):
            return Outcome(NA, "no GPU visible")
        r = _d(ev).get(key) or {}
        if r.get("found"):
            return Outcome(PASS, f"{label} {r.get('version')}")
        return Outcome(FAIL, f"{label} unavailable: {r.get('error')}")

    return fn


DOCTOR_CHECKS: tuple[Check, ...] = (
    Check(
        "java",
        f"Java >= {JAVA_MIN} for Spark 4",
        "java -version",
        "Run `make setup`: it installs the project's own Java runtime into the virtual environment (or set JAVA_HOME).",
        check_java,
        "env",
    ),
    Check(
        "spark",
        "PySpark imports",
        "import pyspark",
        "Run `make setup` (installs the pinned pyspark).",
        check_spark,
        "env",
    ),
    Check(
        "horovod_build",
        "Horovod built with PyTorch and a controller",
        "horovodrun --check-build",
        "Run `make setup` (it builds Horovod once per machine with PyTorch and Gloo, and NCCL on GPU hosts, "
        "and caches the wheel).",
        check_horovod,
        "env",
    ),
    Check(
        "gpus",
        "GPUs visible",
        "NVML / nvidia-smi",
        "Install the NVIDIA driver and pynvml; in containers pass --gpus all.",
        check_gpus,
        "env",
    ),
    Check("driver", "NVIDIA driver", "NVML", "Install or update the NVIDIA driver.", check_driver, "env"),
    Check(
        "nccl",
        "NCCL available to PyTorch",
        "torch.cuda.nccl.version()",
        "Install a CUDA build of torch (it bundles NCCL).",
        _gpu_import("nccl", "NCCL"),
        "env",
    ),
    Check(
        "cudf",
        "cuDF imports",
        "import cudf",
        "Run `make setup` on the GPU host (it detects the GPU and installs the gpu extra: cuDF, dask-cuda, CuPy, "
        "RMM); offline: `make setup BUNDLE=<dir>` from a bundle made by `make bundle`.",
        _gpu_import("cudf", "cuDF"),
        "env",
    ),
    Check(
        "dask_cuda",
        "dask-cuda imports",
        "import dask_cuda",
        "Install dask-cuda matching the RAPIDS release.",
        _gpu_import("dask_cuda", "dask-cuda"),
        "env",
    ),
    *(c for c in CHECKS if c.scope == "env"),
)

__all__ = ["DOCTOR_CHECKS", "gather", "PASS", "FAIL", "WARN", "NA"]
