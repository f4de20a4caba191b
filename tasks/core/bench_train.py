"""Training benchmark: samples/s, data-wait vs compute, GPU utilization, Horovod vs DDP on the same data.

Synthetic snapshots over a real topology (the data path and model are the production ones; only the values
are random), so it runs where no ingest output exists, e.g. on a GPU host without Java.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from .config import TrainConfig
from .gpu_monitor import UtilizationSampler, plot_utilization, top_kernels, training_windows
from .runtime import detect_hardware, horovod_env, train_device
from .topology import load_topology
from .train import launch_training


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


def _run(engine: str, cfg: TrainConfig, data: Path, work: Path) -> dict[str, Any]:
    work.mkdir(parents=True, exist_ok=True)
    device = train_device(cfg)
    spec = {
        "engine": engine,
        "device": device,
        "train": {**cfg.model_dump(mode="json"), "engine": engine},
        "data": str(data),
        "checkpoints": str(work / "ckpt"),
        "out": str(work),
        "fingerprint": f"bench-{engine}",
        "profile_steps": 5,
    }
    with UtilizationSampler(work / "gpu_utilization.csv", interval=0.2) as sampler:
        run = launch_training(spec, cfg.model_copy(update={"engine": engine}), work, horovod_env(cfg, device))
    util = sampler.summary(training_windows(work))
    if util["available"]:
        plot_utilization(work / "gpu_utilization.csv", work / "gpu_utilization.png")
    import json

    history = json.loads((work / "history.json").read_text())
    steady = history[1:] or history
    wait = sum(h["data_wait_s"] for h in steady)
    compute = sum(h["compute_s"] for h in steady)
    return {
        "engine": engine,
        "device": device,
        "num_proc": cfg.num_proc,
        "wall_s": round(run["wall_s"], 2),
        "samples_per_s": sum(h["samples"] for h in steady) / max(1e-9, wait + compute),
        "data_wait_fraction": wait / max(1e-9, wait + compute),
        "step_wait_s": wait,
        "step_compute_s": compute,
        "gpu_utilization": util,
        "top_kernels": top_kernels(work / "trace.json") if (work / "trace.json").is_file() else [],
    }


def bench_train(work: Path, cfg: TrainConfig, topology: str, times: int, features: int = 84) -> dict[str, Any]:
    work.mkdir(parents=True, exist_ok=True)
    data = work / "synthetic.npz"
    shape = synthetic_tensors(data, topology, times, features)
    runs = {e: _run(e, cfg, data, work / e) for e in ("horovod", "ddp")}
    hvd = runs["horovod"]
    return {
        "benchmark": "train",
        "device": (detect_hardware().gpus[0].name if detect_hardware().gpus else "cpu"),
        "hardware": detect_hardware().as_dict(),
        "data": shape,
        "config": {
            k: v
            for k, v in cfg.model_dump(mode="json").items()
            if k in ("num_proc", "epochs", "batch_size", "hidden", "layers", "window", "bf16")
        },
        "samples_per_s": round(hvd["samples_per_s"], 1),
        "data_wait_fraction": round(hvd["data_wait_fraction"], 4),
        "gpu_utilization_mean": (
            round(hvd["gpu_utilization"]["steady_mean"], 1) if hvd["gpu_utilization"]["available"] else None
        ),
        "horovod_vs_ddp": round(hvd["samples_per_s"] / runs["ddp"]["samples_per_s"], 3),
        "runs": runs,
    }
