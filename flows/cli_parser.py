"""The command line's parser (argparse with "did you mean"), the version it reports, its exit codes and JSON."""

from __future__ import annotations

import argparse
import contextlib
import json
import re
import sys
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
