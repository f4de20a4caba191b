"""Evaluation's metrics on known cases: the threshold rule, the summary's prefixes, lead times per fault."""

import numpy as np
import pandas as pd
import pytest

from tasks.core.metrics import classification_metrics, lead_times, pr_auc
from tasks.core.stages.evaluate import RULE_WEIGHTS, rule_scores, summary_metrics


def test_rule_scores_weight_the_alarm_counts():
    df = pd.DataFrame({c: [0.0, 1.0] for c in RULE_WEIGHTS})
    assert list(rule_scores(df)) == [0.0, sum(RULE_WEIGHTS.values())]


def test_summary_metrics_prefixes_the_baselines():
    results = {"model": {"pr_auc": 0.5}, "tree": {"pr_auc": 0.4}, "rule": {"pr_auc": 0.1}}
    assert summary_metrics(results) == {"pr_auc": 0.5, "baseline_pr_auc": 0.4, "rule_pr_auc": 0.1}


def test_pr_auc_is_nan_without_both_classes():
    assert np.isnan(pr_auc(np.zeros(5), np.arange(5)))
    assert pr_auc(np.array([0, 1]), np.array([0.1, 0.9])) == pytest.approx(1.0)


def test_recall_at_precision_and_threshold():
    y = np.array([1, 1, 0, 1, 0, 0])
    s = np.array([0.9, 0.8, 0.7, 0.6, 0.2, 0.1])
    m = classification_metrics(y, s, 0.9)
    assert m["recall_at_p90"] == pytest.approx(2 / 3)  # the top two are both faults; the third is not
    assert m["positives"] == 3 and m["samples"] == 6 and 0.5 < m["f1"] <= 1


def test_lead_time_counts_each_fault_once():
    leads = lead_times(np.array([30.0, 25.0, 60.0]), np.array(["a", "a", "b"]), np.array([True, True, False]))
    assert list(leads) == [30.0]


def test_laps_time_each_part_in_order():
    import time

    from tasks.core.stages.evaluate import Laps

    lap = Laps()
    time.sleep(0.02)
    lap("first")
    lap("second")
    assert list(lap.seconds) == ["first", "second"]
    assert lap.seconds["first"] >= 0.02 and 0 <= lap.seconds["second"] < lap.seconds["first"]


def test_alert_thresholds_come_from_validation_and_are_applied_to_test():
    """One element fails once in validation and once in test; a model that rises 3 steps before each onset and a
    noisy one. The threshold comes from the validation window alone (its last horizon purged), within the budget
    of false alerts; on test the good model warns 15 minutes ahead, with no false alert."""
    from tasks.core.config import EvaluateConfig
    from tasks.core.stages.evaluate import validated_alerts

    steps, n_e, horizon = 80, 2, 4
    t, e = np.meshgrid(np.arange(steps), np.arange(n_e), indexing="ij")
    in_fault = np.zeros((steps, n_e), np.int8)
    in_fault[20:23, 0] = in_fault[60:63, 0] = 1
    label = np.zeros_like(in_fault)
    label[16:20, 0] = label[56:60, 0] = 1
    good = np.full((steps, n_e), 0.1)
    good[17:20, 0] = good[57:60, 0] = 0.9  # rises 3 steps (15 minutes) ahead of each onset
    noisy = np.random.default_rng(0).random((steps, n_e))
    rows = pd.DataFrame({"label": label.ravel(), "in_fault": in_fault.ravel()})
    cells = (t.ravel(), e.ravel(), n_e)
    scores = {"model": good.ravel(), "tree": noisy.ravel(), "rule": good.ravel() * 10}
    windows = {"val": (0, 40), "test": (40, 80)}
    cfg = EvaluateConfig(false_alerts_per_element_day=1.0)
    out = validated_alerts(rows, cells, scores, windows, horizon, 5.0, cfg)
    m = out["model"]
    assert m["events"] == 1 and m["event_recall"] == 1.0 and m["median_lead_min"] == 15.0
    assert m["false_alerts_per_element_day"] == 0.0 and 0.1 < m["alert_threshold_val"] <= 0.9
    assert "calibration_error" in m and "calibration_error" not in out["rule"]  # the rule gives no probability
    assert m["event_recall_minus_tree_difference"] == 1.0  # the same test event: warned by the model, not the tree
    # noise: its top validation score is already a false alert, 4 per element-day over these 0.25 element-days
    assert np.isnan(out["tree"]["alert_threshold_val"]) and out["tree"]["false_alerts_per_element_day"] == 0.0
    # with no validation window left after the purge there is no threshold, so no alert at all
    short = validated_alerts(rows, cells, scores, {"val": (0, 3), "test": (40, 80)}, horizon, 5.0, cfg)
    assert np.isnan(short["model"]["alert_threshold_val"]) and short["model"]["event_recall"] == 0.0


def test_the_tree_stops_early_on_the_validation_window_it_is_given():
    """Early stopping and the choice of grid point follow the validation rows passed in (the time-ordered window),
    not a random tenth of the training rows: where those rows carry no signal, every grid point stops early and the
    kept one scores near the base rate there; where they do, the tree goes on and scores well."""
    from tasks.core.stages.baselines import FIXED_ROUNDS, MAX_ROUNDS, fit_tree

    rng = np.random.default_rng(0)
    n = 6000
    x = rng.normal(size=(n, 3))
    y = (x[:, 0] + 0.5 * x[:, 1] * x[:, 2] + rng.normal(0, 0.5, n) > 1).astype(int)
    val = np.zeros(n, bool)
    val[4000:] = True
    df = pd.DataFrame({"a": x[:, 0], "b": x[:, 1], "c": x[:, 2], "label": y})
    informative = fit_tree(df, ["a", "b", "c"], ~val, val, seed=0)
    df_noise = df.copy()
    df_noise.loc[val, "label"] = rng.permutation(df.loc[val, "label"].to_numpy())  # labels without signal
    stopped = fit_tree(df_noise, ["a", "b", "c"], ~val, val, seed=0)
    assert stopped.n_iter_ < informative.n_iter_ < MAX_ROUNDS, (stopped.n_iter_, informative.n_iter_)
    assert stopped.booster.num_boosted_rounds() < 100  # patience ran out long before the 1,000 rounds allowed
    assert informative.val_aucpr > 0.8 and stopped.val_aucpr < y[val].mean() + 0.15, (informative, stopped)
    fixed = fit_tree(df, ["a", "b", "c"], ~val, np.zeros(n, bool), seed=0)  # no validation rows: fixed rounds
    assert fixed.n_iter_ == FIXED_ROUNDS and np.isnan(fixed.val_aucpr)
    again = fit_tree(df, ["a", "b", "c"], ~val, val, seed=0)  # same seed, same tree (CPU)
    assert np.array_equal(again.predict_proba(x), informative.predict_proba(x))


def test_the_stack_weight_is_chosen_on_validation_alone():
    """The GBDT + GNN blend takes the weight that ranks the validation rows best; the test rows play no part."""
    from tasks.core.stages.baselines import stack_scores

    rng = np.random.default_rng(3)
    y = (rng.random(4000) < 0.1).astype(int)
    signal, noise = y + rng.normal(0, 0.3, 4000), rng.random(4000)
    val = np.arange(4000) < 2000
    _, pick = stack_scores(model=noise, tree=signal, y=y, val=val)
    assert pick["tree_weight"] >= 0.9 and pick["val_pr_auc"] > 0.9
    _, pick = stack_scores(model=signal, tree=noise, y=y, val=val)
    assert pick["tree_weight"] <= 0.1
    flipped = y.copy()
    flipped[~val] = 1 - y[~val]  # test labels upside down: the choice does not move
    assert stack_scores(signal, noise, flipped, val)[1] == pick
    s, none = stack_scores(signal, noise, y, np.zeros(4000, bool))  # nothing to choose on: the tree alone
    assert none["tree_weight"] == 1.0 and np.array_equal(s, noise)


def test_curves_are_thinned_for_plots_with_both_ends_kept():
    from tasks.core.stages.evaluate import thin

    idx = thin(3_700_000)
    assert len(idx) == 2000 and idx[0] == 0 and idx[-1] == 3_699_999 and (np.diff(idx) > 0).all()
    assert thin(5).tolist() == [0, 1, 2, 3, 4] and len(thin(0)) == 0
