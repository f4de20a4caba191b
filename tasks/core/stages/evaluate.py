"""Evaluation on the held-out time window: the graph model against a tree baseline and a threshold rule."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import torch

from tasks.core.arrays import array_module, device_room, release_gpu_memory, to_host
from tasks.core.background import in_thread
from tasks.core.config import EvaluateConfig
from tasks.core.laps import Laps
from tasks.core.metrics import classification_metrics, lead_times
from tasks.core.stages.baselines import Rows, fit_tree, oracle_scores, read_hidden, stack_scores
from tasks.core.stages.serving import write_served
from tasks.core.topology import Topology
from tasks.core.training.frame_tensors import element_codes, feature_files, has_cudf, load_x, read_file
from tasks.core.training.model import load_model, normalised_adjacency, score_snapshots
from tasks.core.yardstick import alert_quality, calibration_error, event_leads, recall_difference, threshold_for_budget

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


def score_device(tree_device: str) -> str:
    """Where the graph model scores: the GPU when asked for or usable (``auto``), else the CPU."""
    if tree_device == "cpu":
        return "cpu"
    return "cuda" if tree_device == "cuda" or torch.cuda.is_available() else "cpu"


def model_scores(model_path: Path, data_path: Path, ts: np.ndarray, device: str = "cpu") -> np.ndarray:
    """Scores [len(ts), E] of the trained model on the snapshots ``ts``, on ``device`` (batches of 256 there), from
    X of the steps they look back on alone (built on the GPU from the features where the ranks built theirs)."""
    model, ck = load_model(model_path)
    d = np.load(data_path)
    lo = max(0, int(ts[0]) - ck["window"] + 1) if len(ts) else 0
    x = load_x(data_path, device, lo)
    adj = normalised_adjacency(d["indptr"], d["indices"], x.shape[1]).to(device)
    batch = 256 if device == "cuda" else 64
    return score_snapshots(model.to(device), x, adj, ts - lo, ck["window"], batch=batch).cpu().numpy()


META = ("label", "in_fault", "minutes_to_fault")  # beside each row's step (t_us) and element (e_idx)


def read_rows(features_dir: Path, names: list[str], topo: Topology, gpu: bool) -> tuple[pd.DataFrame, Any]:
    """The rows' time (``t_us``, microseconds), element (``e_idx``, the topology's order), label and rule columns as
    a pandas frame, and the feature matrix [rows, F] in float32 where the tree fits. On the GPU (``gpu``) the
    Parquet is read through cuDF, the index columns computed there and only numbers cross to the host; the matrix
    stays in GPU memory (CuPy), filled one file at a time: the peak is the matrix and a file's features."""
    import pyarrow.parquet as pq

    from tasks.core.arrays import micros

    files = feature_files(features_dir)
    keep = list({**dict.fromkeys(META), **RULE_WEIGHTS})
    f = read_file(files, ["element_id", "timestamp", *keep], gpu)  # the narrow columns of every row at once
    rows = f[keep].to_pandas() if gpu else f[keep].copy()
    rows["t_us"] = to_host(micros(f["timestamp"]))
    rows["e_idx"] = to_host(element_codes(f["element_id"], topo, features_dir))
    del f
    ends = np.cumsum([0, *(pq.read_metadata(p).num_rows for p in files)])
    x = metrics_module("cuda" if gpu else "cpu").empty((int(ends[-1]), len(names)), np.float32)  # CuPy on the GPU
    for p, a, b in zip(files, ends[:-1], ends[1:]):
        part = read_file(p, names, gpu)
        x[a:b] = part.to_cupy(dtype="float32", na_value=np.nan) if gpu else part.to_numpy(np.float32)
    return rows, x


def gpu_rows(device: str) -> bool:
    """Rows read into GPU memory where the models score there and cuDF is installed."""
    return device == "cuda" and has_cudf()


def metrics_module(device: str):
    """Where the held-out metrics are computed: CuPy on the GPU the models scored on, else NumPy."""
    if device == "cuda":
        try:
            import cupy

            return cupy
        except ImportError:
            pass
    return np


def _on(x, mask: np.ndarray):
    """The rows ``mask`` selects, as indices on the device of ``x``. A boolean mask would do on NumPy, but CuPy
    broadcasts a row mask to the whole matrix and prefix-sums it, in int64 past 2**31 elements: twice the matrix's
    bytes (41 GB at 4x the gpu profile's rows); indices take only the rows."""
    return array_module(x).asarray(np.flatnonzero(mask))


def evaluate(
    features_dir: Path,
    data_path: Path,
    model_path: Path,
    topo: Topology,
    names: list[str],
    cfg: EvaluateConfig,
    seed: int,
    horizon_minutes: int = 60,
    raw: Path | None = None,
) -> dict[str, Any]:
    """The held-out metrics of the model and its baselines (the rule, the tuned tree and, when ``cfg.oracles`` asks
    and ``raw`` holds the simulator's hidden state, the oracles)."""
    lap = Laps()  # seconds of each part, in the manifest: where evaluation's time goes
    d = np.load(data_path)
    times, test_t = d["times"], d["test_t"]
    device = score_device(cfg.tree_device)
    df, x = read_rows(features_dir, names, topo, gpu_rows(device))
    t_idx, e_idx = np.searchsorted(times, df["t_us"].to_numpy()), df["e_idx"].to_numpy()
    usable = df["in_fault"].to_numpy() == 0
    step, horizon, train, val = _fit_windows(d, t_idx, usable, horizon_minutes)
    lap("read_rows")
    y, ts = df["label"].to_numpy(), np.concatenate([d["val_t"], test_t])  # validation, then test: consecutive
    # the graph model scores while the tree fits where both fit beside the matrix: the tree's chunk of rows and
    # quantised matrix (at most 1x it), the scored steps' X and a file (tree_fit's lap holds both)
    graph = beside(device_room(x, 2.1 - ts[0] / len(times)), model_scores, model_path, data_path, ts, device)
    tree = fit_tree(Rows(x, _on(x, train)), y[train], Rows(x, _on(x, val)), y[val], seed, cfg.tree_device)
    lap("tree_fit")
    span = t_idx >= ts[0]
    rows = df[span].reset_index(drop=True)
    scores = {"tree": tree.predict_proba(Rows(x, _on(x, span)))[:, 1]}
    del x
    lap("tree_predict")
    hidden = read_hidden(raw) if raw and cfg.oracles else None
    oracles = oracle_scores(hidden, topo, df, (train, val, span), seed, cfg.tree_device) if hidden else {}
    _ = oracles and lap("oracles")
    grid = graph()
    scores = {"model": grid[t_idx[span] - ts[0], e_idx[span]], **scores, "rule": rule_scores(rows)}
    val_rows = (t_idx[span] < test_t[0] - horizon) & usable[span]  # validation, its last horizon purged
    xp = metrics_module(device)
    stack = _stack(scores, rows["label"].to_numpy(), val_rows, xp) if cfg.stack else None
    scores.update({k: o["scores"] for k, o in oracles.items()})
    lap("model_scores")
    test = (t_idx[span] >= test_t[0]) & usable[span]
    results = _test_metrics(rows[test].reset_index(drop=True), {k: s[test] for k, s in scores.items()}, cfg, xp)
    windows = {"val": (int(ts[0]), int(test_t[0])), "test": (int(test_t[0]), len(times))}
    cells = (t_idx[span], e_idx[span], topo.n)
    for name, alerts in validated_alerts(rows, cells, scores, windows, horizon, step, cfg, xp).items():
        results[name]["metrics"].update(alerts)
    _how_chosen(results, tree, oracles, stack)
    lap("metrics")
    return {
        "timings_s": lap.seconds,
        "served": (tree, stack["tree_weight"] if stack else 0.0),  # what the registry serves: the stack, or the GNN
        "y": rows.loc[test, "label"].to_numpy().astype(int),
        "results": results,
        "rule": RULE,
        "test_rows": int(test.sum()),
        "test_window": [str(pd.Timestamp(int(times[i]), unit="us")) for i in (test_t[0], test_t[-1])],
    }


def beside(now: bool, fn, *args) -> Callable[[], Any]:
    """``fn(*args)`` begun in a thread now (``now``) or run when asked; calling the result gives its value or error."""
    if not now:
        return lambda: fn(*args)
    return in_thread("evaluate", fn, *args).result


def _fit_windows(d, t_idx: np.ndarray, usable: np.ndarray, horizon_minutes: float):
    """(step minutes, label horizon in steps, the tree's training rows, its validation rows): each window's last
    horizon purged, as the labels there look into the next window."""
    times, test_t = d["times"], d["test_t"]
    val_start = int(d["train_t"][-1]) + 1 if len(d["train_t"]) else 0
    step = float(np.median(np.diff(times))) / 60e6 if len(times) > 1 else 5.0
    horizon = max(1, int(round(horizon_minutes / step)))  # steps a label looks ahead: the purge at each boundary
    train = usable & (t_idx < val_start - horizon)
    train = train if train.any() else usable & (t_idx < val_start)  # a window too short to purge
    val = usable & (t_idx >= val_start) & (t_idx < test_t[0] - horizon)
    return step, horizon, train, val


def _stack(scores: dict[str, np.ndarray], y: np.ndarray, val_rows: np.ndarray, xp=np) -> dict[str, float]:
    """Adds the GBDT + GNN stack to ``scores``; returns how it was chosen."""
    scores["stack"], chosen = stack_scores(scores["model"], scores["tree"], y, val_rows, xp)
    return chosen


def _how_chosen(results: dict, tree, oracles: dict, stack: dict | None) -> None:
    """Each tuned tree's grid point, rounds and device, and the stack's weight, beside their metrics."""
    for name, fitted in {"tree": tree, **{k: o["tree"] for k, o in oracles.items()}}.items():
        results[name]["metrics"].update(tree_metrics(fitted))
    if stack:
        results["stack"]["metrics"].update(stack)


def tree_metrics(tree) -> dict[str, Any]:
    """How a tuned tree was chosen, for the manifest and MLflow."""
    return {
        "iterations": int(tree.n_iter_),
        "max_depth": int(tree.params["max_depth"]),
        "val_pr_auc": tree.val_aucpr,
        "gpu": int(tree.device == "cuda"),
        "tuned_on_rows": int(tree.tuned_rows),
    }


def _test_metrics(test_df: pd.DataFrame, scores: dict[str, np.ndarray], cfg: EvaluateConfig, xp=np) -> dict[str, Any]:
    """Each model's classification metrics on the test rows (computed with ``xp``: CuPy on the GPU), and lead times
    at its best-F1 threshold."""
    t_us = test_df["t_us"].to_numpy()
    y = test_df["label"].to_numpy().astype(int)
    onset = (t_us // 60_000_000 + np.nan_to_num(test_df["minutes_to_fault"].to_numpy(), nan=-1)).astype(np.int64)
    fault_key = test_df["e_idx"].to_numpy().astype(np.int64) * (1 << 36) + onset  # the element, its onset minute
    results = {}
    for name, s in scores.items():
        m = classification_metrics(xp.asarray(y), xp.asarray(s), cfg.precision_target)
        leads = lead_times(test_df["minutes_to_fault"].to_numpy(), fault_key, s >= m["threshold"])
        m["mean_lead_time_min"] = float(leads.mean()) if len(leads) else 0.0
        m["faults_warned"] = int(len(leads))
        results[name] = {"metrics": m, "scores": s, "leads": leads}
    return results


def _grids(rows: pd.DataFrame, cells, lo: int, hi: int, scores: dict[str, np.ndarray]) -> dict[str, Any]:
    """[step, element] grids of the window [lo, hi): label, in_fault, usable, and each model's scores (-inf where
    no row)."""
    t, e, n_e = cells
    sel = (t >= lo) & (t < hi)
    at = (t[sel] - lo, e[sel])
    out: dict[str, Any] = {"label": np.zeros((hi - lo, n_e), np.int8), "in_fault": np.zeros((hi - lo, n_e), np.int8)}
    out["label"][at] = rows["label"].to_numpy()[sel]
    out["in_fault"][at] = rows["in_fault"].to_numpy()[sel]
    out["usable"] = np.zeros((hi - lo, n_e), bool)
    out["usable"][at] = rows["in_fault"].to_numpy()[sel] == 0
    out["scores"] = {}
    for name, s in scores.items():
        out["scores"][name] = np.full((hi - lo, n_e), -np.inf)
        out["scores"][name][at] = s[sel]
    return out


def validated_alerts(rows, cells, scores, windows, horizon: int, step: float, cfg: EvaluateConfig, xp=np):
    """Per model: the alert threshold chosen on the validation window (its last horizon purged: those labels
    describe faults in the test window) for ``cfg.false_alerts_per_element_day``, and what that threshold does on
    the test window: event recall, false-alert episodes per element-day, lead times; and the calibration error of
    the models that give probabilities. Nothing here is tuned on the test window. ``horizon``: the label's
    look-ahead in steps of ``step`` minutes. ``xp``: where the grids' sorts and gathers run (CuPy: on the GPU)."""
    (v_lo, v_hi), (t_lo, t_hi) = windows["val"], windows["test"]
    val = _on_device(_grids(rows, cells, v_lo, v_hi - horizon, scores), xp) if v_hi - horizon > v_lo else None
    test = _on_device(_grids(rows, cells, t_lo, t_hi, scores), xp)
    out, leads = {}, {}
    for name in scores:
        budget = cfg.false_alerts_per_element_day
        thr = (  # no validation window left after the purge: no threshold, no alerts
            threshold_for_budget(val["scores"][name], val["label"], val["usable"], budget, step) if val else np.inf
        )
        leads[name] = tuple(map(to_host, event_leads(test["scores"][name] >= thr, test["in_fault"], horizon)))
        q = alert_quality(test["scores"][name], test["label"], test["in_fault"], test["usable"], thr, horizon, step,
                          leads[name][1])  # fmt: skip
        out[name] = {"alert_threshold_val": thr if np.isfinite(thr) else float("nan"), **q}
        if name != "rule":  # the rule's score is a weighted count, not a probability
            u = test["usable"]
            out[name]["calibration_error"] = calibration_error(test["label"][u], test["scores"][name][u])
    if {"model", "tree"} <= set(leads) and len(leads["model"][0]):  # the same events, warned or not by each
        diff = recall_difference(leads["model"][0], leads["model"][1], leads["tree"][1], cells[2], resamples=1000)
        out["model"].update({f"event_recall_minus_tree_{k}": diff[k] for k in ("difference", "low", "high")})
    return out


def _on_device(grid: dict[str, Any], xp) -> dict[str, Any]:
    """A window's grids (``_grids``) moved to ``xp``'s device."""
    return {k: ({n: xp.asarray(s) for n, s in v.items()} if k == "scores" else xp.asarray(v)) for k, v in grid.items()}


def plot_evaluation(ev: dict[str, Any], out: Path, xp=np) -> dict[str, Path]:
    """The PR curves, the model's confusion matrix and the warning lead times as PNGs in ``out``. ``xp``: where the
    curves and counts are computed (CuPy: on the GPU, only the plotted points coming back)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from sklearn.metrics import ConfusionMatrixDisplay

    from tasks.core.metrics import confusion_counts, precision_recall

    out.mkdir(parents=True, exist_ok=True)
    paths = {}
    y = xp.asarray(ev["y"])
    fig, ax = plt.subplots(figsize=(6, 4.5))
    for name, r in ev["results"].items():
        # millions of thresholds at scale: a few thousand points draw the same curve
        p, rc = precision_recall(y, xp.asarray(r["scores"]), points=2000)
        ax.plot(rc, p, label=f"{name} (PR-AUC {r['metrics']['pr_auc']:.3f})")
    ax.set(xlabel="recall", ylabel="precision", title="Fault prediction, held-out window")
    ax.legend(loc="lower left")
    paths["pr_curve"] = out / "pr_curve.png"
    fig.savefig(paths["pr_curve"], dpi=110, bbox_inches="tight")
    plt.close(fig)
    m = ev["results"]["model"]
    fig, ax = plt.subplots(figsize=(4.5, 4))
    cm = confusion_counts(y, xp.asarray(m["scores"]) >= m["metrics"]["threshold"])
    ConfusionMatrixDisplay(cm, display_labels=[0, 1]).plot(ax=ax, colorbar=False)
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


def evaluate_stage(
    features_dir: Path,
    train_dir: Path,
    names: list[str],
    cfg: EvaluateConfig,
    seed: int,
    out: Path,
    horizon: int = 60,
    raw: Path | None = None,
):
    """Metrics and plots of the held-out window in ``out``, and the manifest body."""
    import json

    topo = Topology.read(features_dir / "topology.json")
    released: dict[str, int] = {}
    try:
        ev = evaluate(
            features_dir / "features", train_dir / "data.npz", train_dir / "model.pt", topo, names, cfg, seed,
            horizon, raw,
        )  # fmt: skip
        lap = Laps()
        plots = plot_evaluation(ev, out / "plots", metrics_module(score_device(cfg.tree_device)))
        lap("plots")
    finally:  # the rows' matrix and the scores' batches leave this process's GPU pools for the stages after
        released = release_gpu_memory()
    results = {k: r["metrics"] for k, r in ev["results"].items()}
    (out / "metrics.json").write_text(json.dumps(results, indent=1))
    tree, weight = ev["served"]
    served = write_served(
        out / "served", train_dir, names, tree, weight, served_metrics(results, weight), network=topo.name
    )
    lap("served")
    return {
        "rows_in": ev["test_rows"],
        "rows_out": ev["test_rows"],
        "results": results,
        "rule": ev["rule"],
        "test_window": ev["test_window"],
        "timings_s": {**ev["timings_s"], **lap.seconds},
        "plots": {k: p.name for k, p in plots.items()},
        "gpu_pools_released_bytes": released,
        "served": {k: v for k, v in served.items() if k != "features"},
    }


def served_metrics(results: dict[str, Any], tree_weight: float) -> dict[str, float]:
    """The held-out figures of what is served (the stack where the tree has weight, else the GNN), with the tree's
    PR-AUC beside them: what the registry's ``champion`` rule compares."""
    own = results["stack" if tree_weight > 0 else "model"]
    keep = ("pr_auc", "roc_auc", "event_recall", "median_lead_min", "calibration_error")
    out = {k: own[k] for k in keep if isinstance(own.get(k), (int, float))}
    out["baseline_pr_auc"] = results["tree"]["pr_auc"]
    return out


def summary_metrics(results: dict[str, Any]) -> dict[str, float]:
    """The headline figures: the model's metrics, and each baseline's under a prefix."""
    out = dict(results["model"])
    named = (
        ("tree", "baseline"),
        ("rule", "rule"),
        ("stack", "stack"),
        ("oracle", "oracle"),
        ("oracle_own", "oracle_own"),
    )
    for name, prefix in named:
        out.update({f"{prefix}_{k}": v for k, v in results.get(name, {}).items()})
    return out
