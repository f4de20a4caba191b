import numpy as np
import pandas as pd
import pytest

from gpu_kernels.neighbors import neighbor_agg_cuda, neighbor_agg_reference
from gpu_kernels.rolling import rolling_stats_cuda, rolling_stats_reference

SIZES = [1, 7, 300, 13, 2, 257]  # irregular, not multiples of the block size
WINDOWS = (3, 12, 36)


def _segments(rng):
    indptr = np.r_[0, np.cumsum(SIZES)]
    return rng.normal(50, 10, size=(indptr[-1], 3)), indptr


def _slope(a):
    return np.polyfit(np.arange(len(a)), a, 1)[0] if len(a) > 1 else 0.0


def test_rolling_reference_matches_pandas():
    rng = np.random.default_rng(1)
    x, indptr = _segments(rng)
    out = rolling_stats_reference(x, indptr, WINDOWS)
    g = pd.DataFrame(x).groupby(np.repeat(np.arange(len(SIZES)), SIZES))
    for wi, w in enumerate(WINDOWS):
        r = g.rolling(w, min_periods=1)
        np.testing.assert_allclose(out[:, :, wi, 0], r.mean().to_numpy(), rtol=1e-12)
        np.testing.assert_allclose(out[:, :, wi, 1], r.std(ddof=0).to_numpy(), rtol=1e-9, atol=1e-12)
        np.testing.assert_allclose(out[:, :, wi, 2], r.max().to_numpy(), rtol=0)
        np.testing.assert_allclose(out[:, :, wi, 3], r.apply(_slope, raw=True).to_numpy(), rtol=1e-8, atol=1e-10)


def test_rolling_reference_in_blocks_is_the_same():
    """The bounded-memory blocked reference gives exactly the one-block result, across block edges."""
    rng = np.random.default_rng(5)
    x, indptr = _segments(rng)
    whole = rolling_stats_reference(x, indptr, WINDOWS, block=len(x))
    for block in (1, 7, 35, 64):
        np.testing.assert_array_equal(rolling_stats_reference(x, indptr, WINDOWS, block=block), whole)


def test_neighbor_reference_matches_loop():
    rng = np.random.default_rng(2)
    e, t, f = 29, 5, 4
    nbrs = [sorted(set(rng.integers(0, e, rng.integers(0, 5)).tolist()) - {i}) for i in range(e)]
    indptr = np.r_[0, np.cumsum([len(n) for n in nbrs])]
    indices = np.array([j for n in nbrs for j in n], dtype=np.int64)
    x = rng.normal(size=(t, e, f))
    x[rng.random(x.shape) < 0.1] = np.nan  # missing samples are skipped
    out = neighbor_agg_reference(x, indptr, indices)
    for ti in range(t):
        for i in range(e):
            vals = x[ti, nbrs[i], :]
            for c in range(f):
                v = vals[:, c][~np.isnan(vals[:, c])]
                assert out[ti, i, c, 0] == pytest.approx(v.mean() if len(v) else 0.0, rel=1e-12)
                assert out[ti, i, c, 1] == (v.max() if len(v) else 0.0)


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
@pytest.mark.parametrize("dtype,rtol", [(np.float64, 1e-6), (np.float32, 1e-4)])
def test_neighbor_cuda_matches_reference(dtype, rtol):
    import cupy as cp

    rng = np.random.default_rng(4)
    e, t, f = 301, 7, 5
    deg = rng.integers(0, 6, e)
    indptr = np.r_[0, np.cumsum(deg)]
    indices = rng.integers(0, e, indptr[-1])
    x = rng.normal(size=(t, e, f)).astype(dtype)
    ref = neighbor_agg_reference(x, indptr, indices)
    out = cp.full(ref.shape, cp.nan, dtype=dtype)  # poisoned
    got = cp.asnumpy(neighbor_agg_cuda(cp.asarray(x), indptr, indices, out=out))
    assert not np.isnan(got).any()
    np.testing.assert_allclose(got, ref, rtol=rtol, atol=rtol)
