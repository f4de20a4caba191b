"""One Spark application for a flow run's Spark stages (``sparkops.one_application``): the stages share the scope's
session, a later stage takes the frames an earlier one shared under the same key, and the scope's end unpersists
what is left and stops the session. Fake sessions and frames here: the real application is checked on the suite's
pipeline run (``tests/flows/test_pipeline.py``)."""

from __future__ import annotations

import pytest

import tasks.core.runtime as runtime
from tasks.core import sparkops


class FakeFrame:
    def __init__(self) -> None:
        self.persisted = True

    def unpersist(self) -> None:
        self.persisted = False


class FakeSession:
    def __init__(self, conf: dict[str, str]) -> None:
        self.conf = conf
        self.sparkContext = self  # noqa: N815 (pyspark's name)
        self._jsc = object()

    def stop(self) -> None:
        self._jsc = None

    def getConf(self):  # noqa: N802 (pyspark's name)
        return self.conf


def fake_sessions(monkeypatch, kind: type) -> list:
    """Sessions of ``kind`` in place of Spark's, each kept as it is started."""
    made: list = []

    def start(conf):
        made.append(kind(conf))
        return made[-1]

    from pyspark.sql import SparkSession

    monkeypatch.setattr(runtime, "spark_session", start)
    # a real session another test of this worker started is not this scope's business
    monkeypatch.setattr(SparkSession, "getActiveSession", classmethod(lambda cls: None))
    return made


@pytest.fixture()
def sessions(monkeypatch) -> list[FakeSession]:
    return fake_sessions(monkeypatch, FakeSession)


def test_stages_share_the_scopes_application_and_its_frames(sessions):
    kpi, alarms, other = FakeFrame(), FakeFrame(), FakeFrame()
    with sparkops.one_application("validate-ingest"):
        with sparkops.stage_spark({"k": "v"}, "validate") as first:
            assert sparkops.share_frames("files-a", {"kpi": kpi, "alarms": alarms})
            assert sparkops.share_frames("files-b", {"kpi": other})
        with sparkops.stage_spark({"k": "v"}, "ingest") as second:
            assert second is first and first._jsc is not None  # the same application, still running
            assert sparkops.take_frames(second, "files-c") is None  # other files: ingest reads them itself
            assert sparkops.take_frames(second, "files-a") == {"kpi": kpi, "alarms": alarms}
            assert sparkops.take_frames(second, "files-a") is None  # taken once: now the taker's to unpersist
            assert sparkops.take_frames(FakeSession({}), "files-b") is None  # not this application's frames
    assert [s.conf["spark.app.name"] for s in sessions] == ["faultline-validate-ingest"]
    assert first._jsc is None and not other.persisted  # stopped; what no stage took, unpersisted
    assert kpi.persisted and alarms.persisted  # the taker's


def test_outside_a_scope_each_stage_has_its_own_application_and_nothing_is_shared(sessions):
    with sparkops.stage_spark({}, "validate") as spark:
        assert not sparkops.share_frames("files-a", {"kpi": FakeFrame()})  # the caller unpersists them
        assert sparkops.take_frames(spark, "files-a") is None
    assert spark._jsc is None and sessions[0].conf["spark.app.name"] == "faultline-validate"


def test_a_failing_stage_still_ends_the_application_and_frees_the_frames(sessions):
    frame = FakeFrame()
    with pytest.raises(RuntimeError, match="ingest failed"):
        with sparkops.one_application("validate-ingest"):
            with sparkops.stage_spark({}, "validate"):
                sparkops.share_frames("files-a", {"kpi": frame})
            with sparkops.stage_spark({}, "ingest"):
                raise RuntimeError("ingest failed")
    assert sessions[0]._jsc is None and not frame.persisted and sparkops._SCOPE is None


def test_a_dead_jvm_failing_the_unpersist_still_stops_the_session(sessions):
    class DeadFrame(FakeFrame):
        def unpersist(self) -> None:
            raise ConnectionError("the JVM is gone")

    with pytest.raises(ConnectionError, match="the JVM is gone"):
        with sparkops.one_application("validate-ingest"):
            with sparkops.stage_spark({}, "validate"):
                sparkops.share_frames("files-a", {"kpi": DeadFrame()})
    assert sessions[0]._jsc is None and sparkops._SCOPE is None


def test_the_plugins_jvm_ends_with_its_application_and_a_cpu_jvm_stays(sessions, monkeypatch):
    """The RAPIDS Accelerator holds GPU memory in the JVM until the JVM ends: features and training come next."""
    ended: list[int] = []
    monkeypatch.setattr(sparkops, "end_jvm", lambda: ended.append(1) or True)
    monkeypatch.setattr(sparkops, "gpu_memory_used_mib", lambda: 512)
    with sparkops.one_application("validate-ingest") as app:
        with sparkops.stage_spark({"spark.plugins": sparkops.PLUGIN}, "validate"):
            pass
        assert not ended  # the application outlives its first stage
    assert sessions[0]._jsc is None and ended == [1]
    assert app["jvm_ended"] is True and app["gpu_memory_used_mib"] == 512 and app["spark"] is None
    with sparkops.stage_spark({"spark.plugins": ""}, "validate"):
        pass
    assert sessions[1]._jsc is None and ended == [1]  # Spark on the CPU: the JVM stays for the next stage


def test_the_runs_summary_says_the_plugins_jvm_ended_and_what_the_gpu_holds_after(sessions, monkeypatch):
    """In a --json run the flow's log lines do not reach the terminal: the summary carries the JVM's end."""
    from flows.pipeline import spark_stages

    monkeypatch.setattr(sparkops, "end_jvm", lambda: True)
    monkeypatch.setattr(sparkops, "gpu_memory_used_mib", lambda: 600)
    notes: dict = {}
    with spark_stages(("validate", "ingest", "features"), notes):
        with sparkops.stage_spark({"spark.plugins": sparkops.PLUGIN}, "validate"):
            pass
    assert notes == {"spark_jvm": {"ended": True, "gpu_memory_used_mib_after": 600}}
    cpu: dict = {}
    with spark_stages(("validate", "ingest"), cpu):
        with sparkops.stage_spark({}, "validate"):
            pass
    assert cpu == {}  # Spark on the CPU: its JVM stays, nothing to say


class AheadSession(FakeSession):
    """What the start ahead touches: a job group and a first query."""

    def __init__(self, conf: dict[str, str]) -> None:
        super().__init__(conf)
        self.queries = 0
        self._jsc = self

    def setJobGroup(self, group: str, description: str) -> None:  # noqa: N802 (pyspark's name)
        self.group = group

    def clearJobGroup(self) -> None:  # noqa: N802 (pyspark's name)
        self.group = None

    def range(self, n: int):
        return self

    def selectExpr(self, *exprs: str):  # noqa: N802 (pyspark's name)
        return self

    def collect(self) -> list:
        self.queries += 1
        return [(499500,)]

    def stop(self) -> None:
        self._jsc = None

    def getConf(self):  # noqa: N802 (pyspark's name)
        return Conf(self.conf)


class Conf(dict):
    def getAll(self):  # noqa: N802 (pyspark's name)
        return list(self.items())


@pytest.fixture()
def ahead_sessions(monkeypatch) -> list[AheadSession]:
    return fake_sessions(monkeypatch, AheadSession)


def test_the_application_started_ahead_is_the_one_its_stages_use(ahead_sessions, tmp_path):
    from tasks.runner import spark_stage

    class Rt:
        spark_conf = {"k": "v"}

    with sparkops.started_ahead({"k": "v"}, "validate-ingest") as start:
        start.result()  # started (and its first query run) before any stage asks
        assert len(ahead_sessions) == 1 and ahead_sessions[0].queries == 1
        with sparkops.one_application("validate-ingest"):
            first = spark_stage(Rt(), "validate", tmp_path, lambda spark: {"spark": spark})
            second = spark_stage(Rt(), "ingest", tmp_path, lambda spark: {"spark": spark})
    assert first["spark"] is second["spark"] is ahead_sessions[0] and len(ahead_sessions) == 1
    assert ahead_sessions[0].conf["spark.app.name"] == "faultline-validate-ingest"
    assert set(first["spark_started_ahead"]) == {"session_s", "first_query_s"}  # said by the stage that took it
    assert "spark_started_ahead" not in second and ahead_sessions[0]._jsc is None  # stopped with the scope


def test_an_application_started_ahead_that_no_stage_takes_is_stopped(ahead_sessions):
    with sparkops.started_ahead({}, "validate-ingest"):
        with sparkops.one_application("validate-ingest"):
            pass  # both stages reused from the store
    with sparkops.started_ahead({}, "validate-ingest"):
        pass  # the run failed before its Spark stages
    assert len(ahead_sessions) == 2 and all(s._jsc is None for s in ahead_sessions)
    assert sparkops._AHEAD is None and sparkops._SCOPE is None


def test_a_start_begun_before_the_flow_is_the_one_the_flows_own_start_ahead_takes(ahead_sessions):
    with sparkops.started_ahead({"k": "v"}, "validate-ingest") as outer:  # the CLI's, before the flow starts
        with sparkops.started_ahead({"k": "v"}, "validate-ingest") as inner:  # the flow's: no second start
            assert inner is outer
            with sparkops.one_application("validate-ingest") as app:
                pass
        assert sparkops._AHEAD is None  # taken by the flow's application, ended with it
    assert len(ahead_sessions) == 1 and ahead_sessions[0]._jsc is None and app["spark"] is None
    with sparkops.started_ahead({}, "validate-ingest"):
        with sparkops.started_ahead({}, "validate-ingest"):
            pass  # the run failed before its Spark stages: the outer scope stops the session
        assert sparkops._AHEAD is not None
    assert len(ahead_sessions) == 2 and ahead_sessions[1]._jsc is None and sparkops._AHEAD is None


def test_a_start_ahead_that_failed_leaves_the_stage_to_start_its_own(ahead_sessions, monkeypatch):
    calls: list[int] = []

    def flaky(conf):
        calls.append(1)
        if len(calls) == 1:
            raise ConnectionError("the JVM died while starting")
        ahead_sessions.append(AheadSession(conf))
        return ahead_sessions[-1]

    monkeypatch.setattr(runtime, "spark_session", flaky)
    with sparkops.started_ahead({}, "validate-ingest"):
        with sparkops.one_application("validate-ingest"):
            with sparkops.stage_spark({}, "validate") as spark:
                assert spark is ahead_sessions[0] and sparkops.taken_ahead() is None
    assert len(calls) == 2 and spark._jsc is None


def test_nothing_starts_ahead_without_a_conf_or_beside_an_active_session(ahead_sessions, monkeypatch):
    from pyspark.sql import SparkSession

    with sparkops.started_ahead(None, "validate-ingest") as start:
        assert start is None
    monkeypatch.setattr(SparkSession, "getActiveSession", classmethod(lambda cls: object()))
    with sparkops.started_ahead({}, "validate-ingest") as start:
        assert start is None
    assert ahead_sessions == []


def test_the_flow_starts_its_spark_application_ahead_unless_it_likely_reuses_the_validation(tmp_path, monkeypatch):
    import json

    import flows.pipeline as pipeline
    from tasks.core.config import load_config
    from tasks.core.store import MANIFEST, stage_fingerprint

    raw = tmp_path / "raw"
    (raw / "kpi").mkdir(parents=True)
    (raw / "kpi" / "kpi_2026-01-05.csv").write_text("x\n")
    stamps = {"kpi/kpi_2026-01-05.csv": [2, 1]}

    class Layout:
        def stamps(self):
            return stamps

    class Rt:
        spark_conf = {"k": "v"}  # Spark's CSV parser: the key holds the exports' fingerprint alone

    cfg = load_config("local")
    monkeypatch.setattr("tasks.validate.discover", lambda p: Layout())
    monkeypatch.setattr(pipeline, "simulated_exports", lambda w, root: None)
    both, no = ("validate", "ingest", "features"), (lambda s: False)

    def ahead(plan=both, exports=str(raw), redo=no):
        return pipeline.spark_ahead(cfg, Rt(), tmp_path, plan, exports, redo)

    def validated(fp: str) -> None:  # a validation in the store, over these files, keyed ``fp``
        (done := tmp_path / "validate" / fp).mkdir(parents=True)
        body = {"raw_dir": str(raw.resolve()), "raw_files": stamps, "input_fingerprints": {"raw": "r1"}}
        (done / MANIFEST).write_text(json.dumps(body))

    assert ahead() == {"k": "v"}  # nothing in the store
    assert ahead(plan=("features",)) is None  # no Spark stage
    assert ahead(plan=("validate",)) is None  # no shared application
    assert ahead(exports=None) is None  # exports still to simulate
    validated("another-configuration")  # the same files validated with another configuration or code
    assert ahead() == {"k": "v"}
    validated(stage_fingerprint("validate", {"raw": "r1"}, cfg.validate_))  # this configuration's
    assert ahead() is None and ahead(redo=lambda s: s == "validate") == {"k": "v"}
    stamps["kpi/kpi_2026-01-06.csv"] = [2, 2]  # a new day's file: validated again
    assert ahead() == {"k": "v"}
    monkeypatch.setattr(pipeline, "simulated_exports", lambda w, root: raw)  # simulated before
    assert ahead(exports=None) == {"k": "v"}
