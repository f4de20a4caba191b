"""Evaluation on the GPU (device only): the rows read through cuDF, the tree fitted and predicted on CuPy arrays,
and the metrics computed with CuPy, against the host path."""

from __future__ import annotations

import numpy as np
import pytest

from tests.core.stages.test_evaluate_metrics import NAMES, TOPO, _held_out_files

pytestmark = pytest.mark.gpu


def test_rows_read_into_gpu_memory_equal_the_host_read(tmp_path):
    pytest.importorskip("cudf")
    from tasks.core.stages.evaluate import read_rows

    _held_out_files(tmp_path)
    host_df, host_x = read_rows(tmp_path, NAMES, TOPO, gpu=False)
    gpu_df, gpu_x = read_rows(tmp_path, NAMES, TOPO, gpu=True)
    assert type(gpu_x).__module__.startswith("cupy") and gpu_x.dtype == np.float32
    np.testing.assert_array_equal(gpu_x.get(), host_x)
    assert list(gpu_df.columns) == list(host_df.columns)
    for c in host_df.columns:
        np.testing.assert_array_equal(gpu_df[c].to_numpy(), host_df[c].to_numpy(), err_msg=c)


def test_metrics_with_cupy_equal_numpys():
    cupy = pytest.importorskip("cupy")
    from tasks.core.metrics import classification_metrics, pr_auc

    rng = np.random.default_rng(1)
    y = (rng.random(200_000) < 0.05).astype(int)
    s = np.round(rng.random(200_000) + 0.3 * y, 3)  # ties
    host, dev = classification_metrics(y, s, 0.8), classification_metrics(cupy.asarray(y), cupy.asarray(s), 0.8)
    assert host.keys() == dev.keys()
    for k in host:
        assert dev[k] == pytest.approx(host[k], rel=1e-9), k
    assert pr_auc(cupy.asarray(y), cupy.asarray(s)) == pytest.approx(host["pr_auc"], rel=1e-9)


def test_the_tree_fits_and_predicts_on_gpu_arrays():
    cupy = pytest.importorskip("cupy")
    from tasks.core.stages.baselines import fit_tree

    rng = np.random.default_rng(0)
    x = rng.normal(size=(20_000, 3)).astype(np.float32)
    y = (x[:, 0] + 0.5 * x[:, 1] * x[:, 2] + rng.normal(0, 0.5, len(x)) > 1).astype(int)
    val = np.arange(len(x)) >= 15_000
    xd = cupy.asarray(x)
    tree = fit_tree(xd[cupy.asarray(~val)], y[~val], xd[cupy.asarray(val)], y[val], seed=0, device="cuda")
    assert tree.device == "cuda" and tree.val_aucpr > 0.8
    np.testing.assert_allclose(tree.predict_proba(xd), tree.predict_proba(x), rtol=1e-5, atol=1e-6)


def test_alert_quality_on_gpu_grids_equals_the_hosts():
    cupy = pytest.importorskip("cupy")
    import pandas as pd

    from tasks.core.config import EvaluateConfig
    from tasks.core.stages.evaluate import validated_alerts

    rng = np.random.default_rng(3)
    steps, n_e = 400, 50
    t, e = np.meshgrid(np.arange(steps), np.arange(n_e), indexing="ij")
    in_fault = (rng.random((steps, n_e)) < 0.03).astype(np.int8)
    rows = pd.DataFrame({"label": (rng.random(steps * n_e) < 0.05).astype(int), "in_fault": in_fault.ravel()})
    scores = {k: rng.random(steps * n_e) for k in ("model", "tree", "rule")}
    args = (rows, (t.ravel(), e.ravel(), n_e), scores, {"val": (0, 200), "test": (200, 400)}, 6, 5.0)
    cfg = EvaluateConfig(false_alerts_per_element_day=20.0)
    host = validated_alerts(*args, cfg)
    gpu = validated_alerts(*args, cfg, cupy)
    for name in scores:
        for k, v in host[name].items():
            assert gpu[name][k] == pytest.approx(v, rel=1e-9, nan_ok=True), (name, k)
