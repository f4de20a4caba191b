"""Work begun in a thread of its own now, its result asked for later (a start ahead, checks beside a JVM's start)."""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any


def in_thread(name: str, fn: Callable[..., Any], *args: Any) -> Future:
    """``fn(*args)`` begun now in one thread named after ``name``, which ends when the call returns."""
    pool = ThreadPoolExecutor(1, thread_name_prefix=name)
    try:
        return pool.submit(fn, *args)
    finally:
        pool.shutdown(wait=False)
