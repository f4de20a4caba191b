"""Train stage: Horovod (or DDP) ranks launched from the task, resuming from epoch checkpoints."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

from prefect import task

from tasks.core.arrays import release_gpu_memory
from tasks.core.config import TrainConfig
from tasks.core.runtime import Runtime
from tasks.core.stages.train import train_stage
from tasks.core.store import StageResult, file_digest, run_stage, stage_fingerprint
from tasks.runner import TASK_OPTIONS, finish_stage, logger, progress_artifact


def _progress(total_epochs: int):
    """Epoch lines into the run's log and a progress artifact (called in the task's thread)."""
    log = logger()
    move = progress_artifact("training-progress", "training epochs")

    def report(row: dict) -> None:
        log.info(
            "epoch %d/%d: train_loss=%.4f val_pr_auc=%.4f (%.1f s)",
            row["epoch"] + 1,
            total_epochs,
            row["train_loss"],
            row.get("val_pr_auc", float("nan")),
            row["t_end"] - row["t_start"],
        )
        move((row["epoch"] + 1) / total_epochs)

    return report


def _warm_start(cfg: TrainConfig, warm: Path | None, features: StageResult, inputs: dict[str, str]) -> TrainConfig:
    """The train section for a start from ``warm`` where its shape fits (its digest added to ``inputs``: the
    output depends on it), else ``cfg`` unchanged (why, in the log)."""
    if warm is None:
        return cfg
    from tasks.core.training.model import same_shape  # torch: imported where a warm start is judged

    why = same_shape(warm, len(features["features"]["names"]), cfg)
    if why:
        logger().info("train: no warm start (%s): training from scratch", why)
        return cfg
    inputs["init"] = file_digest(warm)
    return cfg.model_copy(update={"init_weights": str(warm), "epochs": cfg.warm_start_epochs})


@task(name="train", **TASK_OPTIONS)
def train_task(
    features: StageResult,
    cfg: TrainConfig,
    test_fraction: float,
    rt: Runtime,
    root: Path,
    force: bool = False,
    node_metrics: dict[str, Any] | None = None,
    warm: Path | None = None,
) -> StageResult:
    """Horovod or DDP ranks over the features; ``warm``: an earlier model of this network (its champion's
    ``gnn.pt``) to start from, for ``train.warm_start_epochs`` epochs, where its shape fits."""
    inputs, key = {"features": features.fingerprint}, (test_fraction, rt.device)
    cfg = _warm_start(cfg, warm, features, inputs)
    fp = stage_fingerprint("train", inputs, cfg.model_copy(update={"init_weights": None}), *key)
    ckpt = root / "checkpoints" / fp
    if freed := sum(release_gpu_memory().values()):  # this process's pools (an earlier evaluation's) to the ranks
        logger().info("train: %.1f GB of GPU memory this process's pools held went back before the ranks", freed / 1e9)
    if force and ckpt.exists():  # a forced retrain starts from scratch, not from the last checkpoint
        logger().info("train: --force/--refresh: checkpoints in %s cleared; training from epoch 1", ckpt)
        shutil.rmtree(ckpt)
    result = run_stage(
        root,
        "train",
        inputs,
        # not in the key: a download's path (the weights' digest is in inputs), how the rank's process starts
        cfg.model_copy(update={"init_weights": None, "prewarm": True}),
        lambda tmp: train_stage(
            features.path,
            features["features"]["names"],
            features["rows_out"],
            cfg,
            test_fraction,
            rt,
            ckpt,
            fp,
            tmp,
            _progress(cfg.epochs),
            node_metrics,
            warn=lambda m: logger().warning(m),  # the run's Prefect log, shown by the CLI too
        ),
        key=key,
        force=force,
    )
    last, util = result["history"][-1], result.get("gpu_utilization") or {}
    return finish_stage(
        result,
        {
            "engine": f"{result['engine']} x{result['num_proc']} on {result['device']}",
            "final train loss": f"{last['train_loss']:.4f}",
            "final val PR-AUC": f"{last.get('val_pr_auc', float('nan')):.4f}",
            "samples/s": f"{result.get('samples_per_s', 0):.0f}",
            "GPU utilization (steady)": (
                f"{util['steady_mean']:.1f} %" if util.get("steady_mean") is not None else "n/a (no GPU samples)"
            ),
        },
    )
