"""Heartbeats of running pipeline flows, and marking the ones that died (SIGKILL, OOM, power) as crashed.

A running flow keeps ``<store>/runs/<flow_run_id>/heartbeat.json`` fresh (pid, host, MLflow run, last beat).
A later flow run over the same store finds entries still ``running`` whose beat is stale or whose
process is gone, and marks them crashed: in the file, in Prefect (state ``Crashed``) and in MLflow
(``KILLED``). Their stage outputs are untouched; training resumes from its last epoch checkpoint.
"""

from __future__ import annotations

import json
import os
import socket
import threading
import time
from pathlib import Path
from typing import Any

from .store import pid_alive, write_json_atomic

HEARTBEAT = "heartbeat.json"
BEAT_S = 5.0
STALE_S = 30.0


class Heartbeat:
    """``with Heartbeat(run_dir, flow_run_id, mlflow_run_id) as hb: ...; hb.finish("completed")``."""

    def __init__(self, run_dir: Path, flow_run_id: str | None, mlflow_run_id: str | None, every: float = BEAT_S):
        self.path = Path(run_dir) / HEARTBEAT
        self.every = every
        self.data = {
            "flow_run_id": flow_run_id,
            "mlflow_run_id": mlflow_run_id,
            "pid": os.getpid(),
            "host": socket.gethostname(),
            "started": time.time(),
            "beat": time.time(),
            "status": "running",
        }
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name="faultline-heartbeat")

    def __enter__(self) -> Heartbeat:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        write_json_atomic(self.path, self.data)
        self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.wait(self.every):
            self.data["beat"] = time.time()
            write_json_atomic(self.path, self.data)

    def finish(self, status: str) -> None:
        self.data.update(status=status, beat=time.time(), ended=time.time())

    def __exit__(self, exc_type, *exc) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        if self.data["status"] == "running":
            self.data["status"] = "failed" if exc_type else "completed"
        write_json_atomic(self.path, self.data)


def dead_runs(runs_root: Path, stale_s: float = STALE_S, now: float | None = None) -> list[dict[str, Any]]:
    """Entries still marked running whose process is gone (same host) or whose beat is older than ``stale_s``."""
    now = time.time() if now is None else now
    host = socket.gethostname()
    out = []
    for hb in sorted(Path(runs_root).glob(f"*/{HEARTBEAT}")):
        try:
            data = json.loads(hb.read_text())
        except (OSError, ValueError):
            continue
        if data.get("status") != "running" or data.get("pid") == os.getpid():
            continue
        gone = data.get("host") == host and not pid_alive(int(data.get("pid", -1)))
        if gone or now - float(data.get("beat", 0)) > stale_s:
            out.append(
                {**data, "file": str(hb), "reason": "process gone" if gone else f"no heartbeat for {stale_s:.0f} s"}
            )
    return out


def mark_crashed(entry: dict[str, Any], prefect_state=None, mlflow_kill=None) -> dict[str, Any]:
    """Mark one dead run crashed everywhere it is recorded; the callables are the Prefect and MLflow seams."""
    result = {
        "flow_run_id": entry.get("flow_run_id"),
        "mlflow_run_id": entry.get("mlflow_run_id"),
        "reason": entry["reason"],
    }
    if prefect_state and entry.get("flow_run_id"):
        try:
            result["prefect_state"] = prefect_state(entry["flow_run_id"], entry["reason"])
        except Exception as exc:  # the run may live on another Prefect API
            result["prefect_state"] = f"not updated: {type(exc).__name__}: {exc}"[:200]
    if mlflow_kill and entry.get("mlflow_run_id"):
        try:
            mlflow_kill(entry["mlflow_run_id"])
            result["mlflow_status"] = "KILLED"
        except Exception as exc:
            result["mlflow_status"] = f"not updated: {exc}"[:200]
    data = json.loads(Path(entry["file"]).read_text())
    data.update(status="crashed", crash_reason=entry["reason"], marked_at=time.time())
    write_json_atomic(Path(entry["file"]), data)
    return result
