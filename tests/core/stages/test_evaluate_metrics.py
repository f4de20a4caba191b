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
