"""Validate stage: GX suites over the raw exports; rejects the run when the data cannot be used."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from prefect import task

from tasks.common import TASK_OPTIONS, Timer, manifest_header, publish_stage_artifact, stage_result
from tasks.core.config import IngestConfig, ValidateConfig
from tasks.core.errors import DataRejected
from tasks.core.raw import discover
from tasks.core.store import code_version, completed, fingerprint, publish_manifest, published, staging
from tasks.core.validate import quarantine_rate, run_validation
from tasks.spark import get_spark

DOCS = "gx/uncommitted/data_docs/local_site/index.html"


@task(name="validate", **TASK_OPTIONS)
def validate_task(
    raw: str, cfg: ValidateConfig, spark_cfg: IngestConfig, root: Path, force: bool = False
) -> dict[str, Any]:
    layout = discover(Path(raw))
    raw_fp = layout.fingerprint()
    fp = fingerprint("validate", raw_fp, cfg.model_dump(mode="json"), code_version())
    out = None if force else completed(root, "validate", fp)
    if out is None:
        with staging(root, "validate", fp) as tmp, Timer() as timer:
            summary = run_validation(get_spark(spark_cfg, root), layout, tmp, cfg.build_data_docs)
            rate = quarantine_rate(summary)
            if rate > cfg.max_quarantine_rate:
                raise DataRejected(
                    f"{layout.root}: {rate:.1%} of rows break validation rules, above "
                    f"validate.max_quarantine_rate={cfg.max_quarantine_rate:.1%}; "
                    f"violations: {summary['violations']}",
                    file=str(layout.root),
                )
            publish_manifest(
                tmp,
                {
                    **manifest_header("validate", {"raw": raw_fp}, cfg, timer.seconds),
                    "raw": str(layout.root),
                    "rows_in": sum(summary["rows"].values()),
                    "rows_out": sum(summary["rows"].values()),
                    "rows_quarantined": 0,
                    "quarantine_rate": rate,
                    "data_docs_rel": DOCS if cfg.build_data_docs else None,
                    **{k: v for k, v in summary.items() if k not in ("result_json", "data_docs")},
                },
            )
        out = published(root, "validate", fp)
    m = out.manifest
    docs = str(out.path / m["data_docs_rel"]) if m.get("data_docs_rel") else None
    result = stage_result(
        "validate",
        out,
        {
            "raw_fingerprint": raw_fp,
            "data_docs": docs,
            "quarantine_rate": m["quarantine_rate"],
            "violations": m["violations"],
            "passed": True,
        },
    )
    publish_stage_artifact(
        result,
        {
            "quarantine rate": f"{m['quarantine_rate']:.3%}",
            "GX Data Docs": f"[index.html](file://{docs})" if docs else None,
        },
    )
    return result
