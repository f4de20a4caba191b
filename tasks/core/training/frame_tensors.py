"""The training tensors built where they are used: each rank reads the features' Parquet into its own device's
memory (cuDF on a GPU, pandas on a CPU) and builds X [T, E, F], labels and mask there, handing them to torch
through DLPack. Nothing of the size of X crosses the host or the disk: the host-side build
(``tensors.prepare_tensors``) wrote X to ``data.npz`` and every rank read it back and copied it to its GPU.

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

from tasks.core.arrays import micros, on_gpu, to_host, xp_of
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


def read_features(features_dir: Path, names: list[str], gpu: bool):
    """The columns the tensors need, as a cuDF frame in GPU memory (``gpu``) or a pandas frame."""
    cols = ["element_id", "timestamp", *names, "label", "in_fault"]
    if gpu:
        import cudf

        return cudf.read_parquet(feature_files(features_dir), columns=cols)
    import pandas as pd

    return pd.read_parquet(feature_files(features_dir), columns=cols)


def _values(s, dtype: str):
    """A column as an array on its own device, missing values as NaN (floats)."""
    if on_gpu(s):
        s = s.astype(dtype)
        return s.to_cupy(na_value=np.nan) if s.has_nulls and dtype.startswith("float") else s.to_cupy()
    return s.to_numpy(dtype)


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


def frame_tensors(df, topo: Topology, names: list[str], window: int, test_fraction: float, graph: str = "real",
                  seed: int = 0, horizon_minutes: float = 60.0, where: Path = Path("features")):  # fmt: skip
    """(arrays, info): X [T, E, F] float32 standardised on the train window, y and mask [T, E] int8 on the frame's
    device; ttf, the adjacency, the splits, the times and each feature's mean and std on the host."""
    xp = xp_of(df)
    ts = micros(df["timestamp"])
    times = xp.unique(ts)
    t_idx = xp.searchsorted(times, ts)
    e_idx = element_codes(df["element_id"], topo, where)
    n_t, n_e, n_f = int(times.shape[0]), topo.n, len(names)
    val_start, test_start = split_times(n_t, test_fraction)
    cell = t_idx * n_e + e_idx
    train = t_idx < val_start
    x = xp.zeros((n_t * n_e, n_f), dtype=xp.float32)
    mu, sd = np.empty(n_f), np.empty(n_f)
    for j, name in enumerate(names):  # float64 statistics, float32 result, one column at a time
        v = _values(df[name], "float64")
        vt = v[train]
        m, s = (float(xp.nanmean(vt)), float(xp.nanstd(vt))) if vt.size else (math.nan, math.nan)
        if not math.isfinite(s) or s < 1e-9:
            s = 1.0
        x[cell, j] = xp.nan_to_num((v - m) / s, nan=0.0, posinf=0.0, neginf=0.0).astype(xp.float32)
        mu[j], sd[j] = m, s
    y, mask, filled = (xp.zeros(n_t * n_e, dt) for dt in (xp.int8, xp.int8, bool))
    y[cell] = _values(df["label"], "int8")
    mask[cell] = 1 - _values(df["in_fault"], "int8")
    filled[cell] = True
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
        "rows": int(len(df)),
        "cells_filled": int(filled.sum()),
        "train_positive_rate": float(yt[mt > 0].astype(xp.float64).mean()),
    }
    return {"X": x.reshape(n_t, n_e, n_f), "y": y, "mask": mask, **host}, info


def build(recipe_path: Path, gpu: bool) -> tuple[dict[str, Any], dict[str, Any]]:
    """The tensors of a recipe on this process's device (``gpu``: the current CUDA device, through cuDF)."""
    r = json.loads(Path(recipe_path).read_text())
    if gpu:
        try:
            import cudf  # noqa: F401
        except ImportError:  # a CUDA torch without RAPIDS: read on the host, the tensors then go to the GPU
            gpu = False
    started = time.perf_counter()
    df = read_features(Path(r["features"]), r["names"], gpu)
    read_s = time.perf_counter() - started
    arrays, info = frame_tensors(df, Topology.read(Path(r["topology"])), r["names"], r["window"], r["test_fraction"],
                                 r["graph"], r["seed"], r["horizon_minutes"], Path(r["features"]))  # fmt: skip
    del df
    if gpu:
        import cupy

        cupy.cuda.Device().synchronize()
        cupy.get_default_memory_pool().free_all_blocks()  # the frame's memory back to the driver, for torch
    info.update(
        feature_names=r["names"],
        tensor_read_s=round(read_s, 2),
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


def load_x(data_path: Path, device: str):
    """X [T, E, F] as a torch tensor on ``device``: from ``data.npz`` where the host built it, else built again
    from the recipe beside it (on the GPU through cuDF where ``device`` is cuda)."""
    import torch

    d = np.load(data_path)
    if "X" in d.files:
        return torch.from_numpy(d["X"]).to(device)
    arrays, _ = build(Path(data_path).parent / RECIPE, gpu=device == "cuda")
    return as_torch(arrays["X"], device)


def as_torch(a, device):
    """A NumPy or CuPy array as a torch tensor on ``device``; a CuPy array is shared through DLPack, not copied."""
    import torch

    if hasattr(a, "__cuda_array_interface__"):
        return torch.from_dlpack(a).to(device)
    return torch.from_numpy(np.ascontiguousarray(a)).to(device)
