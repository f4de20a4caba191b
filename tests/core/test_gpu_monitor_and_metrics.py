import json

import numpy as np
import pytest

from tasks.core.gpu_monitor import UtilizationSampler, summarise_utilization, top_kernels, training_windows
from tasks.core.metrics import classification_metrics, lead_times


def test_steady_state_uses_training_windows():
    rows = [(t, 0, 0.0 if t < 10 or 20 < t < 22 else 97.0, 1.0) for t in np.arange(0, 40, 0.5)]
    s = summarise_utilization(rows, windows=[(10, 20), (22, 38)])
    assert s["steady_mean"] == pytest.approx(97.0) and s["mean"] < 80
    assert summarise_utilization([], "no NVML")["available"] is False


def test_sampler_without_nvml_says_why(tmp_path):
    with UtilizationSampler(tmp_path / "u.csv", interval=0.05) as s:
        pass
    out = s.summary()
    assert out["available"] is False and out["reason"]
    assert (tmp_path / "u.csv").read_text().startswith("t_s,gpu")


def test_training_windows_skip_the_first_epoch(tmp_path):
    (tmp_path / "history.json").write_text(json.dumps([{"t_start": 1, "t_end": 2}, {"t_start": 3, "t_end": 4}]))
    assert training_windows(tmp_path) == [(3, 4)]


def test_top_kernels_ranks_cuda_kernels(tmp_path):
    trace = {
        "traceEvents": [
            {"ph": "X", "cat": "kernel", "name": "gemm", "dur": 30},
            {"ph": "X", "cat": "kernel", "name": "gemm", "dur": 20},
            {"ph": "X", "cat": "kernel", "name": "gather", "dur": 10},
            {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "dur": 99},
        ]
    }
    (tmp_path / "t.json").write_text(json.dumps(trace))
    assert top_kernels(tmp_path / "t.json") == [
        {"kernel": "gemm", "total_us": 50.0, "calls": 2},
        {"kernel": "gather", "total_us": 10.0, "calls": 1},
    ]


def test_classification_metrics_on_a_known_case():
    y = np.array([0, 0, 1, 1, 0, 1])
    s = np.array([0.1, 0.2, 0.8, 0.7, 0.3, 0.9])
    m = classification_metrics(y, s, 0.9)
    assert m["pr_auc"] == pytest.approx(1.0) and m["roc_auc"] == pytest.approx(1.0)
    assert m["f1"] == pytest.approx(1.0) and m["recall_at_p90"] == pytest.approx(1.0)
    worse = classification_metrics(y, s[::-1], 0.9)
    assert worse["pr_auc"] < 0.7


def test_lead_time_is_the_earliest_warning_per_fault():
    minutes = np.array([15.0, 10.0, 5.0, 20.0, 5.0, np.nan])
    key = np.array(["a", "a", "a", "b", "b", "c"])
    alerted = np.array([False, True, True, True, True, True])
    assert list(lead_times(minutes, key, alerted)) == [10.0, 20.0]
