"""The process's trackers: one per server, experiment and store, MLflow while the server answers and a journal
while it does not (``spool.py``), and the replay of waiting journals. Light to import: MLflow loads only when a
tracker first reaches its server, so the scheduled ``tracking-replay`` flow costs a second when nothing waits."""

from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .spool import ResilientTracker, pending, unreachable
from .tracking import SPOOL, Tracker, tracking_uri

if TYPE_CHECKING:
    from .config import FaultlineConfig


@lru_cache(maxsize=4)
def get_tracker(uri: str | None, experiment: str, root: str, strict: bool = False) -> ResilientTracker:
    """The process's tracker for one server and experiment: MLflow while it answers, a journal while it does not."""
    resolved, store = tracking_uri(uri, Path(root)), Path(root).resolve()
    return ResilientTracker(
        lambda: Tracker(resolved, experiment, store / "mlartifacts"), resolved, experiment, store / SPOOL, strict
    )


def tracker_for(cfg: FaultlineConfig, experiment: str | None = None) -> ResilientTracker:
    """The configured server and experiment's tracker (one per process and arguments)."""
    return get_tracker(cfg.mlflow.tracking_uri, experiment or cfg.mlflow.experiment, cfg.paths.root, cfg.mlflow.strict)


def replay_journals(cfg: FaultlineConfig) -> dict[str, Any]:
    """Deliver the tracking journals that runs wrote while the MLflow server was unreachable, if it answers now:
    ``replayed`` (each journal's outcome), ``left`` (journals still waiting) and ``unreachable`` (why not, or
    None). Light to import (no MLflow until a journal waits and the server answers): the scheduled
    ``tracking-replay`` flow runs it every few minutes."""
    tr = tracker_for(cfg)
    waiting = pending(tr.spool)
    if (why := unreachable(tr.uri)) is not None:
        return {"replayed": [], "left": [str(j) for j in waiting], "unreachable": why, "spool": str(tr.spool)}
    if not waiting:  # nothing to deliver: no MLflow client made
        return {"replayed": [], "left": [], "unreachable": None, "spool": str(tr.spool)}
    tr.begin()  # reaching the server replays every pending journal
    done = [json.loads((j / "replayed.json").read_text()) for j in waiting if (j / "replayed.json").exists()]
    left = [str(j) for j in pending(tr.spool)]
    return {"replayed": done, "left": left, "unreachable": None, "spool": str(tr.spool)}
