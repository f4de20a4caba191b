"""Evaluate stage: held-out window metrics for the model and its baselines, with plots."""

from __future__ import annotations

from pathlib import Path

from prefect import task

from tasks.core.config import EvaluateConfig
from tasks.core.stages.evaluate import evaluate_stage, summary_metrics
from tasks.core.store import StageResult, run_stage
from tasks.core.training.checkpoint import weights_digest
from tasks.runner import TASK_OPTIONS, finish_stage, publish_table


@task(name="evaluate", **TASK_OPTIONS)
def evaluate_task(
    features: StageResult,
    trained: StageResult,
    cfg: EvaluateConfig,
    seed: int,
    root: Path,
    force: bool = False,
    raw: str | None = None,
) -> StageResult:
    """``raw``: the run's raw exports; where the simulator left its hidden state there and ``cfg.oracles`` asks, the
    oracles are fitted. Keyed by the model's weights too: a retrained model is evaluated again."""
    names = features["features"]["names"]
    hidden = raw if raw and (Path(raw) / "hidden" / "hidden.json").is_file() else None
    result = run_stage(
        root,
        "evaluate",
        {
            "features": features.fingerprint,
            "train": trained.fingerprint,
            "weights": weights_digest(trained.path / "model.pt"),  # a retrained model of the same inputs: new key
            "oracle": "hidden" if hidden and cfg.oracles else "none",
        },
        cfg,
        lambda tmp: evaluate_stage(
            features.path, trained.path, names, cfg, seed, tmp, features["features"]["horizon_minutes"], hidden
        ),
        key=(seed,),
        force=force,
    )
    metrics = summary_metrics(result["results"])
    publish_table(
        "final-metrics",
        [
            {"model": k, **{n: round(v, 4) if isinstance(v, float) else v for n, v in r.items()}}
            for k, r in result["results"].items()
        ],
        "Held-out metrics: graph model vs gradient-boosted trees vs threshold rule",
    )
    return finish_stage(
        result,
        {
            "held-out window": " .. ".join(result["test_window"]),
            "model PR-AUC": f"{metrics['pr_auc']:.4f}",
            "tree PR-AUC": f"{metrics['baseline_pr_auc']:.4f}",
            "oracle PR-AUC": f"{metrics['oracle_pr_auc']:.4f}"
            if "oracle_pr_auc" in metrics
            else "not computed (evaluate.oracles=true on simulated data)",
            "seconds by part": ", ".join(f"{k} {v:.1f}" for k, v in result.get("timings_s", {}).items()),
        },
    )
