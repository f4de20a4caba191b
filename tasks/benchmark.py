"""The benchmarks as tasks: each writes ``<paths.bench_results>/<suite>.json`` (ratios from one invocation),
logs it to the MLflow experiment ``<experiment>-bench`` with its plots, and shows a Prefect artifact."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from prefect import task

from tasks.core.config import FaultlineConfig
from tasks.core.runtime import Runtime
from tasks.core.store import json_safe, write_json_atomic
from tasks.core.tracking import numeric_leaves
from tasks.runner import TASK_OPTIONS, logger, progress_artifact, publish_markdown, publish_table, store_root
from tasks.tracking import tracker_for


def provenance(result: dict[str, Any]) -> dict[str, Any]:
    """Where a result comes from, inside its JSON: the date (UTC), the card (every GPU's model, or the CPU's core
    count), the commit (git, with ``+changes`` where the tree differs from it; else the code version) and the
    command that produced it."""
    import shlex
    import subprocess
    import sys
    import time

    from tasks.core.runtime import detect_hardware
    from tasks.core.store import code_version

    hw = result.get("hardware") or detect_hardware().as_dict()
    gpus = [g.get("name", "?") for g in hw.get("gpus") or []]
    card = f"{len(gpus)}x {gpus[0]}" if gpus else f"{hw.get('cpu_count', '?')}-core CPU (no GPU)"
    repo = Path(__file__).resolve().parents[1]
    try:
        git = ["git", "-C", str(repo)]
        commit = subprocess.run([*git, "rev-parse", "HEAD"], capture_output=True, text=True, timeout=10).stdout.strip()
        dirty = subprocess.run([*git, "status", "--porcelain", "--", "flows", "tasks", "gpu_kernels"],
                               capture_output=True, text=True, timeout=10).stdout.strip()  # fmt: skip
        commit = f"{commit}+changes" if commit and dirty else commit
    except (OSError, subprocess.SubprocessError):
        commit = ""
    argv = [Path(sys.argv[0]).name if sys.argv[0].endswith("faultline") else sys.argv[0], *sys.argv[1:]]
    return {
        "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "card": card,
        "commit": commit or f"code {code_version()} (not a git checkout)",
        "command": "faultline " + shlex.join(argv[argv.index("bench") :]) if "bench" in argv else shlex.join(argv),
    }


def _publish(cfg: FaultlineConfig, name: str, result: dict[str, Any], files: tuple[Path, ...] = ()) -> dict:
    out = Path(cfg.paths.bench_results) / f"{name}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    result = {**result, "provenance": provenance(result)}
    write_json_atomic(out, json_safe(result))  # strict JSON (null, not NaN); a reader never sees half a report
    tr = tracker_for(cfg, f"{cfg.mlflow.experiment}-bench")
    run_id = tr.start_run(f"bench-{name}", {"benchmark": name, "profile": cfg.profile, "faultline_kind": "bench"})
    tr.log_metrics(run_id, numeric_leaves(result))
    for f in (out, *files):
        tr.log_artifact(run_id, f)
    tr.end_run(run_id)
    return {**result, "mlflow_run_id": run_id, "json": str(out)}


@task(name="bench-baseline", **TASK_OPTIONS)
def baseline_task(cfg: FaultlineConfig, rt: Runtime) -> dict[str, Any]:
    from tasks.core.benchmarks.baseline import bench_baseline, summary_rows

    prev = Path(cfg.paths.bench_results) / "baseline.json"
    res = _publish(cfg, "baseline", bench_baseline(cfg.ingest, rt, cfg.bench.sized.rows, prev))
    publish_table("bench-baseline", summary_rows(res), f"baseline on {res['hardware_key']}")
    return res


@task(name="bench-scaling", **TASK_OPTIONS)
def scaling_task(cfg: FaultlineConfig, rt: Runtime) -> dict[str, Any]:
    from tasks.core.benchmarks import scaling as bs

    work, size = Path(cfg.bench.work) / "scaling", cfg.bench.sized
    hw = rt.hardware
    report: dict[str, Any] = {"benchmark": "scaling", "size": cfg.bench.size, "hardware": hw.as_dict()}
    report["device"] = hw.gpus[0].name if hw.gpus else f"{hw.cpu_count}-core CPU"
    say = logger().info
    report["features"] = bs.features_scaling(
        work / "features", cfg.features, cfg.ingest, size, cfg.bench.max_workers or cfg.features.n_workers, rt, say
    )
    report["train"] = bs.train_scaling(
        work / "train", cfg.train, size, cfg.bench.max_workers or cfg.train.num_proc, rt, say
    )
    png = bs.plot_scaling(report, Path(cfg.paths.bench_results) / "scaling.png")
    report = _publish(cfg, "scaling", report, (png,))
    table = bs.markdown_table(report)
    publish_markdown(
        "bench-scaling",
        f"## Scaling on {report['device']}\n\n{table}\n\nPlot: `{png.resolve()}` (also in MLflow run "
        f"`{report['mlflow_run_id']}`)\n",
        "strong and weak scaling",
    )
    say("\n%s", table)
    return report


@task(name="bench-ingest", **TASK_OPTIONS)
def ingest_bench_task(cfg: FaultlineConfig, rt: Runtime) -> dict[str, Any]:
    """Each Spark variant's median logged, and counted in the CLI's progress bar and a progress artifact, as it
    finishes (a run on the GPU host takes minutes a variant); then the table as an artifact and the chart in MLflow."""
    from tqdm import tqdm

    from tasks.core.benchmarks.ingest import bench_ingest, variants
    from tasks.core.benchmarks.ingest_report import markdown_table, plot_ingest

    move, say = progress_artifact("bench-ingest-progress", "ingest benchmark: Spark variants done"), logger().info
    b = cfg.bench
    todo = variants(cfg.ingest, b.gpu_tasks, b.spark_cores, rt.hardware)
    with tqdm(total=len(todo), desc="bench ingest", unit="variant") as bar:

        def progress(done: int, total: int, name: str, run: dict[str, Any]) -> None:
            say("ingest bench %d/%d %s: %.1f s (median of %d)", done, total, name, run["seconds"], run["runs"])
            bar.set_postfix_str(f"{name} {run['seconds']:.1f} s")
            bar.update(1)
            move(done / total)

        res = bench_ingest(Path(b.work) / "ingest", b.sized.size_gb, cfg.ingest, rt, b, progress)
    png = plot_ingest(res, Path(cfg.paths.bench_results) / "ingest.png")
    res = _publish(cfg, "ingest", res, (png,))
    table = markdown_table(res)
    publish_markdown("bench-ingest", f"## Ingest on {res['device']}\n\n{table}\n", "Spark variants vs pyarrow")
    say("ingest:\n%s", table)
    return res


@task(name="bench-train", **TASK_OPTIONS)
def train_bench_task(cfg: FaultlineConfig, rt: Runtime) -> dict[str, Any]:
    from tasks.core.benchmarks.train import bench_train

    res = bench_train(Path(cfg.bench.work) / "train", cfg.train, rt, cfg.workload.topology, cfg.bench.sized.times)
    return _publish(cfg, "train", res)


@task(name="bench-features", **TASK_OPTIONS)
def features_bench_task(cfg: FaultlineConfig, rt: Runtime, parts: list[str] | None = None) -> dict[str, Any]:
    from tasks.core.benchmarks.features import bench_features

    b = cfg.bench
    res = bench_features(
        Path(b.work) / "features", cfg.features, rt.hardware, b.sized.rows, b.pandas_budget_s, parts=tuple(parts or ())
    )
    return _publish(cfg, "features", res)


@task(name="bench-cpu-layouts", **TASK_OPTIONS)
def cpu_layouts_task(cfg: FaultlineConfig, rt: Runtime, profile: str, overrides: list[str]) -> dict[str, Any]:
    """The CPU path's training layout: the fastest of at least three rank x thread layouts on this host."""
    from tasks.core.benchmarks.cpu_layouts import sweep
    from tasks.core.benchmarks.e2e import cpu_overrides
    from tasks.core.config import load_config
    from tasks.core.runtime import resolve_runtime
    from tasks.core.stages.features import feature_names

    root = store_root(cfg.paths.root)

    def rt_for(ranks: int):
        c = load_config(profile, [*overrides, *cpu_overrides(cfg, rt.hardware, ranks=ranks)])
        return resolve_runtime(c, root), c.train

    work = Path(cfg.bench.work).resolve() / "cpu-layouts"
    found = sweep(work, cfg.train, rt_for, cfg.workload.topology, len(feature_names(cfg.features)))
    best = found["fastest"]
    logger().info(
        "CPU training layouts: %s; the CPU path trains with %d ranks x %d threads",
        ", ".join(f"{r['ranks']}x{r['threads_per_rank']} {r['samples_per_s']:.0f}/s" for r in found["layouts"]),
        best["ranks"],
        best["threads_per_rank"],
    )
    return found


@task(name="bench-e2e", **TASK_OPTIONS)
def e2e_task(
    cfg: FaultlineConfig,
    rt: Runtime,
    gpu: dict[str, Any],
    cpu: dict[str, Any],
    layouts: dict[str, Any] | None = None,
    gpu_wall_s: float | None = None,
) -> dict[str, Any]:
    """The end-to-end report of two pipeline runs of the same workload (GPU path, CPU path)."""
    from tasks.core.benchmarks.e2e import e2e_report, markdown_table, plot_e2e

    report = e2e_report(cfg, rt.hardware, gpu, cpu, layouts=layouts, gpu_wall_s=gpu_wall_s)
    png = plot_e2e(report, Path(cfg.paths.bench_results) / "e2e.png")
    report = _publish(cfg, "e2e", report, (png,))
    table = markdown_table(report)
    publish_markdown("bench-e2e", f"## End to end on {report['device']}\n\n{table}\n", "CPU path vs GPU path")
    logger().info("end to end:\n%s", table)
    return report


@task(name="bench-increment", **TASK_OPTIONS)
def increment_task(cfg: FaultlineConfig, runs: list[dict[str, Any]]) -> dict[str, Any]:
    """The increment benchmark's report (``increment.json``) and plot over its pipeline runs."""
    from tasks.core.benchmarks.increment import increment_report, plot_increment

    size = cfg.bench.sized
    spec = {"topology": size.increment_topology, "days": size.increment_days, "profile": cfg.profile}
    report = increment_report(runs, spec)
    png = plot_increment(report, Path(cfg.paths.bench_results) / "increment.png")
    report = _publish(cfg, "increment", report, (png,))
    publish_markdown(
        "bench-increment",
        f"## Day {spec['days']} after {spec['days'] - 1} processed\n\nseconds {report['seconds_ratio']:.2f}x and work "
        f"{report['work_ratio']:.2f}x of a full run; identical: {report['identical']}\n",
        "the increment against a full run",
    )
    return report


@task(name="bench-quality", **TASK_OPTIONS)
def quality_task(cfg: FaultlineConfig, runs: list[dict[str, Any]]) -> dict[str, Any]:
    """The quality yardstick's report over the pipeline runs (``quality.run_record`` each), with its plot:
    ``quality.json`` for the original simulator dynamics, ``quality-<dynamics>.json`` for another."""
    from tasks.core.benchmarks.quality import markdown_table, plot_quality, quality_report

    size = cfg.bench.sized
    spec = {
        "topologies": size.quality_topologies,
        "held_out": size.quality_held_out,
        "seeds": size.quality_seeds,
        "days": size.quality_days,
        "profile": cfg.profile,
        "dynamics": cfg.workload.dynamics,
        "model": {
            k: getattr(cfg.train, k)
            for k in ("graph", "dropout", "pos_weight", "epochs", "hidden", "window", "temporal_graph", "hazard_steps")
        },
        "false_alerts_per_element_day": cfg.evaluate.false_alerts_per_element_day,
        "test_fraction": cfg.evaluate.test_fraction,
    }
    name = "quality" if cfg.workload.dynamics == "v1" else f"quality-{cfg.workload.dynamics}"  # before / after
    report = quality_report(runs, spec)
    Path(cfg.paths.bench_results).mkdir(parents=True, exist_ok=True)
    png = plot_quality(report, Path(cfg.paths.bench_results) / f"{name}.png")
    report = _publish(cfg, name, report, (png,))
    table = markdown_table(report)
    publish_markdown("bench-quality", f"## Quality yardstick\n\n{table}\n", "graph model vs tree vs oracle")
    logger().info("quality:\n%s", table)
    return report


@task(name="bench-scale", **TASK_OPTIONS)
def scale_task(cfg: FaultlineConfig, runs: list[dict[str, Any]], notes: list[str], spec: dict) -> dict[str, Any]:
    """The scale curve's report (``e2e_scale.json``) and plot over its pipeline runs (``scale.measure`` each)."""
    from tasks.core.benchmarks.scale import plot_scale, scale_report
    from tasks.core.runtime import detect_hardware

    hw = detect_hardware()
    report = scale_report(runs, spec, notes)
    report = {"benchmark": "e2e_scale", "device": hw.gpus[0].name if hw.gpus else f"{hw.cpu_count}-core CPU",
              "hardware": hw.as_dict(), **report}  # fmt: skip
    png = plot_scale(report, Path(cfg.paths.bench_results) / "e2e_scale.png")
    report = _publish(cfg, "e2e_scale", report, (png,))
    rows = [
        {"size": f"{r['factor']}x", "KPI rows": r.get("kpi_rows"), "seconds": r["total_s"], "status": r["status"]}
        for r in runs
    ]
    publish_table("bench-scale", rows, f"the GPU path at {', '.join(f'{f}x' for f in spec['factors'])} the rows")
    logger().info("scale: %s; growth %s; %s", rows, report.get("growth"), "; ".join(notes) or "no size refused")
    return report
