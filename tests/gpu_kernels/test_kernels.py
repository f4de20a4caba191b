import numpy as np
import pandas as pd
import pytest

from gpu_kernels.neighbors import neighbor_agg_cuda, neighbor_agg_reference
from gpu_kernels.rolling import rolling_stats_cuda, rolling_stats_reference

SIZES = [1, 7, 300, 13, 2, 257]  # irregular, not multiples of the block size
WINDOWS = (3, 12, 36)


def _segments(rng):
    """values [F, N] (feature-major, the kernels' layout) and the segments' CSR row ranges."""
    indptr = np.r_[0, np.cumsum(SIZES)]
    return rng.normal(50, 10, size=(3, indptr[-1])), indptr


def _slope(a):
    return np.polyfit(np.arange(len(a)), a, 1)[0] if len(a) > 1 else 0.0


def test_rolling_reference_matches_pandas():
    rng = np.random.default_rng(1)
    x, indptr = _segments(rng)
    out = rolling_stats_reference(x, indptr, WINDOWS)
    assert out.shape == (3, len(WINDOWS), 4, x.shape[1])
    g = pd.DataFrame(x.T).groupby(np.repeat(np.arange(len(SIZES)), SIZES))
    for wi, w in enumerate(WINDOWS):
        r = g.rolling(w, min_periods=1)
        np.testing.assert_allclose(out[:, wi, 0].T, r.mean().to_numpy(), rtol=1e-12)
        np.testing.assert_allclose(out[:, wi, 1].T, r.std(ddof=0).to_numpy(), rtol=1e-9, atol=1e-12)
        np.testing.assert_allclose(out[:, wi, 2].T, r.max().to_numpy(), rtol=0)
        np.testing.assert_allclose(out[:, wi, 3].T, r.apply(_slope, raw=True).to_numpy(), rtol=1e-8, atol=1e-10)


def test_rolling_reference_in_blocks_is_the_same():
    """The bounded-memory blocked reference gives exactly the one-block result, across block edges."""
    rng = np.random.default_rng(5)
    x, indptr = _segments(rng)
    whole = rolling_stats_reference(x, indptr, WINDOWS, block=x.shape[1])
    for block in (1, 7, 35, 64):
        np.testing.assert_array_equal(rolling_stats_reference(x, indptr, WINDOWS, block=block), whole)


def test_neighbor_reference_matches_loop():
    rng = np.random.default_rng(2)
    e, t, f = 29, 5, 4
    nbrs = [sorted(set(rng.integers(0, e, rng.integers(0, 5)).tolist()) - {i}) for i in range(e)]
    indptr = np.r_[0, np.cumsum([len(n) for n in nbrs])]
    indices = np.array([j for n in nbrs for j in n], dtype=np.int64)
    x = rng.normal(size=(f, t, e))
    x[rng.random(x.shape) < 0.1] = np.nan  # missing samples are skipped
    out = neighbor_agg_reference(x, indptr, indices)
    assert out.shape == (f, 2, t, e)
    for ti in range(t):
        for i in range(e):
            for c in range(f):
                v = x[c, ti, nbrs[i]]
                v = v[~np.isnan(v)]
                assert out[c, 0, ti, i] == pytest.approx(v.mean() if len(v) else 0.0, rel=1e-12)
                assert out[c, 1, ti, i] == (v.max() if len(v) else 0.0)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype,rtol", [(np.float64, 1e-6), (np.float32, 1e-4)])
def test_rolling_cuda_matches_reference(dtype, rtol):
    import cupy as cp

    rng = np.random.default_rng(3)
    x, indptr = _segments(rng)
    ref = rolling_stats_reference(x.astype(dtype), indptr, WINDOWS)
    out = cp.full(ref.shape, cp.nan, dtype=dtype)  # poisoned: an unwritten output shows as NaN
    got = cp.asnumpy(rolling_stats_cuda(cp.asarray(x.astype(dtype)), cp.asarray(indptr), WINDOWS, out=out))
    assert not np.isnan(got).any()
    np.testing.assert_allclose(got, ref, rtol=rtol, atol=rtol)


@pytest.mark.gpu
def test_rolling_cuda_writes_only_the_rows_dest_names():
    """History rows (dest -1) are read by the windows but not written; the others land compacted, in order."""
    import cupy as cp

    rng = np.random.default_rng(6)
    x, indptr = _segments(rng)
    keep = rng.random(x.shape[1]) < 0.6
    ref = rolling_stats_reference(x, indptr, WINDOWS)[..., keep]
    dest = np.where(keep, np.cumsum(keep) - 1, -1)
    out = cp.full(ref.shape, cp.nan)  # poisoned
    got = rolling_stats_cuda(cp.asarray(x), cp.asarray(indptr), WINDOWS, out=out, dest=cp.asarray(dest), m=keep.sum())
    got = cp.asnumpy(got)
    assert not np.isnan(got).any()
    np.testing.assert_allclose(got, ref, rtol=1e-6, atol=1e-6)


@pytest.mark.gpu
def test_rolling_cuda_long_windows_and_many_features():
    """Windows longer than a block and more features than fit one block's shared memory."""
    import cupy as cp

    rng = np.random.default_rng(7)
    indptr = np.r_[0, np.cumsum([700, 3, 1200, 1])]
    x = rng.normal(10, 3, size=(23, indptr[-1]))
    windows = (2, 300, 1000)
    ref = rolling_stats_reference(x, indptr, windows)
    got = cp.asnumpy(rolling_stats_cuda(cp.asarray(x), cp.asarray(indptr), windows, out=cp.full(ref.shape, cp.nan)))
    assert not np.isnan(got).any()
    np.testing.assert_allclose(got, ref, rtol=1e-6, atol=1e-6)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype,rtol", [(np.float64, 1e-6), (np.float32, 1e-4)])
def test_neighbor_cuda_matches_reference(dtype, rtol):
    import cupy as cp

    rng = np.random.default_rng(4)
    e, t, f = 301, 7, 5
    deg = rng.integers(0, 6, e)
    indptr = np.r_[0, np.cumsum(deg)]
    indices = rng.integers(0, e, indptr[-1])
    x = rng.normal(size=(f, t, e)).astype(dtype)
    x[rng.random(x.shape) < 0.05] = np.nan
    ref = neighbor_agg_reference(x, indptr, indices)
    out = cp.full(ref.shape, cp.nan, dtype=dtype)  # poisoned
    got = cp.asnumpy(neighbor_agg_cuda(cp.asarray(x), indptr, indices, out=out))
    assert not np.isnan(got).any()
    np.testing.assert_allclose(got, ref, rtol=rtol, atol=rtol)


@pytest.mark.gpu
def test_neighbor_cuda_large_topology_reads_global_memory():
    """A snapshot too large for shared memory takes the global-memory path, with the same results."""
    import cupy as cp

    rng = np.random.default_rng(8)
    e, t, f = 9000, 3, 2
    deg = rng.integers(0, 5, e)
    indptr = np.r_[0, np.cumsum(deg)]
    indices = rng.integers(0, e, indptr[-1])
    x = rng.normal(size=(f, t, e))
    ref = neighbor_agg_reference(x, indptr, indices)
    got = cp.asnumpy(neighbor_agg_cuda(cp.asarray(x), indptr, indices, out=cp.full(ref.shape, cp.nan)))
    np.testing.assert_allclose(got, ref, rtol=1e-6, atol=1e-6)
