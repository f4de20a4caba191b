"""The command line's parser: argparse with "did you mean", and the version it reports."""

from __future__ import annotations

import argparse
import contextlib
import re


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
