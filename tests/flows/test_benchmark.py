"""The benchmark flow at a small size (a test of the flow, not of speed): baseline and scaling reports."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tasks.core.benchmarks.scaling import efficiency, worker_counts
from tests.helpers import faultline, last_json

SPREAD_OVER_WORKERS = True  # its tests share no fixture, store or server: each may run on any worker


def test_worker_counts_and_efficiency():
    assert worker_counts(1) == [1] and worker_counts(2) == [1, 2] and worker_counts(6) == [1, 2, 4, 6]
    strong = efficiency([{"workers": 1, "seconds": 10.0}, {"workers": 4, "seconds": 5.0}], "strong")
    assert strong[1]["efficiency"] == 0.5 and strong[1]["speedup"] == 2.0
    weak = efficiency([{"workers": 1, "seconds": 10.0}, {"workers": 4, "seconds": 12.5}], "weak")
    assert weak[1]["efficiency"] == 0.8 and weak[1]["speedup"] == 3.2
    with pytest.raises(ValueError):
        efficiency([{"workers": 2, "seconds": 1.0}], "strong")


@pytest.mark.slow
@pytest.mark.spark
@pytest.mark.horovod
def test_benchmark_flow_small(tmp_path):
    from mlflow.tracking import MlflowClient

    results = tmp_path / "results"
    proc = faultline(
        "bench",
        "all",
        "--size",
        "small",
        "--set",
        f"paths.root={tmp_path}",
        "--results",
        str(results),
        "--work",
        str(tmp_path / "work"),
        "--json",
        root=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    out = last_json(proc.stdout)
    base = json.loads((results / "baseline.json").read_text())
    assert set(base["spark_vs_pandas"]) == {"sort", "aggregation", "join"}
    assert base["hardware"]["cpu_count"] >= 1 and base["cpu"]["copy_gb_s"] > 0 and base["gpu"] is None
    scaling = json.loads((results / "scaling.json").read_text())
    for stage in ("features", "train"):
        for mode in ("strong", "weak"):
            pts = scaling[stage][mode]["points"]
            assert [p["workers"] for p in pts] == [1, 2] and pts[0]["efficiency"] == 1.0
            t1, t2 = pts[0]["seconds"], pts[1]["seconds"]
            expect = t1 / (2 * t2) if mode == "strong" else t1 / t2
            assert pts[1]["efficiency"] == pytest.approx(expect, abs=1e-3)
    assert scaling["train"]["weak"]["points"][1]["snapshots"] == 2 * scaling["train"]["weak"]["points"][0]["snapshots"]
    assert (results / "scaling.png").stat().st_size > 10_000
    client = MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}")
    exp = client.get_experiment_by_name("faultline-bench")
    runs = {r.data.tags["benchmark"]: r for r in client.search_runs([exp.experiment_id])}
    assert set(runs) == {"baseline", "scaling"}
    arts = {a.path for a in client.list_artifacts(runs["scaling"].info.run_id)}
    assert {"scaling.json", "scaling.png"} <= arts
    assert out["scaling"]["mlflow_run_id"] == runs["scaling"].info.run_id


@pytest.mark.slow
@pytest.mark.spark
@pytest.mark.horovod
def test_e2e_bench_two_paths_one_invocation(tmp_path):
    """Both paths of the same workload through the real pipeline; CPU training timed on a fraction of its epochs
    and extrapolated, shared stages counted once, the ratio from the two runs of this invocation."""
    results = tmp_path / "results"
    small = ["--set", "workload.topology=topozoo/Abilene", "--set", "workload.days=2", "--set", "train.epochs=4"]
    small += ["--set", "train.hidden=8", "--set", "ingest.master=local[2]", "--set", f"paths.root={tmp_path}"]
    proc = faultline(
        "bench", "e2e", *small, "--results", str(results), "--work", str(tmp_path / "w"), "--json", root=tmp_path
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    rep = json.loads((results / "e2e.json").read_text())
    assert rep["provenance"]["command"].startswith("faultline bench e2e") and rep["provenance"]["card"]
    g, c = rep["gpu_path"]["stages"], rep["cpu_path"]["stages"]
    assert set(g) == {"validate", "ingest", "features", "train", "evaluate"} and set(c) == set(g)
    assert c["validate"]["shared"] and c["ingest"]["shared"] and c["evaluate"]["shared"]
    assert not c["train"]["shared"] and rep["extrapolated"] == ["cpu_path.train"]
    x = rep["cpu_path"]["extrapolated"]["train"]
    assert x["epochs_timed"] == 2 and x["epochs_full"] == 4 and c["train"]["seconds"] > x["measured_s"]
    assert x["epoch_s_from"] == "epochs 2.."  # the first epoch is warm-up: the later ones stand for the rest
    assert rep["e2e_ratio"] == pytest.approx(rep["cpu_path"]["total_s"] / rep["gpu_path"]["total_s"], rel=0.01)
    assert rep["repeats"] == 1  # single runs, said in the JSON
    assert (results / "e2e.png").stat().st_size > 5_000 and rep["gpu_path"]["mlflow_run_id"]
    # the CPU path trained with the fastest of the layouts tried on this host, each two epochs
    layout = rep["cpu_path"]["training_layout"]
    assert len(layout["layouts"]) >= 3 and layout["epochs"] == 2
    assert layout["fastest"]["samples_per_s"] == max(r["samples_per_s"] for r in layout["layouts"])
    train = json.loads((Path(rep["cpu_path"]["stages"]["train"]["output"]) / "_manifest.json").read_text())
    assert train["num_proc"] == layout["fastest"]["ranks"]
    # the flow around the stages (Prefect, MLflow, model logging), measured on the GPU path, counts on both
    assert rep["gpu_path"]["fixed_s"] > 0 and rep["cpu_path"]["fixed_s"] == rep["gpu_path"]["fixed_s"]


@pytest.mark.slow
@pytest.mark.spark
@pytest.mark.horovod
def test_quality_bench_runs_the_pipeline_per_topology_and_seed(tmp_path):
    """The yardstick's flow at its small size: one pipeline run (Abilene, seed 1, 3 days) through the real stages,
    the report with every model (graph model, tree, rule, both oracles), its plot, and MLflow."""
    results = tmp_path / "results"
    small = ["--size", "small", "--set", "train.epochs=2", "--set", "train.hidden=8", "--set", f"paths.root={tmp_path}"]
    proc = faultline("bench", "quality", *small, "--results", str(results), "--json", root=tmp_path)
    assert proc.returncode == 0, proc.stderr[-4000:]
    rep = json.loads((results / "quality.json").read_text())
    assert rep["spec"]["topologies"] == ["topozoo/Abilene"] and rep["spec"]["days"] == 3 and len(rep["runs"]) == 1
    run = rep["runs"][0]
    assert run["status"] == "completed" and run["seed"] == 1 and run["mlflow_run_id"]
    for name in ("model", "tree", "rule", "oracle_own", "oracle"):
        assert 0 <= run[name]["false_alerts_per_element_day"], name
    assert set(rep["goals"]) >= {"headroom_closed", "event_recall", "test_events_per_run"}
    assert not rep["goals"]["test_events_per_run"]["met"]  # 3 days of Abilene: far fewer than 40 test events
    assert (results / "quality.png").stat().st_size > 10_000 and last_json(proc.stdout)["mlflow_run_id"]


@pytest.mark.spark
def test_ingest_bench_runs_each_variant_in_its_own_application_with_progress_a_table_and_a_chart(rapids_jar, tmp_path):
    """`faultline bench ingest` at the small size: CPU Spark, the RAPIDS Accelerator (``explainOnly`` here: no GPU;
    the same processes, configurations and report as on a GPU host) with and without its shuffle, and local[1]
    beside the master's local[2], each in its own application over the same files, in one invocation; each variant
    logged as it finishes, the table in the log, the JSON and its chart in MLflow."""
    from mlflow.tracking import MlflowClient

    from tasks.core.sparkops import read_event_log

    results, work = tmp_path / "results", tmp_path / "work"
    sets = [f"paths.root={tmp_path}", "bench.repeat_under_s=0", "bench.spark_cores=[1]", "ingest.master=local[2]"]
    sets += [f"ingest.rapids_jar={rapids_jar}", "ingest.rapids_mode=explainOnly", "bench.gpu_tasks=[2]"]
    sets += ['ingest.extra_conf={"spark.faultline.probe":"on"}']
    proc = faultline(  # -v: Prefect's INFO lines, where each variant's line goes
        "-v", "bench", "ingest", "--size", "small", *[a for s in sets for a in ("--set", s)], "--results", str(results),
        "--work", str(work), "--json", root=tmp_path,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-4000:]
    log = proc.stdout + proc.stderr
    variants = ["cpu-spark", "rapids-tasks2", "rapids-tasks2-spark-shuffle", "cpu-spark-cores1"]
    assert all(f"ingest bench {i}/4 {v}" in log for i, v in enumerate(variants, 1))  # run in this order
    assert "bench ingest: 100%" in proc.stderr and "4/4" in proc.stderr  # the CLI's own progress bar
    assert "| cpu-spark-cores1 |" in log and "CPU Spark by cores: 1 cores" in log  # the table, in the run's log
    rep = json.loads((results / "ingest.json").read_text())
    assert set(rep["spark_variants"]) == set(variants) and rep["rapids_mode"] == "explainOnly"
    assert rep["device"] == f"{rep['hardware']['cpu_count']}-core CPU"  # no GPU in CI
    scaling = rep["cpu_core_scaling"]  # local[1] beside the master's local[2], from this invocation
    assert [r["cores"] for r in scaling] == [1, 2] and scaling[0]["speedup"] == 1.0 and scaling[1]["speedup"] > 0
    assert scaling[1]["seconds"] == rep["spark_variants"]["cpu-spark"]["seconds"]
    assert rep["same_rows_every_run"] and rep["rows_in"] == rep["rows_out"] + rep["rows_quarantined"] > 0
    for run in rep["spark_variants"].values():
        assert run["runs"] == 1 and run["seconds"] > 0 and run["gpu_util_mean"] is None  # no GPU here
    assert rep["rapids_best"] in rep["spark_variants"] and rep["rapids_vs_cpu_spark"] > 0
    part = json.loads((work / "ingest" / "partial.json").read_text())  # the last variant's: every one, none remaining
    assert part["spark_variants"] == rep["spark_variants"] and part["remaining"] == []
    assert (results / "ingest.png").stat().st_size > 5_000
    client = MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}")
    run = client.get_run(last_json(proc.stdout)["mlflow_run_id"])
    assert run.data.tags["benchmark"] == "ingest"
    assert {"ingest.json", "ingest.png"} <= {a.path for a in client.list_artifacts(run.info.run_id)}

    apps = {}
    for app in (work / "ingest" / "spark-events").iterdir():  # one application per run, named after its variant
        events = read_event_log(app)
        start = next(e for e in events if e["Event"] == "SparkListenerApplicationStart")
        conf = next(e for e in events if e["Event"] == "SparkListenerEnvironmentUpdate")["Spark Properties"]
        apps[start["App Name"]] = dict(conf)
    assert set(apps) == {f"faultline-bench-{v}" for v in variants}
    assert "spark.plugins" not in apps["faultline-bench-cpu-spark"]
    assert apps["faultline-bench-cpu-spark-cores1"]["spark.master"] == "local[1]"
    assert "spark.plugins" not in apps["faultline-bench-cpu-spark-cores1"]
    assert apps["faultline-bench-rapids-tasks2"]["spark.shuffle.manager"].endswith("RapidsShuffleManager")
    # on Spark 4 the plugin puts its shuffle manager in by itself; this switch tells it to use Spark's own shuffle
    assert apps["faultline-bench-rapids-tasks2-spark-shuffle"]["spark.rapids.shuffle.enabled"] == "false"
    assert "spark.rapids.shuffle.enabled" not in apps["faultline-bench-rapids-tasks2"]
    # ingest.extra_conf reaches every variant, and the report says what it was (a ceiling run is told apart)
    assert rep["extra_conf"] == {"spark.faultline.probe": "on"}
    assert {c.get("spark.faultline.probe") for c in apps.values()} == {"on"}
