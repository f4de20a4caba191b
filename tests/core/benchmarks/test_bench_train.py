"""The training benchmark's repeats and ratio (each run faked: the real launch is the device's and the training
tests' business)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

import tasks.core.benchmarks.train as bt
from tasks.core.config import load_config
from tasks.core.runtime import Hardware


def test_each_engine_three_fresh_runs_and_the_ratio_of_medians(tmp_path, monkeypatch):
    rates = {"horovod": iter([100.0, 130.0, 120.0]), "ddp": iter([110.0, 90.0, 100.0])}
    seen: list = []

    def fake_run(engine, cfg, data, work, rt):
        assert data.is_file()
        seen.append((engine, work))
        return {
            "engine": engine,
            "wall_s": 5.0,
            "samples_per_s": next(rates[engine]),
            "data_wait_fraction": 0.01,
            "gpu_utilization": {"steady_mean": None},
        }

    monkeypatch.setattr(bt, "_run", fake_run)
    rt = SimpleNamespace(hardware=Hardware(cpu_count=2, memory_gb=8.0))
    rep = bt.bench_train(tmp_path, load_config("local", []).train, rt, "topozoo/Abilene", 40)
    assert [e for e, _ in seen] == ["horovod"] * 3 + ["ddp"] * 3
    assert len({w for _, w in seen}) == 6  # a fresh directory each: no run resumes another's checkpoint
    assert rep["repeats"] == {"horovod": 3, "ddp": 3} and rep["extrapolated"] is False
    assert rep["samples_per_s"] == 120.0 and rep["samples_per_s_min_max"] == [100.0, 130.0]
    assert rep["horovod_vs_ddp"] == pytest.approx(1.2, abs=1e-3)
