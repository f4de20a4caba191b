"""The submission report flow (a ``report`` deployment, triggered when a run's checklist passes) and the
``faultline report`` command."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any, Literal

from prefect import flow

from flows.cli_parser import PROFILES


@flow(name="submission_report", log_prints=True)
def submission_report(
    run_id: str | None = None,
    profile: Literal["local", "gpu", "dgx"] = "local",
    overrides: list[str] | None = None,
    pdf: bool = True,
) -> dict[str, Any]:
    """The submission document of a pipeline run: one self-contained HTML file and its PDF, under
    ``store/reports/<run id>``, attached to the MLflow run.

    Args:
        run_id: the pipeline run: its MLflow run id or its Prefect flow run id; default: the latest pipeline run.
        profile: the profile the run used (where its MLflow store is).
        overrides: config overrides, each section.key=value.
        pdf: print the PDF too (headless Chromium).
    """
    from tasks.report import write_report

    result = write_report(profile, overrides or [], run_id, None, pdf)
    print(f"report: {result['html']}" + (f"  {result['pdf']} ({result['pages']} pages)" if result["pdf"] else ""))
    return result


def cmd_report(args: argparse.Namespace) -> int:
    """``faultline report``: the flow's work without a Prefect start-up; a bad profile or run id -> exit 2 at once."""
    from flows.cli_parser import EXIT_OK, check_rejected, print_json
    from tasks.core.checklist.evidence import pipeline_run_id
    from tasks.core.config import load_config
    from tasks.core.errors import ConfigError

    try:
        run_id = pipeline_run_id(load_config(args.profile, args.set), args.run)
    except ConfigError as exc:
        return check_rejected(exc, args)
    from tasks.report import write_report

    r = write_report(args.profile, args.set, run_id, Path(args.out) if args.out else None, not args.no_pdf)
    print(f"report: {r['html']}" + (f"  {r['pdf']} ({r['pages']} pages)" if r["pdf"] else ""))
    if args.json:
        print_json(r)
    return EXIT_OK


def report_parser(sub) -> None:
    r = sub.add_parser("report", help="the submission report of a pipeline run (HTML and PDF)")
    r.add_argument("--run", help="MLflow run id or Prefect flow run id (default: the latest pipeline run)")
    r.add_argument("--out", help="folder for report.html and report.pdf (default: store/reports/<run id>)")
    r.add_argument("--profile", default="local", choices=PROFILES)
    r.add_argument("--set", action="append", default=[], metavar="SECTION.KEY=VALUE")
    r.add_argument("--no-pdf", action="store_true", help="the HTML only")
    r.add_argument("--json", action="store_true", help="print the result as one JSON object on the last line")
    r.set_defaults(func=cmd_report)
