"""Spark ingest: raw exports -> typed, deduplicated Parquet partitioned by date, plus a quarantine.

Dedup winner (documented): among rows that pass every rule and share a key, the row from the latest
export file wins, and within a file the last one (a re-sent sample supersedes the earlier copy).
Every other copy goes to the quarantine with reason ``duplicate``. Late and out-of-order rows are
placed by their own timestamp, whatever file they arrived in.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tasks.core.config import IngestConfig
from tasks.core.errors import InvariantBroken
from tasks.core.schema import ALARM_NAMES, KPI_NAMES
from tasks.core.sparkops import job_group
from tasks.core.stages.raw import CORRUPT, RawLayout, read_alarms, read_kpi
from tasks.core.stages.rules import KEYS, Rule, alarm_rules, kpi_rules

EST_BYTES_PER_ROW = 24  # compressed Parquet, measured on simulator output; sizes files toward the block size


def flag_rows(df, rules: list[Rule]):
    """Add one boolean column per rule (plus ``malformed``); malformed rows carry only that reason."""
    from pyspark.sql import functions as F

    malformed = F.col(CORRUPT).isNotNull()
    cols = [malformed.alias("malformed")]
    cols += [(~malformed & F.coalesce(r.violation(), F.lit(False))).alias(r.reason) for r in rules]
    return df.select("*", *cols)


def split_rows(df, rules: list[Rule], key: tuple[str, ...], cluster: str | None = None):
    """Return (clean winners, quarantine) DataFrames; quarantine has one reason column per rule. ``cluster``: a
    column the rows are already partitioned by and that the key determines (the day of a KPI key's timestamp):
    the window groups by it too, which splits no key's copies and needs no shuffle of its own."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    reasons = ["malformed", *[r.reason for r in rules]]
    flagged = flag_rows(df, rules)
    bad = F.greatest(*[F.col(c) for c in reasons]) if len(reasons) > 1 else F.col(reasons[0])
    flagged = flagged.withColumn("_bad", bad)
    # Rows that pass every rule sort first, so the winner is chosen among them alone: a dirty re-send of a
    # sample (or a broken line that parsed a key) never outranks, and so never displaces, a clean copy.
    w = Window.partitionBy(*([cluster] if cluster else []), *key).orderBy(
        F.col("_bad").asc(), F.col("_source_file").desc(), F.col("_seq").desc()
    )
    ranked = flagged.withColumn("_rank", F.row_number().over(w))
    ranked = ranked.withColumn("duplicate", ~F.col("_bad") & (F.col("_rank") > 1))
    reasons.append("duplicate")
    reason_list = F.concat_ws(",", *[F.when(F.col(c), F.lit(c)) for c in reasons])
    quarantine = ranked.filter(F.col("_bad") | F.col("duplicate")).withColumn("reasons", reason_list)
    clean = ranked.filter(~F.col("_bad") & ~F.col("duplicate"))
    return clean, quarantine, reasons


def _write(df, path: Path, cfg: IngestConfig, partition: str = "date", clustered: bool = False) -> None:
    """One directory per ``partition`` value, rows sorted by element and time. ``clustered``: every value of
    ``partition`` already sits in one Spark partition (no shuffle needed, one writer per value all the same)."""
    block = cfg.parquet_block_size_mb * 1024 * 1024
    df = df if clustered else df.repartition(partition)
    (
        df.sortWithinPartitions(partition, *[c for c in ("element_id", "timestamp") if c in df.columns])
        .write.mode("error")
        .option("maxRecordsPerFile", max(1, block // EST_BYTES_PER_ROW))
        .partitionBy(partition)
        .parquet(str(path))
    )
    if not any(path.rglob("*.parquet")):  # nothing to write: still leave a readable, typed, empty dataset
        df.limit(0).coalesce(1).write.mode("overwrite").parquet(str(path))


def _parquet_facts(path: Path) -> dict[str, Any]:
    import pyarrow.parquet as pq

    files = sorted(path.rglob("*.parquet"))
    groups = [pq.ParquetFile(f).metadata for f in files]
    rg_bytes = [m.row_group(i).total_byte_size for m in groups for i in range(m.num_row_groups)]
    full = [m.row_group(i).total_byte_size for m in groups for i in range(m.num_row_groups - 1)]
    return {
        "files": len(files),
        "bytes": sum(f.stat().st_size for f in files),
        "row_groups": len(rg_bytes),
        "max_row_group_bytes": max(rg_bytes, default=0),
        "full_row_group_bytes": full,  # every row group but each file's last (which holds the remainder)
        "rows": sum(m.num_rows for m in groups),
    }


def ingest_source(
    spark,
    df,
    rules: list[Rule],
    key: tuple[str, ...],
    columns: tuple[str, ...],
    out: Path,
    name: str,
    cfg: IngestConfig,
) -> dict[str, Any]:
    from pyspark.sql import functions as F

    group = f"ingest:{name}"
    # When the dedup key holds the timestamp, all copies of a key fall on one day: the rows are shuffled once, by
    # day, as they are cached, and the window (grouped by day and key), the lake's write (partitioned by day) and
    # the quarantine's run inside those partitions. Otherwise (alarms: keyed by alarm_id alone) the window and
    # each write shuffle on their own.
    cluster = "_day" if cfg.dedup_by_day and "timestamp" in key else None
    if cluster:
        df = df.withColumn(cluster, F.to_date("timestamp")).repartition(cluster)
    df = df.persist()
    with job_group(spark, group, f"ingest {name}: read the raw exports and count rows in"):
        rows_in = df.count()
    clean, quarantine, reasons = split_rows(df, rules, key, cluster)
    day = F.col(cluster) if cluster else F.to_date("timestamp")
    clean = clean.select(*columns, day.alias("date"))
    with job_group(spark, group, f"ingest {name}: rules, dedup, write the lake"):
        _write(clean, out / name, cfg, clustered=cluster is not None)
    q_cols = [*[c for c in columns if c != "timestamp"], "timestamp", CORRUPT, "_source_file", *reasons, "reasons"]
    quarantine = quarantine.select(*q_cols).withColumn(
        "date", F.coalesce(F.to_date("timestamp").cast("string"), F.lit("unknown"))
    )
    with job_group(spark, group, f"ingest {name}: rules, dedup, write the quarantine"):
        _write(quarantine, out / "quarantine" / name, cfg, clustered=cluster is not None)
    out_facts = _parquet_facts(out / name)
    with job_group(spark, group, f"ingest {name}: count the quarantine by reason"):
        q = spark.read.parquet(str(out / "quarantine" / name))
        by_reason = q.select(*[F.sum(F.col(c).cast("long")).alias(c) for c in reasons]).first().asDict()
        rows_q = q.count()
    df.unpersist()
    if rows_in != out_facts["rows"] + rows_q:
        raise InvariantBroken(f"ingest lost rows in {name}: in={rows_in} out={out_facts['rows']} quarantined={rows_q}")
    return {
        "rows_in": rows_in,
        "rows_out": out_facts["rows"],
        "rows_quarantined": rows_q,
        "quarantine_by_reason": {k: int(v or 0) for k, v in by_reason.items()},
        "parquet": out_facts,
        "schema": clean.schema.jsonValue(),
    }


def run_ingest(spark, layout: RawLayout, out: Path, cfg: IngestConfig) -> dict[str, Any]:
    topo = layout.topology()
    ids = list(topo.element_ids)
    sources = {
        "kpi": ingest_source(
            spark,
            read_kpi(spark, layout),
            kpi_rules(ids, layout.start, layout.end),
            KEYS["kpi"],
            KPI_NAMES,
            out,
            "kpi",
            cfg,
        ),
        "alarms": ingest_source(
            spark,
            read_alarms(spark, layout),
            alarm_rules(ids, layout.start, layout.end),
            KEYS["alarms"],
            ALARM_NAMES,
            out,
            "alarms",
            cfg,
        ),
    }
    (out / "topology.json").write_bytes(layout.topology_file.read_bytes())
    return {
        "sources": sources,
        "rows_in": sum(s["rows_in"] for s in sources.values()),
        "rows_out": sum(s["rows_out"] for s in sources.values()),
        "rows_quarantined": sum(s["rows_quarantined"] for s in sources.values()),
        "window": {"start": layout.start.isoformat(), "end": layout.end.isoformat()},
        "parquet_block_size_bytes": cfg.parquet_block_size_mb * 1024 * 1024,
        "compression": cfg.compression,
        "dedup_winner": "latest export file, then last row in that file, among rows passing every rule",
    }


def check_against_validation(ingest: dict[str, Any], violations: dict[str, dict[str, int]]) -> None:
    """Quarantine reasons must match what GX reported for the same rules."""
    for source, counts in violations.items():
        got = ingest["sources"][source]["quarantine_by_reason"]
        for reason, n in counts.items():
            if got.get(reason, 0) != n:
                raise InvariantBroken(
                    f"ingest quarantined {got.get(reason, 0)} {source} rows for {reason}, validation reported {n}"
                )


def ingest_stage(spark, layout: RawLayout, violations: dict[str, dict[str, int]], out: Path, cfg: IngestConfig):
    """The ingest stage's lake in ``out`` and its manifest body (with the Spark conf in effect)."""
    from tasks.core.runtime import effective_spark_conf
    from tasks.core.secrets import redact

    summary = run_ingest(spark, layout, out, cfg)
    check_against_validation(summary, violations)
    return {"spark_conf": redact(effective_spark_conf(spark)), **summary}
