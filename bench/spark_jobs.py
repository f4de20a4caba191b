"""Seconds by job description in Spark event logs (Spark 4's rolling, zstd-compressed format): where a Spark
stage's time went, by the descriptions validate and ingest give their jobs.

    python bench/spark_jobs.py <root>/store/spark-events [N]     (the N newest applications, default 2)

A job's seconds run from its submission to its end; jobs of one description are summed."""

from __future__ import annotations

import collections
import sys
from pathlib import Path

from tasks.core.sparkops import read_event_log


def job_seconds(app: Path) -> tuple[str, dict[str, float]]:
    ev = read_event_log(app)
    name = next((e["App Name"] for e in ev if e["Event"] == "SparkListenerApplicationStart"), "?")
    start = {
        e["Job ID"]: (e["Submission Time"], e["Properties"].get("spark.job.description") or "(no description)")
        for e in ev
        if e["Event"] == "SparkListenerJobStart"
    }
    by: dict[str, float] = collections.defaultdict(float)
    for e in ev:
        if e["Event"] == "SparkListenerJobEnd" and e["Job ID"] in start:
            t0, desc = start[e["Job ID"]]
            by[desc] += (e["Completion Time"] - t0) / 1000
    return name, dict(by)


if __name__ == "__main__":
    apps = sorted(Path(sys.argv[1]).iterdir(), key=lambda p: p.stat().st_mtime)
    for app in apps[-int(sys.argv[2]) if len(sys.argv) > 2 else -2 :]:
        name, by = job_seconds(app)
        print(f"{app.name} ({name})")
        for desc, s in by.items():
            print(f"  {s:7.1f} s  {desc}")
