"""Validate stage: GX suites over the raw exports; rejects the run when the data cannot be used."""

from __future__ import annotations

from pathlib import Path

from prefect import task

from tasks.core.config import ValidateConfig
from tasks.core.runtime import Runtime
from tasks.core.stages.raw import check_unchanged, discover
from tasks.core.stages.validate import expectation_rows, validate_stage
from tasks.core.store import StageResult, run_stage
from tasks.runner import TASK_OPTIONS, finish_stage, publish_table, spark_stage


@task(name="validate", **TASK_OPTIONS)
def validate_task(raw: str, cfg: ValidateConfig, rt: Runtime, root: Path, force: bool = False) -> StageResult:
    layout = discover(Path(raw))
    stamps, fp = layout.stamps(), layout.fingerprint()
    result = run_stage(
        root,
        "validate",
        {"raw": fp},
        cfg,
        lambda tmp: {
            **spark_stage(rt, "validate", tmp, lambda spark: validate_stage(spark, layout, tmp, cfg)),
            "raw_files": stamps,
            "raw_dir": str(Path(raw).resolve()),
        },
        force=force,
        verify=lambda: check_unchanged(Path(raw), fp, stamps),
    )
    docs = result.path / result["data_docs_rel"] if result.get("data_docs_rel") else None
    bad = expectation_rows(result["expectations"])
    if bad:
        publish_table("validation-expectations", bad, "GX expectations that counted bad rows (ingest quarantines them)")
    return finish_stage(
        result,
        {
            "quarantine rate": f"{result['quarantine_rate']:.3%}",
            "GX suites passed": ", ".join(k for k, ok in result["gx_success"].items() if ok) or "none",
            "GX suites failed": ", ".join(k for k, ok in result["gx_success"].items() if not ok) or "none",
            "expectations with bad rows": len(bad),
            "GX Data Docs": f"`{docs}`" if docs else None,
        },
    )
