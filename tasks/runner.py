"""What every stage task shares: the retry policy, and showing a stage's result in Prefect (state, logs, table).

The store protocol itself (fingerprint, cache, staging, manifest, publish) is ``tasks.core.store.run_stage``;
a stage task is the stage's own lines around it.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from prefect import get_run_logger
from prefect.artifacts import create_markdown_artifact, create_table_artifact
from prefect.tasks import exponential_backoff

from tasks.core.errors import is_transient
from tasks.core.store import StageResult

RETRIES = 2


def retry_transient(task, task_run, state) -> bool:
    """Retry only what can succeed on retry (``tasks.core.errors.is_transient``): everything else fails at once."""
    try:
        state.result()
    except Exception as exc:
        return is_transient(exc)
    return False


TASK_OPTIONS: dict[str, Any] = {
    "retries": RETRIES,
    "retry_delay_seconds": exponential_backoff(backoff_factor=2),
    "retry_jitter_factor": 0.5,
    "retry_condition_fn": retry_transient,
}


def store_root(root: str) -> Path:
    return Path(root).resolve() / "store"


def logger():
    try:
        return get_run_logger()
    except Exception:  # called outside a run (tests, the CLI's own checks)
        import logging

        return logging.getLogger("faultline")


def spark_stage(rt, stage: str, out: Path, body) -> dict[str, Any]:
    """Run a Spark stage's body in its own named session (stopped at the end) and add to its manifest what the
    RAPIDS Accelerator said about its plans (``rapids``: None when the plugin is off)."""
    from tasks.core.sparkops import RapidsReport, stage_spark, taken_ahead

    started = time.perf_counter()
    with stage_spark(rt.spark_conf, stage) as spark:
        # the JVM (first stage) and the application; where it was started ahead, what was left of its start
        spark_start_s, ahead = round(time.perf_counter() - started, 3), taken_ahead()
        with RapidsReport(spark, out / "rapids_explain.log") as rapids:
            result = body(spark)
        report = rapids.summary()
    result["timings_s"] = {"spark_start": spark_start_s, **result.get("timings_s", {})}
    if ahead:  # its start and first query, run beside what came before the stage (not part of the stage's time)
        result["spark_started_ahead"] = ahead
    if report:
        gpu = f"{report['gpu_share']:.0%}" if report["gpu_share"] is not None else "n/a"
        logger().info(
            "%s: RAPIDS Accelerator (%s) placed %s of operator mentions on the GPU; %d kinds of fallback%s",
            stage,
            report["mode"],
            gpu,
            len(report["fallbacks"]),
            "".join(f"\n  {f['exec']}: {f['reason']}" for f in report["fallbacks"][:8]),
        )
    return {**result, "rapids": report}


def finish_stage(result: StageResult, details: dict[str, Any] | None = None) -> StageResult:
    """Log the stage's figures to the run's log and show its table as an artifact."""
    log = logger()
    what = "reused (cached)" if result.cached else f"computed in {result.get('seconds', 0):.1f} s"
    log.info(
        "%s %s: rows in %s, out %s, quarantined %s -> %s",
        result.stage,
        what,
        result.get("rows_in"),
        result.get("rows_out"),
        result.get("rows_quarantined", 0),
        result.path,
    )
    publish_stage_artifact(result, details)
    return shown_cached(result)


def shown_cached(result: StageResult) -> Any:
    """Inside a task run, a reused output finishes the task as ``Cached`` (a Completed state so named) rather
    than a 0.05-s ``Completed``; the flow reads the result with :func:`value`. Outside one (``.fn``, tests)
    the result itself."""
    from prefect.context import TaskRunContext
    from prefect.states import Completed

    if not result.cached or TaskRunContext.get() is None:
        return result
    return Completed(name="Cached", message=f"{result.stage}: reused {result.path}", data=result)


def value(returned: Any) -> Any:
    """What a stage task returned: its result, also when it finished as a named state (``Cached``)."""
    from prefect.states import State

    return returned.result() if isinstance(returned, State) else returned


def publish_stage_artifact(result: StageResult, details: dict[str, Any] | None = None) -> None:
    rows = "\n".join(
        f"| {k} | {v} |"
        for k, v in {
            "status": "cached (skipped)" if result.cached else "computed",
            "rows in": result.get("rows_in"),
            "rows out": result.get("rows_out"),
            "rows quarantined": result.get("rows_quarantined"),
            "seconds": result.get("seconds"),
            "output": f"`{result.path}`",
            "fingerprint": f"`{result.fingerprint}`",
            **(details or {}),
        }.items()
        if v is not None
    )
    md = f"## Stage `{result.stage}`\n\n| | |\n|---|---|\n{rows}\n"
    publish_markdown(f"stage-{result.stage}", md, f"Faultline {result.stage} stage")


def progress_artifact(key: str, description: str):
    """A Prefect progress artifact and the function that moves it (``fraction`` 0..1); both do nothing outside a
    run or when the server cannot take it: progress is a view, and a failure to show it must not fail the run."""
    from prefect.artifacts import create_progress_artifact, update_progress_artifact

    try:
        art = create_progress_artifact(progress=0.0, key=key, description=description)
    except Exception:
        art = None

    def move(fraction: float) -> None:
        if art is not None:
            try:
                update_progress_artifact(art, progress=100.0 * fraction)
            except Exception:
                pass

    return move


def publish_markdown(key: str, markdown: str, description: str) -> None:
    try:
        create_markdown_artifact(key=key, markdown=markdown, description=description)
    except Exception as exc:  # artifacts are a view; a failure to show one must not fail the run
        logger().warning("could not create markdown artifact %s: %s", key, exc)


def publish_table(key: str, rows: list[dict[str, Any]], description: str) -> None:
    try:
        create_table_artifact(key=key, table=rows, description=description)
    except Exception as exc:
        logger().warning("could not create table artifact %s: %s", key, exc)
