"""Heartbeats of running pipeline flows, and marking the ones that died (SIGKILL, OOM, power) as crashed.

A running flow keeps ``<store>/runs/<flow_run_id>/heartbeat.json`` fresh (pid and its start time, host,
MLflow run, last beat). A later flow run over the same store marks an entry still ``running`` crashed only
when it is sure: on the same host, when its process is gone (or the pid now belongs to another process); on
another host, when no beat came for ``runs.crash_after_s`` (generous: a paused or swapping process is not
dead). It marks it in the file, in Prefect (state ``Crashed``) and in MLflow (``KILLED``). A run that was
marked but is alive after all sees the mark at its next beat and un-marks itself everywhere (Prefect
``Running``, MLflow ``RUNNING``), so the two never disagree. Stage outputs are untouched; training resumes
from its last epoch checkpoint.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from .store import pid_alive, write_json_atomic

log = logging.getLogger("faultline.runs")

HEARTBEAT = "heartbeat.json"
BEAT_S = 5.0
FLOW_HEARTBEAT_S = 30  # Prefect's flow-run heartbeat (its minimum) for runs on a Prefect server: worker's and CLI's
CRASH_AFTER_S = 900.0  # another host's run: silence this long means crashed (config: runs.crash_after_s)


def process_started(pid: int) -> float | None:
    """The start time of process ``pid`` (None when there is none): tells a live run from a reused pid."""
    import psutil

    try:
        return round(psutil.Process(pid).create_time(), 2)
    except (psutil.NoSuchProcess, psutil.AccessDenied, ValueError):
        return None


class Heartbeat:
    """``with Heartbeat(run_dir, flow_run_id, mlflow_run_id) as hb: ...; hb.finish("completed")``."""

    def __init__(
        self,
        run_dir: Path,
        flow_run_id: str | None,
        mlflow_run_id: str | None,
        every: float = BEAT_S,
        on_revived: Callable[[dict[str, Any]], None] | None = None,
    ):
        self.path = Path(run_dir) / HEARTBEAT
        self.every = every
        self.on_revived = on_revived
        self.data = {
            "flow_run_id": flow_run_id,
            "mlflow_run_id": mlflow_run_id,
            "pid": os.getpid(),
            "pid_started": process_started(os.getpid()),
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
            with locked(self.path):  # a marker's read-mark-write never interleaves with a beat
                self.revive_if_marked()
                self.data["beat"] = time.time()
                write_json_atomic(self.path, self.data)

    def revive_if_marked(self) -> None:
        """Another run marked this live one crashed (it looked silent): put Prefect and MLflow back to running."""
        try:
            on_disk = json.loads(self.path.read_text())
        except (OSError, ValueError):
            return
        if on_disk.get("status") != "crashed" or self.data["status"] != "running":
            return
        log.warning(
            "this run was marked crashed (%s) while alive; marking it running again", on_disk.get("crash_reason")
        )
        self.data.setdefault("revived", []).append({"at": time.time(), "was": on_disk.get("crash_reason")})
        if self.on_revived:
            try:
                self.on_revived(self.data)
            except Exception as exc:  # the beat goes on; the file says what could not be undone
                self.data["revive_error"] = f"{type(exc).__name__}: {exc}"[:300]

    def finish(self, status: str) -> None:
        self.data.update(status=status, beat=time.time(), ended=time.time())

    def __exit__(self, exc_type, *exc) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        with locked(self.path):
            self.revive_if_marked()
            if self.data["status"] == "running":
                self.data["status"] = "failed" if exc_type else "completed"
            write_json_atomic(self.path, self.data)


def _why_dead(data: dict[str, Any], host: str, now: float, crash_after_s: float) -> str | None:
    """Why this running entry is dead, or None while it may be alive (a stopped or paused process is alive)."""
    if data.get("host") == host:
        pid = int(data.get("pid", -1))
        if not pid_alive(pid):
            return "process gone"
        started = data.get("pid_started")
        if started is not None and (now_started := process_started(pid)) is not None and now_started != started:
            return "process gone (its pid now belongs to another process)"
        return None
    silent = now - float(data.get("beat", 0))
    return f"no heartbeat from host {data.get('host')} for {silent:.0f} s" if silent > crash_after_s else None


def dead_runs(runs_root: Path, crash_after_s: float = CRASH_AFTER_S, now: float | None = None) -> list[dict[str, Any]]:
    """Entries still marked running that are surely dead: their process is gone (same host), or their host
    has been silent for ``crash_after_s``. A late beat on the same host never counts: only the process does."""
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
        if reason := _why_dead(data, host, now, crash_after_s):
            out.append({**data, "file": str(hb), "reason": reason})
    return out


@contextmanager
def locked(path: Path) -> Iterator[None]:
    """An exclusive lock on a heartbeat file (``<file>.lock``) across processes and threads."""
    import fcntl

    with open(f"{path}.lock", "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def mark_crashed(entry: dict[str, Any], prefect_state=None, mlflow_kill=None) -> dict[str, Any]:
    """Mark one dead run crashed everywhere it is recorded; the callables are the Prefect and MLflow seams.
    Under the heartbeat's lock: the run cannot beat in between, and sees the mark at its next beat if alive."""
    with locked(Path(entry["file"])):
        if json.loads(Path(entry["file"]).read_text()).get("status") != "running":
            return {"flow_run_id": entry.get("flow_run_id"), "reason": entry["reason"], "skipped": "not running"}
        return _mark(entry, prefect_state, mlflow_kill)


def _mark(entry: dict[str, Any], prefect_state, mlflow_kill) -> dict[str, Any]:
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
