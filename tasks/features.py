"""Features stage: Dask (pandas or cuDF backend) over the ingest output."""

from __future__ import annotations

from pathlib import Path

from prefect import task
from tqdm import tqdm

from tasks.core.clusters import room_beside_spark
from tasks.core.config import FaultlineConfig, FeaturesConfig
from tasks.core.laps import Laps
from tasks.core.runtime import Runtime, dask_cluster
from tasks.core.stages.features import day_groups, features_stage
from tasks.core.stages.increment import Increment
from tasks.core.store import StageResult, completed, run_stage, stage_fingerprint
from tasks.runner import TASK_OPTIONS, finish_stage, logger

PERFORMANCE_REPORT = "dask-performance.html"


def _compute(lake: str, cfg: FeaturesConfig, rt: Runtime, tmp: Path, increment: Increment | None) -> dict:
    days = len(day_groups(Path(lake) / "kpi"))
    log = logger()
    from distributed import performance_report

    lap, ahead = Laps(), {}  # the cluster's start (or wait for it, started ahead) and close apart from the days
    with dask_cluster(rt.dask, ahead) as client:
        lap("cluster_start")
        with (
            tqdm(total=days, desc=f"features ({rt.backend})", unit="day") as bar,
            # the cluster's dashboard dies with the stage: its task stream, worker profiles and bandwidth are kept
            # as one self-contained HTML page (bokeh inlined: it renders with no network), logged to MLflow
            performance_report(filename=str(tmp / PERFORMANCE_REPORT), mode="inline"),
        ):

            def progress(done: int, total: int) -> None:
                bar.total = total  # the days computed: fewer than the lake's where new days are added to an earlier run
                bar.update(1)
                if done == total or done % max(1, total // 10) == 0:
                    log.info("features: %d of %d days done", done, total)

            body = features_stage(client, Path(lake), cfg, rt.backend, tmp, progress, increment)
        lap("days")
    lap("cluster_close")
    if increment is not None:
        log.info("features: %d of %d days recomputed, the others linked from %s", body["days_recomputed"],
                 body["days"], increment.base_features)  # fmt: skip
        body = {**body, "increment": increment.describe()}
    return {**body, "timings_s": lap.seconds, "cluster_ahead": ahead or None}


def stage_key(lake_fp: str, rt: Runtime) -> tuple[dict[str, str], tuple[str]]:
    """What the features' fingerprint rests on besides their config: the lake's, and the dataframe backend."""
    return {"ingest": lake_fp}, (rt.backend,)


@task(name="features", **TASK_OPTIONS)
def features_task(
    lake: str,
    lake_fp: str,
    cfg: FeaturesConfig,
    rt: Runtime,
    root: Path,
    force: bool = False,
    increment: Increment | None = None,
) -> StageResult:
    """Features day by day; with ``increment`` (which ingest took), only the days the new data can change."""
    inputs, key = stage_key(lake_fp, rt)
    result = run_stage(
        root, "features", inputs, cfg, lambda tmp: _compute(lake, cfg, rt, tmp, increment), key=key, force=force
    )
    return finish_stage(
        result,
        {
            "backend": result["backend"],
            "features": len(result["features"]["names"]),
            "positive labels": result["positives"],
            "Dask performance report": f"`{PERFORMANCE_REPORT}` (MLflow: `features/`)"
            if (result.path / PERFORMANCE_REPORT).is_file()
            else None,
        },
    )


def features_pending(cfg: FaultlineConfig, rt: Runtime, root: Path, validation: StageResult, force: bool) -> bool:
    """Whether the features stage will compute after an ingest over ``validation`` (``force``, or no features in
    the store under the fingerprint that ingest's output will give them). Ingest's fingerprint is its inputs' and
    config's, known before it runs."""
    from tasks.ingest import ingest_inputs

    inputs, key = stage_key(stage_fingerprint("ingest", ingest_inputs(validation), cfg.ingest), rt)
    return force or completed(root, "features", stage_fingerprint("features", inputs, cfg.features, *key)) is None


def cluster_to_start_ahead(cfg: FaultlineConfig, rt: Runtime, root: Path, validation: StageResult, force: bool):
    """The features' cluster spec to start beside ingest, or None: the features will not compute (their output is
    in the store), or a worker would not fit on the GPU beside the RAPIDS Accelerator's pool (said in the log)."""
    if not features_pending(cfg, rt, root, validation, force):
        return None
    gpus = [g.memory_gb for g in rt.hardware.gpus]
    why = room_beside_spark(rt.dask, rt.spark_conf, min(gpus)) if gpus else ""
    if why:
        logger().info("features: the Dask cluster starts with the stage, not beside ingest: %s", why)
        return None
    return rt.dask
