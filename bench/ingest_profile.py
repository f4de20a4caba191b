"""Where the CPU ingest's time goes: the ingest run N times in one Spark application (the first on a cold JVM, the
rest warm), each run's wall time, and from the application's event log each job's time and each stage's summed task
time, GC and spill (job seconds by description: ``bench/spark_jobs.py``, summed over the runs).

    .venv/bin/python bench/ingest_profile.py [RAW] [--runs 2] [--set ingest.KEY=VALUE ...] [--json OUT]

RAW defaults to the exports `faultline bench ingest --size-gb 1` simulated (.faultline/bench/ingest/raw-...-14d).
The ingest is configured from the local profile (as `faultline bench ingest` runs CPU Spark); --set overrides it.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.spark_jobs import job_seconds  # noqa: E402
from tasks.core.config import load_config  # noqa: E402
from tasks.core.runtime import detect_hardware, spark_conf, spark_session  # noqa: E402
from tasks.core.sparkops import read_event_log  # noqa: E402
from tasks.core.stages.ingest import run_ingest  # noqa: E402
from tasks.core.stages.raw import discover  # noqa: E402

DEFAULT_RAW = Path(".faultline/bench/ingest/raw-backbone_world-14d")
NOTE = "Each entry of runs is one run (run 1 on a cold JVM, the rest warm, in one Spark application): no median."


def stage_totals(events: list[dict]) -> dict[int, dict[str, float]]:
    """Each stage's tasks, summed task seconds, GC seconds, spill and shuffle written (MB), from one event log."""
    stages: dict[int, Counter] = {}
    for e in events:
        if e["Event"] != "SparkListenerTaskEnd":
            continue
        m, s = e.get("Task Metrics") or {}, stages.setdefault(e["Stage ID"], Counter())
        s["tasks"] += 1
        s["task_s"] += m.get("Executor Run Time", 0) / 1000
        s["gc_s"] += m.get("JVM GC Time", 0) / 1000
        s["spill_mb"] += m.get("Disk Bytes Spilled", 0) / 1e6
        s["shuffle_write_mb"] += (m.get("Shuffle Write Metrics") or {}).get("Shuffle Bytes Written", 0) / 1e6
    return {sid: {k: round(v, 2) for k, v in s.items()} for sid, s in sorted(stages.items())}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("raw", nargs="?", type=Path, default=DEFAULT_RAW)
    ap.add_argument("--runs", type=int, default=2)
    ap.add_argument("--set", action="append", default=[], dest="sets")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    layout = discover(args.raw)
    cfg = load_config("local", args.sets).ingest
    work = Path(tempfile.mkdtemp(prefix="ingest-profile-"))
    spark = spark_session({**spark_conf(cfg, detect_hardware(), work / "events"), "spark.app.name": "ingest-profile"})
    runs = []
    try:
        for i in range(args.runs):
            out = work / f"lake{i}"
            out.mkdir()
            t0 = time.perf_counter()
            summary = run_ingest(spark, layout, out, cfg)
            runs.append({"run": i + 1, "seconds": round(time.perf_counter() - t0, 2), "rows_in": summary["rows_in"]})
            print(f"run {i + 1}: {runs[-1]['seconds']} s ({'cold' if i == 0 else 'warm'} JVM)", flush=True)
            shutil.rmtree(out)
    finally:
        spark.stop()
    app = next((work / "events").iterdir())
    _, jobs = job_seconds(app)
    report = {"raw": str(args.raw), "sets": args.sets, "repeats": 1, "extrapolated": False, "note": NOTE, "runs": runs}
    report["job_seconds_all_runs"] = jobs
    report["stages"] = stage_totals(read_event_log(app))
    for desc, sec in jobs.items():
        print(f"  {sec:7.1f} s  {desc} (all runs)")
    for sid, s in report["stages"].items():
        if s.get("task_s", 0) >= 1:
            print(f"  stage {sid:3d}: {dict(s)}")
    if args.json:
        args.json.write_text(json.dumps(report, indent=2) + "\n")
    shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
