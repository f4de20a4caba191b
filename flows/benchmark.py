"""The benchmark flow: day-one baseline, strong/weak scaling, and the stage benchmarks, as one report.

Each suite writes ``<paths.bench_results>/<suite>.json`` (ratios measured in the same run), is logged to
the MLflow experiment ``<experiment>-bench`` with its plots, and shows a Prefect artifact.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Literal

from prefect import flow, task

from tasks.common import TASK_OPTIONS, publish_markdown, publish_table
from tasks.core.config import FaultlineConfig, load_config

Suite = Literal["baseline", "scaling", "ingest", "train", "features"]
SIZES = {
    # scaling: features base lake (topology, days per worker); training synthetic snapshots per worker
    "small": {
        "topology": "topozoo/Abilene",
        "days": 1,
        "times": 160,
        "rows": 200_000,
        "size_gb": 0.05,
        "train": {"epochs": 4, "hidden": 8},
    },
    "full": {
        "topology": "topozoo/Geant2012",
        "days": 8,
        "times": 1008,
        "rows": 5_000_000,
        "size_gb": 1.0,
        "train": {"epochs": 6},
    },
}


def _write(cfg: FaultlineConfig, name: str, result: dict[str, Any]) -> Path:
    from tasks.core.store import write_json_atomic

    out = Path(cfg.paths.bench_results) / f"{name}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    write_json_atomic(out, result)  # a reader (the checklist) never sees half a report
    return out


def _track(cfg: FaultlineConfig, name: str, result: dict[str, Any], files: list[Path]) -> str | None:
    from tasks.tracking import get_tracker

    tr = get_tracker(cfg.mlflow.tracking_uri, f"{cfg.mlflow.experiment}-bench", cfg.paths.root)
    run_id = tr.start_run(f"bench-{name}", {"benchmark": name, "profile": cfg.profile})
    flat: dict[str, float] = {}

    def walk(prefix: str, v: Any) -> None:
        if isinstance(v, dict):
            for k, x in v.items():
                if k not in ("hardware", "runs", "points"):
                    walk(f"{prefix}.{k}" if prefix else str(k), x)
        elif isinstance(v, (int, float)) and not isinstance(v, bool):
            flat[prefix] = v

    walk("", result)
    tr.log_metrics(run_id, flat)
    for f in files:
        tr.log_artifact(run_id, f)
    tr.end_run(run_id)
    return run_id


@task(name="bench-baseline", **TASK_OPTIONS)
def baseline_task(cfg: FaultlineConfig, size: str) -> dict[str, Any]:
    from tasks.core.bench_baseline import bench_baseline

    res = bench_baseline(cfg.ingest, SIZES[size]["rows"], Path(cfg.paths.bench_results) / "baseline.json")
    path = _write(cfg, "baseline", res)
    res["mlflow_run_id"] = _track(cfg, "baseline", res, [path])
    rows = [
        {
            "workload": k,
            "spark_s": res["spark_seconds"][k],
            "pandas_s": res["pandas_seconds"][k],
            "spark_vs_pandas": res["spark_vs_pandas"][k],
        }
        for k in res.get("spark_seconds", {})
    ]
    probe = {"cpu copy GB/s": res["cpu"]["copy_gb_s"], "cpu fp32 GFLOP/s": res["cpu"]["matmul_fp32_gflops"]}
    if res.get("gpu"):
        probe.update(
            {"gpu d2d GB/s": res["gpu"]["d2d_copy_gb_s"], "gpu bf16 TFLOP/s": res["gpu"]["matmul_bf16_tflops"]}
        )
    rows.append({"workload": "probe", **probe})
    publish_table("bench-baseline", rows, f"baseline on {res['hardware_key']}")
    return res


@task(name="bench-scaling", **TASK_OPTIONS)
def scaling_task(cfg: FaultlineConfig, size: str, max_workers: int | None, work: Path) -> dict[str, Any]:
    from tasks.core import bench_scaling as bs
    from tasks.core.runtime import dataframe_backend

    sz = SIZES[size]
    train_cfg = cfg.train.model_copy(update=sz["train"])
    hw = bs.detect_hardware()
    report: dict[str, Any] = {"benchmark": "scaling", "size": size, "hardware": hw.as_dict()}
    report["device"] = hw.gpus[0].name if hw.gpus else f"{hw.cpu_count}-core CPU"
    report["features"] = bs.features_scaling(
        work / "features",
        cfg.features,
        cfg.ingest,
        sz["topology"],
        sz["days"],
        max_workers or cfg.features.n_workers,
        dataframe_backend(cfg.features),
        print,
    )
    report["train"] = bs.train_scaling(
        work / "train", train_cfg, sz["topology"], sz["times"], max_workers or cfg.train.num_proc, print
    )
    png = bs.plot_scaling(report, Path(cfg.paths.bench_results) / "scaling.png")
    path = _write(cfg, "scaling", report)
    report["mlflow_run_id"] = _track(cfg, "scaling", report, [path, png])
    table = bs.markdown_table(report)
    publish_markdown(
        "bench-scaling",
        f"## Scaling on {report['device']}\n\n{table}\n\nPlot: `{png.resolve()}` (also in MLflow run "
        f"`{report['mlflow_run_id']}`)\n",
        "strong and weak scaling",
    )
    print(table)
    return report


@task(name="bench-stage", **TASK_OPTIONS)
def stage_bench_task(cfg: FaultlineConfig, suite: str, size: str, work: Path, opts: dict[str, Any]) -> dict[str, Any]:
    if suite == "ingest":
        from tasks.core.bench_ingest import bench_ingest

        res = bench_ingest(work / "ingest", opts.get("size_gb") or SIZES[size]["size_gb"], cfg.ingest)
    elif suite == "train":
        from tasks.core.bench_train import bench_train

        res = bench_train(
            work / "train", cfg.train, opts.get("topology") or cfg.workload.topology, opts.get("times") or 2016
        )
    elif suite == "features":
        from tasks.core.bench_features import PANDAS_BUDGET_S, bench_features

        last = Path(cfg.paths.bench_results) / "features.json"
        res = bench_features(
            work / "features",
            cfg.features,
            opts.get("rows"),
            opts.get("lake"),
            pandas_budget_s=opts.get("pandas_budget_s") or PANDAS_BUDGET_S,
            parts=tuple(opts["parts"].split(",")) if opts.get("parts") else None,
            previous=json.loads(last.read_text()) if last.is_file() else None,
        )
    else:  # pragma: no cover - the flow's parameter type restricts the choices
        raise ValueError(f"unknown benchmark {suite}")
    path = _write(cfg, suite, res)
    res["mlflow_run_id"] = _track(cfg, suite, res, [path])
    return res


@flow(name="benchmark", log_prints=True)
def benchmark(
    suites: list[Suite] = [  # noqa: B006
        "baseline",
        "scaling",
    ],
    profile: str = "local",
    overrides: list[str] | None = None,
    size: Literal["small", "full"] = "full",
    max_workers: int | None = None,
    work: str = ".faultline/bench",
    options: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Benchmarks with ratios measured in the same run, written to bench/results and MLflow.

    Args:
        suites: which benchmarks: baseline, scaling, ingest, train, features.
        profile: deployments/profiles/<profile>.yaml.
        overrides: config overrides, each section.key=value.
        size: small (a quick test of the flow) or full (figures).
        max_workers: scaling up to N workers (default: the profile's).
        work: scratch directory (generated inputs are reused).
        options: per-benchmark sizes: size_gb, times, rows, topology, lake, parts and pandas_budget_s (features).
    """
    cfg = load_config(profile, overrides or [])
    out: dict[str, Any] = {}
    for suite in suites:
        if suite == "baseline":
            out[suite] = baseline_task(cfg, size)
        elif suite == "scaling":
            out[suite] = scaling_task(cfg, size, max_workers, Path(work) / "scaling")
        else:
            out[suite] = stage_bench_task(cfg, suite, size, Path(work), options or {})
    return out
