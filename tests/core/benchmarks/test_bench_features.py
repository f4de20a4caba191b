"""The features benchmark on CPU: the synthetic lake goes through the real stage, the pandas-in-one-process
baseline computes exactly what the Dask stage computes, and every ratio comes from one invocation."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from tasks.core.benchmarks.features import bench_features, pandas_one_process
from tasks.core.benchmarks.lakes import synthetic_lake
from tasks.core.benchmarks.measure import ratio, repeated
from tasks.core.config import load_config
from tasks.core.runtime import dask_cluster, dask_spec, detect_hardware
from tasks.core.stages.features import build_features
from tasks.core.topology import Topology

pytestmark = pytest.mark.spark  # a real Dask cluster


def test_features_bench_on_cpu(tmp_path):
    cfg = load_config("local").features
    res = bench_features(tmp_path, cfg, detect_hardware(), 11 * 288 * 2, 60.0, topology="topozoo/Abilene")
    assert res["rows"] == 11 * 288 * 2 and res["pandas"]["rows"] == res["rows"]
    assert res["pandas"]["extrapolated"] is False and res["dask_cpu"]["rows"] == res["rows"]
    d = res["dask_cpu"]
    assert d["repeats"] == 3 and d["min_s"] <= d["median_s"] <= d["max_s"] and len(d["times_s"]) == 3
    assert "gpu" not in res and res["gpu_vs_pandas"] is None and res["dask_cpu_vs_pandas"] > 0
    assert res["dask_cpu_vs_pandas"] == ratio(res["pandas"]["seconds_full"], d["median_s"])
    json.dumps(res)  # what the flow writes


def test_pandas_baseline_computes_what_the_stage_computes(tmp_path):
    cfg = load_config("local").features
    lake = tmp_path / "lake"
    synthetic_lake(lake, "topozoo/Abilene", 11 * 288 * 2)
    pandas_one_process(lake, cfg, tmp_path / "pandas", 60.0)
    with dask_cluster(dask_spec(cfg, "pandas", detect_hardware())) as client:
        build_features(client, lake, Topology.read(lake / "topology.json"), cfg, "pandas", tmp_path / "dask")
    a = pd.read_parquet(tmp_path / "pandas").sort_values(["element_id", "timestamp"]).reset_index(drop=True)
    b = pd.read_parquet(tmp_path / "dask" / "features").sort_values(["element_id", "timestamp"])
    b = b.reset_index(drop=True)[a.columns]
    for col in a.columns[2:]:
        np.testing.assert_array_equal(a[col].to_numpy(np.float64), b[col].to_numpy(np.float64), err_msg=col)
    assert a["label"].sum() > 0 and (a["in_fault"] == 1).any()  # the synthetic faults reach the labels


def test_repeated_takes_the_median_and_stops_when_dear():
    times = iter([3.0, 1.0, 2.0])
    r = repeated(lambda: {"seconds": next(times)})
    assert r["median_s"] == 2.0 and (r["min_s"], r["max_s"]) == (1.0, 3.0) and r["repeats"] == 3
    r = repeated(lambda: {"seconds": 61.0})
    assert r["repeats"] == 1 and r["median_s"] == 61.0
    rates = iter([(10.0, 500.0), (12.0, 450.0), (11.0, 480.0)])
    r = repeated(lambda: dict(zip(("wall_s", "rate"), next(rates))), key="wall_s", also=("rate",))
    assert (r["rate_median"], r["rate_min"], r["rate_max"]) == (480.0, 450.0, 500.0) and r["median_s"] == 11.0
    assert ratio(10.0, 4.0) == 2.5 and ratio(None, 4.0) is None


def test_the_benchmark_lake_stops_its_spark_before_the_gpu_work(tmp_path, monkeypatch):
    """With the RAPIDS Accelerator on, a Spark application left running holds the GPU's memory: the Dask-CUDA
    workers timed next could not allocate their pool (seen on an H200 host). The lake's ingest stops it."""
    from contextlib import contextmanager

    from tasks.core.benchmarks import lakes
    from tasks.core.config import load_config
    from tasks.core.runtime import Hardware

    events: list[str] = []

    @contextmanager
    def spark(conf, stage):
        events.append(f"start {stage}")
        yield object()
        events.append("stop")

    monkeypatch.setattr(lakes, "stage_spark", spark)
    monkeypatch.setattr(lakes, "java_version", lambda: {"found": True})
    monkeypatch.setattr(lakes, "simulate", lambda *a, **k: None)
    monkeypatch.setattr(lakes, "discover", lambda raw: raw)
    monkeypatch.setattr(
        lakes,
        "run_ingest",
        lambda s, raw, out, cfg: events.append("ingest") or (out / "topology.json").write_text("{}"),
    )
    lake = lakes.ensure_lake(
        tmp_path, "topozoo/Abilene", 1, load_config("gpu").ingest, Hardware(cpu_count=2, memory_gb=8.0)
    )
    assert events == ["start bench-lake", "ingest", "stop"] and (lake / "topology.json").is_file()
