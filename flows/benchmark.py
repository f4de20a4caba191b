"""The benchmark flow: day-one baseline, strong/weak scaling, and the stage benchmarks (sequencing only)."""

from __future__ import annotations

import shutil
import time
from typing import Any, Literal

from prefect import flow

from flows.pipeline import fault_prediction_pipeline
from tasks.benchmark import (
    baseline_task,
    cpu_layouts_task,
    e2e_task,
    features_bench_task,
    increment_task,
    ingest_bench_task,
    quality_task,
    scale_task,
    scaling_task,
    train_bench_task,
)
from tasks.core.benchmarks.e2e import cpu_overrides, cpu_until
from tasks.core.config import load_config
from tasks.core.runtime import resolve_runtime
from tasks.runner import store_root, value
from tasks.simulate import simulate_task

Suite = Literal["baseline", "scaling", "ingest", "train", "features", "e2e", "quality", "increment", "scale"]
TASKS = {
    "baseline": baseline_task,
    "scaling": scaling_task,
    "ingest": ingest_bench_task,
    "train": train_bench_task,
}


def quality_runs(cfg, profile: str, overrides: list[str]) -> list[dict[str, Any]]:
    """One pipeline run per topology and simulator seed of the yardstick, each a subflow (tracked in MLflow)."""
    from tasks.core.benchmarks.quality import run_record

    size, runs = cfg.bench.sized, []
    for topology in size.quality_topologies:
        for seed in size.quality_seeds:
            summary = fault_prediction_pipeline(
                profile=profile,
                topology=topology,
                days=size.quality_days,
                overrides=[*overrides, f"workload.seed={seed}", "evaluate.oracles=true"],
            )
            runs.append(run_record(topology, seed, topology in size.quality_held_out, summary))
    return runs


def increment_runs(cfg, profile: str, overrides: list[str]) -> list[dict[str, Any]]:
    """Per repeat, three pipeline runs (subflows): a base over N - 1 days, the N-th day over it, and a full run over
    the N days in a fresh store (``tasks.core.benchmarks.increment``)."""
    from pathlib import Path

    from tasks.core.benchmarks.increment import copy_days, identical

    size = cfg.bench.sized
    days = [f"workload.topology={size.increment_topology}", f"workload.days={size.increment_days}"]
    all_days = Path(
        value(simulate_task(load_config(profile, [*overrides, *days]).workload, store_root(cfg.paths.root))).path
    )
    runs = []
    for r in range(size.increment_repeats):
        work = Path(cfg.bench.work).resolve() / "increment" / str(r)
        shutil.rmtree(work, ignore_errors=True)
        raw, a, b = work / "raw", [*overrides, f"paths.root={work / 'a'}"], [*overrides, f"paths.root={work / 'b'}"]
        copy_days(all_days, raw, slice(0, size.increment_days - 1))
        fault_prediction_pipeline(profile=profile, raw=str(raw), overrides=a)
        copy_days(all_days, raw, slice(size.increment_days - 1, None))
        inc = fault_prediction_pipeline(profile=profile, raw=str(raw), overrides=a)
        full = fault_prediction_pipeline(profile=profile, raw=str(raw), overrides=b, incremental=False)
        runs.append({"increment": inc, "full": full, "identical": identical(inc, full)})
    return runs


def scale_runs(cfg, profile: str, overrides: list[str]) -> tuple[list[dict[str, Any]], list[str], dict[str, Any]]:
    """The GPU path at each of ``bench.<size>.scale_factors`` times the profile's days, a pipeline run (subflow) each
    in a fresh store: the smallest over its own simulation, the others over the first days of one simulation of the
    largest the disk holds (``tasks.core.benchmarks.scale``)."""
    from pathlib import Path

    from tasks.core.benchmarks.scale import EXPORTS, link_days, measure, next_factor, plan_sizes

    size = cfg.bench.sized
    factors = sorted(set(size.scale_factors))
    days, topology = size.scale_days or cfg.workload.days, size.scale_topology or cfg.workload.topology
    spec = {"profile": profile, "topology": topology, "base_days": days, "factors": factors}
    work = Path(cfg.bench.work).resolve() / "scale"
    work.mkdir(parents=True, exist_ok=True)

    def exports(factor: int) -> Path:
        sets = [*overrides, f"workload.topology={topology}", f"workload.days={days * factor}"]
        return Path(value(simulate_task(load_config(profile, sets).workload, store_root(cfg.paths.root))).path)

    def measured(src: Path, factor: int) -> dict[str, Any]:
        def run(root: Path) -> dict[str, Any]:
            link_days(src, root / EXPORTS, days * factor)
            sets, raw = [*overrides, f"paths.root={root}"], str(root / EXPORTS)
            return fault_prediction_pipeline(profile=profile, topology=topology, raw=raw, overrides=sets)

        return measure(run, factor, days * factor, work)

    records = [measured(exports(factors[0]), factors[0])]
    first = records[0]
    if first["status"] != "completed" or len(factors) == 1:
        return records, [], spec
    per_factor = (first["store_bytes"] + first["raw_bytes"]) / factors[0]
    planned, notes = plan_sizes(factors[1:], per_factor, shutil.disk_usage(work).free, [factors[0]])
    src = exports(max(planned)) if planned else None
    for factor in planned:
        per_store = max(r["store_bytes"] / r["factor"] for r in records)  # the exports are on disk by now
        run_factor, why = next_factor(factor, per_store, shutil.disk_usage(work).free, [r["factor"] for r in records])
        notes += [why] if why else []
        if run_factor is None:
            break
        records.append(measured(src, run_factor))
        if records[-1]["status"] != "completed" or why:
            break  # a failed size, or the largest the disk holds: nothing larger runs
    return records, notes, spec


@flow(name="benchmark", log_prints=True)
def benchmark(
    suites: list[Suite] = ["baseline", "scaling"],  # noqa: B006
    profile: Literal["local", "gpu", "dgx"] = "local",
    overrides: list[str] | None = None,
    parts: list[Literal["pandas", "dask", "gpu", "kernels"]] | None = None,
) -> dict[str, Any]:
    """Benchmarks with ratios measured in the same run, written to bench/results and MLflow.

    Args:
        suites: which benchmarks: baseline, scaling, ingest, train, features, e2e (two pipeline runs of the
            profile's workload: as the profile says, and on the CPU path), quality (pipeline runs over the
            yardstick's topologies and seeds: graph model vs tuned tree vs rule vs the oracles), increment (a new
            day after the others were processed, against a full run over all of them), scale (the pipeline at
            1x, 4x and 8x the profile's days: stage times, peak GPU and host memory, disk).
        profile: the profile (deployments/profiles/*.yaml).
        overrides: config overrides, each section.key=value; the sizes are config too (bench.size=small,
            bench.full.rows=50000000, bench.max_workers=8, ...).
        parts: features only: a subset of pandas, dask, gpu, kernels (default all).
    """
    cfg = load_config(profile, overrides or [])
    rt = resolve_runtime(cfg, store_root(cfg.paths.root))
    out: dict[str, Any] = {}
    for suite in suites:
        if suite == "features":
            out[suite] = features_bench_task(cfg, rt, list(parts or []))
        elif suite == "scale":
            out[suite] = scale_task(cfg, *scale_runs(cfg, profile, overrides or []))
        elif suite == "increment":
            out[suite] = increment_task(cfg, increment_runs(cfg, profile, overrides or []))
        elif suite == "quality":
            out[suite] = quality_task(cfg, quality_runs(cfg, profile, overrides or []))
        elif suite == "e2e":
            started = time.perf_counter()
            gpu = fault_prediction_pipeline(profile=profile, overrides=overrides, force=True)
            gpu_wall = time.perf_counter() - started  # its stages, and the flow around them (fixed costs)
            layouts = cpu_layouts_task(cfg, rt, profile, overrides or [])  # the CPU path's fastest training layout
            ranks = layouts["fastest"]["ranks"]
            cpu_path = [*(overrides or []), *cpu_overrides(cfg, rt.hardware, ranks=ranks)]
            cpu = fault_prediction_pipeline(profile=profile, overrides=cpu_path, until=cpu_until(cfg))
            out[suite] = e2e_task(cfg, rt, gpu, cpu, layouts, gpu_wall)
        else:
            out[suite] = TASKS[suite](cfg, rt)
    return out
