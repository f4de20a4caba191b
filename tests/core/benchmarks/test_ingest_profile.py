"""bench/ingest_profile.py end to end on a small input: two runs in one application, their stages and jobs."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tasks.core.stages.simulate import simulate

pytestmark = pytest.mark.spark
ROOT = Path(__file__).resolve().parents[3]


def test_profile_reports_each_run_and_where_its_time_went(tmp_path):
    raw = tmp_path / "raw"
    simulate("topozoo/Abilene", 2, 3, raw, dirt=0.02)
    out = tmp_path / "profile.json"
    cmd = [sys.executable, "bench/ingest_profile.py", str(raw), "--runs", "2", "--json", str(out)]
    cmd += ["--set", "ingest.master=local[1]"]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads(out.read_text())
    assert [r["run"] for r in report["runs"]] == [1, 2]
    assert report["runs"][0]["rows_in"] == report["runs"][1]["rows_in"] > 0
    assert all(r["seconds"] > 0 for r in report["runs"])
    assert "run 1:" in proc.stdout and "(cold JVM)" in proc.stdout and "(warm JVM)" in proc.stdout
    jobs = report["job_seconds_all_runs"]
    assert any("write the lake" in d for d in jobs) and any("write the quarantine" in d for d in jobs)
    stages = report["stages"].values()
    assert sum(s["tasks"] for s in stages) > 0 and sum(s.get("task_s", 0) for s in stages) > 0
    assert any(s.get("shuffle_write_mb", 0) > 0 for s in stages)  # the KPI shuffle by day
