"""The simulator's time with its export text made inline, in writer processes, and not at all (the simulating
process's own share: the floor that enough writer processes approach), alternated, on this host.

    python bench/simulate_writers.py [--topology backbone/world] [--days 4] [--workers 1] [--runs 3]

Prints each variant's seconds with the median, min and max; the exports of the first two are byte-identical
(tests/core/stages/test_simulate.py holds them together)."""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import tempfile
import time
from pathlib import Path

import tasks.core.stages.simulate as sm

WRITE_KPI = sm._write_kpi


def timed(topology: str, days: int, workers: int | None) -> float:
    """Seconds of one simulation with ``workers`` writer processes (None: the KPI text not made at all)."""
    out = Path(tempfile.mkdtemp(prefix="simwriters-"))
    sm.writer_processes = lambda elements: workers or 0
    sm._write_kpi = WRITE_KPI if workers is not None else (lambda *args: (0, {}))
    try:
        started = time.perf_counter()
        sm.simulate(topology, days, 7, out, dirt=0.01)
        return time.perf_counter() - started
    finally:
        shutil.rmtree(out, ignore_errors=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--topology", default="backbone/world")
    ap.add_argument("--days", type=int, default=4)
    ap.add_argument("--workers", type=int, default=1)
    ap.add_argument("--runs", type=int, default=3)
    a = ap.parse_args()
    variants = {"inline": 0, f"{a.workers} writer processes": a.workers, "simulating process alone": None}
    runs: dict[str, list[float]] = {name: [] for name in variants}
    for _ in range(a.runs):
        for name, workers in variants.items():
            runs[name].append(round(timed(a.topology, a.days, workers), 2))
    out = {k: {"runs_s": v, "median_s": statistics.median(v), "min_s": min(v), "max_s": max(v)}
           for k, v in runs.items()}  # fmt: skip
    print(json.dumps({"topology": a.topology, "days": a.days, "cores": os.cpu_count(), **out}, indent=1))


if __name__ == "__main__":
    main()
