"""The features' Dask cluster started ahead (beside ingest) and taken by the stage: fake clusters, no Dask."""

from __future__ import annotations

import json
import logging
import threading

import pytest

from tasks.core import clusters
from tasks.core.runtime import dask_cluster

SPEC = {"kind": "cuda", "kwargs": {"n_workers": 1}}


class FakeCluster:
    def __init__(self, spec, started: list) -> None:
        self.spec, self.closed, self.thread = spec, False, threading.current_thread().name
        started.append(self)

    def close(self) -> None:
        self.closed = True

    def run(self, fn):  # the client's run: ``fn`` on every worker, keyed by worker
        return {"tcp://w0": fn(), "tcp://w1": fn()}


@pytest.fixture
def started(monkeypatch):
    made: list[FakeCluster] = []

    def start(spec):
        if spec.get("fail"):
            raise RuntimeError("no worker came up")
        cluster = FakeCluster(spec, made)
        return cluster, cluster  # the client closes with the cluster here

    monkeypatch.setattr(clusters, "start_cluster", start)
    return made


def test_the_stage_takes_the_cluster_started_ahead_and_closes_it(started):
    with clusters.cluster_ahead(SPEC) as start:
        assert start is not None and start.result()[0].thread.startswith("dask-ahead")  # started in a thread
        came: dict = {}
        with dask_cluster(dict(SPEC), came) as client:
            assert client is started[0] and not client.closed
        assert started[0].closed and len(started) == 1  # taken, not started again; closed by the stage
        assert came["start_s"] >= 0 and came["waited_s"] >= 0
    assert len(started) == 1


def test_each_worker_is_primed_once_it_is_up_and_a_failed_priming_is_said_not_raised(started):
    with clusters.cluster_ahead(SPEC, lambda: 0.25):
        came: dict = {}
        with dask_cluster(SPEC, came):
            assert came["primed"] == [0.25, 0.25]

    def broken():
        raise ImportError("no cudf here")

    with clusters.cluster_ahead(SPEC, broken):
        came = {}
        with dask_cluster(SPEC, came) as client:
            assert came["primed"] == "ImportError: no cudf here" and not client.closed


def test_a_worker_is_primed_on_its_backend_in_seconds():
    from tasks.core.stages.features import prime_worker

    assert 0 < prime_worker("pandas") < 30


def test_a_cluster_no_stage_took_is_closed_with_its_scope(started):
    with clusters.cluster_ahead(SPEC):
        with dask_cluster({"kind": "local", "kwargs": {}}) as client:  # another spec: its own cluster
            assert client is started[1]
        assert not started[0].closed
    assert started[0].closed and started[1].closed


def test_a_failed_start_ahead_leaves_the_stage_to_start_its_own(started, caplog):
    spec = {**SPEC, "fail": True}
    with caplog.at_level(logging.WARNING), clusters.cluster_ahead(spec):
        with pytest.raises(RuntimeError, match="no worker came up"), dask_cluster(spec):
            pass  # the stage's own start fails the same way, and says so
    assert "failed to start: no worker came up" in caplog.text
    with clusters.cluster_ahead(None) as none, clusters.cluster_ahead({"kind": "scheduler", "address": "x"}) as sch:
        assert none is None and sch is None and not started


def test_features_are_pending_unless_the_store_holds_them_for_the_lake_ingest_will_write(tmp_path):
    from tasks.core.config import load_config
    from tasks.core.runtime import resolve_runtime
    from tasks.core.store import MANIFEST, StageOutput, stage_dir, stage_fingerprint
    from tasks.features import features_pending
    from tasks.ingest import ingest_inputs

    cfg = load_config("local", [f"paths.root={tmp_path}"])
    rt = resolve_runtime(cfg, tmp_path)
    validation = StageOutput("validate", "v" * 20, tmp_path, False, {"input_fingerprints": {"raw": "r" * 20}})
    assert features_pending(cfg, rt, tmp_path, validation, False)
    lake_fp = stage_fingerprint("ingest", ingest_inputs(validation), cfg.ingest)
    done = stage_dir(tmp_path, "features", stage_fingerprint("features", {"ingest": lake_fp}, cfg.features, rt.backend))
    done.mkdir(parents=True)
    (done / MANIFEST).write_text(json.dumps({"stage": "features"}))
    assert not features_pending(cfg, rt, tmp_path, validation, False)
    assert features_pending(cfg, rt, tmp_path, validation, True)  # forced: computed again


def test_a_gpu_worker_starts_beside_spark_only_where_its_pool_fits_in_what_the_plugin_leaves():
    from tasks.core.clusters import room_beside_spark

    plugin = {"spark.plugins": "com.nvidia.spark.SQLPlugin", "spark.rapids.memory.gpu.maxAllocFraction": "0.8"}
    gpu = {"kind": "cuda", "kwargs": {"rmm_pool_size": "8GB"}}
    assert room_beside_spark(gpu, plugin, 79.6) == ""  # 7.5 GiB + 1 in the 15.9 GiB left
    assert "64.0-GiB RMM pool" in room_beside_spark(
        {"kind": "cuda", "kwargs": {"rmm_pool_size": "64GiB"}}, plugin, 79.6
    )
    assert room_beside_spark(gpu, {}, 79.6) == ""  # Spark on the CPU takes no GPU memory
    assert room_beside_spark({"kind": "local", "kwargs": {}}, plugin, 79.6) == ""
