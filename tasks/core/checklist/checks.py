"""The pre-submission checklist: declarative checks over what a pipeline run recorded.

Each ``Check`` names the evidence it reads and the remedy to apply when it fails. Evidence is one
JSON-able dict (see ``collect_evidence``): the MLflow run (params, metrics, tags, artifacts), the stage
manifests it holds, its config and environment, the scaling report, and live probes of this machine.
Statuses: ``pass``, ``warn``, ``fail``, ``na`` (not applicable, with the reason); the verdict is
``fail`` when any check fails. GPU checks are ``na`` for runs without a GPU, never ``pass``.
"""

from __future__ import annotations

from typing import Any

from tasks.core.checklist.report import FAIL, NA, PASS, WARN, Check, Outcome, manifest, requires_stage
from tasks.core.config import flatten

GPU_UTIL_TARGET = 85.0
NCCL_SYMMETRY_TOL = 0.15
ROW_GROUP_TARGET_MB = 256
FINAL_METRICS = ("pr_auc", "roc_auc", "f1", "recall_at_p90")
BASELINE_METRICS = ("baseline_pr_auc", "rule_pr_auc")
EPOCH_METRICS = ("train_loss", "val_pr_auc")
REQUIRED_TAGS = ("code_version", "data_fingerprint")
IB_FIX = 'HOROVOD_MPI_ARGS="-mca btl ^openib"'


def _gpu_run(ev: dict[str, Any]) -> bool:
    train = manifest(ev, "train")
    return bool(train and train.get("device") == "cuda")


def _run_gpus(ev: dict[str, Any]) -> list[dict[str, Any]]:
    return list(((ev.get("environment") or {}).get("hardware") or {}).get("gpus") or [])


def _spark_conf(ingest: dict[str, Any]) -> dict[str, str]:
    return ingest.get("spark_conf") or {}


# ---------------------------------------------------------------- the checks
@requires_stage("train")
def check_kernel_timeline(ev: dict[str, Any], train: dict[str, Any]) -> Outcome:
    kt = train.get("kernel_timeline") or {}
    if train.get("device") != "cuda":
        return Outcome(NA, f"training ran on {train.get('device')}: there are no CUDA kernels to time")
    kind = kt.get("kind") or ""
    top = kt.get("top_kernels") or []
    if kind.startswith("nsys") or (kt.get("file") and kt.get("cuda_kernels", 0) > 0 and top):
        listing = "; ".join(f"{k['kernel'][:60]} {k['total_us'] / 1000:.2f} ms x{k['calls']}" for k in top[:5])
        return Outcome(
            PASS, f"{kind} `{kt.get('file')}` with {kt.get('cuda_kernels')} CUDA kernels; top: {listing}", top
        )
    if kt.get("file"):
        return Outcome(FAIL, f"{kind} `{kt['file']}` holds no CUDA kernel events")
    return Outcome(FAIL, "no nsys report or profiler trace was recorded for training")


@requires_stage("ingest", "the run has no ingest stage (started from an existing lake)")
def check_dynamic_allocation(ev: dict[str, Any], ingest: dict[str, Any]) -> Outcome:
    conf = _spark_conf(ingest)
    value = conf.get("spark.dynamicAllocation.enabled")
    if value is None:
        return Outcome(
            FAIL, "the ingest manifest holds no effective Spark conf (spark.dynamicAllocation.enabled unset)"
        )
    if str(value).lower() == "false":
        return Outcome(PASS, f"spark.dynamicAllocation.enabled={value} (master {conf.get('spark.master')})")
    return Outcome(FAIL, f"spark.dynamicAllocation.enabled={value}")


def check_nccl_matrix(ev: dict[str, Any]) -> Outcome:
    probes = ev.get("probes") or {}
    gpus = (probes.get("hardware") or {}).get("gpus") or []
    topo = probes.get("topo") or {}
    shown = f"; nvidia-smi topo -m: {topo['links']}" if topo.get("links") else ""
    if len(gpus) < 2:
        return Outcome(NA, f"{len(gpus)} GPU on this machine: a pairwise matrix needs at least 2{shown}", topo or None)
    nccl = probes.get("nccl")
    if not nccl:
        return Outcome(FAIL, f"the pairwise probe did not run: {probes.get('nccl_error', 'not attempted')}{shown}")
    from tasks.core.probes import asymmetry

    worst, where = asymmetry(nccl["matrix_gbps"])
    m = nccl["matrix_gbps"]
    rows = " / ".join(" ".join(f"{v:.0f}" for v in row) for row in m)
    text = f"{len(m)}x{len(m)} GB/s matrix [{rows}], worst asymmetry {worst:.1%} at {where}{shown}"
    return Outcome(PASS if worst <= NCCL_SYMMETRY_TOL else FAIL, text, {"nccl": nccl, "topo": topo})


@requires_stage("train")
def check_gpu_utilization(ev: dict[str, Any], train: dict[str, Any]) -> Outcome:
    if train.get("device") != "cuda":
        return Outcome(NA, f"training ran on {train.get('device')}: no GPU to utilise")
    u = train.get("gpu_utilization") or {}
    if not u.get("available"):
        return Outcome(FAIL, f"no GPU utilization samples were recorded for training ({u.get('reason')})")
    busy = u.get("kernel_busy_fraction")
    extra = f"; kernel-busy {busy:.1%} over the profiled steps" if busy is not None else ""
    if not u.get("sufficient") or u.get("steady_mean") is None:
        return Outcome(
            WARN,
            f"insufficient evidence: {u.get('steady_samples', 0)} samples over {u.get('steady_seconds', 0):.1f} s of "
            f"steady-state training (at least 10 s and 20 samples are needed to judge){extra}",
        )
    text = (
        f"steady-state {u['steady_mean']:.1f} % over {u['steady_samples']} samples in {u['steady_seconds']:.0f} s "
        f"({u.get('source', 'NVML')}; {u.get('steady_definition')}); whole launch {u['mean']:.1f} %{extra}; "
        f"target > {GPU_UTIL_TARGET:.0f} %"
    )
    return Outcome(PASS if u["steady_mean"] > GPU_UTIL_TARGET else FAIL, text)


def _mlflow_missing(run: dict[str, Any], config: dict[str, Any]) -> list[str]:
    missing: list[str] = []
    if run.get("status") != "FINISHED":
        missing.append(f"status FINISHED (is {run.get('status')})")
    params, metrics, tags = run.get("params") or {}, run.get("metrics") or {}, run.get("tags") or {}
    missing += [f"param {k}" for k in flatten(config) if k not in params]
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


def _gx_results(v: dict[str, Any]) -> str:
    suites = v.get("gx_success") or {}
    if not suites:
        return "no GX suite results recorded"
    failed = [name for name, ok in suites.items() if not ok]
    text = f"GX: {len(suites) - len(failed)} of {len(suites)} suites passed"
    if v.get("gx_mostly") is not None and v["gx_mostly"] < 1.0:
        text += f" (each row rule needs {v['gx_mostly']:.0%} of rows)"
    return text + (f" (not: {', '.join(sorted(failed))})" if failed else "")


@requires_stage("validate", "the run has no validation stage (started from an existing lake)")
def check_validation(ev: dict[str, Any], v: dict[str, Any]) -> Outcome:
    limit = (v.get("config") or {}).get("max_quarantine_rate", 0.2)
    rate = float(v.get("quarantine_rate", 0.0))
    ingest = manifest(ev, "ingest") or {}
    lost = ingest.get("rows_in", 0) - ingest.get("rows_out", 0) - ingest.get("rows_quarantined", 0) if ingest else 0
    text = f"{_gx_results(v)}; quarantine rate {rate:.3%} (limit {limit:.1%})"
    if lost:
        return Outcome(FAIL, f"{text}; ingest lost {lost} rows (in != out + quarantined)")
    gx_failed = v.get("gx_mostly") is not None and not all((v.get("gx_success") or {}).values())
    return Outcome(PASS if rate <= limit and not gx_failed else FAIL, text)


@requires_stage("ingest")
def check_executor_memory(ev: dict[str, Any], ingest: dict[str, Any]) -> Outcome:
    gpus = _run_gpus(ev)
    if not gpus:
        return Outcome(NA, "no GPU on the ingest host: the rule (GPU memory x 1.2 + 2 GB) does not apply")
    conf = _spark_conf(ingest)
    got = _to_gb(conf.get("spark.executor.memory", "0m"))
    want = gpus[0]["memory_gb"] * 1.2 + 2
    text = f"spark.executor.memory={conf.get('spark.executor.memory')} ({got:.1f} GB); rule {want:.1f} GB"
    return Outcome(PASS if got >= want * 0.98 else FAIL, text)


def _to_gb(v: str) -> float:
    v = str(v).strip().lower()
    units = {"k": 1 / 2**20, "m": 1 / 1024, "g": 1.0, "t": 1024.0}
    if v and v[-1] in units:
        return float(v[:-1]) * units[v[-1]]
    if v.endswith("b") and v[-2:-1] in units:
        return float(v[:-2]) * units[v[-2]]
    return float(v) / 2**30


@requires_stage("ingest")
def check_max_direct_memory(ev: dict[str, Any], ingest: dict[str, Any]) -> Outcome:
    import re

    conf = _spark_conf(ingest)
    keys = ("spark.executor.extraJavaOptions", "spark.driver.extraJavaOptions")
    bad = [k for k in keys if "-XX:MaxDirectMemorySize=" not in conf.get(k, "")]
    if bad:
        return Outcome(FAIL, f"-XX:MaxDirectMemorySize is not set in {', '.join(bad)}")
    flag = re.search(r"-XX:MaxDirectMemorySize=\S+", conf["spark.executor.extraJavaOptions"])
    return Outcome(PASS, f"{flag.group(0)} for driver and executors")


@requires_stage("train", "training did not run on a GPU")
def check_memory_fraction(ev: dict[str, Any], train: dict[str, Any]) -> Outcome:
    if train.get("device") != "cuda":
        return Outcome(NA, "training did not run on a GPU")
    f = train.get("memory_fraction")
    if f is None or not 0 < float(f) < 1:
        return Outcome(FAIL, f"GPU memory fraction is {f!r}: the caching allocator may take the whole device")
    return Outcome(PASS, f"torch.cuda.set_per_process_memory_fraction({f})")


@requires_stage("ingest")
def check_row_groups(ev: dict[str, Any], ingest: dict[str, Any]) -> Outcome:
    target = ROW_GROUP_TARGET_MB * 2**20
    configured = int(ingest.get("parquet_block_size_bytes") or 0)
    facts = ((ingest.get("sources") or {}).get("kpi") or {}).get("parquet") or {}
    full = facts.get("full_row_group_bytes") or []  # every row group but each file's last
    text = f"parquet.block.size={configured / 2**20:.0f} MB (target {ROW_GROUP_TARGET_MB} MB)"
    if not 0.5 * target <= configured <= 2 * target:
        return Outcome(FAIL, text)
    if full:
        median = sorted(full)[len(full) // 2]
        text += f"; {len(full)} full row groups, median {median / 2**20:.0f} MB"
        return Outcome(PASS if 0.5 * target <= median <= 1.5 * target else WARN, text)
    largest = facts.get("max_row_group_bytes", 0) / 2**20
    return Outcome(PASS, f"{text}; every file fits in one row group (largest {largest:.1f} MB)")


def check_scaling_report(ev: dict[str, Any]) -> Outcome:
    rep, where = ev.get("scaling"), ev.get("scaling_path")
    if not rep:
        return Outcome(FAIL, f"no scaling report at {where}")
    parts = [
        f"{stage} {mode} x{pts[-1]['workers']}: {pts[-1]['efficiency']:.0%}"
        for stage in ("features", "train")
        for mode in ("strong", "weak")
        if (pts := ((rep.get(stage) or {}).get(mode) or {}).get("points") or [])
    ]
    if len(parts) < 4:
        return Outcome(FAIL, f"{where} lacks strong and weak scaling for features and training ({parts})")
    return Outcome(PASS, f"{where} ({rep.get('device', '?')}): " + "; ".join(parts))


def _environment_missing(ev: dict[str, Any], params: dict[str, Any], env: dict[str, Any]) -> list[str]:
    missing = [k for k in ("workload.seed", "train.seed") if k not in params]
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
        f"seeds workload={params['workload.seed']} train={params['train.seed']}; python {env.get('python')}, "
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
        "Run `faultline bench scaling` (the benchmark flow) on the submission hardware.",
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
