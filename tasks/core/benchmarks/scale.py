"""The scale curve: the GPU path from raw exports at 1x, 4x and 8x the profile's rows on one host (more days of the
same network), each a whole pipeline run in a fresh store: stage times, the peak GPU memory in use (NVML, over the
visible GPUs), the peak resident memory of the run's processes (the flow's own, the JVM, Dask's workers, the
training ranks) and the bytes the run wrote.

The smallest size runs over a simulation of its own days. Its exports' and store's bytes per factor then say which
larger sizes the free disk holds (``plan_sizes``): the exports are simulated once for the largest of them, and each
size reads the first days (hard links, no copy). A size the free disk cannot hold is not simulated or started: the
largest whole factor that fits runs instead, and the report says the disk bounded it. Each store is deleted once
measured, so a size has the disk to itself. Single runs: a repeat costs minutes.
"""

from __future__ import annotations

import os
import shutil
import threading
import time
from pathlib import Path
from typing import Any

from tasks.core.energy import gpu_memory_used

STAGES = ("validate", "ingest", "features", "train", "evaluate")
DISK_MARGIN = 0.85  # of the free bytes a run may plan to fill
EXPORTS = "exports"  # a size's exports (links) under its store root
LINEAR_WITHIN = 1.1  # the cost from the last size but one to the last grows at most this much faster than the rows


def tree_rss(pid: int | None = None) -> int:
    """Resident bytes of a process and all its descendants (0 for those that ended while being read)."""
    import psutil

    try:
        root = psutil.Process(pid)
        procs = [root, *root.children(recursive=True)]
    except psutil.Error:
        return 0
    total = 0
    for p in procs:
        try:
            total += p.memory_info().rss
        except psutil.Error:
            pass
    return total


class Peaks:
    """``with Peaks() as p: ...`` then ``p.result()``: the highest GPU memory in use and the highest resident memory
    of this process tree seen, sampled every ``interval`` seconds on a thread of its own."""

    def __init__(self, interval: float = 0.5, gpu=gpu_memory_used, host=tree_rss) -> None:
        self.interval, self._gpu, self._host = interval, gpu, host
        self.gpu_bytes: int | None = None
        self.host_bytes = 0
        self.samples = 0
        self.series: list[tuple[float, int | None, int]] = []  # (epoch seconds, GPU bytes, host bytes)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def sample(self) -> None:
        used, host = self._gpu(), self._host()
        if used is not None:
            self.gpu_bytes = max(self.gpu_bytes or 0, used)
        self.host_bytes = max(self.host_bytes, host)
        self.samples += 1
        self.series.append((time.time(), used, host))

    def _run(self) -> None:
        while not self._stop.is_set():
            self.sample()
            self._stop.wait(self.interval)

    def __enter__(self) -> Peaks:
        self._thread = threading.Thread(target=self._run, name="scale-peaks", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        self.sample()

    def result(self) -> dict[str, Any]:
        return {
            "peak_gpu_memory_bytes": self.gpu_bytes,
            "peak_host_memory_bytes": self.host_bytes,
            "samples": self.samples,
        }


def stage_peaks(series: list[tuple[float, int | None, int]], manifests: dict[str, dict]) -> dict[str, dict]:
    """Per stage, the highest GPU and host memory sampled while it ran: from its manifest's ``written_at`` (to the
    second) less its ``seconds`` to the end of that second."""
    from datetime import datetime

    out = {}
    for stage, m in manifests.items():
        end = datetime.fromisoformat(m["written_at"].replace("Z", "+00:00")).timestamp() + 1.0
        inside = [(g, h) for t, g, h in series if end - 1.0 - m["seconds"] <= t <= end]
        gpu = [g for g, _ in inside if g is not None]
        out[stage] = {
            "peak_gpu_memory_bytes": max(gpu) if gpu else None,
            "peak_host_memory_bytes": max((h for _, h in inside), default=None),
            "samples": len(inside),
        }
    return out


def dir_bytes(path: Path) -> int:
    """Bytes of the files under ``path``, each hard-linked file once (a store links unchanged outputs)."""
    seen, total = set(), 0
    for top, _, files in os.walk(path):
        for f in files:
            st = os.lstat(os.path.join(top, f))
            if (st.st_dev, st.st_ino) not in seen:
                seen.add((st.st_dev, st.st_ino))
                total += st.st_size
    return total


def next_factor(
    factor: int, bytes_per_factor: float | None, free: int, done: list[int]
) -> tuple[int | None, str | None]:
    """The factor to run in place of ``factor`` and why it changed: the factor itself where the disk holds it (or no
    size has been measured yet), else the largest whole factor that fits and is above every one done, else None."""
    if bytes_per_factor is None or factor * bytes_per_factor <= DISK_MARGIN * free:
        return factor, None
    fits = int(DISK_MARGIN * free // bytes_per_factor)
    why = (
        f"{factor}x needs about {factor * bytes_per_factor / 1e9:.1f} GB of disk, {free / 1e9:.1f} GB free "
        f"(at most {DISK_MARGIN:.0%} of it planned)"
    )
    if fits > max(done, default=0):
        return fits, f"{why}: ran {fits}x, the largest that fits"
    return None, f"{why}: nothing larger than {max(done, default=0)}x fits"


def plan_sizes(rest: list[int], bytes_per_factor: float, free: int, done: list[int]) -> tuple[list[int], list[str]]:
    """The factors to run after ``done`` where each needs ``bytes_per_factor`` a factor (its exports and its store):
    those of ``rest`` the free disk holds, the last of them replaced by the largest whole factor that fits where
    it does not (``next_factor``), and why a factor was replaced or dropped."""
    planned: list[int] = []
    notes: list[str] = []
    for factor in rest:
        run_factor, why = next_factor(factor, bytes_per_factor, free, [*done, *planned])
        notes += [why] if why else []
        if run_factor is None:
            break
        planned.append(run_factor)
        if why:
            break
    return planned, notes


def run_record(factor: int, days: int, summary: dict[str, Any], peaks: dict[str, Any], disk: int) -> dict[str, Any]:
    stages = summary["stages"]
    seconds = {s: stages[s]["seconds"] for s in STAGES if s in stages}
    return {
        "factor": factor,
        "days": days,
        "kpi_rows": stages["ingest"]["rows_in"] if "ingest" in stages else None,
        "stages_s": seconds,
        "total_s": round(sum(seconds.values()), 3),
        **peaks,
        "disk_bytes": disk,
        "status": summary.get("status"),
    }


def scale_report(records: list[dict[str, Any]], spec: dict[str, Any], notes: list[str]) -> dict[str, Any]:
    """The curve over the measured sizes: seconds per million rows at each, and how the cost grew from the last size
    but one to the last against the rows (``growth``: 1.0 is linear; within ``LINEAR_WITHIN`` passes)."""
    done = [r for r in records if r.get("status") == "completed"]
    for r in done:
        r["s_per_million_rows"] = round(r["total_s"] / (r["kpi_rows"] / 1e6), 3) if r["kpi_rows"] else None
    report: dict[str, Any] = {"spec": spec, "runs": records, "notes": notes, "repeats": 1}
    report["repeats_note"] = "single runs: a repeat costs minutes of the GPU host"
    if len(done) >= 2:
        a, b = done[-2], done[-1]
        growth = (b["total_s"] / a["total_s"]) / (b["kpi_rows"] / a["kpi_rows"])
        report["growth"] = {
            "from": f"{a['factor']}x",
            "to": f"{b['factor']}x",
            "cost_ratio": round(b["total_s"] / a["total_s"], 3),
            "rows_ratio": round(b["kpi_rows"] / a["kpi_rows"], 3),
            "vs_linear": round(growth, 3),
            "within": growth <= LINEAR_WITHIN,
            "limit": LINEAR_WITHIN,
        }
    report["failed"] = [{"factor": r["factor"], "error": r.get("error")} for r in records if r not in done]
    return report


def plot_scale(report: dict[str, Any], path: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    done = [r for r in report["runs"] if r.get("status") == "completed"]
    rows = [r["kpi_rows"] / 1e6 for r in done]
    fig, (ax, mem) = plt.subplots(1, 2, figsize=(11, 4))
    shown = [r for r in report["runs"] if r.get("stages_s") and r.get("kpi_rows")]  # a failed size: what finished
    labels = [f"{r['factor']}x\n{r['kpi_rows'] / 1e6:.0f} M rows" for r in shown]
    bottom = [0.0] * len(shown)
    for s in STAGES:
        vals = [r["stages_s"].get(s, 0.0) for r in shown]
        for bar, r in zip(ax.bar(labels, vals, bottom=bottom, label=s), shown):
            bar.set_hatch("//" if r.get("status") != "completed" else "")
        bottom = [b + v for b, v in zip(bottom, vals)]
    for i, r in enumerate(shown):
        if r.get("status") != "completed":
            ax.annotate(f"failed in {r.get('failed_in')}", (i, bottom[i]), ha="center", va="bottom", fontsize=8)
    ax.set_ylim(0, max(bottom, default=1.0) * 1.12)
    ax.set_ylabel("seconds (sum of stages)")
    ax.set_title(f"GPU path from raw on {report.get('device', 'this host')}")
    ax.legend(fontsize=8)
    gpu = [(r["peak_gpu_memory_bytes"] or 0) / 2**30 for r in done]
    host = [r["peak_host_memory_bytes"] / 2**30 for r in done]
    disk = [r["disk_bytes"] / 2**30 for r in done]
    for vals, label, marker in ((gpu, "peak GPU memory", "o"), (host, "peak host memory", "s"), (disk, "disk", "^")):
        mem.plot(rows, vals, marker=marker, label=label)
    for stage in ("train", "evaluate"):  # what the pools of validate and ingest hide in the run's peak
        per = [((r.get("stage_peaks") or {}).get(stage) or {}).get("peak_gpu_memory_bytes") for r in done]
        if all(v is not None for v in per) and per:
            mem.plot(rows, [v / 2**30 for v in per], marker="o", linestyle="--", label=f"peak GPU memory, {stage}")
    mem.set_xlabel("KPI rows (millions)")
    mem.set_ylabel("GiB")
    mem.legend(fontsize=8)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def link_days(src: Path, dest: Path, days: int) -> None:
    """The topology and the first ``days`` days' exports of ``src`` in ``dest``, hard-linked (copied where links
    cannot be made)."""
    from tasks.core.benchmarks.increment import day_files

    shutil.rmtree(dest, ignore_errors=True)
    for sub in ("kpi", "alarms"):
        (dest / sub).mkdir(parents=True)
    pairs = [(src / "topology.json", dest / "topology.json")]
    pairs += [(f, dest / f.parent.name / f.name) for files in day_files(src)[:days] for f in files]
    for a, b in pairs:
        try:
            os.link(a, b)
        except OSError:
            shutil.copy2(a, b)


def measure(run, factor: int, days: int, work: Path) -> dict[str, Any]:
    """One size: ``run(root)`` (its exports linked into ``root / EXPORTS``, a pipeline run into the store
    ``root``) with its peaks and bytes, then ``root`` deleted. A run that fails (out of memory among others) is
    recorded with its error, not raised."""
    root = work / f"{factor}x"
    shutil.rmtree(root, ignore_errors=True)
    started = time.perf_counter()
    with Peaks() as peaks:
        try:
            summary = run(root)
        except Exception as exc:  # the curve records where the host gave out
            summary = {"status": "failed", "stages": {}, "error": short_error(f"{type(exc).__name__}: {exc}")}
    record = run_record(factor, days, summary, peaks.result(), dir_bytes(root) if root.exists() else 0)
    record["raw_bytes"] = dir_bytes(root / EXPORTS) if (root / EXPORTS).exists() else 0
    record["store_bytes"] = record["disk_bytes"] - record["raw_bytes"]  # what the run wrote
    record["wall_s"] = round(time.perf_counter() - started, 3)
    if summary.get("error"):
        record["error"] = summary["error"]
    kept = keep_manifests(root, work / f"{factor}x-manifests")
    record["stage_peaks"] = stage_peaks(peaks.series, kept)
    if record["status"] != "completed":
        finished_stages(record, kept)
    shutil.rmtree(root, ignore_errors=True)
    return record


def short_error(text: str, head: int = 200, tail: int = 600) -> str:
    """An error's start and end where it is long: a failed training's message ends with its rank's exception (out
    of memory, say), after the log lines before it."""
    return text if len(text) <= head + tail + 5 else f"{text[:head]} ... {text[-tail:]}"


def finished_stages(record: dict[str, Any], manifests: dict[str, dict]) -> None:
    """A failed size's record completed from its stages' own manifests: the seconds of those that finished, its rows
    and the stage it failed in."""
    record["stages_s"] = {st: round(manifests[st]["seconds"], 3) for st in STAGES if st in manifests}
    record["kpi_rows"] = manifests["ingest"].get("rows_in") if "ingest" in manifests else None
    record["failed_in"] = next((st for st in STAGES if st not in manifests), None)


def keep_manifests(root: Path, dest: Path) -> dict[str, dict]:
    """Each stage manifest under ``root`` as ``dest/<stage>.json`` (where a size's time went, after its store is
    deleted), the newest where a stage ran more than once, and Spark's event logs (``dest/spark-events``: each job's
    time, by job group); returns the manifests by stage."""
    import json

    shutil.rmtree(dest, ignore_errors=True)
    found = sorted(root.glob("**/store/*/*/_manifest.json"), key=lambda p: p.stat().st_mtime) if root.exists() else []
    kept = {}
    for m in found:
        dest.mkdir(parents=True, exist_ok=True)
        shutil.copy2(m, dest / f"{m.parent.parent.name}.json")
        kept[m.parent.parent.name] = json.loads(m.read_text())
    for events in root.glob("**/store/spark-events") if kept else ():
        shutil.copytree(events, dest / "spark-events", dirs_exist_ok=True)
    return kept
