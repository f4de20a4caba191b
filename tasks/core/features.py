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
    a = alarms[alarms["severity"].isin(PRECURSOR_SEVERITIES)].copy()
    a["timestamp"] = a["timestamp"].dt.ceil(f"{STEP_MINUTES}min")
    counts = pd.crosstab([a["element_id"], a["timestamp"]], a["severity"])
    counts = counts.reindex(columns=list(PRECURSOR_SEVERITIES), fill_value=0)
    counts.columns = [f"n_{c}" for c in counts.columns]
    return counts.reset_index()


def _rolling(values: np.ndarray, indptr: np.ndarray, windows: tuple[int, ...], backend: str) -> np.ndarray:
    if backend == "cudf":
        import cupy as cp

        return cp.asnumpy(roll_kernel.rolling_stats_cuda(cp.asarray(values), indptr, windows))
    return roll_kernel.rolling_stats_reference(values, indptr, windows)


def element_features(part: pd.DataFrame, faults: pd.DataFrame, cfg: FeaturesConfig, backend: str) -> pd.DataFrame:
    """All per-element features for the elements in one partition (each element wholly inside it)."""
    if len(part) == 0:
        return _empty_element_frame(cfg)
    part = part.sort_values(["element_id", "timestamp"]).reset_index(drop=True)
    sizes = part.groupby("element_id", sort=False).size().to_numpy()
    indptr = np.concatenate([[0], np.cumsum(sizes)])
    stats = _rolling(part[list(cfg.kpis)].to_numpy(np.float64), indptr, cfg.windows, backend)
    cols: dict[str, Any] = {}
    for ki, k in enumerate(cfg.kpis):
        for wi, w in enumerate(cfg.windows):
            for si, s in enumerate(roll_kernel.STATS):
                cols[f"{k}_{s}_{w}"] = stats[:, ki, wi, si]
    counts = part[[f"n_{s}" for s in PRECURSOR_SEVERITIES]].to_numpy(np.float64)
    alarm_stats = roll_kernel.rolling_stats_reference(counts, indptr, (ALARM_WINDOW,))
    for si, s in enumerate(PRECURSOR_SEVERITIES):
        cols[f"alarms_{s}_1h"] = alarm_stats[:, si, 0, 0] * np.minimum(ALARM_WINDOW, _position_in_segment(indptr) + 1)
    cols["alarms_1h"] = sum(cols[f"alarms_{s}_1h"] for s in PRECURSOR_SEVERITIES)
    cols["minutes_since_alarm"] = _minutes_since_alarm(part, counts.sum(axis=1))
    label, in_fault, lead = _labels(part, faults, cfg.horizon_minutes)
    out = part[["element_id", "timestamp", *KPI_VALUES]].copy()
    out = pd.concat([out, pd.DataFrame(cols, index=out.index)], axis=1)
    out["in_fault"] = in_fault
    out["minutes_to_fault"] = lead
    out["label"] = label
    return out


def _position_in_segment(indptr: np.ndarray) -> np.ndarray:
    n = indptr[-1]
    return np.arange(n) - np.repeat(indptr[:-1], np.diff(indptr))


def _minutes_since_alarm(part: pd.DataFrame, count: np.ndarray, cap: float = 1440.0) -> np.ndarray:
    ts = _minutes(part["timestamp"])
    seen = np.where(count > 0, ts, np.nan)
    last = pd.Series(seen).groupby(part["element_id"].to_numpy()).ffill().to_numpy()
    return np.where(np.isnan(last), cap, np.minimum(ts - last, cap))


def _minutes(ts: pd.Series) -> np.ndarray:
    return ts.dt.tz_convert("UTC").astype("datetime64[us, UTC]").astype("int64").to_numpy() // 60_000_000


def _labels(part: pd.DataFrame, faults: pd.DataFrame, horizon: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """label: a NODE_DOWN onset in (t, t + horizon]; in_fault: from an onset until its recovery."""
    n = len(part)
    label = np.zeros(n, dtype=np.int8)
    in_fault = np.zeros(n, dtype=np.int8)
    lead = np.full(n, np.nan)
    t_all = _minutes(part["timestamp"])
    f_min = _minutes(faults["timestamp"]) if len(faults) else np.zeros(0, dtype=np.int64)
    for el, idx in part.groupby("element_id", sort=False).indices.items():
        sel = (faults["element_id"] == el).to_numpy()
        if not sel.any():
            continue
        ts = t_all[idx]
        kinds = faults["alarm_type"].to_numpy()[sel]
        onsets = np.sort(f_min[sel][kinds == FAULT_ALARM])
        ups = np.sort(f_min[sel][kinds == "NODE_UP"])
        if len(onsets) == 0:
            continue
        k = np.searchsorted(onsets, ts, side="right")  # next onset strictly after t
        has = k < len(onsets)
        gap = np.where(has, onsets[np.minimum(k, len(onsets) - 1)] - ts, np.inf)
        within = gap <= horizon
        label[idx] = within
        lead[idx] = np.where(within, gap, np.nan)
        prev = k - 1  # latest onset at or before t; in fault until the first recovery at or after it
        started = prev >= 0
        onset_prev = onsets[np.maximum(prev, 0)]
        u = np.searchsorted(ups, onset_prev, side="left")
        never = np.iinfo(np.int64).max
        end = np.where(u < len(ups), ups[np.minimum(u, len(ups) - 1)], never) if len(ups) else np.full(len(ts), never)
        in_fault[idx] = started & (ts <= end)
    return label, in_fault, lead


def neighbour_features(part: pd.DataFrame, topo: Topology, backend: str) -> pd.DataFrame:
    """Neighbour mean/max per timestamp (each timestamp wholly inside this partition)."""
    if len(part) == 0:
        return part.assign(**{f"nbr_{k}_{s}": np.float64(0) for k in NEIGHBOUR_INPUTS for s in nb_kernel.STATS})
    index = {e: i for i, e in enumerate(topo.element_ids)}
    times, t_idx = np.unique(part["timestamp"].to_numpy(), return_inverse=True)
    e_idx = part["element_id"].map(index).to_numpy()
    grid = np.full((len(times), topo.n, len(NEIGHBOUR_INPUTS)), np.nan)
    grid[t_idx, e_idx, :] = part[list(NEIGHBOUR_INPUTS)].to_numpy(np.float64)
    indptr, indices = topo.csr()
    if backend == "cudf":
        import cupy as cp

        agg = cp.asnumpy(nb_kernel.neighbor_agg_cuda(cp.asarray(grid), indptr, indices))
    else:
        agg = nb_kernel.neighbor_agg_reference(grid, indptr, indices)
    picked = agg[t_idx, e_idx]  # [rows, F, 2]
    out = part.copy()
    for fi, k in enumerate(NEIGHBOUR_INPUTS):
        for si, s in enumerate(nb_kernel.STATS):
            out[f"nbr_{k}_{s}"] = picked[:, fi, si]
    return out


def _empty_element_frame(cfg: FeaturesConfig) -> pd.DataFrame:
    cols = [
        "element_id",
        "timestamp",
        *feature_names(cfg)[: -2 * len(NEIGHBOUR_INPUTS)],
        "in_fault",
        "minutes_to_fault",
        "label",
    ]
    return pd.DataFrame({c: pd.Series(dtype="float64") for c in cols}).astype(
        {"element_id": "string", "timestamp": "datetime64[us, UTC]"}
    )


def build_features(client, lake: Path, topo: Topology, cfg: FeaturesConfig, backend: str, out: Path) -> dict:
    """Read the ingest output, compute features with Dask, write Parquet to ``out/features``."""
    import dask
    import dask.dataframe as dd

    with dask.config.set({"dataframe.backend": backend}):
        kpi = dd.read_parquet(str(lake / "kpi"), columns=["element_id", "timestamp", *KPI_VALUES])
        alarms = dd.read_parquet(
            str(lake / "alarms"), columns=["element_id", "timestamp", "severity", "alarm_type"]
        ).compute()
        alarms = alarms.to_pandas() if hasattr(alarms, "to_pandas") else alarms
        faults = fault_table(alarms)
        buckets = alarm_buckets(alarms)
        kpi = kpi.astype({"element_id": "string"})
        buckets["element_id"] = buckets["element_id"].astype("string")
        joined = kpi.merge(dd.from_pandas(buckets, npartitions=1), on=["element_id", "timestamp"], how="left")
        joined = joined.fillna({f"n_{s}": 0 for s in PRECURSOR_SEVERITIES})
        nparts = max(1, min(kpi.npartitions, 8 * max(1, len(client.scheduler_info()["workers"]))))
        by_element = joined.shuffle("element_id", npartitions=nparts)
        meta = element_features(
            joined._meta.to_pandas() if hasattr(joined._meta, "to_pandas") else joined._meta, faults, cfg, "pandas"
        )
        per_element = by_element.map_partitions(
            lambda p: element_features(p.to_pandas() if hasattr(p, "to_pandas") else p, faults, cfg, backend), meta=meta
        )
        by_time = per_element.shuffle("timestamp", npartitions=nparts)
        meta2 = neighbour_features(meta, topo, "pandas")
        final = by_time.map_partitions(neighbour_features, topo, backend, meta=meta2)
        (out / "features").mkdir(parents=True, exist_ok=True)
        final.to_parquet(str(out / "features"), write_index=False)
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
        "faults_in_alarm_log": int((faults["alarm_type"] == FAULT_ALARM).sum()),
    }
