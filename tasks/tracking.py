"""MLflow run lifecycle as Prefect tasks (the run spans the whole pipeline)."""

from __future__ import annotations

import json
import platform
from functools import lru_cache
from pathlib import Path
from typing import Any

from prefect import task

from tasks.common import TASK_OPTIONS
from tasks.core.config import FaultlineConfig
from tasks.core.runtime import detect_hardware
from tasks.core.store import code_version
from tasks.core.tracking import Tracker, tracking_uri


@lru_cache(maxsize=4)
def get_tracker(uri: str | None, experiment: str, root: str) -> Tracker:
    return Tracker(tracking_uri(uri, Path(root)), experiment, Path(root).resolve() / "mlartifacts")


def tracker_for(cfg: FaultlineConfig) -> Tracker:
    return get_tracker(cfg.mlflow.tracking_uri, cfg.mlflow.experiment, cfg.paths.root)


def _environment() -> dict[str, Any]:
    from importlib.metadata import distributions

    pkgs = {d.metadata["Name"].lower(): d.version for d in distributions() if d.metadata["Name"]}
    keep = (
        "prefect",
        "pyspark",
        "great-expectations",
        "great_expectations",
        "mlflow",
        "dask",
        "distributed",
        "torch",
        "horovod",
        "pandas",
        "pyarrow",
        "numpy",
        "scikit-learn",
        "topohub",
        "cudf-cu13",
        "dask-cuda",
        "cupy-cuda13x",
    )
    return {
        "python": platform.python_version(),
        "platform": platform.platform(),
        "packages": {k: pkgs[k] for k in keep if k in pkgs},
        "hardware": detect_hardware().as_dict(),
    }


@task(name="start-tracking", **TASK_OPTIONS)
def start_tracking(cfg: FaultlineConfig, flow_run_id: str | None, work: Path) -> str:
    tr = tracker_for(cfg)
    run_id = tr.start_run(
        f"pipeline-{cfg.profile}",
        {
            "profile": cfg.profile,
            "code_version": code_version(),
            "prefect_flow_run_id": flow_run_id or "",
            "topology": cfg.workload.topology,
            "mlflow.source.name": "flows.pipeline",
        },
    )
    tr.log_params(run_id, cfg.flat())
    work.mkdir(parents=True, exist_ok=True)
    (work / "config.json").write_text(json.dumps(cfg.as_dict(), indent=1))
    (work / "environment.json").write_text(json.dumps(_environment(), indent=1, default=str))
    tr.log_artifact(run_id, work / "config.json", "profile")
    tr.log_artifact(run_id, work / "environment.json", "environment")
    return run_id


@task(name="finish-tracking", **TASK_OPTIONS)
def finish_tracking(cfg: FaultlineConfig, run_id: str, summary: dict[str, Any], work: Path) -> None:
    tr = tracker_for(cfg)
    (work / "summary.json").write_text(json.dumps(summary, indent=1, default=str))
    tr.log_artifact(run_id, work / "summary.json")
    tr.end_run(run_id, "FINISHED" if summary.get("status") == "completed" else "FAILED")


@task(name="record-run", **TASK_OPTIONS)
def record_run(cfg: FaultlineConfig, run_id: str, stages: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """Everything a finished run must hold in MLflow: stage figures, per-epoch and final metrics,
    plots, manifests, the data fingerprint, and the registered model with its signature."""
    import numpy as np
    import torch

    from tasks.core.model import FaultGNN, ScoringModel, normalised_adjacency, windows_at

    tr = tracker_for(cfg)
    for name, st in stages.items():
        tr.log_metrics(
            run_id,
            {
                f"{name}.{k}": st[k]
                for k in ("rows_in", "rows_out", "rows_quarantined", "seconds")
                if st.get(k) is not None
            },
        )
        tr.log_artifact(run_id, Path(st["output"]) / "_manifest.json", f"manifests/{name}")
    tags = {}
    if "validate" in stages:
        tags["data_fingerprint"] = stages["validate"]["raw_fingerprint"]
    elif "features" in stages:  # started from an existing lake: the lake is the data
        tags["data_fingerprint"] = f"lake:{stages['features']['lake_fingerprint']}"
    if "features" in stages:
        tags["features_fingerprint"] = stages["features"]["fingerprint"]
        tags["features_backend"] = stages["features"]["backend"]
    if "validate" in stages:
        tr.log_metrics(run_id, {"validate.quarantine_rate": stages["validate"]["quarantine_rate"]})
        if stages["validate"].get("data_docs"):
            tags["gx_data_docs"] = stages["validate"]["data_docs"]
            tr.log_artifacts(run_id, Path(stages["validate"]["data_docs"]).parent, "gx_data_docs")
    version = None
    if "train" in stages:
        for row in stages["train"]["history"]:
            tr.log_metrics(run_id, {k: v for k, v in row.items() if k != "epoch"}, step=row["epoch"])
        train_dir = Path(stages["train"]["output"])
        tr.log_artifact(run_id, train_dir / "history.json")
        for name in ("trace.json", "gpu_utilization.csv", "gpu_utilization.png", "train.log"):
            if (train_dir / name).is_file():
                tr.log_artifact(run_id, train_dir / name, "training")
        util = stages["train"].get("gpu_utilization") or {}
        if util.get("available"):
            tr.log_metrics(
                run_id, {"gpu_utilization_mean": util["mean"], "gpu_utilization_steady_mean": util["steady_mean"]}
            )
        tags["kernel_timeline"] = (stages["train"].get("kernel_timeline") or {}).get("kind") or "none"
        if "evaluate" in stages:
            ck = torch.load(train_dir / "model.pt", map_location="cpu", weights_only=False)
            model = FaultGNN(**ck["config"])
            model.load_state_dict(ck["model"])
            d = np.load(train_dir / "data.npz")
            adj = normalised_adjacency(d["indptr"], d["indices"], d["X"].shape[1])
            example = windows_at(torch.from_numpy(d["X"]), torch.as_tensor(d["test_t"][:2]), ck["window"])
            name = cfg.evaluate.model_name if cfg.evaluate.register_model else None
            version = tr.log_torch_model(run_id, ScoringModel(model, adj), example, name)
    if "evaluate" in stages:
        tr.log_metrics(run_id, {k: v for k, v in stages["evaluate"]["metrics"].items()})
        for p in stages["evaluate"]["plots"].values():
            tr.log_artifact(run_id, Path(p), "plots")
    if version:
        tags["registered_model"] = f"{cfg.evaluate.model_name}/{version}"
    tr.set_tags(run_id, tags)
    return {
        "mlflow_run_id": run_id,
        "tracking_uri": tr.uri,
        "experiment_id": tr.experiment_id,
        "registered_model": tags.get("registered_model"),
    }
