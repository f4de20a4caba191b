"""End-to-end benchmark: the same workload through the whole pipeline on the GPU path (the profile as it is)
and on the CPU path (Spark ``local[*]``, Dask and training on all the host's cores), in one invocation on one
host; per-stage times from the two runs' manifests and the end-to-end ratio.

CPU training at full size can take hours, so the CPU path trains ``cpu_train_epochs`` of the profile's epochs
(a tenth, and at least two): the first is counted as it ran (warm-up) and the mean of the later ones stands for
each remaining epoch, said in the JSON and the table.
Stages whose output both paths share (validate and ingest run on Spark's CPU engine on both, unless the GPU
path uses the RAPIDS Accelerator: the CPU path then runs them without it) are computed once and counted on both
paths, marked ``shared``; so is evaluation where it is the same CPU code on both paths (the CPU path then stops
after training). Where the GPU path fits its trees on the GPU, the CPU path evaluates too, its trees on the CPU.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from tasks.core.config import STAGES, FaultlineConfig
from tasks.core.runtime import Hardware

CPU_FRACTION = 0.1
CPU_UNTIL = "train"  # where evaluation is the same CPU code on both paths: measured once, on the GPU path


def cpu_train_epochs(cfg: FaultlineConfig, fraction: float = CPU_FRACTION) -> int:
    """At least two (the first is warm-up: an epoch time from it alone would overstate the CPU path)."""
    return min(cfg.train.epochs, max(2, math.ceil(cfg.train.epochs * fraction)))


def cpu_until(cfg: FaultlineConfig) -> str:
    """Where the CPU path stops: after training, unless the GPU path's evaluation differs (its trees on the GPU)."""
    from tasks.core.stages.baselines import tree_device

    return "evaluate" if tree_device(cfg.evaluate.tree_device) == "cuda" else CPU_UNTIL


def cpu_overrides(
    cfg: FaultlineConfig, hw: Hardware, fraction: float = CPU_FRACTION, ranks: int | None = None
) -> list[str]:
    """The CPU path of the same workload: every core for Spark, Dask and training, no GPU anywhere; ``ranks``:
    the training layout's ranks (the cores shared among them), default the profile's."""
    ranks = ranks or cfg.train.num_proc
    return [
        "ingest.rapids_jar=null",
        "ingest.kpi_parse=csv",  # Spark's CSV parser: the faster on the CPU
        "evaluate.tree_device=cpu",
        "features.backend=pandas",
        "features.cluster=local",
        f"features.n_workers={hw.cpu_count}",
        "features.threads_per_worker=1",
        "train.device=cpu",
        f"train.num_proc={ranks}",
        f"train.epochs={cpu_train_epochs(cfg, fraction)}",
        "train.bf16=false",
    ]


def _manifest(stage: dict[str, Any]) -> dict[str, Any]:
    return json.loads((Path(stage["output"]) / "_manifest.json").read_text())


def _train_seconds(m: dict[str, Any], epochs: int) -> tuple[float, dict[str, Any] | None]:
    """Measured train seconds, or (when fewer epochs ran) the stage as measured plus each missing epoch at the
    mean of the epochs after the first (the first is warm-up; with one epoch only, that one)."""
    ran = len(m["history"])
    if ran >= epochs:
        return m["seconds"], None
    times = [h["t_end"] - h["t_start"] for h in m["history"]]
    steady = times[1:] or times
    per_epoch = sum(steady) / len(steady)
    return m["seconds"] + per_epoch * (epochs - ran), {
        "epochs_timed": ran,
        "epochs_full": epochs,
        "fraction": round(ran / epochs, 3),
        "measured_s": round(m["seconds"], 2),
        "first_epoch_s": round(times[0], 2),
        "epoch_s": round(per_epoch, 2),
        "epoch_s_from": "epochs 2.." if len(times) > 1 else "epoch 1 (warm-up included)",
        "fixed_s": round(m["seconds"] - sum(times), 2),
    }


def stage_times(summary: dict[str, Any], epochs: int) -> dict[str, Any]:
    """Per-stage seconds of one pipeline run (from its manifests), train extrapolated when it ran fewer epochs."""
    out: dict[str, Any] = {"stages": {}, "extrapolated": {}}
    for name in STAGES:
        st = summary["stages"].get(name)
        if st is None:
            continue
        m = _manifest(st)
        seconds, extra = _train_seconds(m, epochs) if name == "train" else (m["seconds"], None)
        out["stages"][name] = {
            "seconds": round(seconds, 2),
            "fingerprint": st["fingerprint"],
            "cached": st["cached"],
            "output": st["output"],
        }
        if extra:
            out["extrapolated"][name] = extra
    out["total_s"] = round(sum(s["seconds"] for s in out["stages"].values()), 2)
    return out


def e2e_report(
    cfg: FaultlineConfig,
    hw: Hardware,
    gpu: dict[str, Any],
    cpu: dict[str, Any],
    fraction: float = CPU_FRACTION,
    layouts: dict[str, Any] | None = None,
    gpu_wall_s: float | None = None,
) -> dict[str, Any]:
    """``layouts``: the CPU training layouts tried and the fastest, which the CPU path trained with
    (``cpu_layouts.sweep``). ``gpu_wall_s``: the GPU path's whole flow run; what its stages leave of it (Prefect,
    MLflow, model logging) is counted on both paths as ``fixed_s``."""
    g, c = stage_times(gpu, cfg.train.epochs), stage_times(cpu, cfg.train.epochs)
    for name, st in c["stages"].items():  # the same output on both paths: computed once, counted on both
        st["shared"] = g["stages"].get(name, {}).get("fingerprint") == st["fingerprint"]
        if st["shared"]:
            st["seconds"] = g["stages"][name]["seconds"]
    for name, st in g["stages"].items():  # stages the CPU path did not run: the same CPU code, counted on both
        if name not in c["stages"]:
            c["stages"][name] = {"seconds": st["seconds"], "shared": True, "note": "same CPU code on both paths"}
    c["total_s"] = round(sum(s["seconds"] for s in c["stages"].values()), 2)
    fixed = round(max(0.0, gpu_wall_s - g["total_s"]), 2) if gpu_wall_s else 0.0
    for path in (g, c):  # the same flow around the stages on both paths: counted on both
        path["fixed_s"], path["total_s"] = fixed, round(path["total_s"] + fixed, 2)
    ratios = {
        n: round(c["stages"][n]["seconds"] / g["stages"][n]["seconds"], 2) for n in g["stages"] if n in c["stages"]
    }
    return with_breakdown(
        {
            "benchmark": "e2e",
            "hardware": hw.as_dict(),
            "device": hw.gpus[0].name if hw.gpus else f"{hw.cpu_count}-core CPU",
            "workload": cfg.workload.model_dump(mode="json"),
            "kpi_rows": gpu["stages"]["ingest"]["rows_in"] if "ingest" in gpu["stages"] else None,
            "gpu_path": {**g, "mlflow_run_id": gpu.get("mlflow_run_id"), "metrics": gpu.get("metrics")},
            "cpu_path": {
                **c,
                "mlflow_run_id": cpu.get("mlflow_run_id"),
                "cpu_fraction_trained": fraction,
                "training_layout": layouts,
            },
            "stage_ratio": ratios,
            "e2e_ratio": round(c["total_s"] / g["total_s"], 2),
            "repeats": 1,  # each path once, in this invocation: a repeat of both costs many minutes
            "repeats_note": "single runs of both paths: no median, min or max",
            "extrapolated": [f"cpu_path.{k}" for k in c["extrapolated"]] + [f"gpu_path.{k}" for k in g["extrapolated"]],
        }
    )


def with_breakdown(report: dict[str, Any]) -> dict[str, Any]:
    """Where the end-to-end ratio comes from (Amdahl): the stages that run the same CPU code on both paths, the
    ratio of the stages that differ, and the end-to-end ratio if those took no time at all on the GPU path.
    Derived from the report's own stage times only, so it applies to a stored report too."""
    g, c = report["gpu_path"]["stages"], report["cpu_path"]["stages"]
    shared = [n for n in STAGES if n in g and c.get(n, {}).get("shared")]
    own = [n for n in STAGES if n in g and n in c and n not in shared]
    shared_s = sum(g[n]["seconds"] for n in shared) + report["gpu_path"].get("fixed_s", 0.0)  # fixed: CPU work
    own_gpu, own_cpu = sum(g[n]["seconds"] for n in own), sum(c[n]["seconds"] for n in own)
    report["breakdown"] = {
        "shared_stages": shared,
        "shared_s": round(shared_s, 2),
        "shared_fraction_of_gpu_path": round(shared_s / report["gpu_path"]["total_s"], 3),
        "accelerated_stages": own,
        "accelerated_cpu_s": round(own_cpu, 2),
        "accelerated_gpu_s": round(own_gpu, 2),
        "accelerated_ratio": round(own_cpu / own_gpu, 2) if own_gpu else None,
        "e2e_ceiling_ratio": round(report["cpu_path"]["total_s"] / shared_s, 2) if shared_s else None,
        "note": "ceiling: the end-to-end ratio if the accelerated stages took no time on the GPU path",
    }
    return report


def markdown_table(report: dict[str, Any]) -> str:
    g, c = report["gpu_path"]["stages"], report["cpu_path"]["stages"]
    lines = ["| stage | CPU path (s) | GPU path (s) | CPU / GPU |", "|---|---|---|---|"]
    for name in [n for n in STAGES if n in g]:
        cs = c.get(name, {})
        note = (
            " (shared)" if cs.get("shared") else " (extrapolated)" if name in report["cpu_path"]["extrapolated"] else ""
        )
        lines.append(
            f"| {name} | {cs.get('seconds', float('nan')):.1f}{note} | {g[name]['seconds']:.1f} | "
            f"{report['stage_ratio'].get(name, float('nan')):.1f}x |"
        )
    if report["gpu_path"].get("fixed_s"):
        fixed = report["gpu_path"]["fixed_s"]
        lines.append(f"| fixed (Prefect, MLflow, model logging) | {fixed:.1f} (shared) | {fixed:.1f} | 1.0x |")
    lines.append(
        f"| **end to end** | **{report['cpu_path']['total_s']:.0f}** | **{report['gpu_path']['total_s']:.0f}** "
        f"| **{report['e2e_ratio']:.1f}x** |"
    )
    b = report.get("breakdown")
    if b and b["shared_stages"]:
        lines.append(
            f"\n{', '.join(b['shared_stages'])}: the same CPU code on both paths, {b['shared_s']:.0f} s "
            f"({b['shared_fraction_of_gpu_path']:.0%} of the GPU path). The stages that differ "
            f"({', '.join(b['accelerated_stages'])}): "
            f"{b['accelerated_cpu_s']:.0f} s vs {b['accelerated_gpu_s']:.0f} s, "
            f"{b['accelerated_ratio']}x; the end-to-end ceiling while the shared stages stay on the CPU: "
            f"{b['e2e_ceiling_ratio']}x."
        )
    return "\n".join(lines)


def plot_e2e(report: dict[str, Any], png: Path) -> Path:
    """Stacked bars: each path's time by stage."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch

    paths = [("CPU path", report["cpu_path"]), ("GPU path", report["gpu_path"])]
    fig, ax = plt.subplots(figsize=(7, 3.4))
    for i, (_label, path) in enumerate(paths):
        left = 0.0
        for name in STAGES:
            if name not in path["stages"]:
                continue
            st, color = path["stages"][name], plt.cm.tab10(STAGES.index(name))
            w = st["seconds"]
            measured = path["extrapolated"].get(name, {}).get("measured_s", w)
            hatch = "//" if st.get("shared") else None  # the same CPU code on both paths
            ax.barh(i, measured, left=left, label=name if i == 0 else None, color=color, hatch=hatch)
            if w > measured:  # the extrapolated part, drawn lighter
                ax.barh(i, w - measured, left=left + measured, color=color, alpha=0.45, hatch="..")
            left += w
    ax.set_yticks([0, 1], [p[0] for p in paths])
    ax.set_xlabel("seconds (dotted: CPU training extrapolated from a fraction of its epochs)")
    handles, labels = ax.get_legend_handles_labels()
    handles.append(Patch(facecolor="white", edgecolor="black", hatch="//"))
    labels.append("same CPU code on both")
    ax.set_title(f"End to end on {report['device']}: {report['e2e_ratio']:.1f}x")
    ax.legend(handles, labels, ncol=6, fontsize=7, loc="lower center", bbox_to_anchor=(0.5, 1.12))
    fig.tight_layout()
    png.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(png, dpi=110)
    plt.close(fig)
    return png
