"""The GPUs' energy and power while a stage computes, from NVML.

The energy is the driver's own counter (``nvmlDeviceGetTotalEnergyConsumption``, millijoules since the driver
loaded; Volta and newer) read before and after, summed over the visible GPUs. Power is sampled beside it
(``nvmlDeviceGetPowerUsage``, every ``interval`` seconds) for the power curve; where a card has no energy counter,
the samples are integrated instead and the result says so. A host without NVML or a GPU gets
``{"available": False, "reason": ...}``: never a figure made up for a CPU machine.
"""

from __future__ import annotations

import threading
import time
from typing import Any


def _nvml():
    try:
        import pynvml
    except ImportError:
        return None, "pynvml (nvidia-ml-py) not installed"
    try:
        pynvml.nvmlInit()
    except Exception as exc:  # no driver: a CPU machine
        return None, f"NVML unavailable: {exc}"
    if pynvml.nvmlDeviceGetCount() == 0:
        pynvml.nvmlShutdown()
        return None, "no GPU visible to NVML"
    return pynvml, None


class EnergyMeter:
    """``with EnergyMeter() as m: ...`` then ``m.result()``: joules, mean and peak watts, and the power samples
    [(unix time, watts summed over the GPUs)]."""

    def __init__(self, interval: float = 0.5) -> None:
        self.interval = interval
        self.samples: list[tuple[float, float]] = []
        self.reason: str | None = None
        self._nvml = None
        self._handles: list = []
        self._start_mj: list[int] | None = None
        self._end_mj: list[int] | None = None
        self._t0 = self._t1 = 0.0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def _counter(self) -> list[int] | None:
        try:
            return [int(self._nvml.nvmlDeviceGetTotalEnergyConsumption(h)) for h in self._handles]
        except Exception:  # not on this card or driver: integrate the samples
            return None

    def _watts(self) -> float:
        return sum(self._nvml.nvmlDeviceGetPowerUsage(h) for h in self._handles) / 1000.0

    def _run(self) -> None:
        while True:
            try:
                self.samples.append((time.time(), self._watts()))
            except Exception:  # a card that reports no power: the counter alone
                return
            if self._stop.wait(self.interval):
                return

    def __enter__(self) -> EnergyMeter:
        self._nvml, self.reason = _nvml()
        self._t0 = time.time()
        if self._nvml is not None:
            self._handles = [self._nvml.nvmlDeviceGetHandleByIndex(i) for i in range(self._nvml.nvmlDeviceGetCount())]
            self._start_mj = self._counter()
            self._thread = threading.Thread(target=self._run, daemon=True, name="gpu-energy")
            self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._t1 = time.time()
        if self._nvml is None:
            return
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        try:
            self.samples.append((self._t1, self._watts()))
        except Exception:
            pass
        self._end_mj = self._counter() if self._start_mj is not None else None
        self._nvml.nvmlShutdown()

    def result(self) -> dict[str, Any]:
        if self._nvml is None:
            return {"available": False, "reason": self.reason}
        seconds = max(self._t1 - self._t0, 1e-9)
        if self._start_mj is not None and self._end_mj is not None:
            joules = sum(b - a for a, b in zip(self._start_mj, self._end_mj)) / 1000.0
            source = "nvmlDeviceGetTotalEnergyConsumption"
        elif len(self.samples) >= 2:
            joules = integrate(self.samples)
            source = "nvmlDeviceGetPowerUsage samples, integrated"
        else:
            return {"available": False, "reason": "the GPU reports neither an energy counter nor power"}
        watts = [w for _, w in self.samples]
        return {
            "available": True,
            "gpus": len(self._handles),
            "joules": round(joules, 1),
            "mean_power_w": round(joules / seconds, 1),
            "peak_power_w": round(max(watts), 1) if watts else None,
            "seconds": round(seconds, 3),
            "source": source,
        }


def integrate(samples: list[tuple[float, float]]) -> float:
    """Joules from (time, watts) samples: the trapezoid rule."""
    return sum((t1 - t0) * (w0 + w1) / 2 for (t0, w0), (t1, w1) in zip(samples, samples[1:]))


def run_energy(stages: dict[str, dict[str, Any]], rows: int | None) -> dict[str, Any]:
    """The run's GPU energy from its stages' meters: per stage, in total, and joules per million input rows (the
    figure of merit); ``available`` False where no stage was measured on a GPU."""
    measured = {k: e for k, e in stages.items() if e and e.get("available")}
    if not measured:
        reasons = {e.get("reason") for e in stages.values() if e}
        return {"available": False, "reason": "; ".join(sorted(r for r in reasons if r)) or "not measured"}
    total = sum(e["joules"] for e in measured.values())
    return {
        "available": True,
        "stages_j": {k: e["joules"] for k, e in measured.items()},
        "total_j": round(total, 1),
        "joules_per_million_rows": round(total / (rows / 1e6), 1) if rows else None,
    }


POWER_CSV = "gpu_power.csv"  # a stage's power samples, beside its manifest


def write_power_csv(path, samples: list[tuple[float, float]]) -> None:
    import csv

    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["unix_s", "power_w"])
        w.writerows((round(t, 3), round(p, 1)) for t, p in samples)


def read_power_csv(path) -> list[tuple[float, float]]:
    import csv
    from pathlib import Path

    if not Path(path).is_file():
        return []
    with open(path) as f:
        return [(float(r["unix_s"]), float(r["power_w"])) for r in csv.DictReader(f)]


def plot_energy(stages: dict[str, dict[str, Any]], curves: dict[str, list[tuple[float, float]]], out, card: str = ""):
    """Two panels: each stage's GPU energy (bars, mean power on them) and the power curve over the stages' own
    time, stage after stage. Returns the PNG's path, or None where nothing was measured."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    measured = {k: e for k, e in stages.items() if e and e.get("available")}
    if not measured:
        return None
    fig, (a, b) = plt.subplots(1, 2, figsize=(11, 4), gridspec_kw={"width_ratios": [1, 2]})
    names = list(measured)
    bars = a.bar(names, [measured[k]["joules"] / 1000 for k in names], color="#76b900")
    for bar, k in zip(bars, names):
        a.annotate(f"{measured[k]['mean_power_w']:.0f} W", (bar.get_x() + bar.get_width() / 2, bar.get_height()),
                   ha="center", va="bottom", fontsize=8)  # fmt: skip
    a.set(ylabel="GPU energy (kJ)", title="Energy per stage (mean power on each bar)")
    offset = 0.0
    for k in names:
        c = curves.get(k) or []
        if c:
            t0 = c[0][0]
            b.plot([offset + t - t0 for t, _ in c], [w for _, w in c], label=k)
            offset += c[-1][0] - t0
    b.set(xlabel="seconds of stage compute, stage after stage", ylabel="GPU power (W)",
          title=f"Power drawn {card}".strip())  # fmt: skip
    b.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out


def gpu_memory_used() -> int | None:
    """Bytes of GPU memory in use over the visible GPUs (NVML), None without NVML or a GPU."""
    nvml, _ = _nvml()
    if nvml is None:
        return None
    try:
        return sum(
            int(nvml.nvmlDeviceGetMemoryInfo(nvml.nvmlDeviceGetHandleByIndex(i)).used)
            for i in range(nvml.nvmlDeviceGetCount())
        )
    finally:
        nvml.nvmlShutdown()
