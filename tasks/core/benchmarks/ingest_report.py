"""The ingest benchmark as people read it: a table (the CLI's log, a Prefect artifact) and a bar chart (MLflow)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tasks.core.benchmarks.measure import ratio


def _util(r: dict[str, Any]) -> str:
    u = r.get("gpu_util_mean")
    return "—" if u is None else f"{u:.0f} %"


def markdown_table(result: dict[str, Any]) -> str:
    """Each Spark variant's median with its runs and range, its rate, its ratio to CPU Spark and its GPU
    utilization; pyarrow's baseline; CPU Spark's scaling over cores when it ran. All from one invocation."""
    cpu = result["spark_variants"]["cpu-spark"]["seconds"]
    lines = [
        "| variant | seconds (median) | runs | min–max (s) | MB/s | CPU Spark / this | GPU utilization |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, r in result["spark_variants"].items():
        lo, hi = r["min_max_s"]
        lines.append(
            f"| {name} | {r['seconds']:.1f} | {r['runs']} | {lo:.1f}–{hi:.1f} | {r['mb_per_s']:.1f} | "
            f"{ratio(cpu, r['seconds'])}x | {_util(r)} |"
        )
    lo, hi = result["pyarrow_min_max_s"]
    lines.append(
        f"| pyarrow CSV→Parquet (KPI only, no rules) | {result['pyarrow_seconds']:.1f} | {result['pyarrow_runs']} | "
        f"{lo:.1f}–{hi:.1f} | {result['pyarrow_mb_per_s']:.1f} | | — |"
    )
    scaling = result.get("cpu_core_scaling")
    if scaling:
        cells = ", ".join(f"{s['cores']} cores {s['seconds']:.1f} s ({s['speedup']}x)" for s in scaling)
        lines.append(f"\nCPU Spark by cores: {cells}.")
    return "\n".join(lines)


def plot_ingest(result: dict[str, Any], png: Path) -> Path:
    """One bar a variant: the median seconds with a whisker from min to max; the plugin's bars in green."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = [*result["spark_variants"], "pyarrow (KPI only)"]
    runs = [*result["spark_variants"].values()]
    secs = [r["seconds"] for r in runs] + [result["pyarrow_seconds"]]
    ranges = [r["min_max_s"] for r in runs] + [result["pyarrow_min_max_s"]]
    err = [
        [s - lo for s, (lo, _) in zip(secs, ranges, strict=True)],
        [hi - s for s, (_, hi) in zip(secs, ranges, strict=True)],
    ]
    colors = [
        "tab:green" if n.startswith("rapids-") else "tab:orange" if n.startswith("pyarrow") else "tab:blue"
        for n in names
    ]
    fig, ax = plt.subplots(figsize=(7, 0.5 * len(names) + 1.4))
    ax.barh(range(len(names)), secs, xerr=err, color=colors, capsize=3)
    ax.set_yticks(range(len(names)), names)
    ax.invert_yaxis()
    ax.set_xlabel("seconds (median; whiskers: min to max)")
    ax.set_title(f"Ingest of {result['raw_mb']:.0f} MB on {result.get('device', 'this host')}")
    fig.tight_layout()
    png.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(png, dpi=110)
    plt.close(fig)
    return png
