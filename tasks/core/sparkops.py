"""Spark that people can operate: a session per stage (named after it, stopped when the stage ends) or one for a
flow run's consecutive Spark stages (which then parse the raw exports once), a job group
and a description on every job, and the RAPIDS Accelerator's own report of what ran on the GPU and what fell
back to the CPU (and why), kept in the stage's manifest.

The plugin explains each plan it sees (``spark.rapids.sql.explain=ALL``) through its ``GpuOverrides`` logger on
the driver. For the length of a stage a log4j2 file appender is attached to that logger (through py4j: the JVM is
already running, so a configuration file could not be given to it any more), and the lines are parsed into the
manifest. In ``explainOnly`` mode the plugin runs every query on the CPU and still reports what would run on the
GPU: the report a CPU host can produce (and the tests check), the same parser for both modes.
"""

from __future__ import annotations

import logging
import re
import time
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import Future
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from tasks.core.background import in_thread

PLUGIN = "com.nvidia.spark.SQLPlugin"
EXPLAIN_LOGGER = "com.nvidia.spark.rapids.GpuOverrides"
_LINE = re.compile(
    r"^\s*[*!@#]Exec <(?P<exec>\w+)> "
    r"(?:(?P<yes>will run on GPU|could run on GPU)|cannot run on GPU because (?P<why>.*))$"
)
# wrappers AQE and the plugin put around a plan; they say nothing about where the work ran
_WRAPPERS = {"AdaptiveSparkPlanExec", "TableCacheQueryStageExec", "ShuffleQueryStageExec", "BroadcastQueryStageExec"}


_SCOPE: dict[str, Any] | None = None  # one_application's: its name, its session, the frames a stage shared
_AHEAD: dict[str, Any] | None = None  # started_ahead's: the application's name and its start (a Future)


@contextmanager
def started_ahead(conf: dict[str, str] | None, name: str) -> Iterator[Future | None]:
    """Within: the application ``faultline-<name>`` starts in a thread at once (its JVM, the RAPIDS Accelerator's
    GPU set-up and a first trivial query, which pays the one-off costs of a first task) while the flow does what
    comes before its first Spark stage (MLflow's run, the exports' digests, the file checks); the
    :func:`one_application` of that name takes it. ``conf`` None, or a session already active in this process:
    nothing starts; one of that name already starting (an outer scope's, e.g. the CLI's, begun before the flow):
    that one. On exit a session that no scope took is stopped (its JVM ended where the plugin ran)."""
    global _AHEAD
    from pyspark.sql import SparkSession

    if _AHEAD is not None and _AHEAD["name"] == name:  # nested: the start an outer scope began (and will end)
        yield _AHEAD["start"]
        return
    if conf is None or SparkSession.getActiveSession() is not None:
        yield None
        return
    _AHEAD = {"name": name, "start": in_thread("spark-ahead", _start, conf, name)}
    try:
        yield _AHEAD["start"]
    finally:
        left, _AHEAD = _AHEAD, None
        if left is not None:
            scope = {"ahead": left, "spark": None}
            _take_ahead(scope)
            if scope["spark"] is not None:
                stop(scope["spark"])


def _start(conf: dict[str, str], name: str) -> tuple[Any, dict[str, float]]:
    """The session started ahead, and the seconds its start and its first query took."""
    from tasks.core.runtime import spark_session

    t0 = time.perf_counter()
    spark = spark_session({**conf, "spark.app.name": f"faultline-{name}"})
    t1 = time.perf_counter()
    with job_group(spark, "start", "a first trivial query: the one-off costs of a first task, paid ahead"):
        spark.range(1000).selectExpr("sum(id)").collect()
    return spark, {"session_s": round(t1 - t0, 3), "first_query_s": round(time.perf_counter() - t1, 3)}


def _take_ahead(scope: dict[str, Any]) -> None:
    """The session started ahead for ``scope``, waited for and made the scope's (with its start's seconds as
    ``started_ahead``). A start that failed leaves the scope without one: the stage then starts it itself, which
    is also the second try a JVM that died while starting gets (``runtime.get_or_create``)."""
    ahead = scope.pop("ahead", None)
    if ahead is None:
        return
    try:
        scope["spark"], scope["started_ahead"] = ahead["start"].result()
    except Exception as exc:  # noqa: BLE001 - said here, and the stage's own start raises what is wrong
        logging.getLogger(__name__).warning("Spark's application, started ahead, failed to start: %s", exc)


def taken_ahead() -> dict[str, float] | None:
    """The seconds the session started ahead took to start and to run its first query (once, to the stage that
    took it), or None where the stage's session was not started ahead."""
    return _SCOPE.pop("started_ahead", None) if _SCOPE is not None else None


@contextmanager
def one_application(name: str) -> Iterator[dict[str, Any]]:
    """Within: the Spark stages share one application, ``faultline-<name>`` (one JVM, one start, code the JIT has
    already compiled), and a later stage can take the raw frames an earlier one parsed (:func:`share_frames`,
    :func:`take_frames`), so validation and ingest read and parse the exports once. On exit the frames left are
    unpersisted and the application stopped; the scope's dict then says whether its JVM was ended too
    (``jvm_ended``: the RAPIDS Accelerator ran) and the GPU memory in use after (``gpu_memory_used_mib``). Nested,
    the outer scope holds."""
    global _SCOPE, _AHEAD
    if _SCOPE is not None:
        yield _SCOPE
        return
    _SCOPE = scope = {"name": name, "spark": None, "frames": {}, "jvm_ended": False}
    if _AHEAD is not None and _AHEAD["name"] == name:  # started_ahead's session, now this scope's
        scope["ahead"], _AHEAD = _AHEAD, None
    try:
        yield scope
    finally:
        _SCOPE = None
        _take_ahead(scope)  # one no stage took: stopped below like any other
        try:
            for frames in scope["frames"].values():
                unpersist(frames)
        finally:  # a JVM that died mid-stage fails the unpersist: the session is stopped all the same
            if scope["spark"] is not None:
                scope["jvm_ended"] = stop(scope["spark"])
                scope["spark"] = None
                if scope["jvm_ended"]:
                    scope["gpu_memory_used_mib"] = gpu_memory_used_mib()


def stop(spark) -> bool:
    """Stop the application; where the RAPIDS Accelerator ran in it, end its JVM too, so that the plugin's GPU
    memory (its pool and the JVM's CUDA context) goes back before the stages after Spark (features, training) ask
    for theirs; a later Spark stage in this process starts a new JVM. True where the JVM was ended."""
    try:
        plugin = PLUGIN in (spark.sparkContext.getConf().get("spark.plugins") or "")
    except Exception:  # a JVM already gone: nothing of it to end
        plugin = False
    spark.stop()
    return plugin and end_jvm()


def end_jvm(timeout_s: float = 60.0) -> bool:
    """End this process's Spark JVM (PySpark's gateway): the JVM leaves when its stdin closes. False where none
    runs."""
    import subprocess

    from pyspark import SparkContext

    gateway = SparkContext._gateway
    if gateway is None:
        return False
    proc = getattr(gateway, "proc", None)  # None where PySpark was handed a running JVM
    try:
        gateway.shutdown()
    finally:
        SparkContext._gateway = SparkContext._jvm = None
    if proc is None:
        return False
    proc.stdin.close()
    try:
        proc.wait(timeout_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
    return True


def gpu_memory_used_mib() -> int | None:
    """GPU memory in use on the visible GPUs (MiB, NVML's figure), or None without NVML or a GPU."""
    from tasks.core.energy import gpu_memory_used

    used = gpu_memory_used()
    return None if used is None else used // 2**20


def _alive(spark) -> bool:
    return spark is not None and spark.sparkContext._jsc is not None


@contextmanager
def stage_spark(conf: dict[str, str], stage: str) -> Iterator[Any]:
    """A SparkSession for one stage, named ``faultline-<stage>`` (its own application in the History Server) and
    stopped when the stage ends; inside :func:`one_application`, that scope's session, left running for the next
    stage. A session already active in this process (a test's, a benchmark's) is reused and left running: it
    belongs to whoever started it."""
    from pyspark.sql import SparkSession

    from tasks.core.runtime import spark_session

    if _SCOPE is not None:
        _take_ahead(_SCOPE)
    owned = SparkSession.getActiveSession() is None
    if _SCOPE is not None and (owned or _alive(_SCOPE["spark"])):
        if not _alive(_SCOPE["spark"]):
            _SCOPE["spark"] = spark_session({**conf, "spark.app.name": f"faultline-{_SCOPE['name']}"})
        yield _SCOPE["spark"]
        return
    spark = spark_session({**conf, "spark.app.name": f"faultline-{stage}"})
    try:
        yield spark
    finally:
        if owned:
            stop(spark)


def unpersist(frames: dict[str, Any]) -> None:
    for df in frames.values():
        if df is not None:
            df.unpersist()


def share_frames(key: str, frames: dict[str, Any]) -> bool:
    """Offer ``frames`` (cached DataFrames of the raw exports named by ``key``) to a later stage of this
    :func:`one_application`; False (nothing kept: the caller unpersists them) outside one."""
    if _SCOPE is None or not _alive(_SCOPE["spark"]):
        return False
    unpersist(_SCOPE["frames"].pop(key, {}))
    _SCOPE["frames"][key] = frames
    return True


def take_frames(spark, key: str) -> dict[str, Any] | None:
    """The frames an earlier stage shared under ``key`` in this session, now the caller's to unpersist; None when
    there are none (no scope, another set of files, the earlier stage cached)."""
    if _SCOPE is None or _SCOPE["spark"] is not spark:
        return None
    return _SCOPE["frames"].pop(key, None)


@contextmanager
def job_group(spark, group: str, description: str) -> Iterator[None]:
    """Every Spark job started inside carries this group and description (the History Server's Jobs page lists
    them instead of ``$anonfun$...`` call sites)."""
    sc = spark.sparkContext
    sc.setJobGroup(group, description)
    try:
        yield
    finally:
        sc._jsc.clearJobGroup()


def read_event_log(app: Path) -> list[dict[str, Any]]:
    """One application's events from Spark 4's rolling event log (a directory of ``events_*`` files, zstd-compressed
    by default, or plain)."""
    import json

    import pyarrow as pa

    out: list[dict[str, Any]] = []
    for f in sorted(Path(app).glob("events_*")):
        if f.suffix == ".zstd":
            with pa.input_stream(str(f), compression="zstd") as stream:
                text = stream.read().decode()
        else:
            text = f.read_text()
        out += [json.loads(line) for line in text.splitlines() if line.strip()]
    return out


def plugin_active(conf: dict[str, str]) -> bool:
    return PLUGIN in conf.get("spark.plugins", "")


def parse_explain(text: str) -> dict[str, Any]:
    """The plugin's explain lines summed up: operators (``Exec``) placed on the GPU and those left on the CPU with
    the plugin's reason. Counts are mentions: AQE re-plans a query stage by stage, so one operator may be named
    more than once."""
    on_gpu: Counter[str] = Counter()
    fallback: Counter[tuple[str, str]] = Counter()
    for line in text.splitlines():
        m = _LINE.match(line)
        if not m or m["exec"] in _WRAPPERS:
            continue
        if m["yes"]:
            on_gpu[m["exec"]] += 1
        else:
            fallback[(m["exec"], m["why"].strip())] += 1
    n_gpu, n_cpu = sum(on_gpu.values()), sum(fallback.values())
    return {
        "exec_on_gpu": n_gpu,
        "exec_on_cpu": n_cpu,
        "gpu_share": round(n_gpu / (n_gpu + n_cpu), 4) if n_gpu + n_cpu else None,
        "on_gpu": dict(on_gpu.most_common()),
        "fallbacks": [{"exec": e, "reason": why, "mentions": n} for (e, why), n in fallback.most_common()],
    }


class RapidsReport:
    """What the plugin said about this stage's plans (None when the plugin is not configured)."""

    def __init__(self, spark, path: Path) -> None:
        self.spark, self.path = spark, path
        self.conf = {k: v for k, v in spark.sparkContext.getConf().getAll()}
        self.active = plugin_active(self.conf)
        self._appender = None

    def __enter__(self) -> RapidsReport:
        if not self.active:
            return self
        jvm = self.spark._jvm
        log4j = jvm.org.apache.logging.log4j
        core = log4j.core
        ctx = log4j.LogManager.getContext(False)
        config = ctx.getConfiguration()
        layout = core.layout.PatternLayout.newBuilder().withPattern("%m%n").build()
        builder = core.appender.FileAppender.newBuilder()
        builder.setName(f"faultline-rapids-{id(self)}")
        builder.withFileName(str(self.path))
        builder.setLayout(layout)
        appender = builder.build()
        appender.start()
        config.addAppender(appender)
        logger = core.config.LoggerConfig(EXPLAIN_LOGGER, log4j.Level.WARN, False)  # to the file only
        logger.addAppender(appender, None, None)
        config.addLogger(EXPLAIN_LOGGER, logger)
        ctx.updateLoggers()
        self._appender, self._ctx = appender, ctx
        return self

    def __exit__(self, *exc) -> None:
        if self._appender is None:
            return
        config = self._ctx.getConfiguration()
        config.removeLogger(EXPLAIN_LOGGER)
        config.getRootLogger().removeAppender(self._appender.getName())
        self._ctx.updateLoggers()
        self._appender.stop()
        self._appender = None

    def summary(self) -> dict[str, Any] | None:
        if not self.active:
            return None
        text = self.path.read_text() if self.path.is_file() else ""
        return {
            "mode": self.conf.get("spark.rapids.sql.mode", "executeOnGPU"),
            "plugin": self.conf.get("spark.plugins"),
            "concurrent_gpu_tasks": self.conf.get("spark.rapids.sql.concurrentGpuTasks"),
            "shuffle_mode": self.conf.get("spark.rapids.shuffle.mode"),
            "explain_log": self.path.name,
            **parse_explain(text),
        }
