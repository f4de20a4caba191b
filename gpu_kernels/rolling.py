"""Segmented rolling-window statistics: mean, std, max and slope over several windows in one pass.

Rows are sorted by (segment, time); ``indptr`` gives each segment's row range (CSR style). For row i
of a segment starting at s, the window for span w covers rows max(s, i-w+1)..i (fewer rows at the start
of a segment). std is the population std (ddof=0); slope is the least-squares slope per sample step.

Layout (column-major, so every output column is one contiguous run that a DataFrame can take as is):
values [F, N] -> out [F, len(windows), 4, N].

``rolling_stats_reference`` is the NumPy reference; ``rolling_stats_cuda`` launches the CUDA kernel on
CuPy arrays or anything with ``__cuda_array_interface__`` (cuDF columns), with no host copies.
"""

from __future__ import annotations

import functools

import numpy as np

KERNEL_VERSION = "rolling-2"
STATS = ("mean", "std", "max", "slope")
BLOCK = 256
SHARED_BYTES = 48 * 1024  # static shared-memory budget per block (no opt-in needed on any CUDA GPU)
MAX_WINDOW = SHARED_BYTES // 8 - BLOCK + 1  # one feature's tile (block rows + the longest window) must fit


def rolling_stats_reference(
    values: np.ndarray, indptr: np.ndarray, windows: tuple[int, ...], block: int = 1 << 16
) -> np.ndarray:
    """values [F, N] -> out [F, W, 4, N] (float64). Works in row blocks (with the longest window's rows
    before each block as context), so memory stays bounded; each row's arithmetic is the same."""
    values = np.asarray(values, dtype=np.float64)
    if values.ndim == 1:
        values = values[None, :]
    f, n = values.shape
    out = np.empty((f, len(windows), len(STATS), n), dtype=np.float64)
    seg_start = np.repeat(np.asarray(indptr[:-1]), np.diff(indptr))
    context = max(windows) - 1
    rows = values.T
    for lo in range(0, n, block):
        hi = min(n, lo + block)
        ctx = max(0, lo - context)
        part = _reference_block(rows[ctx:hi], np.maximum(seg_start[ctx:hi] - ctx, 0), windows)
        out[..., lo:hi] = part[..., lo - ctx :]
    return out


def _reference_block(values: np.ndarray, seg_start: np.ndarray, windows: tuple[int, ...]) -> np.ndarray:
    """values [n, F] (rows) -> [F, W, 4, n]."""
    n, f = values.shape
    out = np.empty((f, len(windows), len(STATS), n), dtype=np.float64)
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
        for si, stat in enumerate((mean, std, mx, slope)):
            out[:, wi, si, :] = stat.T
    return out


_SOURCE = r"""
extern "C" __global__ void rolling_stats(const T* __restrict__ values, const long long* __restrict__ indptr,
                                         long long n_seg, const long long* __restrict__ dest, int has_dest,
                                         const int* __restrict__ windows, int n_windows, int max_w,
                                         long long n, int f, int fb, long long m,
                                         T* __restrict__ out) {
    // A block owns BLOCK consecutive rows of fb features. Those rows plus the longest window before them are
    // staged once in shared memory (coalesced), so each input value comes from DRAM about once. Each thread
    // then sweeps its row's window backwards once, for all windows (sorted ascending, nested), keeping shifted
    // sums (y = x - x_i): sum y, sum y^2, sum k*y and the max. Writes are column-major: thread i of a block
    // writes element dest[i] of each output column, so a warp's stores are contiguous.
    extern __shared__ double tile[];
    const int span = blockDim.x + max_w - 1;
    const long long i0 = (long long)blockIdx.x * blockDim.x, base = i0 - (max_w - 1);
    const int c0 = blockIdx.y * fb, nf = min(fb, f - c0);
    for (int q = threadIdx.x; q < nf * span; q += blockDim.x) {
        const int cc = q / span;
        const long long r = base + (q - cc * span);
        tile[q] = (r >= 0 && r < n) ? (double)values[(long long)(c0 + cc) * n + r] : 0.0;
    }
    __syncthreads();
    const long long i = i0 + threadIdx.x;
    if (i >= n) return;
    const long long d = has_dest ? dest[i] : i;
    if (d < 0) return;
    long long lo = 0, hi = n_seg;  // the row's segment: the last s with indptr[s] <= i (indptr sits in L2)
    while (hi - lo > 1) {
        const long long mid = (lo + hi) >> 1;
        if (indptr[mid] <= i) lo = mid; else hi = mid;
    }
    const long long avail_ll = i - indptr[lo] + 1;
    const int avail = avail_ll < (long long)max_w ? (int)avail_ll : max_w;
    for (int cc = 0; cc < nf; ++cc) {
        const double* x = tile + cc * span + (int)(i - base);  // x[-k] is row i-k
        const double shift = x[0];
        double s1 = 0.0, s2 = 0.0, sk = 0.0, mx = -1.0e308;
        int k = 0;
        for (int wi = 0; wi < n_windows; ++wi) {
            const int cnt = windows[wi] < avail ? windows[wi] : avail;
            for (; k < cnt; ++k) {
                const double v = x[-k], y = v - shift;
                s1 += y; s2 += y * y; sk += (double)k * y; mx = v > mx ? v : mx;
            }
            const double nn = (double)cnt, ybar = s1 / nn;
            double var = s2 / nn - ybar * ybar;
            var = var > 0.0 ? var : 0.0;
            // slope: sum t*(y - ybar) / sum (t - tbar)^2 with t = cnt-1-k (0 at the window's oldest row)
            const double sty = (nn - 1.0) * s1 - sk, sxx = nn * (nn * nn - 1.0) / 12.0;
            const double sxy = sty - ybar * nn * (nn - 1.0) / 2.0;
            T* o = out + ((long long)((c0 + cc) * n_windows + wi) * 4) * m + d;
            o[0] = (T)(shift + ybar); o[m] = (T)sqrt(var); o[2 * m] = (T)mx;
            o[3 * m] = (T)(sxx > 0.0 ? sxy / sxx : 0.0);
        }
    }
}
"""


@functools.cache
def _kernel(dtype):
    import cupy as cp

    ctype = {np.dtype(np.float64): "double", np.dtype(np.float32): "float"}[np.dtype(dtype)]
    return cp.RawKernel(f"#define T {ctype}\n" + _SOURCE, "rolling_stats")


def rolling_stats_cuda(values, indptr, windows: tuple[int, ...], out=None, dest=None, m: int | None = None):
    """CuPy launcher: values [F, N] (device, float32/float64) -> [F, W, 4, M] on the device.

    ``dest`` (optional, int64 [N]) says where each row's results go (-1: not written), e.g. only the rows of
    the day being computed when the rows before it are there as history; ``m`` is then the output length.
    ``out`` may be given (e.g. a buffer poisoned with NaN by a test so unwritten rows show)."""
    import cupy as cp

    v = cp.ascontiguousarray(cp.asarray(values))
    if v.ndim == 1:
        v = v[None, :]
    f, n = v.shape
    ws = tuple(int(w) for w in windows)
    if list(ws) != sorted(set(ws)):
        raise ValueError(f"windows must be distinct and ascending, got {ws}")
    if max(ws) > MAX_WINDOW:
        raise ValueError(f"the longest window ({max(ws)} samples) exceeds the kernel's {MAX_WINDOW}")
    m = n if m is None else int(m)
    if dest is not None:
        dest = cp.asarray(dest, dtype=cp.int64)
        if dest.shape != (n,):
            raise ValueError(f"dest must have one entry per row ({n}), got shape {dest.shape}")
    elif m != n:
        raise ValueError("m differs from the row count but no dest says where rows go")
    shape = (f, len(ws), 4, m)
    if out is None:
        out = cp.empty(shape, dtype=v.dtype)
    elif out.shape != shape or out.dtype != v.dtype or not out.flags.c_contiguous:
        raise ValueError(f"out must be a C-contiguous {v.dtype} array of shape {shape}")
    if n == 0 or f == 0:
        return out
    ptr = cp.asarray(indptr, dtype=cp.int64)
    span = BLOCK + max(ws) - 1
    fb = max(1, min(f, SHARED_BYTES // (span * 8)))
    grid = ((n + BLOCK - 1) // BLOCK, (f + fb - 1) // fb)
    args = (
        v,
        ptr,
        np.int64(len(ptr) - 1),
        dest if dest is not None else cp.zeros(1, dtype=cp.int64),
        np.int32(dest is not None),
        cp.asarray(np.asarray(ws, dtype=np.int32)),
        np.int32(len(ws)),
        np.int32(max(ws)),
        np.int64(n),
        np.int32(f),
        np.int32(fb),
        np.int64(m),
        out,
    )
    _kernel(np.dtype(v.dtype))(grid, (BLOCK,), args, shared_mem=fb * span * 8)
    return out
