"""Ingest on a real Spark standalone cluster (a master and two workers on loopback, started from
pyspark's own ``spark-class``) gives the same lake as ``local[*]``."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest

from tasks.core.config import load_config
from tasks.core.ports import free_port
from tasks.core.stages.ingest import run_ingest
from tasks.core.stages.raw import discover

pytestmark = [pytest.mark.spark, pytest.mark.slow]

INGEST_IN_A_CHILD = """
import sys
from pathlib import Path
from tasks.core.config import load_config
from tasks.core.stages.ingest import run_ingest
from tasks.core.stages.raw import discover
from tasks.core.runtime import detect_hardware, spark_conf, spark_session
cfg = load_config("local", [f"ingest.master={sys.argv[1]}", "ingest.executor_memory_gb=0.6",
                            "ingest.shuffle_partitions=2", "ingest.extra_conf={'spark.cores.max': '2'}"])
spark = spark_session(spark_conf(cfg.ingest, detect_hardware(), Path(sys.argv[3]) / "events"))
assert spark.sparkContext.master == sys.argv[1]
run_ingest(spark, discover(Path(sys.argv[2])), Path(sys.argv[3]) / "lake", cfg.ingest)
print("workers", spark.sparkContext._jsc.sc().getExecutorMemoryStatus().size() - 1)
spark.stop()
"""


def _wait_for(port: int, timeout: float = 60) -> None:
    deadline = time.time() + timeout
    while time.time() < deadline:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.5)
    raise TimeoutError(f"nothing listening on 127.0.0.1:{port}")


@pytest.fixture()
def standalone_cluster(tmp_path):
    import pyspark

    spark_class = str(Path(pyspark.__file__).parent / "bin" / "spark-class")
    env = {**os.environ, "SPARK_LOCAL_IP": "127.0.0.1", "SPARK_WORKER_DIR": str(tmp_path / "work")}
    port, ui = free_port(), free_port()
    procs = [
        subprocess.Popen(
            [
                spark_class,
                "org.apache.spark.deploy.master.Master",
                "--host",
                "127.0.0.1",
                "--port",
                str(port),
                "--webui-port",
                str(ui),
            ],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
    ]
    _wait_for(port)
    url = f"spark://127.0.0.1:{port}"
    for _ in range(2):
        procs.append(
            subprocess.Popen(
                [
                    spark_class,
                    "org.apache.spark.deploy.worker.Worker",
                    "--host",
                    "127.0.0.1",
                    "--cores",
                    "1",
                    "--memory",
                    "1g",
                    "--webui-port",
                    str(free_port()),
                    url,
                ],
                env=env,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
        )
    time.sleep(5)
    yield url
    for p in procs:
        p.terminate()
    for p in procs:
        p.wait(timeout=30)


def test_standalone_matches_local(spark, tiny_raw, tmp_path, standalone_cluster):
    out = tmp_path / "cluster"
    proc = subprocess.run(
        [sys.executable, "-c", INGEST_IN_A_CHILD, standalone_cluster, str(tiny_raw), str(out)],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=Path(__file__).resolve().parents[2],
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "workers 2" in proc.stdout
    local = tmp_path / "local"
    local.mkdir()
    run_ingest(spark, discover(tiny_raw), local, load_config("local").ingest)
    for part in ("kpi", "alarms", "quarantine/kpi", "quarantine/alarms"):
        a = pd.read_parquet(out / "lake" / part)
        b = pd.read_parquet(local / part)
        key = [c for c in ("element_id", "timestamp", "alarm_id", "_corrupt_record") if c in a.columns]
        a = a.drop(columns=["_source_file"], errors="ignore").sort_values(key, na_position="first")
        b = b.drop(columns=["_source_file"], errors="ignore").sort_values(key, na_position="first")
        pd.testing.assert_frame_equal(a.reset_index(drop=True), b.reset_index(drop=True), check_categorical=False)
