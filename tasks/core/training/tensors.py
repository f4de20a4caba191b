"""Dense snapshot tensors from the features: X [T, E, F] standardised on the train window, labels and mask."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from tasks.core.topology import Topology


def split_times(n_times: int, test_fraction: float) -> tuple[int, int]:
    """(val_start, test_start): train | validation (last 15 % of train) | held-out test window."""
    test_start = n_times - max(1, int(round(n_times * test_fraction)))
    return int(test_start * 0.85), test_start


def prepare_tensors(
    features_dir: Path, topo: Topology, names: list[str], window: int, test_fraction: float, out: Path
) -> dict[str, Any]:
    """features Parquet -> X [T, E, F] (standardised on the train window), y and mask [T, E]."""
    df = pd.read_parquet(features_dir, columns=["element_id", "timestamp", *names, "label", "in_fault"])
    times = np.sort(df["timestamp"].unique())
    t_idx = np.searchsorted(times, df["timestamp"].to_numpy())
    index = {e: i for i, e in enumerate(topo.element_ids)}
    e_idx = df["element_id"].map(index).to_numpy()
    n_t, n_e = len(times), topo.n
    val_start, test_start = split_times(n_t, test_fraction)
    values = df[names].to_numpy(np.float64)
    train_rows = t_idx < val_start
    mu = np.nanmean(values[train_rows], axis=0)
    sd = np.nanstd(values[train_rows], axis=0)
    sd[~np.isfinite(sd) | (sd < 1e-9)] = 1.0
    values = np.nan_to_num((values - mu) / sd, nan=0.0, posinf=0.0, neginf=0.0)
    x = np.zeros((n_t, n_e, len(names)), dtype=np.float32)
    x[t_idx, e_idx] = values.astype(np.float32)
    y = np.zeros((n_t, n_e), dtype=np.int8)
    mask = np.zeros((n_t, n_e), dtype=np.int8)
    y[t_idx, e_idx] = df["label"].to_numpy()
    mask[t_idx, e_idx] = 1 - df["in_fault"].to_numpy()
    indptr, indices = topo.csr()
    first = window - 1
    np.savez(
        out,
        X=x,
        y=y,
        mask=mask,
        indptr=indptr,
        indices=indices,
        train_t=np.arange(first, val_start),
        val_t=np.arange(max(first, val_start), test_start),
        test_t=np.arange(max(first, test_start), n_t),
        mean=mu,
        std=sd,
        times=pd.DatetimeIndex(times).as_unit("us").asi8,
    )
    return {
        "times": n_t,
        "elements": n_e,
        "features": len(names),
        "val_start": val_start,
        "test_start": test_start,
        "feature_names": names,
        "rows": len(df),
        "cells_filled": int(len(np.unique(t_idx * n_e + e_idx))),
        "train_positive_rate": float(y[:val_start][mask[:val_start] > 0].mean()),
    }
