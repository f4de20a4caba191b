import json

import numpy as np
import pytest

from tasks.core.metrics import classification_metrics, lead_times
from tasks.core.training.gpu_monitor import UtilizationSampler, summarise_utilization, top_kernels, training_windows


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


class _FakeNVML:
    """pynvml's surface the sampler uses: a driver buffer of utilization samples stamped in µs."""

    NVML_GPU_UTILIZATION_SAMPLES = 1

    def __init__(self, samples_per_poll: int = 6, value: int = 92) -> None:
        import time
        from types import SimpleNamespace

        self.ns, self.time, self.per_poll, self.value = SimpleNamespace, time, samples_per_poll, value

    def nvmlInit(self):
        pass

    def nvmlShutdown(self):
        pass

    def nvmlDeviceGetCount(self):
        return 1

    def nvmlDeviceGetHandleByIndex(self, i):
        return i

    def nvmlDeviceGetMemoryInfo(self, h):
        return self.ns(used=3 * 2**30)

    def nvmlDeviceGetSamples(self, h, kind, last):
        now = int(self.time.time() * 1e6)
        stamps = [now - 40_000 * k for k in range(self.per_poll)]  # the driver samples every ~40 ms
        return 1, [self.ns(timeStamp=t, sampleValue=self.ns(uiVal=self.value)) for t in sorted(stamps) if t > last]


def test_sampler_drains_the_drivers_sample_buffer(tmp_path, monkeypatch):
    import sys
    import time

    monkeypatch.setitem(sys.modules, "pynvml", _FakeNVML())
    start = time.time()
    with UtilizationSampler(tmp_path / "u.csv", interval=0.05) as s:
        time.sleep(0.5)
    out = s.summary([(start, time.time())])
    assert out["source"] == "nvmlDeviceGetSamples" and out["samples"] >= 12  # every 40-ms driver sample kept
    assert out["steady_mean"] == pytest.approx(92.0)
    assert out["sufficient"] is False  # half a second of training cannot be judged


def test_sufficient_evidence_needs_long_enough_windows():
    rows = [(t, 0, 90.0, 1.0) for t in np.arange(0, 60, 0.1)]
    assert summarise_utilization(rows, windows=[(5, 50)])["sufficient"] is True
    assert summarise_utilization(rows, windows=[(5, 9)])["sufficient"] is False
    assert summarise_utilization(rows, windows=None)["steady_mean"] is None


def test_kernel_busy_fraction_is_the_union_of_kernel_intervals(tmp_path):
    from tasks.core.training.gpu_monitor import kernel_busy_fraction

    trace = {
        "traceEvents": [
            {"ph": "X", "cat": "kernel", "name": "a", "ts": 0, "dur": 40},
            {"ph": "X", "cat": "kernel", "name": "b", "ts": 30, "dur": 20},  # overlaps a
            {"ph": "X", "cat": "kernel", "name": "c", "ts": 80, "dur": 20},
            {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "ts": 50, "dur": 30},
        ]
    }
    (tmp_path / "t.json").write_text(json.dumps(trace))
    assert kernel_busy_fraction(tmp_path / "t.json") == pytest.approx(70 / 100)
