"""The stage retry policy on a real (ephemeral) Prefect API: transient failures retry, rejections do not; and the
progress artifact that long tasks move."""

from __future__ import annotations

import errno

import pytest
from prefect import flow, task

from tasks.core.errors import ConfigError, DataRejected, InvariantBroken
from tasks.runner import TASK_OPTIONS

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module", autouse=True)
def prefect_api(tmp_path_factory):
    from prefect.testing.utilities import prefect_test_harness

    # None: wait as long as PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS (conftest: 120 s); the harness's own
    # 30-s default ran out on a busy 2-core CI host.
    with prefect_test_harness(server_startup_timeout=None):
        yield


def _run(exc_factory):
    calls = []

    @task(**{**TASK_OPTIONS, "retry_delay_seconds": 0, "retry_jitter_factor": None})
    def stage():
        calls.append(1)
        if len(calls) == 1:
            raise exc_factory()
        return "done"

    @flow
    def f():
        return stage()

    try:
        return f(), len(calls)
    except Exception as exc:
        return exc, len(calls)


@pytest.mark.parametrize(
    "exc",
    [
        OSError(errno.EIO, "NFS hiccup"),
        ConnectionError("MLflow unreachable"),
        RuntimeError("Job aborted: ExecutorLostFailure (executor 1 exited)"),
    ],
)
def test_transient_failure_is_retried(exc):
    result, calls = _run(lambda: exc)
    assert result == "done" and calls == 2


@pytest.mark.parametrize(
    "exc",
    [
        DataRejected("kpi.csv: column x missing", file="kpi.csv", column="x"),
        ConfigError("unknown key 'train.epoch'"),
        InvariantBroken("ingest lost rows in kpi"),
        KeyError("an unknown run id"),
        ValueError("a bug"),
    ],
)
def test_deterministic_rejection_is_not_retried(exc):
    result, calls = _run(lambda: exc)
    assert isinstance(result, type(exc)) and calls == 1  # fails on the first try


def test_backoff_is_exponential_with_jitter():
    delays = TASK_OPTIONS["retry_delay_seconds"](TASK_OPTIONS["retries"])  # prefect's exponential_backoff
    assert TASK_OPTIONS["retries"] >= 2 and len(delays) == TASK_OPTIONS["retries"] and delays[1] > delays[0]
    assert TASK_OPTIONS["retry_jitter_factor"] > 0


def test_a_progress_artifact_moves_and_a_failure_to_show_it_is_harmless(monkeypatch):
    """``runner.progress_artifact`` (training's epochs, the ingest bench's variants) on the real API: the artifact
    ends at 100 %; when the API refuses an update the run goes on."""
    import asyncio

    import prefect.artifacts
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterKey

    from tasks.runner import progress_artifact

    @flow
    def steps(key: str) -> str:
        move = progress_artifact(key, "three steps")
        for k in (1, 2, 3):
            move(k / 3)
        return "done"

    assert steps("test-progress") == "done"

    async def read():
        async with get_client() as client:
            return await client.read_artifacts(
                artifact_filter=ArtifactFilter(key=ArtifactFilterKey(any_=["test-progress"]))
            )

    (art,) = asyncio.run(read())
    assert art.type == "progress" and art.data == pytest.approx(100.0)

    def refuse(*a, **k):
        raise RuntimeError("API gone")

    monkeypatch.setattr(prefect.artifacts, "update_progress_artifact", refuse)
    assert steps("test-progress-refused") == "done"
