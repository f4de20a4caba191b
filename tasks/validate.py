"""Validate stage: GX suites over the raw exports; rejects the run when the data cannot be used."""

from __future__ import annotations

import json
import shutil
from dataclasses import replace
from pathlib import Path

from prefect import task

from tasks.core.config import ValidateConfig
from tasks.core.runtime import Runtime
from tasks.core.schema import KPI_PARSE_CONF
from tasks.core.stages.increment import Increment, late_rows_probe, merge_validation, separable
from tasks.core.stages.raw import check_unchanged, discover
from tasks.core.stages.validate import expectation_rows, expectations_markdown, files_checked, validate_stage
from tasks.core.store import (
    MANIFEST,
    StageResult,
    digests_fingerprint,
    read_manifest,
    run_stage,
    stage_fingerprint,
)
from tasks.runner import TASK_OPTIONS, finish_stage, logger, publish_table, spark_stage


def _increment(layout, inc: Increment, cfg: ValidateConfig, rt: Runtime, tmp: Path) -> dict | None:
    """The new files validated and added to the base's figures, or None (and ``tmp`` emptied) where they cannot be
    taken apart from it (``increment.separable``)."""
    delta = layout.only(set(inc.new_files))
    probe = late_rows_probe(inc.old_start, inc.new_start, layout.end)
    checked = files_checked(delta)  # the new files' bytes read while the JVM starts
    body = spark_stage(rt, "validate", tmp, lambda spark: validate_stage(spark, delta, tmp, cfg, probe, checked))
    found = body.pop("probe")
    why = separable(inc, found, layout.end)
    if why:
        logger().info("validate: the whole window is validated again: %s", why)
        for p in tmp.iterdir():
            shutil.rmtree(p) if p.is_dir() else p.unlink()
        return None
    window = {"start": layout.start.isoformat(), "end": layout.end.isoformat()}
    merged = merge_validation(read_manifest(inc.base_validate), body, window)
    (tmp / merged["expectations_md"]).write_text(expectations_markdown(merged))
    logger().info("validate: %d new files validated (%d rows) and added to %s", len(inc.new_files),
                  body["rows_in"], inc.base_validate)  # fmt: skip
    firsts = {k: found[k] for k in ("first_kpi", "first_alarm")}
    taken = replace(inc, late_days=tuple(found["late_days"]), **firsts)
    return {**merged, "increment": taken.describe()}


def stage_inputs(raw_fp: str, rt: Runtime) -> dict[str, str]:
    """Validation's inputs in its cache key: the exports' fingerprint, and the KPI parser where it is not Spark's CSV
    parser (another parser may judge an odd line otherwise)."""
    parse = rt.spark_conf.get(KPI_PARSE_CONF, "csv")
    return {"raw": raw_fp, **({"kpi_parse": parse} if parse != "csv" else {})}


def validated_before(raw: Path, cfg: ValidateConfig, rt: Runtime, root: Path) -> bool:
    """Whether the store holds this configuration's validation of these very exports (the directory, each file's
    name, size and time as that validation recorded them): a run over them likely reuses it, and starts no Spark
    for it. The exports' content is not hashed here; the stage does that."""
    stamps, where = discover(Path(raw)).stamps(), str(Path(raw).resolve())
    for manifest in (Path(root) / "validate").glob(f"*/{MANIFEST}"):
        m = json.loads(manifest.read_text())
        if m.get("raw_dir") != where or m.get("raw_files") != stamps:
            continue
        fp = stage_fingerprint("validate", stage_inputs(m["input_fingerprints"]["raw"], rt), cfg)
        if fp == manifest.parent.name:
            return True
    return False


@task(name="validate", **TASK_OPTIONS)
def validate_task(
    raw: str, cfg: ValidateConfig, rt: Runtime, root: Path, force: bool = False, increment: Increment | None = None
) -> StageResult:
    """GX over the raw exports; with ``increment``, over the new files alone where that is exact."""
    layout = discover(Path(raw))
    stamps, digests = layout.stamps(), layout.digests()
    fp = digests_fingerprint(digests)

    def compute(tmp: Path) -> dict:
        found = {"raw_files": stamps, "raw_digests": digests, "raw_dir": str(Path(raw).resolve())}
        if increment is not None and (body := _increment(layout, increment, cfg, rt, tmp)) is not None:
            return {**body, **found}
        checked = files_checked(layout)  # every export's bytes read while the JVM starts
        body = spark_stage(rt, "validate", tmp, lambda spark: validate_stage(spark, layout, tmp, cfg, None, checked))
        return {**body, **found, "work_rows": body["rows_in"]}

    result = run_stage(
        root,
        "validate",
        stage_inputs(fp, rt),
        cfg,
        compute,
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
