"""Ingest stage: Spark raw -> typed Parquet lake, published atomically with a manifest."""

from __future__ import annotations

from pathlib import Path

from prefect import task

from tasks.core.config import IngestConfig
from tasks.core.runtime import Runtime
from tasks.core.stages.ingest import ingest_stage
from tasks.core.stages.raw import check_unchanged, discover
from tasks.core.store import StageResult, run_stage
from tasks.runner import TASK_OPTIONS, finish_stage, spark_stage


@task(name="ingest", **TASK_OPTIONS)
def ingest_task(
    raw: str, validation: StageResult, cfg: IngestConfig, rt: Runtime, root: Path, force: bool = False
) -> StageResult:
    inputs = {"raw": validation.inputs["raw"], "validate": validation.fingerprint}
    result = run_stage(
        root,
        "ingest",
        inputs,
        cfg,
        lambda tmp: spark_stage(
            rt,
            "ingest",
            tmp,
            lambda spark: ingest_stage(spark, discover(Path(raw)), validation["violations"], tmp, cfg),
        ),
        force=force,
        verify=lambda: check_unchanged(Path(raw), validation.inputs["raw"], validation.get("raw_files") or {}),
    )
    kpi = result["sources"]["kpi"]
    return finish_stage(
        result,
        {
            "quarantined by reason": ", ".join(f"{k} {v}" for k, v in kpi["quarantine_by_reason"].items() if v),
            "dynamic allocation": result["spark_conf"].get("spark.dynamicAllocation.enabled"),
            "parquet files": kpi["parquet"]["files"],
            "compression": result["compression"],
        },
    )
