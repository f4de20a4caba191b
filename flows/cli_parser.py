"""The command line's parser (argparse with "did you mean"), the version it reports, its exit codes and JSON."""

from __future__ import annotations

import argparse
import contextlib
import json
import re
import sys
from pathlib import Path
from typing import Any

EXIT_OK, EXIT_FAIL, EXIT_REJECTED = 0, 1, 2
PROFILES = ("local", "gpu", "dgx")


def print_json(obj: dict[str, Any]) -> None:
    print(json.dumps(obj, default=str), flush=True)


def check_rejected(exc: Exception, args: argparse.Namespace) -> int:
    """A bad profile, key or run id: one line on stderr, exit 2 (and the verdict JSON where asked)."""
    print(f"error: {exc}", file=sys.stderr)
    if args.json:
        print_json({"verdict": "fail", "run_id": args.run, "error": str(exc), "checks": []})
    return EXIT_REJECTED


class Parser(argparse.ArgumentParser):
    """argparse, with "did you mean" for a mistyped subcommand or choice."""

    def error(self, message: str):
        import difflib

        m = re.search(r"invalid choice: '([^']*)' \(choose from (.*)\)", message)
        if m:
            choices = re.findall(r"'?([\w.-]+)'?", m.group(2))
            close = difflib.get_close_matches(m.group(1), choices, n=1)
            message += f"; did you mean {close[0]!r}?" if close else ""
        super().error(message)


def version() -> str:
    from importlib.metadata import PackageNotFoundError
    from importlib.metadata import version as installed

    from tasks.core.store import code_version

    with contextlib.suppress(PackageNotFoundError):
        return f"faultline {installed('faultline')} (code {code_version()})"
    return f"faultline (code {code_version()}, not installed as a package)"


def cmd_report(args: argparse.Namespace) -> int:
    """``faultline report``: the flow's work without a Prefect start-up; a bad profile or run id -> exit 2 at once."""
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


def run_args(p: argparse.ArgumentParser) -> None:
    """What every command about one pipeline run takes: which run, and the profile and overrides naming its store."""
    p.add_argument("--run", help="MLflow run id or Prefect flow run id (default: the latest pipeline run)")
    p.add_argument("--profile", default="local", choices=PROFILES)
    p.add_argument("--set", action="append", default=[], metavar="SECTION.KEY=VALUE")


def report_parser(sub) -> None:
    r = sub.add_parser("report", help="the submission report of a pipeline run (HTML and PDF)")
    run_args(r)
    r.add_argument("--out", help="folder for report.html and report.pdf (default: store/reports/<run id>)")
    r.add_argument("--no-pdf", action="store_true", help="the HTML only")
    r.add_argument("--json", action="store_true", help="print the result as one JSON object on the last line")
    r.set_defaults(func=cmd_report)
