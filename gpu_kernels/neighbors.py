"""Neighbour aggregation over the topology in CSR form: gather-reduce (mean, max) per element.

Layout (feature-major, so each (feature, stat) is a contiguous [T, E] block):
values [F, T, E] (one snapshot per feature and timestamp), CSR (indptr[E+1], indices[nnz]) -> [F, 2, T, E].
NaN inputs (a missing sample) are skipped; an element with no valid neighbour gets 0 for both.
"""

from __future__ import annotations

import functools

import numpy as np

KERNEL_VERSION = "neighbors-2"
STATS = ("mean", "max")
BLOCK = 256
SHARED_BYTES = 48 * 1024


def neighbor_agg_reference(values: np.ndarray, indptr: np.ndarray, indices: np.ndarray) -> np.ndarray:
    values = np.asarray(values, dtype=np.float64)
    f, t, e = values.shape
    out = np.zeros((f, 2, t, e), dtype=np.float64)
    deg = np.diff(indptr)
    if len(indices) == 0:
        return out
    g = values[:, :, indices]  # [F, T, nnz]
    valid = ~np.isnan(g)
    starts = np.asarray(indptr[:-1])[deg > 0]
    s = np.add.reduceat(np.where(valid, g, 0.0), starts, axis=2)
    c = np.add.reduceat(valid.astype(np.float64), starts, axis=2)
    m = np.maximum.reduceat(np.where(valid, g, -np.inf), starts, axis=2)
    has = c > 0
    out[:, 0][..., deg > 0] = np.divide(s, c, out=np.zeros_like(s), where=has)
    out[:, 1][..., deg > 0] = np.where(has, m, 0.0)
    return out


_SOURCE = r"""
extern "C" __global__ void neighbor_agg(const T* __restrict__ values, const int* __restrict__ indptr,
                                        const int* __restrict__ indices, long long t, int e, int staged,
                                        T* __restrict__ out) {
    // One block per (timestamp, feature): the snapshot (e values) is staged in shared memory with coalesced
    // loads when it fits, then each thread gathers and reduces its elements' neighbours from there.
    extern __shared__ double snap[];
    const long long ts = blockIdx.x;
    const int c = blockIdx.y;
    const T* row = values + ((long long)c * t + ts) * e;
    if (staged) {
        for (int k = threadIdx.x; k < e; k += blockDim.x) snap[k] = (double)row[k];
        __syncthreads();
    }
    T* o_mean = out + ((long long)(2 * c) * t + ts) * e;
    T* o_max = out + ((long long)(2 * c + 1) * t + ts) * e;
    for (int node = threadIdx.x; node < e; node += blockDim.x) {
        double sum = 0.0, mx = -1.0e308, cnt = 0.0;
        const int hi = indptr[node + 1];
        for (int k = indptr[node]; k < hi; ++k) {
            const int j = indices[k];
            const double v = staged ? snap[j] : (double)row[j];
            if (v == v) { sum += v; cnt += 1.0; mx = v > mx ? v : mx; }
        }
        o_mean[node] = (T)(cnt > 0.0 ? sum / cnt : 0.0);
        o_max[node] = (T)(cnt > 0.0 ? mx : 0.0);
    }
}
"""


@functools.cache
def _kernel(dtype):
    import cupy as cp

    ctype = {np.dtype(np.float64): "double", np.dtype(np.float32): "float"}[np.dtype(dtype)]
    return cp.RawKernel(f"#define T {ctype}\n" + _SOURCE, "neighbor_agg")


def neighbor_agg_cuda(values, indptr, indices, out=None):
    """CuPy launcher: values [F, T, E] (device, float32/float64), CSR on host or device -> [F, 2, T, E]."""
    import cupy as cp

    v = cp.ascontiguousarray(cp.asarray(values))
    f, t, e = v.shape
    kern = _kernel(np.dtype(v.dtype))
    shape = (f, 2, t, e)
    if out is None:
        out = cp.empty(shape, dtype=v.dtype)
    elif out.shape != shape or out.dtype != v.dtype or not out.flags.c_contiguous:
        raise ValueError(f"out must be a C-contiguous {v.dtype} array of shape {shape}")
    if f == 0 or t == 0 or e == 0:
        return out
    if len(indices) >= 2**31:
        raise ValueError("the kernel indexes the CSR with int32; the topology has too many edges")
    staged = e * 8 <= SHARED_BYTES
    kern(
        (int(t), int(f)),
        (BLOCK,),
        (
            v,
            cp.asarray(indptr, dtype=cp.int32),
            cp.asarray(indices, dtype=cp.int32),
            np.int64(t),
            np.int32(e),
            np.int32(staged),
            out,
        ),
        shared_mem=e * 8 if staged else 0,
    )
    return out
