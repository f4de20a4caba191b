"""GPU utilization during training at the resolution of the steps, and the kernel table of a profiler trace.

NVML keeps the driver's own utilization samples (each the share of its sample period in which a kernel ran,
stamped in microseconds); ``UtilizationSampler`` drains that buffer every ``interval`` seconds
(``nvmlDeviceGetSamples``), so every sample the driver took during training is kept, not one reading per
poll. Where the driver does not offer samples, it falls back to polling ``nvmlDeviceGetUtilizationRates``
every ``interval``. The steady-state figure averages the samples inside the training windows (every epoch's
steps after the first); a run whose windows hold too little evidence is reported as such, never as a
figure the checklist could pass or fail on.
"""

from __future__ import annotations

import csv
import json
import threading
import time
from pathlib import Path
from typing import Any

MIN_STEADY_SECONDS = 10.0  # training windows shorter than this cannot be judged
MIN_STEADY_SAMPLES = 20


class UtilizationSampler:
    """Collects every visible GPU's utilization samples on a background thread while training runs."""

    def __init__(self, out_csv: Path, interval: float = 0.25) -> None:
        self.out_csv, self.interval = Path(out_csv), interval
        self.rows: list[tuple[float, int, float, float]] = []  # (unix time, gpu, utilization %, memory GB)
        self.reason: str | None = None
        self.source = "none"
        self._offset: float | None = None
        self._samples_supported = True
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name="gpu-util-sampler")

    def __enter__(self) -> UtilizationSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join(timeout=10)

    def _run(self) -> None:
        try:
            import pynvml
        except ImportError:
            self.reason = "pynvml (nvidia-ml-py) not installed"
            return
        try:
            pynvml.nvmlInit()
        except Exception as exc:  # no driver: a CPU machine
            self.reason = f"NVML unavailable: {exc}"
            return
        try:
            handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(pynvml.nvmlDeviceGetCount())]
            if not handles:
                self.reason = "no GPU visible to NVML"
            last = [0] * len(handles)
            while True:
                for i, h in enumerate(handles):
                    last[i] = self._poll(pynvml, i, h, last[i])
                if self._stop.wait(self.interval):
                    break
            for i, h in enumerate(handles):  # drain what the driver sampled since the last poll
                self._poll(pynvml, i, h, last[i])
        finally:
            pynvml.nvmlShutdown()

    def _poll(self, nvml, i: int, handle, last_ts: int) -> int:
        mem = round(nvml.nvmlDeviceGetMemoryInfo(handle).used / 2**30, 3)
        if self._samples_supported:
            try:
                _, samples = nvml.nvmlDeviceGetSamples(handle, nvml.NVML_GPU_UTILIZATION_SAMPLES, last_ts)
            except Exception as exc:
                if "Not Found" in str(exc):  # nothing sampled since the last poll
                    return last_ts
                self._samples_supported = False  # not on this driver or device: one reading per poll
        if not self._samples_supported:
            self.source = "nvmlDeviceGetUtilizationRates"
            self.rows.append((time.time(), i, float(nvml.nvmlDeviceGetUtilizationRates(handle).gpu), mem))
            return last_ts
        self.source = "nvmlDeviceGetSamples"
        now = time.time()
        for s in samples:
            if s.timeStamp > last_ts:
                if self._offset is None:  # the stamps are the CPU's clock in µs; guard against another epoch
                    self._offset = now - s.timeStamp / 1e6 if abs(now - s.timeStamp / 1e6) > 60 else 0.0
                self.rows.append((s.timeStamp / 1e6 + self._offset, i, float(s.sampleValue.uiVal), mem))
                last_ts = s.timeStamp
        return last_ts

    def summary(self, windows: list[tuple[float, float]] | None = None) -> dict[str, Any]:
        """Write the samples to the CSV (seconds since the first) and summarise them over ``windows``."""
        self.out_csv.parent.mkdir(parents=True, exist_ok=True)
        t0 = min((r[0] for r in self.rows), default=0.0)
        with open(self.out_csv, "w", newline="") as f:
            w = csv.writer(f)
            w.writerow(["t_s", "gpu", "utilization_pct", "memory_used_gb"])
            w.writerows((round(r[0] - t0, 3), *r[1:]) for r in self.rows)
        out = summarise_utilization(self.rows, self.reason, windows=windows)
        return {**out, "source": self.source} if out["available"] else out


def summarise_utilization(
    rows: list[tuple[float, int, float, float]],
    reason: str | None = None,
    windows: list[tuple[float, float]] | None = None,
) -> dict[str, Any]:
    """Steady state = the samples inside ``windows`` (wall-clock spans of training steps, epochs 2..).

    ``sufficient`` says whether the windows are long enough and hold enough samples to judge
    (``MIN_STEADY_SECONDS``, ``MIN_STEADY_SAMPLES``); without windows there is no steady state to judge."""
    if not rows:
        return {"available": False, "reason": reason or "no samples", "samples": 0}
    windows = windows or []
    steady = [r[2] for r in rows if any(a <= r[0] <= b for a, b in windows)]
    seconds = sum(b - a for a, b in windows)
    out = {
        "available": True,
        "samples": len(rows),
        "mean": sum(r[2] for r in rows) / len(rows),
        "steady_mean": sum(steady) / len(steady) if steady else None,
        "steady_samples": len(steady),
        "steady_seconds": round(seconds, 3),
        "steady_definition": "driver samples inside the training steps of epochs 2..",
        "max_memory_gb": max(r[3] for r in rows),
    }
    out["sufficient"] = bool(steady) and seconds >= MIN_STEADY_SECONDS and len(steady) >= MIN_STEADY_SAMPLES
    return out


def plot_utilization(csv_path: Path, png: Path) -> Path | None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import pandas as pd

    df = pd.read_csv(csv_path)
    if df.empty:
        return None
    fig, ax = plt.subplots(figsize=(7, 3.5))
    for gpu, g in df.groupby("gpu"):
        ax.plot(g["t_s"], g["utilization_pct"], label=f"GPU {gpu}")
    ax.set(xlabel="seconds", ylabel="utilization (%)", ylim=(0, 105), title="GPU utilization, training")
    ax.axhline(85, ls="--", c="grey", lw=0.8)
    ax.legend()
    fig.savefig(png, dpi=110, bbox_inches="tight")
    plt.close(fig)
    return png


def _kernel_events(trace_json: Path) -> list[dict[str, Any]]:
    events = json.loads(Path(trace_json).read_text()).get("traceEvents", [])
    return [e for e in events if e.get("ph") == "X" and e.get("cat") in ("kernel", "Kernel", "gpu_op")]


def top_kernels(trace_json: Path, n: int = 10) -> list[dict[str, Any]]:
    """Top CUDA kernels by total time from a Chrome trace (torch.profiler or nsys export)."""
    totals: dict[str, list[float]] = {}
    for e in _kernel_events(trace_json):
        t = totals.setdefault(e.get("name", "?"), [0.0, 0])
        t[0] += float(e.get("dur", 0.0))
        t[1] += 1
    ranked = sorted(totals.items(), key=lambda kv: -kv[1][0])[:n]
    return [{"kernel": k[:120], "total_us": round(v[0], 1), "calls": int(v[1])} for k, v in ranked]


def kernel_busy_fraction(trace_json: Path) -> float | None:
    """The share of the profiled span in which at least one kernel ran (union of kernel intervals over the
    span from the first kernel's start to the last one's end): exact, but only for the profiled steps."""
    spans = sorted((float(e["ts"]), float(e["ts"]) + float(e.get("dur", 0.0))) for e in _kernel_events(trace_json))
    if not spans:
        return None
    busy, cur_a, cur_b = 0.0, spans[0][0], spans[0][1]
    for a, b in spans[1:]:
        if a > cur_b:
            busy += cur_b - cur_a
            cur_a, cur_b = a, b
        else:
            cur_b = max(cur_b, b)
    busy += cur_b - cur_a
    total = max(b for _, b in spans) - spans[0][0]
    return busy / total if total > 0 else None


def training_windows(train_dir: Path) -> list[tuple[float, float]] | None:
    """The wall-clock spans of each epoch's training steps after the first, from ``history.json``."""
    path = Path(train_dir) / "history.json"
    if not path.is_file():
        return None
    spans = [(h["t_start"], h["t_end"]) for h in json.loads(path.read_text()) if "t_start" in h]
    return spans[1:] or spans or None
