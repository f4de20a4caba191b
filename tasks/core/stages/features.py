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

import json
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from gpu_kernels import neighbors as nb_kernel
from gpu_kernels import rolling as roll_kernel
from tasks.core.arrays import as_array, minutes, on_gpu, xp_of
from tasks.core.config import FeaturesConfig
from tasks.core.errors import DataRejected, InvariantBroken
from tasks.core.laps import Laps
from tasks.core.schema import KPI_VALUES
from tasks.core.stages.alarm_log import (
    KEY,
    PRECURSOR_SEVERITIES,
    alarm_arrays,
    alarm_count,
    fault_arrays,
    fault_table,
    labels,
    minutes_since_alarm,
)
from tasks.core.topology import Topology

NEIGHBOUR_INPUTS = ("cpu_util", "temperature_c", "latency_ms", "packet_loss_pct", "if_errors", "alarms_1h")


def feature_names(cfg: FeaturesConfig) -> list[str]:
    names = list(KPI_VALUES)
    names += [f"{k}_{s}_{w}" for k in cfg.kpis for w in cfg.windows for s in roll_kernel.STATS]
    names += [f"alarms_{s}_1h" for s in PRECURSOR_SEVERITIES] + ["alarms_1h", "minutes_since_alarm"]
    names += [f"nbr_{k}_{s}" for k in NEIGHBOUR_INPUTS for s in nb_kernel.STATS]
    return names


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


def _keyed(day, shared: dict[str, Any]):
    """The day's rows with their element code, sorted by (code, time)."""
    codes = shared["codes"]
    part = day.merge(_like(day, codes.astype({"element_id": day["element_id"].dtype})), on="element_id", how="left")
    missing = part["code"].isna()
    if bool(missing.any()):
        ids = part.loc[missing, "element_id"]
        unknown = sorted(set(ids.to_pandas() if on_gpu(ids) else ids))
        raise DataRejected(f"KPI rows name elements that are not in the topology: {unknown[:5]}", column="element_id")
    part["code"] = part["code"].astype("int64")
    return part.sort_values(["code", "timestamp"]).reset_index(drop=True)


def _kpi_matrix(part, kpis: tuple[str, ...], xp):
    return xp.stack([as_array(part[k], "float64") for k in kpis]) if len(part) else xp.zeros((len(kpis), 0))


def window_history(prev: dict | None, day, shared: dict[str, Any], kpis: tuple[str, ...], context: int) -> dict:
    """The last ``context`` rows of every element up to the end of ``day`` (code, minute, KPI values [F, n]):
    what the rolling windows of the next day's first rows reach back into. Chained day after day, so an
    element with few rows in a day still carries its older rows along."""
    part = _keyed(day, shared)
    xp = xp_of(part)
    code, t, vals = as_array(part["code"], "int64"), minutes(part["timestamp"]), _kpi_matrix(part, kpis, xp)
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
    xp = xp_of(part)
    n = len(part)
    code, t = as_array(part["code"], "int64"), minutes(part["timestamp"])
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
        cols[f"alarms_{s}_1h"] = alarm_count(key, shared["alarms"][s], xp)
    cols["alarms_1h"] = sum(cols[f"alarms_{s}_1h"] for s in PRECURSOR_SEVERITIES)
    cols["minutes_since_alarm"] = minutes_since_alarm(key, shared["alarms"]["all"], xp)
    label, in_fault, lead = labels(code, t, shared["faults"], cfg.horizon_minutes, xp)
    cols["in_fault"], cols["minutes_to_fault"], cols["label"] = in_fault, lead, label
    inputs = {k: cols["alarms_1h"] if k == "alarms_1h" else as_array(part[k], "float64") for k in NEIGHBOUR_INPUTS}
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
    if on_gpu(part):
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


def prime_worker(backend: str) -> float:
    """A worker's one-off costs paid before its first day (on a cluster started ahead, beside ingest): this module's
    imports (cuDF, CuPy), the kernels' loads from CuPy's cache, and a small frame's Parquet write and read with the
    backend (cuDF's IO set-up). Returns its seconds."""
    import tempfile
    import time

    t0 = time.perf_counter()
    frame = pd.DataFrame({"element_id": ["a", "b"], "timestamp": pd.to_datetime([0, 300], unit="s"), "x": [1.0, 2.0]})
    with tempfile.TemporaryDirectory(prefix="faultline-prime-") as d:
        path = Path(d) / "prime.parquet"
        if backend == "cudf":
            import cudf
            import cupy as cp

            cudf.from_pandas(frame).to_parquet(path, index=False)
            cudf.read_parquet(path)
            roll_kernel.rolling_stats_cuda(cp.zeros((1, 4)), np.array([0, 4]), (2, 3))
            nb_kernel.neighbor_agg_cuda(cp.zeros((1, 2, 2)), np.array([0, 1, 2]), np.array([1, 0]))
            cp.cuda.Device().synchronize()
        else:
            frame.to_parquet(path, index=False)
            pd.read_parquet(path)
    return round(time.perf_counter() - t0, 3)


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
        raise InvariantBroken(f"features for {name} changed the row count: {rows_in} KPI rows in, {len(frame)} out")
    if write:
        if cfg.store_dtype != "float64":  # computed in float64; stored at the precision the model consumes
            frame = frame.astype({c: cfg.store_dtype for c, t in frame.dtypes.items() if str(t) == "float64"})
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


def save_history(history: dict, path: Path) -> None:
    """A day's closing window history (host arrays): where an increment's first recomputed day starts."""
    np.savez(path, **{k: np.asarray(v) if isinstance(v, np.ndarray) else v.get() for k, v in history.items()})


def _load_history(path: Path) -> dict:
    with np.load(path) as d:
        return {k: d[k] for k in d.files}


def _reuse(base: Path, first: str, groups: list, dest: Path) -> tuple[list[dict], dict | None]:
    """The base's days before ``first`` linked into ``dest`` (their figures from its manifest), and the window
    history closing the last of them."""
    from tasks.core.stages.increment import link_tree

    kept = [name for name, _ in groups if name < first]
    link_tree(base, dest.parent, tuple(f"{d}/{n}.{x}" for n in kept for d, x in (("features", "parquet"),
                                                                                  ("history", "npz"))))  # fmt: skip
    per_day = {d["day"]: d for d in json.loads((base / "_manifest.json").read_text())["per_day"]}
    return [per_day[n] for n in kept], _load_history(base / "history" / f"{kept[-1]}.npz") if kept else None


def build_features(
    client, lake: Path, topo: Topology, cfg: FeaturesConfig, backend: str, out: Path, progress=None, write=True,
    base: tuple[Path, str] | None = None,
) -> dict:  # fmt: skip
    """Read the ingest output day by day, compute features with Dask, write Parquet to ``out/features``.

    One task per day, with no shuffle: a day holds every timestamp's rows (neighbour features), and the
    rolling windows reach into the previous days through a small chain of per-element histories (each day's
    closing one kept in ``out/history``). ``base``: an earlier output and the first day to recompute (an
    increment): the days before it are linked from there. ``progress(done, total)`` is called as days finish."""
    from distributed import as_completed

    groups = day_groups(lake / "kpi")
    if not groups:
        raise DataRejected(f"{lake / 'kpi'} holds no Parquet files: nothing to compute features from", file=str(lake))
    lap = Laps()  # the shared tables, the first day (a worker's one-off costs with it), the other days
    shared = shared_tables(lake, topo)
    [tables] = client.scatter([shared], broadcast=True)
    lap("shared_tables")
    dest, hist = out / "features", out / "history"
    dest.mkdir(parents=True, exist_ok=True)
    hist.mkdir(parents=True, exist_ok=True)
    reused, start = ([], None) if base is None else _reuse(base[0], base[1], groups, dest)
    todo = groups[len(reused) :]
    days, saved = _day_tasks(todo, start, tables, cfg, backend, dest, hist, write)
    futures = client.compute(days)
    saving = client.compute(saved) if write else []
    for done, _ in enumerate(as_completed(futures), 1):
        _ = done == 1 and lap("first_day")
        if progress is not None:
            progress(done, len(futures))
    computed = client.gather(futures)
    client.gather(saving)
    lap("other_days")
    stats = [*reused, *computed]
    rows_in, rows_out = sum(s["rows_in"] for s in stats), sum(s["rows_out"] for s in stats)
    if rows_in == 0:
        raise DataRejected(f"{lake / 'kpi'} holds no KPI rows: nothing to compute features from", file=str(lake))
    if rows_in != rows_out:
        raise InvariantBroken(f"features changed the row count: {rows_in} KPI rows in, {rows_out} feature rows out")
    return {
        "rows_in": rows_in,
        "rows_out": rows_out,
        "rows_quarantined": 0,
        "days": len(groups),
        "positives": sum(s["positives"] for s in stats),
        "faults_in_alarm_log": int(len(shared["faults"]["t"])),
        "per_day": stats,
        "work_rows": sum(s["rows_in"] for s in computed),
        "days_recomputed": len(computed),
        "day_parts_s": lap.seconds,
    }


def _day_tasks(todo: list, start: dict | None, tables, cfg: FeaturesConfig, backend: str, dest: Path, hist: Path,
               write: bool) -> tuple[list, list]:  # fmt: skip
    """The days' Dask tasks: each day's read, its window history (chained from ``start``, the day before the
    first's), its features' write, and its closing history's save."""
    import dask

    context = max(cfg.windows) - 1
    reads = [dask.delayed(read_kpi, pure=True)(files, backend) for _, files in todo]
    history = [start]
    for i in range(len(todo)):
        history.append(dask.delayed(window_history)(history[-1], reads[i], tables, cfg.kpis, context))
    days = [
        dask.delayed(write_day)(name, reads[i], history[i], tables, cfg, dest, write)
        for i, (name, _) in enumerate(todo)
    ]
    saved = [dask.delayed(save_history)(history[i + 1], hist / f"{name}.npz") for i, (name, _) in enumerate(todo)]
    return days, saved


def features_stage(
    client, lake: Path, cfg: FeaturesConfig, backend: str, out: Path, progress=None, increment=None
) -> dict[str, Any]:
    """The features stage's output in ``out`` (``features/<day>.parquet`` and the topology) and its manifest body.
    ``increment``: an ``increment.Increment`` whose base output the days before its first changed one come from."""
    from tasks.core.stages.increment import first_day_to_recompute

    topo = Topology.read(Path(lake) / "topology.json")
    since = None
    if increment is not None:
        since = (increment.base_features, first_day_to_recompute(increment, cfg.horizon_minutes))
    summary = build_features(client, Path(lake), topo, cfg, backend, out, progress=progress, base=since)
    (out / "topology.json").write_bytes((Path(lake) / "topology.json").read_bytes())
    return {
        "lake": str(lake),
        "backend": backend,
        "features": {
            "names": feature_names(cfg),
            "windows": list(cfg.windows),
            "kpis": list(cfg.kpis),
            "horizon_minutes": cfg.horizon_minutes,
            "kernels": {"rolling": roll_kernel.KERNEL_VERSION, "neighbors": nb_kernel.KERNEL_VERSION},
            "kernel_path": "cuda" if backend == "cudf" else "numpy-reference",
        },
        **summary,
    }


def lake_fingerprint(lake: Path) -> str:
    """The ingest stage's fingerprint when the lake has a manifest, else a hash of its files."""
    from tasks.core.store import MANIFEST, fingerprint_tree

    manifest = Path(lake) / MANIFEST
    if manifest.is_file():
        return json.loads(manifest.read_text()).get("fingerprint") or fingerprint_tree(Path(lake))
    return fingerprint_tree(Path(lake))
