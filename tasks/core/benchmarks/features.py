"""Features benchmark: the GPU stage (dask-cuda + cuDF + the CUDA kernels) beside pandas in one process and
Dask on every CPU core, on the same Parquet lake in one invocation, plus each kernel's bandwidth against a
device-to-device copy measured in the same run. Each way is timed as the median of up to three repeats
(min and max kept); a way whose first repeat takes over a minute runs once; pandas stops after its budget
and is extrapolated by rows, and the JSON says so.

The lake is synthetic (the ingest output's schema and layout over a real topology: random-walk KPIs,
precursor alarms and NODE_DOWN/NODE_UP pairs) so it can be made at 50 M+ rows quickly.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path
from typing import Any

import numpy as np

from tasks.core.benchmarks.lakes import synthetic_lake, time_features
from tasks.core.benchmarks.measure import ratio, repeated
from tasks.core.config import FeaturesConfig
from tasks.core.runtime import Hardware
from tasks.core.topology import Topology, load_topology

PARTS = ("pandas", "dask", "gpu", "kernels")


# ---------------------------------------------------------------- the three ways to run the stage
def pandas_one_process(lake: Path, cfg: FeaturesConfig, out: Path, budget_s: float) -> dict[str, Any]:
    """The stage's own day functions on pandas in this process, day after day (the history chained as in
    the Dask graph). Stops after ``budget_s`` and then extrapolates linearly by rows (the days are alike),
    saying so (``extrapolated``)."""
    import pyarrow.dataset as ds

    from tasks.core.stages import features as F

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


# ---------------------------------------------------------------- kernels
def kernel_bandwidth(rows: int, cfg: FeaturesConfig, repeat: int = 10) -> dict[str, Any]:
    """Each CUDA kernel's effective bandwidth (compulsory bytes / time) vs a device-to-device copy, timed with
    ``cupyx.profiler.benchmark`` (CUDA events, warm-up excluded; the median of ``repeat`` runs)."""
    import cupy as cp
    from cupyx.profiler import benchmark

    from gpu_kernels import neighbors, rolling

    def seconds(fn) -> float:
        return float(np.median(benchmark(fn, n_repeat=repeat, n_warmup=2).gpu_times))

    f, w = len(cfg.kpis), len(cfg.windows)
    topo = load_topology("backbone/world")
    values = cp.random.standard_normal((f, rows), dtype=cp.float64)
    seg = max(1, rows // topo.n)
    indptr = cp.asarray(np.r_[np.arange(0, rows, seg), rows].astype(np.int64))
    out_r = cp.empty((f, w, 4, rows), dtype=cp.float64)
    copy_src = cp.random.standard_normal(out_r.size, dtype=cp.float64)
    copy_dst = cp.empty_like(copy_src)
    copy_gb_s = 2 * copy_src.nbytes / seconds(lambda: copy_dst.__setitem__(slice(None), copy_src)) / 1e9
    r_s = seconds(lambda: rolling.rolling_stats_cuda(values, indptr, cfg.windows, out=out_r))
    r_bytes = values.nbytes + indptr.nbytes + out_r.nbytes  # values + segments (CSR) + outputs
    nb_ptr, nb_idx = (cp.asarray(a) for a in topo.csr())
    t = max(1, rows // topo.n)
    grid = cp.random.standard_normal((6, t, topo.n), dtype=cp.float64)
    out_n = cp.empty((6, 2, t, topo.n), dtype=cp.float64)
    n_s = seconds(lambda: neighbors.neighbor_agg_cuda(grid, nb_ptr, nb_idx, out=out_n))
    n_bytes = grid.nbytes + out_n.nbytes + nb_ptr.nbytes + nb_idx.nbytes
    res = {
        "copy_gb_s": round(copy_gb_s, 1),
        "timer": f"cupyx.profiler.benchmark, median of {repeat}",
        "rolling": {"rows": rows, "features": f, "windows": list(cfg.windows), "seconds": r_s, "bytes": int(r_bytes)},
        "neighbors": {"snapshots": t, "elements": topo.n, "features": 6, "seconds": n_s, "bytes": int(n_bytes)},
    }
    for k in ("rolling", "neighbors"):
        res[k]["gb_s"] = round(res[k]["bytes"] / res[k]["seconds"] / 1e9, 1)
        res[k]["bandwidth_fraction"] = round(res[k]["gb_s"] / copy_gb_s, 3)
    return res


# ---------------------------------------------------------------- the benchmark
def _ratios(result: dict[str, Any]) -> None:
    """Every ratio from parts measured in this invocation (medians), labelled where pandas is extrapolated."""
    pandas = (result.get("pandas") or {}).get("seconds_full")
    dask = (result.get("dask_cpu") or {}).get("median_s")
    gpu = (result.get("gpu") or {}).get("median_s")
    result["gpu_vs_pandas"] = ratio(pandas, gpu)
    result["gpu_vs_dask_cpu"] = ratio(dask, gpu)
    result["dask_cpu_vs_pandas"] = ratio(pandas, dask)
    if result.get("pandas", {}).get("extrapolated"):
        result["extrapolated"] = ["pandas.seconds_full (and every ratio against it)"]


def bench_features(
    work: Path,
    cfg: FeaturesConfig,
    hw: Hardware,
    rows: int,
    pandas_budget_s: float,
    topology: str = "backbone/world",
    parts: tuple[str, ...] | None = None,
    lake: str | None = None,
) -> dict[str, Any]:
    """``parts``: a subset of pandas, dask, gpu, kernels (all by default); ratios only between parts run here."""
    parts = tuple(parts or PARTS)
    unknown = set(parts) - set(PARTS)
    if unknown:
        raise ValueError(f"unknown features benchmark parts {sorted(unknown)}; choose from {PARTS}")
    work.mkdir(parents=True, exist_ok=True)
    lake_dir = Path(lake) if lake else work / f"lake-{rows}"
    t0 = time.perf_counter()
    facts = json.loads((lake_dir / "_lake.json").read_text()) if lake else synthetic_lake(lake_dir, topology, rows)
    cpus = os.cpu_count() or 1
    result: dict[str, Any] = {
        "benchmark": "features",
        "hardware": hw.as_dict(),
        "device": hw.gpus[0].name if hw.gpus else f"{hw.cpu_count}-core CPU",
        "rows": facts["kpi_rows"],
        "lake": facts,
        "lake_seconds": round(time.perf_counter() - t0, 1),
        "parts_run": list(parts),
        "storage_dtype": cfg.store_dtype,
    }
    out = work / "out"
    if "pandas" in parts:
        print(f"features bench: {facts['kpi_rows']:,} KPI rows; pandas in one process (budget {pandas_budget_s:.0f} s)")
        result["pandas"] = pandas_one_process(lake_dir, cfg, out, pandas_budget_s)
        shutil.rmtree(out, ignore_errors=True)
    if "dask" in parts:
        print(f"features bench: Dask on {cpus} CPU workers")
        result["dask_cpu"] = repeated(lambda: time_features(lake_dir, cfg, "pandas", cpus, out, hw))
    if hw.gpus and "gpu" in parts:
        print(f"features bench: dask-cuda + cuDF on {hw.gpu_count} GPU(s)")
        result["gpu"] = repeated(lambda: time_features(lake_dir, cfg, "cudf", hw.gpu_count, out, hw, True))
    if hw.gpus and "kernels" in parts:
        result["kernels"] = kernel_bandwidth(min(result["rows"], 20_000_000), cfg)
    _ratios(result)
    return result
