"""Simulate the default workload (content-addressed: the same workload is generated once)."""

from __future__ import annotations

import time
from pathlib import Path

from prefect import task
from tqdm import tqdm

from tasks.common import TASK_OPTIONS
from tasks.core.config import WorkloadConfig
from tasks.core.simulate import simulate
from tasks.core.store import code_version, completed, fingerprint, publish_manifest, staging


@task(name="simulate", **TASK_OPTIONS)
def simulate_task(cfg: WorkloadConfig, root: Path) -> str:
    fp = fingerprint("simulate", cfg.model_dump(mode="json"), code_version())
    done = completed(root, "raw", fp)
    if done:
        return str(done.path)
    with staging(root, "raw", fp) as tmp:
        t0 = time.perf_counter()
        with tqdm(total=cfg.days, desc=f"simulate {cfg.topology}", unit="day") as bar:
            s = simulate(
                cfg.topology, cfg.days, cfg.seed, tmp, cfg.dirt, cfg.start, progress=lambda d, n: bar.update(1)
            )
        publish_manifest(
            tmp,
            {
                "stage": "simulate",
                "workload": cfg.model_dump(mode="json"),
                "rows_out": s.kpi_rows,
                "alarm_lines": s.alarm_rows,
                "faults": s.faults,
                "seconds": round(time.perf_counter() - t0, 3),
            },
        )
    return str(root / "raw" / fp)
