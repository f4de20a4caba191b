"""The quality yardstick's arithmetic, on runs made up by hand (the flow itself: tests/flows/test_benchmark.py)."""

import math

import numpy as np
import pytest

from tasks.core.benchmarks.quality import (
    MODELS,
    bootstrap_mean,
    headroom_closed,
    markdown_table,
    paired_runs,
    plot_quality,
    quality_report,
    run_record,
)


def _summary(pr: dict[str, float], recall: float = 0.9, events: int = 45) -> dict:
    m = {}
    for name, prefix in MODELS.items():
        m[prefix + "pr_auc"] = pr[name]
        m[prefix + "event_recall"] = recall
        m[prefix + "false_alerts_per_element_day"] = 0.5
        m[prefix + "median_lead_min"] = 40.0
        m[prefix + "calibration_error"] = 0.01
        m[prefix + "events"] = events
    return {"run_id": "r", "mlflow_run_id": "m", "status": "completed", "metrics": m}


def _runs(gaps: list[tuple[float, float]]) -> list[dict]:
    """Runs whose model and oracle sit ``gap`` above the tree (0.5)."""
    out = []
    for i, (model_gap, oracle_gap) in enumerate(gaps):
        pr = {"model": 0.5 + model_gap, "tree": 0.5, "rule": 0.1, "oracle_own": 0.5, "oracle": 0.5 + oracle_gap}
        pr["stack"] = max(pr["model"], pr["tree"])
        out.append(run_record(f"topozoo/T{i}", 1, i == 0, _summary(pr)))
    return out


def test_a_run_record_takes_each_model_under_its_prefix_and_marks_what_is_missing():
    rec = run_record("topozoo/Abilene", 3, True, {"metrics": {"pr_auc": 0.4, "baseline_pr_auc": 0.5}})
    assert rec["model"]["pr_auc"] == 0.4 and rec["tree"]["pr_auc"] == 0.5 and rec["held_out"] and rec["seed"] == 3
    assert math.isnan(rec["oracle"]["pr_auc"]) and math.isnan(rec["model"]["event_recall_minus_tree"][1])


def test_bootstrap_mean_interval_brackets_the_mean_and_ignores_missing_runs():
    x = np.array([0.1, 0.2, 0.3, 0.4, np.nan])
    b = bootstrap_mean(x, resamples=2000, seed=1)
    assert b["n"] == 4 and b["mean"] == 0.25 and 0.1 <= b["low"] < 0.25 < b["high"] <= 0.4
    assert bootstrap_mean(np.array([np.nan]))["n"] == 0


def test_headroom_closed_is_the_model_gain_over_the_oracle_gain():
    runs = _runs([(0.05, 0.1), (0.05, 0.1), (0.05, 0.1)])
    h = headroom_closed(runs)
    assert abs(h["ratio"] - 0.5) < 1e-12 and abs(h["low"] - 0.5) < 1e-12 and h["n"] == 3
    worse = headroom_closed(_runs([(-0.02, 0.1), (0.0, 0.1)]))
    assert worse["ratio"] < 0 and worse["high"] <= 0
    assert math.isnan(headroom_closed(_runs([(0.0, 0.0)]))["ratio"])  # no headroom: undefined, not a win


def test_the_report_judges_each_goal_and_names_the_better_model(tmp_path):
    runs = _runs([(0.06, 0.1), (0.04, 0.1), (0.05, 0.1)])
    report = quality_report(runs, {"topologies": ["x"]})
    g = report["goals"]
    assert g["headroom_closed"]["met"] and g["model_minus_tree_above_zero"]["met"]
    assert g["event_recall"]["met"] and g["test_events_per_run"]["met"] and g["calibration_error"]["met"]
    assert report["better_by_pr_auc"] == "model" and report["held_out_summary"]["models"]["model"]["pr_auc"]["n"] == 1
    assert report["tuning_summary"]["models"]["model"]["pr_auc"]["n"] == 2  # the runs a choice may look at
    paired = report["summary"]["paired"]
    assert abs(paired["model_minus_tree"]["pr_auc"]["mean"] - 0.05) < 1e-12
    assert abs(paired["graph_share"]["pr_auc"]["mean"] - 0.1) < 1e-12  # oracle over the own-state oracle
    few = quality_report([run_record("t", 1, False, _summary({k: 0.5 for k in MODELS}, 0.5, 12))], {})
    assert not few["goals"]["test_events_per_run"]["met"] and not few["goals"]["event_recall"]["met"]
    assert few["better_by_pr_auc"] == "tree"  # a tie does not crown the graph model
    table = markdown_table(report)
    assert "| oracle |" in table and "Headroom closed (PR-AUC): 0.50" in table and "| headroom_closed |" in table
    png = plot_quality(report, tmp_path / "q.png")
    assert png.stat().st_size > 10_000


def test_an_ablation_is_paired_with_the_default_run_by_run_and_must_hold_the_same_runs():
    spec = {"topologies": ["topozoo/T0", "topozoo/T1", "topozoo/T2"], "held_out": ["topozoo/T0"]}
    default = quality_report(_runs([(0.02, 0.1), (0.04, 0.1), (0.00, 0.1)]), spec)
    ablation = quality_report(list(reversed(_runs([(0.01, 0.1), (0.05, 0.1), (-0.02, 0.1)]))), spec)  # any order
    p = paired_runs(default, ablation)
    assert p["n"] == 3 and p["ahead"] == 2 and math.isclose(p["mean"], (0.01 - 0.01 + 0.02) / 3)
    assert math.isclose(p["min"], -0.01) and math.isclose(p["max"], 0.02) and p["low"] <= p["mean"] <= p["high"]
    assert p["same_data"]  # the tree scored the same in both
    fewer = {**ablation, "runs": ablation["runs"][:2]}
    with pytest.raises(ValueError, match="same runs"):
        paired_runs(default, fewer)
