"""``python -m deployments.setup install|bundle``: what ``make setup`` and ``make bundle`` run.

install [--venv .venv] [--bundle DIR] [--python PY]   set up this machine (from a bundle: no network)
bundle --out DIR [--target host|cpu-py311|cu13-py312] [--no-jar]   everything setup needs, for a target
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
from pathlib import Path

from . import host
from .install import fingerprint, install, parts_from_bundle, up_to_date
from .wheelhouse import collect, say, verify_bundle, write_bundle


def cmd_install(args: argparse.Namespace) -> int:
    python = args.python or sys.executable
    source = "online"
    if args.bundle:
        manifest = verify_bundle(Path(args.bundle))
        target = host.Target(**manifest["target"])
        _, torch = host.detect(python)
        source = "bundle:" + hashlib.sha256(json.dumps(manifest, sort_keys=True).encode()).hexdigest()[:16]
        if host.python_version(python) != target.python:
            raise SystemExit(f"the bundle is for Python {target.python}; {python} is {host.python_version(python)}")
    else:
        target, torch = host.detect(python)
    venv = Path(args.venv).absolute()
    fp = fingerprint(target, source)
    if up_to_date(venv, fp):
        say(f"{venv} is up to date ({target.name}); nothing to do")
        return 0
    parts = parts_from_bundle(Path(args.bundle)) if args.bundle else collect(target, with_jar=target.gpu)
    install(python, venv, target, torch, parts, fp)
    return 0


def cmd_bundle(args: argparse.Namespace) -> int:
    target, _ = host.target(args.target, args.python or sys.executable)
    parts = collect(target, with_jar=not args.no_jar)
    manifest = write_bundle(parts, Path(args.out), {"made_on": host.machine(), "requirements": "requirements.lock"})
    say(f"bundle for {target.name} in {args.out} ({manifest})")
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m deployments.setup")
    sub = p.add_subparsers(dest="cmd", required=True)
    i = sub.add_parser("install")
    i.add_argument("--venv", default=".venv")
    i.add_argument("--bundle")
    i.add_argument("--python", help="the interpreter the venv is made from (default: this one)")
    i.set_defaults(func=cmd_install)
    b = sub.add_parser("bundle")
    b.add_argument("--out", required=True)
    b.add_argument("--target", default="host", help=f"host or one of {', '.join(host.TARGETS)}")
    b.add_argument("--python", help="for --target host: the interpreter whose host it is")
    b.add_argument("--no-jar", action="store_true", help="leave the RAPIDS Accelerator jar out (575 MB)")
    b.set_defaults(func=cmd_bundle)
    args = p.parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
