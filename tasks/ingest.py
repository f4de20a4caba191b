"""Ingest stage: Spark raw -> typed Parquet lake, published atomically with a manifest."""

from __future__ import annotations

import os
from pathlib import Path

from prefect import task

from tasks.core.config import IngestConfig
from tasks.core.runtime import Runtime
from tasks.core.stages.increment import Increment, merge_ingest, merge_lake
from tasks.core.stages.ingest import FILE_DAYS, check_against_validation, ingest_stage
from tasks.core.stages.raw import check_unchanged, discover
from tasks.core.store import StageResult, read_manifest, run_stage
from tasks.runner import TASK_OPTIONS, finish_stage, spark_stage


def _ingest_increment(spark, raw: str, inc: Increment, validation: StageResult, cfg: IngestConfig, tmp: Path):
    """The new files ingested (with the base's files that hold rows of a late day), merged into the base's lake
    (linked), the manifest counted from the merged files and checked against the merged validation."""
    layout = discover(Path(raw))
    base = read_manifest(inc.base_ingest)
    delta = layout.only(inc.ingest_files(layout.root, base["sources"]["kpi"][FILE_DAYS]))
    body = ingest_stage(spark, delta, None, tmp / ".increment", cfg)
    new = {os.path.abspath(layout.root / f) for f in inc.new_files}  # as Spark names a row's file
    merge_lake(inc, tmp / ".increment", tmp, new, layout.end)
    window = {"start": layout.start.isoformat(), "end": layout.end.isoformat()}
    merged = merge_ingest(base, body, tmp, window, validation["rows"])
    check_against_validation(merged, validation["violations"])
    return {**merged, "increment": inc.describe()}


def ingest_inputs(validation: StageResult) -> dict[str, str]:
    """What ingest's fingerprint rests on: the exports' and their validation's."""
    return {"raw": validation.inputs["raw"], "validate": validation.fingerprint}


@task(name="ingest", **TASK_OPTIONS)
def ingest_task(
    raw: str,
    validation: StageResult,
    cfg: IngestConfig,
    rt: Runtime,
    root: Path,
    force: bool = False,
    increment: Increment | None = None,
) -> StageResult:
    """Spark over the raw exports; with ``increment`` (which validation took), over the new files alone."""
    inputs = ingest_inputs(validation)

    def body(tmp: Path, spark) -> dict:
        if increment is not None:
            return _ingest_increment(spark, raw, increment, validation, cfg, tmp)
        out = ingest_stage(spark, discover(Path(raw)), validation["violations"], tmp, cfg)
        return {**out, "work_rows": out["rows_in"]}

    result = run_stage(
        root,
        "ingest",
        inputs,
        cfg,
        lambda tmp: spark_stage(rt, "ingest", tmp, lambda spark: body(tmp, spark)),
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
