"""The frozen quality yardstick: pipeline runs over several topologies and simulator seeds, each evaluated the same
way (time-ordered split with purges, thresholds chosen on validation, event recall at a false-alert budget), and
the comparison across runs: each model's figures, and paired differences with bootstrap intervals over runs.

Pure: the runs come in as the pipeline's summaries; nothing here runs a stage.
"""

from __future__ import annotations

from typing import Any

import numpy as np

# The models every run reports, and their metric prefix in the pipeline summary.
MODELS = {
    "model": "",
    "tree": "baseline_",
    "stack": "stack_",
    "rule": "rule_",
    "oracle_own": "oracle_own_",
    "oracle": "oracle_",
}
METRICS = (
    "pr_auc",
    "event_recall",
    "false_alerts_per_element_day",
    "median_lead_min",
    "calibration_error",
    "events",
)
# The paired differences reported over runs: (name, minuend, subtrahend).
PAIRS = (
    ("model_minus_tree", "model", "tree"),
    ("stack_minus_tree", "stack", "tree"),
    ("oracle_minus_tree", "oracle", "tree"),
    ("graph_share", "oracle", "oracle_own"),
)
GOALS = {"headroom_closed": 0.5, "event_recall": 0.85, "false_alerts": 1.0, "median_lead_min": 30.0, "ece": 0.02}
MIN_TEST_EVENTS = 40


def run_record(topology: str, seed: int, held_out: bool, summary: dict[str, Any]) -> dict[str, Any]:
    """One pipeline run as the yardstick keeps it: its identity and each model's metrics (NaN where absent)."""
    m = summary.get("metrics") or {}
    rec: dict[str, Any] = {
        "topology": topology,
        "seed": seed,
        "held_out": held_out,
        "run_id": summary.get("run_id"),
        "mlflow_run_id": summary.get("mlflow_run_id"),
        "status": summary.get("status"),
    }
    for name, prefix in MODELS.items():
        rec[name] = {k: float(m.get(prefix + k, float("nan"))) for k in METRICS}
    rec["model"]["event_recall_minus_tree"] = [
        float(m.get(f"event_recall_minus_tree_{k}", float("nan"))) for k in ("difference", "low", "high")
    ]
    return rec


def bootstrap_mean(x: np.ndarray, resamples: int = 10_000, seed: int = 0) -> dict[str, float]:
    """The mean of ``x`` (one value per run) and its 95 % percentile interval, resampling runs."""
    x = np.asarray(x, float)
    x = x[np.isfinite(x)]
    if len(x) == 0:
        return {"mean": float("nan"), "low": float("nan"), "high": float("nan"), "n": 0}
    idx = np.random.default_rng(seed).integers(0, len(x), (resamples, len(x)))
    means = x[idx].mean(axis=1)
    return {
        "mean": float(x.mean()),
        "low": float(np.percentile(means, 2.5)),
        "high": float(np.percentile(means, 97.5)),
        "n": len(x),
    }


def headroom_closed(runs: list[dict], metric: str = "pr_auc", resamples: int = 10_000, seed: int = 0) -> dict:
    """How much of the gap between the tree and the oracle the graph model closes: mean(model - tree) /
    mean(oracle - tree), with a 95 % interval from resampling runs (the same resample for both means)."""
    a = np.array([r["model"][metric] - r["tree"][metric] for r in runs])
    b = np.array([r["oracle"][metric] - r["tree"][metric] for r in runs])
    ok = np.isfinite(a) & np.isfinite(b)
    a, b = a[ok], b[ok]
    if len(a) == 0 or b.mean() <= 0:
        return {"ratio": float("nan"), "low": float("nan"), "high": float("nan"), "n": int(len(a))}
    idx = np.random.default_rng(seed).integers(0, len(a), (resamples, len(a)))
    den = b[idx].mean(axis=1)
    ratios = np.where(den > 0, a[idx].mean(axis=1) / np.where(den > 0, den, 1), np.nan)
    return {
        "ratio": float(a.mean() / b.mean()),
        "low": float(np.nanpercentile(ratios, 2.5)),
        "high": float(np.nanpercentile(ratios, 97.5)),
        "n": int(len(a)),
    }


def summarise(runs: list[dict]) -> dict[str, Any]:
    """Each model's metrics over the runs (mean, and the 95 % interval over runs), and the paired differences."""
    out: dict[str, Any] = {"models": {}, "paired": {}}
    for name in MODELS:
        out["models"][name] = {k: bootstrap_mean(np.array([r[name][k] for r in runs])) for k in METRICS}
    for label, a, b in PAIRS:
        out["paired"][label] = {
            k: bootstrap_mean(np.array([r[a][k] - r[b][k] for r in runs])) for k in ("pr_auc", "event_recall")
        }
    out["headroom_closed_pr_auc"] = headroom_closed(runs)
    return out


def goals(runs: list[dict], summary: dict[str, Any]) -> dict[str, Any]:
    """The issue's goals for the graph model on this yardstick, each with the figure it is judged on."""
    m = summary["models"]["model"]
    h = summary["headroom_closed_pr_auc"]
    diff = summary["paired"]["model_minus_tree"]["pr_auc"]
    min_events = min((r["model"]["events"] for r in runs), default=float("nan"))

    def at_least(value: float, goal: float) -> dict[str, Any]:
        return {"value": value, "goal": goal, "met": value >= goal}

    def at_most(value: float, goal: float) -> dict[str, Any]:
        return {"value": value, "goal": goal, "met": value <= goal}

    return {
        "headroom_closed": at_least(h["ratio"], GOALS["headroom_closed"]),
        "model_minus_tree_above_zero": {"value": diff["low"], "goal": 0.0, "met": diff["low"] > 0},
        "event_recall": at_least(m["event_recall"]["mean"], GOALS["event_recall"]),
        "false_alerts_per_element_day": at_most(m["false_alerts_per_element_day"]["mean"], GOALS["false_alerts"]),
        "median_lead_min": at_least(m["median_lead_min"]["mean"], GOALS["median_lead_min"]),
        "calibration_error": at_most(m["calibration_error"]["mean"], GOALS["ece"]),
        "test_events_per_run": at_least(min_events, MIN_TEST_EVENTS),
    }


def quality_report(runs: list[dict], spec: dict[str, Any]) -> dict[str, Any]:
    """The yardstick's report: the runs, the summary over all runs, over the topologies tuning may look at and over
    the held-out ones alone, the goals, and the better of the graph model and the tree by mean PR-AUC."""
    summary = summarise(runs)
    held = [r for r in runs if r["held_out"]]
    tuned = [r for r in runs if not r["held_out"]]
    better = (
        "model"
        if summary["models"]["model"]["pr_auc"]["mean"] > summary["models"]["tree"]["pr_auc"]["mean"]
        else "tree"
    )
    return {
        "benchmark": "quality",
        "spec": spec,
        "runs": runs,
        "summary": summary,
        "tuning_summary": summarise(tuned) if tuned else None,  # what a choice of model or setting may look at
        "held_out_summary": summarise(held) if held else None,  # what it may not
        "goals": goals(runs, summary),
        "better_by_pr_auc": better,
        "extrapolated": False,
    }


def _fmt(s: dict[str, float], digits: int = 3) -> str:
    return f"{s['mean']:.{digits}f} [{s['low']:.{digits}f}, {s['high']:.{digits}f}]" if s["n"] else "n/a"


def markdown_table(report: dict[str, Any]) -> str:
    """Mean over runs with the 95 % interval over runs, per model; then the paired differences and the goals."""
    s = report["summary"]
    head = "| model | PR-AUC | event recall | false alerts / element-day | median lead (min) | calibration error |"
    lines = [head, "|---|---|---|---|---|---|"]
    for name in MODELS:
        m = s["models"][name]
        cells = [_fmt(m[k]) for k in ("pr_auc", "event_recall", "false_alerts_per_element_day")]
        cells += [_fmt(m["median_lead_min"], 1), _fmt(m["calibration_error"])]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    lines += ["", "| paired difference (over runs) | PR-AUC | event recall |", "|---|---|---|"]
    for label, pair in s["paired"].items():
        lines.append(f"| {label} | {_fmt(pair['pr_auc'])} | {_fmt(pair['event_recall'])} |")
    h = s["headroom_closed_pr_auc"]
    lines += ["", f"Headroom closed (PR-AUC): {h['ratio']:.2f} [{h['low']:.2f}, {h['high']:.2f}] over {h['n']} runs."]
    lines += ["", "| goal | value | target | met |", "|---|---|---|---|"]
    for k, g in report["goals"].items():
        lines.append(f"| {k} | {g['value']:.3f} | {g['goal']} | {'yes' if g['met'] else 'no'} |")
    return "\n".join(lines)


def plot_quality(report: dict[str, Any], path) -> Any:
    """Per run (grouped by topology, held-out ones marked): PR-AUC and event recall of each model."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    runs = report["runs"]
    labels = [f"{r['topology'].split('/')[-1]}{'*' if r['held_out'] else ''}\ns{r['seed']}" for r in runs]
    fig, axes = plt.subplots(2, 1, figsize=(max(8, 0.6 * len(runs) + 3), 7), sharex=True)
    marks = {"model": "o", "tree": "s", "stack": "D", "rule": "v", "oracle_own": "^", "oracle": "*"}
    for ax, metric, title in ((axes[0], "pr_auc", "PR-AUC"), (axes[1], "event_recall", "event recall at the budget")):
        for name, mk in marks.items():
            ax.plot(range(len(runs)), [r[name][metric] for r in runs], mk, label=name, alpha=0.8)
        ax.set_ylabel(title)
        ax.grid(alpha=0.3)
    axes[0].legend(ncol=6, fontsize=8)
    axes[0].set_title("Quality yardstick: each run (topology, seed; * = held out of all tuning)")
    axes[1].set_xticks(range(len(runs)), labels, fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def paired_runs(a: dict[str, Any], b: dict[str, Any], model: str = "model", metric: str = "pr_auc") -> dict[str, Any]:
    """``model``'s ``metric`` in report ``a`` minus in report ``b``, run by run (the same topology and seed in
    both: an ablation against the default), its mean with the 95 % interval over runs, and in how many runs ``a``
    is ahead. Two invocations: comparable run by run only because the same seed gives the same data (the two
    reports' tree figures, identical, show it)."""
    key = lambda r: (r["topology"], r["seed"])  # noqa: E731
    other = {key(r): r for r in b["runs"]}
    pairs = [(r[model][metric], other[key(r)][model][metric]) for r in a["runs"] if key(r) in other]
    if len(pairs) != len(a["runs"]) or len(pairs) != len(b["runs"]):
        raise ValueError("the two reports do not hold the same runs (topology, seed)")
    d = np.array([x - y for x, y in pairs], float)
    same_tree = all(r["tree"]["pr_auc"] == other[key(r)]["tree"]["pr_auc"] for r in a["runs"])
    return {
        **bootstrap_mean(d),
        "ahead": int((d > 0).sum()),
        "min": float(d.min()),
        "max": float(d.max()),
        "same_data": same_tree,
    }


def _read(path: str) -> dict[str, Any]:
    """A report as written (an undefined figure is null, strict JSON), with null read back as nan for the tables."""
    import json

    nulls_as_nan = lambda d: {k: float("nan") if v is None else v for k, v in d.items()}  # noqa: E731
    return json.loads(open(path).read(), object_hook=nulls_as_nan)


if __name__ == "__main__":
    # python -m tasks.core.benchmarks.quality REPORT.json ...: each report's tables
    # python -m tasks.core.benchmarks.quality --paired A.json B.json: the graph model in A minus in B, run by run
    import sys

    if sys.argv[1:2] == ["--paired"]:
        a_path, b_path = sys.argv[2:4]
        for metric in ("pr_auc", "event_recall", "calibration_error"):
            p = paired_runs(_read(a_path), _read(b_path), metric=metric)
            print(
                f"model {metric}, {a_path} minus {b_path}: {_fmt(p)} over {p['n']} runs, A ahead in {p['ahead']}, "
                f"per run {p['min']:.3f} to {p['max']:.3f}; same data (tree identical): {p['same_data']}"
            )
    else:
        for path in sys.argv[1:]:
            print(f"{path}\n\n{markdown_table(_read(path))}\n")
