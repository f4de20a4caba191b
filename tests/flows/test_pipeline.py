"""End to end: the real flow (Prefect, Spark, GX, Dask, Horovod x2, MLflow) through the CLI."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.helpers import SHARED_PREFECT, SMALL, faultline, last_json

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
    assert set(timings) == {"read_rows", "tree_fit", "tree_predict", "model_scores", "metrics", "plots", "served"}
    assert all(v >= 0 for v in timings.values())
    feats = json.loads(Path(summary["stages"]["features"]["output"], "_manifest.json").read_text())["timings_s"]
    assert set(feats) == {"cluster_start", "days", "cluster_close"} and feats["days"] > 0  # start-up apart
    came = json.loads(Path(summary["stages"]["features"]["output"], "_manifest.json").read_text())["cluster_ahead"]
    assert came["start_s"] > 0 and feats["cluster_start"] < came["start_s"]  # started beside ingest, waited less
    assert len(came["primed"]) == 2 and min(came["primed"]) > 0  # each worker's imports and IO set-up, paid then
    m = summary["metrics"]
    assert 0 <= m["pr_auc"] <= 1 and 0 <= m["baseline_pr_auc"] <= 1 and "recall_at_p90" in m
    # the oracles (fitted on the simulator's hidden state) are a diagnostic the quality bench asks for: not here
    assert not any(k.startswith("oracle") for k in m) and m["baseline_gpu"] == 0
    assert m["baseline_iterations"] >= 1 and m["baseline_max_depth"] in (4, 6, 8)
    assert "held-out metrics" in proc.stdout and "MLflow run" in proc.stdout and "served model: " in proc.stdout


def test_a_cli_run_on_a_prefect_server_logs_there_and_beats_quietly(first_run):
    """The CLI run sent to a Prefect server (the suite's, as `make ui`'s would be): its INFO lines are in the flow
    run's logs (the UI's Logs tab), not on the console without -v, and it emits Prefect's flow-run heartbeat at
    the cadence the zombie-run automation expects (a live CLI run is never taken for a dead one)."""
    from tests.helpers import prefect_api

    _, summary, proc = first_run
    logs = prefect_api("/logs/filter", {"logs": {"flow_run_id": {"any_": [summary["run_id"]]}}, "limit": 200})
    messages = [entry["message"] for entry in logs if entry["level"] == 20]  # INFO
    assert any(m.startswith("validate computed in") for m in messages), messages[:20]
    assert " | INFO " not in proc.stderr  # the console stays quiet
    beats = prefect_api(
        "/events/filter",
        {"filter": {"event": {"name": ["prefect.flow-run.heartbeat"]},
                    "resource": {"id": [f"prefect.flow-run.{summary['run_id']}"]}}, "limit": 50},
    )  # fmt: skip
    assert beats["events"], "no flow-run heartbeat from the CLI run"


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
    for key in ("pr_auc", "roc_auc", "stack_pr_auc", "baseline_pr_auc"):  # the served model's own figures, logged
        assert run.data.metrics[key] == summary["metrics"][key], key  # under the same keys, do not hide the GNN's
    assert run.data.tags["data_fingerprint"] and run.data.tags["code_version"]
    arts = {a.path for a in client.list_artifacts(run.info.run_id)}
    assert {"plots", "manifests", "profile", "history.json", "features"} <= arts
    report = Path(client.download_artifacts(run.info.run_id, "features/dask-performance.html", str(root / "dl")))
    page = report.read_text()  # Dask's performance report, self-contained: no script from a CDN
    assert "Dask Performance Report" in page and "cdn.bokeh.org" not in page, page[:500]
    import mlflow.pyfunc
    import numpy as np

    mlflow.set_tracking_uri(f"sqlite:///{root / 'mlflow.db'}")
    name = summary["registered_model"].split("/")[0]  # one registered model per network
    assert name == "faultline-fault-topozoo-abilene"
    assert run.info.run_name == "topozoo/Abilene 2026-01-05..2026-01-07 (local)"
    assert run.data.tags["network"] == "topozoo/Abilene" and run.data.tags["data_source"] == "simulated"
    (dataset,) = run.inputs.dataset_inputs  # the raw exports as the run's dataset, digested by their fingerprint
    assert dataset.dataset.digest and dataset.dataset.name == "topozoo/Abilene 2026-01-05..2026-01-07"
    served = mlflow.pyfunc.load_model(f"models:/{name}@champion")  # what a NOC loads and scores with
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
    apps = set((root / "store" / "spark-events").iterdir())
    proc = faultline("-v", "run", *SMALL, "--set", f"paths.root={root}", "--json", root=root)
    assert proc.returncode == 0, proc.stderr[-3000:]
    again = last_json(proc.stdout)
    assert all(st["cached"] for st in again["stages"].values())
    assert set((root / "store" / "spark-events").iterdir()) == apps  # nothing to validate: no Spark started ahead
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


@pytest.mark.parametrize("case", ["missing", "unknown-element"])
def test_a_bad_raw_directory_is_refused_in_two_seconds_in_one_line(tmp_path, case):
    """The preflight runs before any engine: one line naming the directory or the link, exit 2, no traceback."""
    import shutil
    import time

    raw = tmp_path / "raw"
    if case == "unknown-element":
        shutil.copytree(Path(__file__).resolve().parents[2] / "docs" / "example-network", raw)
        g = raw / "topology.graphml"
        g.write_text(g.read_text().replace('target="rtr-zrh-01"', 'target="rtr-xx-99"', 1))
    SHARED_PREFECT.start()  # the suite's API, started once by whichever test comes first: not this command's time
    started = time.time()
    proc = faultline("run", "--raw", str(raw), "--set", f"paths.root={tmp_path / 'store'}", root=tmp_path)
    took = time.time() - started
    assert proc.returncode == 2 and took < 2.0 + 1.5, (took, proc.stderr)  # 2 s, plus this test's interpreter start
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
    expected = "no such directory" if case == "missing" else "topology.graphml: not a valid topology (link"
    assert expected in lines[0] and ("rtr-xx-99" in lines[0] or case == "missing"), lines[0]
    assert not (tmp_path / "store").exists()  # nothing started, nothing written


def test_the_example_network_runs_as_shipped(tmp_path):
    """docs/example-network (its own ids, a GraphML topology, one day's timestamps with a +0100 offset) through
    every stage; the run is named after the network and its days, without simulator params."""
    from mlflow.tracking import MlflowClient

    example = Path(__file__).resolve().parents[2] / "docs" / "example-network"
    quick = ["--set", "train.epochs=2", "--set", "train.hidden=8", "--set", "ingest.master=local[2]"]
    proc = faultline("run", "--raw", str(example), *quick, "--set", f"paths.root={tmp_path}", "--json", root=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = last_json(proc.stdout)
    ing = out["stages"]["ingest"]
    assert ing["rows_in"] == ing["rows_out"] + ing["rows_quarantined"] and ing["rows_out"] > 0.97 * 3 * 8 * 288
    val = json.loads(Path(out["stages"]["validate"]["output"], "_manifest.json").read_text())
    ahead = val["spark_started_ahead"]  # Spark's application started beside MLflow's run, its first query run
    assert (
        ahead["session_s"] > 0 and ahead["first_query_s"] > 0 and val["timings_s"]["spark_start"] < ahead["session_s"]
    )
    run = MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}").get_run(out["mlflow_run_id"])
    assert run.info.run_name == "metro-west 2026-01-05..2026-01-07 (local)"
    assert run.data.tags["data_source"] == str(example) and not any(k.startswith("workload.") for k in run.data.params)
    assert out["registered_model"].startswith("faultline-fault-metro-west/")


def test_a_literal_secret_is_refused_and_never_reaches_prefect(tmp_path):
    """A password in --set would become a flow-run parameter, which Prefect stores and shows unmasked: refused
    with exit 2 and the hint, before any flow run exists; the Prefect database holds no trace of it."""
    from tests.helpers import SHARED_PREFECT

    secret = "hunter2-cli-s3cr3t"
    uri = f"mlflow.tracking_uri=https://alice:{secret}@mlflow.example:5000"
    proc = faultline("run", "--set", uri, "--set", f"paths.root={tmp_path}", "--json", root=tmp_path)
    assert proc.returncode == 2 and "${env:NAME}" in proc.stderr, proc.stderr
    assert secret not in proc.stdout + proc.stderr
    stored = b"".join(p.read_bytes() for p in SHARED_PREFECT.home.glob("*.db*"))  # the database and its WAL
    assert stored and secret.encode() not in stored


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
    """With intact checkpoints, --refresh train trains every epoch again and replaces the output."""
    import json

    root, summary, _ = first_run
    from tasks.core.training.checkpoint import weights_digest

    before = json.loads(Path(summary["stages"]["train"]["output"], "_manifest.json").read_text())
    weights = weights_digest(Path(summary["stages"]["train"]["output"], "model.pt"))
    proc = faultline("run", *SMALL, "--set", f"paths.root={root}", "--refresh", "train", "--json", root=root)
    assert proc.returncode == 0, proc.stderr[-3000:]
    again = last_json(proc.stdout)
    assert again["stages"]["train"]["cached"] is False and again["stages"]["features"]["cached"] is True
    after = json.loads(Path(again["stages"]["train"]["output"], "_manifest.json").read_text())
    assert after["resumed_from_epoch"] is None and len(after["history"]) == 2
    assert (
        after["written_at"] >= before["written_at"] and after["history"][0]["t_start"] > before["history"][-1]["t_end"]
    )
    # evaluation is keyed by the weights it scores: reused only where retraining reproduced them bit for bit
    same = weights_digest(Path(again["stages"]["train"]["output"], "model.pt")) == weights
    assert again["stages"]["evaluate"]["cached"] is same


def test_validate_and_ingest_share_one_spark_application_and_one_parse(first_run):
    """Validate and ingest run in one Spark application, named for both and ended with ingest; ingest took the frames
    validation parsed and cached (its manifest says so), so none of its queries scans a CSV or JSON file. Its
    quarantine still matches validation's counts reason for reason (the stage checks it) and rows in = out +
    quarantined (above)."""
    from tasks.core.sparkops import read_event_log

    root, summary, _ = first_run
    apps = {}
    for app in (root / "store" / "spark-events").iterdir():
        events = read_event_log(app)
        assert any(e["Event"] == "SparkListenerApplicationEnd" for e in events)  # stopped, not left running
        apps[next(e for e in events if e["Event"] == "SparkListenerApplicationStart")["App Name"]] = events
    assert list(apps) == ["faultline-validate-ingest"]
    manifest = json.loads(Path(summary["stages"]["ingest"]["output"], "_manifest.json").read_text())
    assert manifest["raw_parse"] == "validation's, in the same Spark application"
    assert manifest["timings_s"]["spark_start"] < 1.0  # validation's session, already running
    sql = [e for e in apps["faultline-validate-ingest"] if e["Event"].endswith("SQLExecutionStart")]
    plans = [e["physicalPlanDescription"] for e in sql if e.get("description", "").startswith("ingest ")]
    assert plans and not [p for p in plans if "FileScan csv" in p or "FileScan json" in p], plans[:1]
    assert any("InMemoryTableScan" in p for p in plans)
