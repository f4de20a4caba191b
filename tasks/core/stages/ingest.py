"""Spark ingest: raw exports -> typed, deduplicated Parquet partitioned by date, plus a quarantine.

Dedup winner (documented): among rows that pass every rule and share a key, the row from the latest
export file wins, and within a file the last one (a re-sent sample supersedes the earlier copy).
Every other copy goes to the quarantine with reason ``duplicate``. Late and out-of-order rows are
placed by their own timestamp, whatever file they arrived in.
"""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path
from typing import Any

from tasks.core.config import IngestConfig
from tasks.core.errors import InvariantBroken
from tasks.core.laps import Laps
from tasks.core.schema import ALARM_NAMES, KPI_NAMES
from tasks.core.sparkops import job_group, take_frames, unpersist
from tasks.core.stages.raw import CORRUPT, RawLayout
from tasks.core.stages.readers import input_files, read_alarms, read_kpi
from tasks.core.stages.rules import KEYS, Rule, alarm_rules, kpi_rules

SLOT = "_slot"  # a KPI row's shuffle partition on the CPU: its day and a bucket of its element (by_day)
FILE_NO = "_file_no"  # a row's export file as its place in the input's files in name order (number_files)
FILE_DAYS = "file_days"  # {export file: [days its rows fall on]} in the manifest, "unknown" for no timestamp
EST_BYTES_PER_ROW = 24  # compressed Parquet, measured on simulator output; sizes files toward the block size


def violations(rules: list[Rule]) -> dict:
    """Each quarantine reason as a Spark Column, true where a row has it: ``malformed`` (the line did not parse),
    then one per rule (a malformed row carries only that reason)."""
    from pyspark.sql import functions as F

    malformed = F.col(CORRUPT).isNotNull()
    return {"malformed": malformed, **{r.reason: ~malformed & F.coalesce(r.violation(), F.lit(False)) for r in rules}}


def number_files(df, files: list[str] | None = None) -> tuple[Any, Any]:
    """``df`` with ``_source_file`` (a ``file://`` URI a row, the widest value a KPI row carries through the shuffle,
    the window's sort and the cache) replaced by ``_file_no``, the file's 1-based place among the input's files in
    URI order, and the array of those URIs (``element_at`` gives a row's URI back). The dedup order is unchanged: a
    later file by name has a higher number. A row finds its number by the URI's 64-bit hash in a map of the listed
    files' hashes (folded into a literal when the plan is optimized): one long compared per file, where comparing the
    URIs, which differ only near their ends, cost the 1 GB read about 5 of its 42 task-seconds on 2 cores
    (``bench/ingest_profile.py``). Two listed files with one hash (odds of about n^2 / 2^65) fail the
    stage on Spark's duplicate map key, never a silent mix-up; a row from a file missing from the listing the read
    was planned on fails it too, naming the file. The guard is a ``when``: the RAPIDS Accelerator evaluates a
    conditional's side-effecting branch only on the rows that take it, but every argument of a ``coalesce`` on the
    whole batch (GpuCoalesce), so a ``coalesce`` guard fails every KPI batch under the plugin. ``files``: the
    listing, where ``df`` cannot give it (a cached frame lists no files)."""
    from pyspark.sql import functions as F

    files = sorted(df.inputFiles() if files is None else files)
    uris, uri = F.array(*[F.lit(u) for u in files]), F.col("_source_file")
    by_hash = F.create_map(*[x for n, u in enumerate(files, 1) for x in (F.xxhash64(F.lit(u)), F.lit(n))])
    found = by_hash[F.xxhash64(uri)].cast("int")
    unlisted = F.raise_error(F.concat(F.lit("ingest: a row from a file not in the input's listing: "), uri))
    no = F.when(found.isNull(), unlisted.cast("int")).otherwise(found)
    return df.withColumn(FILE_NO, no).drop("_source_file"), uris


def _file_numbers(df, files: list[str]) -> tuple[Any, Any]:
    """:func:`number_files`, and the quarantine's ``_source_file`` column (the URI given back by the number), on the
    CPU and with the RAPIDS Accelerator alike: under the plugin the ``when`` guard runs on the GPU, and the lake,
    quarantine and GX results with the number are the CPU's, row for row (``bench/device/same_lake.py``)."""
    from pyspark.sql import functions as F

    df, uris = number_files(df, files)
    return df, F.element_at(uris, F.col(FILE_NO)).alias("_source_file")


def rank_rows(df, flags: dict, key: tuple[str, ...], cluster: tuple[str, ...] = ()):
    """Every row with ``_bad`` (it breaks a rule) and ``duplicate`` (a clean row that lost to another clean copy of
    its key). The reasons themselves are not columns here: they are evaluated where they are needed (the counts,
    the quarantined rows), so the rows that are kept between the two writes stay narrow. ``cluster``: columns the
    rows are already partitioned by and that the key determines (the day of a KPI key's timestamp, its slot): the
    window groups by them too, which splits no key's copies and needs no shuffle of its own."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    every = list(flags.values())  # the reasons, from violations()
    flagged = df.withColumn("_bad", F.greatest(*every) if len(every) > 1 else every[0])
    # Rows that pass every rule sort first, so the winner is chosen among them alone: a dirty re-send of a
    # sample (or a broken line that parsed a key) never outranks, and so never displaces, a clean copy.
    newest = F.col(FILE_NO).desc()  # the later export file by name (number_files)
    w = Window.partitionBy(*cluster, *key).orderBy(F.col("_bad").asc(), newest, F.col("_seq").desc())
    rank = F.row_number().over(w)
    return flagged.withColumn("duplicate", ~F.col("_bad") & (rank > 1))


def _clean(ranked):
    from pyspark.sql import functions as F

    return ranked.filter(~F.col("_bad") & ~F.col("duplicate"))


def _quarantined(ranked, flags: dict):
    """The rows that break a rule or lost to a clean copy, a boolean column per reason and ``reasons`` listing them."""
    from pyspark.sql import functions as F

    q = ranked.filter(F.col("_bad") | F.col("duplicate")).select("*", *[v.alias(k) for k, v in flags.items()])
    return q.withColumn("reasons", F.concat_ws(",", *[F.when(F.col(c), F.lit(c)) for c in [*flags, "duplicate"]]))


def _quarantine_rows(ranked, flags: dict, columns: tuple[str, ...], source: str, reasons: list[str]):
    """The quarantine's rows as written: the columns, the line's text, its file, each reason's flag, the reasons, and
    the day (``unknown`` where the timestamp did not parse)."""
    from pyspark.sql import functions as F

    q_cols = [*[c for c in columns if c != "timestamp"], "timestamp", CORRUPT, source, *reasons, "reasons"]
    date = F.coalesce(F.to_date("timestamp").cast("string"), F.lit("unknown"))
    return _quarantined(ranked, flags).select(*q_cols).withColumn("date", date)


def _write(df, path: Path, cfg: IngestConfig, partition: str = "date", clustered: bool = False) -> None:
    """One directory per ``partition`` value, rows sorted by element and time. ``clustered``: the rows already sit
    where they are written from (a day in one Spark partition, or in one per bucket: :func:`by_day`), so no shuffle
    is needed; a ``_slot`` column is sorted on (the window's order, so no sort runs again) and not written."""
    block = cfg.parquet_block_size_mb * 1024 * 1024
    df = df if clustered else df.repartition(partition)
    order = [c for c in (SLOT, "element_id", "timestamp") if c in df.columns]  # the window's order: no sort again
    df = df.sortWithinPartitions(partition, *order).drop(SLOT)
    df.write.mode("error").option("maxRecordsPerFile", max(1, block // EST_BYTES_PER_ROW)).partitionBy(
        partition
    ).parquet(str(path))
    if not any(path.rglob("*.parquet")):  # nothing to write: still leave a readable, typed, empty dataset
        df.limit(0).coalesce(1).write.mode("overwrite").parquet(str(path))


def _parquet_facts(path: Path) -> dict[str, Any]:
    import pyarrow.parquet as pq

    files = sorted(path.rglob("*.parquet"))
    groups = [pq.ParquetFile(f).metadata for f in files]
    rg_bytes = [m.row_group(i).total_byte_size for m in groups for i in range(m.num_row_groups)]
    full = [m.row_group(i).total_byte_size for m in groups for i in range(m.num_row_groups - 1)]
    sizes = sorted(f.stat().st_size for f in files)
    return {
        "files": len(files),
        "partitions": len({f.parent for f in files}),  # the lake's date=... directories that hold a file
        "bytes": sum(sizes),
        "median_file_bytes": sizes[len(sizes) // 2] if sizes else 0,
        "row_groups": len(rg_bytes),
        "max_row_group_bytes": max(rg_bytes, default=0),
        "full_row_group_bytes": full,  # every row group but each file's last (which holds the remainder)
        "rows": sum(m.num_rows for m in groups),
    }


def _counts(flags: dict) -> list:
    """What one pass over the ranked rows counts: every row, the quarantined ones, and each reason."""
    from pyspark.sql import functions as F

    flags = {**flags, "duplicate": F.col("duplicate")}
    day = F.coalesce(F.to_date("timestamp").cast("string"), F.lit("unknown"))
    return [
        F.count(F.lit(1)).alias("rows_in"),
        F.sum((F.col("_bad") | F.col("duplicate")).cast("long")).alias("rows_quarantined"),
        *[F.sum(v.cast("long")).alias(k) for k, v in flags.items()],
        # which days each export file's rows fall on: where a later increment finds a day's rows (file_days)
        F.collect_set(F.concat_ws("|", F.col(FILE_NO).cast("string"), day)).alias(FILE_DAYS),
    ]


def by_day(df, span: tuple[datetime, datetime], partitions: int, gpu: bool = False) -> tuple[Any, tuple[str, ...]]:
    """``df`` (with ``_day``) shuffled so that every copy of a KPI key lands in one partition, and the columns that
    name a partition (for the window to group by).

    On the CPU: ``partitions`` spread over the days in ``span``, each day cut into ``ceil(partitions / days)``
    buckets by element, each (day, bucket) its own partition (Spark 4.1's repartitionById): no two days share a
    task, and a host with more cores than days still has a task per core (hashing by day alone left 14 days in 4
    lopsided tasks, and 16 cores could never run more than one task a day). A row outside ``span`` (the window rule
    quarantines it) or without a day goes where its slot falls, with every copy of its key. The lake gets a file per
    bucket and day. With the RAPIDS Accelerator (``gpu``): hashed by day, the plan the plugin places on the GPU."""
    from pyspark.sql import functions as F

    if gpu:
        return df.repartition("_day"), ("_day",)
    start, end = span
    days = max(1, (end.date() - start.date()).days)
    buckets = max(1, -(-partitions // days))
    day_no = F.datediff(F.col("_day"), F.lit(start.date()))
    slot = F.pmod(day_no * buckets + F.pmod(F.xxhash64("element_id"), F.lit(buckets)), F.lit(days * buckets))
    return df.withColumn(SLOT, slot.cast("int")).repartitionById(days * buckets, SLOT), ("_day", SLOT)


def _counting(spark, ranked, flags: dict, group: str, name: str, observe: bool):
    """``ranked`` for the first write over every row (the quarantine's), and what gives the counts (:func:`_counts`)
    once that write has run.

    With ``observe`` (on the CPU, for clustered rows: the KPI's, where the write reads the persisted rows with no
    shuffle between), the counts ride on that write (an Observation: no pass over the rows for a count alone).
    Otherwise the persisted rows are counted in a pass of their own first: the RAPIDS Accelerator cannot plan
    CollectMetrics and would take the write's whole query off the GPU; and where the write shuffles, AQE drops an
    observation above a stage that comes out empty (an alarm day with nothing to quarantine), so the metrics would
    never arrive."""
    from pyspark.sql import Observation

    def ints(row: dict) -> dict[str, Any]:
        return {k: sorted(v or []) if k == FILE_DAYS else int(v or 0) for k, v in row.items()}

    if observe:
        observation = Observation(f"ingest-{name}")
        return ranked.observe(observation, *_counts(flags)), lambda: ints(observation.get)
    with job_group(spark, group, f"ingest {name}: read, check and rank the raw exports; count rows in"):
        counts = ints(ranked.agg(*_counts(flags)).first().asDict())
    return ranked, lambda: counts


def file_days(files: list[str], pairs: list[str]) -> dict[str, list[str]]:
    """``{file: [day, ...]}`` (paths, days sorted) from the ``"<file no>|<day>"`` pairs :func:`_counts` collects."""
    from urllib.parse import unquote, urlparse

    out: dict[str, list[str]] = {}
    for pair in pairs:
        no, day = pair.split("|", 1)
        out.setdefault(unquote(urlparse(files[int(no) - 1]).path), []).append(day)
    return {f: sorted(days) for f, days in sorted(out.items())}


def _check_rows(name: str, counts: dict[str, int], lake: dict[str, Any], quarantine: dict[str, Any]) -> tuple[int, int]:
    """Rows in = lake + quarantine, each as the files on disk say (Parquet footers) against the counts of the pass
    that read the input."""
    rows_in, rows_q = counts["rows_in"], counts["rows_quarantined"]
    if (lake["rows"], quarantine["rows"]) != (rows_in - rows_q, rows_q):
        raise InvariantBroken(
            f"ingest lost rows in {name}: in={rows_in}, lake={lake['rows']} (expected {rows_in - rows_q}), "
            f"quarantine={quarantine['rows']} (expected {rows_q})"
        )
    return rows_in, rows_q


def ingest_source(
    spark,
    df,
    rules: list[Rule],
    key: tuple[str, ...],
    columns: tuple[str, ...],
    out: Path,
    name: str,
    cfg: IngestConfig,
    span: tuple[datetime, datetime],
    files: list[str],
) -> dict[str, Any]:
    """One source's lake and quarantine. The raw input is read once: that pass parses, flags and ranks the rows,
    keeps them (persisted) for the two writes, and counts them (rows in, quarantined, per reason) as the first
    write goes (:func:`_counting`). ``files``: the input's listing (``readers.input_files``; a cached df has none)."""
    from pyspark.sql import functions as F

    from tasks.core.runtime import effective_spark_conf
    from tasks.core.sparkops import plugin_active

    group, gpu, lap = f"ingest:{name}", plugin_active(effective_spark_conf(spark)), Laps()
    files = sorted(files)  # number_files' order: a row's _file_no is its file's place here, from 1
    df, source = _file_numbers(df, files)
    # When the dedup key holds the timestamp, all copies of a key fall on one day: the rows are shuffled once, by
    # day (by_day), and the window, the lake's write and the quarantine's run inside those partitions. Otherwise
    # (alarms: keyed by alarm_id alone) the window and each write shuffle on their own.
    cluster: tuple[str, ...] = ()
    if cfg.dedup_by_day and "timestamp" in key:
        df, cluster = by_day(df.withColumn("_day", F.to_date("timestamp")), span, cfg.shuffle_partitions, gpu)
    flags = violations(rules)
    reasons = [*flags, "duplicate"]
    ranked = rank_rows(df, flags, key, cluster).persist()
    observed, counted = _counting(spark, ranked, flags, group, name, observe=bool(cluster) and not gpu)
    lap(f"{name}_count")  # a pass of its own where the counts cannot ride on the quarantine's write
    quarantine = _quarantine_rows(observed, flags, columns, source, reasons)
    # the quarantine first: its pass reads every ranked row (so it counts them, and fills the cache); the lake's
    # write then reads the filled cache, whose order (the window's) spares it a sort
    with job_group(spark, group, f"ingest {name}: read, check and rank the raw exports; write the quarantine"):
        _write(quarantine, out / "quarantine" / name, cfg, clustered=bool(cluster))
    counts = counted()
    lap(f"{name}_quarantine")
    day = F.col("_day") if cluster else F.to_date("timestamp")
    clean = _clean(ranked).select(*columns, day.alias("date"), *[c for c in cluster if c == SLOT])
    with job_group(spark, group, f"ingest {name}: write the lake"):
        _write(clean, out / name, cfg, clustered=bool(cluster))
    ranked.unpersist()
    lap(f"{name}_lake")
    out_facts = _parquet_facts(out / name)
    rows_in, rows_q = _check_rows(name, counts, out_facts, _parquet_facts(out / "quarantine" / name))
    lap(f"{name}_footers")
    return {
        "timings_s": lap.seconds,
        "rows_in": rows_in,
        "rows_out": out_facts["rows"],
        "rows_quarantined": rows_q,
        "quarantine_by_reason": {k: counts[k] for k in reasons},
        FILE_DAYS: file_days(files, counts[FILE_DAYS]),
        "parquet": out_facts,
        "schema": clean.drop(SLOT).schema.jsonValue(),
    }


def run_ingest(spark, layout: RawLayout, out: Path, cfg: IngestConfig) -> dict[str, Any]:
    """Both sources' lakes and quarantines. The raw frames validation parsed and cached in this application
    (``sparkops.take_frames``) are used where it read these very files; otherwise the exports are read again."""
    topo = layout.topology()
    ids = list(topo.element_ids)
    shared = take_frames(spark, layout.read_key())
    frames = shared or {"kpi": read_kpi(spark, layout), "alarms": read_alarms(spark, layout)}
    # a cached frame lists no files (nor does a new read of it: the cache stands in for its plan); a text read of
    # the same paths lists them as the CSV and JSON readers name a row's file
    files = {"kpi": input_files(spark, layout.kpi_files), "alarms": input_files(spark, layout.alarm_files)}
    sources = {
        "kpi": ingest_source(
            spark,
            frames["kpi"],
            kpi_rules(ids, layout.start, layout.end),
            KEYS["kpi"],
            KPI_NAMES,
            out,
            "kpi",
            cfg,
            (layout.start, layout.end),
            files["kpi"],
        ),
        "alarms": ingest_source(
            spark,
            frames["alarms"],
            alarm_rules(ids, layout.start, layout.end),
            KEYS["alarms"],
            ALARM_NAMES,
            out,
            "alarms",
            cfg,
            (layout.start, layout.end),
            files["alarms"],
        ),
    }
    if shared:
        unpersist(shared)
    timings = {k: v for source in sources.values() for k, v in source.pop("timings_s").items()}
    (out / "topology.json").write_text(json.dumps(topo.to_json()))  # whatever format it came in, JSON downstream
    return {
        "timings_s": timings,  # where ingest's time goes, by source and part
        "raw_parse": "validation's, in the same Spark application" if shared else "read and parsed here",
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


def ingest_stage(
    spark, layout: RawLayout, violations: dict[str, dict[str, int]] | None, out: Path, cfg: IngestConfig
) -> dict[str, Any]:
    """The ingest stage's lake in ``out`` and its manifest body (with the Spark conf in effect). ``violations``:
    validation's counts, which the quarantine must match (None: the caller checks them, as an increment does)."""
    from tasks.core.runtime import effective_spark_conf
    from tasks.core.secrets import redact

    summary = run_ingest(spark, layout, out, cfg)
    if violations is not None:
        check_against_validation(summary, violations)
    return {"spark_conf": redact(effective_spark_conf(spark)), **summary}
