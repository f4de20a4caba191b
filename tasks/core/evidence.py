"""Gather what the checklist reads: a pipeline run's MLflow record and manifests, plus live probes."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any

from .runtime import detect_hardware


class RunNotFound(LookupError):
    pass


def _list_all(client, run_id: str, path: str | None = None) -> list[str]:
    out = []
    for a in client.list_artifacts(run_id, path):
        out += _list_all(client, run_id, a.path) if a.is_dir else [a.path]
    return out


def find_run(tracker, run_id: str | None):
    """The given MLflow run, or the latest pipeline run in the experiment."""
    client = tracker.client
    if run_id:
        try:
            return client.get_run(run_id)
        except Exception as exc:
            raise RunNotFound(f"MLflow run {run_id!r} not found at {tracker.uri}: {exc}") from None
    runs = client.search_runs(
        [tracker.experiment_id],
        filter_string="attributes.run_name LIKE 'pipeline-%'",
        order_by=["attributes.start_time DESC"],
        max_results=1,
    )
    if not runs:
        raise RunNotFound(f"no pipeline run in experiment {tracker.experiment_id} at {tracker.uri}: run the pipeline")
    return runs[0]


def run_evidence(tracker, run_id: str | None) -> dict[str, Any]:
    """The MLflow run and the manifests, config and environment it holds as artifacts."""
    import mlflow

    client = tracker.client
    run = find_run(tracker, run_id)
    rid = run.info.run_id
    artifacts = _list_all(client, rid)
    steps = {k: len(client.get_metric_history(rid, k)) for k in ("train_loss", "val_pr_auc") if k in run.data.metrics}
    try:
        models = mlflow.search_logged_models(
            experiment_ids=[run.info.experiment_id], filter_string=f"source_run_id = '{rid}'", output_format="list"
        )
    except Exception:
        models = []
    ev: dict[str, Any] = {
        "run": {
            "run_id": rid,
            "status": run.info.status,
            "params": dict(run.data.params),
            "metrics": dict(run.data.metrics),
            "metric_steps": steps,
            "tags": {k: v for k, v in run.data.tags.items() if not k.startswith("mlflow.")},
            "artifacts": artifacts,
            "logged_models": len(models),
        },
        "manifests": {},
        "config": {},
        "environment": {},
    }
    with tempfile.TemporaryDirectory() as tmp:

        def fetch(path: str) -> Any:
            if path not in artifacts:
                return None
            local = client.download_artifacts(rid, path, tmp)
            return json.loads(Path(local).read_text())

        for a in artifacts:
            if a.startswith("manifests/") and a.endswith("/_manifest.json"):
                ev["manifests"][a.split("/")[1]] = fetch(a)
        ev["config"] = fetch("profile/config.json") or {}
        ev["environment"] = fetch("environment/environment.json") or {}
    return ev


def scaling_evidence(results_dir: Path) -> dict[str, Any]:
    path = Path(results_dir) / "scaling.json"
    return {
        "scaling_path": str(path),
        "scaling": json.loads(path.read_text()) if path.is_file() else None,
    }


def live_probes(nccl: bool = True, size_mb: float = 64) -> dict[str, Any]:
    from .probes import infiniband_devices, pairwise_bandwidth, parse_topo_matrix

    hw = detect_hardware()
    probes: dict[str, Any] = {
        "hardware": hw.as_dict(),
        "topo_text": hw.nvlink_topology,
        "topo": parse_topo_matrix(hw.nvlink_topology or ""),
        "infiniband": infiniband_devices(),
        "env": {k: os.environ.get(k) for k in ("HOROVOD_MPI_ARGS", "NCCL_NVLS_ENABLE", "NCCL_IB_DISABLE")},
        "nccl": None,
    }
    if nccl and hw.gpu_count >= 2:
        try:
            probes["nccl"] = pairwise_bandwidth(hw.gpu_count, "nccl", size_mb)
        except Exception as exc:
            probes["nccl_error"] = f"{type(exc).__name__}: {exc}"
    return probes
