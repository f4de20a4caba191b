from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

# An xdist worker's __main__ has neither __spec__ nor __file__, which pyspark.sql.connect (imported by GX) takes for
# a doctest run without Spark Connect's dependencies, and exits the process: give it the file it looks for.
_main = sys.modules["__main__"]
if getattr(_main, "__spec__", None) is None and not hasattr(_main, "__file__"):
    _main.__file__ = __file__

os.environ.setdefault("GX_ANALYTICS_ENABLED", "false")
os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")
os.environ.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "120")  # a busy 2-core CI host


# Fixtures that start an engine (a JVM, a Dask cluster, a Prefect API, the CLI): a test using one is an engine test.
ENGINE_FIXTURES = {"spark", "tiny_lake", "tiny_features", "pipeline_run", "rapids_jar"}
ENGINE_MARKERS = {"spark", "gpu", "multi_gpu", "horovod", "slow", "browser", "engine"}
FAST_LANE = os.environ.get("FAULTLINE_TEST_LANE") == "fast"


@pytest.hookimpl(tryfirst=True)  # before -m deselects: the marker must be there when it looks
def pytest_collection_modifyitems(config, items):
    """Every test that starts an engine carries the ``engine`` marker (``make test-fast`` deselects them); GPU
    tests skip without a GPU, unless REQUIRE_GPU=1 says one must be there."""
    from tasks.core.runtime import detect_hardware

    gpus = detect_hardware().gpu_count
    require = os.environ.get("REQUIRE_GPU") == "1"
    _group_for_workers(items)
    for item in items:
        if ENGINE_MARKERS & set(item.keywords) or ENGINE_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.engine)
        need = 2 if "multi_gpu" in item.keywords else 1 if "gpu" in item.keywords else 0
        if need and gpus < need and not require:
            item.add_marker(pytest.mark.skip(reason=f"needs {need} GPU(s), found {gpus} (REQUIRE_GPU=1 to fail)"))


def _group_for_workers(items) -> None:
    """With ``-n N --dist loadgroup`` (make test): a file's tests run on one worker, in order (module fixtures
    such as the UI stack are built once), and the files that read the one prepared pipeline run share a worker;
    a file whose tests share nothing says ``SPREAD_OVER_WORKERS = True`` and its tests go to any worker (its long
    end-to-end tests then do not queue behind each other on one worker).
    (Letting independent end-to-end tests of one file run on both workers at once measured slower: 1,283 s
    against 1,208 s for the suite, the two runs contending for the same two cores.)"""
    shared = {i.nodeid.split("::")[0] for i in items if "pipeline_run" in getattr(i, "fixturenames", ())}
    for item in items:
        path = item.nodeid.split("::")[0]
        if getattr(item.module, "SPREAD_OVER_WORKERS", False):  # tests that share nothing: each on any worker
            group = item.nodeid
        else:
            group = "pipeline_run" if path in shared else path
        item.add_marker(pytest.mark.xdist_group(group))


@pytest.fixture(autouse=True)
def _fast_lane_starts_no_engine(request, monkeypatch):
    """In the fast lane (FAULTLINE_TEST_LANE=fast) a test that starts Spark, a Dask cluster, a Horovod launch or
    the CLI fails at once, naming the marker it lacks: the lane stays fast because nothing slips into it."""
    if not FAST_LANE or request.node.get_closest_marker("engine"):
        return

    def refuse(what: str):
        def _start(*_a, **_k):
            pytest.fail(f"{request.node.nodeid} starts {what} in the fast lane: mark it @pytest.mark.engine")

        return _start

    import tasks.core.runtime as runtime

    monkeypatch.setattr(runtime, "spark_session", refuse("Spark"))
    monkeypatch.setattr(runtime, "dask_cluster", refuse("a Dask cluster"))
    monkeypatch.setenv("FAULTLINE_TEST_NODE", request.node.nodeid)  # tests.helpers.faultline refuses to start
    monkeypatch.setenv("JAVA_HOME", "/nonexistent/fast-lane-starts-no-jvm")
    monkeypatch.setenv("PREFECT_API_URL", "http://127.0.0.1:9/api")  # a flow run has no API to reach


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


def pytest_sessionfinish(session, exitstatus):
    from tests.helpers import SHARED_PREFECT

    SHARED_PREFECT.stop()
