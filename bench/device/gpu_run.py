"""bench/results/gpu_run.json from a GPU host chain's results (bench/device/session.sh with the run step):
the GPU path's stage times and energy, where train's and evaluate's time went, from run.json and the stage
manifests the chain brought back.

    python bench/device/gpu_run.py RESULTS_DIR COMMIT [--steps "run tests"] > bench/results/gpu_run.json

RESULTS_DIR: the chain's unpacked out.tgz (run.json, device.txt, manifests/run/); COMMIT: the commit it ran.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
from pathlib import Path

ORDER = ("validate", "ingest", "features", "train", "evaluate")


def _manifest(d: Path, stage: str) -> dict:
    found = sorted((d / "manifests" / "run").glob(f"{stage}-*.json")) or sorted(d.glob(f"manifests/{stage}-*.json"))
    (path,) = found
    return json.loads(path.read_text())


def warmup_ab(steps_log: Path) -> dict | None:
    """The cold and warm steps' stage times from the chain's steps.log (each step's summary line), with the median,
    min and max of each recomputed stage: what ``faultline warmup`` saves a host's first run, on one host."""
    runs: dict[str, list[dict[str, float]]] = {"cold": [], "warm": []}
    step = None
    for line in steps_log.read_text().splitlines():
        head = re.match(r"== \S+ (\w+)", line)
        if head:
            step = head.group(1)
        elif step in runs and line.startswith("validate ") and "evaluate" in line:
            runs[step].append({k: float(v) for k, v in re.findall(r"(\w+) ([\d.]+)s", line)})
    if not runs["cold"] or not runs["warm"]:
        return None
    out: dict = {"recomputed": ["features", "train", "evaluate"]}
    for kind, rs in runs.items():
        out[kind] = {s: {"median_s": statistics.median(r[s] for r in rs), "min_max_s": [min(r[s] for r in rs),
                         max(r[s] for r in rs)]} for s in out["recomputed"]}  # fmt: skip
        out[kind]["repeats"] = len(rs)
        out[kind]["sum_of_medians_s"] = round(sum(out[kind][s]["median_s"] for s in out["recomputed"]), 1)
    out["saved_s"] = round(out["cold"]["sum_of_medians_s"] - out["warm"]["sum_of_medians_s"], 1)
    out["method"] = (
        "cold: the run again from features with empty kernel caches (CUPY_CACHE_DIR, CUDA_CACHE_PATH); warm: the "
        "same with the caches make setup's faultline warmup filled; alternated on one host"
    )
    return out


def gpu_run(d: Path, commit: str, steps: str) -> dict:
    run = json.loads((d / "run.json").read_text().strip().splitlines()[-1])
    card = re.search(r"NVIDIA (H100|H200|A100|B200|GH200)[^|]*?(?=\s{2}|\|)", (d / "device.txt").read_text())
    card = card.group(0).strip() if card else "unknown"
    stages, energy = {}, {}
    for s in ORDER:
        m = _manifest(d, s)
        e = m.get("gpu_energy") or {}
        stages[s] = {"seconds": round(m["seconds"], 3), "gpu_energy_j": e.get("joules"),
                     "mean_power_w": e.get("mean_power_w"), "peak_power_w": e.get("peak_power_w")}  # fmt: skip
        energy[s] = e.get("joules")
    train, ev = _manifest(d, "train"), _manifest(d, "evaluate")
    util = train.get("gpu_utilization") or {}
    epochs = [round(h["t_end"] - h["t_start"], 2) for h in train["history"]]
    rows = run["stages"]["validate"]["rows_in"]
    total_j = round(sum(v for v in energy.values() if v), 1)
    return {
        "benchmark": "gpu_run",
        "what": "one pipeline run of the gpu profile from raw exports (the GPU path alone, not a GPU-vs-CPU ratio): "
        "stage times, where the train and evaluate stages' time goes, and the GPU's energy per stage",
        "device": card,
        "workload": {
            "topology": "backbone/world",
            "days": 14,
            "elements": train["data"].get("elements"),
            "kpi_rows": rows,
        },  # fmt: skip
        "stages": stages,
        "total_s": round(sum(v["seconds"] for v in stages.values()), 1),
        "gpu_energy": {
            "available": all(v is not None for v in energy.values()),
            "stages_j": energy,
            "total_j": total_j,
            "joules_per_million_rows": round(total_j / rows * 1e6, 1),
        },  # fmt: skip
        "train": {
            "tensor_device": train["data"].get("tensor_device"),
            "tensor_build_s": train["data"].get("tensor_build_s"),
            "launch_wall_s": round(train["launch"]["wall_s"], 1),
            "rank_timeline": train["launch"].get("rank_timeline"),
            "epoch_s": epochs,
            "steady_gpu_busy_pct": round(util["steady_mean"], 1) if util.get("steady_mean") else None,
            "whole_stage_gpu_busy_pct": round(util["mean"], 1) if util.get("mean") else None,
            "kernel_busy_fraction": util.get("kernel_busy_fraction"),
        },
        "evaluate": {"timings_s": ev["timings_s"]},
        "metrics": {k: run["metrics"][k] for k in ("pr_auc", "baseline_pr_auc", "stack_pr_auc", "rule_pr_auc")},
        "repeats": 1,
        "repeats_note": "one run: a repeat costs minutes of the GPU host",
        "provenance": {
            "date": run.get("finished_at") or ev.get("written_at"),
            "card": f"1x {card}",
            "commit": commit,
            "command": "faultline run --profile gpu --topology backbone/world --days 14 --json "
            f'(bench/device/session.sh, STEPS="{steps}")',
        },
        "extrapolated": [],
        **({"kernel_warmup": ab} if (ab := warmup_ab(d / "steps.log")) else {}),
        "setup": _setup(d),
    }


def _setup(d: Path) -> dict:
    """make setup's time on the host, and its kernel warm-up's (from the install log)."""
    t = (d / "install_time.txt").read_text() if (d / "install_time.txt").is_file() else ""
    log = (d / "install.log").read_text() if (d / "install.log").is_file() else ""
    warm = re.search(r"warm in ([\d.]+) s: .* holds (\d+) kernels", log)
    total = re.search(r"in (\d+) s", t)
    return {
        "seconds": int(total.group(1)) if total else None,
        "kernel_warmup_s": float(warm.group(1)) if warm else None,
        "kernels_cached": int(warm.group(2)) if warm else None,
    }


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("results", type=Path)
    p.add_argument("commit")
    p.add_argument("--steps", default="run")
    a = p.parse_args()
    json.dump(gpu_run(a.results, a.commit, a.steps), sys.stdout, indent=1)
    print()
