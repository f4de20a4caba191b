"""Where CPU Spark's KPI ingest spends its time, phase by phase, on the ingest benchmark's raw exports.

    python bench/ingest_phases.py [RAW] [--profile local] [--set ingest.driver_memory_gb=6 ...] [--conf K=V ...]
        [--phases parse shuffle window materialize materialize-uncompressed materialize-checkpoint]
        [--repeats 3] [--out .faultline/bench/ingest_phases.json]

Each phase is the one before plus one step, run as its own job to its end (an aggregate that needs every column
the step produces), so the increments are what each step costs: parse the CSV (every column), shuffle the rows
by day, the dedup window, materializing the ranked rows for the two writes (what the ingest stage persists).
The median of ``--repeats`` runs each, min and max kept (``measure.repeated``). Every repeat builds its plan
afresh, so none reuses the shuffle files of the one before.

Spark runs under the pipeline's own settings (``runtime.spark_conf`` of the profile's ``ingest`` section, ``--set``
applied), so the phases add up to the benchmark's first job; ``--conf`` adds raw Spark settings on top. The
``materialize-*`` phases keep the ranked rows other ways than the stage does (an uncompressed cache,
``localCheckpoint``), to compare them in one invocation. RAW defaults to the ingest benchmark's input (``faultline
bench ingest`` simulates it once).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

KEEP = {  # how the ranked rows are kept for the two writes: the stage persists them (Spark's compressed cache)
    "materialize": "persist",
    "materialize-uncompressed": "persist, cache uncompressed",
    "materialize-checkpoint": "localCheckpoint",
}
PHASES = ("parse", "shuffle", "window", *KEEP)


def _plan(spark, raw: Path):
    """The stage's KPI plan up to the ranked rows, built afresh: a repeat must not reuse the shuffle files of the
    run before (a Dataset keeps its physical plan, so a second action on the same one skips its shuffle)."""
    from pyspark.sql import functions as F

    from tasks.core.stages.ingest import number_files, rank_rows, violations
    from tasks.core.stages.raw import discover
    from tasks.core.stages.readers import read_kpi
    from tasks.core.stages.rules import KEYS, kpi_rules

    layout = discover(raw)
    df = read_kpi(spark, layout)
    flags = violations(kpi_rules(list(layout.topology().element_ids), layout.start, layout.end))
    by_day = number_files(df)[0].withColumn("_day", F.to_date("timestamp")).repartition("_day")
    return df, by_day, rank_rows(by_day, flags, KEYS["kpi"], "_day")


def run_phase(spark, raw: Path, phase: str) -> None:
    """One run of ``phase`` to its end on a fresh plan: an aggregate that needs every column the step produces."""
    from pyspark.sql import functions as F

    df, by_day, ranked = _plan(spark, raw)
    every = F.sum(F.xxhash64(*df.columns) % 1000)  # touches every column, so none is pruned
    if phase == "parse":
        df.agg(every).first()
    elif phase == "shuffle":
        by_day.agg(every).first()
    elif phase == "window":
        ranked.agg(F.sum(F.col("duplicate").cast("long"))).first()
    elif phase == "materialize-checkpoint":
        ranked.localCheckpoint(eager=True)
    else:
        compressed = phase != "materialize-uncompressed"
        spark.conf.set("spark.sql.inMemoryColumnarStorage.compressed", str(compressed).lower())
        kept = ranked.persist()
        kept.agg(F.count(F.lit(1))).first()
        kept.unpersist(blocking=True)
        spark.conf.set("spark.sql.inMemoryColumnarStorage.compressed", "true")


NAMES = {
    "parse": "parse",
    "shuffle": "parse + shuffle by day",
    "window": "parse + shuffle + dedup window",
    **{k: f"parse + shuffle + window + materialize ({v})" for k, v in KEEP.items()},
}


def _args() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("raw", nargs="?", default=".faultline/bench/ingest/raw-backbone_world-14d")
    ap.add_argument("--profile", default="local")
    ap.add_argument("--set", dest="sets", action="append", default=[], help="a config override, e.g. ingest.x=y")
    ap.add_argument("--conf", action="append", default=[], help="a raw Spark setting K=V on top of the profile's")
    ap.add_argument("--phases", nargs="+", choices=PHASES, default=list(PHASES[:4]))
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--out", default=".faultline/bench/ingest_phases.json")
    return ap.parse_args()


def main() -> None:
    from tasks.core.benchmarks.measure import repeated
    from tasks.core.config import load_config
    from tasks.core.runtime import detect_hardware, effective_spark_conf, spark_conf, spark_session

    a = _args()
    cfg = load_config(a.profile, a.sets)
    extra = dict(kv.split("=", 1) for kv in a.conf)
    conf = {**spark_conf(cfg.ingest, detect_hardware(), None), "spark.app.name": "faultline-bench-ingest-phases"}
    spark = spark_session({**conf, "spark.ui.enabled": "false", **extra})
    spark.sparkContext.setLogLevel("ERROR")
    raw = Path(a.raw)
    size = sum(p.stat().st_size for p in (raw / "kpi").glob("*.csv"))
    shown = ("spark.master", "spark.driver.memory", "spark.sql.shuffle.partitions")
    effective = effective_spark_conf(spark)
    result = {
        "raw": str(raw),
        "kpi_bytes": size,
        "cores": os.cpu_count(),
        "profile": a.profile,
        "settings": a.sets,
        "spark_conf": {**{k: effective.get(k) for k in shown}, **extra},
        "phases": {},
    }
    for key in a.phases:
        name = NAMES[key]
        r = repeated(lambda key=key: _timed(lambda: run_phase(spark, raw, key)), a.repeats)
        result["phases"][name] = {k: round(r[k], 1) for k in ("median_s", "min_s", "max_s")}
        result["phases"][name].update(repeats=r["repeats"], mb_per_s=round(size / 1e6 / r["median_s"], 1))
        print(f"{name}: {r['median_s']:.1f} s (min {r['min_s']:.1f}, max {r['max_s']:.1f}), "
              f"{size / 1e6 / r['median_s']:.1f} MB/s", flush=True)  # fmt: skip
    spark.stop()
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    Path(a.out).write_text(json.dumps(result, indent=2) + "\n")


def _timed(job) -> dict:
    t0 = time.perf_counter()
    job()
    return {"seconds": time.perf_counter() - t0}


if __name__ == "__main__":
    main()
