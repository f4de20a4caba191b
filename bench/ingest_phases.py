"""Where CPU Spark's KPI ingest spends its time, phase by phase, on the ingest benchmark's raw exports.

    python bench/ingest_phases.py [RAW] [--repeats 3] [--out bench/results/ingest_phases.json]

Each phase is the one before plus one step, run as its own job to its end (an aggregate that needs every column
the step produces), so the increments are what each step costs: parse the CSV (every column), shuffle the rows
by day, the dedup window, materializing the ranked rows for the two writes (what the ingest stage persists).
The median of ``--repeats`` runs each, min and max kept. RAW defaults to the ingest benchmark's input
(``faultline bench ingest`` simulates it once).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def phases(spark, raw: Path) -> dict:
    from pyspark.sql import functions as F

    from tasks.core.stages.ingest import rank_rows, violations
    from tasks.core.stages.raw import discover, read_kpi
    from tasks.core.stages.rules import KEYS, kpi_rules

    layout = discover(raw)
    df = read_kpi(spark, layout)
    every = F.sum(F.xxhash64(*df.columns) % 1000)  # touches every column, so none is pruned
    flags = violations(kpi_rules(list(layout.topology().element_ids), layout.start, layout.end))
    by_day = df.withColumn("_day", F.to_date("timestamp")).repartition("_day")
    ranked = rank_rows(by_day, flags, KEYS["kpi"], "_day")
    return {
        "parse": lambda: df.agg(every).first(),
        "parse + shuffle by day": lambda: by_day.agg(every).first(),
        "parse + shuffle + dedup window": lambda: ranked.agg(F.sum(F.col("duplicate").cast("long"))).first(),
        "parse + shuffle + window + materialize": lambda: _materialize(ranked),
    }


def _materialize(ranked):
    from pyspark.sql import functions as F

    kept = ranked.persist()
    kept.agg(F.count(F.lit(1))).first()
    kept.unpersist(blocking=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("raw", nargs="?", default=".faultline/bench/ingest/raw-backbone_world-14d")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--out", default="bench/results/ingest_phases.json")
    a = ap.parse_args()
    import os

    from pyspark.sql import SparkSession

    from tasks.core.probes import java_home

    if java_home():
        os.environ["JAVA_HOME"] = java_home()
    spark = (
        SparkSession.builder.master("local[*]")
        .appName("faultline-bench-ingest-phases")
        .config("spark.driver.memory", "6g")
        .config("spark.ui.enabled", "false")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    raw = Path(a.raw)
    size = sum(p.stat().st_size for p in (raw / "kpi").glob("*.csv"))
    result = {"raw": str(raw), "kpi_bytes": size, "cores": os.cpu_count(), "repeats": a.repeats, "phases": {}}
    for name, job in phases(spark, raw).items():
        times = []
        for _ in range(a.repeats):
            t0 = time.perf_counter()
            job()
            times.append(time.perf_counter() - t0)
        med = statistics.median(times)
        result["phases"][name] = {
            "median_s": round(med, 1),
            "min_s": round(min(times), 1),
            "max_s": round(max(times), 1),
            "mb_per_s": round(size / 1e6 / med, 1),
        }
        print(
            f"{name}: {med:.1f} s (min {min(times):.1f}, max {max(times):.1f}), {size / 1e6 / med:.1f} MB/s", flush=True
        )
    spark.stop()
    Path(a.out).write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
