"""What every stage task shares: retry policy, the store, artifacts and the stage result shape."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from prefect import get_run_logger
from prefect.artifacts import create_markdown_artifact, create_table_artifact
from prefect.tasks import exponential_backoff

from tasks.core.config import ConfigError
from tasks.core.errors import DataRejected

RETRIES = 2


def retry_transient(task, task_run, state) -> bool:
    """Retry I/O and engine hiccups; never a deterministic data or config rejection."""
    try:
        state.result()
    except (DataRejected, ConfigError):
        return False
    except Exception:
        return True
    return False


TASK_OPTIONS: dict[str, Any] = {
    "retries": RETRIES,
    "retry_delay_seconds": exponential_backoff(backoff_factor=2),
    "retry_jitter_factor": 0.5,
    "retry_condition_fn": retry_transient,
}


def store_root(root: str) -> Path:
    return Path(root).resolve() / "store"


def manifest_header(stage: str, inputs: dict[str, str], cfg, seconds: float) -> dict[str, Any]:
    """What every stage manifest starts with: inputs, the config section, the code version, timing."""
    from tasks.core.store import code_version

    return {
        "stage": stage,
        "input_fingerprints": inputs,
        "config": cfg.model_dump(mode="json"),
        "code_version": code_version(),
        "seconds": seconds,
    }


def stage_result(stage: str, out, extra: dict[str, Any] | None = None) -> dict[str, Any]:
    m = out.manifest
    return {
        "stage": stage,
        "status": "completed",
        "cached": out.cached,
        "fingerprint": out.fingerprint,
        "output": str(out.path),
        "rows_in": m.get("rows_in"),
        "rows_out": m.get("rows_out"),
        "rows_quarantined": m.get("rows_quarantined", 0),
        "seconds": m.get("seconds"),
        **(extra or {}),
    }


def publish_stage_artifact(result: dict[str, Any], details: dict[str, Any] | None = None) -> None:
    rows = "\n".join(
        f"| {k} | {v} |"
        for k, v in {
            "status": "cached (skipped)" if result["cached"] else "computed",
            "rows in": result.get("rows_in"),
            "rows out": result.get("rows_out"),
            "rows quarantined": result.get("rows_quarantined"),
            "seconds": result.get("seconds"),
            "output": f"`{result['output']}`",
            "fingerprint": f"`{result['fingerprint']}`",
            **(details or {}),
        }.items()
        if v is not None
    )
    md = f"## Stage `{result['stage']}`\n\n| | |\n|---|---|\n{rows}\n"
    publish_markdown(f"stage-{result['stage']}", md, f"Faultline {result['stage']} stage")


def publish_markdown(key: str, markdown: str, description: str) -> None:
    try:
        create_markdown_artifact(key=key, markdown=markdown, description=description)
    except Exception as exc:  # artifacts are a view; a failure to show one must not fail the run
        get_run_logger().warning("could not create markdown artifact %s: %s", key, exc)


def publish_table(key: str, rows: list[dict[str, Any]], description: str) -> None:
    try:
        create_table_artifact(key=key, table=rows, description=description)
    except Exception as exc:
        get_run_logger().warning("could not create table artifact %s: %s", key, exc)


class Timer:
    """``with Timer() as t: ... t.seconds`` (elapsed so far, readable inside the block)."""

    def __enter__(self):
        self.start = time.perf_counter()
        return self

    def __exit__(self, *exc):
        return None

    @property
    def seconds(self) -> float:
        return round(time.perf_counter() - self.start, 3)
