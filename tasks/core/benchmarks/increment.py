"""The increment benchmark: a new day after N - 1 processed against a full run over the N days, each a real pipeline
run (validate, ingest, features, train, evaluate) in its own store.

Per repeat: a base run over the first N - 1 days' exports, the N-th day's exports copied in, the run over them (it
finds the base and processes the new day), then a full run over the same N days in a fresh store. Reported: each
stage's seconds (median, min, max over the repeats) on both, the work each did (rows validated, ingested, computed
into features, trained on times epochs, evaluated: ``work_rows`` in the manifests), both ratios, and whether the
increment's lake, quarantine and features equal the full run's row for row.
"""

from __future__ import annotations

import shutil
import statistics
from pathlib import Path
from typing import Any

STAGES = ("validate", "ingest", "features", "train", "evaluate")
COMPARED = ("kpi", "alarms", "quarantine/kpi", "quarantine/alarms")


def day_files(raw: Path) -> list[tuple[Path, ...]]:
    """Each day's export files (KPI and alarms), in day order."""
    by_day: dict[str, list[Path]] = {}
    for f in sorted([*(raw / "kpi").glob("kpi_*.csv"), *(raw / "alarms").glob("alarms_*.jsonl")]):
        by_day.setdefault(f.stem.split("_")[-1], []).append(f)
    return [tuple(files) for _, files in sorted(by_day.items())]


def copy_days(src: Path, dest: Path, days: slice) -> list[str]:
    """The topology and the ``days`` of ``src``'s exports copied into ``dest``; their names."""
    (dest / "kpi").mkdir(parents=True, exist_ok=True)
    (dest / "alarms").mkdir(parents=True, exist_ok=True)
    if not (dest / "topology.json").exists():
        shutil.copy2(src / "topology.json", dest / "topology.json")
    copied = []
    for files in day_files(src)[days]:
        for f in files:
            shutil.copy2(f, dest / f.parent.name / f.name)
            copied.append(f"{f.parent.name}/{f.name}")
    return copied


def _sorted_frame(path: Path):
    import pyarrow.dataset as ds

    t = ds.dataset(path, format="parquet", partitioning="hive").to_table().to_pandas()
    for c in t.columns:
        if str(t[c].dtype) == "category":  # the hive partition column
            t[c] = t[c].astype(str)
    return t.sort_values(list(t.columns), kind="stable").reset_index(drop=True)


def identical(a: dict[str, Any], b: dict[str, Any]) -> dict[str, bool]:
    """Whether two runs' lakes, quarantines (reasons, text, source file) and features hold the same rows (the runs'
    summaries; their outputs are read back and compared sorted)."""
    out = {}
    for name in COMPARED:
        fa, fb = (_sorted_frame(Path(s["stages"]["ingest"]["output"]) / name) for s in (a, b))
        out[name] = fa.equals(fb)
    fa, fb = (_sorted_frame(Path(s["stages"]["features"]["output"]) / "features") for s in (a, b))
    out["features"] = fa.equals(fb)
    return out


def _stats(values: list[float]) -> dict[str, float]:
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


def increment_report(runs: list[dict[str, Any]], spec: dict[str, Any]) -> dict[str, Any]:
    """``runs``: one ``{"increment": summary, "full": summary, "identical": {...}}`` per repeat."""
    report: dict[str, Any] = {"spec": spec, "repeats": len(runs), "stages": {}}
    for path in ("increment", "full"):
        secs = {s: [r[path]["stages"][s]["seconds"] for r in runs] for s in STAGES}
        report["stages"][path] = {s: _stats(v) for s, v in secs.items()}
        report[f"{path}_seconds"] = _stats([sum(r[path]["stages"][s]["seconds"] for s in STAGES) for r in runs])
        report[f"{path}_work_rows"] = {s: runs[-1][path]["stages"][s]["work_rows"] for s in STAGES}
    report["seconds_ratio"] = report["increment_seconds"]["median"] / report["full_seconds"]["median"]
    work = {p: sum(report[f"{p}_work_rows"].values()) for p in ("increment", "full")}
    report["work_ratio"] = work["increment"] / work["full"]
    report["identical"] = {k: all(r["identical"][k] for r in runs) for k in runs[0]["identical"]}
    report["same_fingerprints"] = all(
        r["increment"]["stages"][s]["fingerprint"] == r["full"]["stages"][s]["fingerprint"]
        for r in runs
        for s in ("validate", "ingest", "features")
    )
    report["warm_started"] = all(_train_manifest(r["increment"]).get("warm_start") for r in runs)
    return report


def _train_manifest(summary: dict[str, Any]) -> dict[str, Any]:
    import json

    return json.loads((Path(summary["stages"]["train"]["output"]) / "_manifest.json").read_text())


def plot_increment(report: dict[str, Any], png: Path) -> Path:
    """Each stage's median seconds, the new day against the full run, with min/max whiskers."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    x, w = np.arange(len(STAGES)), 0.38
    fig, ax = plt.subplots(figsize=(7.5, 3.6))
    for i, (path, label) in enumerate((("full", "full run"), ("increment", "new day only"))):
        st = report["stages"][path]
        med = np.array([st[s]["median"] for s in STAGES])
        err = np.array([[med[j] - st[s]["min"], st[s]["max"] - med[j]] for j, s in enumerate(STAGES)]).T
        ax.bar(x + (i - 0.5) * w, med, w, yerr=err, capsize=3, label=label)
    spec = report["spec"]
    ax.set_xticks(x, STAGES)
    ax.set_ylabel("seconds (median)")
    ax.set_title(
        f"{spec['topology']}: day {spec['days']} after {spec['days'] - 1} processed; seconds "
        f"{report['seconds_ratio']:.2f}x, work {report['work_ratio']:.2f}x of a full run",
        fontsize=9,
    )
    ax.legend()
    fig.tight_layout()
    png.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(png, dpi=110)
    plt.close(fig)
    return png
