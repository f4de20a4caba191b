"""The train stage: dense tensors from the features, the ranks launched and watched, and what they measured."""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tasks.core.config import TrainConfig
from tasks.core.runtime import Runtime
from tasks.core.topology import Topology
from tasks.core.tracking import tracking_uri
from tasks.core.training.checkpoint import load_latest
from tasks.core.training.frame_tensors import write_recipe
from tasks.core.training.gpu_monitor import (
    UtilizationSampler,
    kernel_busy_fraction,
    plot_utilization,
    top_kernels,
    training_windows,
)
from tasks.core.training.launch import launch_training, steady_throughput, training_spec
from tasks.core.training.tensors import prepare_tensors


def tensors_where(cfg: TrainConfig, device: str) -> str:
    """``device`` (each rank builds its tensors) or ``host`` (the stage builds them once, into data.npz)."""
    if cfg.tensors != "auto":
        return cfg.tensors
    return "device" if device == "cuda" else "host"


def _kernel_timeline(out: Path) -> dict[str, Any]:
    trace = out / "trace.json"
    if not trace.is_file():
        return {"kind": None, "file": None, "cuda_kernels": 0, "top_kernels": []}
    kernels = top_kernels(trace)
    return {
        "kind": "torch.profiler chrome trace",
        "file": "trace.json",
        "cuda_kernels": len(kernels),
        "top_kernels": kernels,
        "kernel_busy_fraction": kernel_busy_fraction(trace),
    }


def _node_metrics(node_metrics: dict[str, Any] | None, env: dict[str, str]) -> tuple[dict | None, dict[str, str]]:
    """The ranks' part of ``node_metrics`` (for spec.json) and their environment, with the tracking URI resolved
    there (it may hold a credential: never written to a file)."""
    if not node_metrics:
        return None, dict(env)
    uri = tracking_uri(node_metrics["tracking_uri"], Path(node_metrics["root"]))
    return {k: node_metrics[k] for k in ("run_id", "interval_s", "flow_host")}, {**env, "MLFLOW_TRACKING_URI": uri}


def train_stage(
    features_dir: Path,
    names: list[str],
    rows_in: int,
    cfg: TrainConfig,
    test_fraction: float,
    rt: Runtime,
    checkpoints: Path,
    fingerprint: str,
    out: Path,
    progress: Callable[[dict], None] | None = None,
    node_metrics: dict[str, Any] | None = None,
    warn: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """Train in ``out`` (model.pt, history.json, train.log, data.npz, trace.json, GPU samples), resuming from the
    newest checkpoint of this data fingerprint; the manifest body. ``node_metrics``: see ``train.hosts``."""
    topo, started = Topology.read(features_dir / "topology.json"), time.perf_counter()
    horizon = json.loads((features_dir / "_manifest.json").read_text())["features"]["horizon_minutes"]
    if tensors_where(cfg, rt.device) == "device":  # each rank builds its own from the Parquet, on its device
        data_path = write_recipe(out, features_dir / "features", names, cfg.window, test_fraction, cfg.graph,
                                 cfg.seed, horizon)  # fmt: skip
    else:
        data_path = out / "data.npz"
        data = prepare_tensors(features_dir / "features", topo, names, cfg.window, test_fraction, data_path,
                               None, cfg.graph, cfg.seed, horizon)  # fmt: skip
        data.update(tensor_build_s=round(time.perf_counter() - started, 2), tensor_device="host")
    nodes, env = _node_metrics(node_metrics, rt.launcher_env)
    spec = training_spec(cfg.engine, rt.device, cfg, data_path, checkpoints, out, fingerprint,
                         rt.threads_per_rank, node_metrics=nodes)  # fmt: skip
    # a retried or rerun task resumes from here; a damaged checkpoint is said in the CLI's and Prefect's log too
    prior = load_latest(checkpoints, fingerprint, warn or logging.getLogger("faultline.train").warning)
    resumed = prior[1]["epoch"] if prior else None
    with UtilizationSampler(out / "gpu_utilization.csv") as sampler:
        run = launch_training(spec, cfg, out, env, progress)
    utilization = sampler.summary(training_windows(out))
    timeline = _kernel_timeline(out)
    if utilization["available"]:
        utilization["kernel_busy_fraction"] = timeline.get("kernel_busy_fraction")
        plot_utilization(out / "gpu_utilization.csv", out / "gpu_utilization.png")
    history = json.loads((out / "history.json").read_text())
    if data_path.suffix == ".json":  # rank 0 measured its build
        data = json.loads((out / "data_info.json").read_text())
    return {
        "device": rt.device,
        "engine": cfg.engine,
        "num_proc": cfg.num_proc,
        "rows_in": rows_in,
        "rows_out": data["rows"],
        "data": {k: v for k, v in data.items() if k != "feature_names"},
        "history": history,
        "work_rows": data["rows"] * len(history),  # rows x epochs
        "warm_start": cfg.init_weights,
        "samples_per_s": steady_throughput(history)["samples_per_s"],
        "launch": run,
        "checkpoints": str(checkpoints),
        "memory_fraction": cfg.memory_fraction if rt.device == "cuda" else None,
        "resumed_from_epoch": resumed,
        "gpu_utilization": utilization,
        "kernel_timeline": timeline,
    }
