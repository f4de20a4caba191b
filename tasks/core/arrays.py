"""Columns as arrays on the partition's own device: NumPy for pandas frames, CuPy for cuDF frames (the
array-module pattern: one body runs on both; the backend itself is chosen once, in ``runtime``). Shared by the
features stage and the training ranks' on-device tensor build."""

from __future__ import annotations

from typing import Any

import numpy as np


def on_gpu(df) -> bool:
    return type(df).__module__.split(".")[0] in ("cudf", "dask_cudf")


def xp_of(df):
    """The array module of a partition: CuPy for cuDF, NumPy for pandas."""
    if on_gpu(df):
        import cupy

        return cupy
    return np


def array_module(a):
    """The module of an array: CuPy for a CuPy array, else NumPy."""
    if type(a).__module__.split(".")[0] == "cupy":
        import cupy

        return cupy
    return np


def release_gpu_memory() -> dict[str, int]:
    """Hand back to the driver the GPU memory this process's pools hold for arrays gone (CuPy's device and pinned
    pools, torch's cache), so that the processes of the stages after (a training rank, Dask-CUDA workers) find it
    free: a pool keeps what it freed for its own next use, and a flow process that ran evaluation held 33 GB of an
    80-GB card that way while the next run's rank needed it. Imports neither library; returns the bytes each gave
    back (0 where it was not loaded)."""
    import gc
    import sys

    gc.collect()  # arrays caught in reference cycles go first, so that their blocks are free to hand back
    freed = {"cupy": 0, "torch": 0}
    cupy = sys.modules.get("cupy")
    if cupy is not None:
        pool = cupy.get_default_memory_pool()
        held = pool.total_bytes()
        pool.free_all_blocks()
        cupy.get_default_pinned_memory_pool().free_all_blocks()
        freed["cupy"] = held - pool.total_bytes()
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_initialized():
        held = torch.cuda.memory_reserved()
        torch.cuda.empty_cache()
        freed["torch"] = held - torch.cuda.memory_reserved()
    return freed


def device_room(a, times: float) -> bool:
    """Whether the GPU a CuPy array lives on has ``times`` its size free (False for a host array)."""
    if array_module(a) is np:
        return False
    import cupy

    free, _ = cupy.cuda.runtime.memGetInfo()
    return free >= times * a.nbytes


def to_host(a) -> np.ndarray:
    """A NumPy or CuPy array as a NumPy array (copied from the GPU where it lives there)."""
    return a.get() if hasattr(a, "get") else np.asarray(a)


def as_array(obj, dtype):
    """A Series/DataFrame as a (device or host) array, without leaving the device."""
    if on_gpu(obj):
        return obj.astype(dtype).to_cupy()
    return obj.to_numpy(dtype)


def micros(ts) -> Any:
    """Timestamps -> integer microseconds since the epoch, on the partition's device."""
    if getattr(ts.dtype, "tz", None) is not None:
        ts = ts.dt.tz_convert(None)
    return as_array(ts.astype("datetime64[us]").astype("int64"), "int64")


def minutes(ts) -> Any:
    return micros(ts) // 60_000_000
