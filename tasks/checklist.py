"""The checklist's tasks: gather a run's evidence (MLflow, manifests, live probes), publish the report."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from prefect import task

from tasks.core.checklist.doctor import gather
from tasks.core.checklist.evidence import live_probes, run_evidence, scaling_evidence
from tasks.core.checklist.report import to_markdown, to_table, write_reports
from tasks.core.config import FaultlineConfig
from tasks.runner import TASK_OPTIONS, publish_markdown, publish_table, store_root
from tasks.tracking import tracker_for


@task(name="gather-evidence", **TASK_OPTIONS)
def gather_evidence(cfg: FaultlineConfig, run_id: str | None, probe_nccl: bool) -> dict[str, Any]:
    ev = run_evidence(tracker_for(cfg), run_id)
    ev.update(scaling_evidence(Path(cfg.paths.bench_results)))
    ev["probes"] = live_probes(nccl=probe_nccl)
    return ev


@task(name="gather-environment", **TASK_OPTIONS)
def gather_environment() -> dict[str, Any]:
    return gather()


@task(name="publish-checklist", **TASK_OPTIONS)
def publish_checklist(cfg: FaultlineConfig, report: dict[str, Any]) -> dict[str, str]:
    out = store_root(cfg.paths.root) / "checklists" / str(report["run_id"])
    j, m = write_reports(report, out)
    tr = tracker_for(cfg)
    tr.log_artifact(report["run_id"], j, "checklist")
    tr.log_artifact(report["run_id"], m, "checklist")
    tr.set_tags(report["run_id"], {"checklist_verdict": report["verdict"]})
    publish_markdown("presubmit-checklist", to_markdown(report), "verdict")
    publish_table("presubmit-checklist-table", to_table(report), "pre-submission checks")
    return {"json": str(j), "markdown": str(m)}
