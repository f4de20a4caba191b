"""Writing a run's submission report where the store keeps it, and showing it in MLflow and Prefect."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tasks.core.config import load_config
from tasks.core.store import file_url
from tasks.runner import publish_markdown, store_root
from tasks.tracking import tracker_for


def write_report(profile: str, overrides: list[str], run_id: str | None, out: Path | None, pdf: bool) -> dict[str, Any]:
    """report.html (and report.pdf) of the run in ``out`` (default ``store/reports/<run id>``), logged to the MLflow
    run under ``report/`` and linked from a Prefect artifact."""
    from tasks.core.checklist.evidence import find_run
    from tasks.core.report import build_report

    cfg = load_config(profile, overrides)
    tr = tracker_for(cfg)
    rid = find_run(tr, run_id).info.run_id
    out = out or store_root(cfg.paths.root) / "reports" / rid
    result = build_report(tr, rid, Path(cfg.paths.bench_results), out, pdf)
    for key in ("html", "pdf"):
        if result[key]:
            tr.log_artifact(rid, Path(result[key]), "report")
    from prefect.context import FlowRunContext

    if FlowRunContext.get() is None:  # the CLI: no Prefect run to show it in (and no server to start for one)
        return result
    links = [f"- [{k}]({file_url(result[k]) or result[k]})" for k in ("html", "pdf") if result[k]]
    publish_markdown("submission-report", f"# Submission report of run `{rid}`\n\n" + "\n".join(links), "report")
    return result
