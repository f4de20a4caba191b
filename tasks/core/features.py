"""Feature engineering on a Dask DataFrame, written once for the pandas and cuDF backends.

Per element (partitions shuffled by element): rolling mean/std/max/slope over several spans (the
``gpu_kernels.rolling`` kernel on GPU, its NumPy reference on CPU), precursor-alarm counts and time
since the last alarm, and the label (a fault onset within the horizon). Per timestamp (shuffled by
time): neighbour mean/max over the topology (``gpu_kernels.neighbors``). Faults are read from the
alarm log (``NODE_DOWN`` onsets, ``NODE_UP`` recoveries), never from the simulator's ground truth.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from gpu_kernels import neighbors as nb_kernel
from gpu_kernels import rolling as roll_kernel

from .config import FeaturesConfig
from .schema import FAULT_ALARM, KPI_VALUES, STEP_MINUTES
from .topology import Topology

PRECURSOR_SEVERITIES = ("warning", "minor", "major")
ALARM_WINDOW = 12  # samples (one hour) for alarm counts
NEIGHBOUR_INPUTS = ("cpu_util", "temperature_c", "latency_ms", "packet_loss_pct", "if_errors", "alarms_1h")


def feature_names(cfg: FeaturesConfig) -> list[str]:
    names = list(KPI_VALUES)
    names += [f"{k}_{s}_{w}" for k in cfg.kpis for w in cfg.windows for s in roll_kernel.STATS]
    names += [f"alarms_{s}_1h" for s in PRECURSOR_SEVERITIES] + ["alarms_1h", "minutes_since_alarm"]
    names += [f"nbr_{k}_{s}" for k in NEIGHBOUR_INPUTS for s in nb_kernel.STATS]
    return names


def fault_table(alarms: pd.DataFrame) -> pd.DataFrame:
    """Fault onsets and recoveries per element from the alarm log."""
    a = alarms[alarms["alarm_type"].isin([FAULT_ALARM, "NODE_UP"])][["element_id", "timestamp", "alarm_type"]]
    return a.sort_values(["element_id", "timestamp"]).reset_index(drop=True)


def alarm_buckets(alarms: pd.DataFrame) -> pd.DataFrame:
    """Precursor alarms counted per element and 5-minute sample (an alarm counts toward the next sample)."""
    a = alarms[alarms["severity"].isin(PRECURSOR_SEVERITIES)].reset_index(drop=True)
    a["timestamp"] = a["timestamp"].dt.ceil(f"{STEP_MINUTES}min")
    counts = pd.crosstab([a["element_id"], a["timestamp"]], a["severity"])
    counts = counts.reindex(columns=list(PRECURSOR_SEVERITIES), fill_value=0)
    counts.columns = [f"n_{c}" for c in counts.columns]
    return counts.reset_index()


def _on_gpu(df) -> bool:
    return type(df).__module__.split(".")[0] in ("cudf", "dask_cudf")


def _xp(df):
    """The array module of a partition: CuPy for cuDF, NumPy for pandas."""
    if _on_gpu(df):
        import cupy

        return cupy
    return np


def _arr(obj, dtype):
    """A Series/DataFrame as a (device or host) array, without leaving the device."""
    if _on_gpu(obj):
        return obj.astype(dtype).to_cupy()
    return obj.to_numpy(dtype)


def _micros(ts) -> Any:
    """Timestamps -> integer microseconds since the epoch, on the partition's device."""
    if getattr(ts.dtype, "tz", None) is not None:
        ts = ts.dt.tz_convert(None)
    return _arr(ts.astype("datetime64[us]").astype("int64"), "int64")


def _minutes(ts) -> Any:
    return _micros(ts) // 60_000_000


def _rolling(values, indptr, windows: tuple[int, ...], xp):
    if xp is np:
        return roll_kernel.rolling_stats_reference(values, indptr, windows)
    return roll_kernel.rolling_stats_cuda(values, indptr, windows)


def _segments(code, xp):
    """Row ranges of each element in rows sorted by (code, time): indptr, segment start of every row."""
    n = len(code)
    change = xp.ones(n, dtype=bool)
    change[1:] = code[1:] != code[:-1]
    starts = xp.flatnonzero(change)
    indptr = xp.concatenate([starts, xp.asarray([n], dtype=starts.dtype)])
    seg_start = starts[xp.cumsum(change) - 1]
    return indptr, seg_start


def fault_arrays(faults: pd.DataFrame, index: dict[str, int]) -> dict[str, np.ndarray]:
    """Onsets sorted by (element code, time) with the recovery that ends each (host arrays, small)."""
    never = np.iinfo(np.int64).max // 2
    codes, times, ends = [], [], []
    mins = _minutes(faults["timestamp"]) if len(faults) else np.zeros(0, dtype=np.int64)
    kinds = faults["alarm_type"].to_numpy()
    for el, idx in faults.groupby("element_id", sort=False).indices.items():
        onsets = np.sort(mins[idx][kinds[idx] == FAULT_ALARM])
        ups = np.sort(mins[idx][kinds[idx] == "NODE_UP"])
        u = np.searchsorted(ups, onsets, side="left")  # first recovery at or after each onset
        ends.append(np.where(u < len(ups), ups[np.minimum(u, max(len(ups) - 1, 0))] if len(ups) else never, never))
        codes.append(np.full(len(onsets), index[el], dtype=np.int64))
        times.append(onsets)
    cat = lambda xs, dt: np.concatenate(xs).astype(dt) if xs else np.zeros(0, dtype=dt)
    code, t, end = cat(codes, np.int64), cat(times, np.int64), cat(ends, np.int64)
    order = np.lexsort((t, code))
    return {"code": code[order], "t": t[order], "end": end[order]}


KEY = np.int64(1) << 34  # minutes since 1970 stay below 2**34 until the year 34,000


def _labels(code, t, fa: dict[str, np.ndarray], horizon: int, xp):
    """label: a NODE_DOWN onset in (t, t + horizon]; in_fault: from an onset until its recovery."""
    n = len(t)
    if len(fa["t"]) == 0:
        return xp.zeros(n, dtype=xp.int8), xp.zeros(n, dtype=xp.int8), xp.full(n, xp.nan)
    o_code, o_t, o_end = (xp.asarray(fa[k]) for k in ("code", "t", "end"))
    o_key = o_code * KEY + o_t
    key = code * KEY + t
    k = xp.searchsorted(o_key, key, side="right")  # the next onset strictly after t
    kk = xp.minimum(k, len(o_t) - 1)
    has = (k < len(o_t)) & (o_code[kk] == code)
    gap = o_t[kk] - t
    within = has & (gap <= horizon)
    prev = xp.maximum(k - 1, 0)  # the latest onset at or before t, if it is this element's
    started = (k > 0) & (o_code[prev] == code)
    in_fault = started & (t <= o_end[prev])
    return within.astype(xp.int8), in_fault.astype(xp.int8), xp.where(within, gap.astype(xp.float64), xp.nan)


def _minutes_since_alarm(t, count, seg_start, xp, cap: float = 1440.0):
    """Minutes since the element's latest precursor alarm at or before each row (capped)."""
    n = len(t)
    rows = xp.flatnonzero(count > 0)
    if len(rows) == 0:
        return xp.full(n, cap)
    k = xp.searchsorted(rows, xp.arange(n), side="right") - 1
    j = rows[xp.maximum(k, 0)]
    valid = (k >= 0) & (j >= seg_start)
    return xp.where(valid, xp.minimum((t - t[j]).astype(xp.float64), cap), cap)


def element_features(part, faults: dict[str, np.ndarray], cfg: FeaturesConfig):
    """All per-element features for the elements in one partition (each element wholly inside it).

    Written once for pandas and cuDF partitions: the arrays are NumPy or CuPy to match.
    """
    if len(part) == 0:
        return _like(part, _empty_element_frame(cfg))
    xp = _xp(part)
    part = part.sort_values(["code", "timestamp"]).reset_index(drop=True)
    code = _arr(part["code"], "int64")
    indptr, seg_start = _segments(code, xp)
    stats = _rolling(_arr(part[list(cfg.kpis)], "float64"), indptr, cfg.windows, xp)
    cols: dict[str, Any] = {}
    for ki, k in enumerate(cfg.kpis):
        for wi, w in enumerate(cfg.windows):
            for si, s in enumerate(roll_kernel.STATS):
                cols[f"{k}_{s}_{w}"] = xp.ascontiguousarray(stats[:, ki, wi, si])
    counts = _arr(part[[f"n_{s}" for s in PRECURSOR_SEVERITIES]], "float64")
    alarm_mean = _rolling(counts, indptr, (ALARM_WINDOW,), xp)
    in_window = xp.minimum(ALARM_WINDOW, xp.arange(len(code)) - seg_start + 1)
    for si, s in enumerate(PRECURSOR_SEVERITIES):
        cols[f"alarms_{s}_1h"] = alarm_mean[:, si, 0, 0] * in_window
    cols["alarms_1h"] = sum(cols[f"alarms_{s}_1h"] for s in PRECURSOR_SEVERITIES)
    t = _minutes(part["timestamp"])
    cols["minutes_since_alarm"] = _minutes_since_alarm(t, counts.sum(axis=1), seg_start, xp)
    label, in_fault, lead = _labels(code, t, faults, cfg.horizon_minutes, xp)
    cols["in_fault"], cols["minutes_to_fault"], cols["label"] = in_fault, lead, label
    return part[["element_id", "timestamp", "code", *KPI_VALUES]].assign(**cols)


def neighbour_features(part, indptr: np.ndarray, indices: np.ndarray, n_elements: int):
    """Neighbour mean/max per timestamp (each timestamp wholly inside this partition)."""
    names = [f"nbr_{k}_{s}" for k in NEIGHBOUR_INPUTS for s in nb_kernel.STATS]
    if len(part) == 0:
        return part.assign(**{n: np.float64(0) for n in names})
    xp = _xp(part)
    times, t_idx = xp.unique(_micros(part["timestamp"]), return_inverse=True)
    e_idx = _arr(part["code"], "int64")
    grid = xp.full((len(times), n_elements, len(NEIGHBOUR_INPUTS)), xp.nan)
    grid[t_idx.ravel(), e_idx, :] = _arr(part[list(NEIGHBOUR_INPUTS)], "float64")
    if xp is np:
        agg = nb_kernel.neighbor_agg_reference(grid, indptr, indices)
    else:
        agg = nb_kernel.neighbor_agg_cuda(grid, indptr, indices)
    picked = agg[t_idx.ravel(), e_idx]  # [rows, F, 2]
    cols = {}
    for fi, k in enumerate(NEIGHBOUR_INPUTS):
        for si, s in enumerate(nb_kernel.STATS):
            cols[f"nbr_{k}_{s}"] = xp.ascontiguousarray(picked[:, fi, si])
    return part.assign(**cols)


def _like(part, frame: pd.DataFrame):
    """``frame`` (pandas) as the partition's backend."""
    if _on_gpu(part):
        import cudf

        return cudf.from_pandas(frame)
    return frame


def _empty_element_frame(cfg: FeaturesConfig, base: pd.DataFrame | None = None) -> pd.DataFrame:
    """The per-element output's empty frame; carried columns take their dtypes from ``base`` (the input's meta)."""
    cols = [
        "element_id",
        "timestamp",
        "code",
        *feature_names(cfg)[: -2 * len(NEIGHBOUR_INPUTS)],
        "in_fault",
        "minutes_to_fault",
        "label",
    ]
    frame = pd.DataFrame({c: pd.Series(dtype="float64") for c in cols})
    types = {"element_id": "string", "timestamp": "datetime64[us, UTC]", "code": "int32"}
    if base is not None:
        types.update({c: base[c].dtype for c in ("element_id", "timestamp", "code", *KPI_VALUES) if c in base})
    return frame.astype({**types, "in_fault": "int8", "label": "int8"})


def _same_time_type(ts: pd.Series, like) -> pd.Series:
    """Host timestamps in the partitions' convention (cuDF may read Parquet UTC timestamps as tz-naive)."""
    want_tz = getattr(like, "tz", None)
    has_tz = getattr(ts.dtype, "tz", None)
    if has_tz is not None and want_tz is None:
        return ts.dt.tz_convert(None)
    if has_tz is None and want_tz is not None:
        return ts.dt.tz_localize("UTC")
    return ts


def build_features(client, lake: Path, topo: Topology, cfg: FeaturesConfig, backend: str, out: Path) -> dict:
    """Read the ingest output, compute features with Dask, write Parquet to ``out/features``."""
    import dask
    import dask.dataframe as dd

    to_backend = (lambda d: d.to_backend("cudf")) if backend == "cudf" else (lambda d: d)
    index = {e: i for i, e in enumerate(topo.element_ids)}
    indptr, indices = topo.csr()
    with dask.config.set({"dataframe.backend": backend}):
        kpi = dd.read_parquet(str(lake / "kpi"), columns=["element_id", "timestamp", *KPI_VALUES])
        alarms = dd.read_parquet(
            str(lake / "alarms"), columns=["element_id", "timestamp", "severity", "alarm_type"]
        ).compute()
        alarms = (alarms.to_pandas() if hasattr(alarms, "to_pandas") else alarms).reset_index(drop=True)
        faults = fault_arrays(fault_table(alarms), index)
        buckets = alarm_buckets(alarms)
        codes = pd.DataFrame({"element_id": topo.element_ids, "code": np.arange(topo.n, dtype=np.int32)})
        if backend == "pandas":
            kpi = kpi.astype({"element_id": "string"})
            buckets["element_id"] = buckets["element_id"].astype("string")
            codes["element_id"] = codes["element_id"].astype("string")
        buckets["timestamp"] = _same_time_type(buckets["timestamp"], kpi._meta["timestamp"].dtype)
        joined = kpi.merge(to_backend(dd.from_pandas(codes, npartitions=1)), on="element_id", how="left")
        joined = joined.merge(
            to_backend(dd.from_pandas(buckets, npartitions=1)), on=["element_id", "timestamp"], how="left"
        )
        joined = joined.fillna({f"n_{s}": 0 for s in PRECURSOR_SEVERITIES})
        nparts = max(1, min(kpi.npartitions, 8 * max(1, len(client.scheduler_info()["workers"]))))
        by_element = joined.shuffle("code", npartitions=nparts)
        base = joined._meta.to_pandas() if hasattr(joined._meta, "to_pandas") else joined._meta
        empty = _empty_element_frame(cfg, base)
        meta = _like(joined._meta, empty)
        per_element = by_element.map_partitions(element_features, faults, cfg, meta=meta)
        by_time = per_element.shuffle("timestamp", npartitions=nparts)
        meta2 = _like(joined._meta, neighbour_features(empty, indptr, indices, topo.n))
        final = by_time.map_partitions(neighbour_features, indptr, indices, topo.n, meta=meta2)
        (out / "features").mkdir(parents=True, exist_ok=True)
        final.drop(columns=["code"]).to_parquet(str(out / "features"), write_index=False)
    feats = dd.read_parquet(str(out / "features"))
    rows_out = int(feats.shape[0].compute())
    labels = feats["label"].sum().compute()
    rows_in = int(dd.read_parquet(str(lake / "kpi"), columns=["element_id"]).shape[0].compute())
    if rows_in != rows_out:
        raise RuntimeError(f"features changed the row count: {rows_in} KPI rows in, {rows_out} feature rows out")
    return {
        "rows_in": rows_in,
        "rows_out": rows_out,
        "rows_quarantined": 0,
        "positives": int(labels),
        "faults_in_alarm_log": int(len(faults["t"])),
    }
