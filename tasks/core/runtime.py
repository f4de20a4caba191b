"""The one place that probes hardware and turns it into engine settings.

``resolve_runtime`` runs once per flow run and returns one ``Runtime`` (training device, dataframe backend,
Dask cluster spec, Spark conf, launcher environment) that the stages receive; nothing else probes hardware
or reads environment switches (the probing itself: ``hardware.py``). GPU libraries are imported only inside
functions, so every module imports on a CPU-only machine.
"""

from __future__ import annotations

import contextlib
import os
import re
import sys
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from . import nativelibs
from .config import FaultlineConfig, FeaturesConfig, IngestConfig, TrainConfig
from .errors import ConfigError
from .hardware import GPU, Hardware, detect_hardware  # noqa: F401  (GPU: re-exported)
from .probes import java_home
from .schema import KPI_PARSE_CONF
from .secrets import resolve


def executor_memory_gb(cfg: IngestConfig, hw: Hardware) -> float:
    """The guide's rule: executor memory = GPU memory (GB) x 1.2 + 2 GB when GPUs are present."""
    if cfg.executor_memory_gb is not None:
        return cfg.executor_memory_gb
    if hw.gpus:
        return round(hw.gpus[0].memory_gb * 1.2 + 2, 1)
    return max(1.0, min(4.0, hw.memory_gb / 4))


SPLITS_PER_CORE = 4  # input splits per core of a local master (spark.sql.files.minPartitionNum)


def master_cores(master: str, cpu_count: int) -> int | None:
    """How many cores a local master runs tasks on (local[*] = the host's); None for a cluster's master."""
    m = re.fullmatch(r"local(?:\[(\*|\d+)(?:,\s*\d+)?\])?", master.strip())
    if not m:
        return None
    return cpu_count if m.group(1) == "*" else int(m.group(1) or 1)


def _mb(gb: float) -> str:
    """Spark and the JVM take whole units: 2.4 GB -> '2458m'."""
    return f"{int(round(gb * 1024))}m"


def spark_conf(cfg: IngestConfig, hw: Hardware, event_log_dir: Path | None) -> dict[str, str]:
    """Every Spark setting the pipeline uses, derived from the profile in one place."""
    block = cfg.parquet_block_size_mb * 1024 * 1024
    java = f"-XX:MaxDirectMemorySize={_mb(cfg.max_direct_memory_gb)} -XX:+Use{cfg.jvm_gc}GC"
    conf = {
        "spark.master": cfg.master,
        "spark.app.name": "faultline",  # a pipeline stage names its own session faultline-<stage>
        "spark.dynamicAllocation.enabled": "false",
        "spark.sql.shuffle.partitions": str(cfg.shuffle_partitions),
        "spark.sql.session.timeZone": "UTC",
        "spark.sql.files.maxPartitionBytes": str(block),
        "spark.sql.parquet.compression.codec": "uncompressed" if cfg.compression == "none" else cfg.compression,
        "spark.hadoop.parquet.block.size": str(block),
        "spark.sql.parquet.outputTimestampType": "TIMESTAMP_MICROS",
        "spark.driver.memory": _mb(cfg.driver_memory_gb),
        "spark.executor.memory": _mb(executor_memory_gb(cfg, hw)),
        "spark.executor.extraJavaOptions": java,
        "spark.driver.extraJavaOptions": java,
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.sql.ansi.enabled": "false",
        # read by tasks.core.stages.readers.read_kpi in every stage of the session
        KPI_PARSE_CONF: kpi_parse(cfg, hw),
    }
    cores = master_cores(cfg.master, hw.cpu_count)
    if cores and not rapids_jar(cfg, hw):  # 4 input splits a core at least: 14 files of 73 MB made 5 splits on 2 cores,
        # one idle through the last wave (the plugin's runs keep Spark's split size, as checked on the GPU)
        conf["spark.sql.files.minPartitionNum"] = str(SPLITS_PER_CORE * cores)
    if cfg.master.startswith("local"):  # every server the project starts listens on loopback
        conf["spark.driver.host"] = "127.0.0.1"
        conf["spark.driver.bindAddress"] = "127.0.0.1"
    if cfg.event_log and event_log_dir is not None:
        event_log_dir.mkdir(parents=True, exist_ok=True)
        conf["spark.eventLog.enabled"] = "true"
        conf["spark.eventLog.dir"] = event_log_dir.resolve().as_uri()
    if rapids_jar(cfg, hw):
        conf.update(_rapids_conf(cfg, hw))
        # the plugin's native libraries loaded from where make setup unpacked them, not copied out of the jar at
        # every start (tasks.core.nativelibs); the driver's JVM only: a cluster's executors may not see that path
        if native := nativelibs.java_options(Path(conf["spark.jars"])):
            conf["spark.driver.extraJavaOptions"] += f" {native}"
    # ${env:NAME} placeholders read here, where Spark needs them: the config and its records hold no secret
    conf.update({k: resolve(v, f"ingest.extra_conf[{k!r}]") for k, v in cfg.extra_conf.items()})
    return conf


class RapidsJarMissing(ConfigError):
    pass


def installed_rapids_jar() -> Path | None:
    """The RAPIDS Accelerator jar ``make setup`` installed into this venv (GPU targets), if any."""
    jars = sorted((Path(sys.prefix) / "jars").glob("rapids-4-spark_*.jar"))
    return jars[-1] if jars else None


def rapids_jar(cfg: IngestConfig, hw: Hardware) -> str | None:
    """The RAPIDS Accelerator jar Spark runs with, or None for Spark on the CPU: ``ingest.rapids_jar`` as set, and
    for ``auto`` the jar ``make setup`` installed where there is one and a GPU is visible."""
    if cfg.rapids_jar != "auto":
        return cfg.rapids_jar
    jar = installed_rapids_jar() if hw.gpus else None
    return str(jar) if jar else None


def kpi_parse(cfg: IngestConfig, hw: Hardware) -> str:
    """How the KPI exports are parsed: ``ingest.kpi_parse`` as set, and for ``auto`` the line parse where the RAPIDS
    Accelerator reads them (the GPU keeps every line that way) and Spark's CSV parser on the CPU (the faster there)."""
    if cfg.kpi_parse != "auto":
        return cfg.kpi_parse
    return "lines" if rapids_jar(cfg, hw) else "csv"


def _rapids_conf(cfg: IngestConfig, hw: Hardware) -> dict[str, str]:
    jar = installed_rapids_jar() if cfg.rapids_jar == "installed" else Path(rapids_jar(cfg, hw) or "")
    if jar is None or not jar.is_file():
        raise RapidsJarMissing(
            f"ingest.rapids_jar is set to {cfg.rapids_jar!r} but no such file exists: run `make setup` on a GPU "
            "host (it installs the RAPIDS Accelerator jar, rapids-4-spark_2.13, into the venv), give its path, "
            "or unset ingest.rapids_jar"
        )
    import pyspark

    version = "".join(pyspark.__version__.split(".")[:3])  # 4.2.0 -> spark420, as RAPIDS names its shims
    conf = {
        "spark.jars": str(jar.resolve()),
        "spark.plugins": "com.nvidia.spark.SQLPlugin",
        "spark.rapids.sql.enabled": "true",
        "spark.rapids.sql.mode": cfg.rapids_mode,
        # every plan's placement, operator by operator, logged by the plugin and kept in the stage's manifest
        "spark.rapids.sql.explain": "ALL",
        "spark.rapids.sql.concurrentGpuTasks": str(cfg.concurrent_gpu_tasks),
        # cached (persisted) input kept as Parquet batches the GPU scans; Spark's default keeps rows the plugin
        # cannot scan ("ParquetCachedBatchSerializer is not being used"). It also runs on the CPU (explainOnly)
        "spark.sql.cache.serializer": "com.nvidia.spark.ParquetCachedBatchSerializer",
        # with ingest.kpi_parse=csv the KPI CSV scan stays on the CPU: the plugin's CSV reader keeps no
        # corrupt-record column yet does not fall back when the schema has one (NVIDIA/cudf-spark#2065), so a
        # malformed line ("n/a#" in a number, a truncated export) came out as a parsed row with nulls: quarantined as
        # null_* without its text, and GX's counts differed from the CPU's (bench/device/same_lake.py finds such
        # differences). With kpi_parse=lines the GPU reads each line as one string, which no line can break
        "spark.rapids.sql.format.csv.read.enabled": str(kpi_parse(cfg, hw) == "lines").lower(),
    }
    if cfg.rapids_shuffle_mode == "SPARK":  # on Spark 4 the plugin installs its shuffle manager unless told not to
        conf["spark.rapids.shuffle.enabled"] = "false"
    else:
        conf["spark.shuffle.manager"] = f"com.nvidia.spark.rapids.spark{version}.RapidsShuffleManager"
        conf["spark.rapids.shuffle.mode"] = cfg.rapids_shuffle_mode
    if cfg.rapids_mode == "executeOnGPU":  # explainOnly runs on the CPU: no GPU to ask for, no pinned memory
        # ingest.rapids_pinned_pool: 16 tasks' host<->GPU copies overran a 2 GiB pool on an H200 host (~1,000 "maximum
        # pool size exceeded" a run: the plugin then falls back to pageable memory); allocating the pool is part of
        # the plugin's start (bench/device/spark_start.py's plugin-pinned-0 variant measures what it costs)
        conf["spark.rapids.memory.pinnedPool.size"] = cfg.rapids_pinned_pool
        fraction = str(cfg.rapids_memory_fraction)  # the rest of the GPU: the features' worker, started ahead
        conf.update(
            {"spark.rapids.memory.gpu.allocFraction": fraction, "spark.rapids.memory.gpu.maxAllocFraction": fraction}
        )
        if not cfg.master.startswith("local"):  # a cluster schedules GPUs; local mode has one process and GPU 0
            conf["spark.executor.resource.gpu.amount"] = "1"
            conf["spark.task.resource.gpu.amount"] = str(round(1 / max(1, cfg.concurrent_gpu_tasks), 3))
    return conf


def spark_session(conf: dict[str, str]):
    """A SparkSession for this process (reused; a handle never enters a cache key)."""
    from pyspark.sql import SparkSession

    active = SparkSession.getActiveSession()
    if active is not None:
        return active
    os.environ.setdefault("PYSPARK_PYTHON", os.sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    home = java_home()
    if home:  # the project's own Java runtime (see make setup), unless JAVA_HOME says otherwise
        os.environ["JAVA_HOME"] = home
    builder = SparkSession.builder
    for k, v in conf.items():
        builder = builder.config(k, v)
    spark = get_or_create(builder)
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def get_or_create(builder, attempts: int = 2):
    """``builder.getOrCreate()``, started once more if the JVM dies before it answers (Py4J finds the gateway
    gone: a start-up failure of the host, not of the configuration, which fails the same way twice)."""
    from py4j.protocol import Py4JNetworkError
    from pyspark import SparkContext

    for attempt in range(1, attempts + 1):
        try:
            return builder.getOrCreate()
        except (Py4JNetworkError, ConnectionError) as e:
            gateway = SparkContext._gateway
            if gateway is not None and getattr(gateway, "proc", None) is not None:
                gateway.proc.kill()  # the JVM, if it still lingers
            SparkContext._gateway = SparkContext._jvm = SparkContext._active_spark_context = None
            if attempt == attempts:
                raise RuntimeError(f"Spark's JVM died while starting, {attempts} times: {e}") from e
            print(f"Spark's JVM died while starting ({e}); starting it again", file=sys.stderr, flush=True)


def effective_spark_conf(spark) -> dict[str, str]:
    return dict(sorted(spark.sparkContext.getConf().getAll()))


# ---------------------------------------------------------------- Dask
def dataframe_backend(cfg: FeaturesConfig, hw: Hardware) -> str:
    """``cudf`` on GPU profiles when cuDF imports, else ``pandas``."""
    if cfg.backend == "pandas":
        return "pandas"
    if hw.gpus:
        try:
            import cudf  # noqa: F401
            import dask_cudf  # noqa: F401

            return "cudf"
        except ImportError:
            if cfg.backend == "cudf":
                raise
    if cfg.backend == "cudf":
        raise RuntimeError("features.backend=cudf but no GPU is visible")
    return "pandas"


def dask_spec(cfg: FeaturesConfig, backend: str, hw: Hardware) -> dict[str, Any]:
    """The Dask cluster a stage gets: an existing scheduler, a LocalCUDACluster on GPUs, else a LocalCluster."""
    if cfg.scheduler_address:
        return {"kind": "scheduler", "address": cfg.scheduler_address}
    if backend == "cudf" and cfg.cluster == "cuda":
        kwargs: dict[str, Any] = {
            "n_workers": min(cfg.n_workers, hw.gpu_count) or 1,
            "threads_per_worker": cfg.threads_per_worker,
            "protocol": cfg.protocol,
            "rmm_pool_size": cfg.rmm_pool_size,
            "enable_cudf_spill": True,
            "dashboard_address": "127.0.0.1:0",
        }
        if cfg.protocol == "ucx":
            kwargs.update(enable_nvlink=True, enable_tcp_over_ucx=True)
        return {"kind": "cuda", "kwargs": kwargs}
    kwargs = {
        "n_workers": cfg.n_workers,
        "threads_per_worker": cfg.threads_per_worker,
        "processes": True,
        "host": "127.0.0.1",
        "dashboard_address": "127.0.0.1:0",
        "memory_limit": "auto",
    }
    return {"kind": "local", "kwargs": kwargs}


@contextlib.contextmanager
def dask_cluster(spec: dict[str, Any], ahead: dict[str, Any] | None = None) -> Iterator[Any]:
    """A client on the cluster ``spec`` describes: the one started ahead for it (:mod:`tasks.core.clusters`; how it
    came is put in ``ahead``), else one started now. The cluster (when this process started it) is closed after."""
    from tasks.core.clusters import close_cluster, start_cluster, take_ahead

    taken = take_ahead(spec)
    if taken is not None and ahead is not None:
        ahead.update(taken[2])
    cluster, client = taken[:2] if taken is not None else start_cluster(spec)
    try:
        yield client
    finally:
        close_cluster(cluster, client)


# ---------------------------------------------------------------- Training
def train_device(cfg: TrainConfig, hw: Hardware) -> str:
    if cfg.device != "auto":
        return cfg.device
    return "cuda" if hw.gpus else "cpu"


def horovod_env(cfg: TrainConfig, device: str) -> dict[str, str]:
    env = {"HOROVOD_GLOO_TIMEOUT_SECONDS": str(int(cfg.stall_timeout_s)), "HOROVOD_BIND_ADDRESS": cfg.bind_address}
    if device == "cuda":  # NVLink multicast stays off (hosts shared with others; see README)
        env.update(NCCL_NVLS_ENABLE="0", TORCH_SYMM_MEM_DISABLE_MULTICAST="1", NVSHMEM_DISABLE_NVLS="1")
    return env


def threads_per_rank(cfg: TrainConfig, device: str, hw: Hardware) -> int:
    """CPU training: the host's cores shared among the ranks; GPU ranks need one thread each."""
    return 1 if device == "cuda" else max(1, hw.cpu_count // cfg.num_proc)


# ---------------------------------------------------------------- one object per flow run
@dataclass(frozen=True)
class Runtime:
    """Every engine setting a flow run uses, decided once from the config and the hardware."""

    hardware: Hardware
    device: str
    backend: str
    spark_conf: dict[str, str]
    dask: dict[str, Any]
    launcher_env: dict[str, str]
    threads_per_rank: int

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def resolve_runtime(cfg: FaultlineConfig, root: Path | None = None, hw: Hardware | None = None) -> Runtime:
    """The run's runtime: raises ``RapidsJarMissing`` (a config error) at once when a jar is set but absent."""
    hw = hw or detect_hardware()
    device = train_device(cfg.train, hw)
    backend = dataframe_backend(cfg.features, hw)
    events = Path(root) / "spark-events" if root is not None else None
    return Runtime(
        hardware=hw,
        device=device,
        backend=backend,
        spark_conf=spark_conf(cfg.ingest, hw, events),
        dask=dask_spec(cfg.features, backend, hw),
        launcher_env=horovod_env(cfg.train, device),
        threads_per_rank=threads_per_rank(cfg.train, device, hw),
    )
