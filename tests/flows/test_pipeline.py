"""End to end: the real flow (Prefect, Spark, GX, Dask, Horovod x2, MLflow) through the CLI."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.helpers import SMALL, faultline, last_json

pytestmark = [pytest.mark.slow, pytest.mark.spark, pytest.mark.horovod]


@pytest.fixture(scope="module")
def first_run(pipeline_run):
    return pipeline_run


def test_pipeline_runs_every_stage(first_run):
    root, summary, proc = first_run
    assert summary["status"] == "completed" and summary["run_id"]
    assert list(summary["stages"]) == ["validate", "ingest", "features", "train", "evaluate"]
    for name, st in summary["stages"].items():
        assert st["cached"] is False, name
        assert Path(st["output"], "_manifest.json").is_file()
    ing = summary["stages"]["ingest"]
    assert ing["rows_in"] == ing["rows_out"] + ing["rows_quarantined"] and ing["rows_quarantined"] > 0
    timings = json.loads(Path(summary["stages"]["evaluate"]["output"], "_manifest.json").read_text())["timings_s"]
    assert set(timings) == {"read_rows", "tree_fit", "tree_predict", "oracles", "model_scores", "metrics"}
    assert all(v >= 0 for v in timings.values())
    m = summary["metrics"]
    assert 0 <= m["pr_auc"] <= 1 and 0 <= m["baseline_pr_auc"] <= 1 and "recall_at_p90" in m
    # the simulated exports carry the simulator's hidden state: the oracles (own state, full state) are fitted
    assert 0 <= m["oracle_pr_auc"] <= 1 and 0 <= m["oracle_own_pr_auc"] <= 1 and m["baseline_gpu"] == 0
    assert m["baseline_iterations"] >= 1 and m["baseline_max_depth"] in (4, 6, 8)
    assert "held-out metrics" in proc.stdout and "MLflow run" in proc.stdout and "served model: " in proc.stdout


def test_mlflow_holds_the_run(first_run):
    from mlflow.tracking import MlflowClient

    root, summary, _ = first_run
    client = MlflowClient(f"sqlite:///{root / 'mlflow.db'}")
    run = client.get_run(summary["mlflow_run_id"])
    assert run.info.status == "FINISHED"
    assert run.data.params["train.engine"] == "horovod" and run.data.params["workload.days"] == "3"
    assert {"pr_auc", "baseline_pr_auc", "rule_pr_auc", "train_loss", "ingest.rows_quarantined"} <= set(
        run.data.metrics
    )
    assert len(client.get_metric_history(run.info.run_id, "train_loss")) == 2  # one per epoch
    assert run.data.tags["data_fingerprint"] and run.data.tags["code_version"]
    arts = {a.path for a in client.list_artifacts(run.info.run_id)}
    assert {"plots", "manifests", "profile", "history.json", "features"} <= arts
    report = Path(client.download_artifacts(run.info.run_id, "features/dask-performance.html", str(root / "dl")))
    page = report.read_text()  # Dask's performance report, self-contained: no script from a CDN
    assert "Dask Performance Report" in page and "cdn.bokeh.org" not in page, page[:500]
    import mlflow.pyfunc
    import numpy as np

    mlflow.set_tracking_uri(f"sqlite:///{root / 'mlflow.db'}")
    served = mlflow.pyfunc.load_model("models:/faultline-fault-gnn@champion")  # what a NOC loads and scores with
    shape = served.metadata.get_input_schema().inputs[0].shape  # (-1, window, elements, features): raw values
    p = served.predict(np.full((2, *shape[1:]), np.nan, np.float32))  # every value missing: still a probability
    assert p.shape == (2, shape[2]) and ((p >= 0) & (p <= 1)).all()
    kind = summary["served"]["kind"]
    assert (
        kind in ("stack", "model")
        and summary["served"]["metrics"]["pr_auc"]
        == summary["metrics"]["stack_pr_auc" if kind == "stack" else "pr_auc"]
    )
    system = {k for k in run.data.metrics if k.startswith("system/")}  # MLflow's SystemMetricsMonitor: the tab
    assert {"system/cpu_utilization_percentage", "system/system_memory_usage_megabytes"} <= system, system
    assert len(client.get_metric_history(run.info.run_id, "system/cpu_utilization_percentage")) >= 2


def test_rerun_skips_every_stage(first_run):
    root, summary, _ = first_run
    proc = faultline("-v", "run", *SMALL, "--set", f"paths.root={root}", "--json", root=root)
    assert proc.returncode == 0, proc.stderr[-3000:]
    again = last_json(proc.stdout)
    assert all(st["cached"] for st in again["stages"].values())
    shown = proc.stdout + proc.stderr  # Prefect's log (-v): each reused stage finished as Cached, not Completed
    assert shown.count("Finished in state Cached(") == 6, shown[-3000:]  # raw exports + the five stages
    assert again["metrics"]["pr_auc"] == summary["metrics"]["pr_auc"]
    assert again["mlflow_run_id"] != summary["mlflow_run_id"]
    assert again["registered_model"] == summary["registered_model"]  # the same weights: no new registry version


def test_from_features_on_an_existing_lake(first_run):
    root, summary, _ = first_run
    lake = summary["stages"]["ingest"]["output"]
    proc = faultline(
        "run",
        *SMALL,
        "--set",
        f"paths.root={root}",
        "--from",
        "features",
        "--lake",
        lake,
        "--until",
        "features",
        "--json",
        root=root,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = last_json(proc.stdout)
    assert list(out["stages"]) == ["features"] and out["stages"]["features"]["cached"] is True


def test_malformed_file_is_rejected_with_exit_2(tmp_path):
    from tasks.core.stages.simulate import simulate

    raw = tmp_path / "raw"
    simulate("topozoo/Abilene", 2, 3, raw)
    p = raw / "kpi" / "kpi_2026-01-06.csv"
    p.write_text(p.read_text().replace("packet_loss_pct", "pkt_loss", 1))
    proc = faultline("run", "--raw", str(raw), "--set", f"paths.root={tmp_path}", "--json", root=tmp_path)
    assert proc.returncode == 2, proc.stderr[-3000:]
    out = last_json(proc.stdout)
    assert out["status"] == "rejected" and out["column"] == "packet_loss_pct"
    assert out["file"].endswith("kpi_2026-01-06.csv")
    assert "kpi_2026-01-06.csv" in proc.stderr and "packet_loss_pct" in proc.stderr
    assert "Retrying" not in proc.stdout + proc.stderr  # deterministic rejections are not retried


def test_unknown_config_key_exit_2(tmp_path):
    proc = faultline("run", "--set", "train.epoch=3", "--json", root=tmp_path)
    assert proc.returncode == 2
    assert "unknown key 'train.epoch'" in proc.stderr
    assert last_json(proc.stdout)["status"] == "rejected"


def test_unknown_topology_is_rejected_before_anything_starts(tmp_path):
    import time

    started = time.time()
    proc = faultline("run", "--topology", "topozoo/Nowhere", "--set", f"paths.root={tmp_path}", "--json", root=tmp_path)
    assert proc.returncode == 2 and "unknown topology 'topozoo/Nowhere'" in proc.stderr
    assert time.time() - started < 10 and "Traceback" not in proc.stderr
    assert not (tmp_path / "mlflow.db").exists()  # no MLflow run was opened


def test_refresh_train_retrains_from_scratch(first_run):
    """Issue 17 item 7: with intact checkpoints, --refresh train trains every epoch again and replaces the output."""
    import json

    root, summary, _ = first_run
    before = json.loads(Path(summary["stages"]["train"]["output"], "_manifest.json").read_text())
    proc = faultline("run", *SMALL, "--set", f"paths.root={root}", "--refresh", "train", "--json", root=root)
    assert proc.returncode == 0, proc.stderr[-3000:]
    again = last_json(proc.stdout)
    assert again["stages"]["train"]["cached"] is False and again["stages"]["features"]["cached"] is True
    after = json.loads(Path(again["stages"]["train"]["output"], "_manifest.json").read_text())
    assert after["resumed_from_epoch"] is None and len(after["history"]) == 2
    assert (
        after["written_at"] >= before["written_at"] and after["history"][0]["t_start"] > before["history"][-1]["t_end"]
    )
