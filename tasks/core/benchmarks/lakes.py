"""The benchmarks' shared inputs and timings: lakes (simulated and ingested, or synthetic at any size) and the
features stage timed on a running Dask cluster."""

from __future__ import annotations

import json
import multiprocessing
import os
import shutil
import time
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from tasks.core.config import FeaturesConfig, IngestConfig
from tasks.core.probes import java_version
from tasks.core.runtime import Hardware, dask_cluster, dask_spec, spark_conf
from tasks.core.schema import KPI_VALUES, STEP_MINUTES, STEPS_PER_DAY
from tasks.core.sparkops import stage_spark
from tasks.core.stages.features import build_features
from tasks.core.stages.ingest import run_ingest
from tasks.core.stages.raw import discover
from tasks.core.stages.simulate import simulate
from tasks.core.topology import Topology, load_topology


def synthetic_lake(out: Path, topology: str, rows: int, seed: int = 0, start: str = "2026-01-05") -> dict[str, Any]:
    """A lake of at least ``rows`` KPI rows (whole days), one Parquet file per day like Spark's; the days are
    generated in parallel processes (each day from its own seed, starting where a base level puts it)."""
    from concurrent.futures import ProcessPoolExecutor

    topo = load_topology(topology)
    days = max(1, -(-rows // (topo.n * STEPS_PER_DAY)))
    if (out / "topology.json").is_file() and json.loads((out / "_lake.json").read_text())["days"] == days:
        return json.loads((out / "_lake.json").read_text())
    shutil.rmtree(out, ignore_errors=True)
    tmp = out.with_name(out.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    workers = max(1, min(days, os.cpu_count() or 1))
    if workers == 1:
        n_alarms = sum(_synthetic_day(tmp, topology, d, seed, start) for d in range(days))
    else:
        with ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("spawn")) as pool:
            n_alarms = sum(
                pool.map(_synthetic_day, [tmp] * days, [topology] * days, range(days), [seed] * days, [start] * days)
            )
    (tmp / "topology.json").write_text(json.dumps(topo.to_json()))
    facts = {
        "topology": topology,
        "elements": topo.n,
        "days": days,
        "kpi_rows": topo.n * STEPS_PER_DAY * days,
        "alarm_rows": n_alarms,
    }
    (tmp / "_lake.json").write_text(json.dumps(facts))
    tmp.rename(out)
    return facts


def _synthetic_day(tmp: Path, topology: str, d: int, seed: int, start: str) -> int:
    """Day ``d`` of the synthetic lake: random-walk KPIs, ~2 precursor alarms per element, and a NODE_DOWN +
    NODE_UP pair for 1 % of the elements. Returns the number of alarms written."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    topo = load_topology(topology)
    base = np.random.default_rng(seed).normal(50, 5, size=(topo.n, len(KPI_VALUES)))
    rng = np.random.default_rng([seed, d])
    ids = np.array(topo.element_ids, dtype=object)
    t0 = pd.Timestamp(start, tz="UTC")
    day = (t0 + pd.Timedelta(days=d)).strftime("%Y-%m-%d")
    ts = t0 + pd.Timedelta(days=d) + pd.to_timedelta(np.arange(STEPS_PER_DAY) * STEP_MINUTES, unit="min")
    ts = ts.tz_convert(None).as_unit("us").to_numpy()  # naive UTC datetime64[us]; arrow tags it UTC
    steps = rng.normal(0, 0.5, size=(STEPS_PER_DAY, topo.n, len(KPI_VALUES)))
    walk = (base + rng.normal(0, 3, size=base.shape))[None] + np.cumsum(steps, axis=0)
    cols = {
        "timestamp": pa.array(np.repeat(ts, topo.n), pa.timestamp("us", tz="UTC")),
        "element_id": pa.DictionaryArray.from_arrays(
            pa.array(np.tile(np.arange(topo.n, dtype=np.int32), STEPS_PER_DAY)), pa.array(ids, pa.string())
        ).cast(pa.string()),
    }
    flat = walk.reshape(-1, len(KPI_VALUES))
    for i, k in enumerate(KPI_VALUES):
        cols[k] = pa.array(np.abs(flat[:, i]).round().astype(np.int64)) if k == "if_errors" else pa.array(flat[:, i])
    (tmp / "kpi" / f"date={day}").mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.table(cols), tmp / "kpi" / f"date={day}" / "part-00000.parquet", compression="zstd")
    k = rng.integers(0, topo.n * STEPS_PER_DAY, size=2 * topo.n)
    down = rng.choice(topo.n, size=max(1, topo.n // 100), replace=False)
    at = rng.integers(12, STEPS_PER_DAY - 12, size=len(down))
    el = np.r_[k % topo.n, down, down]
    step = np.r_[k // topo.n, at, at + 6]
    sev = np.r_[
        rng.choice(["warning", "minor", "major"], size=len(k)), ["critical"] * len(down), ["cleared"] * len(down)
    ]
    typ = np.r_[
        rng.choice(["HIGH_CPU", "HIGH_TEMP", "LINK_DEGRADED"], size=len(k)),
        ["NODE_DOWN"] * len(down),
        ["NODE_UP"] * len(down),
    ]
    alarms = pa.table(
        {
            "alarm_id": pa.array([f"A{d}-{i}" for i in range(len(el))], pa.string()),
            "timestamp": pa.array(ts[step] + np.timedelta64(90, "s"), pa.timestamp("us", tz="UTC")),
            "element_id": pa.array(ids[el], pa.string()),
            "severity": pa.array(sev, pa.string()),
            "alarm_type": pa.array(typ, pa.string()),
            "text": pa.array(["synthetic"] * len(el), pa.string()),
        }
    )
    (tmp / "alarms" / f"date={day}").mkdir(parents=True, exist_ok=True)
    pq.write_table(alarms, tmp / "alarms" / f"date={day}" / "part-00000.parquet", compression="zstd")
    return alarms.num_rows


def ensure_lake(work: Path, topology: str, days: int, ingest: IngestConfig, hw: Hardware, seed: int = 7) -> Path:
    """A clean lake of ``days`` days (simulated, then ingested with Spark); reused when present. On a host
    without Java, the ingest output's layout synthesised instead (``synthetic_lake``)."""
    lake = work / f"lake-{topology.replace('/', '_')}-{days}d"
    if (lake / "topology.json").is_file():
        return lake
    if not java_version().get("found"):
        synthetic_lake(lake, topology, load_topology(topology).n * STEPS_PER_DAY * days, seed)
        return lake
    raw = work / f"raw-{topology.replace('/', '_')}-{days}d"
    shutil.rmtree(raw, ignore_errors=True)
    simulate(topology, days, seed, raw, dirt=0.0)
    tmp = lake.with_name(lake.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    # stopped after (with the RAPIDS Accelerator, its JVM ended): the GPU is the features' and training's next
    with stage_spark(spark_conf(ingest, hw, None), "bench-lake") as spark:
        run_ingest(spark, discover(raw), tmp, ingest)
    tmp.rename(lake)
    return lake


def warm_worker() -> None:
    """Run on every Dask worker before a timed run (``client.run``): the stage's imports happen untimed."""
    import tasks.core.stages.features  # noqa: F401


def time_features(
    lake: Path, cfg: FeaturesConfig, backend: str, workers: int, out: Path, hw: Hardware, compute_only: bool = False
) -> dict[str, Any]:
    """The features stage as the pipeline runs it, timed on a running cluster (start-up excluded and reported);
    with ``compute_only`` timed once more without the Parquet write (``compute_only_s``)."""
    c = cfg.model_copy(
        update={"n_workers": workers, "backend": backend, "cluster": "cuda" if backend == "cudf" else "local"}
    )
    topo = Topology.read(lake / "topology.json")
    t_start = time.perf_counter()
    with dask_cluster(dask_spec(c, backend, hw)) as client:
        client.wait_for_workers(1 if backend == "cudf" else workers, timeout=300)
        client.run(warm_worker)  # imports on every worker before the clock starts
        startup = time.perf_counter() - t_start
        shutil.rmtree(out, ignore_errors=True)
        t0 = time.perf_counter()
        summary = build_features(client, lake, topo, c, backend, out)
        seconds = time.perf_counter() - t0
        extra = {}
        if compute_only:
            t1 = time.perf_counter()
            build_features(client, lake, topo, c, backend, out, write=False)
            extra["compute_only_s"] = round(time.perf_counter() - t1, 2)
    shutil.rmtree(out, ignore_errors=True)
    return {
        "backend": backend,
        "workers": workers,
        "threads_per_worker": c.threads_per_worker,
        "seconds": round(seconds, 3),
        "startup_s": round(startup, 2),
        "rows": summary["rows_out"],
        "rows_per_s": round(summary["rows_out"] / seconds, 1),
        **extra,
    }
