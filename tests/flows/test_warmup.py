"""The kernel warm-up's path on the CPU: the features stage, the training tensors and evaluation's rows and metrics
run on a synthetic network, and nothing is left behind (its GPU effect: tests/gpu_kernels/test_warmup_gpu.py)."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import pytest

from flows.cli import main
from tasks.core.schema import STEPS_PER_DAY
from tasks.warmup import WARM_DAYS, kernel_cache_dir


@pytest.mark.engine  # a Dask LocalCluster
def test_warmup_runs_the_gpu_paths_stages_on_a_tiny_network_and_cleans_up(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("CUPY_CACHE_DIR", str(tmp_path / "kernels"))
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "scratch"))
    (tmp_path / "scratch").mkdir()
    assert main(["warmup", "--profile", "local", "--json"]) == 0
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert result["gpu"] is False and result["tensor_device"] == "cpu"
    assert result["rows"] == result["samples"] == 37 * STEPS_PER_DAY * WARM_DAYS
    assert result["tensor_shape"][:2] == [STEPS_PER_DAY * WARM_DAYS, 37]  # [snapshots, elements, features]
    assert result["kernel_cache"] == str(kernel_cache_dir()) == str(tmp_path / "kernels")
    assert result["cached_kernels_before"] == result["cached_kernels_after"] == 0  # NumPy compiles nothing
    assert not list(Path(tmp_path / "scratch").glob("faultline-warmup-*"))  # the synthetic lake and outputs: gone
