"""The run's config sections as typed, frozen models: what each key means, its default and its range (the
profiles in deployments/profiles/*.yaml and ``--set section.key=value`` fill them; ``tasks.core.config`` loads)."""

from __future__ import annotations

import json
from datetime import date
from typing import Any, Literal, get_args

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator

from .errors import ConfigError
from .secrets import redact

PROFILES = ("local", "gpu", "dgx")
STAGES = ("validate", "ingest", "features", "train", "evaluate")


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    @field_validator("*", mode="before")
    @classmethod
    def _numbers_are_not_booleans(cls, value: Any, info: ValidationInfo) -> Any:
        """``train.epochs=true`` is a mistake, not 1 (pydantic's lax mode would take it)."""
        annotation = cls.model_fields[info.field_name].annotation  # int, float, or int | None ...
        if isinstance(value, bool) and {annotation, *get_args(annotation)} & {int, float}:
            raise ValueError(f"expected a number, got a boolean ({str(value).lower()})")
        return value


class WorkloadConfig(_Section):
    topology: str = Field("topozoo/Geant2012", description="topohub key, e.g. topozoo/Abilene")
    days: int = Field(7, ge=1, le=366, description="days of 5-minute telemetry")
    seed: int = Field(7, description="simulator seed")
    dynamics: Literal["v1", "cascade"] = Field(
        "v1",
        description="simulated failure dynamics: v1 (own drift, one-hop neighbours at once) or cascade (shared-risk "
        "links, rerouted load over hops with a lag, precursors sometimes silent)",
    )
    dirt: float = Field(0.0, ge=0.0, le=0.5, description="fraction of rows made dirty")
    start: date = Field(date(2026, 1, 5), description="first day (UTC), YYYY-MM-DD")

    @field_validator("topology")
    @classmethod
    def _known_topology(cls, v: str) -> str:
        from tasks.core.topology import check_topology_key

        try:
            return check_topology_key(v)
        except ConfigError as exc:
            raise ValueError(str(exc)) from None


class PathsConfig(_Section):
    root: str = Field(".faultline", description="store root; stage outputs, MLflow and raw data live here")
    bench_results: str = Field("bench/results", description="benchmark JSON (baseline, scaling, ...) lives here")

    @field_validator("root", "bench_results")
    @classmethod
    def _a_directory(cls, v: str) -> str:
        if not v.strip():
            raise ValueError("must name a directory (empty would mean the current one)")
        return v


class MlflowConfig(_Section):
    tracking_uri: str | None = Field(None, description="None: SQLite store under paths.root")
    experiment: str = "faultline"
    system_metrics_interval_s: float = Field(
        5.0,
        ge=0,
        description="MLflow's SystemMetricsMonitor on each pipeline run (CPU, memory, disk, network, GPUs): "
        "seconds between samples; 0 turns it off",
    )
    strict: bool = Field(
        False,
        description="true: reject a run (exit 2) when the tracking server is unreachable at start; "
        "false: journal its tracking under the store and replay it when the server is back",
    )


class RunsConfig(_Section):
    crash_after_s: float = Field(
        900.0,
        gt=0,
        description="a run on another host is marked crashed after this long without a heartbeat "
        "(on this host only when its process is gone)",
    )


class ValidateConfig(_Section):
    max_quarantine_rate: float = Field(0.2, ge=0.0, le=1.0)
    build_data_docs: bool = True


class IngestConfig(_Section):
    master: str = "local[*]"
    shuffle_partitions: int = Field(8, ge=1)
    parquet_block_size_mb: int = Field(256, ge=1)
    compression: Literal["zstd", "snappy", "gzip", "none"] = "zstd"
    driver_memory_gb: float = Field(2.0, gt=0)
    executor_memory_gb: float | None = Field(None, description="None: derived from GPU memory (guide's rule)")
    max_direct_memory_gb: float = Field(2.0, gt=0)
    jvm_gc: Literal["G1", "Parallel", "Serial"] = Field(
        "G1",
        description="the Spark JVMs' collector, -XX:+Use<name>GC (G1, Java's own; compare with bench/ingest_ab.py)",
    )
    event_log: bool = True
    dedup_by_day: bool = Field(
        True,
        description="KPI dedup: shuffle the rows once, by day (the key fixes the day); false: the general path "
        "(the window and each write shuffle on their own), kept for comparison",
    )
    rapids_jar: str | None = Field(
        None,
        description="the RAPIDS Accelerator jar: a path; 'installed' for the one make setup put in the venv "
        "(GPU targets); 'auto' for that one where it is installed and a GPU is visible, else none; None: Spark on "
        "the CPU",
    )
    rapids_mode: Literal["executeOnGPU", "explainOnly"] = Field(
        "executeOnGPU",
        description="explainOnly: every query on the CPU, the plugin only reports what would run on the GPU "
        "(works on a host without one)",
    )
    rapids_shuffle_mode: Literal["MULTITHREADED", "UCX", "CACHE_ONLY", "SPARK"] = Field(
        "MULTITHREADED",
        description="the RAPIDS shuffle manager's mode; UCX needs UCX's native libraries; SPARK: Spark's own "
        "sort shuffle (spark.rapids.shuffle.enabled=false), for comparison",
    )
    concurrent_gpu_tasks: int = Field(2, ge=1)
    rapids_pinned_pool: str = Field(
        "8g",
        pattern=r"^\d+[kmgKMG]?$",
        description="the RAPIDS Accelerator's pinned host memory pool (spark.rapids.memory.pinnedPool.size; 0: none, "
        "copies to the GPU then go through pageable memory). The plugin allocates it page by page as it starts",
    )
    rapids_memory_fraction: float = Field(
        0.8,
        gt=0.25,
        le=1.0,
        description="the share of the GPU's memory the RAPIDS Accelerator's pool may take (spark.rapids.memory.gpu."
        "allocFraction and maxAllocFraction): the rest holds the features' Dask worker, started beside ingest",
    )
    kpi_parse: Literal["csv", "lines", "auto"] = Field(
        "csv",
        description="how validation and ingest parse the KPI exports: csv, Spark's CSV parser; lines, each line read "
        "as one string and split and cast by the rules written out in tasks/core/stages/readers.py (a malformed line "
        "is kept, its text and reason with it, also where the RAPIDS Accelerator reads the file on the GPU); auto: "
        "lines where the RAPIDS Accelerator runs, csv on the CPU (the faster there)",
    )
    extra_conf: dict[str, str] = Field(default_factory=dict)

    @field_validator("rapids_pinned_pool", mode="before")
    @classmethod
    def _size_as_text(cls, value: Any) -> Any:
        return str(value) if isinstance(value, int) and not isinstance(value, bool) else value


class FeaturesConfig(_Section):
    backend: Literal["auto", "pandas", "cudf"] = "auto"
    cluster: Literal["local", "cuda"] = "local"
    scheduler_address: str | None = None
    n_workers: int = Field(2, ge=1)
    threads_per_worker: int = Field(1, ge=1)
    protocol: Literal["tcp", "ucx"] = "tcp"
    rmm_pool_size: str | None = None
    windows: tuple[int, ...] = (3, 12, 36)
    kpis: tuple[str, ...] = ("cpu_util", "temperature_c", "latency_ms", "packet_loss_pct", "if_errors")
    horizon_minutes: int = Field(60, ge=5)
    store_dtype: Literal["float32", "float64"] = Field(
        "float32", description="stored feature columns (computed in float64; the model consumes float32)"
    )

    @field_validator("windows")
    @classmethod
    def _windows_positive(cls, v: tuple[int, ...]) -> tuple[int, ...]:
        if not v or any(w < 2 for w in v):
            raise ValueError("windows must be a non-empty list of sample counts >= 2")
        return tuple(sorted(set(v)))


class TrainConfig(_Section):
    engine: Literal["horovod", "ddp"] = "horovod"
    num_proc: int = Field(2, ge=1)
    epochs: int = Field(8, ge=1)
    lr: float = Field(3e-3, gt=0)
    batch_size: int = Field(32, ge=1, description="snapshots (timestamps) per step per rank")
    hidden: int = Field(32, ge=4)
    layers: int = Field(2, ge=1)
    window: int = Field(6, ge=1, description="temporal window fed to the encoder (samples)")
    dropout: float = Field(0.0, ge=0, lt=1, description="dropout on the encodings the head reads (0: none)")
    graph: Literal["real", "rewired", "none"] = Field("real", description="ablation: the adjacency the model uses")
    temporal_graph: bool = Field(False, description="message passing at every step of the window too (over time)")
    hazard_steps: int = Field(0, ge=0, description="0: a label head; K: a discrete-time hazard over K steps ahead")
    pos_weight: float | None = Field(
        1.0,
        gt=0,
        description="weight of the fault class in the loss; 1: unweighted (calibrated, and higher PR-AUC on the "
        "quality yardstick); None: negatives per positive of the training window, capped at 50 (over-states "
        "probabilities)",
    )
    seed: int = 0
    warm_start_epochs: int = Field(
        2, ge=1, description="epochs of a run over new days, started from the network's champion (a warm start)"
    )
    init_weights: str | None = Field(
        None, description="a model.pt to start from (a warm start: an increment sets it to the champion's weights)"
    )
    checkpoint_every: int = Field(1, ge=1)
    stall_timeout_s: float = Field(900.0, gt=0)
    device: Literal["auto", "cpu", "cuda"] = "auto"
    memory_fraction: float = Field(0.8, gt=0, le=1)
    tensors: Literal["auto", "host", "device"] = Field(
        "auto",
        description="where the training tensors are built: host (the stage, written to data.npz), device (each "
        "rank, from the features' Parquet; on a GPU through cuDF); auto: device on a GPU, else host",
    )
    bf16: bool = True
    recurrent: Literal["auto", "cudnn", "native"] = Field(
        "auto",
        description="what runs the GRU on a GPU: cuDNN, or PyTorch's fused GRU cells (native; the same equations); "
        "auto: each rank times both on its step's shape before the first step and keeps the faster",
    )
    prewarm: bool = Field(
        True,
        description="one rank on this host: its process starts while the features are computed, so its imports "
        "(torch, Horovod, cuDF, what the optimizer imports) are done when training begins",
    )
    network_interface: str = Field("lo", description="Horovod's NIC for Gloo; a multi-host run names its NIC")
    bind_address: str = Field("127.0.0.1", description="where horovodrun's rendezvous listens (multi-host: 0.0.0.0)")
    hosts: tuple[str, ...] = Field(
        (),
        description="multi-host Horovod: host:slots each (slots summing to num_proc; reached over ssh as "
        "horovodrun does); empty: this host, num_proc slots",
    )

    @field_validator("hosts")
    @classmethod
    def _hosts(cls, v: tuple[str, ...], info: ValidationInfo) -> tuple[str, ...]:
        for h in v:
            name, _, slots = h.rpartition(":")
            if not name or not slots.isdigit() or int(slots) < 1:
                raise ValueError(f"{h!r}: expected host:slots, e.g. dgx-01:8")
        total = sum(int(h.rpartition(":")[2]) for h in v)
        if v and total != info.data.get("num_proc"):
            raise ValueError(f"the hosts' slots sum to {total}, train.num_proc is {info.data.get('num_proc')}")
        if v and info.data.get("engine") != "horovod":
            raise ValueError("train.hosts needs train.engine=horovod (the DDP launcher runs on one host)")
        return v


class EvaluateConfig(_Section):
    test_fraction: float = Field(0.25, gt=0, lt=1)
    precision_target: float = Field(0.9, gt=0, lt=1)
    false_alerts_per_element_day: float = Field(
        1.0, gt=0, description="the alert budget: each model's threshold is chosen on validation to stay within it"
    )
    stack: bool = Field(
        True,
        description="score the GBDT + GNN stack (a blend, its weight chosen on validation) and serve it: the "
        "registered model; false: the graph model alone is served",
    )
    tree_device: Literal["auto", "cpu", "cuda"] = Field(
        "auto",
        description="where the tuned XGBoost baseline and the oracles fit, and the graph model scores: auto takes "
        "the GPU where usable",
    )
    oracles: bool = Field(
        False,
        description="also fit the oracles on the simulator's hidden state (simulated data only): a diagnostic of how "
        "much signal the exports carry, which the quality bench turns on; off, a run computes what it reports",
    )
    register_model: bool = True
    model_name: str = Field(
        "faultline-fault",
        description="the registered model's name stem: a model is registered per network, as <stem>-<network> "
        "(its champion compared only with the same network's models)",
    )


class BenchSize(_Section):
    """One benchmark size: the inputs each benchmark generates (overridable, e.g. bench.full.rows=50000000)."""

    topology: str = Field(description="topohub key of the features and scaling lakes")
    days: int = Field(ge=1, description="scaling: days of the features lake per worker")
    times: int = Field(ge=16, description="train: snapshots of synthetic training data")
    rows: int = Field(ge=1000, description="features: KPI rows of the benchmark lake")
    size_gb: float = Field(gt=0, description="ingest: GB of raw KPI exports")
    ingest_topology: str = Field("backbone/world", description="ingest: topohub key of the simulated exports")
    train_epochs: int = Field(ge=2, description="scaling: training epochs (the first is warm-up)")
    train_hidden: int | None = Field(None, ge=4, description="scaling: model width (None: the profile's)")
    quality_topologies: list[str] = Field(
        ["topozoo/Geant2012", "topozoo/Janetbackbone", "topozoo/Bics", "topozoo/Cesnet201006", "topozoo/Renater2010"],
        min_length=1,
        description="quality: the topologies of the yardstick (one pipeline run per topology and seed)",
    )
    quality_held_out: list[str] = Field(["topozoo/Cesnet201006", "topozoo/Renater2010"], description="quality: untuned")
    quality_seeds: list[int] = Field([1, 2, 3], min_length=1, description="quality: simulator seeds")
    quality_days: int = Field(14, ge=2, description="quality: days simulated per run")
    increment_topology: str = Field("topozoo/TataNld", description="increment: topohub key of the simulated network")
    increment_days: int = Field(8, ge=2, description="increment: days of the full run (the base run has one fewer)")
    increment_repeats: int = Field(3, ge=1, description="increment: repeats (medians of each stage's seconds)")
    scale_factors: list[int] = Field([1, 4, 8], min_length=1, description="scale: multiples of the base days run")
    scale_days: int | None = Field(None, ge=1, description="scale: the base days (None: the profile's)")
    scale_topology: str | None = Field(None, description="scale: topohub key (None: the profile's)")


class BenchConfig(_Section):
    size: Literal["small", "full"] = Field("full", description="small: a quick test of the flow; full: figures")
    small: BenchSize = BenchSize(
        **{"topology": "topozoo/Abilene", "days": 1, "times": 160, "rows": 200_000, "size_gb": 0.002},
        **{"ingest_topology": "topozoo/Geant2012"},  # 3 days, 32 k rows: every variant's path, in seconds
        **{"train_epochs": 4, "train_hidden": 8, "quality_topologies": ["topozoo/Abilene"], "quality_held_out": []},
        **{"quality_seeds": [1], "quality_days": 3, "increment_topology": "topozoo/Abilene", "increment_repeats": 1},
        **{"scale_factors": [1, 2], "scale_days": 2, "scale_topology": "topozoo/Abilene"},
    )
    full: BenchSize = BenchSize(
        topology="topozoo/Geant2012", days=8, times=1008, rows=5_000_000, size_gb=1.0, train_epochs=6
    )
    max_workers: int | None = Field(None, ge=1, description="scaling: up to N workers (None: the profile's)")
    pandas_budget_s: float = Field(150.0, gt=0, description="features: seconds of pandas before extrapolating")
    work: str = Field(".faultline/bench", description="scratch directory (generated inputs are reused)")
    raw: str | None = Field(None, description="ingest: these clean raw exports instead of simulated ones")
    gpu_tasks: list[int] = Field([1, 2, 4], min_length=1, description="ingest, plugin: concurrentGpuTasks sweep")
    repeat_under_s: float = Field(60.0, ge=0, description="ingest: a Spark run under this: the median of three")
    spark_cores: list[int] = Field([], description="ingest: CPU Spark again on local[N] for each N (core scaling)")

    @property
    def sized(self) -> BenchSize:
        return self.small if self.size == "small" else self.full


class FaultlineConfig(_Section):
    profile: str = "local"
    workload: WorkloadConfig = WorkloadConfig()
    paths: PathsConfig = PathsConfig()
    mlflow: MlflowConfig = MlflowConfig()
    runs: RunsConfig = RunsConfig()
    validate_: ValidateConfig = Field(ValidateConfig(), alias="validate")
    ingest: IngestConfig = IngestConfig()
    features: FeaturesConfig = FeaturesConfig()
    train: TrainConfig = TrainConfig()
    evaluate: EvaluateConfig = EvaluateConfig()
    bench: BenchConfig = BenchConfig()

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True, allow_inf_nan=False)

    def section(self, name: str) -> dict[str, Any]:
        """One section as plain JSON-able data (what a stage's fingerprint covers)."""
        return getattr(self, "validate_" if name == "validate" else name).model_dump(mode="json")

    def as_dict(self) -> dict[str, Any]:
        return self.model_dump(mode="json", by_alias=True)

    def flat(self) -> dict[str, str]:
        """Flattened ``section.key`` -> value, for MLflow params (secrets masked)."""
        return flatten(redact(self.as_dict()))


def flatten(config: dict[str, Any], prefix: str = "") -> dict[str, str]:
    """``{"train": {"epochs": 3}, "bench": {"full": {"rows": 5}}}`` -> ``{"train.epochs": "3",
    "bench.full.rows": "5"}``: the MLflow param keys of a config (strings as they are, the rest as JSON)."""
    out: dict[str, str] = {}
    for key, value in config.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict) and value:
            out.update(flatten(value, f"{name}."))
        else:
            out[name] = value if isinstance(value, str) else json.dumps(value)
    return out
