"""Simulate a workload: content-addressed in the store (the same workload is generated once), or into a
directory the user names."""

from __future__ import annotations

from pathlib import Path

from prefect import task
from tqdm import tqdm

from tasks.core.config import WorkloadConfig
from tasks.core.stages.simulate import simulate_stage
from tasks.core.store import StageResult, completed, run_stage, stage_fingerprint, staging_into
from tasks.runner import TASK_OPTIONS, finish_stage


def _compute(cfg: WorkloadConfig, out: Path) -> dict:
    with tqdm(total=cfg.days, desc=f"simulate {cfg.topology}", unit="day") as bar:
        return simulate_stage(cfg, out, progress=lambda d, n: bar.update(1))


@task(name="simulate", **TASK_OPTIONS)
def simulate_task(cfg: WorkloadConfig, root: Path, out: str | None = None) -> StageResult | dict:
    """Exports under ``<store>/raw/<fingerprint>`` (reused when present), or into ``out`` when given."""
    if out:
        with staging_into(Path(out)) as tmp:
            return _compute(cfg, tmp)
    return finish_stage(run_stage(root, "raw", {}, cfg, lambda tmp: _compute(cfg, tmp)))


def simulated_exports(cfg: WorkloadConfig, root: Path) -> Path | None:
    """Where :func:`simulate_task` keeps this workload's exports, if it has made them (None: still to simulate)."""
    done = completed(root, "raw", stage_fingerprint("raw", {}, cfg))
    return done.path if done is not None else None
