"""Errors that decide a run's exit code and whether a retry can help."""

from __future__ import annotations


class DataRejected(ValueError):
    """The input data cannot be ingested as it is (exit code 2). Deterministic: never retried."""

    def __init__(
        self, message: str, file: str | None = None, column: str | None = None, expected: str | None = None
    ) -> None:
        self.file, self.column, self.expected = file, column, expected
        super().__init__(message)
