"""The warm-up fills CuPy's kernel cache with what the GPU path compiles, whatever the network's size (device only)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

pytestmark = pytest.mark.gpu

AGAIN = """
import json, sys, tempfile
from pathlib import Path
from tasks.warmup import cached_kernels, _features, _tensors_and_metrics
import tasks.warmup as w
w.WARM_TOPOLOGY, w.WARM_DAYS = "sndlib/polska", 3  # another network and span than the warm-up's
before = cached_kernels()
cfg, summary, out = _features(Path(tempfile.mkdtemp()), "gpu", True)
_tensors_and_metrics(cfg, summary, out, True)
print(json.dumps({"before": before, "after": cached_kernels()}))
"""


def test_a_warm_cache_compiles_nothing_for_another_network(tmp_path):
    pytest.importorskip("cudf")
    env = {**os.environ, "CUPY_CACHE_DIR": str(tmp_path / "kernels")}
    warm = subprocess.run([sys.executable, "-m", "flows.cli", "warmup", "--json"], env=env, capture_output=True,
                          text=True, timeout=600)  # fmt: skip
    assert warm.returncode == 0, warm.stderr[-3000:]
    result = json.loads(warm.stdout.strip().splitlines()[-1])
    assert result["gpu"] and result["tensor_device"] == "cuda"
    assert result["cached_kernels_before"] == 0 and result["cached_kernels_after"] > 0
    again = subprocess.run([sys.executable, "-c", AGAIN], env=env, capture_output=True, text=True, timeout=600)
    assert again.returncode == 0, again.stderr[-3000:]
    counts = json.loads(again.stdout.strip().splitlines()[-1])
    print("kernels after the warm-up:", result["cached_kernels_after"], "after another network:", counts["after"])
    assert counts["before"] == counts["after"] == result["cached_kernels_after"]
