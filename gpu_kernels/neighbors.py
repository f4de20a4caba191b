"""Neighbour aggregation over the topology in CSR form: gather-reduce (mean, max) per element.

values [T, E, F] (one snapshot per timestamp), CSR (indptr[E+1], indices[nnz]) -> [T, E, F, 2].
NaN inputs (a missing sample) are skipped; an element with no valid neighbour gets 0 for both.
"""

from __future__ import annotations

import numpy as np

KERNEL_VERSION = "neighbors-1"
STATS = ("mean", "max")


def neighbor_agg_reference(values: np.ndarray, indptr: np.ndarray, indices: np.ndarray) -> np.ndarray:
    values = np.asarray(values, dtype=np.float64)
    t, e, f = values.shape
    out = np.zeros((t, e, f, 2), dtype=np.float64)
    deg = np.diff(indptr)
    if len(indices) == 0:
        return out
    g = values[:, indices, :]  # [T, nnz, F]
    valid = ~np.isnan(g)
    starts = np.asarray(indptr[:-1])[deg > 0]
    s = np.add.reduceat(np.where(valid, g, 0.0), starts, axis=1)
    c = np.add.reduceat(valid.astype(np.float64), starts, axis=1)
    m = np.maximum.reduceat(np.where(valid, g, -np.inf), starts, axis=1)
    has = c > 0
    mean, mx = np.zeros((t, e, f)), np.zeros((t, e, f))
    mean[:, deg > 0, :] = np.divide(s, c, out=np.zeros_like(s), where=has)
    mx[:, deg > 0, :] = np.where(has, m, 0.0)
    out[..., 0], out[..., 1] = mean, mx
    return out


_SOURCE = r"""
extern "C" __global__ void neighbor_agg(const T* __restrict__ values, const long long* __restrict__ indptr,
                                        const long long* __restrict__ indices, long long t, long long e, int f,
                                        T* __restrict__ out) {
    // one thread per (timestamp, element, feature): gather the neighbours' values, reduce mean and max.
    long long tid = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (tid >= t * e * f) return;
    int c = (int)(tid % f);
    long long node = (tid / f) % e, ts = tid / (f * e);
    double sum = 0.0, mx = -1.0e308, cnt = 0.0;
    for (long long k = indptr[node]; k < indptr[node + 1]; ++k) {
        double v = (double)values[(ts * e + indices[k]) * f + c];
        if (v == v) { sum += v; cnt += 1.0; mx = v > mx ? v : mx; }
    }
    out[tid * 2] = (T)(cnt > 0.0 ? sum / cnt : 0.0);
    out[tid * 2 + 1] = (T)(cnt > 0.0 ? mx : 0.0);
}
"""


def neighbor_agg_cuda(values, indptr, indices, block: int = 256, out=None):
    import cupy as cp

    v = cp.ascontiguousarray(cp.asarray(values))
    t, e, f = v.shape
    ctype = {np.dtype(np.float64): "double", np.dtype(np.float32): "float"}[np.dtype(v.dtype)]
    kern = cp.RawKernel(f"#define T {ctype}\n" + _SOURCE, "neighbor_agg")
    if out is None:
        out = cp.empty((t, e, f, 2), dtype=v.dtype)
    elif out.shape != (t, e, f, 2) or out.dtype != v.dtype or not out.flags.c_contiguous:
        raise ValueError(f"out must be a C-contiguous {v.dtype} array of shape {(t, e, f, 2)}")
    grid = (int(t * e * f + block - 1) // block,)
    kern(
        grid,
        (block,),
        (
            v,
            cp.asarray(indptr, dtype=cp.int64),
            cp.asarray(indices, dtype=cp.int64),
            np.int64(t),
            np.int64(e),
            np.int32(f),
            out,
        ),
    )
    return out
