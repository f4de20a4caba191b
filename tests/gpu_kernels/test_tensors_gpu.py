"""The training tensors built on the GPU (cuDF, handed to torch through DLPack) against the host build (device
only)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from tests.core.training.test_tensors import NAMES, _features

pytestmark = pytest.mark.gpu


def test_the_gpu_build_equals_the_host_build(tmp_path):
    pytest.importorskip("cudf")
    from tasks.core.training.frame_tensors import as_torch, build, write_recipe
    from tasks.core.training.tensors import prepare_tensors

    topo, _ = _features(tmp_path, np.random.default_rng(0), n_t=400)
    (tmp_path / "topology.json").write_text(json.dumps(topo.to_json()))
    prepare_tensors(tmp_path / "features", topo, NAMES, 3, 0.25, tmp_path / "host.npz")
    host = np.load(tmp_path / "host.npz")
    (tmp_path / "train").mkdir()
    recipe = write_recipe(tmp_path / "train", tmp_path / "features", NAMES, 3, 0.25, "real", 0, 60.0)
    arrays, info = build(recipe, gpu=True)
    assert info["tensor_device"] == "cuda"
    x = as_torch(arrays["X"], "cuda")
    assert x.is_cuda and x.data_ptr() == arrays["X"].data.ptr  # shared through DLPack, not copied
    np.testing.assert_allclose(x.cpu().numpy(), host["X"], atol=1e-5)
    for k in ("y", "mask"):
        np.testing.assert_array_equal(arrays[k].get(), host[k])
    for k in ("ttf", "times", "train_t", "val_t", "test_t", "indptr", "indices", "label_steps"):
        np.testing.assert_array_equal(arrays[k], host[k], err_msg=k)
    np.testing.assert_allclose(arrays["mean"], host["mean"], rtol=1e-9)
    np.testing.assert_allclose(arrays["std"], host["std"], rtol=1e-9)
