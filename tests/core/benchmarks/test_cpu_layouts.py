"""The CPU path's training layout: at least three rank x thread layouts, the fastest by steady samples/s."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from tasks.core.benchmarks import cpu_layouts, train
from tasks.core.config import TrainConfig


@pytest.mark.parametrize(
    "cores, expected",
    [
        (1, [(1, 1), (2, 1), (4, 1)]),  # more ranks than cores make up three layouts
        (2, [(1, 2), (2, 1), (4, 1)]),
        (16, [(1, 16), (2, 8), (4, 4), (8, 2)]),  # ranks up to MAX_RANKS
    ],
)
def test_layouts_fill_the_cores_and_are_at_least_three(cores, expected):
    assert cpu_layouts.layouts(cores) == expected


def test_every_rank_gets_two_steps_an_epoch():
    times = cpu_layouts.sweep_times(32, 8)
    assert (int(times * 0.9) - 16) // 8 >= 2 * 32  # synthetic_tensors: train_t = 16 .. 0.9 of the snapshots


def test_the_sweep_trains_each_layout_two_epochs_and_picks_the_fastest(tmp_path, monkeypatch):
    seen = []

    def fake_run(engine, cfg, data, work, rt):
        seen.append((engine, cfg.epochs, cfg.num_proc, rt.threads_per_rank, data.name))
        return {"samples_per_s": {1: 100.0, 2: 180.0, 4: 150.0}[cfg.num_proc], "wall_s": 3.0}

    monkeypatch.setattr(train, "_run", fake_run)
    monkeypatch.setattr(train, "synthetic_tensors", lambda path, topo, times, features: {"times": times})

    def rt_for(ranks):
        rt = SimpleNamespace(hardware=SimpleNamespace(cpu_count=2), threads_per_rank=max(1, 2 // ranks))
        return rt, TrainConfig(num_proc=ranks, epochs=8)

    out = cpu_layouts.sweep(tmp_path, TrainConfig(), rt_for, "topozoo/Abilene", 84)
    assert seen == [
        ("horovod", 2, 1, 2, "layouts.npz"),
        ("horovod", 2, 2, 1, "layouts.npz"),
        ("horovod", 2, 4, 1, "layouts.npz"),
    ]
    assert out["fastest"] == {"ranks": 2, "threads_per_rank": 1, "samples_per_s": 180.0, "wall_s": 3.0}
    assert out["cores"] == 2 and out["epochs"] == 2 and len(out["layouts"]) == 3
