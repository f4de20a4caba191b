"""The GPUs' energy per stage from NVML (a fake NVML here: the counter, the samples, none at all)."""

from __future__ import annotations

import sys
import time
import types

import pytest

from tasks.core.energy import EnergyMeter, integrate, plot_energy, run_energy


def fake_nvml(counter: bool, watts: float = 300.0, gpus: int = 2):
    """A pynvml whose GPUs draw ``watts`` each; the energy counter (mJ) advances at that rate where ``counter``."""
    t0 = time.time()
    m = types.SimpleNamespace(nvmlInit=lambda: None, nvmlShutdown=lambda: None)
    m.nvmlDeviceGetCount = lambda: gpus
    m.nvmlDeviceGetHandleByIndex = lambda i: i

    def energy(h):
        if not counter:
            raise RuntimeError("Not Supported")
        return int(1_000_000 + (time.time() - t0) * watts * 1000)

    m.nvmlDeviceGetTotalEnergyConsumption = energy
    m.nvmlDeviceGetPowerUsage = lambda h: int(watts * 1000)
    return m


@pytest.mark.parametrize("counter", [True, False])
def test_a_stage_s_energy_is_its_seconds_times_its_power(monkeypatch, counter):
    monkeypatch.setitem(sys.modules, "pynvml", fake_nvml(counter))
    with EnergyMeter(interval=0.05) as meter:
        time.sleep(0.6)
    r = meter.result()
    assert r["available"] and r["gpus"] == 2
    assert r["source"] == (
        "nvmlDeviceGetTotalEnergyConsumption" if counter else "nvmlDeviceGetPowerUsage samples, integrated"
    )
    assert r["joules"] == pytest.approx(600 * r["seconds"], rel=0.15)  # 2 GPUs x 300 W
    assert r["peak_power_w"] == 600.0
    assert len(meter.samples) >= 5


def test_a_cpu_host_says_why_and_gives_no_figure(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", None)  # import fails, as where nvidia-ml-py is not installed
    with EnergyMeter() as meter:
        pass
    assert meter.result() == {"available": False, "reason": "pynvml (nvidia-ml-py) not installed"}
    total = run_energy({"train": meter.result(), "evaluate": None}, 1_000_000)
    assert total == {"available": False, "reason": "pynvml (nvidia-ml-py) not installed"}


def test_the_run_sums_its_stages_per_million_rows_and_plots_them(tmp_path):
    stages = {
        "validate": {"available": False, "reason": "CPU Spark"},
        "features": {"available": True, "joules": 2000.0, "mean_power_w": 200.0},
        "train": {"available": True, "joules": 18000.0, "mean_power_w": 600.0},
    }
    total = run_energy(stages, 4_000_000)
    assert total == {
        "available": True,
        "stages_j": {"features": 2000.0, "train": 18000.0},
        "total_j": 20000.0,
        "joules_per_million_rows": 5000.0,
    }
    curves = {"train": [(100.0, 300.0), (101.0, 600.0), (102.0, 600.0)]}
    assert integrate(curves["train"]) == 1050.0
    png = plot_energy(stages, curves, tmp_path / "e.png", "1x H100")
    assert png.is_file() and png.stat().st_size > 10_000
    assert plot_energy({"validate": stages["validate"]}, {}, tmp_path / "none.png") is None
