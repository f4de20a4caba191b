"""The fault prediction pipeline: validate -> ingest -> features -> train -> evaluate (sequencing only)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Literal

from prefect import flow
from prefect.runtime import flow_run
from pydantic import Field

from tasks.common import store_root
from tasks.core.config import load_config
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


def _overrides(topology: str | None, days: int | None, extra: list[str]) -> list[str]:
    out = list(extra)
    if topology:
        out.append(f"workload.topology={topology}")
    if days:
        out.append(f"workload.days={days}")
    return out


@flow(name="fault_prediction_pipeline", log_prints=True)
def fault_prediction_pipeline(
    profile: Annotated[str, Field(description="deployments/profiles/<profile>.yaml: local, gpu or dgx")] = "local",
    topology: Annotated[
        str | None, Field(description="topohub key of the simulated network, e.g. topozoo/Abilene")
    ] = None,
    days: Annotated[int | None, Field(description="days of simulated telemetry (default: the profile's)")] = None,
    overrides: Annotated[list[str] | None, Field(description="config overrides, section.key=value")] = None,
    raw: Annotated[
        str | None, Field(description="directory of raw NMS exports; default: simulate the workload")
    ] = None,
    lake: Annotated[str | None, Field(description="an existing ingest output, with start_from=features")] = None,
    start_from: Annotated[Stage, Field(description="first stage to run (features needs lake)")] = "validate",
    until: Annotated[Stage, Field(description="last stage to run")] = "evaluate",
    force: Annotated[bool, Field(description="recompute every stage even when its output exists")] = False,
) -> dict[str, Any]:
    cfg = load_config(profile, _overrides(topology, days, overrides or []))
    root = store_root(cfg.paths.root)
    first, last = STAGES.index(start_from), STAGES.index(until)
    if first > last:
        raise ValueError(f"start_from={start_from} comes after until={until}")
    run_dir = root / "runs" / (str(flow_run.get_id() or "local"))
    run_id = start_tracking(cfg, flow_run.get_id(), run_dir)
    stages: dict[str, dict[str, Any]] = {}
    summary: dict[str, Any] = {
        "run_id": flow_run.get_id(),
        "status": "failed",
        "stages": {},
        "metrics": {},
        "mlflow_run_id": run_id,
        "profile": cfg.profile,
    }
    try:
        if first <= STAGES.index("ingest"):
            raw = raw or simulate_task(cfg.workload, root)
            stages["validate"] = validate_task(raw, cfg.validate_, cfg.ingest, root, force)
            if last >= STAGES.index("ingest"):
                stages["ingest"] = ingest_task(raw, stages["validate"], cfg.ingest, root, force)
                lake, lake_fp = stages["ingest"]["output"], stages["ingest"]["fingerprint"]
        elif lake is None:
            raise ValueError("start_from=features (or later) needs lake=<an ingest output directory>")
        else:
            lake_fp = lake_fingerprint(Path(lake))
        if last >= STAGES.index("features"):
            stages["features"] = features_task(str(lake), lake_fp, cfg.features, root, force)
        if last >= STAGES.index("train"):
            stages["train"] = train_task(stages["features"], cfg.train, cfg.evaluate.test_fraction, root, force)
        if last >= STAGES.index("evaluate"):
            stages["evaluate"] = evaluate_task(
                stages["features"], stages["train"], cfg.evaluate, cfg.train.seed, root, force
            )
            summary["metrics"] = stages["evaluate"]["metrics"]
        summary.update(record_run(cfg, run_id, stages))
        summary["status"] = "completed"
    finally:
        summary["stages"] = {k: {f: v.get(f) for f in PUBLIC} for k, v in stages.items()}
        if stages.get("validate", {}).get("data_docs"):
            summary["data_docs"] = stages["validate"]["data_docs"]
        finish_tracking(cfg, run_id, summary, run_dir)
    return summary
