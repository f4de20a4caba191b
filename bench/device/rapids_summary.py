"""The plugin's stage times against CPU Spark's, from one lease's files: session.sh's ``lake`` step (validate and
ingest on CPU Spark, all the host's cores) and its ``rapids`` step (the same exports, the RAPIDS Accelerator
executing on the GPU), both on the same host in the same lease; with the ingest plan's placement, parsed from the
plugin's explain log where it came back.

    python bench/device/rapids_summary.py OUT_JSON LEASE_DIR...

Each stage is one run a side (a whole stage over 15.5 M rows): the ratio is of single runs, not of medians."""

from __future__ import annotations

import gzip
import json
import sys
from pathlib import Path

from util_summary import last_json  # bench/device, beside this script

from tasks.core.sparkops import parse_explain


def lease(d: Path) -> dict:
    cpu, gpu = last_json(d / "lake.json")["stages"], last_json(d / "rapids_2.json")["stages"]
    out: dict = {"lease": d.name, "driver": " ".join((d / "device.txt").read_text().split("\n")[2].strip(" |").split())}
    for stage in ("validate", "ingest"):
        c, g = cpu[stage], gpu[stage]
        rows = ("rows_in", "rows_out", "rows_quarantined")
        out[stage] = {
            "cpu_spark_s": c["seconds"],
            "rapids_s": g["seconds"],
            "cpu_over_rapids": round(c["seconds"] / g["seconds"], 2),
            "rows": {k: c[k] for k in rows},
            "same_row_counts": all(c[k] == g[k] for k in rows),
        }
    log = d / "rapids_explain_ingest_2.log.gz"
    if log.is_file():
        out["ingest_placement"] = parse_explain(gzip.open(log, "rt").read())
    return out


if __name__ == "__main__":
    res = {
        "what": "validate and ingest, CPU Spark (local[*], 16 cores) vs the RAPIDS Accelerator (executeOnGPU, "
        "concurrentGpuTasks 2, MULTITHREADED shuffle) on the same raw exports (backbone/world, 14 days)",
        "repeats": 1,
        "note": "single runs: each side is one whole stage (12-64 s), one each per lease, as the lease's device time "
        "allowed; the ratios are of the two sides within one lease on one host (not medians; no min/max)",
        "extrapolated": False,
        "leases": [lease(Path(p)) for p in sys.argv[2:]],
    }
    Path(sys.argv[1]).write_text(json.dumps(res, indent=1) + "\n")
    print(json.dumps({x["lease"]: {s: x[s]["cpu_over_rapids"] for s in ("validate", "ingest")} for x in res["leases"]}))
