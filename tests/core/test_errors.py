"""Which failures a retry can cure: an allowlist, everything else fails on the first try."""

import errno

import pytest

from tasks.core.errors import ConfigError, DataRejected, InvariantBroken, is_transient
from tasks.core.training.launch import TrainingFailed, TrainingStalled


class Py4JNetworkError(Exception):
    pass


Py4JNetworkError.__module__ = "py4j.protocol"


@pytest.mark.parametrize(
    "exc",
    [
        ConnectionError("MLflow unreachable"),
        TimeoutError("read timed out"),
        OSError(errno.EIO, "NFS hiccup"),
        OSError(errno.ESTALE, "stale file handle"),
        Py4JNetworkError("Answer from Java side is empty"),
        RuntimeError("Job aborted: ExecutorLostFailure (executor 3 exited)"),
        TrainingStalled("no progress"),
    ],
)
def test_transient(exc):
    assert is_transient(exc)


@pytest.mark.parametrize(
    "exc",
    [
        DataRejected("kpi.csv: column x missing"),
        ConfigError("unknown key"),
        InvariantBroken("ingest lost rows"),
        ValueError("bad"),
        KeyError("x"),
        RuntimeError("lost rows in kpi"),
        OSError(errno.ENOSPC, "No space left on device"),
        FileNotFoundError(errno.ENOENT, "missing"),
        TrainingFailed("exit 1"),
    ],
)
def test_deterministic(exc):
    assert not is_transient(exc)


def test_the_cause_decides_when_wrapped():
    try:
        try:
            raise ConnectionError("refused")
        except ConnectionError as inner:
            raise RuntimeError("tracking failed") from inner
    except RuntimeError as exc:
        assert is_transient(exc)
    try:
        try:
            raise ConnectionError("refused")
        except ConnectionError:
            raise DataRejected("bad file") from None
    except DataRejected as exc:
        assert not is_transient(exc)
