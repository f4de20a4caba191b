"""The whole features stage on dask-cuda + cuDF against the CPU stage on the same Parquet (device only)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

pytestmark = pytest.mark.gpu


def _run(lake, out, backend):
    from tasks.core.config import load_config
    from tasks.core.runtime import dask_cluster, dask_spec, detect_hardware
    from tasks.core.stages.features import build_features
    from tasks.core.topology import Topology

    cfg = load_config("gpu" if backend == "cudf" else "local").features
    update = {"backend": backend, "cluster": "cuda" if backend == "cudf" else "local", "store_dtype": "float64"}
    cfg = cfg.model_copy(update=update)
    with dask_cluster(dask_spec(cfg, backend, detect_hardware())) as client:
        summary = build_features(client, lake, Topology.read(lake / "topology.json"), cfg, backend, out)
    return summary, pd.read_parquet(out / "features").sort_values(["element_id", "timestamp"]).reset_index(drop=True)


def test_gpu_stage_matches_cpu_stage(tmp_path):
    from tasks.core.benchmarks.lakes import synthetic_lake

    lake = tmp_path / "lake"
    synthetic_lake(lake, "topozoo/Geant2012", 37 * 288 * 3)
    s_cpu, cpu = _run(lake, tmp_path / "cpu", "pandas")
    s_gpu, gpu = _run(lake, tmp_path / "gpu", "cudf")
    assert s_cpu == s_gpu and len(cpu) == len(gpu) == 37 * 288 * 3
    assert list(cpu.columns) == list(gpu.columns)
    assert (cpu["element_id"].astype(str) == gpu["element_id"].astype(str)).all()
    utc = lambda ts: (ts.dt.tz_convert(None) if getattr(ts.dtype, "tz", None) else ts).astype("datetime64[us]")
    assert (utc(cpu["timestamp"]) == utc(gpu["timestamp"])).all()
    worst = {}
    for col in cpu.columns[2:]:
        a, b = cpu[col].to_numpy(np.float64), gpu[col].to_numpy(np.float64)
        assert (np.isnan(a) == np.isnan(b)).all(), col
        m = ~np.isnan(a)
        worst[col] = float(np.max(np.abs(a[m] - b[m]) / np.maximum(np.abs(a[m]), 1.0))) if m.any() else 0.0
    print("worst relative error per column:", max(worst.values()), max(worst, key=worst.get))
    assert max(worst.values()) <= 1e-6, {k: v for k, v in worst.items() if v > 1e-6}


def test_a_worker_is_primed_on_cudf_with_the_kernels_loaded():
    pytest.importorskip("cudf")
    from tasks.core.stages.features import prime_worker

    assert 0 < prime_worker("cudf") < 60
