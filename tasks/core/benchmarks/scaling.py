"""Strong and weak scaling of the features stage (Dask workers) and training (Horovod processes).

Strong: the same data on 1..N workers, efficiency = T(1) / (N * T(N)). Weak: data grows with the
workers (N x the base), efficiency = T(1) / T(N). Training's time is its steady-state step time per
epoch (from the ranks' CUDA-event / wall timers, start-up excluded); the features stage's is its wall
time on an already running cluster (cluster start-up excluded, shuffle and Parquet I/O included).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

from tasks.core.benchmarks.lakes import ensure_lake, time_features
from tasks.core.benchmarks.train import synthetic_tensors
from tasks.core.config import BenchSize, FeaturesConfig, IngestConfig, TrainConfig
from tasks.core.runtime import Runtime
from tasks.core.training.launch import launch_training, training_spec


def worker_counts(n: int) -> list[int]:
    """1, 2, 4, ... up to n, and n itself."""
    out, k = [], 1
    while k < n:
        out.append(k)
        k *= 2
    return sorted(set(out + [max(1, n)]))


def efficiency(points: list[dict[str, Any]], mode: str) -> list[dict[str, Any]]:
    """Fill ``efficiency`` (and ``speedup``) from ``seconds`` per point; point 0 must be one worker."""
    if not points or points[0]["workers"] != 1:
        raise ValueError("scaling points must start at one worker")
    t1 = points[0]["seconds"]
    for p in points:
        n, t = p["workers"], p["seconds"]
        p["speedup"] = round(t1 / t, 4) if mode == "strong" else round(n * t1 / t, 4)
        p["efficiency"] = round(t1 / (n * t), 4) if mode == "strong" else round(t1 / t, 4)
    return points


# ---------------------------------------------------------------- features
def features_scaling(
    work: Path, cfg: FeaturesConfig, ingest: IngestConfig, size: BenchSize, max_workers: int, rt: Runtime, progress
) -> dict[str, Any]:
    counts = worker_counts(max_workers)
    base = ensure_lake(work, size.topology, size.days, ingest, rt.hardware)
    c = cfg.model_copy(update={"threads_per_worker": 1})
    out = work / "features-out"
    progress("features: one untimed warm-up run (imports, Parquet metadata, first Dask graph)")
    time_features(base, c, rt.backend, 1, out, rt.hardware)
    strong = []
    for n in counts:
        progress(f"features strong: {n} worker(s) on {size.days} day(s)")
        strong.append(time_features(base, c, rt.backend, n, out, rt.hardware))
    weak = []
    for n in counts:
        lake = base if n == 1 else ensure_lake(work, size.topology, size.days * n, ingest, rt.hardware)
        progress(f"features weak: {n} worker(s) on {size.days * n} day(s)")
        weak.append({**time_features(lake, c, rt.backend, n, out, rt.hardware), "days": size.days * n})
    return {
        "unit": "Dask workers (one process, one thread each)",
        "backend": rt.backend,
        "topology": size.topology,
        "strong": {"days": size.days, "points": efficiency(strong, "strong")},
        "weak": {"days_per_worker": size.days, "points": efficiency(weak, "weak")},
    }


# ---------------------------------------------------------------- training
def time_training(data: Path, cfg: TrainConfig, workers: int, batch: int, work: Path, rt: Runtime) -> dict[str, Any]:
    work.mkdir(parents=True, exist_ok=True)
    shutil.rmtree(work / "ckpt", ignore_errors=True)
    c = cfg.model_copy(update={"num_proc": workers, "batch_size": batch})
    spec = training_spec(
        c.engine, rt.device, c, data, work / "ckpt", work, f"scaling-{workers}-{batch}", 1, profile_steps=0
    )
    launch_training(spec, c, work, rt.launcher_env)
    history = json.loads((work / "history.json").read_text())
    steady = history[1:] or history
    per_epoch = sorted(h["data_wait_s"] + h["compute_s"] for h in steady)
    step_s = per_epoch[len(per_epoch) // 2]  # the median epoch: one slow epoch (a checkpoint write) does not decide
    samples = steady[0]["samples"]
    return {
        "workers": workers,
        "batch_per_rank": batch,
        "seconds": round(step_s, 4),
        "samples": samples,
        "samples_per_s": round(samples / step_s, 1),
        "device": rt.device,
        "epoch_seconds": [round(h["data_wait_s"] + h["compute_s"], 4) for h in history],
    }


def train_scaling(work: Path, cfg: TrainConfig, size: BenchSize, max_workers: int, rt: Runtime, progress):
    work.mkdir(parents=True, exist_ok=True)
    cfg = cfg.model_copy(
        update={"epochs": size.train_epochs, **({"hidden": size.train_hidden} if size.train_hidden else {})}
    )
    counts = worker_counts(max_workers)
    global_batch = cfg.batch_size * max(counts)  # strong: the global batch stays fixed, split over ranks
    times = size.times
    fixed = work / f"train-{times}.npz"
    if not fixed.is_file():
        synthetic_tensors(fixed, size.topology, times, 84)
    strong = []
    for n in counts:
        progress(f"train strong: {n} process(es), batch {global_batch // n}/rank on {times} snapshots")
        strong.append(time_training(fixed, cfg, n, global_batch // n, work / f"strong-{n}", rt))
    weak = []
    for n in counts:
        data = work / f"train-{times * n}.npz"
        if not data.is_file():
            synthetic_tensors(data, size.topology, times * n, 84)
        progress(f"train weak: {n} process(es), batch {cfg.batch_size}/rank on {times * n} snapshots")
        weak.append({**time_training(data, cfg, n, cfg.batch_size, work / f"weak-{n}", rt), "snapshots": times * n})
    return {
        "unit": f"{cfg.engine} processes",
        "engine": cfg.engine,
        "device": rt.device,
        "topology": size.topology,
        "strong": {"snapshots": times, "global_batch": global_batch, "points": efficiency(strong, "strong")},
        "weak": {"snapshots_per_worker": times, "batch_per_rank": cfg.batch_size, "points": efficiency(weak, "weak")},
    }


def plot_scaling(report: dict[str, Any], png: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    stages = [s for s in ("features", "train") if s in report]
    fig, axes = plt.subplots(1, len(stages), figsize=(5.5 * len(stages), 4), squeeze=False)
    for ax, stage in zip(axes[0], stages):
        for mode, style in (("strong", "o-"), ("weak", "s--")):
            pts = report[stage][mode]["points"]
            ax.plot([p["workers"] for p in pts], [100 * p["efficiency"] for p in pts], style, label=f"{mode}")
        ns = [p["workers"] for p in report[stage]["strong"]["points"]]
        ax.axhline(100, color="grey", lw=0.8)
        ax.set_xscale("log", base=2)
        ax.set_xticks(ns, [str(n) for n in ns])
        ax.set_ylim(0, 120)
        ax.set_xlabel(report[stage]["unit"])
        ax.set_ylabel("scaling efficiency (%)")
        ax.set_title(f"{stage} on {report.get('device', '?')}")
        ax.legend()
    fig.tight_layout()
    png.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(png, dpi=110)
    plt.close(fig)
    return png


def markdown_table(report: dict[str, Any]) -> str:
    lines = ["| stage | mode | workers | seconds | speedup | efficiency |", "|---|---|---|---|---|---|"]
    for stage in ("features", "train"):
        for mode in ("strong", "weak"):
            for p in (report.get(stage) or {}).get(mode, {}).get("points", []):
                lines.append(
                    f"| {stage} | {mode} | {p['workers']} | {p['seconds']:.3f} | {p['speedup']:.2f} | "
                    f"{100 * p['efficiency']:.0f} % |"
                )
    return "\n".join(lines)
