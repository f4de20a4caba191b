"""The features benchmark's inputs and baselines on CPU: the synthetic lake goes through the real stage,
and the pandas-in-one-process baseline computes exactly what the Dask stage computes."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd

from tasks.core.bench_features import bench_features
from tasks.core.config import load_config


def test_features_bench_on_cpu(tmp_path):
    cfg = load_config("local").features
    res = bench_features(tmp_path, cfg, 11 * 288 * 2, None, topology="topozoo/Abilene", keep_outputs=True)
    assert res["rows"] == 11 * 288 * 2 and res["pandas"]["rows"] == res["rows"]
    assert res["pandas"]["extrapolated"] is False and res["dask_cpu"]["rows"] == res["rows"]
    assert res["gpu"] is None and res["dask_cpu_vs_pandas"] > 0
    json.dumps(res)  # what the CLI writes
    a = pd.read_parquet(tmp_path / "out-pandas").sort_values(["element_id", "timestamp"]).reset_index(drop=True)
    b = pd.read_parquet(tmp_path / "out-dask" / "features").sort_values(["element_id", "timestamp"])
    b = b.reset_index(drop=True)[a.columns]
    for col in a.columns[2:]:
        np.testing.assert_array_equal(a[col].to_numpy(np.float64), b[col].to_numpy(np.float64), err_msg=col)
    assert a["label"].sum() > 0 and (a["in_fault"] == 1).any()  # the synthetic faults reach the labels
