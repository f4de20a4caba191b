"""Tracking outages against a real MLflow server: a server killed mid-run costs seconds, not
half an hour, and the run's tracking is replayed in full when the server is back (never left RUNNING); a
server down from the start does not stop the pipeline, and ``mlflow.strict=true`` rejects the run at once."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path

import pytest
import requests

from tasks.core.ports import free_port
from tests.helpers import REPO, SHARED_PREFECT, SMALL, faultline, last_json

SPREAD_OVER_WORKERS = True  # its tests share no fixture, store or server: each may run on any worker


@contextmanager
def mlflow_server(port: int, home: Path):
    """``mlflow server`` on 127.0.0.1:port over a SQLite store and an artifact directory under ``home``."""
    home.mkdir(parents=True, exist_ok=True)
    proc = subprocess.Popen(
        [sys.executable, "-m", "mlflow", "server", "--host", "127.0.0.1", "--port", str(port), "--workers", "1",
         "--backend-store-uri", f"sqlite:///{home / 'mlflow.db'}", "--artifacts-destination", str(home / "art")],
        stdout=open(home / "server.log", "a"), stderr=subprocess.STDOUT, start_new_session=True,
    )  # fmt: skip
    try:
        deadline = time.time() + 90
        while True:
            try:
                if requests.get(f"http://127.0.0.1:{port}/health", timeout=2).ok:
                    break
            except requests.RequestException:
                pass
            assert proc.poll() is None and time.time() < deadline, (home / "server.log").read_text()[-3000:]
            time.sleep(0.5)
        yield proc
    finally:
        with __import__("contextlib").suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


@pytest.mark.engine  # a real MLflow server, killed and restarted
def test_server_killed_mid_run_is_journaled_and_replayed(tmp_path):
    from mlflow.tracking import MlflowClient

    from tasks.core.spool import ResilientTracker, pending
    from tasks.core.tracking import SPOOL, Tracker

    port = free_port()
    uri = f"http://127.0.0.1:{port}"
    tr = ResilientTracker(lambda: Tracker(uri, "outage", None), uri, "outage", tmp_path / SPOOL)
    (tmp_path / "report.txt").write_text("the run's report\n")
    with mlflow_server(port, tmp_path / "server"):
        tr.begin()
        run = tr.start_run("mid-run-outage", {"kind": "test"})
        tr.log_params(run, {"train.epochs": 3})
    started = time.perf_counter()  # the server is gone from here on
    tr.log_metrics(run, {"loss": 0.5}, step=1)
    tr.log_metrics(run, {"loss": 0.25}, step=2)
    tr.log_artifact(run, tmp_path / "report.txt", "reports")
    tr.end_run(run, "FINISHED")
    took = time.perf_counter() - started
    assert tr.offline and took < 60, f"an outage cost {took:.0f} s"
    (tmp_path / "report.txt").unlink()  # the journal kept its own copy
    assert tr.finish() == [] and len(pending(tmp_path / SPOOL)) == 1  # still down: kept for later
    where = [f"mlflow.tracking_uri={uri}", f"paths.root={tmp_path}"]
    assert _replay_flow(where, tmp_path)["unreachable"]  # the scheduled replay while it is down: kept, said
    assert len(pending(tmp_path / SPOOL)) == 1
    with mlflow_server(port, tmp_path / "server"):  # the same store comes back
        client = MlflowClient(uri)
        assert client.get_run(run).info.status == "RUNNING"  # what the outage left behind
        out = _replay_flow(where, tmp_path)  # the tracking-replay deployment's flow: no later run needed
        assert out["unreachable"] is None and len(out["replayed"]) == 1 and out["left"] == []
        info = client.get_run(run)
        assert info.info.status == "FINISHED" and info.data.params == {"train.epochs": "3"}
        assert [m.value for m in client.get_metric_history(run, "loss")] == [0.5, 0.25]
        assert [a.path for a in client.list_artifacts(run, "reports")] == ["reports/report.txt"]
        assert pending(tmp_path / SPOOL) == []


def _replay_flow(overrides: list[str], tmp_path: Path) -> dict:
    """The tracking_replay flow run in a process of its own against the suite's Prefect API; its return value."""
    call = f"print(json.dumps(tracking_replay(overrides={overrides!r})))"
    code = f"import json; from flows.tracking import tracking_replay; {call}"
    env = {**os.environ, "PREFECT_API_URL": SHARED_PREFECT.start(), "PREFECT_HOME": str(tmp_path / "prefect")}
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=REPO, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return last_json(proc.stdout)


@pytest.mark.slow
@pytest.mark.spark
def test_pipeline_with_the_server_down_from_the_start(tmp_path):
    port = free_port()
    where = ["--set", f"paths.root={tmp_path / 'store'}", "--set", f"mlflow.tracking_uri=http://127.0.0.1:{port}"]
    strict = faultline("run", *SMALL, *where, "--set", "mlflow.strict=true", "--json", root=tmp_path)
    assert strict.returncode == 2 and "tracking server is unreachable" in strict.stderr, strict.stderr[-2000:]
    assert not list(tmp_path.glob("store/*/*/_manifest.json"))  # answered before any stage (or engine) started

    run = faultline("run", *SMALL, *where, "--until", "validate", "--json", root=tmp_path)
    assert run.returncode == 0, run.stderr[-3000:]
    summary = last_json(run.stdout)
    assert summary["status"] == "completed" and summary["mlflow_run_id"].startswith("spooled-")
    assert summary["tracking"].startswith("journaled"), summary["tracking"]

    with mlflow_server(port, tmp_path / "server"):
        check = faultline("check", "--run", summary["mlflow_run_id"], *where, root=tmp_path)
        assert check.returncode == 2 and "faultline tracking replay" in check.stderr, check.stderr[-2000:]
        assert len(check.stderr.strip().splitlines()) == 1
        replay = faultline("tracking", "replay", *where, "--json", root=tmp_path)
        assert replay.returncode == 0, replay.stderr[-2000:]
        (done,) = last_json(replay.stdout)["replayed"]
        real = done["runs"][summary["mlflow_run_id"]]
        from mlflow.tracking import MlflowClient

        got = MlflowClient(f"http://127.0.0.1:{port}").get_run(real)
        assert got.info.status == "FINISHED" and got.data.params["workload.topology"] == "topozoo/Abilene"
        assert got.data.tags["prefect_flow_run_id"] == summary["run_id"]
        assert "journaled" in got.data.tags["mlflow.note.content"]  # the description, journaled with the rest
        assert got.data.metrics["validate.rows_in"] == summary["stages"]["validate"]["rows_in"]
