"""Helpers for the end-to-end tests: run the real CLI in a subprocess, its flow runs in one shared Prefect API."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
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


class SharedPrefect:
    """One Prefect API server for the suite's CLI calls, started on first use (a CLI call without
    ``PREFECT_API_URL`` starts a temporary server of its own: about 10 s each on two cores)."""

    def __init__(self) -> None:
        self.url: str | None = None
        self.proc: subprocess.Popen | None = None
        self.home: Path | None = None

    def start(self) -> str:
        if self.url and self.proc and self.proc.poll() is None:
            return self.url
        from tasks.core.ports import free_port

        home = self.home = Path(tempfile.mkdtemp(prefix="faultline-test-prefect-"))
        port = free_port()
        env = {
            **os.environ,
            "PREFECT_HOME": str(home),
            "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
            "PREFECT_UI_ENABLED": "false",
            "PREFECT_SERVER_API_HOST": "127.0.0.1",
        }
        env.pop("PREFECT_API_URL", None)
        with open(home / "server.log", "w") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "prefect", "server", "start", "--host", "127.0.0.1", "--port", str(port)],
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        url = f"http://127.0.0.1:{port}/api"
        deadline = time.time() + 180
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"the shared Prefect server exited: {(home / 'server.log').read_text()[-2000:]}")
            try:
                with urllib.request.urlopen(f"{url}/health", timeout=2) as r:
                    if r.status == 200:
                        self.url = url
                        return url
            except OSError:
                time.sleep(0.5)
        raise TimeoutError(f"the shared Prefect server at {url} is not healthy after 180 s")

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc, self.url = None, None


SHARED_PREFECT = SharedPrefect()


def prefect_api(path: str, body: dict | None = None):
    """A call to the suite's shared Prefect API (POST with ``body``, else GET); the JSON it answers."""
    import json

    req = urllib.request.Request(
        f"{SHARED_PREFECT.start()}{path}",
        data=json.dumps(body).encode() if body is not None else None,
        headers={"Content-Type": "application/json"},
        method="POST" if body is not None else "GET",
    )
    with urllib.request.urlopen(req, timeout=30) as r:
        return json.loads(r.read())


def wait_for(check, timeout: float, what: str):
    """``check()``'s first truthy answer within ``timeout`` seconds, else a failure naming ``what``."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        if got := check():
            return got
        time.sleep(0.5)
    raise AssertionError(f"no {what} within {timeout:.0f} s")


def faultline(*args: str, root: Path, timeout: int = 900, env: dict | None = None) -> subprocess.CompletedProcess:
    """The CLI in a subprocess, its flow runs recorded in the suite's shared Prefect API (unless ``env`` names
    an API or a home of its own)."""
    if os.environ.get("FAULTLINE_TEST_LANE") == "fast":
        import pytest

        node = os.environ.get("FAULTLINE_TEST_NODE")
        pytest.fail(f"{node} runs the CLI in the fast lane: mark it @pytest.mark.engine")
    env = env or {}
    own = "PREFECT_API_URL" in env or "PREFECT_HOME" in env
    env = {
        **os.environ,
        "PREFECT_HOME": str(root / "prefect-home"),
        "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
        **({} if own else {"PREFECT_API_URL": SHARED_PREFECT.start()}),
        **env,
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
