"""The alarm log as small sorted key arrays, and the per-row lookups in them: precursor-alarm counts over the
last hour, minutes since the last alarm, and the labels (a NODE_DOWN onset within the horizon). Faults are read
from the alarm log (NODE_DOWN onsets, NODE_UP recoveries), never from the simulator's ground truth."""

from __future__ import annotations

import numpy as np
import pandas as pd

from tasks.core.arrays import micros, minutes
from tasks.core.errors import DataRejected
from tasks.core.schema import FAULT_ALARM, STEP_MINUTES

PRECURSOR_SEVERITIES = ("warning", "minor", "major")
ALARM_WINDOW = 12  # samples (one hour) for alarm counts
KEY = np.int64(1) << 34  # (code, minute) keys: minutes since 1970 stay below 2**34 until the year 34,000


def fault_table(alarms: pd.DataFrame) -> pd.DataFrame:
    """Fault onsets and recoveries per element from the alarm log."""
    a = alarms[alarms["alarm_type"].isin([FAULT_ALARM, "NODE_UP"])][["element_id", "timestamp", "alarm_type"]]
    return a.sort_values(["element_id", "timestamp"]).reset_index(drop=True)


def alarm_arrays(alarms: pd.DataFrame, index: dict[str, int]) -> dict[str, np.ndarray]:
    """Precursor alarms as sorted keys (element code * KEY + minute of the 5-minute sample they count toward,
    i.e. the alarm time rounded up), one array per severity and one for all of them (host arrays, small)."""
    a = alarms[alarms["severity"].isin(PRECURSOR_SEVERITIES)]
    step = STEP_MINUTES * 60_000_000
    minute = (-(-micros(a["timestamp"]) // step)) * STEP_MINUTES if len(a) else np.zeros(0, dtype=np.int64)
    code = a["element_id"].map(index).to_numpy(dtype=np.float64)
    if np.isnan(code).any():
        unknown = sorted(set(a["element_id"][np.isnan(code)]))[:5]
        raise DataRejected(f"alarms name elements that are not in the topology: {unknown}", column="element_id")
    key = code.astype(np.int64) * KEY + minute
    sev = a["severity"].to_numpy()
    out = {s: np.sort(key[sev == s]) for s in PRECURSOR_SEVERITIES}
    out["all"] = np.sort(key)
    return out


def fault_arrays(faults: pd.DataFrame, index: dict[str, int]) -> dict[str, np.ndarray]:
    """Onsets sorted by (element code, time) with the recovery that ends each (host arrays, small)."""
    never = np.iinfo(np.int64).max // 2
    codes, times, ends = [], [], []
    mins = minutes(faults["timestamp"]) if len(faults) else np.zeros(0, dtype=np.int64)
    kinds = faults["alarm_type"].to_numpy()
    for el, idx in faults.groupby("element_id", sort=False).indices.items():
        onsets = np.sort(mins[idx][kinds[idx] == FAULT_ALARM])
        ups = np.sort(mins[idx][kinds[idx] == "NODE_UP"])
        u = np.searchsorted(ups, onsets, side="left")  # first recovery at or after each onset
        ends.append(np.where(u < len(ups), ups[np.minimum(u, max(len(ups) - 1, 0))] if len(ups) else never, never))
        codes.append(np.full(len(onsets), index[el], dtype=np.int64))
        times.append(onsets)
    cat = lambda xs, dt: np.concatenate(xs).astype(dt) if xs else np.zeros(0, dtype=dt)
    code, t, end = cat(codes, np.int64), cat(times, np.int64), cat(ends, np.int64)
    order = np.lexsort((t, code))
    return {"code": code[order], "t": t[order], "end": end[order]}


def labels(code, t, fa: dict[str, np.ndarray], horizon: int, xp):
    """label: a NODE_DOWN onset in (t, t + horizon]; in_fault: from an onset until its recovery."""
    n = len(t)
    if len(fa["t"]) == 0:
        return xp.zeros(n, dtype=xp.int8), xp.zeros(n, dtype=xp.int8), xp.full(n, xp.nan)
    o_code, o_t, o_end = (xp.asarray(fa[k]) for k in ("code", "t", "end"))
    o_key = o_code * KEY + o_t
    key = code * KEY + t
    k = xp.searchsorted(o_key, key, side="right")  # the next onset strictly after t
    kk = xp.minimum(k, len(o_t) - 1)
    has = (k < len(o_t)) & (o_code[kk] == code)
    gap = o_t[kk] - t
    within = has & (gap <= horizon)
    prev = xp.maximum(k - 1, 0)  # the latest onset at or before t, if it is this element's
    started = (k > 0) & (o_code[prev] == code)
    in_fault = started & (t <= o_end[prev])
    return within.astype(xp.int8), in_fault.astype(xp.int8), xp.where(within, gap.astype(xp.float64), xp.nan)


def alarm_count(key, alarm_keys: np.ndarray, xp):
    """Alarms of the row's element whose sample lies in the hour (t - 60 min, t]."""
    a = xp.asarray(alarm_keys)
    hi = xp.searchsorted(a, key, side="right")
    lo = xp.searchsorted(a, key - ALARM_WINDOW * STEP_MINUTES, side="right")
    return (hi - lo).astype(xp.float64)


def minutes_since_alarm(key, alarm_keys: np.ndarray, xp, cap: float = 1440.0):
    """Minutes since the element's latest precursor alarm at or before each row (capped at a day)."""
    a = xp.asarray(alarm_keys)
    if len(a) == 0:
        return xp.full(len(key), cap)
    k = xp.searchsorted(a, key, side="right") - 1
    j = a[xp.maximum(k, 0)]
    valid = (k >= 0) & (j // KEY == key // KEY)
    return xp.where(valid, xp.minimum((key - j).astype(xp.float64), cap), cap)
