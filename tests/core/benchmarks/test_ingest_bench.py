"""The ingest benchmark's variants: CPU Spark, the RAPIDS Accelerator's concurrentGpuTasks sweep and
Spark's own shuffle, each in its own process and application over the same files, in one invocation; repeats to
the median of three only where a run is cheap. The plugin runs in ``explainOnly`` mode here (no GPU): the same
processes, configurations and report as on the H200, where it executes on the GPU."""

from __future__ import annotations

import json

import pytest

from tasks.core.benchmarks import ingest as bi
from tasks.core.benchmarks.ingest import _median_of, bench_ingest, core_scaling, master_cores, variants
from tasks.core.config import load_config


def test_variants_follow_the_plugin_setting():
    cfg = load_config("local").ingest
    assert [n for n, _ in variants(cfg, [1, 2, 4])] == ["cpu-spark"]
    gpu = cfg.model_copy(update={"rapids_jar": "installed", "concurrent_gpu_tasks": 2})
    got = dict(variants(gpu, [1, 4]))
    assert list(got) == ["cpu-spark", "rapids-tasks1", "rapids-tasks4", "rapids-tasks2-spark-shuffle"]
    assert got["cpu-spark"] == {"rapids_jar": None, "kpi_parse": "csv"}
    assert got["rapids-tasks4"] == {"concurrent_gpu_tasks": 4}


def test_core_counts_run_last_on_local_masters_and_scale_against_the_fewest():
    cfg = load_config("local").ingest.model_copy(update={"rapids_jar": "installed", "concurrent_gpu_tasks": 2})
    got = variants(cfg, [2], [4, 16])
    assert [n for n, _ in got][-2:] == ["cpu-spark-cores4", "cpu-spark-cores16"]
    assert dict(got)["cpu-spark-cores16"] == {"rapids_jar": None, "kpi_parse": "csv", "master": "local[16]"}
    assert [master_cores(m, 16) for m in ("local[*]", "local[4]", "local", "local[2,3]", "spark://h:7077")] == [
        16,
        4,
        1,
        2,
        None,
    ]
    runs = {"cpu-spark": {"seconds": 10.0}, "rapids-tasks2": {"seconds": 2.0}, "cpu-spark-cores4": {"seconds": 30.0}}
    runs["cpu-spark-cores1"] = {"seconds": 100.0}
    got = core_scaling(runs, "local[*]", 16)  # local[*] is the host's 16 cores
    assert [(r["cores"], r["seconds"], r["speedup"]) for r in got] == [
        (1, 100.0, 1.0),
        (4, 30.0, 3.333),
        (16, 10.0, 10.0),
    ]
    assert [r["efficiency"] for r in got] == [1.0, 0.833, 0.625]
    assert core_scaling({"cpu-spark": {"seconds": 10.0}}, "local[*]", 16) is None  # one core count: no scaling
    assert (
        core_scaling({"cpu-spark": {"seconds": 9.0}, "cpu-spark-cores2": {"seconds": 10.0}}, "spark://h:7077", 16)
        is None
    )


def test_a_cheap_run_is_repeated_to_the_median_of_three_and_a_dear_one_is_not():
    times = iter([5.0, 9.0, 7.0])
    got = _median_of(lambda: {"seconds": next(times), "spark_start_s": 1.0, "tag": "x"}, 60)
    assert got["runs"] == 3 and got["seconds"] == 7.0 and got["min_max_s"] == [5.0, 9.0]
    got = _median_of(lambda: {"seconds": 75.0, "spark_start_s": 1.0}, 60)
    assert got["runs"] == 1 and got["min_max_s"] == [75.0, 75.0]


def test_a_run_cut_short_leaves_the_variants_it_finished(tmp_path, monkeypatch):
    """After each variant the finished ones are on disk (a GPU host can be taken back mid-benchmark); a later
    invocation first removes an earlier one's file. Spark is faked here: the file's content is what is tested."""
    from tasks.core.runtime import resolve_runtime
    from tasks.core.stages.simulate import simulate

    raw, jar, work = tmp_path / "raw", tmp_path / "plugin.jar", tmp_path / "work"
    simulate("topozoo/Abilene", 1, 7, raw, dirt=0.0)
    jar.write_bytes(b"")
    sets = [f"ingest.rapids_jar={jar}", f"bench.raw={raw}", "bench.gpu_tasks=[1,2,4]", "bench.repeat_under_s=0"]
    cfg = load_config("local", sets)
    work.mkdir()
    (work / bi.PARTIAL).write_text('{"stale": true}')
    seconds = {"cpu-spark": 30.0, "rapids-tasks1": 12.0, "rapids-tasks2": 10.0}
    seen = []

    def fake_once(raw_, out, vcfg, conf):
        name = conf["spark.app.name"].removeprefix("faultline-bench-")
        if name == "cpu-spark":  # the first: the earlier invocation's file is already gone
            assert not (work / bi.PARTIAL).exists()
        if name not in seconds:
            raise RuntimeError("the host went away")
        seen.append(name)
        return {"seconds": seconds[name], "spark_start_s": 1.0, "rows_in": 5, "rows_out": 4, "rows_quarantined": 1}

    monkeypatch.setattr(bi, "_spark_once", fake_once)
    told = []
    with pytest.raises(RuntimeError, match="went away"):
        bench_ingest(work, 0.05, cfg.ingest, resolve_runtime(cfg, tmp_path), cfg.bench, lambda *a: told.append(a[:3]))
    assert told == [(1, 5, "cpu-spark"), (2, 5, "rapids-tasks1"), (3, 5, "rapids-tasks2")]  # progress, as each ends
    part = json.loads((work / bi.PARTIAL).read_text())
    assert seen == ["cpu-spark", "rapids-tasks1", "rapids-tasks2"] and part["partial"] is True
    assert list(part["spark_variants"]) == seen
    assert part["remaining"] == ["rapids-tasks4", "rapids-tasks2-spark-shuffle"]
    assert part["vs_cpu_spark"] == {"rapids-tasks1": 2.5, "rapids-tasks2": 3.0}
    assert part["spark_variants"]["rapids-tasks2"]["runs"] == 1 and part["extrapolated"] is False


def test_the_report_table_and_chart(tmp_path):
    from tasks.core.benchmarks.ingest_report import markdown_table, plot_ingest

    def run(seconds, lo, hi, util=None):
        return {"seconds": seconds, "runs": 3, "min_max_s": [lo, hi], "mb_per_s": 1000 / seconds, "gpu_util_mean": util}

    rep = {"raw_mb": 1000.0, "device": "NVIDIA H100 80GB HBM3", "pyarrow_seconds": 4.0, "pyarrow_runs": 3}
    rep["pyarrow_min_max_s"], rep["pyarrow_mb_per_s"] = [3.9, 4.2], 245.0
    rep["spark_variants"] = {"cpu-spark": run(40.0, 39.0, 42.0), "rapids-tasks2": run(10.0, 9.5, 11.0, 71.4)}
    rep["cpu_core_scaling"] = [
        {"cores": 2, "seconds": 80.0, "speedup": 1.0},
        {"cores": 16, "seconds": 40.0, "speedup": 2.0},
    ]
    table = markdown_table(rep)
    assert "| rapids-tasks2 | 10.0 | 3 | 9.5–11.0 | 100.0 | 4.0x | 71 % |" in table
    assert "| cpu-spark | 40.0 | 3 | 39.0–42.0 | 25.0 | 1.0x | — |" in table
    assert "| pyarrow CSV→Parquet (KPI only, no rules) | 4.0 | 3 | 3.9–4.2 | 245.0 |" in table
    assert "CPU Spark by cores: 2 cores 80.0 s (1.0x), 16 cores 40.0 s (2.0x)." in table
    assert "by cores" not in markdown_table({**rep, "cpu_core_scaling": None})
    png = plot_ingest(rep, tmp_path / "ingest.png")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 5_000
