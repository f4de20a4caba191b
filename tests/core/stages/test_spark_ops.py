"""Spark people can operate: each Spark stage is its own application, named after it and stopped when
it ends; every job carries a group and a description; with the RAPIDS Accelerator configured, the stage's manifest
says which operators the plugin places on the GPU and which it leaves on the CPU, with its reasons.

The plugin runs here in ``explainOnly`` mode (the queries on the CPU, the plugin's placement reported): the real
jar, the same log parsing as on a GPU host, where ``executeOnGPU`` runs them."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

from tasks.core.sparkops import parse_explain, read_event_log

pytestmark = [pytest.mark.spark]

EXPLAIN = """
  !Exec <ProjectExec> cannot run on GPU because GPU plans may get incorrect file name from a CPU scan
    @Expression <AttributeReference> timestamp#0 could run on GPU
    !Exec <FileSourceScanExec> cannot run on GPU because GpuCSVScan always enforces schemas
*Exec <ShuffleExchangeExec> will run on GPU
  *Partitioning <HashPartitioning> will run on GPU
  *Exec <HashAggregateExec> will run on GPU
*Exec <HashAggregateExec> could run on GPU
!Exec <AdaptiveSparkPlanExec> cannot run on GPU because it is a wrapper
"""


def test_parse_explain_counts_placements_and_keeps_each_reason():
    got = parse_explain(EXPLAIN)
    assert got["on_gpu"] == {"HashAggregateExec": 2, "ShuffleExchangeExec": 1}
    assert got["exec_on_gpu"] == 3 and got["exec_on_cpu"] == 2 and got["gpu_share"] == 0.6
    assert got["fallbacks"] == [
        {"exec": "ProjectExec", "reason": "GPU plans may get incorrect file name from a CPU scan", "mentions": 1},
        {"exec": "FileSourceScanExec", "reason": "GpuCSVScan always enforces schemas", "mentions": 1},
    ]
    assert parse_explain("")["gpu_share"] is None


SCRIPT = textwrap.dedent(
    """
    import json, sys
    from pathlib import Path
    from tasks.core.config import load_config
    from tasks.core.runtime import resolve_runtime
    from tasks.core.stages.ingest import run_ingest
    from tasks.core.stages.raw import discover
    from tasks.runner import spark_stage

    raw, root, jar = map(Path, sys.argv[1:4])
    sets = ["ingest.master=local[2]", "ingest.shuffle_partitions=2", f"ingest.rapids_jar={jar}",
            "ingest.rapids_mode=explainOnly"]
    cfg = load_config("local", sets)
    rt = resolve_runtime(cfg, root)
    out = root / "lake"
    out.mkdir(parents=True)
    from pyspark import SparkContext
    from pyspark.sql import SparkSession
    jvm = []

    def body(spark):
        jvm.append(SparkContext._gateway.proc)
        return run_ingest(spark, discover(raw), out, cfg.ingest)

    got = spark_stage(rt, "ingest", out, body)
    ended = jvm[0].poll()  # the plugin's JVM ended with its application: its GPU memory handed back
    active = SparkSession.getActiveSession() is not None
    again = SparkSession.builder.master("local[1]").getOrCreate()  # a later Spark stage starts a new JVM
    print(json.dumps({**got, "active_after": active, "jvm_exit": ended, "again": again.range(3).count()}))
    """
)


def test_ingest_is_its_own_described_application_with_the_plugins_report(tiny_raw, rapids_jar, tmp_path):
    p = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(tiny_raw), str(tmp_path), str(rapids_jar)],
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert p.returncode == 0, p.stderr[-4000:]
    got = json.loads(p.stdout.strip().splitlines()[-1])
    assert got["active_after"] is False  # the stage stopped its session
    assert got["jvm_exit"] == 0 and got["again"] == 3  # and, the plugin being on, ended its JVM
    assert got["rows_in"] == got["rows_out"] + got["rows_quarantined"] and got["rows_quarantined"] > 0

    report = got["rapids"]
    assert report["mode"] == "explainOnly" and report["plugin"] == "com.nvidia.spark.SQLPlugin"
    assert (tmp_path / "lake" / report["explain_log"]).stat().st_size > 0  # the plugin's own lines, kept
    assert report["exec_on_gpu"] > 0 and report["exec_on_cpu"] > 0  # the plan is reported operator by operator
    assert all(f["exec"] and f["reason"] for f in report["fallbacks"])
    # both raw scans stay on the CPU, and the report says why rather than leaving it to be guessed: the plugin's
    # JSON reader cannot keep malformed records, which the quarantine needs, and its CSV reader silently drops them
    # (NVIDIA/cudf-spark#2065: malformed KPI lines came out as rows with nulls on a GPU host), so the
    # runtime turns GPU CSV reads off; nothing else about the CSV scan (timestamps are read as text and cast, the
    # schema enforced) would keep it off the GPU
    scans = [f["reason"] for f in report["fallbacks"] if f["exec"] == "FileSourceScanExec"]
    assert any("JsonFileFormat" in r for r in scans), scans
    assert any("spark.rapids.sql.format.csv.read.enabled" in r for r in scans), scans
    other = ("timestamp format", "enforces schemas")
    assert not [f for f in report["fallbacks"] if any(o in f["reason"] for o in other)]

    (app,) = (tmp_path / "spark-events").iterdir()  # Spark 4's rolling event log: a directory per application
    assert not list(app.glob("appstatus_*.inprogress"))  # the application ended
    events = read_event_log(app)
    start = next(e for e in events if e["Event"] == "SparkListenerApplicationStart")
    assert start["App Name"] == "faultline-ingest"
    assert any(e["Event"] == "SparkListenerApplicationEnd" for e in events)  # stopped, not left running
    # with the plugin the rows carry their file's number, as on the CPU (number_files), and its guard (a raise_error
    # in a conditional: a coalesce fails every KPI batch under the plugin) is placed on the GPU with the rest
    plans = [e.get("physicalPlanDescription", "") for e in events if e["Event"].endswith("SQLExecutionStart")]
    assert any("_file_no" in p and "raise_error(" in p for p in plans)
    assert not [f for f in report["fallbacks"] if "raise" in (f["exec"] + f["reason"]).lower()], report["fallbacks"]
    jobs = [e for e in events if e["Event"] == "SparkListenerJobStart"]
    assert jobs
    for job in jobs:
        props = job["Properties"]
        assert props.get("spark.jobGroup.id", "").startswith("ingest:"), props
        assert props.get("spark.job.description", "").startswith("ingest "), props
