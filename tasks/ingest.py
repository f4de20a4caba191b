"""Ingest stage: Spark raw -> typed Parquet lake, published atomically with a manifest."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from prefect import task

from tasks.common import TASK_OPTIONS, Timer, manifest_header, publish_stage_artifact, stage_result
from tasks.core.config import IngestConfig
from tasks.core.ingest import run_ingest
from tasks.core.raw import discover
from tasks.core.runtime import effective_spark_conf
from tasks.core.store import code_version, completed, fingerprint, publish_manifest, published, staging
from tasks.spark import get_spark


def _check_against_validation(ingest: dict[str, Any], violations: dict[str, dict[str, int]]) -> None:
    """Quarantine reasons must match what GX reported for the same rules."""
    for source, counts in violations.items():
        got = ingest["sources"][source]["quarantine_by_reason"]
        for reason, n in counts.items():
            if got.get(reason, 0) != n:
                raise RuntimeError(
                    f"ingest quarantined {got.get(reason, 0)} {source} rows for {reason}, validation reported {n}"
                )


@task(name="ingest", **TASK_OPTIONS)
def ingest_task(
    raw: str, validation: dict[str, Any], cfg: IngestConfig, root: Path, force: bool = False
) -> dict[str, Any]:
    fp = fingerprint(
        "ingest", validation["raw_fingerprint"], validation["fingerprint"], cfg.model_dump(mode="json"), code_version()
    )
    out = None if force else completed(root, "ingest", fp)
    if out is None:
        with staging(root, "ingest", fp) as tmp, Timer() as timer:
            spark = get_spark(cfg, root)
            summary = run_ingest(spark, discover(Path(raw)), tmp, cfg)
            _check_against_validation(summary, validation["violations"])
            publish_manifest(
                tmp,
                {
                    **manifest_header(
                        "ingest",
                        {"raw": validation["raw_fingerprint"], "validate": validation["fingerprint"]},
                        cfg,
                        timer.seconds,
                    ),
                    "spark_conf": effective_spark_conf(spark),
                    **summary,
                },
            )
        out = published(root, "ingest", fp)
    m = out.manifest
    result = stage_result(
        "ingest",
        out,
        {
            "quarantine": str(out.path / "quarantine"),
            "by_source": {
                s: {k: v[k] for k in ("rows_in", "rows_out", "rows_quarantined")} for s, v in m["sources"].items()
            },
        },
    )
    publish_stage_artifact(
        result,
        {
            "dynamic allocation": m["spark_conf"].get("spark.dynamicAllocation.enabled"),
            "parquet files": m["sources"]["kpi"]["parquet"]["files"],
            "compression": m["compression"],
        },
    )
    return result
