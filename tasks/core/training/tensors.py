"""Dense snapshot tensors from the features: X [T, E, F] standardised on the train window, labels and mask.

Built column by column in threads (numpy releases the GIL in its loops) straight from Arrow, with float64
statistics and a float32 result: no pandas frame, no float64 copy of the whole matrix (at 15 M rows x 84
features the old frame-wide build took 80 s of the train stage on the H200 host)."""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from tasks.core.topology import Topology


def split_times(n_times: int, test_fraction: float) -> tuple[int, int]:
    """(val_start, test_start): train | validation (last 15 % of train) | held-out test window."""
    test_start = n_times - max(1, int(round(n_times * test_fraction)))
    return int(test_start * 0.85), test_start


def _micros(col: pa.ChunkedArray) -> pa.ChunkedArray:
    """Timestamps as int64 microseconds since the epoch (UTC), whatever unit the writer used."""
    return col.cast(pa.timestamp("us", tz=col.type.tz)).cast(pa.int64())


def _element_index(col: pa.ChunkedArray, topo: Topology, where: Path) -> np.ndarray:
    if pa.types.is_dictionary(col.type):  # a categorical column (as cuDF may write it)
        col = col.cast(col.type.value_type)
    idx = pc.index_in(col, value_set=pa.array(topo.element_ids, type=col.type))
    if idx.null_count:
        unknown = pc.unique(pc.filter(col, pc.is_null(idx))).to_pylist()[:5]
        raise ValueError(f"{where}: element_id {unknown} not in the topology ({topo.n} elements expected)")
    return idx.to_numpy().astype(np.int64)


def _standardise(v: np.ndarray, train: np.ndarray) -> tuple[np.ndarray, float, float]:
    """One feature column: z-scores on the train rows' mean and std (float64), missing and non-finite -> 0."""
    vt = v[train]
    mu, sd = (float(np.nanmean(vt)), float(np.nanstd(vt))) if vt.size else (np.nan, np.nan)
    if not np.isfinite(sd) or sd < 1e-9:
        sd = 1.0
    z = np.nan_to_num((v - mu) / sd, nan=0.0, posinf=0.0, neginf=0.0)
    return z.astype(np.float32), mu, sd


def _standardised_rows(
    table: pa.Table, names: list[str], train: np.ndarray, threads: int | None
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """[rows, F] float32 z-scores and the per-feature mean and std, one column per thread."""
    rows = np.empty((table.num_rows, len(names)), dtype=np.float32)
    mu, sd = np.empty(len(names)), np.empty(len(names))

    def column(j: int) -> None:
        rows[:, j], mu[j], sd[j] = _standardise(table.column(names[j]).to_numpy().astype(np.float64), train)

    with ThreadPoolExecutor(max_workers=threads or min(32, os.cpu_count() or 1)) as pool:
        list(pool.map(column, range(len(names))))
    return rows, mu, sd


def model_graph(topo: Topology, graph: str = "real", seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """The adjacency (CSR) the graph model propagates over: the real topology; ``rewired``, the same degrees with the
    links randomly re-drawn (degree-preserving double-edge swaps, seeded: what the real wiring adds over any
    wiring); or ``none``, no links (what message passing adds at all)."""
    import dataclasses

    if graph == "none":
        return np.zeros(topo.n + 1, np.int64), np.zeros(0, np.int64)
    if graph == "real" or len(topo.edges) < 2:
        return topo.csr()
    rng = np.random.default_rng(seed)
    edges = [tuple(e) for e in topo.edges]
    have = set(edges)
    for _ in range(20 * len(edges)):  # swap (a, b), (c, d) -> (a, d), (c, b) where that makes no loop or repeat
        i, j = rng.choice(len(edges), 2, replace=False)
        (a, b), (c, d) = edges[i], edges[j]
        new1, new2 = tuple(sorted((a, d))), tuple(sorted((c, b)))
        if len({a, b, c, d}) < 4 or new1 in have or new2 in have:
            continue
        have -= {edges[i], edges[j]}
        have |= {new1, new2}
        edges[i], edges[j] = new1, new2
    return dataclasses.replace(topo, edges=tuple(edges)).csr()


def steps_to_onset(in_fault: np.ndarray) -> np.ndarray:
    """[T, E] in_fault -> steps from each step to the element's next fault onset strictly after it (an onset: the
    first step of a fault episode), or -1 where none follows in the data (censored): the hazard model's target."""
    n_t = in_fault.shape[0]
    onset = np.zeros(in_fault.shape, bool)
    onset[1:] = (in_fault[1:] > 0) & (in_fault[:-1] == 0)
    at = np.where(onset, np.arange(n_t)[:, None], n_t)
    next_at = np.minimum.accumulate(at[::-1], axis=0)[::-1]  # the first onset at or after each step
    after = np.vstack([next_at[1:], np.full((1, in_fault.shape[1]), n_t)])  # strictly after
    return np.where(after < n_t, after - np.arange(n_t)[:, None], -1).astype(np.int32)


def _label_grids(table: pa.Table, cell: np.ndarray, n_t: int, n_e: int) -> tuple[np.ndarray, ...]:
    """[T, E] label, mask (a row there and not in a fault) and filled (a row there) from the rows' cells."""
    y, mask, filled = np.zeros(n_t * n_e, np.int8), np.zeros(n_t * n_e, np.int8), np.zeros(n_t * n_e, bool)
    y[cell] = table.column("label").to_numpy()
    mask[cell] = 1 - table.column("in_fault").to_numpy()
    filled[cell] = True
    return y.reshape(n_t, n_e), mask.reshape(n_t, n_e), filled.reshape(n_t, n_e)


def prepare_tensors(
    features_dir: Path,
    topo: Topology,
    names: list[str],
    window: int,
    test_fraction: float,
    out: Path,
    threads: int | None = None,
    graph: str = "real",
    seed: int = 0,
    horizon_minutes: float = 60.0,
) -> dict[str, Any]:
    """features Parquet -> X [T, E, F] (standardised on the train window), y and mask [T, E], the steps to the next
    fault onset (``steps_to_onset``) and the label's horizon in steps, and the adjacency the model uses (``graph``:
    real, rewired or none; ``model_graph``)."""
    table = pq.read_table(features_dir, columns=["element_id", "timestamp", *names, "label", "in_fault"])
    ts = _micros(table.column("timestamp"))
    times = np.sort(pc.unique(ts).to_numpy())
    t_idx = np.searchsorted(times, ts.to_numpy())
    e_idx = _element_index(table.column("element_id"), topo, features_dir)
    n_t, n_e, n_f = len(times), topo.n, len(names)
    val_start, test_start = split_times(n_t, test_fraction)
    cell = t_idx * n_e + e_idx
    rows, mu, sd = _standardised_rows(table, names, t_idx < val_start, threads)
    x = np.zeros((n_t, n_e, n_f), dtype=np.float32)
    x.reshape(n_t * n_e, n_f)[cell] = rows
    del rows
    y, mask, filled = _label_grids(table, cell, n_t, n_e)
    ttf = steps_to_onset((filled & (mask == 0)).astype(np.int8))
    step_min = float(np.median(np.diff(times))) / 60e6 if n_t > 1 else 5.0
    indptr, indices = model_graph(topo, graph, seed)
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
        times=times,
        ttf=ttf,
        label_steps=max(1, int(round(horizon_minutes / step_min))),
    )
    return {
        "times": n_t,
        "elements": n_e,
        "features": n_f,
        "val_start": val_start,
        "test_start": test_start,
        "feature_names": names,
        "rows": table.num_rows,
        "cells_filled": int(filled.sum()),
        "train_positive_rate": float(y[:val_start][mask[:val_start] > 0].mean()),
    }
