"""Helpers for the end-to-end tests: run the real CLI in a subprocess with its own Prefect home."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SMALL = [
    "--set",
    "workload.topology=topozoo/Abilene",
    "--set",
    "workload.days=3",
    "--set",
    "train.epochs=2",
    "--set",
    "train.hidden=8",
    "--set",
    "ingest.master=local[2]",
]


def faultline(*args: str, root: Path, timeout: int = 900, env: dict | None = None) -> subprocess.CompletedProcess:
    env = {
        **os.environ,
        "PREFECT_HOME": str(root / "prefect-home"),
        "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
        **(env or {}),
    }
    return subprocess.run(
        [sys.executable, "-m", "flows.cli", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
        cwd=REPO,
    )


def last_json(out: str) -> dict:
    return json.loads(out.strip().splitlines()[-1])
