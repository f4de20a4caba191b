"""The new-days sensor: a run is started when export files the store has not processed have landed and settled."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from flows import arrivals
from tasks.core.stages.raw import discover

EXAMPLE = Path(__file__).resolve().parents[2] / "docs" / "example-network"


@pytest.fixture
def sensor(tmp_path, monkeypatch):
    raw = tmp_path / "raw"
    shutil.copytree(EXAMPLE, raw)
    started: list[dict] = []
    monkeypatch.setattr(arrivals, "active_runs", lambda deployment, raw: [])
    monkeypatch.setattr(arrivals, "start_run", lambda deployment, params: started.append(params) or "run-1")
    monkeypatch.setenv("FAULTLINE_ROOT", str(tmp_path / "home"))

    def run(**kw):
        return arrivals.new_days_sensor.fn(raw=str(raw), profile="local", settle_s=kw.pop("settle_s", 0), **kw)

    return raw, tmp_path / "home" / "store", run, started


def _processed(store: Path, raw: Path) -> None:
    """What a validation of ``raw``'s files leaves in the store (the files it read, by stamp and content)."""
    layout = discover(raw)
    body = {"raw_dir": str(raw.resolve()), "raw_files": layout.stamps(), "raw_digests": layout.digests()}
    (store / "validate" / "v1").mkdir(parents=True)
    (store / "validate" / "v1" / "_manifest.json").write_text(json.dumps(body))


def test_a_new_day_starts_one_run_once_settled(sensor, monkeypatch):
    raw, store, run, started = sensor
    out = run()
    assert out["started"] == "run-1" and "kpi/kpi_2026-01-05.csv" in out["new_files"]  # nothing processed yet
    _processed(store, raw)
    os.utime(raw / "kpi" / "kpi_2026-01-05.csv")  # touched, same bytes: still processed
    assert run()["why"] == "nothing new" and len(started) == 1
    shutil.copy(raw / "kpi" / "kpi_2026-01-07.csv", raw / "kpi" / "kpi_2026-01-08.csv")
    shutil.copy(raw / "alarms" / "alarms_2026-01-07.jsonl", raw / "alarms" / "alarms_2026-01-08.jsonl")
    waiting = run(settle_s=3600)
    assert waiting["started"] is None and waiting["why"].startswith("settling")
    out = run()
    assert out["new_files"] == ["alarms/alarms_2026-01-08.jsonl", "kpi/kpi_2026-01-08.csv"]
    assert started[-1] == {"raw": str(raw), "profile": "local"} and len(started) == 2
    monkeypatch.setattr(arrivals, "active_runs", lambda deployment, raw: ["run-2"])
    busy = run()
    assert busy["started"] is None and "under way: run-2" in busy["why"] and len(started) == 2


def test_without_a_raw_directory_it_says_so(monkeypatch):
    monkeypatch.delenv("FAULTLINE_RAW", raising=False)
    assert arrivals.new_days_sensor.fn(raw=None)["why"] == "no raw directory configured"


def test_the_cli_summary_says_what_a_run_processed():
    from flows.cli import _human_summary

    stage = {"cached": False, "rows_in": 100, "rows_out": 99, "rows_quarantined": 1, "output": "/s/ingest/x"}
    summary = {"run_id": "r", "profile": "local", "status": "completed", "processed": "new days"}
    text = _human_summary({**summary, "warm_start": "champion", "stages": {"ingest": {**stage, "work_rows": 12}}}, 3)
    assert "processed: new days, trained from the network's champion" in text
    assert text.splitlines()[3].split()[:6] == ["ingest", "False", "100", "99", "1", "12"]
