"""Skip, resume and isolation with the real flow: a SIGKILLed run is marked crashed and resumed from its
training checkpoint; two runs with different parameters at once never touch each other's outputs."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tasks.core.runs import Heartbeat, dead_runs, mark_crashed
from tests.helpers import REPO, SHARED_PREFECT, SMALL, faultline, last_json

SPREAD_OVER_WORKERS = True  # its tests share no fixture, store or server: each may run on any worker

pytestmark = [pytest.mark.slow, pytest.mark.spark, pytest.mark.horovod]


def test_a_dead_heartbeat_is_found_and_marked(tmp_path):
    with Heartbeat(tmp_path / "alive", "run-a", "ml-a", every=0.05):
        time.sleep(0.1)
        assert dead_runs(tmp_path) == []  # this process is alive and beating
    gone = tmp_path / "gone" / "heartbeat.json"
    gone.parent.mkdir()
    gone.write_text(
        json.dumps(
            {
                "flow_run_id": "run-b",
                "mlflow_run_id": "ml-b",
                "pid": 2**22 + 7,
                "host": os.uname().nodename,
                "beat": time.time(),
                "status": "running",
            }
        )
    )
    (found,) = dead_runs(tmp_path)
    assert found["flow_run_id"] == "run-b" and found["reason"] == "process gone"
    calls = []
    out = mark_crashed(found, lambda fid, why: calls.append(fid) or "CRASHED", lambda rid: calls.append(rid))
    assert calls == ["run-b", "ml-b"] and out["prefect_state"] == "CRASHED" and out["mlflow_status"] == "KILLED"
    assert json.loads(gone.read_text())["status"] == "crashed" and dead_runs(tmp_path) == []


def test_sigkill_mid_training_then_rerun_resumes(tmp_path):
    args = ["run", *SMALL, "--set", "train.epochs=6", "--set", f"paths.root={tmp_path}", "--json"]
    env = {**os.environ, "PREFECT_HOME": str(tmp_path / "prefect-home"), "PREFECT_API_URL": SHARED_PREFECT.start()}
    proc = subprocess.Popen(
        [sys.executable, "-m", "flows.cli", *args],
        cwd=REPO,
        env=env,
        start_new_session=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    ckpts = tmp_path / "store" / "checkpoints"
    deadline = time.time() + 600
    while time.time() < deadline and not list(ckpts.glob("*/epoch_0001.done")):
        assert proc.poll() is None, "the run ended before it could be killed"
        time.sleep(0.2)
    os.killpg(proc.pid, signal.SIGKILL)  # the CLI, its Spark JVM, Dask workers and Horovod ranks
    proc.wait()
    (killed_hb,) = (tmp_path / "store" / "runs").glob("*/heartbeat.json")
    assert json.loads(killed_hb.read_text())["status"] == "running"  # nobody told it
    assert not list((tmp_path / "store" / "train").glob("*/_manifest.json"))  # nothing half-published
    newest = sorted(ckpts.glob("*/epoch_*.done"))[-1].with_suffix(".pt")
    newest.write_bytes(newest.read_bytes()[:100])  # damaged: the rerun must skip it and say so where users read

    again = faultline(*args, root=tmp_path)
    assert again.returncode == 0, again.stderr[-3000:]
    s = last_json(again.stdout)
    assert {k: v["cached"] for k, v in s["stages"].items()} == {
        "validate": True,
        "ingest": True,
        "features": True,
        "train": False,
        "evaluate": False,
    }
    (crash,) = s["recovered_crashed_runs"]
    assert crash["flow_run_id"] == killed_hb.parent.name and crash["prefect_state"] == "CRASHED"
    assert crash["mlflow_status"] == "KILLED" and json.loads(killed_hb.read_text())["status"] == "crashed"
    manifest = json.loads(Path(s["stages"]["train"]["output"], "_manifest.json").read_text())
    assert manifest["resumed_from_epoch"] == int(newest.stem.split("_")[1]) - 1 and len(manifest["history"]) == 6
    assert f"checkpoint {newest} is damaged" in again.stdout + again.stderr  # the CLI's output, not only train.log


def test_two_runs_with_different_parameters_at_once(tmp_path):
    def start(days: int, home: str) -> subprocess.Popen:
        env = {**os.environ, "PREFECT_HOME": str(tmp_path / home), "PREFECT_API_URL": SHARED_PREFECT.start()}
        cmd = [
            sys.executable,
            "-m",
            "flows.cli",
            "run",
            *SMALL,
            "--set",
            f"workload.days={days}",
            "--set",
            f"paths.root={tmp_path}",
            "--until",
            "features",
            "--json",
        ]
        return subprocess.Popen(cmd, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    a, b = start(2, "home-a"), start(3, "home-b")
    out_a, err_a = a.communicate(timeout=900)
    out_b, err_b = b.communicate(timeout=900)
    assert a.returncode == 0, err_a[-3000:]
    assert b.returncode == 0, err_b[-3000:]
    sa, sb = last_json(out_a), last_json(out_b)
    for stage in ("validate", "ingest", "features"):
        pa, pb = Path(sa["stages"][stage]["output"]), Path(sb["stages"][stage]["output"])
        assert pa != pb, stage
        ma = json.loads((pa / "_manifest.json").read_text())
        mb = json.loads((pb / "_manifest.json").read_text())
        assert ma["input_fingerprints"] != mb["input_fingerprints"], stage
    days = lambda s: len(list(Path(s["stages"]["ingest"]["output"], "kpi").glob("date=*")))
    assert days(sa) == 2 and days(sb) == 3
    import pyarrow.dataset as ds

    for s in (sa, sb):  # each run's features were computed from its own lake, not the other's
        lake_rows = ds.dataset(Path(s["stages"]["ingest"]["output"], "kpi"), partitioning="hive").count_rows()
        assert s["stages"]["features"]["rows_in"] == lake_rows == s["stages"]["features"]["rows_out"]
    assert sb["stages"]["features"]["rows_in"] > sa["stages"]["features"]["rows_in"]
    assert not list((tmp_path / "store").glob("*/.*.tmp-*"))  # no staging directory left behind
