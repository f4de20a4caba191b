"""Strong and weak scaling of the features stage (Dask workers) and training (Horovod processes).

Strong: the same data on 1..N workers, efficiency = T(1) / (N * T(N)). Weak: data grows with the
workers (N x the base), efficiency = T(1) / T(N). Training's time is its steady-state step time per
epoch (from the ranks' CUDA-event / wall timers, start-up excluded); the features stage's is its wall
time on an already running cluster (cluster start-up excluded, shuffle and Parquet I/O included).
"""

from __future__ import annotations

import json
import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .config import FeaturesConfig, IngestConfig, TrainConfig
from .runtime import detect_hardware, horovod_env, train_device

Progress = Callable[[str], None]


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
def ensure_lake(work: Path, topology: str, days: int, ingest: IngestConfig, seed: int = 7) -> Path:
    """A clean lake of ``days`` days (simulated, then ingested with Spark); reused when present."""
    from .ingest import run_ingest
    from .probes import java_version
    from .raw import discover
    from .simulate import simulate

    lake = work / f"lake-{topology.replace('/', '_')}-{days}d"
    if (lake / "topology.json").is_file():
        return lake
    if not java_version().get("found"):  # a GPU host without Java: the ingest output's layout, synthesised
        from .bench_features import synthetic_lake
        from .schema import STEPS_PER_DAY
        from .topology import load_topology

        synthetic_lake(lake, topology, load_topology(topology).n * STEPS_PER_DAY * days, seed)
        return lake
    raw = work / f"raw-{topology.replace('/', '_')}-{days}d"
    shutil.rmtree(raw, ignore_errors=True)
    simulate(topology, days, seed, raw, dirt=0.0)
    from .runtime import spark_conf, spark_session

    spark = spark_session(spark_conf(ingest, detect_hardware(), None))
    tmp = lake.with_name(lake.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    run_ingest(spark, discover(raw), tmp, ingest)
    tmp.rename(lake)
    return lake


def warm_worker() -> None:
    """Run on every Dask worker before a timed run (``client.run``): the stage's imports happen untimed."""
    import tasks.core.features  # noqa: F401


def time_features(lake: Path, cfg: FeaturesConfig, workers: int, backend: str, out: Path) -> dict[str, Any]:
    from .features import build_features
    from .runtime import dask_client
    from .topology import Topology

    c = cfg.model_copy(update={"n_workers": workers, "threads_per_worker": 1})
    client = dask_client(c, backend)
    try:
        client.wait_for_workers(workers, timeout=120)
        client.run(warm_worker)  # imports on every worker before the clock starts
        shutil.rmtree(out, ignore_errors=True)
        t0 = time.perf_counter()
        summary = build_features(client, lake, Topology.read(lake / "topology.json"), c, backend, out)
        seconds = time.perf_counter() - t0
    finally:
        client.close()
        if getattr(client, "cluster", None) is not None:
            client.cluster.close()
    shutil.rmtree(out, ignore_errors=True)
    return {
        "workers": workers,
        "seconds": round(seconds, 3),
        "rows": summary["rows_out"],
        "rows_per_s": round(summary["rows_out"] / seconds, 1),
    }


def features_scaling(
    work: Path,
    cfg: FeaturesConfig,
    ingest: IngestConfig,
    topology: str,
    base_days: int,
    max_workers: int,
    backend: str,
    progress: Progress,
) -> dict[str, Any]:
    counts = worker_counts(max_workers)
    base = ensure_lake(work, topology, base_days, ingest)
    progress("features: one untimed warm-up run (imports, Parquet metadata, first Dask graph)")
    time_features(base, cfg, 1, backend, work / "features-out")
    strong = []
    for n in counts:
        progress(f"features strong: {n} worker(s) on {base_days} day(s)")
        strong.append(time_features(base, cfg, n, backend, work / "features-out"))
    weak = []
    for n in counts:
        lake = base if n == 1 else ensure_lake(work, topology, base_days * n, ingest)
        progress(f"features weak: {n} worker(s) on {base_days * n} day(s)")
        weak.append({**time_features(lake, cfg, n, backend, work / "features-out"), "days": base_days * n})
    return {
        "unit": "Dask workers (one process, one thread each)",
        "backend": backend,
        "topology": topology,
        "strong": {"days": base_days, "points": efficiency(strong, "strong")},
        "weak": {"days_per_worker": base_days, "points": efficiency(weak, "weak")},
    }


# ---------------------------------------------------------------- training
def time_training(data: Path, cfg: TrainConfig, workers: int, batch: int, work: Path) -> dict[str, Any]:
    from .train import launch_training

    work.mkdir(parents=True, exist_ok=True)
    shutil.rmtree(work / "ckpt", ignore_errors=True)
    c = cfg.model_copy(update={"num_proc": workers, "batch_size": batch})
    device = train_device(c)
    spec = {
        "engine": c.engine,
        "device": device,
        "train": c.model_dump(mode="json"),
        "data": str(data),
        "checkpoints": str(work / "ckpt"),
        "out": str(work),
        "fingerprint": f"scaling-{workers}-{batch}",
        "profile_steps": 0,
    }
    launch_training(spec, c, work, horovod_env(c, device))
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
        "device": device,
        "epoch_seconds": [round(h["data_wait_s"] + h["compute_s"], 4) for h in history],
    }


def train_scaling(
    work: Path, cfg: TrainConfig, topology: str, times: int, max_workers: int, progress: Progress
) -> dict[str, Any]:
    from .bench_train import synthetic_tensors

    work.mkdir(parents=True, exist_ok=True)
    counts = worker_counts(max_workers)
    global_batch = cfg.batch_size * max(counts)  # strong: the global batch stays fixed, split over ranks
    fixed = work / f"train-{times}.npz"
    if not fixed.is_file():
        synthetic_tensors(fixed, topology, times, 84)
    strong = []
    for n in counts:
        progress(f"train strong: {n} process(es), batch {global_batch // n}/rank on {times} snapshots")
        strong.append(time_training(fixed, cfg, n, global_batch // n, work / f"strong-{n}"))
    weak = []
    for n in counts:
        data = work / f"train-{times * n}.npz"
        if not data.is_file():
            synthetic_tensors(data, topology, times * n, 84)
        progress(f"train weak: {n} process(es), batch {cfg.batch_size}/rank on {times * n} snapshots")
        weak.append({**time_training(data, cfg, n, cfg.batch_size, work / f"weak-{n}"), "snapshots": times * n})
    return {
        "unit": f"{cfg.engine} processes",
        "engine": cfg.engine,
        "device": strong[0]["device"],
        "topology": topology,
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
