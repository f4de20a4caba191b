"""The e2e report's breakdown, table and plot from stage times (no pipeline runs: the flow test runs those)."""

from __future__ import annotations

import pytest

import tasks.core.stages.baselines as baselines
from tasks.core.benchmarks.e2e import cpu_overrides, cpu_until, markdown_table, plot_e2e, with_breakdown
from tasks.core.config import load_config
from tasks.core.runtime import Hardware


def _report() -> dict:
    gpu = {"validate": 40.0, "ingest": 30.0, "features": 20.0, "train": 60.0, "evaluate": 100.0}
    cpu = {"validate": 40.0, "ingest": 30.0, "features": 40.0, "train": 1260.0, "evaluate": 100.0}
    shared = {"validate", "ingest", "evaluate"}
    return {
        "device": "test GPU",
        "gpu_path": {"stages": {k: {"seconds": v} for k, v in gpu.items()}, "extrapolated": {}, "total_s": 250.0},
        "cpu_path": {
            "stages": {k: {"seconds": v, "shared": k in shared} for k, v in cpu.items()},
            "extrapolated": {"train": {"measured_s": 180.0}},
            "total_s": 1470.0,
        },
        "stage_ratio": {k: round(cpu[k] / gpu[k], 2) for k in gpu},
        "e2e_ratio": 5.88,
    }


def test_breakdown_splits_shared_from_accelerated_stages():
    b = with_breakdown(_report())["breakdown"]
    assert b["shared_stages"] == ["validate", "ingest", "evaluate"]
    assert b["accelerated_stages"] == ["features", "train"]
    assert b["shared_s"] == 170.0 and b["shared_fraction_of_gpu_path"] == pytest.approx(0.68)
    assert b["accelerated_ratio"] == pytest.approx(1300 / 80, rel=1e-3)
    assert b["e2e_ceiling_ratio"] == pytest.approx(1470 / 170, rel=1e-3)


def test_table_in_pipeline_order_with_labels(tmp_path):
    rep = with_breakdown(_report())
    rep["gpu_path"]["stages"] = dict(sorted(rep["gpu_path"]["stages"].items()))  # as a sorted JSON reads back
    table = markdown_table(rep)
    rows = [line.split("|")[1].strip() for line in table.splitlines()[2:7]]
    assert rows == ["validate", "ingest", "features", "train", "evaluate"]
    assert "1260.0 (extrapolated)" in table and "40.0 (shared)" in table
    assert "the end-to-end ceiling while the shared stages stay on the CPU: 8.65x" in table
    png = plot_e2e(rep, tmp_path / "e2e.png")
    assert png.stat().st_size > 5_000


def test_cpu_path_leaves_the_gpu_out_of_every_stage(monkeypatch):
    """The CPU path turns the RAPIDS Accelerator and the GPU trees off (the GPU path's overrides come first, so
    these win), and evaluates on its own only where the GPU path's trees run on the GPU."""
    cfg = load_config("gpu", ["ingest.rapids_jar=installed"])
    over = cpu_overrides(cfg, Hardware(cpu_count=16, memory_gb=64.0))
    cpu = load_config("gpu", ["ingest.rapids_jar=installed", *over])
    assert cpu.ingest.rapids_jar is None and cpu.evaluate.tree_device == "cpu" and cpu.train.device == "cpu"
    assert cpu.ingest.kpi_parse == "csv" and load_config("gpu", over).ingest.rapids_jar is None
    assert cpu.features.backend == "pandas" and cpu.features.n_workers == 16
    monkeypatch.setattr(baselines, "tree_device", lambda requested="auto": "cpu")
    assert cpu_until(cfg) == "train"
    monkeypatch.setattr(baselines, "tree_device", lambda requested="auto": "cuda")
    assert cpu_until(cfg) == "evaluate"


def test_cpu_training_is_timed_over_two_epochs_and_the_first_is_warm_up():
    from tasks.core.benchmarks.e2e import _train_seconds, cpu_train_epochs

    assert cpu_train_epochs(load_config("gpu", ["train.epochs=10"])) == 2
    assert cpu_train_epochs(load_config("gpu", ["train.epochs=40"])) == 4
    assert cpu_train_epochs(load_config("gpu", ["train.epochs=1"])) == 1
    history = [{"t_start": 0.0, "t_end": 30.0}, {"t_start": 30.0, "t_end": 50.0}]  # warm-up 30 s, then 20 s
    seconds, extra = _train_seconds({"seconds": 60.0, "history": history}, 10)
    assert seconds == pytest.approx(60.0 + 8 * 20.0) and extra["epoch_s"] == 20.0 and extra["fixed_s"] == 10.0
    assert extra["first_epoch_s"] == 30.0 and extra["epochs_timed"] == 2


def _summary(tmp_path, path: str, seconds: dict[str, float], fingerprints: dict[str, str], epochs: int) -> dict:
    import json

    stages = {}
    for name, secs in seconds.items():
        out = tmp_path / path / name
        out.mkdir(parents=True)
        m = {"seconds": secs}
        if name == "train":  # epochs of 10 s each
            m["history"] = [{"t_start": 10.0 * e, "t_end": 10.0 * (e + 1)} for e in range(epochs)]
        (out / "_manifest.json").write_text(json.dumps(m))
        stages[name] = {"output": str(out), "fingerprint": fingerprints[name], "cached": False, "rows_in": 1}
    return {"stages": stages, "mlflow_run_id": path}


def test_fixed_costs_count_on_both_paths_and_the_layout_is_named(tmp_path):
    from tasks.core.benchmarks.e2e import e2e_report

    cfg = load_config("local", ["train.epochs=4"])
    fps = {"validate": "v", "ingest": "i"}
    gpu = _summary(tmp_path, "g", {"validate": 10.0, "ingest": 5.0, "train": 30.0}, {**fps, "train": "tg"}, 4)
    cpu = _summary(tmp_path, "c", {"validate": 10.0, "ingest": 5.0, "train": 25.0}, {**fps, "train": "tc"}, 2)
    layouts = {"layouts": [], "fastest": {"ranks": 2, "threads_per_rank": 1}}
    rep = e2e_report(cfg, Hardware(cpu_count=2, memory_gb=8.0), gpu, cpu, layouts=layouts, gpu_wall_s=52.0)
    assert rep["gpu_path"]["fixed_s"] == rep["cpu_path"]["fixed_s"] == 7.0  # 52 s of flow around 45 s of stages
    assert rep["gpu_path"]["total_s"] == 52.0 and rep["cpu_path"]["total_s"] == 10 + 5 + (25 + 2 * 10) + 7
    assert rep["cpu_path"]["training_layout"]["fastest"]["ranks"] == 2
    assert rep["breakdown"]["shared_s"] == 22.0  # validate, ingest and the fixed costs run the same CPU code
    assert "| fixed (Prefect, MLflow, model logging) | 7.0 (shared) | 7.0 | 1.0x |" in markdown_table(rep)
