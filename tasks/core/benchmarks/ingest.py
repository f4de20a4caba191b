"""Ingest benchmark: Spark ingest throughput beside pyarrow's CSV -> Parquet on the same files, same run."""

from __future__ import annotations

import shutil
import statistics
import time
from pathlib import Path
from typing import Any

from tasks.core.config import IngestConfig
from tasks.core.runtime import Runtime, spark_session
from tasks.core.stages.ingest import run_ingest
from tasks.core.stages.raw import discover
from tasks.core.stages.simulate import simulate

MB = 1024 * 1024
ARROW_REPEATS = 3


def ensure_raw(work: Path, size_gb: float, topology: str = "backbone/world", seed: int = 7) -> Path:
    """Simulated exports of at least ``size_gb`` of KPI CSV (about 77 MB a day for backbone/world)."""
    days = max(1, int(size_gb * 1024 / 76) + 1)
    raw = work / f"raw-{topology.replace('/', '_')}-{days}d"
    if not (raw / "ground_truth.json").is_file():
        shutil.rmtree(raw, ignore_errors=True)
        simulate(topology, days, seed, raw, dirt=0.0)  # clean, so the pyarrow baseline parses every row
    return raw


def pyarrow_csv_to_parquet(files: list[Path], out: Path, compression: str) -> int:
    """The baseline: pyarrow reads each day's CSV with the same types and writes Parquet (no validation)."""
    import pyarrow as pa
    import pyarrow.csv as pcsv
    import pyarrow.parquet as pq

    types = {"timestamp": pa.timestamp("us", tz="UTC"), "element_id": pa.string(), "if_errors": pa.int64()}
    opts = pcsv.ConvertOptions(column_types=types, timestamp_parsers=[pcsv.ISO8601])
    parse = pcsv.ParseOptions(invalid_row_handler=lambda row: "skip")
    out.mkdir(parents=True, exist_ok=True)
    rows = 0
    for f in files:
        table = pcsv.read_csv(f, convert_options=opts, parse_options=parse)
        rows += table.num_rows
        pq.write_table(table, out / f"{f.stem}.parquet", compression=compression, row_group_size=1 << 22)
    return rows


def bench_ingest(work: Path, size_gb: float, cfg: IngestConfig, rt: Runtime) -> dict[str, Any]:
    raw = ensure_raw(work, size_gb)
    layout = discover(raw)
    raw_mb = sum(p.stat().st_size for p in layout.kpi_files + layout.alarm_files) / MB
    kpi_mb = sum(p.stat().st_size for p in layout.kpi_files) / MB
    for d in ("spark-out", "arrow-out"):
        shutil.rmtree(work / d, ignore_errors=True)
    spark = spark_session(rt.spark_conf)
    t0 = time.perf_counter()
    (work / "spark-out").mkdir()
    summary = run_ingest(spark, layout, work / "spark-out", cfg)
    spark_s = time.perf_counter() - t0
    arrow_runs = []
    for _ in range(ARROW_REPEATS):  # a few seconds each: the median of three (Spark's run, minutes, is one)
        shutil.rmtree(work / "arrow-out", ignore_errors=True)
        t0 = time.perf_counter()
        arrow_rows = pyarrow_csv_to_parquet(list(layout.kpi_files), work / "arrow-out", cfg.compression)
        arrow_runs.append(time.perf_counter() - t0)
    arrow_s = statistics.median(arrow_runs)
    spark_mb_s, arrow_mb_s = raw_mb / spark_s, kpi_mb / arrow_s
    return {
        "benchmark": "ingest",
        "hardware": rt.hardware.as_dict(),
        "spark_master": cfg.master,
        "raw_mb": round(raw_mb, 1),
        "kpi_csv_mb": round(kpi_mb, 1),
        "rows_in": summary["rows_in"],
        "rows_out": summary["rows_out"],
        "rows_quarantined": summary["rows_quarantined"],
        "spark_seconds": round(spark_s, 2),
        "spark_mb_per_s": round(spark_mb_s, 2),
        "spark_runs": 1,
        "pyarrow_seconds": round(arrow_s, 2),
        "pyarrow_runs": ARROW_REPEATS,
        "pyarrow_min_max_s": [round(min(arrow_runs), 2), round(max(arrow_runs), 2)],
        "pyarrow_rows": arrow_rows,
        "pyarrow_mb_per_s": round(arrow_mb_s, 2),
        "spark_vs_pyarrow": round(spark_mb_s / arrow_mb_s, 3),
        "note": "Spark does schema enforcement, 20 rule checks, quarantine, dedup (window) and date "
        "partitioning; pyarrow only parses and writes the KPI CSV. Inputs are clean simulator exports. "
        "Spark: one run (minutes); pyarrow: the median of three in the same invocation.",
    }
