"""The pre-submission checklist flow: is this pipeline run fit to hand in? (evidence -> verdict)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from prefect import flow, task

from tasks.common import TASK_OPTIONS, publish_markdown, publish_table
from tasks.core.checklist import evaluate, to_markdown, to_table, write_reports
from tasks.core.config import FaultlineConfig, load_config


@task(name="gather-evidence", **TASK_OPTIONS)
def gather_evidence(cfg: FaultlineConfig, run_id: str | None, probe_nccl: bool) -> dict[str, Any]:
    from tasks.core.evidence import live_probes, run_evidence, scaling_evidence
    from tasks.tracking import tracker_for

    ev = run_evidence(tracker_for(cfg), run_id)
    ev.update(scaling_evidence(Path(cfg.paths.bench_results)))
    ev["probes"] = live_probes(nccl=probe_nccl)
    return ev


@task(name="publish-checklist", **TASK_OPTIONS)
def publish_checklist(cfg: FaultlineConfig, report: dict[str, Any]) -> dict[str, str]:
    from tasks.common import store_root
    from tasks.tracking import tracker_for

    out = store_root(cfg.paths.root) / "checklists" / str(report["run_id"])
    j, m = write_reports(report, out)
    tr = tracker_for(cfg)
    tr.log_artifact(report["run_id"], j, "checklist")
    tr.log_artifact(report["run_id"], m, "checklist")
    tr.set_tags(report["run_id"], {"checklist_verdict": report["verdict"]})
    publish_markdown("presubmit-checklist", to_markdown(report), "verdict")
    publish_table("presubmit-checklist-table", to_table(report), "pre-submission checks")
    return {"json": str(j), "markdown": str(m)}


@flow(name="presubmit_checklist", log_prints=True)
def presubmit_checklist(
    run_id: str | None = None,
    profile: str = "local",
    overrides: list[str] | None = None,
    probe_nccl: bool = True,
) -> dict[str, Any]:
    """Is a pipeline run fit to hand in? Every check with its evidence and, on failure, the fix.

    Args:
        run_id: the MLflow run id of a pipeline run; default: the latest pipeline run.
        profile: the profile the run used (where its MLflow store is).
        overrides: config overrides, each section.key=value.
        probe_nccl: run the pairwise NCCL bandwidth probe when there are at least 2 GPUs.
    """
    cfg = load_config(profile, overrides or [])
    ev = gather_evidence(cfg, run_id, probe_nccl)
    report = evaluate(ev)
    report["files"] = publish_checklist(cfg, report)
    for r in report["checks"]:
        print(f"{r['status'].upper():<5} {r['id']}: {r['evidence']}")
    print(f"verdict: {report['verdict']}")
    return report
