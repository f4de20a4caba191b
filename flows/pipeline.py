"""The fault prediction pipeline: validate -> ingest -> features -> train -> evaluate (sequencing only)."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager, nullcontext
from functools import partial
from pathlib import Path
from typing import Any, Literal

from prefect import flow, get_run_logger
from prefect.runtime import flow_run

from tasks.core.clusters import cluster_ahead
from tasks.core.config import FaultlineConfig, load_config, run_overrides, stage_plan
from tasks.core.runs import Heartbeat
from tasks.core.runtime import Runtime, resolve_runtime
from tasks.core.secrets import refuse_literal_secrets
from tasks.core.sparkops import one_application, started_ahead
from tasks.core.stages.features import lake_fingerprint, prime_worker
from tasks.core.store import StageResult
from tasks.core.training.launch import unlaunched
from tasks.core.training.prewarm import prewarmed
from tasks.evaluate import evaluate_task
from tasks.features import cluster_to_start_ahead, features_task
from tasks.increment import champion_weights, plan_increment
from tasks.ingest import ingest_task
from tasks.runner import logger, store_root, value
from tasks.runs import mark_crashed_run, publish_links, recover_crashed_runs, revive_run
from tasks.simulate import simulate_task, simulated_exports
from tasks.tracking import (
    data_identity,
    finish_tracking,
    record_run,
    stage_summary,
    start_tracking,
    system_metrics,
)
from tasks.train import train_task
from tasks.validate import validate_task, validated_before

Stage = Literal["validate", "ingest", "features", "train", "evaluate"]
SPARK_APP = "validate-ingest"  # the one Spark application of a run: validation and ingest
Profile = Literal["local", "gpu", "dgx"]


def node_metrics_spec(cfg: FaultlineConfig, run_id: str) -> dict[str, Any]:
    """What a training host needs to log its system metrics into the pipeline's MLflow run. The tracking URI as
    configured (``${env:...}`` placeholders unresolved: this dict is a task parameter), resolved by the stage."""
    return {
        "run_id": run_id,
        "interval_s": cfg.mlflow.system_metrics_interval_s,
        "flow_host": socket.gethostname(),
        "tracking_uri": cfg.mlflow.tracking_uri,
        "root": cfg.paths.root,
    }


def spark_ahead(cfg: FaultlineConfig, rt: Runtime, root: Path, plan: tuple[str, ...], raw: str | None, redo):
    """The Spark conf :func:`spark_stages`'s application starts with at once, beside the run's start (MLflow, the
    exports' digests and file checks), or None: no such application in the plan, exports still to simulate (the
    simulation comes first and may want the GPU the plugin takes), or this configuration's validation of these very
    exports in the store, which the run likely reuses (a JVM started for nothing would be waited for and stopped)."""
    exports = raw or simulated_exports(cfg.workload, root)
    if not {"validate", "ingest"} <= set(plan) or exports is None:
        return None
    reused = not redo("validate") and validated_before(Path(exports), cfg.validate_, rt, root)
    return None if reused else rt.spark_conf


def spark_ahead_of_run(
    profile: str, overrides: list[str], raw: str | None, start_from: str, until: str, lake: str | None,
    force: bool = False, refresh: list[str] | None = None,
) -> dict[str, str] | None:  # fmt: skip
    """:func:`spark_ahead`'s answer for a run of the pipeline with these parameters, reckoned before its flow starts:
    the CLI starts the application then, beside Prefect's and MLflow's start-up, and the flow's own start ahead
    takes that start (``sparkops.started_ahead``, nested)."""
    cfg = load_config(profile, overrides)
    plan, root = stage_plan(start_from, until, lake), store_root(cfg.paths.root)
    return spark_ahead(cfg, resolve_runtime(cfg, root), root, plan, raw, lambda s: force or s in (refresh or []))


@contextmanager
def spark_stages(plan: tuple[str, ...], notes: dict[str, Any] | None = None) -> Iterator[None]:
    """Validation and ingest in one Spark application. Where the RAPIDS Accelerator ran in it, its JVM ends with it
    (features and training come next, on the same GPU); the GPU memory still in use is logged and, in ``notes``,
    kept for the run's summary (``spark_jvm``)."""
    if not {"validate", "ingest"} <= set(plan):
        yield
        return
    with one_application(SPARK_APP) as app:
        yield
    if app["jvm_ended"]:
        used = app.get("gpu_memory_used_mib")
        logger().info("Spark's JVM (RAPIDS Accelerator) ended with its application: %s MiB of GPU memory in use", used)
        if notes is not None:
            notes["spark_jvm"] = {"ended": True, "gpu_memory_used_mib_after": used}


def run_stages(
    cfg: FaultlineConfig,
    rt: Runtime,
    root: Path,
    plan: tuple[str, ...],
    raw: str | None,
    lake: str | None,
    redo,
    node_metrics: dict[str, Any] | None = None,
    incremental: bool = True,
    network: str = "",
    notes: dict[str, Any] | None = None,
) -> dict[str, StageResult]:
    stages: dict[str, StageResult] = {}
    with ExitStack() as beside:  # the features' Dask cluster, started beside ingest, ends after the features
        inc, raw = _spark_stages(cfg, rt, root, plan, raw, redo, incremental, notes, stages, beside)
        if "ingest" in plan:
            lake, lake_fp = str(stages["ingest"].path), stages["ingest"].fingerprint
        elif "features" in plan:
            lake_fp = lake_fingerprint(Path(lake))
        ahead = {"features", "train"} <= set(plan) and cfg.train.prewarm and unlaunched(cfg.train)
        with prewarmed(rt.threads_per_rank, ahead):  # the rank's imports done while the features are computed
            if "features" in plan:
                redone = None if redo("features") else inc
                stages["features"] = value(
                    features_task(lake, lake_fp, cfg.features, rt, root, redo("features"), redone)
                )
                beside.close()  # a cluster the stage did not take (its output was in the store) is closed here
            if "train" in plan:
                with champion_weights(cfg, network, root) if inc and not redo("train") else nullcontext() as warm:
                    stages["train"] = value(
                        train_task(
                            stages["features"], cfg.train, cfg.evaluate.test_fraction, rt, root, redo("train"),
                            node_metrics, warm,
                        )
                    )  # fmt: skip
    if "evaluate" in plan:
        stages["evaluate"] = value(
            evaluate_task(
                stages["features"], stages["train"], cfg.evaluate, cfg.train.seed, root, redo("evaluate"), raw
            )
        )
    return stages


def _spark_stages(cfg, rt: Runtime, root: Path, plan, raw, redo, incremental: bool, notes, stages: dict,
                  beside: ExitStack):  # fmt: skip
    """Validation and ingest in one Spark application (into ``stages``), the features' cluster started beside
    ingest (in ``beside``) where the features will compute; returns the increment validation took (or None) and
    the exports (simulated here where none were given)."""
    inc = None
    with spark_stages(plan, notes):
        if "validate" in plan:  # the raw exports parsed once, in one Spark application, for both stages
            raw = raw or value(simulate_task(cfg.workload, root)).path
            inc = plan_increment(cfg, rt, root, str(raw)) if incremental and not redo("validate") else None
            stages["validate"] = value(validate_task(str(raw), cfg.validate_, rt, root, redo("validate"), inc))
            inc = inc and inc.taken(stages["validate"].get("increment"))  # None: validation ran over every file
        if "ingest" in plan:
            redone = None if redo("ingest") else inc  # a forced stage recomputes every day
            ahead = "features" in plan and cluster_to_start_ahead(cfg, rt, root, stages["validate"], redo("features"))
            prime = partial(prime_worker, rt.backend)  # each worker's one-off costs, paid beside ingest too
            beside.enter_context(cluster_ahead(ahead or None, prime))  # the features' cluster, up by their start
            stages["ingest"] = value(
                ingest_task(str(raw), stages["validate"], cfg.ingest, rt, root, redo("ingest"), redone)
            )
    return inc, raw


@flow(name="fault_prediction_pipeline", log_prints=True)
def fault_prediction_pipeline(
    profile: Profile = "local",
    topology: str | None = None,
    days: int | None = None,
    overrides: list[str] | None = None,
    raw: str | None = None,
    lake: str | None = None,
    start_from: Stage = "validate",
    until: Stage = "evaluate",
    force: bool = False,
    refresh: list[Stage] | None = None,
    incremental: bool = True,
) -> dict[str, Any]:
    """Telecom fault prediction: validate -> ingest -> features -> train -> evaluate, tracked in MLflow.

    Args:
        profile: the profile (deployments/profiles/*.yaml): local, gpu or dgx.
        topology: topohub key of the simulated network, e.g. topozoo/Abilene (default: the profile's).
        days: days of simulated telemetry (default: the profile's).
        overrides: config overrides, each section.key=value (e.g. train.epochs=3).
        raw: a directory of raw NMS exports; default: simulate the profile's workload.
        lake: an existing ingest output, used with start_from=features.
        start_from: the first stage to run (features and later need lake).
        until: the last stage to run.
        force: recompute every stage even when its output exists.
        refresh: recompute just these stages.
        incremental: over exports an earlier run covered but for new days, process only what they change and train
            from the network's champion (docs/DATA.md); False: every day, trained from scratch.
    """
    refuse_literal_secrets(overrides, "overrides")  # a run started from the UI or the API: refused, not recorded
    cfg = load_config(profile, run_overrides(topology, days, overrides))
    plan, root = stage_plan(start_from, until, lake), store_root(cfg.paths.root)
    rt = resolve_runtime(cfg, root)
    data = data_identity(cfg, raw)  # the preflight of a raw directory: a bad one is refused before anything starts
    redo, network = (lambda s: force or s in (refresh or [])), data["network"]
    with started_ahead(spark_ahead(cfg, rt, root, plan, raw, redo), SPARK_APP):
        return _tracked_run(cfg, rt, root, plan, raw, lake, redo, network, data, incremental)


def _tracked_run(
    cfg: FaultlineConfig, rt: Runtime, root: Path, plan, raw, lake, redo, network: str, data: dict, incremental: bool
) -> dict[str, Any]:
    """The pipeline's run in MLflow (its stages, records and summary), with the heartbeat that marks it alive."""
    run_dir = root / "runs" / str(flow_run.get_id() or "local")
    recovered = recover_crashed_runs(cfg, root)
    run_id = start_tracking(cfg, rt, flow_run.get_id(), run_dir, data)
    summary: dict[str, Any] = {"run_id": flow_run.get_id(), "status": "failed", "stages": {}, "metrics": {}}
    summary.update(mlflow_run_id=run_id, profile=cfg.profile, data=data, recovered_crashed_runs=recovered)
    stages: dict[str, StageResult] = {}
    with Heartbeat(run_dir, flow_run.get_id(), run_id, on_revived=revive_run(cfg)) as beat:
        try:
            with system_metrics(cfg, run_id) as off:
                if off:
                    get_run_logger().info("MLflow system metrics off: %s", off)
                nodes = None if off else node_metrics_spec(cfg, run_id)  # other training hosts' system metrics
                notes: dict[str, Any] = {}  # what the run's summary says beside its stages (the Spark JVM's end)
                stages = run_stages(cfg, rt, root, plan, raw, lake, redo, nodes, incremental, network, notes)
                summary.update(notes)
                summary.update(record_run(cfg, run_id, stages, data))
            summary["status"] = "completed"
        finally:
            beat.finish(summary["status"])
            summary.update(stage_summary(stages))
            summary.update(finish_tracking(cfg, run_id, summary, run_dir, publish_links))
    return summary


@flow(name="crashed_pipeline_run", log_prints=True)
def crashed_pipeline_run(
    run_id: str, profile: Profile = "local", reason: str = "Prefect set the flow run Crashed"
) -> dict[str, Any]:
    """What a crashed pipeline run leaves behind, marked: its MLflow run KILLED, its heartbeat file crashed.

    Args:
        run_id: the crashed run's Prefect flow run id (bare, or the ``prefect.flow-run.<id>`` of its event).
        profile: the profile whose store and MLflow the run used.
        reason: why it is marked (recorded in the heartbeat file).
    """
    cfg = load_config(profile, [])
    return mark_crashed_run(cfg, store_root(cfg.paths.root), run_id, reason)
