"""Segmented rolling-window statistics: mean, std, max and slope over several windows in one pass.

Rows are sorted by (segment, time); ``indptr`` gives each segment's row range (CSR style). For row i
of a segment starting at s, the window for span w covers rows max(s, i-w+1)..i (fewer rows at the start
of a segment). std is the population std (ddof=0); slope is the least-squares slope per sample step.

``rolling_stats_reference`` is the NumPy reference; ``rolling_stats_cuda`` launches the CUDA kernel on
CuPy arrays or anything with ``__cuda_array_interface__`` (cuDF columns), with no host copies.
"""

from __future__ import annotations

import numpy as np

KERNEL_VERSION = "rolling-1"
STATS = ("mean", "std", "max", "slope")


def rolling_stats_reference(
    values: np.ndarray, indptr: np.ndarray, windows: tuple[int, ...], block: int = 1 << 16
) -> np.ndarray:
    """values [N, F] -> out [N, F, len(windows), 4] (float64). Works in row blocks (with the longest
    window's rows before each block as context), so memory stays bounded; each row's arithmetic is the same."""
    values = np.asarray(values, dtype=np.float64)
    if values.ndim == 1:
        values = values[:, None]
    n, f = values.shape
    out = np.empty((n, f, len(windows), len(STATS)), dtype=np.float64)
    seg_start = np.repeat(np.asarray(indptr[:-1]), np.diff(indptr))
    context = max(windows) - 1
    for lo in range(0, n, block):
        hi = min(n, lo + block)
        ctx = max(0, lo - context)
        part = _reference_block(values[ctx:hi], np.maximum(seg_start[ctx:hi] - ctx, 0), windows)
        out[lo:hi] = part[lo - ctx :]
    return out


def _reference_block(values: np.ndarray, seg_start: np.ndarray, windows: tuple[int, ...]) -> np.ndarray:
    n, f = values.shape
    out = np.empty((n, f, len(windows), len(STATS)), dtype=np.float64)
    idx = np.arange(n)
    for wi, w in enumerate(windows):
        start = np.maximum(seg_start, idx - w + 1)
        count = (idx - start + 1).astype(np.float64)
        # view of the trailing w rows (padded at the front); positions before `start` are masked
        pad = np.concatenate([np.full((w - 1, f), np.nan), values])
        win = np.lib.stride_tricks.sliding_window_view(pad, w, axis=0)  # [N, F, w]
        pos = np.arange(w)[None, :] + (idx[:, None] - w + 1)  # absolute row of each window slot
        mask = pos >= start[:, None]  # [N, w]
        x = np.where(mask[:, None, :], win, np.nan)
        mean = np.nansum(x, axis=2) / count[:, None]
        dev = np.where(mask[:, None, :], x - mean[:, :, None], 0.0)
        std = np.sqrt(np.sum(dev * dev, axis=2) / count[:, None])
        mx = np.nanmax(x, axis=2)
        t = np.where(mask, pos - start[:, None], 0).astype(np.float64)  # 0..count-1
        tmean = (count - 1) / 2.0
        tdev = np.where(mask, t - tmean[:, None], 0.0)
        sxx = np.sum(tdev * tdev, axis=1)
        sxy = np.sum(tdev[:, None, :] * dev, axis=2)
        slope = np.divide(sxy, sxx[:, None], out=np.zeros_like(sxy), where=sxx[:, None] > 0)
        out[:, :, wi, 0], out[:, :, wi, 1], out[:, :, wi, 2], out[:, :, wi, 3] = mean, std, mx, slope
    return out


_SOURCE = r"""
extern "C" __global__ void rolling_stats(const T* __restrict__ values, const long long* __restrict__ seg_start,
                                         const int* __restrict__ windows, int n_windows, long long n, int f,
                                         T* __restrict__ out) {
    // one thread per (row, feature); each thread walks its longest window once and emits every span.
    long long tid = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (tid >= n * f) return;
    long long i = tid / f;
    int c = (int)(tid % f);
    long long s = seg_start[i];
    for (int wi = 0; wi < n_windows; ++wi) {
        long long start = i - windows[wi] + 1;
        if (start < s) start = s;
        double cnt = (double)(i - start + 1);
        double sum = 0.0, mx = -1.0e308;
        for (long long j = start; j <= i; ++j) { double v = (double)values[j * f + c]; sum += v; mx = v > mx ? v : mx; }
        double mean = sum / cnt, tmean = (cnt - 1.0) / 2.0, ss = 0.0, sxy = 0.0, sxx = 0.0;
        for (long long j = start; j <= i; ++j) {
            double d = (double)values[j * f + c] - mean, t = (double)(j - start) - tmean;
            ss += d * d; sxy += t * d; sxx += t * t;
        }
        long long o = ((i * f + c) * n_windows + wi) * 4;
        out[o] = (T)mean; out[o + 1] = (T)sqrt(ss / cnt); out[o + 2] = (T)mx;
        out[o + 3] = (T)(sxx > 0.0 ? sxy / sxx : 0.0);
    }
}
"""


def _kernel(dtype):
    import cupy as cp

    ctype = {np.dtype(np.float64): "double", np.dtype(np.float32): "float"}[np.dtype(dtype)]
    return cp.RawKernel(f"#define T {ctype}\n" + _SOURCE, "rolling_stats")


def rolling_stats_cuda(values, indptr, windows: tuple[int, ...], block: int = 256, out=None):
    """CuPy launcher: values [N, F] (device, float32/float64) -> [N, F, W, 4] on the device (into ``out``
    when given, e.g. a buffer poisoned with NaN by a test so unwritten rows show)."""
    import cupy as cp

    v = cp.ascontiguousarray(cp.asarray(values))
    if v.ndim == 1:
        v = v[:, None]
    n, f = v.shape
    ptr = cp.asarray(indptr, dtype=cp.int64)
    seg_start = _segment_starts(ptr, n)
    w = cp.asarray(np.asarray(windows, dtype=np.int32))
    if out is None:
        out = cp.empty((n, f, len(windows), 4), dtype=v.dtype)
    elif out.shape != (n, f, len(windows), 4) or out.dtype != v.dtype or not out.flags.c_contiguous:
        raise ValueError(f"out must be a C-contiguous {v.dtype} array of shape {(n, f, len(windows), 4)}")
    grid = (int(n * f + block - 1) // block,)
    _kernel(v.dtype)(grid, (block,), (v, seg_start, w, np.int32(len(windows)), np.int64(n), np.int32(f), out))
    return out


def _segment_starts(indptr, n: int):
    """seg_start[i] = indptr[segment of row i], computed on the device."""
    import cupy as cp

    seg = cp.searchsorted(indptr, cp.arange(n, dtype=indptr.dtype), side="right") - 1
    return indptr[seg]
