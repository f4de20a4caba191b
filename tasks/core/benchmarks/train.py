"""Training benchmark: samples/s, data-wait vs compute, GPU utilization, Horovod vs DDP on the same data.
Each engine runs up to three times (once when a run costs over a minute), each repeat in its own directory; the
figures and the Horovod-vs-DDP ratio are medians of samples/s, with min and max.

Synthetic snapshots over a real topology (the data path and model are the production ones; only the values
are random), so it runs where no ingest output exists, e.g. on a GPU host without Java.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from tasks.core.benchmarks.measure import ratio, repeated
from tasks.core.config import TrainConfig
from tasks.core.runtime import Runtime
from tasks.core.topology import load_topology
from tasks.core.training.gpu_monitor import (
    UtilizationSampler,
    kernel_busy_fraction,
    plot_utilization,
    top_kernels,
    training_windows,
)
from tasks.core.training.launch import launch_training, steady_throughput, training_spec

RATE = ("samples_per_s",)  # the figure each repeat is summarised by, beside its wall time


def synthetic_tensors(path: Path, topology: str, times: int, features: int, seed: int = 0) -> dict[str, Any]:
    topo = load_topology(topology)
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((times, topo.n, features), dtype=np.float32)
    y = (rng.random((times, topo.n)) < 0.02).astype(np.int8)
    indptr, indices = topo.csr()
    val_start, test_start = int(times * 0.9), int(times * 0.95)
    np.savez(
        path,
        X=x,
        y=y,
        mask=np.ones_like(y),
        indptr=indptr,
        indices=indices,
        train_t=np.arange(16, val_start),
        val_t=np.arange(val_start, test_start),
        test_t=np.arange(test_start, times),
        times=np.arange(times, dtype=np.int64),
    )
    return {"topology": topology, "elements": topo.n, "times": times, "features": features, "bytes": int(x.nbytes)}


def _run(engine: str, cfg: TrainConfig, data: Path, work: Path, rt: Runtime) -> dict[str, Any]:
    work.mkdir(parents=True, exist_ok=True)
    c = cfg.model_copy(update={"engine": engine})
    spec = training_spec(engine, rt.device, c, data, work / "ckpt", work, f"bench-{engine}", rt.threads_per_rank)
    with UtilizationSampler(work / "gpu_utilization.csv") as sampler:
        run = launch_training(spec, c, work, rt.launcher_env)
    util = sampler.summary(training_windows(work))
    if util["available"]:
        plot_utilization(work / "gpu_utilization.csv", work / "gpu_utilization.png")
    history = json.loads((work / "history.json").read_text())
    trace = work / "trace.json"
    return {
        "engine": engine,
        "device": rt.device,
        "num_proc": cfg.num_proc,
        "wall_s": round(run["wall_s"], 2),
        **steady_throughput(history),
        "gpu_utilization": util,
        "kernel_busy_fraction": kernel_busy_fraction(trace) if trace.is_file() else None,
        "top_kernels": top_kernels(trace) if trace.is_file() else [],
    }


def bench_train(work: Path, cfg: TrainConfig, rt: Runtime, topology: str, times: int, features: int = 84):
    work.mkdir(parents=True, exist_ok=True)
    data = work / "synthetic.npz"
    shape = synthetic_tensors(data, topology, times, features)
    runs = {}
    for engine in ("horovod", "ddp"):
        dirs = (work / engine / f"repeat-{i}" for i in range(1, 4))  # a fresh one each: no resuming a checkpoint
        runs[engine] = repeated(lambda e=engine, d=dirs: _run(e, cfg, data, next(d), rt), key="wall_s", also=RATE)
    hvd = runs["horovod"]
    util = hvd["gpu_utilization"]
    return {
        "benchmark": "train",
        "device": rt.hardware.gpus[0].name if rt.hardware.gpus else "cpu",
        "hardware": rt.hardware.as_dict(),
        "data": shape,
        "config": {
            k: v
            for k, v in cfg.model_dump(mode="json").items()
            if k in ("num_proc", "epochs", "batch_size", "hidden", "layers", "window", "bf16")
        },
        "samples_per_s": round(hvd["samples_per_s_median"], 1),
        "samples_per_s_min_max": [round(hvd["samples_per_s_min"], 1), round(hvd["samples_per_s_max"], 1)],
        "repeats": {e: r["repeats"] for e, r in runs.items()},
        "data_wait_fraction": round(hvd["data_wait_fraction"], 4),
        "gpu_utilization_mean": round(util["steady_mean"], 1) if util.get("steady_mean") is not None else None,
        "horovod_vs_ddp": ratio(hvd["samples_per_s_median"], runs["ddp"]["samples_per_s_median"], 3),
        "extrapolated": False,
        "runs": runs,
    }
