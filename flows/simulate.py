"""The simulator as a flow: NMS exports (KPI CSV, alarm JSONL, topology) over a real network, with dirt."""

from __future__ import annotations

from typing import Annotated, Any

from prefect import flow
from pydantic import Field

from tasks.common import store_root
from tasks.core.config import load_config
from tasks.simulate import simulate_task


@flow(name="simulate_workload", log_prints=True)
def simulate_workload(
    topology: str = "topozoo/Geant2012",
    days: Annotated[int, Field(ge=1)] = 7,
    seed: int = 7,
    dirt: Annotated[float, Field(ge=0, le=0.5)] = 0.01,
    profile: str = "local",
) -> dict[str, Any]:
    """Simulated NMS exports over a real topology, with dirt and its ledger.

    Args:
        topology: topohub key, e.g. topozoo/Abilene.
        days: days of 5-minute telemetry.
        seed: the simulator seed.
        dirt: the fraction of rows made dirty (each recorded in the dirt ledger).
        profile: the profile whose store receives the exports.
    """
    cfg = load_config(
        profile,
        [f"workload.topology={topology}", f"workload.days={days}", f"workload.seed={seed}", f"workload.dirt={dirt}"],
    )
    raw = simulate_task(cfg.workload, store_root(cfg.paths.root))
    print(f"exports in {raw}")
    return {"raw": raw, "topology": topology, "days": days}
