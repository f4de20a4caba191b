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


@pytest.fixture()
def sessions(monkeypatch) -> list[FakeSession]:
    made: list[FakeSession] = []

    def start(conf):
        made.append(FakeSession(conf))
        return made[-1]

    from pyspark.sql import SparkSession

    monkeypatch.setattr(runtime, "spark_session", start)
    # a real session another test of this worker started is not this scope's business
    monkeypatch.setattr(SparkSession, "getActiveSession", classmethod(lambda cls: None))
    return made


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
