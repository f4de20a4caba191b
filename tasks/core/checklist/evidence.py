"""Gather what the checklist reads: a pipeline run's MLflow record and manifests, plus live probes."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any

from tasks.core.errors import ConfigError
from tasks.core.runtime import detect_hardware
from tasks.core.secrets import redact_text


class RunNotFound(ConfigError):
    """``check --run`` named no pipeline run in this store (a bad argument: exit 2, never retried)."""


def _list_all(client, run_id: str, path: str | None = None) -> list[str]:
    out = []
    for a in client.list_artifacts(run_id, path):
        out += _list_all(client, run_id, a.path) if a.is_dir else [a.path]
    return out


PIPELINE_TAG = "faultline_kind"  # the tag every pipeline run carries ("pipeline"); benchmarks carry "bench"


def _latest(client, experiment_id: str, extra: str = ""):
    runs = client.search_runs(
        [experiment_id],
        filter_string=f"tags.{PIPELINE_TAG} = 'pipeline'{extra}",
        order_by=["attributes.start_time DESC"],
        max_results=1,
    )
    return runs[0] if runs else None


def find_run(tracker, run_id: str | None):
    """The pipeline run named by ``run_id`` (its MLflow run id, or the Prefect flow run id it was started by, bare
    or as the ``prefect.flow-run.<id>`` resource of a Prefect event), or the latest pipeline run in the experiment."""
    client = tracker.client
    # a Prefect event's resource id (the triggers): a flow run's, or the run a passed checklist names
    run_id = (run_id or "").removeprefix("prefect.flow-run.").removeprefix("faultline.run.")
    if not run_id:
        run = _latest(client, tracker.experiment_id)
        if run is None:
            raise RunNotFound(
                f"no pipeline run in experiment {tracker.experiment_id} at {tracker.uri}: run the pipeline"
            )
        return run
    if run_id.startswith("spooled-"):  # a run tracked while the server was down: its calls wait in a journal
        raise RunNotFound(
            f"run {run_id} is journaled, not yet in MLflow at {redact_text(tracker.uri)}: `faultline tracking "
            "replay` sends it (it also goes at the next run's start), then check the MLflow run id the replay prints"
        )
    try:
        return client.get_run(run_id)
    except Exception:
        pass
    safe = run_id.replace("'", "")
    run = _latest(client, tracker.experiment_id, f" and tags.prefect_flow_run_id = '{safe}'")
    if run is None:
        raise RunNotFound(
            f"no pipeline run {run_id!r} at {tracker.uri}: expected an MLflow run id or the Prefect flow run id "
            "of a pipeline run (see `faultline run --json`: mlflow_run_id, run_id)"
        )
    return run


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
    from tasks.core.probes import infiniband_devices, pairwise_bandwidth, parse_topo_matrix

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


def pipeline_run_id(cfg, run_id: str | None) -> str:
    """The MLflow id of the pipeline run ``run_id`` names (either id), or of the latest one; ``RunNotFound`` at
    once otherwise. What ``faultline check`` asks before it starts a flow, so a bad id costs seconds."""
    from tasks.core.tracking import Tracker, tracking_uri

    root = Path(cfg.paths.root)
    if not cfg.mlflow.tracking_uri and not (root / "mlflow.db").is_file():  # nothing to check: create nothing
        raise RunNotFound(f"no pipeline run at {root.resolve()} (no MLflow store there yet): run the pipeline")
    tracker = Tracker(
        tracking_uri(cfg.mlflow.tracking_uri, root), cfg.mlflow.experiment, root.resolve() / "mlartifacts"
    )
    return find_run(tracker, run_id).info.run_id
