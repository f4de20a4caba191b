"""The simulator as a flow: NMS exports (KPI CSV, alarm JSONL, topology) over a real network, with dirt."""

from __future__ import annotations

from typing import Any

from prefect import flow

from tasks.core.config import load_config
from tasks.runner import store_root, value
from tasks.simulate import simulate_task


@flow(name="simulate_workload", log_prints=True)
def simulate_workload(
    topology: str = "topozoo/Geant2012",
    days: int = 7,
    seed: int = 7,
    dirt: float = 0.01,
    start: str = "2026-01-05",
    out: str | None = None,
    profile: str = "local",
) -> dict[str, Any]:
    """Simulated NMS exports over a real topology, with dirt and its ledger.

    Args:
        topology: topohub key, e.g. topozoo/Abilene.
        days: days of 5-minute telemetry.
        seed: the simulator seed.
        dirt: the fraction of rows made dirty (each recorded in the dirt ledger).
        start: the first day (UTC), YYYY-MM-DD.
        out: a directory for the exports; default: the profile's store (content-addressed, reused).
        profile: the profile whose store receives the exports.
    """
    sets = {"topology": topology, "days": days, "seed": seed, "dirt": dirt, "start": start}
    cfg = load_config(profile, [f"workload.{k}={v}" for k, v in sets.items()])
    result = value(simulate_task(cfg.workload, store_root(cfg.paths.root), out))
    body = result if isinstance(result, dict) else result.manifest
    raw = out or str(result.path)
    print(f"exports in {raw}")
    return {"out": raw, "topology": topology, "days": days, **{k: body.get(k) for k in ("rows_out", "faults", "dirt")}}
