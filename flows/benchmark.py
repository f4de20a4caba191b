"""The benchmark flow: day-one baseline, strong/weak scaling, and the stage benchmarks (sequencing only)."""

from __future__ import annotations

from typing import Any, Literal

from prefect import flow

from flows.pipeline import fault_prediction_pipeline
from tasks.benchmark import (
    baseline_task,
    e2e_task,
    features_bench_task,
    ingest_bench_task,
    quality_task,
    scaling_task,
    train_bench_task,
)
from tasks.core.benchmarks.e2e import cpu_overrides, cpu_until
from tasks.core.config import load_config
from tasks.core.runtime import resolve_runtime
from tasks.runner import store_root

Suite = Literal["baseline", "scaling", "ingest", "train", "features", "e2e", "quality"]
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
            yardstick's topologies and seeds: graph model vs tuned tree vs rule vs the oracles).
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
        elif suite == "quality":
            out[suite] = quality_task(cfg, quality_runs(cfg, profile, overrides or []))
        elif suite == "e2e":
            gpu = fault_prediction_pipeline(profile=profile, overrides=overrides, force=True)
            cpu_path = [*(overrides or []), *cpu_overrides(cfg, rt.hardware)]
            cpu = fault_prediction_pipeline(profile=profile, overrides=cpu_path, until=cpu_until(cfg))
            out[suite] = e2e_task(cfg, rt, gpu, cpu)
        else:
            out[suite] = TASKS[suite](cfg, rt)
    return out
