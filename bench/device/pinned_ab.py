"""Validation and ingest from raw with the RAPIDS Accelerator's pinned host pool at each size, in one invocation.

The plugin allocates its pinned pool (``ingest.rapids_pinned_pool``, default 8g) page by page as its JVM starts; with
a smaller pool (or none) its copies to the GPU go through pageable memory. Each run is ``faultline run --until
ingest`` over the same exports in a fresh store (so validation runs and the application is started ahead, as in a
first run); the sizes take turns (A B A B ...) so that drift hits each alike. Per size: the medians, min and max of
validate, ingest, their sum, the wall time of the whole command, the ahead start's seconds, and the plugin's
"maximum pool size exceeded" lines (copies that fell back to pageable memory).

  usage: python bench/device/pinned_ab.py RAW OUT.json [ROUNDS] [SIZE ...]     (default: 2 rounds of 8g 0)
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

from tasks.benchmark import provenance  # date, card, commit and command, as every bench writes them
from tasks.core.benchmarks.measure import spread

WORK = Path("/tmp/fl/pinned")


def one(raw: str, size: str, tag: str) -> dict:
    root = WORK / tag
    shutil.rmtree(root, ignore_errors=True)
    cmd = [".venv/bin/faultline", "run", "--profile", "gpu", "--raw", raw, "--until", "ingest"]
    cmd += ["--set", f"ingest.rapids_pinned_pool={size}", "--set", f"paths.root={root}", "--json"]
    t0 = time.perf_counter()
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    wall = time.perf_counter() - t0
    if p.returncode != 0:
        return {"error": p.stderr[-800:], "wall_s": round(wall, 2)}
    stages = json.loads(p.stdout.strip().splitlines()[-1])["stages"]
    val = json.loads(Path(stages["validate"]["output"], "_manifest.json").read_text())
    row = {k: round(stages[k]["seconds"], 3) for k in ("validate", "ingest")}
    row.update(
        validate_ingest_s=round(row["validate"] + row["ingest"], 3),
        wall_s=round(wall, 2),
        waited_for_spark_s=val["timings_s"].get("spark_start"),
        started_ahead=val.get("spark_started_ahead"),
        pool_exceeded_lines=p.stderr.count("maximum pool size exceeded"),
    )
    shutil.rmtree(root, ignore_errors=True)
    return row


def main(raw: str, out: Path, rounds: int, sizes: list[str]) -> None:
    runs: dict[str, list[dict]] = {s: [] for s in sizes}
    for r in range(rounds):
        for size in sizes:
            runs[size].append(one(raw, size, f"{size}-{r}"))
            print(r, size, runs[size][-1], flush=True)
    summary = {}
    for size, rs in runs.items():
        ok = [x for x in rs if "error" not in x]
        keys = ("validate", "ingest", "validate_ingest_s", "wall_s", "waited_for_spark_s")
        summary[size] = {k: {n: round(v, 3) for n, v in spread([x[k] for x in ok]).items()} for k in keys if ok}
        summary[size]["ahead_session_s"] = spread([x["started_ahead"]["session_s"] for x in ok if x["started_ahead"]])
        summary[size]["pool_exceeded_lines"] = [x["pool_exceeded_lines"] for x in ok]
    out.write_text(json.dumps({"what": "validate + ingest by pinned pool size", "provenance": provenance({}),
                               "raw": raw, "rounds": rounds, "summary": summary, "runs": runs}, indent=1))  # fmt: skip


if __name__ == "__main__":
    main(sys.argv[1], Path(sys.argv[2]), int(sys.argv[3]) if len(sys.argv) > 3 else 2, sys.argv[4:] or ["8g", "0"])
