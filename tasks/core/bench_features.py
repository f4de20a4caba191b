"""Features benchmark: the GPU stage (dask-cuda + cuDF + the CUDA kernels) beside pandas in one process
and Dask on every CPU core, on the same Parquet lake, plus each kernel's bandwidth against a
device-to-device copy measured in the same run.

The lake is synthetic (the ingest output's schema and layout over a real topology: random-walk KPIs,
precursor alarms and NODE_DOWN/NODE_UP pairs) so it can be made at 50 M+ rows on a host without Java.
"""

from __future__ import annotations

import json
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
    """A lake of at least ``rows`` KPI rows (whole days), one Parquet file per day like Spark's."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    topo = load_topology(topology)
    days = max(1, -(-rows // (topo.n * STEPS_PER_DAY)))
    if (out / "topology.json").is_file() and json.loads((out / "_lake.json").read_text())["days"] == days:
        return json.loads((out / "_lake.json").read_text())
    shutil.rmtree(out, ignore_errors=True)
    tmp = out.with_name(out.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    rng = np.random.default_rng(seed)
    ids = np.array(topo.element_ids, dtype=object)
    t0 = pd.Timestamp(start, tz="UTC")
    level = rng.normal(50, 5, size=(topo.n, len(KPI_VALUES)))
    n_alarms = 0
    for d in range(days):
        day = (t0 + pd.Timedelta(days=d)).strftime("%Y-%m-%d")
        ts = t0 + pd.Timedelta(days=d) + pd.to_timedelta(np.arange(STEPS_PER_DAY) * STEP_MINUTES, unit="min")
        ts = ts.tz_convert(None).as_unit("us").to_numpy()  # naive UTC datetime64[us]; arrow tags it UTC
        steps = rng.normal(0, 0.5, size=(STEPS_PER_DAY, topo.n, len(KPI_VALUES)))
        walk = level[None] + np.cumsum(steps, axis=0)
        level = walk[-1]
        cols = {
            "timestamp": pa.array(np.repeat(ts, topo.n), pa.timestamp("us", tz="UTC")),
            "element_id": pa.array(np.tile(ids, STEPS_PER_DAY), pa.string()),
        }
        flat = walk.reshape(-1, len(KPI_VALUES))
        for i, k in enumerate(KPI_VALUES):
            cols[k] = (
                pa.array(np.abs(flat[:, i]).round().astype(np.int64)) if k == "if_errors" else pa.array(flat[:, i])
            )
        (tmp / "kpi" / f"date={day}").mkdir(parents=True, exist_ok=True)
        pq.write_table(pa.table(cols), tmp / "kpi" / f"date={day}" / "part-00000.parquet", compression="zstd")
        # alarms: ~2 precursors per element-day, and a NODE_DOWN + NODE_UP for 1 % of elements
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
        n_alarms += alarms.num_rows
        (tmp / "alarms" / f"date={day}").mkdir(parents=True, exist_ok=True)
        pq.write_table(alarms, tmp / "alarms" / f"date={day}" / "part-00000.parquet", compression="zstd")
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


# ---------------------------------------------------------------- the three ways to run the stage
def pandas_one_process(
    lake: Path, cfg: FeaturesConfig, out: Path, budget_s: float, max_rows: int = 5_000_000
) -> dict[str, Any]:
    """The same feature functions on pandas, in this process, element chunk by element chunk. Stops after
    ``budget_s`` or ``max_rows`` (one process holding 50 M rows x 90 features would need ~100 GB) and then
    extrapolates linearly by rows, saying so (``extrapolated``)."""
    import pyarrow.dataset as ds

    from . import features as F

    topo = Topology.read(lake / "topology.json")
    index = {e: i for i, e in enumerate(topo.element_ids)}
    indptr, indices = topo.csr()
    t0 = time.perf_counter()
    alarms = (
        ds.dataset(lake / "alarms", format="parquet", partitioning="hive")
        .to_table(columns=["element_id", "timestamp", "severity", "alarm_type"])
        .to_pandas()
    )
    faults = F.fault_arrays(F.fault_table(alarms), index)
    buckets = F.alarm_buckets(alarms)
    kpi = ds.dataset(lake / "kpi", format="parquet", partitioning="hive")
    frame = kpi.to_table(columns=["element_id", "timestamp", *KPI_VALUES]).to_pandas()
    total = len(frame)
    codes = pd.DataFrame({"element_id": topo.element_ids, "code": np.arange(topo.n, dtype=np.int32)})
    frame = frame.merge(codes, on="element_id", how="left").merge(buckets, on=["element_id", "timestamp"], how="left")
    frame = frame.fillna({f"n_{s}": 0 for s in F.PRECURSOR_SEVERITIES}).sort_values("code", kind="stable")
    chunk = max(1, topo.n // 64)
    bounds = np.searchsorted(frame["code"].to_numpy(), np.arange(0, topo.n + chunk, chunk))
    done, per_element = 0, []
    for a, b in zip(bounds[:-1], bounds[1:]):  # element chunks, one after another
        per_element.append(F.element_features(frame.iloc[a:b], faults, cfg))
        done += int(b - a)
        if time.perf_counter() - t0 > budget_s or done >= max_rows:
            break
    del frame
    frame = pd.concat(per_element, ignore_index=True)
    frame = frame.sort_values("timestamp", kind="stable")
    final = F.neighbour_features(frame, indptr, indices, topo.n)
    out.mkdir(parents=True, exist_ok=True)
    final.drop(columns=["code"]).to_parquet(out / "part.parquet", index=False)
    seconds = time.perf_counter() - t0
    return {
        "rows": done,
        "seconds": round(seconds, 2),
        "rows_total": total,
        "seconds_full": round(seconds * total / done, 2),
        "extrapolated": done < total,
    }


def dask_stage(lake: Path, cfg: FeaturesConfig, backend: str, workers: int, out: Path) -> dict[str, Any]:
    """The features stage as the pipeline runs it, timed on a running cluster (start-up excluded)."""
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
        "dashboard": dashboard,
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
    values = cp.random.standard_normal((rows, f), dtype=cp.float64)
    seg = max(1, rows // elements)
    indptr = cp.asarray(np.r_[np.arange(0, rows, seg), rows].astype(np.int64))
    out_r = cp.empty((rows, f, w, 4), dtype=cp.float64)
    copy_src = cp.empty(out_r.nbytes // 8, dtype=cp.float64)
    copy_dst = cp.empty_like(copy_src)
    copy_s = timed(lambda: copy_dst.__setitem__(slice(None), copy_src))
    copy_gb_s = 2 * copy_src.nbytes / copy_s / 1e9
    r_s = timed(lambda: rolling.rolling_stats_cuda(values, indptr, cfg.windows, out=out_r))
    r_bytes = values.nbytes + rows * 8 + out_r.nbytes  # values + per-row segment start + outputs
    topo = load_topology("backbone/world")
    nb_ptr, nb_idx = (cp.asarray(a) for a in topo.csr())
    t = max(1, rows // topo.n)
    grid = cp.random.standard_normal((t, topo.n, 6), dtype=cp.float64)
    out_n = cp.empty((t, topo.n, 6, 2), dtype=cp.float64)
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


def bench_features(
    work: Path,
    cfg: FeaturesConfig,
    rows: int | None,
    lake: str | None,
    pandas_budget_s: float = 150.0,
    topology: str = "backbone/world",
    keep_outputs: bool = False,
) -> dict[str, Any]:
    hw = detect_hardware()
    rows = rows or (50_000_000 if hw.gpus else 2_000_000)
    work.mkdir(parents=True, exist_ok=True)
    lake_dir = Path(lake) if lake else work / f"lake-{rows}"
    t0 = time.perf_counter()
    facts = json.loads((lake_dir / "_lake.json").read_text()) if lake else synthetic_lake(lake_dir, topology, rows)
    gen_s = time.perf_counter() - t0
    result: dict[str, Any] = {
        "benchmark": "features",
        "hardware": hw.as_dict(),
        "device": hw.gpus[0].name if hw.gpus else f"{hw.cpu_count}-core CPU",
        "rows": facts["kpi_rows"],
        "lake": facts,
        "lake_seconds": round(gen_s, 1),
    }
    cpus = os.cpu_count() or 1
    print(f"features bench: {facts['kpi_rows']:,} KPI rows; pandas in one process (budget {pandas_budget_s:.0f} s)")
    result["pandas"] = pandas_one_process(lake_dir, cfg, work / "out-pandas", pandas_budget_s)
    print(f"features bench: Dask on {cpus} CPU workers")
    result["dask_cpu"] = dask_stage(lake_dir, cfg, "pandas", cpus, work / "out-dask")
    if hw.gpus:
        print("features bench: dask-cuda + cuDF")
        result["gpu"] = dask_stage(lake_dir, cfg, "cudf", hw.gpu_count, work / "out-gpu")
        result["gpu_vs_pandas"] = round(result["pandas"]["seconds_full"] / result["gpu"]["seconds"], 1)
        result["gpu_vs_dask_cpu"] = round(result["dask_cpu"]["seconds"] / result["gpu"]["seconds"], 1)
        result["kernels"] = kernel_bandwidth(min(result["rows"], 20_000_000), cfg)
    else:
        result["dask_cpu_vs_pandas"] = round(result["pandas"]["seconds_full"] / result["dask_cpu"]["seconds"], 2)
        result["gpu"] = None
    for d in ("out-pandas", "out-dask", "out-gpu"):
        if not keep_outputs:
            shutil.rmtree(work / d, ignore_errors=True)
    return result
