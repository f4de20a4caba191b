"""Crash detection without false positives: a paused run is alive, a reused pid is not the
run, another host gets a generous silence, and a live run marked crashed un-marks itself."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from tasks.core.runs import Heartbeat, dead_runs, mark_crashed, process_started
from tests.helpers import REPO

BEATING = """
import sys, time
from tasks.core.runs import Heartbeat
Heartbeat(sys.argv[1], "flow-child", "ml-child", every=0.1).__enter__()
print("beating", flush=True)
time.sleep(120)
"""


@pytest.fixture
def beating_child(tmp_path):
    child = subprocess.Popen(
        [sys.executable, "-c", BEATING, str(tmp_path / "child")], cwd=REPO, stdout=subprocess.PIPE, text=True
    )
    assert child.stdout.readline().strip() == "beating"
    yield child
    child.kill()
    child.wait()


def _entry(path, **data):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"status": "running", "host": os.uname().nodename, "beat": time.time(), **data}))


def test_a_paused_run_is_alive_however_long_its_silence(tmp_path, beating_child):
    os.kill(beating_child.pid, signal.SIGSTOP)  # a stopped process, a long GC or swap pause look the same
    try:
        time.sleep(1.5)
        beat = json.loads((tmp_path / "child" / "heartbeat.json").read_text())["beat"]
        assert time.time() - beat > 1.0
        assert dead_runs(tmp_path, 0.5) == []  # silent for longer than crash_after_s, yet its process lives
    finally:
        os.kill(beating_child.pid, signal.SIGCONT)
    beating_child.kill()
    beating_child.wait()
    (found,) = dead_runs(tmp_path, 0.5)
    assert found["flow_run_id"] == "flow-child" and found["reason"] == "process gone"


def test_a_reused_pid_is_not_the_run(tmp_path, beating_child):
    real = process_started(beating_child.pid)
    _entry(tmp_path / "old" / "heartbeat.json", flow_run_id="old", pid=beating_child.pid, pid_started=real - 3600)
    (found,) = [e for e in dead_runs(tmp_path) if e["flow_run_id"] == "old"]
    assert "pid now belongs to another process" in found["reason"]


def test_another_hosts_run_is_crashed_only_after_a_generous_silence(tmp_path):
    _entry(tmp_path / "quiet" / "heartbeat.json", flow_run_id="quiet", host="node-7", pid=1, beat=time.time() - 600)
    _entry(tmp_path / "gone" / "heartbeat.json", flow_run_id="gone", host="node-8", pid=1, beat=time.time() - 1000)
    (found,) = dead_runs(tmp_path, 900)
    assert found["flow_run_id"] == "gone" and "node-8" in found["reason"]


def test_a_live_run_marked_crashed_unmarks_itself(tmp_path):
    revived = []
    with Heartbeat(tmp_path / "me", "flow-me", "ml-me", every=0.05, on_revived=revived.append) as hb:
        time.sleep(0.1)
        entry = {**json.loads(hb.path.read_text()), "file": str(hb.path), "reason": "no heartbeat for 30 s"}
        marks = []
        mark_crashed(entry, lambda fid, why: marks.append(fid) or "CRASHED", marks.append)
        assert marks == ["flow-me", "ml-me"]
        deadline = time.time() + 5
        while not revived and time.time() < deadline:
            time.sleep(0.05)
        time.sleep(0.15)
        on_disk = json.loads(hb.path.read_text())
        assert [r["flow_run_id"] for r in revived] == ["flow-me"]  # once: Prefect and MLflow put back
        assert on_disk["status"] == "running" and on_disk["revived"][0]["was"] == "no heartbeat for 30 s"
        hb.finish("completed")
    assert json.loads(hb.path.read_text())["status"] == "completed"


def test_mlflow_run_killed_by_mistake_is_reopened(tmp_path):
    from tasks.core.tracking import Tracker

    tr = Tracker(f"sqlite:///{tmp_path / 'mlflow.db'}", "runs-test", tmp_path / "art")
    run_id = tr.start_run("r", {})
    tr.end_run(run_id, "KILLED")
    tr.reopen_run(run_id)
    assert tr.client.get_run(run_id).info.status == "RUNNING"
    tr.end_run(run_id, "FINISHED")
    assert tr.client.get_run(run_id).info.status == "FINISHED"
