"""The GPU path's kernels compiled once per host, before its first run.

CuPy compiles each elementwise, reduction and raw kernel (ours: ``gpu_kernels``) with NVRTC the first time a
process uses it, and keeps the result in its kernel cache on disk (``CUPY_CACHE_DIR``, by default
``~/.cupy/kernel_cache``). On a fresh host the first pipeline run pays those compilations inside its stages: the
features stage's first day and the training ranks' tensor build. ``warm`` runs the same code on a tiny synthetic
network (the features stage on the profile's Dask cluster, the training tensors, evaluation's rows and metrics)
so that the cache holds them; ``make setup`` calls it on a GPU host (``faultline warmup`` does it by hand). On a
CPU host it runs the same path on pandas and NumPy, which compiles nothing.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

WARM_TOPOLOGY = "topozoo/Geant2012"  # 37 elements: every kernel runs, in seconds
WARM_DAYS = 2  # the rolling windows reach into the previous day's history, as in a run


def kernel_cache_dir() -> Path:
    return Path(os.environ.get("CUPY_CACHE_DIR") or Path.home() / ".cupy" / "kernel_cache")


def cached_kernels() -> int:
    """How many compiled kernels CuPy's cache holds (0 where there is none)."""
    d = kernel_cache_dir()
    return sum(1 for p in d.iterdir() if p.is_file()) if d.is_dir() else 0


def _features(work: Path, profile: str, gpu: bool):
    """The features stage on a synthetic lake, on the cluster the profile's features stage gets."""
    from tasks.core.benchmarks.lakes import synthetic_lake
    from tasks.core.config import load_config
    from tasks.core.runtime import dask_cluster, dask_spec, detect_hardware
    from tasks.core.schema import STEPS_PER_DAY
    from tasks.core.stages.features import features_stage
    from tasks.core.topology import load_topology

    cfg = load_config(profile)
    backend = "cudf" if gpu else "pandas"
    fcfg = cfg.features.model_copy(update={"backend": backend, "cluster": "cuda" if gpu else "local"})
    lake = work / "lake"
    synthetic_lake(lake, WARM_TOPOLOGY, load_topology(WARM_TOPOLOGY).n * STEPS_PER_DAY * WARM_DAYS)
    out = work / "features"
    out.mkdir()
    with dask_cluster(dask_spec(fcfg, backend, detect_hardware())) as client:
        summary = features_stage(client, lake, fcfg, backend, out)
    return cfg, summary, out


def _tensors_and_metrics(cfg, summary: dict[str, Any], out: Path, gpu: bool) -> dict[str, Any]:
    """The training ranks' tensor build and evaluation's rows and metrics, on the features just made."""
    from tasks.core.arrays import array_module
    from tasks.core.metrics import classification_metrics
    from tasks.core.stages.evaluate import read_rows
    from tasks.core.topology import Topology
    from tasks.core.training.frame_tensors import build, write_recipe

    names, horizon = summary["features"]["names"], summary["features"]["horizon_minutes"]
    train = out.parent / "train"
    train.mkdir()
    recipe = write_recipe(train, out / "features", names, cfg.train.window, 0.25, cfg.train.graph, 0, horizon)
    arrays, info = build(recipe, gpu)
    rows, x = read_rows(out / "features", names, Topology.read(out / "topology.json"), gpu)
    xp = array_module(x)
    score = xp.nan_to_num(x[:, 0], nan=0.0)
    metrics = classification_metrics(xp.asarray(rows["label"].to_numpy()), score, cfg.evaluate.precision_target)
    return {
        "tensor_device": info["tensor_device"],
        "tensor_shape": list(arrays["X"].shape),
        "samples": metrics["samples"],
    }


def warm(profile: str = "gpu", gpu: bool | None = None, say=print) -> dict[str, Any]:
    """Run the GPU path's kernels once on a tiny network; returns what ran, the seconds, and the kernels CuPy's cache
    held before and after. ``gpu``: None takes the features stage's own choice (``runtime.dataframe_backend``)."""
    if gpu is None:
        from tasks.core.config import load_config
        from tasks.core.runtime import dataframe_backend, detect_hardware

        gpu = dataframe_backend(load_config(profile).features, detect_hardware()) == "cudf"
    before, started = cached_kernels(), time.perf_counter()
    say(f"warming the {'GPU' if gpu else 'CPU'} path's kernels on {WARM_TOPOLOGY} ({WARM_DAYS} days)")
    work = Path(tempfile.mkdtemp(prefix="faultline-warmup-"))
    try:
        cfg, summary, out = _features(work, profile, gpu)
        ran = _tensors_and_metrics(cfg, summary, out, gpu)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    result = {
        "gpu": gpu,
        "rows": summary["rows_out"],
        **ran,
        "seconds": round(time.perf_counter() - started, 1),
        "kernel_cache": str(kernel_cache_dir()),
        "cached_kernels_before": before,
        "cached_kernels_after": cached_kernels(),
    }
    say(
        f"warm in {result['seconds']} s: CuPy's cache at {result['kernel_cache']} holds "
        f"{result['cached_kernels_after']} kernels ({result['cached_kernels_before']} before)"
    )
    return result
