"""A pipeline run's own bookkeeping: finding earlier runs that died, and the links a finished run shows."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from prefect import task

from tasks.core.config import FaultlineConfig
from tasks.core.runs import HEARTBEAT, dead_runs, mark_crashed
from tasks.core.store import file_url
from tasks.runner import TASK_OPTIONS, logger, publish_markdown
from tasks.tracking import tracker_for


def _prefect_crash(flow_run_id: str, reason: str) -> str:
    from prefect.client.orchestration import get_client
    from prefect.states import Crashed

    with get_client(sync_client=True) as client:
        run = client.read_flow_run(flow_run_id)
        if run.state is not None and run.state.is_final():
            return run.state.type.value
        client.set_flow_run_state(flow_run_id, Crashed(message=f"heartbeat lost: {reason}"), force=True)
        return client.read_flow_run(flow_run_id).state.type.value


def _prefect_running(flow_run_id: str) -> str:
    from prefect.client.orchestration import get_client
    from prefect.states import Running

    with get_client(sync_client=True) as client:
        client.set_flow_run_state(
            flow_run_id, Running(message="heartbeat back: marked crashed while alive"), force=True
        )
        return client.read_flow_run(flow_run_id).state.type.value


def revive_run(cfg: FaultlineConfig) -> Callable[[dict[str, Any]], None]:
    """What a live run does when it finds itself marked crashed: Prefect ``Running``, MLflow ``RUNNING`` again."""

    def revive(data: dict[str, Any]) -> None:
        if data.get("flow_run_id"):
            _prefect_running(data["flow_run_id"])
        if data.get("mlflow_run_id"):
            tracker_for(cfg).reopen_run(data["mlflow_run_id"])

    return revive


@task(name="mark-crashed-run", **TASK_OPTIONS)
def mark_crashed_run(cfg: FaultlineConfig, root: Path, flow_run_id: str, reason: str) -> dict[str, Any]:
    """A pipeline run that Prefect set ``Crashed`` (its worker saw the process die, or the zombie-run automation
    heard no heartbeat): its MLflow run ``KILLED`` and its heartbeat file ``crashed``. A run that is alive after
    all sees the mark at its next beat and revives itself (Prefect ``Running``, MLflow ``RUNNING``)."""
    flow_run_id = flow_run_id.removeprefix("prefect.flow-run.")
    hb = root / "runs" / flow_run_id / HEARTBEAT
    if not hb.is_file():
        logger().warning("flow run %s left no heartbeat in %s: nothing to mark", flow_run_id, root / "runs")
        return {"flow_run_id": flow_run_id, "skipped": f"no {hb}"}
    entry = {**json.loads(hb.read_text()), "file": str(hb), "reason": reason}
    done = mark_crashed(entry, None, lambda run_id: tracker_for(cfg).end_run(run_id, "KILLED"))
    logger().warning("crashed flow run %s: %s", flow_run_id, done)
    return done


@task(name="recover-crashed-runs", **TASK_OPTIONS)
def recover_crashed_runs(cfg: FaultlineConfig, root: Path) -> list[dict[str, Any]]:
    """Mark earlier runs over this store that died without finishing as crashed (Prefect + MLflow)."""
    found = [
        mark_crashed(e, _prefect_crash, lambda run_id: tracker_for(cfg).end_run(run_id, "KILLED"))
        for e in dead_runs(root / "runs", cfg.runs.crash_after_s)
    ]
    for f in found:
        logger().warning(
            "marked crashed: flow run %s (%s); Prefect state %s", f["flow_run_id"], f["reason"], f.get("prefect_state")
        )
    return found


def mlflow_run_url(summary: dict[str, Any]) -> str | None:
    uri, run = str(summary.get("tracking_uri") or ""), summary.get("mlflow_run_id")
    if not (uri.startswith("http") and run) or str(summary.get("tracking", "")).startswith("journaled"):
        return None
    return f"{uri.rstrip('/')}/#/experiments/{summary.get('experiment_id')}/runs/{run}"


def _prefect_run_url() -> str | None:
    try:
        from prefect.runtime import flow_run

        return flow_run.ui_url
    except Exception:  # outside a flow run, or no API
        return None


def publish_links(summary: dict[str, Any]) -> str:
    """The run's links: the MLflow run, the Prefect flow run, the GX Data Docs, the registered model; http links
    where a server serves them (`make ui`), otherwise the path and how to browse it."""
    uri = str(summary.get("tracking_uri") or "")
    run = summary.get("mlflow_run_id")
    if str(summary.get("tracking", "")).startswith("journaled"):
        mlflow = f"MLflow: {summary['tracking']}; it is replayed when `{uri}` answers again"
    elif url := mlflow_run_url(summary):
        mlflow = f"[MLflow run {run}]({url})"
    else:
        mlflow = f"MLflow run `{run}` in `{uri}` (browse: `mlflow ui --backend-store-uri {uri}`)"
    lines = ["## Faultline run", "", f"- status: **{summary['status']}**", f"- {mlflow}"]
    if prefect := _prefect_run_url():
        lines.append(f"- [Prefect flow run]({prefect})")
    if summary.get("data_docs"):
        docs = file_url(summary["data_docs"])
        lines.append(f"- [GX Data Docs]({docs})" if docs else f"- GX Data Docs: `{summary['data_docs']}`")
    if summary.get("registered_model"):
        served = summary.get("served") or {}
        what = f"the stack, tree weight {served['tree_weight']:g}" if served.get("kind") == "stack" else "the GNN"
        lines.append(f"- registered model `{summary['registered_model']}` (serves {what})")
    text = "\n".join(lines) + "\n"
    publish_markdown("run-links", text, "MLflow and GX links")
    return text
