"""Feature engineering, written once for pandas and cuDF partitions and scheduled by Dask day by day.

One task per day of the lake, with no shuffle: a day holds every timestamp's rows, so the neighbour mean/max
over the topology (``gpu_kernels.neighbors``) is computed inside it, and the rolling mean/std/max/slope over
several spans (``gpu_kernels.rolling`` on GPU, its NumPy reference on CPU) reach into earlier days through a
small chain of per-element histories (the last ``max(windows) - 1`` rows of each element). Precursor-alarm
counts over the last hour, the time since the last alarm and the labels (a fault onset within the horizon)
are looked up per row in small sorted key arrays. Faults are read from the alarm log (``NODE_DOWN`` onsets,
``NODE_UP`` recoveries), never from the simulator's ground truth.
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
KEY = np.int64(1) << 34  # (code, minute) keys: minutes since 1970 stay below 2**34 until the year 34,000
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


def alarm_arrays(alarms: pd.DataFrame, index: dict[str, int]) -> dict[str, np.ndarray]:
    """Precursor alarms as sorted keys (element code * KEY + minute of the 5-minute sample they count toward,
    i.e. the alarm time rounded up), one array per severity and one for all of them (host arrays, small)."""
    a = alarms[alarms["severity"].isin(PRECURSOR_SEVERITIES)]
    step = STEP_MINUTES * 60_000_000
    minute = (-(-_micros(a["timestamp"]) // step)) * STEP_MINUTES if len(a) else np.zeros(0, dtype=np.int64)
    code = a["element_id"].map(index).to_numpy(dtype=np.float64)
    if np.isnan(code).any():
        unknown = sorted(set(a["element_id"][np.isnan(code)]))[:5]
        raise ValueError(f"alarms name elements that are not in the topology: {unknown}")
    key = code.astype(np.int64) * KEY + minute
    sev = a["severity"].to_numpy()
    out = {s: np.sort(key[sev == s]) for s in PRECURSOR_SEVERITIES}
    out["all"] = np.sort(key)
    return out


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


def _rolling(values, indptr, windows: tuple[int, ...], xp, keep):
    """values [F, N] in (code, time) order -> stats [F, W, 4, rows where ``keep``] (the others are history)."""
    if xp is np:
        return roll_kernel.rolling_stats_reference(values, indptr, windows)[..., keep]
    dest = xp.where(keep, xp.cumsum(keep) - 1, -1)
    return roll_kernel.rolling_stats_cuda(values, indptr, windows, dest=dest, m=int(keep.sum()))


def _segments(code, xp):
    """Row ranges of each element in rows sorted by (code, time): indptr, and each row's segment number."""
    n = len(code)
    change = xp.ones(n, dtype=bool)
    change[1:] = code[1:] != code[:-1]
    starts = xp.flatnonzero(change)
    indptr = xp.concatenate([starts, xp.asarray([n], dtype=starts.dtype)])
    return indptr, xp.cumsum(change) - 1


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


def _alarm_count(key, alarm_keys: np.ndarray, xp):
    """Alarms of the row's element whose sample lies in the hour (t - 60 min, t]."""
    a = xp.asarray(alarm_keys)
    hi = xp.searchsorted(a, key, side="right")
    lo = xp.searchsorted(a, key - ALARM_WINDOW * STEP_MINUTES, side="right")
    return (hi - lo).astype(xp.float64)


def _minutes_since_alarm(key, alarm_keys: np.ndarray, xp, cap: float = 1440.0):
    """Minutes since the element's latest precursor alarm at or before each row (capped at a day)."""
    a = xp.asarray(alarm_keys)
    if len(a) == 0:
        return xp.full(len(key), cap)
    k = xp.searchsorted(a, key, side="right") - 1
    j = a[xp.maximum(k, 0)]
    valid = (k >= 0) & (j // KEY == key // KEY)
    return xp.where(valid, xp.minimum((key - j).astype(xp.float64), cap), cap)


def _keyed(day, shared: dict[str, Any]):
    """The day's rows with their element code, sorted by (code, time)."""
    codes = shared["codes"]
    part = day.merge(_like(day, codes.astype({"element_id": day["element_id"].dtype})), on="element_id", how="left")
    missing = part["code"].isna()
    if bool(missing.any()):
        ids = part.loc[missing, "element_id"]
        unknown = sorted(set(ids.to_pandas() if _on_gpu(ids) else ids))
        raise ValueError(f"KPI rows name elements that are not in the topology: {unknown[:5]}")
    part["code"] = part["code"].astype("int64")
    return part.sort_values(["code", "timestamp"]).reset_index(drop=True)


def _kpi_matrix(part, kpis: tuple[str, ...], xp):
    return xp.stack([_arr(part[k], "float64") for k in kpis]) if len(part) else xp.zeros((len(kpis), 0))


def window_history(prev: dict | None, day, shared: dict[str, Any], kpis: tuple[str, ...], context: int) -> dict:
    """The last ``context`` rows of every element up to the end of ``day`` (code, minute, KPI values [F, n]):
    what the rolling windows of the next day's first rows reach back into. Chained day after day, so an
    element with few rows in a day still carries its older rows along."""
    part = _keyed(day, shared)
    xp = _xp(part)
    code, t, vals = _arr(part["code"], "int64"), _minutes(part["timestamp"]), _kpi_matrix(part, kpis, xp)
    if prev is not None and len(prev["code"]):
        code = xp.concatenate([xp.asarray(prev["code"]), code])
        t = xp.concatenate([xp.asarray(prev["t"]), t])
        vals = xp.concatenate([xp.asarray(prev["values"]), vals], axis=1)
        order = xp.argsort(code * KEY + t)
        code, t, vals = code[order], t[order], vals[:, order]
    indptr, seg = _segments(code, xp)
    keep = (indptr[seg + 1] - 1 - xp.arange(len(code))) < context  # within the last `context` rows of its element
    return {"code": code[keep], "t": t[keep], "values": vals[:, keep]}


def day_features(day, history: dict | None, shared: dict[str, Any], cfg: FeaturesConfig):
    """All features for one day's rows (every element's rows of that day; ``history`` holds the rows before).

    Written once for pandas and cuDF partitions: the arrays are NumPy or CuPy to match, and on the GPU the
    CUDA kernels run on device arrays with no host round trip.
    """
    part = _keyed(day, shared)
    xp = _xp(part)
    n = len(part)
    code, t = _arr(part["code"], "int64"), _minutes(part["timestamp"])
    vals = _kpi_matrix(part, cfg.kpis, xp)
    keep = xp.ones(n, dtype=bool)
    all_code, all_vals = code, vals
    if history is not None and len(history["code"]):
        h_code, h_t = xp.asarray(history["code"]), xp.asarray(history["t"])
        all_code = xp.concatenate([h_code, code])
        all_vals = xp.concatenate([xp.asarray(history["values"]), vals], axis=1)
        keep = xp.concatenate([xp.zeros(len(h_code), dtype=bool), keep])
        order = xp.argsort(all_code * KEY + xp.concatenate([h_t, t]))
        all_code, all_vals, keep = all_code[order], all_vals[:, order], keep[order]
    indptr, _ = _segments(all_code, xp)
    stats = _rolling(all_vals, indptr, cfg.windows, xp, keep)  # [F, W, 4, n], rows in the day's (code, t) order
    cols: dict[str, Any] = {}
    for ki, k in enumerate(cfg.kpis):
        for wi, w in enumerate(cfg.windows):
            for si, s in enumerate(roll_kernel.STATS):
                cols[f"{k}_{s}_{w}"] = stats[ki, wi, si]
    key = code * KEY + t
    for s in PRECURSOR_SEVERITIES:
        cols[f"alarms_{s}_1h"] = _alarm_count(key, shared["alarms"][s], xp)
    cols["alarms_1h"] = sum(cols[f"alarms_{s}_1h"] for s in PRECURSOR_SEVERITIES)
    cols["minutes_since_alarm"] = _minutes_since_alarm(key, shared["alarms"]["all"], xp)
    label, in_fault, lead = _labels(code, t, shared["faults"], cfg.horizon_minutes, xp)
    cols["in_fault"], cols["minutes_to_fault"], cols["label"] = in_fault, lead, label
    inputs = {k: cols["alarms_1h"] if k == "alarms_1h" else _arr(part[k], "float64") for k in NEIGHBOUR_INPUTS}
    cols.update(_neighbours(code, t, inputs, shared, xp))
    return part[["element_id", "timestamp", *KPI_VALUES]].assign(**cols)


def _neighbours(code, t, inputs: dict[str, Any], shared: dict[str, Any], xp) -> dict[str, Any]:
    """Neighbour mean/max per timestamp over the topology (every timestamp's rows are in this day)."""
    times, t_idx = xp.unique(t, return_inverse=True)
    t_idx = t_idx.ravel()
    grid = xp.full((len(NEIGHBOUR_INPUTS), len(times), shared["n_elements"]), xp.nan)
    grid[:, t_idx, code] = xp.stack([inputs[k] for k in NEIGHBOUR_INPUTS])
    if xp is np:
        agg = nb_kernel.neighbor_agg_reference(grid, shared["indptr"], shared["indices"])
    else:
        agg = nb_kernel.neighbor_agg_cuda(grid, shared["indptr"], shared["indices"])
    return {
        f"nbr_{k}_{s}": agg[fi, si][t_idx, code]
        for fi, k in enumerate(NEIGHBOUR_INPUTS)
        for si, s in enumerate(nb_kernel.STATS)
    }


def _like(part, frame: pd.DataFrame):
    """``frame`` (pandas) as the partition's backend."""
    if _on_gpu(part):
        import cudf

        return cudf.from_pandas(frame)
    return frame


# ---------------------------------------------------------------- the stage
def day_groups(kpi_dir: Path) -> list[tuple[str, list[str]]]:
    """The lake's KPI files grouped by day (Spark's ``date=YYYY-MM-DD`` directories), in time order."""
    groups: dict[str, list[str]] = {}
    for f in sorted(kpi_dir.rglob("*.parquet")):
        groups.setdefault(f.parent.name if f.parent != kpi_dir else "all", []).append(str(f))
    return sorted(groups.items())


def read_kpi(files: list[str], backend: str):
    """One day's KPI rows as a pandas or cuDF frame (the backend chosen in ``runtime.dataframe_backend``)."""
    cols = ["element_id", "timestamp", *KPI_VALUES]
    if backend == "cudf":
        import cudf

        return cudf.read_parquet(files, columns=cols)
    import pyarrow.parquet as pq

    return pq.read_table(files, columns=cols, partitioning=None).to_pandas()


def write_day(
    name: str, day, history, shared: dict[str, Any], cfg: FeaturesConfig, out: Path, write: bool = True
) -> dict[str, Any]:
    """Compute one day's features and write them as ``out/<day>.parquet`` (``write=False``: compute only, for
    the benchmark's breakdown); returns its row counts."""
    rows_in = len(day)
    if rows_in == 0:
        return {"day": name, "rows_in": 0, "rows_out": 0, "positives": 0}
    frame = day_features(day, history, shared, cfg)
    if len(frame) != rows_in:
        raise RuntimeError(f"features for {name} changed the row count: {rows_in} KPI rows in, {len(frame)} out")
    if write:
        frame.to_parquet(out / f"{name}.parquet", index=False)
    return {"day": name, "rows_in": rows_in, "rows_out": len(frame), "positives": int(frame["label"].sum())}


def shared_tables(lake: Path, topo: Topology) -> dict[str, Any]:
    """What every day's task reads besides its own rows: element codes, faults and precursor alarms from the
    alarm log, and the topology's CSR (host arrays; small next to the KPI rows)."""
    import pyarrow.dataset as ds

    alarms = (
        ds.dataset(lake / "alarms", format="parquet", partitioning="hive")
        .to_table(columns=["element_id", "timestamp", "severity", "alarm_type"])
        .to_pandas()
    )
    index = {e: i for i, e in enumerate(topo.element_ids)}
    indptr, indices = topo.csr()
    return {
        "codes": pd.DataFrame({"element_id": topo.element_ids, "code": np.arange(topo.n, dtype=np.int64)}),
        "faults": fault_arrays(fault_table(alarms), index),
        "alarms": alarm_arrays(alarms, index),
        "indptr": np.asarray(indptr),
        "indices": np.asarray(indices),
        "n_elements": topo.n,
    }


def build_features(
    client, lake: Path, topo: Topology, cfg: FeaturesConfig, backend: str, out: Path, progress=None, write=True
) -> dict:
    """Read the ingest output day by day, compute features with Dask, write Parquet to ``out/features``.

    One task per day, with no shuffle: a day holds every timestamp's rows (neighbour features), and the
    rolling windows reach into the previous days through a small chain of per-element histories.
    ``progress(done, total)`` is called as days finish."""
    import dask
    from distributed import as_completed

    groups = day_groups(lake / "kpi")
    if not groups:
        raise ValueError(f"{lake / 'kpi'} holds no Parquet files: nothing to compute features from")
    shared = shared_tables(lake, topo)
    [tables] = client.scatter([shared], broadcast=True)
    dest = out / "features"
    dest.mkdir(parents=True, exist_ok=True)
    context = max(cfg.windows) - 1
    reads = [dask.delayed(read_kpi, pure=True)(files, backend) for _, files in groups]
    history = [None]
    for i in range(1, len(groups)):
        history.append(dask.delayed(window_history)(history[-1], reads[i - 1], tables, cfg.kpis, context))
    days = [
        dask.delayed(write_day)(name, reads[i], history[i], tables, cfg, dest, write)
        for i, (name, _) in enumerate(groups)
    ]
    futures = client.compute(days)
    for done, _ in enumerate(as_completed(futures), 1):
        if progress is not None:
            progress(done, len(futures))
    stats = client.gather(futures)
    rows_in, rows_out = sum(s["rows_in"] for s in stats), sum(s["rows_out"] for s in stats)
    if rows_in == 0:
        raise ValueError(f"{lake / 'kpi'} holds no KPI rows: nothing to compute features from")
    if rows_in != rows_out:
        raise RuntimeError(f"features changed the row count: {rows_in} KPI rows in, {rows_out} feature rows out")
    return {
        "rows_in": rows_in,
        "rows_out": rows_out,
        "rows_quarantined": 0,
        "days": len(groups),
        "positives": sum(s["positives"] for s in stats),
        "faults_in_alarm_log": int(len(shared["faults"]["t"])),
    }
