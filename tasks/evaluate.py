"""Evaluate stage: held-out window metrics for the model and its baselines, with plots."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from prefect import task

from tasks.common import TASK_OPTIONS, Timer, manifest_header, publish_stage_artifact, publish_table, stage_result
from tasks.core.config import EvaluateConfig
from tasks.core.evaluate import evaluate, plot_evaluation
from tasks.core.store import code_version, completed, fingerprint, publish_manifest, published, staging
from tasks.core.topology import Topology


def summary_metrics(results: dict[str, Any]) -> dict[str, float]:
    """The headline figures: the model's metrics, and each baseline's under a prefix."""
    out = dict(results["model"])
    for name in ("tree", "rule"):
        prefix = "baseline" if name == "tree" else "rule"
        out.update({f"{prefix}_{k}": v for k, v in results[name].items()})
    return out


@task(name="evaluate", **TASK_OPTIONS)
def evaluate_task(
    features: dict[str, Any], trained: dict[str, Any], cfg: EvaluateConfig, seed: int, root: Path, force: bool = False
) -> dict[str, Any]:
    fp = fingerprint(
        "evaluate", features["fingerprint"], trained["fingerprint"], cfg.model_dump(mode="json"), code_version()
    )
    out = None if force else completed(root, "evaluate", fp)
    if out is None:
        feat_dir = Path(features["output"])
        with staging(root, "evaluate", fp) as tmp, Timer() as timer:
            ev = evaluate(
                feat_dir / "features",
                Path(trained["data"]),
                Path(trained["model"]),
                Topology.read(feat_dir / "topology.json"),
                features["feature_names"],
                cfg,
                seed,
            )
            plots = plot_evaluation(ev, tmp / "plots")
            results = {k: r["metrics"] for k, r in ev["results"].items()}
            (tmp / "metrics.json").write_text(json.dumps(results, indent=1))
            publish_manifest(
                tmp,
                {
                    **manifest_header(
                        "evaluate",
                        {"features": features["fingerprint"], "train": trained["fingerprint"]},
                        cfg,
                        timer.seconds,
                    ),
                    "rows_in": ev["test_rows"],
                    "rows_out": ev["test_rows"],
                    "results": results,
                    "rule": ev["rule"],
                    "test_window": ev["test_window"],
                    "plots": {k: p.name for k, p in plots.items()},
                },
            )
        out = published(root, "evaluate", fp)
    m = out.manifest
    metrics = summary_metrics(m["results"])
    result = stage_result(
        "evaluate",
        out,
        {
            "metrics": metrics,
            "results": m["results"],
            "plots": {k: str(out.path / "plots" / v) for k, v in m["plots"].items()},
        },
    )
    publish_stage_artifact(
        result,
        {
            "held-out window": " .. ".join(m["test_window"]),
            "model PR-AUC": f"{metrics['pr_auc']:.4f}",
            "tree PR-AUC": f"{metrics['baseline_pr_auc']:.4f}",
        },
    )
    publish_table(
        "final-metrics",
        [
            {"model": k, **{n: round(v, 4) if isinstance(v, float) else v for n, v in r.items()}}
            for k, r in m["results"].items()
        ],
        "Held-out metrics: graph model vs gradient-boosted trees vs threshold rule",
    )
    return result
