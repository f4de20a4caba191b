"""The benchmark flow at a small size (a test of the flow, not of speed): baseline and scaling reports."""

from __future__ import annotations

import json

import pytest

from tasks.core.bench_scaling import efficiency, worker_counts
from tests.helpers import faultline, last_json


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
