"""The pre-submission checklist: declarative checks over what a pipeline run recorded.

Each ``Check`` names the evidence it reads and the remedy to apply when it fails. Evidence is one
JSON-able dict (see ``collect_evidence``): the MLflow run (params, metrics, tags, artifacts), the stage
manifests it holds, its config and environment, the scaling report, and live probes of this machine.
Statuses: ``pass``, ``warn``, ``fail``, ``na`` (not applicable, with the reason); the verdict is
``fail`` when any check fails. GPU checks are ``na`` for runs without a GPU, never ``pass``.
"""

from __future__ import annotations

from typing import Any

from tasks.core.checklist.gpu_checks import (
    GPU_UTIL_TARGET,
    _gpu_run,
    check_gpu_utilization,
    check_kernel_timeline,
    check_memory_fraction,
    check_nccl_matrix,
)
from tasks.core.checklist.report import FAIL, NA, PASS, WARN, Check, Outcome, manifest
from tasks.core.checklist.spark_checks import (
    ROW_GROUP_TARGET_MB,
    check_dynamic_allocation,
    check_executor_memory,
    check_max_direct_memory,
    check_row_groups,
    check_validation,
)
from tasks.core.config import flatten

FINAL_METRICS = ("pr_auc", "roc_auc", "f1", "recall_at_p90")
BASELINE_METRICS = ("baseline_pr_auc", "rule_pr_auc")
EPOCH_METRICS = ("train_loss", "val_pr_auc")
REQUIRED_TAGS = ("code_version", "data_fingerprint")
IB_FIX = 'HOROVOD_MPI_ARGS="-mca btl ^openib"'


# ---------------------------------------------------------------- the checks
def _mlflow_missing(run: dict[str, Any], config: dict[str, Any]) -> list[str]:
    missing: list[str] = []
    if run.get("status") != "FINISHED":
        missing.append(f"status FINISHED (is {run.get('status')})")
    params, metrics, tags = run.get("params") or {}, run.get("metrics") or {}, run.get("tags") or {}
    own_data = tags.get("data_source", "simulated") != "simulated"  # no workload.* params: no simulator ran
    expected = [k for k in flatten(config) if not (own_data and k.startswith("workload."))]
    missing += [f"param {k}" for k in expected if k not in params]
    if not config:
        missing.append("artifact profile/config.json (the flattened config cannot be checked)")
    missing += [f"metric {k}" for k in FINAL_METRICS + BASELINE_METRICS if k not in metrics]
    epochs = (config.get("train") or {}).get("epochs")
    steps = run.get("metric_steps") or {}
    missing += [
        f"per-epoch metric {k} ({steps.get(k, 0)} of {epochs} epochs)"
        for k in EPOCH_METRICS
        if epochs and steps.get(k, 0) < epochs
    ]
    missing += [f"tag {k}" for k in REQUIRED_TAGS if not tags.get(k)]
    arts = set(run.get("artifacts") or [])
    if not run.get("logged_models"):
        missing.append("artifact model (no logged model)")
    if not any(a.startswith("plots/") and a.endswith(".png") for a in arts):
        missing.append("artifact plots/*.png")
    missing += [f"artifact {a}" for a in ("profile/config.json", "environment/environment.json") if a not in arts]
    return missing


def check_mlflow_complete(ev: dict[str, Any]) -> Outcome:
    run, config = ev.get("run") or {}, ev.get("config") or {}
    missing = _mlflow_missing(run, config)
    if missing:
        return Outcome(FAIL, "missing: " + ", ".join(missing[:12]) + (" ..." if len(missing) > 12 else ""), missing)
    return Outcome(
        PASS,
        f"run {run.get('run_id')}: {len(run.get('params') or {})} params, {len(run.get('metrics') or {})} metrics "
        f"({(config.get('train') or {}).get('epochs')} epochs), {len(run.get('artifacts') or [])} artifacts, "
        f"{run.get('logged_models')} logged model(s)",
    )


def host_kind(hardware: dict[str, Any] | None) -> str | None:
    """What kind of host a hardware record describes: its GPUs' model and count, else its CPU core count."""
    if not hardware:
        return None
    gpus = hardware.get("gpus") or []
    if gpus:
        return f"{len(gpus)}x {gpus[0].get('name', '?')}"
    return f"{hardware.get('cpu_count', '?')}-core CPU"


def check_scaling_report(ev: dict[str, Any]) -> Outcome:
    rep, where = ev.get("scaling"), ev.get("scaling_path")
    if not rep:
        return Outcome(FAIL, f"no scaling report at {where}")
    run_host = host_kind((ev.get("environment") or {}).get("hardware"))
    if run_host is None:
        return Outcome(NA, "the run recorded no hardware: there is no host to judge a scaling report against")
    rep_host = host_kind(rep.get("hardware"))
    if rep_host != run_host:
        return Outcome(
            FAIL,
            f"{where} was measured on a {rep_host or 'host it does not name'}, the run on a {run_host}: "
            "a scaling curve speaks only for its own kind of host",
        )
    parts = [
        f"{stage} {mode} x{pts[-1]['workers']}: {pts[-1]['efficiency']:.0%}"
        for stage in ("features", "train")
        for mode in ("strong", "weak")
        if (pts := ((rep.get(stage) or {}).get(mode) or {}).get("points") or [])
    ]
    if len(parts) < 4:
        return Outcome(FAIL, f"{where} lacks strong and weak scaling for features and training ({parts})")
    return Outcome(PASS, f"{where} ({rep_host}, as the run): " + "; ".join(parts))


def _simulated(ev: dict[str, Any]) -> bool:
    return ((ev.get("run") or {}).get("tags") or {}).get("data_source", "simulated") == "simulated"


def _environment_missing(ev: dict[str, Any], params: dict[str, Any], env: dict[str, Any]) -> list[str]:
    seeds = ("workload.seed", "train.seed") if _simulated(ev) else ("train.seed",)  # a network's own data: no simulator
    missing = [k for k in seeds if k not in params]
    pk = env.get("packages") or {}
    needed = ("torch", "prefect", *(("pyspark",) if manifest(ev, "ingest") else ()))
    missing += [f"package {p}" for p in needed if p not in pk]
    hw = env.get("hardware")
    if hw is None:
        missing.append("hardware")
    elif _gpu_run(ev) and (not hw.get("gpus") or not hw.get("driver")):
        missing.append("GPU model and driver")
    return missing


def check_seeds_environment(ev: dict[str, Any]) -> Outcome:
    params = (ev.get("run") or {}).get("params") or {}
    env = ev.get("environment") or {}
    missing = _environment_missing(ev, params, env)
    if missing:
        return Outcome(FAIL, "not recorded: " + ", ".join(missing))
    hw = env["hardware"]
    gpus = ", ".join(g["name"] for g in hw.get("gpus") or []) or "no GPU"
    return Outcome(
        PASS,
        f"seeds workload={params.get('workload.seed', 'n/a (own data)')} train={params['train.seed']}; "
        f"python {env.get('python')}, "
        f"torch {env['packages']['torch']}, {gpus}, driver {hw.get('driver')}",
    )


def check_infiniband(ev: dict[str, Any]) -> Outcome:
    probes = ev.get("probes") or {}
    ib = probes.get("infiniband") or []
    if not ib:
        return Outcome(NA, "no InfiniBand device on this machine")
    args = (probes.get("env") or {}).get("HOROVOD_MPI_ARGS") or ""
    if "^openib" in args:
        return Outcome(PASS, f"InfiniBand {ib}; HOROVOD_MPI_ARGS={args!r}")
    return Outcome(WARN, f"InfiniBand {ib} present and HOROVOD_MPI_ARGS={args!r} does not exclude openib")


CHECKS: tuple[Check, ...] = (
    Check(
        "kernel_timeline",
        "Kernel timeline captured for training",
        "train manifest kernel_timeline",
        "Profile training on the GPU: the train stage writes a torch.profiler trace (trace.json); for nsys run "
        "`nsys profile -t cuda,nvtx -o train faultline run --profile gpu --from train` and record the report.",
        check_kernel_timeline,
    ),
    Check(
        "spark_dynamic_allocation_off",
        "Spark dynamic allocation off",
        "ingest manifest spark_conf",
        "Set spark.dynamicAllocation.enabled=false (tasks/core/runtime.spark_conf does; remove any override in "
        "ingest.extra_conf).",
        check_dynamic_allocation,
    ),
    Check(
        "nccl_matrix_symmetric",
        "NCCL pairwise bandwidth matrix symmetric",
        "live probe + nvidia-smi topo -m",
        "An asymmetric pair points at a degraded link: compare `nvidia-smi topo -m` and `nvidia-smi nvlink -s`; "
        "reseat or exclude the GPU; keep NCCL_NVLS_ENABLE=0 on hosts without NVLink multicast.",
        check_nccl_matrix,
        "env",
    ),
    Check(
        "gpu_utilization",
        f"GPU utilization > {GPU_UTIL_TARGET:.0f} % in steady state",
        "train manifest gpu_utilization (NVML driver samples over the training steps)",
        "Feed the GPU: keep tensors on the device, raise train.batch_size, check data_wait_s per epoch; "
        "see the utilization plot in MLflow (training/gpu_utilization.png).",
        check_gpu_utilization,
    ),
    Check(
        "mlflow_complete",
        "MLflow run complete",
        "MLflow run params/metrics/tags/artifacts",
        "Rerun the pipeline to completion (a failed or cut run leaves the MLflow run incomplete); "
        "tasks/tracking.record_run logs everything required.",
        check_mlflow_complete,
    ),
    Check(
        "validation_passed",
        "Validation passed, quarantine under its threshold",
        "validate + ingest manifests",
        "Inspect the GX Data Docs and the quarantine Parquet (one column per rule) and fix the export; "
        "raise validate.max_quarantine_rate only with a reason.",
        check_validation,
    ),
    Check(
        "executor_memory_rule",
        "Executor memory = GPU memory x 1.2 + 2 GB",
        "ingest manifest spark_conf",
        "Leave ingest.executor_memory_gb unset so it follows the rule; executor OOM in off-heap buffers -> "
        "set -XX:MaxDirectMemorySize (ingest.max_direct_memory_gb).",
        check_executor_memory,
    ),
    Check(
        "max_direct_memory_set",
        "MaxDirectMemorySize set for driver and executors",
        "ingest manifest spark_conf",
        "Executor OOM (direct buffer memory) -> set -XX:MaxDirectMemorySize via ingest.max_direct_memory_gb.",
        check_max_direct_memory,
    ),
    Check(
        "gpu_memory_fraction_set",
        "GPU memory fraction set for training",
        "train manifest memory_fraction",
        "CUDA OOM from fragmentation -> set train.memory_fraction (e.g. 0.8) so the caching allocator leaves "
        "headroom; PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True helps too.",
        check_memory_fraction,
    ),
    Check(
        "parquet_row_groups",
        f"Parquet row groups near {ROW_GROUP_TARGET_MB} MB",
        "ingest manifest parquet facts",
        f"Set ingest.parquet_block_size_mb={ROW_GROUP_TARGET_MB} (spark.hadoop.parquet.block.size) and write "
        "fewer, larger files.",
        check_row_groups,
    ),
    Check(
        "scaling_report_present",
        "Strong and weak scaling report present",
        "bench/results/scaling.json",
        "Run `faultline bench scaling` (the benchmark flow) on the run's own kind of host (the same GPU model and "
        "count, or the same CPU core count).",
        check_scaling_report,
    ),
    Check(
        "seeds_and_environment_recorded",
        "Seeds and environment recorded",
        "MLflow params + environment.json",
        "Run through the pipeline flow, which logs the seeds and environment/environment.json to MLflow.",
        check_seeds_environment,
    ),
    Check(
        "horovod_infiniband",
        "Horovod over InfiniBand avoids the openib BTL",
        "live probe /sys/class/infiniband",
        f"Horovod allreduce hangs over InfiniBand -> export {IB_FIX}.",
        check_infiniband,
        "env",
    ),
)
