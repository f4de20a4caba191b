"""Evaluation on the held-out time window: the graph model against a tree baseline and a threshold rule."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import torch

from tasks.core.config import EvaluateConfig
from tasks.core.metrics import classification_metrics, lead_times
from tasks.core.topology import Topology
from tasks.core.training.model import load_model, normalised_adjacency, score_snapshots

# The threshold rule a NOC would write: weighted precursor alarms in the last hour plus recent packet loss.
RULE_WEIGHTS = {
    "alarms_major_1h": 1.0,
    "alarms_minor_1h": 0.5,
    "alarms_warning_1h": 0.25,
    "packet_loss_pct_mean_3": 0.1,
}
RULE = " + ".join(f"{w:g}*{c}" for c, w in RULE_WEIGHTS.items())


def rule_scores(df: pd.DataFrame) -> np.ndarray:
    return sum(w * df[c].to_numpy(np.float64) for c, w in RULE_WEIGHTS.items())


def model_scores(model_path: Path, data_path: Path) -> np.ndarray:
    """Scores [len(test_t), E] of the trained model on the test snapshots (CPU)."""
    model, ck = load_model(model_path)
    d = np.load(data_path)
    x = torch.from_numpy(d["X"])
    adj = normalised_adjacency(d["indptr"], d["indices"], x.shape[1])
    return score_snapshots(model, x, adj, d["test_t"], ck["window"]).numpy()


def _rows(features_dir: Path, names: list[str]) -> pd.DataFrame:
    return pd.read_parquet(
        features_dir, columns=["element_id", "timestamp", *names, "label", "in_fault", "minutes_to_fault"]
    )


class Laps:
    """Seconds of each part of a computation, in order: ``lap(name)`` closes the part that ends now."""

    def __init__(self) -> None:
        self.start, self.seconds = time.perf_counter(), {}

    def __call__(self, name: str) -> None:
        now = time.perf_counter()
        self.seconds[name] = round(now - self.start, 3)
        self.start = now


def evaluate(
    features_dir: Path,
    data_path: Path,
    model_path: Path,
    topo: Topology,
    names: list[str],
    cfg: EvaluateConfig,
    seed: int,
) -> dict[str, Any]:
    from sklearn.ensemble import HistGradientBoostingClassifier

    lap = Laps()  # seconds of each part, in the manifest: where evaluation's time goes
    d = np.load(data_path)
    times = d["times"]
    val_start = int(d["train_t"][-1]) + 1 if len(d["train_t"]) else 0
    test_t = d["test_t"]
    df = _rows(features_dir, names)
    t_us = pd.DatetimeIndex(df["timestamp"]).as_unit("us").asi8
    t_idx = np.searchsorted(times, t_us)
    e_idx = df["element_id"].map({e: i for i, e in enumerate(topo.element_ids)}).to_numpy()
    usable = df["in_fault"].to_numpy() == 0
    train = usable & (t_idx < val_start)
    test = usable & (t_idx >= test_t[0])
    lap("read_rows")
    tree = HistGradientBoostingClassifier(max_iter=200, learning_rate=0.08, random_state=seed)
    tree.fit(df.loc[train, names].to_numpy(), df.loc[train, "label"].to_numpy())
    lap("tree_fit")
    test_df = df[test].reset_index(drop=True)
    scores_tree = tree.predict_proba(test_df[names].to_numpy())[:, 1]
    lap("tree_predict")
    scores_rule = rule_scores(test_df)
    scores_gnn = model_scores(model_path, data_path)[t_idx[test] - test_t[0], e_idx[test]]
    lap("model_scores")
    y = test_df["label"].to_numpy().astype(int)
    results = {}
    fault_key = (  # one key per fault: the element and the minute of its onset
        test_df["element_id"].astype(str).to_numpy()
        + "@"
        + (t_us[test] // 60_000_000 + np.nan_to_num(test_df["minutes_to_fault"].to_numpy(), nan=-1))
        .astype(np.int64)
        .astype(str)
    )
    for name, s in (("model", scores_gnn), ("tree", scores_tree), ("rule", scores_rule)):
        m = classification_metrics(y, s, cfg.precision_target)
        leads = lead_times(test_df["minutes_to_fault"].to_numpy(), fault_key, s >= m["threshold"])
        m["mean_lead_time_min"] = float(leads.mean()) if len(leads) else 0.0
        m["faults_warned"] = int(len(leads))
        results[name] = {"metrics": m, "scores": s, "leads": leads}
    lap("metrics")
    return {
        "timings_s": lap.seconds,
        "y": y,
        "results": results,
        "rule": RULE,
        "test_rows": int(test.sum()),
        "test_window": [
            str(pd.Timestamp(int(times[test_t[0]]), unit="us")),
            str(pd.Timestamp(int(times[test_t[-1]]), unit="us")),
        ],
    }


def plot_evaluation(ev: dict[str, Any], out: Path) -> dict[str, Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from sklearn.metrics import ConfusionMatrixDisplay, precision_recall_curve

    out.mkdir(parents=True, exist_ok=True)
    paths = {}
    fig, ax = plt.subplots(figsize=(6, 4.5))
    for name, r in ev["results"].items():
        p, rc, _ = precision_recall_curve(ev["y"], r["scores"])
        ax.plot(rc, p, label=f"{name} (PR-AUC {r['metrics']['pr_auc']:.3f})")
    ax.set(xlabel="recall", ylabel="precision", title="Fault prediction, held-out window")
    ax.legend()
    paths["pr_curve"] = out / "pr_curve.png"
    fig.savefig(paths["pr_curve"], dpi=110, bbox_inches="tight")
    plt.close(fig)
    m = ev["results"]["model"]
    fig, ax = plt.subplots(figsize=(4.5, 4))
    ConfusionMatrixDisplay.from_predictions(
        ev["y"], (m["scores"] >= m["metrics"]["threshold"]).astype(int), ax=ax, colorbar=False
    )
    ax.set_title("model at best-F1 threshold")
    paths["confusion_matrix"] = out / "confusion_matrix.png"
    fig.savefig(paths["confusion_matrix"], dpi=110, bbox_inches="tight")
    plt.close(fig)
    fig, ax = plt.subplots(figsize=(6, 4))
    for name, r in ev["results"].items():
        if len(r["leads"]):
            ax.hist(r["leads"], bins=np.arange(0, 70, 5), alpha=0.5, label=name)
    ax.set(xlabel="warning lead time (min)", ylabel="faults", title="Lead time of the first warning")
    ax.legend()
    paths["lead_time_hist"] = out / "lead_time_hist.png"
    fig.savefig(paths["lead_time_hist"], dpi=110, bbox_inches="tight")
    plt.close(fig)
    return paths


def evaluate_stage(features_dir: Path, train_dir: Path, names: list[str], cfg: EvaluateConfig, seed: int, out: Path):
    """Metrics and plots of the held-out window in ``out``, and the manifest body."""
    import json

    ev = evaluate(
        features_dir / "features",
        train_dir / "data.npz",
        train_dir / "model.pt",
        Topology.read(features_dir / "topology.json"),
        names,
        cfg,
        seed,
    )
    plots = plot_evaluation(ev, out / "plots")
    results = {k: r["metrics"] for k, r in ev["results"].items()}
    (out / "metrics.json").write_text(json.dumps(results, indent=1))
    return {
        "rows_in": ev["test_rows"],
        "rows_out": ev["test_rows"],
        "results": results,
        "rule": ev["rule"],
        "test_window": ev["test_window"],
        "timings_s": ev["timings_s"],
        "plots": {k: p.name for k, p in plots.items()},
    }


def summary_metrics(results: dict[str, Any]) -> dict[str, float]:
    """The headline figures: the model's metrics, and each baseline's under a prefix."""
    out = dict(results["model"])
    for name, prefix in (("tree", "baseline"), ("rule", "rule")):
        out.update({f"{prefix}_{k}": v for k, v in results[name].items()})
    return out
