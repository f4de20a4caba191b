"""The GPU-utilization repeats of one device chain (``session.sh``'s ``util`` step) summed up: each repeat's verdict,
steady-state utilization and train-stage seconds, and the median, min and max of both.

    python bench/device/util_summary.py RESULTS_DIR      (writes RESULTS_DIR/util.json)

Reads ``util_run_<i>.json`` (the run's ``--json`` summary) and ``util_check_<i>.json`` (``faultline check
--json``; the verdict's evidence, as the checklist words it: ``steady-state 91.8 % over 89 samples ...``)."""

from __future__ import annotations

import json
import re
import statistics
import sys
from pathlib import Path

STEADY = re.compile(r"steady-state (?P<pct>[\d.]+) % over (?P<n>\d+) samples")


def last_json(path: Path) -> dict:
    return json.loads(path.read_text().strip().splitlines()[-1])


def spread(values: list[float]) -> dict:
    return {"median": round(statistics.median(values), 2), "min": min(values), "max": max(values)}


def summarise(results: Path) -> dict:
    repeats = []
    for check in sorted(results.glob("util_check_*.json"), key=lambda p: int(p.stem.rsplit("_", 1)[1])):
        i = int(check.stem.rsplit("_", 1)[1])
        verdict = next(c for c in last_json(check)["checks"] if c["id"] == "gpu_utilization")
        m = STEADY.search(verdict["evidence"])
        run = last_json(results / f"util_run_{i}.json")
        repeats.append(
            {
                "repeat": i,
                "verdict": verdict["status"],
                "steady_state_pct": float(m["pct"]) if m else None,
                "samples": int(m["n"]) if m else None,
                "train_s": run["stages"]["train"]["seconds"],
            }
        )
    util = [r["steady_state_pct"] for r in repeats if r["steady_state_pct"] is not None]
    return {
        "repeats": repeats,
        "verdicts": [r["verdict"] for r in repeats],
        "steady_state_pct": spread(util) if util else None,
        "train_s": spread([r["train_s"] for r in repeats]) if repeats else None,
    }


if __name__ == "__main__":
    out = Path(sys.argv[1])
    summary = summarise(out)
    (out / "util.json").write_text(json.dumps(summary, indent=1) + "\n")
    print(json.dumps({k: v for k, v in summary.items() if k != "repeats"}))
