"""The measures of the quality yardstick, on grids of ``[time step, element]`` (NumPy, or CuPy where the grids are
on the GPU: the same code, computed where the arrays are).

A fault *event* is an element's onset: the first step of a run of ``in_fault``. A model warns of it when it alerts
(score >= threshold) on that element within the label horizon before the onset; its lead time is the distance from
the first such alert to the onset. An alert on a step whose label is 0 is a false alert; consecutive false alerts of
one element are one *episode*, what a NOC sees as one false page. Thresholds are chosen on validation only, for a
budget of false-alert episodes per element-day, and then applied to test unchanged.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tasks.core.arrays import array_module


@dataclass(frozen=True)
class Split:
    """Step index ranges [start, stop) of train, validation and test, with ``purge`` steps dropped before
    validation and before test: a label looks ``horizon`` steps ahead, so the last labels of one window would
    otherwise describe faults in the next."""

    train: tuple[int, int]
    val: tuple[int, int]
    test: tuple[int, int]
    purge: int


def purged_split(steps: int, horizon: int, val_frac: float = 0.2, test_frac: float = 0.3) -> Split:
    """Time-ordered train / validation / test over ``steps``, each boundary followed by a purge of ``horizon``."""
    if not (0 < val_frac < 1 and 0 < test_frac < 1 and val_frac + test_frac < 1):
        raise ValueError(f"val_frac {val_frac} and test_frac {test_frac}: each in (0, 1), together under 1")
    test_start = steps - int(round(steps * test_frac))
    val_start = test_start - horizon - int(round(steps * val_frac))
    train_stop = val_start - horizon
    if train_stop <= 0:
        raise ValueError(f"{steps} steps leave no training window with a {horizon}-step purge twice")
    return Split((0, train_stop), (val_start, test_start - horizon), (test_start, steps), horizon)


def onsets(in_fault) -> np.ndarray:
    """(step, element) of every fault onset in a ``[T, E]`` in-fault grid (a run already going at step 0 is not
    an onset: its warning window is outside the grid)."""
    xp = array_module(in_fault)
    f = xp.asarray(in_fault).astype(bool)
    start = f[1:] & ~f[:-1]
    t, e = xp.nonzero(start)
    return xp.stack([t + 1, e], axis=1)


def false_episodes(alert, label, usable) -> int:
    """Runs of consecutive false alerts (alert, label 0, usable) per element, counted over a ``[T, E]`` grid."""
    xp = array_module(alert)
    false = xp.asarray(alert, bool) & (xp.asarray(label) == 0) & xp.asarray(usable, bool)
    starts = false.copy()
    starts[1:] &= ~false[:-1]
    return int(starts.sum())


def event_leads(alert, in_fault, horizon: int) -> tuple[np.ndarray, np.ndarray]:
    """Per fault event of a ``[T, E]`` grid: its element, and the lead in steps of its first warning (0: none),
    every event at once: the ``horizon`` steps before each onset gathered as one [events, horizon] array."""
    xp = array_module(alert)
    events = onsets(in_fault)
    if not len(events):
        return xp.zeros(0, xp.int64), xp.zeros(0, xp.int64)
    t, e = events[:, 0], events[:, 1]
    steps = t[:, None] - xp.arange(horizon, 0, -1)[None, :]  # each onset's window: t - horizon .. t - 1
    warned = xp.asarray(alert, bool)[xp.maximum(steps, 0), e[:, None]] & (steps >= 0)
    leads = xp.where(warned.any(axis=1), horizon - xp.argmax(warned, axis=1), 0)  # onset minus the first warning
    return e.astype(xp.int64), leads.astype(xp.int64)


def recall_difference(elements: np.ndarray, leads_a: np.ndarray, leads_b: np.ndarray, n_e: int, **bootstrap):
    """Event recall of A minus B over the same events, with its element-cluster bootstrap interval."""
    events = np.bincount(elements, minlength=n_e)
    warned = {k: np.bincount(elements, leads > 0, minlength=n_e) for k, leads in (("a", leads_a), ("b", leads_b))}

    def recall(w, cols):
        n = events[cols].sum()
        return w[cols].sum() / n if n else np.nan

    return paired_bootstrap(recall, warned["a"], warned["b"], n_e, **bootstrap)


def threshold_for_budget(
    score: np.ndarray, label: np.ndarray, usable: np.ndarray, budget: float, step_minutes: float, candidates: int = 200
) -> float:
    """The lowest threshold (among score quantiles) whose false-alert episodes per element-day stay within
    ``budget`` on this grid, lowering it only while the budget holds; +inf when no threshold does."""
    xp = array_module(score)
    element_days = score.shape[0] * score.shape[1] * step_minutes / (24 * 60)
    values = xp.asarray(score)[xp.asarray(usable, bool)]
    candidates = xp.unique(xp.quantile(values, xp.linspace(1.0, 0.0, candidates)))[::-1]
    within = false_episode_counts(score, label, usable, candidates) / element_days <= budget
    first_over = len(candidates) if bool(within.all()) else int(xp.argmin(within))
    return float(candidates[first_over - 1]) if first_over else float("inf")


def false_episode_counts(score: np.ndarray, label: np.ndarray, usable: np.ndarray, thresholds) -> np.ndarray:
    """``false_episodes(score >= thr, label, usable)`` for every ``thr`` at once: with ``f`` the score where a false
    alert is possible (label 0, usable; -inf elsewhere), an episode starts at step t for exactly the thresholds in
    (f[t-1], f[t]], so the count is #{f >= thr} - #{min(f[t-1], f[t]) >= thr}: two sorts, no loop over
    thresholds."""
    xp = array_module(score)
    score = xp.asarray(score, xp.float64)
    f = xp.where((xp.asarray(label) == 0) & xp.asarray(usable, bool) & ~xp.isnan(score), score, -xp.inf)
    both = xp.minimum(f, xp.vstack([xp.full((1, f.shape[1]), -xp.inf), f[:-1]]))
    thr = xp.asarray(thresholds, xp.float64)
    at_least = [f.size - xp.searchsorted(xp.sort(a, axis=None), thr, side="left") for a in (f, both)]
    return at_least[0] - at_least[1]


def alert_quality(
    score: np.ndarray,
    label: np.ndarray,
    in_fault: np.ndarray,
    usable: np.ndarray,
    threshold: float,
    horizon: int,
    step_minutes: float,
    leads: np.ndarray | None = None,
) -> dict[str, float]:
    """Event recall, false-alert episodes per element-day and lead times (minutes) at ``threshold``. ``leads``:
    :func:`event_leads`'s at this threshold, where the caller has them."""
    from tasks.core.arrays import to_host

    alert = array_module(score).asarray(score) >= threshold
    every = to_host(event_leads(alert, in_fault, horizon)[1] if leads is None else leads)
    events, warned = len(every), every[every > 0]
    element_days = score.shape[0] * score.shape[1] * step_minutes / (24 * 60)
    minutes = warned * step_minutes
    return {
        "events": events,
        "events_warned": int(len(warned)),
        "event_recall": len(warned) / events if events else float("nan"),
        "false_alerts_per_element_day": false_episodes(alert, label, usable) / element_days,
        "median_lead_min": float(np.median(minutes)) if len(minutes) else 0.0,
        "lead_p25_min": float(np.percentile(minutes, 25)) if len(minutes) else 0.0,
        "lead_p75_min": float(np.percentile(minutes, 75)) if len(minutes) else 0.0,
    }


def calibration_error(y: np.ndarray, p: np.ndarray, bins: int = 15) -> float:
    """Expected calibration error: the bin-weighted gap between mean probability and observed rate, over
    ``bins`` equal-width bins of [0, 1]."""
    xp = array_module(p)
    y, p = xp.asarray(y, float).ravel(), xp.clip(xp.asarray(p, float).ravel(), 0.0, 1.0)
    if y.size == 0:
        return float("nan")
    idx = xp.minimum((p * bins).astype(int), bins - 1)
    n = xp.bincount(idx, minlength=bins)
    gap = xp.abs(xp.bincount(idx, p, bins) - xp.bincount(idx, y, bins))
    return float(gap.sum() / y.size) if int(n.sum()) else float("nan")


def paired_bootstrap(metric, a, b, elements: int, resamples: int = 1000, seed: int = 0, level: float = 0.95):
    """The difference ``metric(a, cols) - metric(b, cols)`` on the full set of element columns and its
    percentile interval over element-cluster resamples (the same resample for both models, so the interval is of
    the paired difference). ``metric(x, cols)`` scores model ``x`` on those element columns."""
    rng = np.random.default_rng(seed)
    everything = np.arange(elements)
    diff = metric(a, everything) - metric(b, everything)
    draws = []
    for _ in range(resamples):
        cols = rng.integers(0, elements, elements)
        d = metric(a, cols) - metric(b, cols)
        if np.isfinite(d):
            draws.append(d)
    lo, hi = np.percentile(draws, [(1 - level) / 2 * 100, (1 + level) / 2 * 100]) if draws else (np.nan, np.nan)
    return {"difference": float(diff), "low": float(lo), "high": float(hi), "resamples": len(draws)}
