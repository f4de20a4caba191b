"""A sensor for new days' exports: started on a schedule, it starts a pipeline run over the raw directory when export
files the store has not seen have landed and settled (an exporter still writing is waited for)."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

from prefect import flow

from tasks.core.config import load_config
from tasks.runner import logger, store_root

PIPELINE = "fault_prediction_pipeline/manual"
ACTIVE = ("SCHEDULED", "PENDING", "RUNNING")


def unseen_files(root: Path, raw: Path) -> list[str]:
    """The export files under ``raw`` (paths under it) that no validation in the store has read: a file whose size
    and modification time a validation recorded is seen; another is hashed and compared by content."""
    import json

    from tasks.core.stages.raw import discover
    from tasks.core.store import file_digest

    layout = discover(raw)
    stamps: dict[str, list[int]] = {}
    digests: dict[str, str] = {}
    for m in (root / "validate").glob("*/_manifest.json"):
        body = json.loads(m.read_text())
        if body.get("raw_dir") == str(raw.resolve()):
            stamps.update(body.get("raw_files") or {})
            digests.update(body.get("raw_digests") or {})
    now = layout.stamps()
    return sorted(f for f, st in now.items() if stamps.get(f) != st and digests.get(f) != file_digest(Path(raw) / f))


def active_runs(deployment: str, raw: str) -> list[str]:
    """Runs of ``deployment`` over ``raw`` that are scheduled, pending or running (one at a time is started)."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterState, FlowRunFilterStateType

    with get_client(sync_client=True) as client:
        dep = client.read_deployment_by_name(deployment)
        state = FlowRunFilterState(type=FlowRunFilterStateType(any_=list(ACTIVE)))
        runs = client.read_flow_runs(flow_run_filter=FlowRunFilter(state=state), limit=200)
    return [str(r.id) for r in runs if r.deployment_id == dep.id and (r.parameters or {}).get("raw") == raw]


def start_run(deployment: str, parameters: dict[str, Any]) -> str:
    from prefect.deployments import run_deployment

    return str(run_deployment(name=deployment, parameters=parameters, timeout=0).id)


@flow(name="new_days_sensor", log_prints=True)
def new_days_sensor(
    raw: str | None = None, profile: str = "local", settle_s: float = 120.0, deployment: str = PIPELINE
) -> dict[str, Any]:
    """Start a pipeline run over ``raw`` when export files the store has not processed have landed.

    Args:
        raw: the directory the exporter writes to; default: the FAULTLINE_RAW environment variable.
        profile: the profile whose store says what was processed, and the run's profile.
        settle_s: a new file must be this many seconds old (not still being written).
        deployment: the pipeline deployment to start (its run processes only the new days).
    """
    log = logger()
    raw = raw or os.environ.get("FAULTLINE_RAW")
    if not raw:
        log.info("no raw directory: set the raw parameter or FAULTLINE_RAW")
        return {"started": None, "why": "no raw directory configured"}
    root = store_root(load_config(profile, []).paths.root)
    new = unseen_files(root, Path(raw))
    if not new:
        return {"started": None, "why": "nothing new", "raw": raw}
    young = [f for f in new if time.time() - (Path(raw) / f).stat().st_mtime < settle_s]
    if young:
        log.info("%d new files, %d still settling (younger than %g s): waiting", len(new), len(young), settle_s)
        return {"started": None, "why": f"settling: {young[:3]}", "raw": raw, "new_files": new}
    if running := active_runs(deployment, raw):
        return {"started": None, "why": f"a run over {raw} is under way: {running[0]}", "raw": raw, "new_files": new}
    run_id = start_run(deployment, {"raw": raw, "profile": profile})
    log.info("%d new export files in %s: started flow run %s of %s", len(new), raw, run_id, deployment)
    return {"started": run_id, "raw": raw, "new_files": new}
