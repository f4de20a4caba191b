"""How every benchmark times a thing: the median of up to three repeats with min and max, one repeat when it is
dear; ratios only between figures of one invocation."""

from __future__ import annotations

import statistics
from collections.abc import Callable
from typing import Any

CHEAP_S = 60.0  # a repeat costing less than this is repeated


def repeated(
    run: Callable[[], dict[str, Any]], repeats: int = 3, key: str = "seconds", also: tuple[str, ...] = ()
) -> dict[str, Any]:
    """Run ``run`` (which returns a dict with ``key`` in seconds) up to ``repeats`` times; once when the first
    run costs more than ``CHEAP_S``. Returns the last run's dict with median, min, max and every time, and the
    median, min and max of each figure named in ``also`` (e.g. a rate) as ``<name>_median`` and so on."""
    runs = [run()]
    if runs[0][key] < CHEAP_S:
        runs += [run() for _ in range(repeats - 1)]
    times = [r[key] for r in runs]
    out = {
        **runs[-1],
        "median_s": round(statistics.median(times), 3),
        "min_s": round(min(times), 3),
        "max_s": round(max(times), 3),
        "repeats": len(times),
        "times_s": times,
    }
    for name in also:
        out |= {f"{name}_{k}": v for k, v in spread([r[name] for r in runs]).items()}
    return out


def spread(values: list[float]) -> dict[str, float]:
    """The median, min and max of repeated measurements of one figure."""
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


def ratio(numerator: float | None, denominator: float | None, digits: int = 2) -> float | None:
    """numerator / denominator, or None when either figure was not measured in this invocation."""
    if not numerator or not denominator:
        return None
    return round(numerator / denominator, digits)
