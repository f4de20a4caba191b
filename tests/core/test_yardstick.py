"""The quality yardstick's measures on small grids whose answers are worked out by hand."""

from __future__ import annotations

import numpy as np
import pytest

from tasks.core.metrics import pr_auc
from tasks.core.yardstick import (
    alert_quality,
    calibration_error,
    event_leads,
    false_episode_counts,
    false_episodes,
    onsets,
    paired_bootstrap,
    purged_split,
    threshold_for_budget,
)


def test_purged_split_leaves_a_horizon_between_windows():
    s = purged_split(1000, 12, val_frac=0.2, test_frac=0.3)
    assert s.test == (700, 1000) and s.val == (488, 688) and s.train == (0, 476)
    assert s.val[0] - s.train[1] == 12 and s.test[0] - s.val[1] == 12  # no label reaches across a boundary
    with pytest.raises(ValueError, match="no training window"):
        purged_split(40, 12)
    with pytest.raises(ValueError, match="together under 1"):
        purged_split(1000, 12, val_frac=0.6, test_frac=0.5)


def _grid():
    """Two elements, 20 steps, horizon 4: element 0 fails at step 10 (for 3 steps) and 17; element 1 never."""
    f = np.zeros((20, 2), int)
    f[10:13, 0] = 1
    f[17:, 0] = 1
    label = np.zeros_like(f)
    label[6:10, 0] = 1  # the 4 steps before each onset
    label[13:17, 0] = 1
    usable = f == 0
    return f, label, usable


def test_onsets_and_lead_times():
    f, label, usable = _grid()
    assert onsets(f).tolist() == [[10, 0], [17, 0]]
    alert = np.zeros_like(f, bool)
    alert[7, 0] = alert[8, 0] = True  # first warning 3 steps before the onset at 10
    alert[3, 1] = True  # a false alert elsewhere
    _, every = event_leads(alert, f, horizon=4)
    events, leads = len(every), every[every > 0]
    assert events == 2 and leads.tolist() == [3]  # the fault at 17 went unwarned
    assert onsets(np.ones((5, 1))).size == 0  # a fault already on at step 0 has no warning window


def test_false_alert_episodes_merge_consecutive_steps():
    f, label, usable = _grid()
    alert = np.zeros_like(f, bool)
    alert[0:3, 1] = True  # one episode of three steps
    alert[5, 1] = True  # another
    alert[7:9, 0] = True  # true alerts: not false
    alert[11, 0] = True  # in the fault itself: not usable, not counted
    assert false_episodes(alert, label, usable) == 2


def test_alert_quality_in_minutes_and_per_element_day():
    f, label, usable = _grid()
    score = np.zeros(f.shape)
    score[7, 0], score[15, 0], score[2, 1] = 0.9, 0.8, 0.7
    q = alert_quality(score, label, f, usable, threshold=0.75, horizon=4, step_minutes=5)
    element_days = 20 * 2 * 5 / 1440
    assert q["events"] == 2 and q["events_warned"] == 2 and q["event_recall"] == 1.0
    assert q["median_lead_min"] == pytest.approx((15 + 10) / 2)  # 3 and 2 steps of 5 minutes
    assert q["false_alerts_per_element_day"] == 0.0
    q = alert_quality(score, label, f, usable, threshold=0.5, horizon=4, step_minutes=5)
    assert q["false_alerts_per_element_day"] == pytest.approx(1 / element_days)


def test_threshold_for_budget_is_the_lowest_that_keeps_the_budget():
    rng = np.random.default_rng(3)
    label = (rng.random((500, 10)) < 0.05).astype(int)
    score = rng.random(label.shape) * 0.5 + label * 0.4  # positives score higher on the whole
    usable = np.ones(label.shape, bool)
    element_days = 500 * 10 * 5 / 1440
    thresholds = []
    for budget in (0.5, 2.0, 10.0):
        thr = threshold_for_budget(score, label, usable, budget, step_minutes=5, candidates=1000)
        rate = false_episodes(score >= thr, label, usable) / element_days
        assert rate <= budget and rate > budget / 3, (budget, thr, rate)  # within the budget, and near it
        thresholds.append(thr)
    assert thresholds[0] > thresholds[1] > thresholds[2]  # a larger budget buys a lower threshold
    assert threshold_for_budget(score, label, usable, 1e-9, 5) >= score[label == 0].max()


def test_false_episode_counts_equal_one_count_per_threshold():
    """The two-sort count equals ``false_episodes`` threshold by threshold, with ties, unusable cells, NaN scores
    and thresholds at, between and beyond the scores; and the budget search equals the threshold-by-threshold loop
    it replaces."""
    rng = np.random.default_rng(5)
    label = (rng.random((300, 7)) < 0.1).astype(int)
    score = np.round(rng.random(label.shape), 2)
    score[rng.random(label.shape) < 0.01] = np.nan
    usable = rng.random(label.shape) < 0.9
    thresholds = np.concatenate([np.unique(score[~np.isnan(score)]), [-1.0, 0.005, 2.0]])
    counts = false_episode_counts(score, label, usable, thresholds)
    assert list(counts) == [false_episodes(score >= t, label, usable) for t in thresholds]

    def loop(budget, candidates=200):  # the search as a loop over the quantiles, highest first
        days, best = score.size * 5 / 1440, float("inf")
        for t in np.unique(np.quantile(score[usable], np.linspace(1.0, 0.0, candidates)))[::-1]:
            if false_episodes(score >= t, label, usable) / days > budget:
                break
            best = float(t)
        return best

    score = np.nan_to_num(score, nan=0.0)  # quantiles of NaN are NaN: the search is defined on real scores
    for budget in (0.0, 0.3, 3.0, 1e9):
        assert threshold_for_budget(score, label, usable, budget, 5) == loop(budget), budget


def test_calibration_error():
    rng = np.random.default_rng(0)
    p = rng.random(200_000)
    y = rng.random(p.size) < p  # calibrated by construction
    assert calibration_error(y, p) < 0.01
    assert calibration_error(y, np.clip(p + 0.2, 0, 1)) == pytest.approx(0.2 - 0.02, abs=0.03)  # over-confident
    assert calibration_error(np.array([1, 0]), np.array([1.0, 0.0])) == 0.0


def test_paired_bootstrap_separates_a_better_model_and_not_an_equal_one():
    rng = np.random.default_rng(1)
    y = (rng.random((400, 30)) < 0.1).astype(int)
    good = y + rng.normal(0, 0.4, y.shape)
    poor = y + rng.normal(0, 1.5, y.shape)

    def metric(score, cols):
        return pr_auc(y[:, cols].ravel(), score[:, cols].ravel())

    better = paired_bootstrap(metric, good, poor, elements=30, resamples=200, seed=0)
    assert better["low"] > 0 and better["difference"] > 0 and better["resamples"] == 200
    same = paired_bootstrap(metric, good, good, elements=30, resamples=50)
    assert same["difference"] == same["low"] == same["high"] == 0.0


def test_recall_difference_resamples_elements_with_their_events():
    from tasks.core.yardstick import event_leads, recall_difference

    f = np.zeros((30, 3), int)
    f[10:12, 0] = f[20:22, 0] = f[15:17, 1] = 1  # three events: two on element 0, one on element 1
    alert = np.zeros_like(f, bool)
    alert[8, 0] = alert[14, 1] = True  # warns the first event on element 0 (2 steps) and the one on element 1
    elements, leads = event_leads(alert, f, horizon=4)
    assert elements.tolist() == [0, 1, 0] and leads.tolist() == [2, 1, 0]  # events in time order
    rng = np.random.default_rng(2)
    n_e, per = 40, 3
    elements = np.repeat(np.arange(n_e), per)
    a = rng.integers(1, 5, elements.size)  # warns every event
    b = np.where(rng.random(elements.size) < 0.5, a, 0)  # warns about half
    d = recall_difference(elements, a, b, n_e, resamples=300, seed=0)
    assert d["difference"] == pytest.approx(1 - (b > 0).mean()) and 0 < d["low"] < d["difference"] < d["high"]
    same = recall_difference(elements, a, a, n_e, resamples=50)
    assert same["difference"] == same["low"] == same["high"] == 0.0


def _leads_one_by_one(alert, in_fault, horizon):
    """Each event's lead, from its own window: the definition the gathered form must keep."""
    events = onsets(in_fault)
    leads = []
    for t, e in events:
        window = alert[max(0, t - horizon) : t, e]
        leads.append(len(window) - int(np.argmax(window)) if window.any() else 0)
    return events[:, 1], np.array(leads, np.int64)


def test_every_events_lead_is_gathered_at_once_as_each_window_gives_it():
    from tasks.core.yardstick import event_leads

    rng = np.random.default_rng(5)
    for horizon in (1, 4, 12):
        in_fault = (rng.random((200, 30)) < 0.08).astype(np.int8)
        alert = rng.random((200, 30)) < 0.1
        alert[:3] = True  # onsets near the grid's start have shorter windows
        elements, leads = event_leads(alert, in_fault, horizon)
        ref_elements, ref_leads = _leads_one_by_one(alert, in_fault, horizon)
        assert elements.tolist() == ref_elements.tolist() and leads.tolist() == ref_leads.tolist()
        assert leads.max() <= horizon and (leads > 0).any() and (leads == 0).any()
    empty = event_leads(np.zeros((5, 2), bool), np.zeros((5, 2)), 3)
    assert empty[0].size == 0 and empty[1].size == 0
