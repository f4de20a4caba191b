"""Features benchmark: the GPU stage (dask-cuda + cuDF + the CUDA kernels) beside pandas in one process
and Dask on every CPU core, on the same Parquet lake, plus each kernel's bandwidth against a
device-to-device copy measured in the same run.

The lake is synthetic (the ingest output's schema and layout over a real topology: random-walk KPIs,
precursor alarms and NODE_DOWN/NODE_UP pairs) so it can be made at 50 M+ rows on a host without Java.
"""

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

from .config import FeaturesConfig
from .runtime import detect_hardware
from .schema import KPI_VALUES, STEP_MINUTES, STEPS_PER_DAY
from .topology import Topology, load_topology


# ---------------------------------------------------------------- input
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


# ---------------------------------------------------------------- the three ways to run the stage
def pandas_one_process(lake: Path, cfg: FeaturesConfig, out: Path, budget_s: float) -> dict[str, Any]:
    """The stage's own day functions on pandas in this process, day after day (the history chained as in
    the Dask graph). Stops after ``budget_s`` and then extrapolates linearly by rows (the days are alike),
    saying so (``extrapolated``)."""
    import pyarrow.dataset as ds

    from . import features as F

    topo = Topology.read(lake / "topology.json")
    t0 = time.perf_counter()
    shared = F.shared_tables(lake, topo)
    total = ds.dataset(lake / "kpi", format="parquet", partitioning="hive").count_rows()
    out.mkdir(parents=True, exist_ok=True)
    context = max(cfg.windows) - 1
    done, history = 0, None
    for name, files in F.day_groups(lake / "kpi"):
        day = F.read_kpi(files, "pandas")
        done += F.write_day(name, day, history, shared, cfg, out)["rows_out"]
        if time.perf_counter() - t0 > budget_s:
            break
        history = F.window_history(history, day, shared, cfg.kpis, context)
    seconds = time.perf_counter() - t0
    return {
        "rows": done,
        "seconds": round(seconds, 2),
        "rows_total": total,
        "seconds_full": round(seconds * total / max(done, 1), 2),
        "extrapolated": done < total,
    }


def dask_stage(
    lake: Path, cfg: FeaturesConfig, backend: str, workers: int, out: Path, compute_only: bool = False
) -> dict[str, Any]:
    """The features stage as the pipeline runs it, timed on a running cluster (start-up excluded); with
    ``compute_only`` also timed once more without the Parquet write (``compute_only_s``)."""
    from .features import build_features
    from .runtime import dask_client

    c = cfg.model_copy(
        update={"n_workers": workers, "backend": backend, "cluster": "cuda" if backend == "cudf" else "local"}
    )
    t_start = time.perf_counter()
    client = dask_client(c, backend)
    try:
        client.wait_for_workers(min(workers, 1 if backend == "cudf" else workers), timeout=300)
        from .bench_scaling import warm_worker

        client.run(warm_worker)
        startup = time.perf_counter() - t_start
        shutil.rmtree(out, ignore_errors=True)
        t0 = time.perf_counter()
        summary = build_features(client, lake, Topology.read(lake / "topology.json"), c, backend, out)
        seconds = time.perf_counter() - t0
        dashboard = client.dashboard_link
        if compute_only:
            t1 = time.perf_counter()
            build_features(client, lake, Topology.read(lake / "topology.json"), c, backend, out, write=False)
            compute_s = time.perf_counter() - t1
    finally:
        client.close()
        if getattr(client, "cluster", None) is not None:
            client.cluster.close()
    return {
        "backend": backend,
        "workers": workers,
        "seconds": round(seconds, 2),
        "startup_s": round(startup, 2),
        "rows": summary["rows_out"],
        "threads_per_worker": c.threads_per_worker,
        "dashboard": dashboard,
        **({"compute_only_s": round(compute_s, 2)} if compute_only else {}),
    }


# ---------------------------------------------------------------- kernels
def kernel_bandwidth(rows: int, cfg: FeaturesConfig, elements: int = 3815, repeat: int = 5) -> dict[str, Any]:
    """Each CUDA kernel's effective bandwidth (compulsory bytes / time) vs a device-to-device copy."""
    import cupy as cp

    from gpu_kernels import neighbors, rolling

    def timed(fn) -> float:
        fn()
        cp.cuda.Device().synchronize()
        start, end = cp.cuda.Event(), cp.cuda.Event()
        start.record()
        for _ in range(repeat):
            fn()
        end.record()
        end.synchronize()
        return cp.cuda.get_elapsed_time(start, end) / 1000 / repeat

    f = len(cfg.kpis)
    w = len(cfg.windows)
    values = cp.random.standard_normal((f, rows), dtype=cp.float64)
    seg = max(1, rows // elements)
    indptr = cp.asarray(np.r_[np.arange(0, rows, seg), rows].astype(np.int64))
    out_r = cp.empty((f, w, 4, rows), dtype=cp.float64)
    copy_src = cp.empty(out_r.nbytes // 8, dtype=cp.float64)
    copy_dst = cp.empty_like(copy_src)
    copy_s = timed(lambda: copy_dst.__setitem__(slice(None), copy_src))
    copy_gb_s = 2 * copy_src.nbytes / copy_s / 1e9
    r_s = timed(lambda: rolling.rolling_stats_cuda(values, indptr, cfg.windows, out=out_r))
    r_bytes = values.nbytes + indptr.nbytes + out_r.nbytes  # values + segments (CSR) + outputs
    topo = load_topology("backbone/world")
    nb_ptr, nb_idx = (cp.asarray(a) for a in topo.csr())
    t = max(1, rows // topo.n)
    grid = cp.random.standard_normal((6, t, topo.n), dtype=cp.float64)
    out_n = cp.empty((6, 2, t, topo.n), dtype=cp.float64)
    n_s = timed(lambda: neighbors.neighbor_agg_cuda(grid, nb_ptr, nb_idx, out=out_n))
    n_bytes = grid.nbytes + out_n.nbytes + nb_ptr.nbytes + nb_idx.nbytes
    res = {
        "copy_gb_s": round(copy_gb_s, 1),
        "rolling": {
            "rows": rows,
            "features": f,
            "windows": list(cfg.windows),
            "seconds": r_s,
            "bytes": int(r_bytes),
            "gb_s": round(r_bytes / r_s / 1e9, 1),
        },
        "neighbors": {
            "snapshots": t,
            "elements": topo.n,
            "features": 6,
            "seconds": n_s,
            "bytes": int(n_bytes),
            "gb_s": round(n_bytes / n_s / 1e9, 1),
        },
    }
    for k in ("rolling", "neighbors"):
        res[k]["bandwidth_fraction"] = round(res[k]["gb_s"] / copy_gb_s, 3)
    return res


PARTS = ("pandas", "dask", "gpu", "kernels")
PANDAS_BUDGET_S = 150.0  # seconds of pandas in one process before the rest is extrapolated


def bench_features(
    work: Path,
    cfg: FeaturesConfig,
    rows: int | None,
    lake: str | None,
    pandas_budget_s: float = PANDAS_BUDGET_S,
    topology: str = "backbone/world",
    keep_outputs: bool = False,
    parts: tuple[str, ...] | None = None,
    previous: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """``parts`` runs a subset (pandas, dask, gpu, kernels), e.g. to split the run over several calls of a
    time-limited machine; the parts not run are taken from ``previous`` (the last report) when it was measured
    on the same device and rows, and listed under ``from_previous_run``."""
    hw = detect_hardware()
    parts = tuple(parts or PARTS)
    unknown = set(parts) - set(PARTS)
    if unknown:
        raise ValueError(f"unknown features benchmark parts {sorted(unknown)}; choose from {PARTS}")
    rows = rows or (50_000_000 if hw.gpus else 2_000_000)
    work.mkdir(parents=True, exist_ok=True)
    lake_dir = Path(lake) if lake else work / f"lake-{rows}"
    t0 = time.perf_counter()
    facts = json.loads((lake_dir / "_lake.json").read_text()) if lake else synthetic_lake(lake_dir, topology, rows)
    gen_s = time.perf_counter() - t0
    device = hw.gpus[0].name if hw.gpus else f"{hw.cpu_count}-core CPU"
    result: dict[str, Any] = {
        "benchmark": "features",
        "hardware": hw.as_dict(),
        "device": device,
        "rows": facts["kpi_rows"],
        "lake": facts,
        "lake_seconds": round(gen_s, 1),
        "parts_run": list(parts),
    }
    cpus = os.cpu_count() or 1

    def run(name: str, key: str, fn) -> None:
        out = work / f"out-{name}"
        result[key] = fn(out)
        if not keep_outputs:  # ~0.7 KB a row: free the disk before the next part writes its own
            shutil.rmtree(out, ignore_errors=True)

    if "pandas" in parts:
        print(f"features bench: {facts['kpi_rows']:,} KPI rows; pandas in one process (budget {pandas_budget_s:.0f} s)")
        run("pandas", "pandas", lambda o: pandas_one_process(lake_dir, cfg, o, pandas_budget_s))
    if "dask" in parts:
        print(f"features bench: Dask on {cpus} CPU workers")
        run("dask", "dask_cpu", lambda o: dask_stage(lake_dir, cfg, "pandas", cpus, o))
    if hw.gpus and "gpu" in parts:
        print(f"features bench: dask-cuda + cuDF on {hw.gpu_count} GPU(s)")
        run("gpu", "gpu", lambda o: dask_stage(lake_dir, cfg, "cudf", hw.gpu_count, o, compute_only=True))
    if hw.gpus and "kernels" in parts:
        result["kernels"] = kernel_bandwidth(min(result["rows"], 20_000_000), cfg)
    same = previous and previous.get("device") == device and previous.get("rows") == result["rows"]
    for key in ("pandas", "dask_cpu", "gpu", "kernels"):
        if key not in result and same and previous.get(key):
            result[key] = previous[key]
            result.setdefault("from_previous_run", []).append(key)
    if result.get("gpu") and result.get("pandas"):
        result["gpu_vs_pandas"] = round(result["pandas"]["seconds_full"] / result["gpu"]["seconds"], 1)
    if result.get("gpu") and result.get("dask_cpu"):
        result["gpu_vs_dask_cpu"] = round(result["dask_cpu"]["seconds"] / result["gpu"]["seconds"], 1)
    if result.get("pandas") and result.get("dask_cpu"):
        result["dask_cpu_vs_pandas"] = round(result["pandas"]["seconds_full"] / result["dask_cpu"]["seconds"], 2)
    result.setdefault("gpu", None)
    return result
