"""The training tensors built where they are used: each rank reads the features' Parquet into its own device's
memory (cuDF on a GPU, pandas on a CPU), one file at a time, and builds X [T, E, F], labels and mask there, handing
them to torch through DLPack. The peak is X and one day's rows, not X beside every row, and nothing of the size of
X crosses the host or the disk (the host-side build, ``tensors.prepare_tensors``, writes X to ``data.npz``).

One body for both devices (the array-module pattern of ``tasks.core.arrays``); its result equals
``prepare_tensors``'s (a test holds them together on the CPU). The stage hands the ranks a recipe (``data.json``)
instead of the tensors; rank 0 writes the small arrays (times, splits, each feature's mean and std, the adjacency)
to ``data.npz`` for evaluation and serving, and what it measured to ``data_info.json``."""

from __future__ import annotations

import json
import math
import time
from pathlib import Path
from typing import Any

import numpy as np

from tasks.core.arrays import array_module, micros, on_gpu, to_host
from tasks.core.laps import SyncedLaps
from tasks.core.store import write_atomic
from tasks.core.topology import Topology
from tasks.core.training.tensors import model_graph, split_times, steps_to_onset

RECIPE = "data.json"  # beside data.npz in the train stage's folder


def write_recipe(out: Path, features_dir: Path, names: list[str], window: int, test_fraction: float,
                 graph: str, seed: int, horizon_minutes: float) -> Path:  # fmt: skip
    """What a rank needs to build the tensors itself; returns the recipe's path (the spec's ``data``)."""
    recipe = {
        "features": str(features_dir),
        "topology": str(Path(features_dir).parent / "topology.json"),
        "names": list(names),
        "window": window,
        "test_fraction": test_fraction,
        "graph": graph,
        "seed": seed,
        "horizon_minutes": horizon_minutes,
        "meta": str(out / "data.npz"),
        "info": str(out / "data_info.json"),
    }
    path = out / RECIPE
    write_atomic(path, json.dumps(recipe, indent=1).encode())
    return path


def feature_files(features_dir: Path) -> list[str]:
    files = sorted(str(p) for p in Path(features_dir).glob("*.parquet"))
    if not files:
        raise FileNotFoundError(f"{features_dir}: no features Parquet files")
    return files


def read_file(path: str | list[str], columns: list[str], gpu: bool):
    """Some columns of a features file (or of several, in order), as a cuDF frame in GPU memory (``gpu``) or a
    pandas frame."""
    if gpu:
        import cudf

        return cudf.read_parquet(path, columns=columns)
    import pandas as pd

    return pd.read_parquet(path, columns=columns)


def _values(s, dtype: str):
    """A column as an array on its own device, missing values as NaN (floats)."""
    if on_gpu(s):
        s = s.astype(dtype)
        return s.to_cupy(na_value=np.nan) if s.has_nulls and dtype.startswith("float") else s.to_cupy()
    return s.to_numpy(dtype)


def _block(df, dtype: str):
    """A frame's columns as one [rows, columns] array on its own device, missing values as NaN (floats)."""
    if on_gpu(df):  # as evaluation's read_rows fills its matrix
        return df.to_cupy(dtype=dtype, na_value=np.nan) if dtype.startswith("float") else df.to_cupy(dtype=dtype)
    return df.to_numpy(dtype)


def element_codes(s, topo: Topology, where: Path):
    """Each row's element index in the topology (its ``element_ids`` order); an unknown element is an error."""
    if on_gpu(s):
        import cudf

        dtype = cudf.CategoricalDtype(categories=list(topo.element_ids))
    else:
        import pandas as pd

        dtype = pd.CategoricalDtype(categories=list(topo.element_ids))
    if str(s.dtype) == "category":  # written as a dictionary column: compare by value, not by its codes
        s = s.astype("str")
    codes = s.astype(dtype).cat.codes.astype("int64").fillna(-1)
    out = _values(codes, "int64")
    if int((out < 0).sum()):
        unknown = s[(codes < 0)].unique()
        unknown = (unknown.to_arrow().to_pylist() if on_gpu(s) else list(unknown))[:5]
        raise ValueError(f"{where}: element_id {unknown} not in the topology ({topo.n} elements expected)")
    return out


EXACT_F32 = 1 << 24  # integers up to this size are exact in float32


def raw_dtype(files: list[str], names: list[str]) -> str:
    """The dtype the features are gathered in before they are standardised: float32 where every one is stored as
    float32, or as integers within 2**24 by the files' Parquet statistics (exact in float32); else float64."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    for f in files:
        md = pq.read_metadata(f)
        types = md.schema.to_arrow_schema()
        leaf = {md.schema.column(i).path: i for i in range(md.num_columns)}
        for n in names:
            if pa.types.is_float32(types.field(n).type):
                continue
            if not pa.types.is_integer(types.field(n).type):
                return "float64"
            stats = [md.row_group(g).column(leaf[n]).statistics for g in range(md.num_row_groups)]
            if not all(st is not None and st.has_min_max and max(-st.min, st.max) <= EXACT_F32 for st in stats):
                return "float64"
    return "float32"


def step_index(files: list[str], gpu: bool):
    """The sorted distinct times (microseconds) over all files, and each file's first and last step among them
    (only the timestamp column is read)."""
    per = [micros(read_file(f, ["timestamp"], gpu)["timestamp"]) for f in files]
    xp = array_module(per[0])
    times = xp.unique(xp.concatenate(per))
    spans = [(int(xp.searchsorted(times, p.min())), int(xp.searchsorted(times, p.max()))) for p in per if len(p)]
    return times, spans, [f for f, p in zip(files, per) if len(p)]


def fill_cells(files, spans, times, topo: Topology, names: list[str], gpu: bool, t_lo: int, val_start: int,
               where: Path):  # fmt: skip
    """Each file's rows written to their cells from step ``t_lo`` on, one file in memory at a time: the raw
    features [cells, F] in ``raw_dtype`` (NaN where no row or no value),
    y, mask and filled [cells], the number of rows, and the cells of the training rows (steps before
    ``val_start``) in the files' row order."""
    xp = array_module(times)
    n_t, n_e, n_f = int(times.shape[0]) - t_lo, topo.n, len(names)
    x = xp.full((n_t * n_e, n_f), xp.nan, dtype=raw_dtype(files, names))
    y, mask, filled = (xp.zeros(n_t * n_e, dt) for dt in (xp.int8, xp.int8, bool))
    rows, train_cells = 0, []
    for f, (_, last) in zip(files, spans):
        if last < t_lo:
            continue
        df = read_file(f, ["element_id", "timestamp", *names, "label", "in_fault"], gpu)
        t_idx = xp.searchsorted(times, micros(df["timestamp"])) - t_lo
        if int(t_idx.min()) < 0:  # the file begins before the window
            df, t_idx = df[t_idx >= 0], t_idx[t_idx >= 0]
        cell = t_idx * n_e + element_codes(df["element_id"], topo, where)
        x[cell] = _block(df[names], str(x.dtype))  # whole rows: a feature at a time wrote 4 bytes a sector
        y[cell] = _values(df["label"], "int8")
        mask[cell] = 1 - _values(df["in_fault"], "int8")
        filled[cell] = True
        rows += len(df)
        train_cells.append(cell[t_idx < val_start - t_lo])
    return x, (y, mask, filled), rows, (xp.concatenate(train_cells) if train_cells else xp.zeros(0, xp.int64))


def train_stats(x, train_cells, block: int = 8) -> tuple[np.ndarray, np.ndarray]:
    """Each feature's float64 mean and std over the training rows, in their row order (the frame's statistics).
    The rows are gathered ``block`` features at a time: one feature's gather from the row-major X read a whole
    memory sector for each 4-byte value, 84 times over."""
    xp = array_module(x)
    n_f = x.shape[1]
    mu, sd = np.empty(n_f), np.empty(n_f)
    for j0 in range(0, n_f, block):
        rows = x[train_cells, j0 : j0 + block]
        for k in range(rows.shape[1]):  # each feature's values as one contiguous vector, as the frame's were
            vt = rows[:, k].astype(xp.float64)
            m, s = (float(xp.nanmean(vt)), float(xp.nanstd(vt))) if vt.size else (math.nan, math.nan)
            mu[j0 + k], sd[j0 + k] = m, (s if math.isfinite(s) and s >= 1e-9 else 1.0)
        del rows
    return mu, sd


def standardise(x, mu: np.ndarray, sd: np.ndarray, block: int = 1 << 20):
    """float32 (x - mean) / std, missing as 0, in blocks of cells (in place where ``x`` is float32)."""
    xp = array_module(x)
    out = x if x.dtype == xp.float32 else xp.empty(x.shape, xp.float32)
    m, s = xp.asarray(mu), xp.asarray(sd)
    for a in range(0, x.shape[0], block):
        z = (x[a : a + block].astype(xp.float64) - m) / s
        out[a : a + block] = xp.nan_to_num(z, nan=0.0, posinf=0.0, neginf=0.0).astype(xp.float32)
    return out


def file_tensors(files: list[str], topo: Topology, names: list[str], window: int, test_fraction: float,
                 graph: str = "real", seed: int = 0, horizon_minutes: float = 60.0, where: Path = Path("features"),
                 gpu: bool = False):  # fmt: skip
    """(arrays, info): X [T, E, F] float32 standardised on the train window, y and mask [T, E] int8 on the
    device (the GPU through cuDF where ``gpu``); ttf, the adjacency, the splits, the times and each feature's mean
    and std on the host. The files are read one at a time, so the peak is X and one file's rows."""
    lap = SyncedLaps(gpu)  # where the build's time goes: the steps, the files' rows, the statistics, the scaling
    times, spans, files = step_index(files, gpu)
    lap("step_index")
    xp = array_module(times)
    n_t, n_e, n_f = int(times.shape[0]), topo.n, len(names)
    val_start, test_start = split_times(n_t, test_fraction)
    x, (y, mask, filled), rows, train_cells = fill_cells(files, spans, times, topo, names, gpu, 0, val_start, where)
    lap("fill_cells")
    mu, sd = train_stats(x, train_cells)
    lap("train_stats")
    del train_cells
    x = standardise(x, mu, sd)
    lap("standardise")
    y, mask, filled = y.reshape(n_t, n_e), mask.reshape(n_t, n_e), filled.reshape(n_t, n_e)
    times_h = to_host(times)
    ttf = steps_to_onset(to_host(filled & (mask == 0)).astype(np.int8))
    step_min = float(np.median(np.diff(times_h))) / 60e6 if n_t > 1 else 5.0
    indptr, indices = model_graph(topo, graph, seed)
    first = window - 1
    host = {
        "indptr": indptr,
        "indices": indices,
        "train_t": np.arange(first, val_start),
        "val_t": np.arange(max(first, val_start), test_start),
        "test_t": np.arange(max(first, test_start), n_t),
        "mean": mu,
        "std": sd,
        "times": times_h,
        "ttf": ttf,
        "label_steps": np.asarray(max(1, int(round(horizon_minutes / step_min)))),
    }
    yt, mt = y[:val_start], mask[:val_start]
    info = {
        "times": n_t,
        "elements": n_e,
        "features": n_f,
        "val_start": val_start,
        "test_start": test_start,
        "rows": rows,
        "cells_filled": int(filled.sum()),
        "train_positive_rate": float(yt[mt > 0].astype(xp.float64).mean()),
    }
    lap("the_rest")
    info["tensor_parts_s"] = lap.seconds
    return {"X": x.reshape(n_t, n_e, n_f), "y": y, "mask": mask, **host}, info


def x_from(recipe_path: Path, gpu: bool, t_lo: int, mu: np.ndarray, sd: np.ndarray):
    """X [T - t_lo, E, F] of the steps from ``t_lo`` on, standardised with the training's ``mu`` and ``sd``:
    equal to the whole X's rows from ``t_lo``, reading only the files that reach it."""
    r = json.loads(Path(recipe_path).read_text())
    gpu = gpu and has_cudf()
    times, spans, files = step_index(feature_files(Path(r["features"])), gpu)
    x, _, _, _ = fill_cells(files, spans, times, Topology.read(Path(r["topology"])), r["names"], gpu, t_lo, 0,
                            Path(r["features"]))  # fmt: skip
    return standardise(x, mu, sd).reshape(int(times.shape[0]) - t_lo, -1, len(r["names"]))


def has_cudf() -> bool:
    try:
        import cudf  # noqa: F401
    except ImportError:  # a CUDA torch without RAPIDS: read on the host, the tensors then go to the GPU
        return False
    return True


def build(recipe_path: Path, gpu: bool) -> tuple[dict[str, Any], dict[str, Any]]:
    """The tensors of a recipe on this process's device (``gpu``: the current CUDA device, through cuDF)."""
    r = json.loads(Path(recipe_path).read_text())
    gpu = gpu and has_cudf()
    started = time.perf_counter()
    arrays, info = file_tensors(feature_files(Path(r["features"])), Topology.read(Path(r["topology"])), r["names"],
                                r["window"], r["test_fraction"], r["graph"], r["seed"], r["horizon_minutes"],
                                Path(r["features"]), gpu)  # fmt: skip
    if gpu:
        import cupy

        cupy.cuda.Device().synchronize()
        cupy.get_default_memory_pool().free_all_blocks()  # the files' memory back to the driver, for torch
    info.update(
        feature_names=r["names"],
        tensor_build_s=round(time.perf_counter() - started, 2),
        tensor_device="cuda" if gpu else "cpu",
    )
    return arrays, info


def write_meta(recipe_path: Path, arrays: dict[str, Any], info: dict[str, Any]) -> None:
    """Rank 0: the small arrays (everything but X, y and mask) for evaluation and serving, and the build's figures."""
    import io

    r = json.loads(Path(recipe_path).read_text())
    buf = io.BytesIO()
    np.savez(buf, **{k: v for k, v in arrays.items() if k not in ("X", "y", "mask")})
    write_atomic(Path(r["meta"]), buf.getvalue())
    write_atomic(Path(r["info"]), json.dumps(info).encode())


def load_x(data_path: Path, device: str, t_lo: int = 0):
    """X [T - t_lo, E, F] (the steps from ``t_lo`` on) as a torch tensor on ``device``: from ``data.npz`` where
    the host built it, else built again from the recipe beside it with the training's statistics (on the GPU
    through cuDF where ``device`` is cuda), reading only the files that reach ``t_lo``."""
    import torch

    d = np.load(data_path)
    if "X" in d.files:
        return torch.from_numpy(d["X"][t_lo:]).to(device)
    return as_torch(x_from(Path(data_path).parent / RECIPE, device == "cuda", t_lo, d["mean"], d["std"]), device)


def as_torch(a, device):
    """A NumPy or CuPy array as a torch tensor on ``device``; a CuPy array is shared through DLPack, not copied."""
    import torch

    if hasattr(a, "__cuda_array_interface__"):
        return torch.from_dlpack(a).to(device)
    return torch.from_numpy(np.ascontiguousarray(a)).to(device)
