from __future__ import annotations

import os
from pathlib import Path

import pytest

os.environ.setdefault("GX_ANALYTICS_ENABLED", "false")
os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")


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
def tiny_raw(tmp_path_factory) -> Path:
    """Three days of Abilene (11 elements) with 2 % dirt."""
    from tasks.core.simulate import simulate

    out = tmp_path_factory.mktemp("raw")
    simulate("topozoo/Abilene", 3, 11, out, dirt=0.02)
    return out
