"""The features' Dask cluster started ahead: while ingest runs on Spark, a thread starts the cluster the features
stage will use (its worker processes, their imports, CUDA contexts and RMM pools), so that the stage finds it up.
:func:`tasks.core.runtime.dask_cluster` takes it where its spec is the stage's; one that no stage took is closed
when the scope ends. The RAPIDS Accelerator's GPU pool is capped (``ingest.rapids_memory_fraction``) so that a
worker's pool fits beside it on the same GPU."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from contextlib import contextmanager
from typing import Any

from tasks.core.background import in_thread

_AHEAD: dict[str, Any] | None = None  # cluster_ahead's: the spec and its start (a Future)
CONTEXT_GB = 1.0  # a worker's CUDA context and cuDF's own buffers, beside its RMM pool


def room_beside_spark(spec: dict[str, Any], spark_conf: dict[str, str], gpu_memory_gb: float) -> str:
    """Why ``spec``'s workers cannot start beside a running Spark application ("" where they can): off the RAPIDS
    Accelerator, or for CPU workers, always room; with it, a worker's RMM pool and context must fit in the share of
    the (smallest) GPU's memory the plugin's pool leaves (``spark.rapids.memory.gpu.maxAllocFraction``)."""
    if spec["kind"] != "cuda" or "spark.plugins" not in spark_conf:
        return ""
    from dask.utils import parse_bytes

    pool = parse_bytes(spec["kwargs"].get("rmm_pool_size") or 0) / 2**30
    left = (1 - float(spark_conf.get("spark.rapids.memory.gpu.maxAllocFraction", 1.0))) * gpu_memory_gb
    if pool + CONTEXT_GB <= left:
        return ""
    return (f"a worker's {pool:.1f}-GiB RMM pool and its context do not fit in the {left:.1f} GiB the RAPIDS "
            "Accelerator's pool leaves (ingest.rapids_memory_fraction)")  # fmt: skip


def start_cluster(spec: dict[str, Any]) -> tuple[Any, Any]:
    """(cluster, client) for ``spec``; the cluster None where it names a running scheduler."""
    from distributed import Client, LocalCluster

    if spec["kind"] == "scheduler":
        return None, Client(spec["address"])
    if spec["kind"] == "cuda":
        from dask_cuda import LocalCUDACluster

        cluster = LocalCUDACluster(**spec["kwargs"])
    else:
        cluster = LocalCluster(**spec["kwargs"])
    return cluster, Client(cluster)


def close_cluster(cluster: Any, client: Any) -> None:
    client.close()
    if cluster is not None:
        cluster.close()


def _timed_start(spec: dict[str, Any], prime: Callable[[], Any] | None) -> tuple[Any, Any, dict[str, Any]]:
    """The cluster and client, and the seconds its start took; with ``prime``, run on every worker once it is up
    (its one-off costs, paid here), what each worker's priming returned, or why it failed (the stage pays them)."""
    t0 = time.perf_counter()
    cluster, client = start_cluster(spec)
    came: dict[str, Any] = {"start_s": round(time.perf_counter() - t0, 3)}
    if prime is not None:
        try:
            came["primed"] = sorted(client.run(prime).values())
        except Exception as exc:  # noqa: BLE001 - the days pay those costs themselves
            came["primed"] = f"{type(exc).__name__}: {exc}"[:300]
    return cluster, client, came


@contextmanager
def cluster_ahead(spec: dict[str, Any] | None, prime: Callable[[], Any] | None = None) -> Iterator[Future | None]:
    """Within: the cluster ``spec`` describes starts in a thread at once (nothing where ``spec`` is None or names a
    running scheduler), and ``prime`` runs on each of its workers; on exit one that no stage took is closed."""
    global _AHEAD
    if spec is None or spec["kind"] == "scheduler":
        yield None
        return
    _AHEAD = {"spec": spec, "start": in_thread("dask-ahead", _timed_start, spec, prime)}
    try:
        yield _AHEAD["start"]
    finally:
        left, _AHEAD = _AHEAD, None
        taken = _result(left) if left is not None else None
        if taken is not None:
            close_cluster(*taken[:2])


def _result(ahead: dict[str, Any]) -> tuple[Any, Any, dict[str, Any]] | None:
    try:
        return ahead["start"].result()
    except Exception as exc:  # noqa: BLE001 - said here; the stage's own start raises what is wrong
        logging.getLogger(__name__).warning("the Dask cluster started ahead failed to start: %s", exc)
        return None


def take_ahead(spec: dict[str, Any]) -> tuple[Any, Any, dict[str, Any]] | None:
    """The cluster started ahead for ``spec`` (waited for; once), its client and how it came: the seconds its start
    took, its workers' priming and how long the stage waited for it. None: none started for this spec, or its start
    failed (the stage then starts its own)."""
    global _AHEAD
    if _AHEAD is None or _AHEAD["spec"] != spec:
        return None
    ahead, _AHEAD = _AHEAD, None
    t0 = time.perf_counter()
    taken = _result(ahead)
    if taken is None:
        return None
    cluster, client, came = taken
    return cluster, client, {**came, "waited_s": round(time.perf_counter() - t0, 3)}
