"""Laps of a stage's parts; with GPU work, each lap waits for the work queued before it (a fake CuPy here)."""

from __future__ import annotations

import sys
import types

from tasks.core.laps import Laps, SyncedLaps


def test_each_lap_holds_the_seconds_since_the_last(monkeypatch):
    clock = iter([10.0, 10.5, 12.0])
    monkeypatch.setattr("tasks.core.laps.time.perf_counter", lambda: next(clock))
    lap = Laps()
    lap("read"), lap("fill")
    assert lap.seconds == {"read": 0.5, "fill": 1.5}


def test_synced_laps_wait_for_the_gpus_queued_work_before_each_lap(monkeypatch):
    events: list[str] = []

    class Device:
        def synchronize(self) -> None:
            events.append("sync")

    cupy = types.SimpleNamespace(cuda=types.SimpleNamespace(Device=Device))
    monkeypatch.setitem(sys.modules, "cupy", cupy)
    clock = iter([0.0, 1.0, 3.0, 4.0, 4.5])
    monkeypatch.setattr("tasks.core.laps.time.perf_counter", lambda: events.append("clock") or next(clock))
    lap = SyncedLaps(gpu=True)
    lap("fill_cells"), lap("standardise")
    assert events == ["clock", "sync", "clock", "sync", "clock"] and lap.seconds == {
        "fill_cells": 1.0,
        "standardise": 2.0,
    }
    host = SyncedLaps(gpu=False)
    host("step_index")
    assert events.count("sync") == 2  # no GPU: nothing to wait for, CuPy not asked
