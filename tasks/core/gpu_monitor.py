"""GPU utilization sampled through NVML while training runs, and the kernel table of a profiler trace."""

from __future__ import annotations

import csv
import threading
import time
from pathlib import Path
from typing import Any


class UtilizationSampler:
    """Samples every visible GPU's utilization every ``interval`` seconds on a background thread."""

    def __init__(self, out_csv: Path, interval: float = 0.5) -> None:
        self.out_csv, self.interval = Path(out_csv), interval
        self.rows: list[tuple[float, int, float, float]] = []
        self.reason: str | None = None
        self.t0 = time.time()
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
            t0 = self.t0
            while not self._stop.wait(self.interval):
                for i, h in enumerate(handles):
                    u = pynvml.nvmlDeviceGetUtilizationRates(h)
                    mem = pynvml.nvmlDeviceGetMemoryInfo(h).used / 2**30
                    self.rows.append((round(time.time() - t0, 3), i, float(u.gpu), round(mem, 3)))
        finally:
            pynvml.nvmlShutdown()

    def summary(self, windows: list[tuple[float, float]] | None = None) -> dict[str, Any]:
        """``windows``: wall-clock spans of steady-state training (each epoch's steps after the first)."""
        self.out_csv.parent.mkdir(parents=True, exist_ok=True)
        with open(self.out_csv, "w", newline="") as f:
            w = csv.writer(f)
            w.writerow(["t_s", "gpu", "utilization_pct", "memory_used_gb"])
            w.writerows(self.rows)
        rel = [(a - self.t0, b - self.t0) for a, b in windows] if windows else None
        return summarise_utilization(self.rows, self.reason, windows=rel)


def summarise_utilization(
    rows: list[tuple[float, int, float, float]],
    reason: str | None = None,
    warmup: float = 0.15,
    tail: float = 0.05,
    windows: list[tuple[float, float]] | None = None,
) -> dict[str, Any]:
    """Steady state = samples inside the given training windows (every epoch's steps after the first);
    without windows, after the first 15 % and before the last 5 % of the run (start-up and teardown)."""
    if not rows:
        return {"available": False, "reason": reason or "no samples", "samples": 0}
    end = max(r[0] for r in rows)
    if windows:
        steady = [r[2] for r in rows if any(a <= r[0] <= b for a, b in windows)]
    else:
        steady = [r[2] for r in rows if warmup * end <= r[0] <= (1 - tail) * end]
    steady = steady or [r[2] for r in rows]
    return {
        "available": True,
        "samples": len(rows),
        "mean": sum(r[2] for r in rows) / len(rows),
        "steady_mean": sum(steady) / len(steady),
        "steady_samples": len(steady),
        "steady_definition": "training steps of epochs 2.." if windows else "middle 80 % of the run",
        "max_memory_gb": max(r[3] for r in rows),
    }


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
    ax.set(xlabel="seconds since launch", ylabel="utilization (%)", ylim=(0, 105), title="GPU utilization, training")
    ax.axhline(85, ls="--", c="grey", lw=0.8)
    ax.legend()
    fig.savefig(png, dpi=110, bbox_inches="tight")
    plt.close(fig)
    return png


def top_kernels(trace_json: Path, n: int = 10) -> list[dict[str, Any]]:
    """Top CUDA kernels by total time from a Chrome trace (torch.profiler or nsys export)."""
    import json

    events = json.loads(Path(trace_json).read_text()).get("traceEvents", [])
    totals: dict[str, list[float]] = {}
    for e in events:
        if e.get("ph") == "X" and e.get("cat") in ("kernel", "Kernel", "gpu_op"):
            t = totals.setdefault(e.get("name", "?"), [0.0, 0])
            t[0] += float(e.get("dur", 0.0))
            t[1] += 1
    ranked = sorted(totals.items(), key=lambda kv: -kv[1][0])[:n]
    return [{"kernel": k[:120], "total_us": round(v[0], 1), "calls": int(v[1])} for k, v in ranked]


def training_windows(train_dir: Path) -> list[tuple[float, float]] | None:
    """The wall-clock spans of each epoch's training steps after the first, from ``history.json``."""
    import json

    path = Path(train_dir) / "history.json"
    if not path.is_file():
        return None
    spans = [(h["t_start"], h["t_end"]) for h in json.loads(path.read_text()) if "t_start" in h]
    return spans[1:] or spans or None
