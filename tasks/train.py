"""Train stage: Horovod (or DDP) ranks launched from the task, resuming from epoch checkpoints."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from prefect import task

from tasks.common import TASK_OPTIONS, Timer, manifest_header, publish_stage_artifact, stage_result
from tasks.core.checkpoint import latest_checkpoint, load_checkpoint
from tasks.core.config import TrainConfig
from tasks.core.gpu_monitor import UtilizationSampler, plot_utilization, top_kernels, training_windows
from tasks.core.runtime import horovod_env, train_device
from tasks.core.store import code_version, completed, fingerprint, publish_manifest, published, staging
from tasks.core.topology import Topology
from tasks.core.train import launch_training, prepare_tensors


def _progress_reporter(total_epochs: int):
    try:
        from prefect.artifacts import create_progress_artifact, update_progress_artifact

        art = create_progress_artifact(progress=0.0, key="training-progress", description="training epochs")
    except Exception:
        return lambda row: None

    def report(row: dict) -> None:
        print(
            f"epoch {row['epoch'] + 1}/{total_epochs}: train_loss={row['train_loss']:.4f} "
            f"val_pr_auc={row.get('val_pr_auc', float('nan')):.4f}"
        )
        try:
            update_progress_artifact(art, progress=100.0 * (row["epoch"] + 1) / total_epochs)
        except Exception:
            pass

    return report


@task(name="train", **TASK_OPTIONS)
def train_task(
    features: dict[str, Any], cfg: TrainConfig, test_fraction: float, root: Path, force: bool = False
) -> dict[str, Any]:
    device = train_device(cfg)
    fp = fingerprint(
        "train", features["fingerprint"], cfg.model_dump(mode="json"), test_fraction, device, code_version()
    )
    out = None if force else completed(root, "train", fp)
    if out is None:
        feat_dir = Path(features["output"])
        topo = Topology.read(feat_dir / "topology.json")
        ckpt = root / "checkpoints" / fp
        with staging(root, "train", fp) as tmp, Timer() as timer:
            data = prepare_tensors(
                feat_dir / "features", topo, features["feature_names"], cfg.window, test_fraction, tmp / "data.npz"
            )
            spec = {
                "engine": cfg.engine,
                "device": device,
                "train": cfg.model_dump(mode="json"),
                "data": str(tmp / "data.npz"),
                "checkpoints": str(ckpt),
                "out": str(tmp),
                "fingerprint": fp,
            }
            prior = latest_checkpoint(ckpt, fp)  # a retried or rerun task resumes from here
            resumed = load_checkpoint(prior)["epoch"] if prior else None
            with UtilizationSampler(tmp / "gpu_utilization.csv") as sampler:
                run = launch_training(spec, cfg, tmp, horovod_env(cfg, device), _progress_reporter(cfg.epochs))
            utilization = sampler.summary(training_windows(tmp))
            if utilization["available"]:
                plot_utilization(tmp / "gpu_utilization.csv", tmp / "gpu_utilization.png")
            kernels = top_kernels(tmp / "trace.json") if (tmp / "trace.json").is_file() else []
            history = json.loads((tmp / "history.json").read_text())
            steady = history[1:] or history
            samples_per_s = sum(h["samples"] for h in steady) / max(
                1e-9, sum(h["data_wait_s"] + h["compute_s"] for h in steady)
            )
            publish_manifest(
                tmp,
                {
                    **manifest_header("train", {"features": features["fingerprint"]}, cfg, timer.seconds),
                    "device": device,
                    "engine": cfg.engine,
                    "num_proc": cfg.num_proc,
                    "rows_in": features["rows_out"],
                    "rows_out": data["times"] * data["elements"],
                    "data": {k: v for k, v in data.items() if k != "feature_names"},
                    "history": history,
                    "samples_per_s": samples_per_s,
                    "launch": run,
                    "checkpoints": str(ckpt),
                    "memory_fraction": cfg.memory_fraction if device == "cuda" else None,
                    "resumed_from_epoch": resumed,
                    "gpu_utilization": utilization,
                    "kernel_timeline": {
                        "kind": "torch.profiler chrome trace" if (tmp / "trace.json").is_file() else None,
                        "file": "trace.json" if (tmp / "trace.json").is_file() else None,
                        "cuda_kernels": len(kernels),
                        "top_kernels": kernels,
                    },
                },
            )
        out = published(root, "train", fp)
    m = out.manifest
    result = stage_result(
        "train",
        out,
        {
            "history": m["history"],
            "device": m["device"],
            "engine": m["engine"],
            "num_proc": m["num_proc"],
            "model": str(out.path / "model.pt"),
            "data": str(out.path / "data.npz"),
            "gpu_utilization": m.get("gpu_utilization"),
            "kernel_timeline": m.get("kernel_timeline"),
            "samples_per_s": m.get("samples_per_s"),
        },
    )
    last = m["history"][-1]
    publish_stage_artifact(
        result,
        {
            "engine": f"{m['engine']} x{m['num_proc']} on {m['device']}",
            "final train loss": f"{last['train_loss']:.4f}",
            "final val PR-AUC": f"{last.get('val_pr_auc', float('nan')):.4f}",
            "samples/s": f"{m.get('samples_per_s', 0):.0f}",
            "GPU utilization (steady)": (
                f"{m['gpu_utilization']['steady_mean']:.1f} %"
                if (m.get("gpu_utilization") or {}).get("available")
                else "n/a (no GPU)"
            ),
        },
    )
    return result
