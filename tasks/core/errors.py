"""Errors that decide a run's exit code, and the one list of failures a retry can cure."""

from __future__ import annotations

import errno


class ConfigError(ValueError):
    """A profile, override or flow parameter that does not describe a valid run (exit code 2, never retried)."""


class DataRejected(ValueError):
    """The input data cannot be ingested as it is (exit code 2). Deterministic: never retried."""

    def __init__(
        self, message: str, file: str | None = None, column: str | None = None, expected: str | None = None
    ) -> None:
        self.file, self.column, self.expected = file, column, expected
        super().__init__(message)


class InvariantBroken(RuntimeError):
    """A stage's own bookkeeping does not add up (rows lost, two engines disagree): a bug, never retried."""


# errno values of I/O that can succeed when tried again: a dropped connection, a busy or stale network mount.
_TRANSIENT_ERRNO = {
    errno.EAGAIN,
    errno.EBUSY,
    errno.EINTR,
    errno.EIO,
    errno.ECONNRESET,
    errno.ECONNREFUSED,
    errno.ECONNABORTED,
    errno.ETIMEDOUT,
    errno.EHOSTUNREACH,
    errno.ENETUNREACH,
    errno.ENETDOWN,
    errno.EPIPE,
    errno.ESTALE,
}
# Exception classes (by module and name, so this module imports none of the engines) that mean "the other
# side hiccupped": the Spark JVM gateway, an HTTP client talking to Prefect's or MLflow's API.
_TRANSIENT_CLASSES = {
    ("py4j.protocol", "Py4JNetworkError"),
    ("httpx", "TransportError"),
    ("httpcore", "ConnectError"),
    ("requests.exceptions", "ConnectionError"),
    ("requests.exceptions", "Timeout"),
    ("urllib3.exceptions", "ProtocolError"),
    ("urllib3.exceptions", "MaxRetryError"),
}
# Words in an engine's error message that mean a lost executor or a dropped shuffle, not bad input or a bug.
_TRANSIENT_MESSAGES = (
    "ExecutorLostFailure",
    "FetchFailed",
    "Connection reset by peer",
    "Connection refused",
    "lost executor",
    "RpcTimeoutException",
    "TEMPORARILY_UNAVAILABLE",
    "Service Unavailable",
)
# Deterministic outcomes that may carry transient-looking words: never retried.
_NEVER = (ConfigError, DataRejected, InvariantBroken, KeyboardInterrupt, MemoryError)


def _by_kind(exc: BaseException) -> bool:
    if getattr(exc, "transient", False):  # e.g. TrainingStalled: a rank stuck in a collective
        return True
    if isinstance(exc, (ConnectionError, TimeoutError)):
        return True
    return isinstance(exc, OSError) and exc.errno in _TRANSIENT_ERRNO


def _by_class(exc: BaseException) -> bool:
    return bool({(c.__module__, c.__name__) for c in type(exc).__mro__} & _TRANSIENT_CLASSES)


def _by_message(exc: BaseException) -> bool:
    text = str(exc)
    return any(m in text for m in _TRANSIENT_MESSAGES)


def is_transient(exc: BaseException) -> bool:
    """True only for failures on an allowlist of things that can succeed on retry: network and storage I/O,
    a lost Spark executor, an HTTP API (Prefect, MLflow) that did not answer, a training rank that stalled."""
    if isinstance(exc, _NEVER):
        return False
    if _by_kind(exc) or _by_class(exc) or _by_message(exc):
        return True
    cause = exc.__cause__ or (None if exc.__suppress_context__ else exc.__context__)
    return cause is not None and cause is not exc and is_transient(cause)
