"""Evaluation's metrics on known cases: the threshold rule, the summary's prefixes, lead times per fault."""

import numpy as np
import pandas as pd
import pytest

from tasks.core.metrics import classification_metrics, lead_times, pr_auc, precision_recall
from tasks.core.stages.evaluate import RULE_WEIGHTS, rule_scores, summary_metrics
from tasks.core.topology import Topology

NAMES = ["cpu_util_mean_3", *RULE_WEIGHTS]
TOPO = Topology("t", ("r3", "r1", "r2"), ("r3", "r1", "r2"), ((0, 1), (1, 2)))


def _held_out_files(out, n=3000):
    """Two features Parquet files: the columns evaluation reads, NaN in one feature, float64 on disk."""
    rng = np.random.default_rng(0)
    df = pd.DataFrame(
        {
            "element_id": rng.choice(["r1", "r2", "r3"], n),
            "timestamp": pd.date_range("2026-01-01", periods=n, freq="5min", tz="UTC"),
            **{c: rng.random(n) for c in NAMES},
            "label": (rng.random(n) < 0.1).astype(np.int8),
            "in_fault": (rng.random(n) < 0.05).astype(np.int8),
            "minutes_to_fault": np.where(rng.random(n) < 0.1, 30.0, np.nan),
        }
    )
    df.loc[::7, "cpu_util_mean_3"] = np.nan
    df.iloc[: n // 2].to_parquet(out / "part-0.parquet")
    df.iloc[n // 2 :].to_parquet(out / "part-1.parquet")
    return df


def test_rows_are_read_as_index_columns_and_a_float32_matrix(tmp_path):
    from tasks.core.stages.evaluate import META, read_rows

    df = _held_out_files(tmp_path)
    rows, x = read_rows(tmp_path, NAMES, TOPO, gpu=False)
    assert list(rows.columns) == [*META, *RULE_WEIGHTS, "t_us", "e_idx"] and len(rows) == len(df)
    assert x.dtype == np.float32 and x.shape == (len(df), len(NAMES))
    np.testing.assert_array_equal(x, df[NAMES].to_numpy(np.float32))  # NaN where NaN
    np.testing.assert_array_equal(rows["minutes_to_fault"].to_numpy(), df["minutes_to_fault"].to_numpy())
    np.testing.assert_array_equal(rows["t_us"].to_numpy(), df["timestamp"].dt.as_unit("us").astype("int64").to_numpy())
    assert [TOPO.element_ids[i] for i in rows["e_idx"]] == list(df["element_id"])
    other = Topology("t", ("r1", "r2"), ("r1", "r2"), ((0, 1),))
    with pytest.raises(ValueError, match="r3"):  # a row of an element the topology lacks is an error, not a guess
        read_rows(tmp_path, NAMES, other, gpu=False)


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


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_one_sort_metrics_equal_scikit_learns(seed):
    """The single-sort curves give scikit-learn's PR-AUC, ROC-AUC, best-F1 threshold and recall at precision, with
    tied scores (a rounded score) and without."""
    from sklearn.metrics import average_precision_score, precision_recall_curve, roc_auc_score

    rng = np.random.default_rng(seed)
    y = (rng.random(5000) < 0.1).astype(int)
    for s in (rng.random(5000) + y * 0.4, np.round(rng.random(5000) + y * 0.3, 2)):
        m = classification_metrics(y, s, 0.8)
        prec, rec, thr = precision_recall_curve(y, s)
        f1 = np.divide(2 * prec * rec, prec + rec, out=np.zeros_like(prec), where=(prec + rec) > 0)
        best = int(np.argmax(f1[:-1]))
        assert m["pr_auc"] == pytest.approx(average_precision_score(y, s), rel=1e-12)
        assert m["roc_auc"] == pytest.approx(roc_auc_score(y, s), rel=1e-12)
        assert m["f1"] == pytest.approx(f1[best], rel=1e-12) and m["threshold"] == thr[best]
        assert m["recall_at_p80"] == pytest.approx(rec[:-1][prec[:-1] >= 0.8].max(), rel=1e-12)
        assert pr_auc(y, s) == m["pr_auc"]
        p, r = precision_recall(y, s)
        np.testing.assert_allclose(p, prec, rtol=1e-12)
        np.testing.assert_allclose(r, rec, rtol=1e-12)


def test_metrics_of_one_class_or_no_rows():
    m = classification_metrics(np.zeros(4, int), np.array([0.1, 0.2, 0.2, 0.9]), 0.9)
    assert np.isnan(m["pr_auc"]) and np.isnan(m["roc_auc"]) and m["positives"] == 0 and m["samples"] == 4
    m = classification_metrics(np.zeros(0, int), np.zeros(0), 0.9)
    assert m["samples"] == 0 and np.isnan(m["pr_auc"]) and m["f1"] == 0.0


def test_lead_times_equal_the_per_row_rule():
    """Per fault key, the largest minutes-to-fault among alerted rows (at least 0), ascending: as a row loop."""
    rng = np.random.default_rng(3)
    m = np.where(rng.random(2000) < 0.5, rng.integers(-5, 60, 2000).astype(float), np.nan)
    keys, alerted = rng.integers(0, 50, 2000), rng.random(2000) < 0.3
    expect: dict = {}
    for k, mm, a in zip(keys, m, alerted):
        if a and not np.isnan(mm):
            expect[k] = max(expect.get(k, 0.0), float(mm))
    assert list(lead_times(m, keys, alerted)) == sorted(expect.values())
    assert lead_times(m, keys, np.zeros(2000, bool)).size == 0


def test_lead_time_counts_each_fault_once():
    leads = lead_times(np.array([30.0, 25.0, 60.0]), np.array(["a", "a", "b"]), np.array([True, True, False]))
    assert list(leads) == [30.0]


def test_laps_time_each_part_in_order():
    import time

    from tasks.core.laps import Laps

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
    informative = fit_tree(x[~val], y[~val], x[val], y[val], seed=0)
    noise = rng.permutation(y[val])  # labels without signal
    stopped = fit_tree(x[~val], y[~val], x[val], noise, seed=0)
    assert stopped.n_iter_ < informative.n_iter_ < MAX_ROUNDS, (stopped.n_iter_, informative.n_iter_)
    assert stopped.booster.num_boosted_rounds() < 100  # patience ran out long before the 1,000 rounds allowed
    assert informative.val_aucpr > 0.8 and stopped.val_aucpr < y[val].mean() + 0.15, (informative, stopped)
    fixed = fit_tree(x[~val], y[~val], x[:0], y[:0], seed=0)  # no validation rows: fixed rounds
    assert fixed.n_iter_ == FIXED_ROUNDS and np.isnan(fixed.val_aucpr)
    again = fit_tree(x[~val], y[~val], x[val], y[val], seed=0)  # same seed, same tree (CPU)
    assert np.array_equal(again.predict_proba(x), informative.predict_proba(x))


def test_the_tree_fed_a_chunk_of_rows_at_a_time_is_the_tree_fed_the_copies(monkeypatch):
    """Rows of the whole matrix, handed to XGBoost a chunk at a time (here 700 rows) instead of copied out whole,
    train the same trees and predict the same scores (CPU: the quantiles of the chunks equal the whole's here)."""
    import tasks.core.stages.baselines as bl

    rng = np.random.default_rng(1)
    x = rng.normal(size=(3000, 4)).astype(np.float32)
    y = (x[:, 0] + rng.normal(0, 0.5, 3000) > 0.8).astype(int)
    train, val = np.arange(3000) < 2000, np.arange(3000) >= 2000
    copies = bl.fit_tree(x[train], y[train], x[val], y[val], seed=0)
    monkeypatch.setattr(bl, "CHUNK_ROWS", 700)
    rows = bl.fit_tree(bl.Rows(x, np.flatnonzero(train)), y[train], bl.Rows(x, np.flatnonzero(val)), y[val], seed=0)
    assert (rows.n_iter_, rows.params) == (copies.n_iter_, copies.params)
    np.testing.assert_array_equal(rows.predict_proba(bl.Rows(x)), copies.predict_proba(x))
    assert [a for a, _ in bl.Rows(x, np.flatnonzero(val)).chunks()] == [0, 700]


def test_many_training_rows_tune_the_grid_on_a_share_and_fit_the_chosen_point_on_all(monkeypatch):
    """Past TUNE_MIN_ROWS training rows the grid point is chosen on a seeded quarter of them, then fitted on every
    row: the fits see 3 x 0.25 + 1 times the rows instead of 3; the kept tree is the chosen point's full fit."""
    import tasks.core.stages.baselines as bl

    rng = np.random.default_rng(2)
    x = rng.normal(size=(8000, 4)).astype(np.float32)
    y = (x[:, 0] + 0.6 * x[:, 1] * x[:, 2] + rng.normal(0, 0.5, 8000) > 0.9).astype(int)
    train, val = np.arange(8000) < 6000, np.arange(8000) >= 6000
    seen: list[int] = []
    fit = bl._fit_point
    monkeypatch.setattr(bl, "_fit_point", lambda p, s, d, dt, dv: seen.append(dt.num_row()) or fit(p, s, d, dt, dv))
    whole = bl.fit_tree(x[train], y[train], x[val], y[val], seed=0)  # below the threshold: the grid on every row
    assert seen == [6000] * 3 and whole.tuned_rows == 6000
    seen.clear()
    monkeypatch.setattr(bl, "TUNE_MIN_ROWS", 5000)
    rows = bl.Rows(x, np.flatnonzero(train))
    tuned = bl.fit_tree(rows, y[train], bl.Rows(x, np.flatnonzero(val)), y[val], seed=0)
    assert seen == [1500] * 3 + [6000] and tuned.tuned_rows == 1500
    (share, share_val), dtrain, dval = _share_and_val(bl, x, y, train, val)
    chosen = max(bl.TREE_GRID, key=lambda p: fit(p, 0, "cpu", share, share_val).val_aucpr)
    full = fit(chosen, 0, "cpu", dtrain, dval)
    assert tuned.params == chosen and tuned.n_iter_ == full.n_iter_  # the point the share ranked first, on all rows
    np.testing.assert_array_equal(tuned.predict_proba(x), full.predict_proba(x))
    again = bl.fit_tree(rows, y[train], bl.Rows(x, np.flatnonzero(val)), y[val], seed=0)  # seeded: the same
    assert np.array_equal(again.predict_proba(x), tuned.predict_proba(x))


def _share_and_val(bl, x, y, train, val):
    rows = bl.Rows(x, np.flatnonzero(train))
    dtrain = bl.quantile_matrix(rows, y[train])
    vrows = bl.Rows(x, np.flatnonzero(val))
    dval = bl.quantile_matrix(vrows, y[val], ref=dtrain)
    (share, share_val), _ = bl.tuning_rows(rows, y[train], 0, (dtrain, dval), vrows, y[val])
    return (share, share_val), dtrain, dval


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
    from tasks.core.metrics import thin

    idx = thin(3_700_000)
    assert len(idx) == 2000 and idx[0] == 0 and idx[-1] == 3_699_999 and (np.diff(idx) > 0).all()
    assert thin(5).tolist() == [0, 1, 2, 3, 4] and len(thin(0)) == 0
    rng = np.random.default_rng(3)
    y, s = (rng.random(50_000) < 0.05).astype(int), rng.random(50_000)
    p, r = precision_recall(y, s)
    pt, rt = precision_recall(y, s, points=300)  # thinned where the curve is made: the same points, fewer
    keep = thin(len(p), 300)
    assert len(pt) == 300 and np.array_equal(pt, p[keep]) and np.array_equal(rt, r[keep])


def test_the_confusion_counts_are_scikit_learns():
    from sklearn.metrics import confusion_matrix

    from tasks.core.metrics import confusion_counts

    rng = np.random.default_rng(4)
    y, s = (rng.random(10_000) < 0.1).astype(int), rng.random(10_000)
    assert np.array_equal(confusion_counts(y, s >= 0.8), confusion_matrix(y, (s >= 0.8).astype(int), labels=[0, 1]))
    assert confusion_counts(np.zeros(5, int), np.zeros(5, bool)).tolist() == [[5, 0], [0, 0]]  # one class: 2x2


def test_beside_runs_now_in_a_thread_or_later_where_asked():
    """On the GPU the graph model scores in a thread while the tree fits; on the CPU where its result is asked for
    (both would share the cores). Either way the caller gets the result, or the exception."""
    import threading

    from tasks.core.stages.evaluate import beside

    ran: list[str] = []
    got = beside(True, lambda a: ran.append(threading.current_thread().name) or a * 2, 21)
    assert got() == 42 and ran[0].startswith("evaluate")
    later = beside(False, lambda: ran.append(threading.current_thread().name) or "later")
    assert len(ran) == 1 and later() == "later" and ran[1] == threading.current_thread().name

    def fails():
        raise ValueError("scoring failed")

    with pytest.raises(ValueError, match="scoring failed"):
        beside(True, fails)()


def test_there_is_no_device_room_for_a_host_array():
    from tasks.core.arrays import device_room

    assert device_room(np.zeros(4), 0.0) is False  # scored after the tree on the CPU: both would share the cores


def test_rows_are_selected_by_index_not_by_a_mask_over_the_matrix():
    from tasks.core.stages.evaluate import _on

    x = np.arange(12, dtype=np.float32).reshape(6, 2)
    rows = np.array([True, False, True, True, False, False])
    idx = _on(x, rows)
    assert idx.dtype.kind == "i" and idx.tolist() == [0, 2, 3]
    np.testing.assert_array_equal(x[idx], x[rows])
    assert x[_on(x, np.zeros(6, bool))].shape == (0, 2)
