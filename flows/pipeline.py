"""The fault prediction pipeline: validate -> ingest -> features -> train -> evaluate (sequencing only)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from prefect import flow, task
from prefect.runtime import flow_run

from tasks.common import TASK_OPTIONS, publish_markdown, store_root
from tasks.core.config import FaultlineConfig, load_config
from tasks.core.runs import Heartbeat, dead_runs, mark_crashed
from tasks.evaluate import evaluate_task
from tasks.features import features_task, lake_fingerprint
from tasks.ingest import ingest_task
from tasks.simulate import simulate_task
from tasks.tracking import finish_tracking, record_run, start_tracking
from tasks.train import train_task
from tasks.validate import validate_task

STAGES = ("validate", "ingest", "features", "train", "evaluate")
Stage = Literal["validate", "ingest", "features", "train", "evaluate"]
PUBLIC = ("status", "rows_in", "rows_out", "rows_quarantined", "output", "cached")


@task(name="recover-crashed-runs", **TASK_OPTIONS)
def recover_crashed_runs(cfg: FaultlineConfig, root: Path) -> list[dict[str, Any]]:
    """Mark earlier runs over this store that died without finishing as crashed (Prefect + MLflow)."""
    from tasks.tracking import tracker_for

    def prefect_state(flow_run_id: str, reason: str) -> str:
        from prefect.client.orchestration import get_client
        from prefect.states import Crashed

        with get_client(sync_client=True) as client:
            run = client.read_flow_run(flow_run_id)
            if run.state is not None and run.state.is_final():
                return run.state.type.value
            client.set_flow_run_state(flow_run_id, Crashed(message=f"heartbeat lost: {reason}"), force=True)
            return client.read_flow_run(flow_run_id).state.type.value

    def mlflow_kill(run_id: str) -> None:
        tracker_for(cfg).end_run(run_id, "KILLED")

    found = [mark_crashed(e, prefect_state, mlflow_kill) for e in dead_runs(root / "runs")]
    for f in found:
        print(f"marked crashed: flow run {f['flow_run_id']} ({f['reason']}); Prefect state {f.get('prefect_state')}")
    return found


def _links_artifact(summary: dict[str, Any]) -> None:
    uri = str(summary.get("tracking_uri") or "")
    run = summary.get("mlflow_run_id")
    if uri.startswith("http"):
        mlflow = f"[MLflow run {run}]({uri.rstrip('/')}/#/experiments/{summary.get('experiment_id')}/runs/{run})"
    else:
        mlflow = f"MLflow run `{run}` in `{uri}` (browse: `mlflow ui --backend-store-uri {uri}`)"
    lines = ["## Faultline run", "", f"- status: **{summary['status']}**", f"- {mlflow}"]
    if summary.get("data_docs"):
        lines.append(f"- [GX Data Docs](file://{summary['data_docs']}) (`{summary['data_docs']}`)")
    if summary.get("registered_model"):
        lines.append(f"- registered model `{summary['registered_model']}`")
    publish_markdown("run-links", "\n".join(lines) + "\n", "MLflow and GX links")


def _overrides(topology: str | None, days: int | None, extra: list[str]) -> list[str]:
    out = list(extra)
    if topology:
        out.append(f"workload.topology={topology}")
    if days:
        out.append(f"workload.days={days}")
    return out


@flow(name="fault_prediction_pipeline", log_prints=True)
def fault_prediction_pipeline(
    profile: str = "local",
    topology: str | None = None,
    days: int | None = None,
    overrides: list[str] | None = None,
    raw: str | None = None,
    lake: str | None = None,
    start_from: Stage = "validate",
    until: Stage = "evaluate",
    force: bool = False,
    refresh: list[Stage] | None = None,
) -> dict[str, Any]:
    """Telecom fault prediction: validate -> ingest -> features -> train -> evaluate, tracked in MLflow.

    Args:
        profile: deployments/profiles/<profile>.yaml: local, gpu or dgx.
        topology: topohub key of the simulated network, e.g. topozoo/Abilene (default: the profile's).
        days: days of simulated telemetry (default: the profile's).
        overrides: config overrides, each section.key=value (e.g. train.epochs=3).
        raw: a directory of raw NMS exports; default: simulate the profile's workload.
        lake: an existing ingest output, used with start_from=features.
        start_from: the first stage to run (features and later need lake).
        until: the last stage to run.
        force: recompute every stage even when its output exists.
        refresh: recompute just these stages.
    """
    cfg = load_config(profile, _overrides(topology, days, overrides or []))
    root = store_root(cfg.paths.root)
    first, last = STAGES.index(start_from), STAGES.index(until)
    if first > last:
        raise ValueError(f"start_from={start_from} comes after until={until}")
    run_dir = root / "runs" / (str(flow_run.get_id() or "local"))
    recovered = recover_crashed_runs(cfg, root)
    run_id = start_tracking(cfg, flow_run.get_id(), run_dir)
    redo = {s: force or s in (refresh or []) for s in STAGES}
    stages: dict[str, dict[str, Any]] = {}
    summary: dict[str, Any] = {
        "run_id": flow_run.get_id(),
        "status": "failed",
        "stages": {},
        "metrics": {},
        "mlflow_run_id": run_id,
        "profile": cfg.profile,
        "recovered_crashed_runs": recovered,
    }
    beat = Heartbeat(run_dir, flow_run.get_id(), run_id).__enter__()
    try:
        if first <= STAGES.index("ingest"):
            raw = raw or simulate_task(cfg.workload, root)
            stages["validate"] = validate_task(raw, cfg.validate_, cfg.ingest, root, redo["validate"])
            if last >= STAGES.index("ingest"):
                stages["ingest"] = ingest_task(raw, stages["validate"], cfg.ingest, root, redo["ingest"])
                lake, lake_fp = stages["ingest"]["output"], stages["ingest"]["fingerprint"]
        elif lake is None:
            raise ValueError("start_from=features (or later) needs lake=<an ingest output directory>")
        else:
            lake_fp = lake_fingerprint(Path(lake))
        if last >= STAGES.index("features"):
            stages["features"] = features_task(str(lake), lake_fp, cfg.features, root, redo["features"])
        if last >= STAGES.index("train"):
            stages["train"] = train_task(stages["features"], cfg.train, cfg.evaluate.test_fraction, root, redo["train"])
        if last >= STAGES.index("evaluate"):
            stages["evaluate"] = evaluate_task(
                stages["features"], stages["train"], cfg.evaluate, cfg.train.seed, root, redo["evaluate"]
            )
            summary["metrics"] = stages["evaluate"]["metrics"]
        summary.update(record_run(cfg, run_id, stages))
        summary["status"] = "completed"
        _links_artifact(summary)
    finally:
        beat.finish(summary["status"])
        beat.__exit__(None)
        summary["stages"] = {k: {f: v.get(f) for f in PUBLIC} for k, v in stages.items()}
        if stages.get("validate", {}).get("data_docs"):
            summary["data_docs"] = stages["validate"]["data_docs"]
        finish_tracking(cfg, run_id, summary, run_dir)
    return summary
