from __future__ import annotations

import os
from pathlib import Path

import pytest

os.environ.setdefault("GX_ANALYTICS_ENABLED", "false")
os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")
os.environ.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "120")  # a busy 2-core CI host


def pytest_collection_modifyitems(config, items):
    """GPU tests skip without a GPU, unless REQUIRE_GPU=1 says one must be there."""
    from tasks.core.runtime import detect_hardware

    gpus = detect_hardware().gpu_count
    require = os.environ.get("REQUIRE_GPU") == "1"
    for item in items:
        need = 2 if "multi_gpu" in item.keywords else 1 if "gpu" in item.keywords else 0
        if need and gpus < need and not require:
            item.add_marker(pytest.mark.skip(reason=f"needs {need} GPU(s), found {gpus} (REQUIRE_GPU=1 to fail)"))


@pytest.fixture(scope="session")
def spark(tmp_path_factory):
    """One Spark session for the whole suite: local[2], UI off."""
    from tasks.core.config import load_config
    from tasks.core.runtime import detect_hardware, spark_conf, spark_session

    cfg = load_config("local", ["ingest.master=local[2]", "ingest.shuffle_partitions=2"])
    session = spark_session(spark_conf(cfg.ingest, detect_hardware(), tmp_path_factory.mktemp("spark-events")))
    yield session
    session.stop()


@pytest.fixture(scope="session")
def rapids_jar() -> Path:
    """The RAPIDS Accelerator jar: Maven Central, SHA-1 checked; once per machine (the bundle carries it)."""
    from deployments.setup.wheelhouse import CACHE, rapids_jar

    return rapids_jar(CACHE / "jars")


@pytest.fixture(scope="session")
def tiny_raw(tmp_path_factory) -> Path:
    """Three days of Abilene (11 elements) with 2 % dirt."""
    from tasks.core.stages.simulate import simulate

    out = tmp_path_factory.mktemp("raw")
    simulate("topozoo/Abilene", 3, 11, out, dirt=0.02)
    return out


@pytest.fixture(scope="session")
def tiny_lake(spark, tiny_raw, tmp_path_factory) -> Path:
    from tasks.core.config import load_config
    from tasks.core.stages.ingest import run_ingest
    from tasks.core.stages.raw import discover

    out = tmp_path_factory.mktemp("lake")
    run_ingest(spark, discover(tiny_raw), out, load_config("local").ingest)
    return out


@pytest.fixture(scope="session")
def tiny_features(tiny_lake, tmp_path_factory) -> Path:
    from tasks.core.config import load_config
    from tasks.core.runtime import dask_cluster, dask_spec, detect_hardware
    from tasks.core.stages.features import features_stage

    cfg = load_config("local").features
    out = tmp_path_factory.mktemp("features")
    with dask_cluster(dask_spec(cfg, "pandas", detect_hardware())) as client:
        features_stage(client, tiny_lake, cfg, "pandas", out)
    return out


@pytest.fixture(scope="session")
def pipeline_run(tmp_path_factory):
    """One real pipeline run (small workload) through the CLI: (root, JSON summary, process)."""
    from tests.helpers import SMALL, faultline, last_json

    root = tmp_path_factory.mktemp("e2e")
    proc = faultline("run", *SMALL, "--set", f"paths.root={root}", "--json", root=root)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-5000:]
    return root, last_json(proc.stdout), proc
