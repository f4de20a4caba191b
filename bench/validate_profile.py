"""Where validation's time goes: ``run_validation`` N times in one Spark application (the first on a cold JVM, the
rest warm) over the same exports, each run's wall time, its own laps (``timings_s``: the read, each GX suite, the
counts) and the Spark jobs each job group ran.

    .venv/bin/python bench/validate_profile.py RAW [--runs 3] [--docs] [--gx-sets] [--set ingest.KEY=VALUE ...]
        [--json OUT]

RAW: a directory of exports, e.g. 2.2 M KPI rows with 1 % dirt from
``faultline simulate --topology backbone/world --days 2 --dirt 0.01 --out RAW``. Spark is configured from the local
profile (``local[*]``); --set overrides it. Single runs, no median: run 1 pays the JVM's warm-up.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tasks.core.config import load_config  # noqa: E402
from tasks.core.runtime import detect_hardware, spark_conf, spark_session  # noqa: E402
from tasks.core.stages import rules  # noqa: E402
from tasks.core.stages.raw import discover  # noqa: E402
from tasks.core.stages.validate import run_validation  # noqa: E402

GROUPS = ("kpi", "kpi_file", "kpi_rows", "alarms", "alarms_file", "alarms_rows")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("raw", type=Path)
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--set", action="append", default=[], metavar="SECTION.KEY=VALUE")
    p.add_argument("--json", type=Path)
    p.add_argument("--docs", action="store_true", help="build GX's Data Docs as the pipeline does")
    p.add_argument("--gx-sets", action="store_true", help="every value set checked by GX's own set check")
    args = p.parse_args(argv)
    cfg = load_config("local", args.set)
    if args.gx_sets:  # no set counts as large: GX's Column.isin, a Py4J call per value
        rules.LARGE_SET = sys.maxsize
    spark = spark_session(spark_conf(cfg.ingest, detect_hardware(), None))
    layout, tracker, runs = discover(args.raw), spark.sparkContext.statusTracker(), []
    seen = dict.fromkeys(GROUPS, 0)
    with tempfile.TemporaryDirectory(prefix="validate-profile-") as tmp:
        for i in range(1, args.runs + 1):
            started = time.perf_counter()
            summary = run_validation(spark, layout, Path(tmp) / str(i), build_docs=args.docs, mostly=0.95)
            seconds = round(time.perf_counter() - started, 2)
            jobs = {g: len(tracker.getJobIdsForGroup(f"validate:{g}")) for g in GROUPS}
            runs.append({"run": i, "seconds": seconds, "rows": summary["rows"], "timings_s": summary["timings_s"],
                         "spark_jobs": {g: jobs[g] - seen[g] for g in GROUPS}})  # fmt: skip
            seen = jobs
            print(json.dumps(runs[-1]), flush=True)
    spark.stop()
    if args.json:
        args.json.write_text(json.dumps({"raw": str(args.raw), "master": cfg.ingest.master, "runs": runs}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
