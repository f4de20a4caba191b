"""bench/results/e2e_scale.json and its plot from a GPU host chain's results (bench/device/session.sh with the
scale step): the bench's own report, where each size's stage times went (the stage manifests the chain brought
back), a failed size's finished stages, and the commit that ran.

    python bench/device/scale_record.py RESULTS_DIR COMMIT > bench/results/e2e_scale.json

RESULTS_DIR: the chain's unpacked out.tgz (e2e_scale.json, manifests/<factor>x-manifests/); COMMIT: the commit
the chain ran (the host's copy of the tree may report another commit with changes). Writes e2e_scale.png beside
the JSON's destination (bench/results/) from the same figures.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

from tasks.core.benchmarks.scale import STAGES, finished_stages, plot_scale

CAUSE = re.compile(r"^[A-Za-z_][\w.]*(Error|Exception): ")


def stage_parts(manifest: dict) -> dict:
    """Where a stage's time went: its own timings; the train stage's rank timeline, the imports its rank made while
    the features ran (``prewarm``), its loop's parts, what it chose (``notes``) and its tensor build.""""
    out = {"timings_s": manifest["timings_s"]} if isinstance(manifest.get("timings_s"), dict) else {}
    if manifest.get("day_parts_s"):  # the features' days: the shared tables, the first day, the others
        out["day_parts_s"] = manifest["day_parts_s"]
    if manifest.get("cluster_ahead"):  # the features' cluster, started and primed beside ingest
        out["cluster_ahead"] = manifest["cluster_ahead"]
    timeline = (manifest.get("launch") or {}).get("rank_timeline") or {}
    if timeline:
        out["rank_parts_s"], out["prewarm"] = timeline.get("parts_s"), timeline.get("prewarm")
        out["loop_s"], out["rank_notes"] = timeline.get("loop_s"), timeline.get("notes")  # e.g. the GRU's kernel
        data = manifest.get("data") or {}
        out["tensor_build_s"], out["tensor_parts_s"] = data.get("tensor_build_s"), data.get("tensor_parts_s")
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("results", type=Path)
    ap.add_argument("commit")
    ap.add_argument("--plot", type=Path, default=Path("bench/results/e2e_scale.png"))
    a = ap.parse_args()
    report = json.loads((a.results / "e2e_scale.json").read_text())
    for run in report["runs"]:
        kept = a.results / "manifests" / f"{run['factor']}x-manifests"
        manifests = {s: json.loads((kept / f"{s}.json").read_text()) for s in STAGES if (kept / f"{s}.json").is_file()}
        if run["status"] != "completed":
            finished_stages(run, manifests)
        run["stage_parts"] = {s: stage_parts(m) for s, m in manifests.items()}
    log = a.results / "scale.log"
    causes = [ln for ln in log.read_text(errors="replace").splitlines() if CAUSE.match(ln)] if log.is_file() else []
    for run in report["runs"]:
        if run["status"] != "completed" and causes:  # the cause the bench's shortened message may have cut
            run["error_cause"] = causes[-1][:600]
            run["error_cause_from"] = "the chain's scale.log: its last line naming an exception"
    prov = report["provenance"]
    prov["reported_commit"], prov["commit"] = prov.get("commit"), a.commit
    prov["recorded_by"] = f"python bench/device/scale_record.py <results> {a.commit}"
    plot_scale(report, a.plot)
    json.dump(report, sys.stdout, indent=1, sort_keys=True)
    print()


if __name__ == "__main__":
    main()
