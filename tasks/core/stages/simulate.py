"""Telemetry simulator: 5-minute KPIs and an alarm log over a real topology, with injected dirt.

Faults come from a hazard that rises with precursor drift (a degradation episode that ramps up
before most faults) and with faults on neighbouring elements (cascades along links). The run is
deterministic for a seed and streams day by day, so memory stays bounded by one day of samples.
"""

from __future__ import annotations

import io
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta
from pathlib import Path

import numpy as np
import pandas as pd
import scipy.sparse as sp

from tasks.core.config import WorkloadConfig
from tasks.core.schema import STEP_MINUTES, STEPS_PER_DAY
from tasks.core.stages.cascade import Cascade, make_cascade, start_episodes
from tasks.core.stages.cascade import step as cascade_step
from tasks.core.stages.dirt import DIRT_KINDS, DirtLedger, draw_kpi_dirt, inject_alarm_dirt, kpi_text
from tasks.core.store import write_atomic, write_json_atomic
from tasks.core.topology import Topology, load_topology
from tasks.core.training.procs import die_with_parent


@dataclass
class _State:
    drift: np.ndarray
    rate: np.ndarray
    cap: np.ndarray
    fault_left: np.ndarray
    base_cpu: np.ndarray
    base_temp: np.ndarray
    base_traffic: np.ndarray
    base_latency: np.ndarray


@dataclass
class SimulationSummary:
    out: Path
    topology: str
    elements: int
    days: int
    kpi_rows: int = 0
    alarm_rows: int = 0
    faults: int = 0
    dirt: dict[str, int] = field(default_factory=dict)


# Process constants (per 5-minute step).
EPISODE_RATE = 1.0 / (STEPS_PER_DAY * 3)  # a precursor episode every ~3 days per element
CASCADE_EPISODE = 0.04  # extra episode probability per faulted neighbour
BASE_HAZARD = 2e-5
DRIFT_HAZARD = 0.35  # hazard per unit of drift above 0.6
CASCADE_HAZARD = 0.004  # extra hazard per faulted neighbour


def _initial_state(n: int, rng: np.random.Generator) -> _State:
    return _State(
        drift=np.zeros(n),
        rate=np.zeros(n),
        cap=np.ones(n),
        fault_left=np.zeros(n, dtype=np.int64),
        base_cpu=rng.uniform(15, 45, n),
        base_temp=rng.uniform(35, 55, n),
        base_traffic=rng.uniform(1, 40, n),
        base_latency=rng.uniform(2, 25, n),
    )


def _ground_truth(topo: Topology, summary: SimulationSummary, seed: int, start: str, dirt: float, faults) -> dict:
    return {
        "topology": topo.name,
        "elements": topo.n,
        "days": summary.days,
        "start": start,
        "seed": seed,
        "dirt_rate": dirt,
        "kpi_rows_written": summary.kpi_rows,
        "alarm_lines_written": summary.alarm_rows,
        "dirt_rows": summary.dirt,
        "dirt_ledger": "dirt/dirt_<day>.csv (kind, source, element_id, timestamp, column, file, line)",
        "faults": faults,
    }


def simulate(
    topology: str | Topology,
    days: int,
    seed: int,
    out: Path,
    dirt: float = 0.0,
    start: str = "2026-01-05",
    progress: Callable[[int, int], None] | None = None,
    dynamics: str = "v1",
) -> SimulationSummary:
    """``dynamics``: ``v1``, faults from the element's own drift and its neighbours' faults at once (one hop);
    ``cascade``, with shared-risk links and rerouted load over hops (``tasks/core/stages/cascade.py``)."""
    topo = load_topology(topology) if isinstance(topology, str) else topology
    out = Path(out)
    for sub in ("kpi", "alarms", "dirt", "hidden"):
        (out / sub).mkdir(parents=True, exist_ok=True)
    write_json_atomic(out / "topology.json", topo.to_json())
    rng = np.random.default_rng(seed)
    indptr, indices = topo.csr()
    adj = sp.csr_matrix((np.ones(len(indices)), indices, indptr), shape=(topo.n, topo.n))
    state = _initial_state(topo.n, rng)
    cas = make_cascade(topo.edges, topo.n, state.base_traffic, rng) if dynamics == "cascade" else None
    day0 = date.fromisoformat(start)
    summary = SimulationSummary(out, topo.name, topo.n, days, dirt={k: 0 for k in DIRT_KINDS})
    faults: list[dict] = []
    late_rows: list[str] = []
    alarm_seq = 0
    with DayWriters(writer_processes(topo.n)) as writers:
        for d in range(days):
            day = day0 + timedelta(days=d)
            kpi, alarms, day_faults, hidden = _simulate_day(topo, adj, state, rng, day, cas)
            _write_hidden(out, day.isoformat(), hidden)
            alarms["alarm_id"] = [f"A{alarm_seq + i:09d}" for i in range(len(alarms))]
            alarm_seq += len(alarms)
            faults.extend(day_faults)
            last = d == days - 1
            late_rows = _write_day(out, day.isoformat(), kpi, alarms, rng, dirt, late_rows, last, summary, writers)
            if progress:
                progress(d + 1, days)
    for kpi_rows, counts in writers.done:
        summary.kpi_rows += kpi_rows
        for k, v in counts.items():
            summary.dirt[k] += v
    summary.faults = len(faults)
    _hidden_index(out, topo, day0, days)
    truth = _ground_truth(topo, summary, seed, day0.isoformat(), dirt, faults)
    write_json_atomic(out / "ground_truth.json", {**truth, "dynamics": dynamics})
    return summary


def _write_hidden(out: Path, day: str, hidden: dict[str, np.ndarray]) -> None:
    """The day's hidden state, [step, element] per array (the oracle's inputs; never read by the pipeline)."""
    buf = io.BytesIO()
    np.savez(buf, **hidden)
    write_atomic(out / "hidden" / f"hidden_{day}.npz", buf.getvalue())


def _hidden_index(out: Path, topo: Topology, day0: date, days: int) -> None:
    """hidden/hidden.json: the day files in order, the first step's time and the step (written last: a reader sees
    the hidden state of a whole run or none)."""
    files = [f"hidden_{(day0 + timedelta(days=d)).isoformat()}.npz" for d in range(days)]
    start_us = int(datetime(day0.year, day0.month, day0.day, tzinfo=UTC).timestamp() * 1_000_000)
    meta = {"files": files, "start_us": start_us, "step_us": STEP_MINUTES * 60_000_000, "elements": topo.element_ids}
    meta["arrays"] = (
        "drift, rate, cap (the element's degradation episode), visible_drift (what its KPIs show of it), "
        "faulted_neighbours, links_down, load (rerouted traffic, a fraction of its own): after each step"
    )
    write_json_atomic(out / "hidden" / "hidden.json", meta)


def _write_day(out: Path, day: str, kpi, alarms, rng, dirt: float, late_in: list[str], last: bool, summary,
               writers: DayWriters) -> list:  # fmt: skip
    """One day's exports with their dirt and its ledger: everything random drawn here, in order; the KPI text made
    and written by ``writers``. Returns the clean rows held back for tomorrow."""
    draws = draw_kpi_dirt(kpi, rng, dirt, len(late_in), last)
    alarm_ledger = DirtLedger(day)
    alarm_lines = inject_alarm_dirt(alarms, rng, dirt, alarm_ledger)
    write_atomic(out / "alarms" / f"alarms_{day}.jsonl", "\n".join(alarm_lines) + "\n")
    summary.alarm_rows += len(alarm_lines)
    writers.submit(_write_kpi, out, day, kpi, draws, late_in, alarm_ledger.rows)
    return draws["late_lines"]


def _write_kpi(out: Path, day: str, kpi, draws: dict, late_in: list[str], alarm_rows: list) -> tuple[int, dict]:
    """The day's KPI export and its dirt ledger (the KPI lines' rows, then the alarms'): the KPI rows written and
    the ledger's counts by kind."""
    ledger = DirtLedger(day)
    lines = kpi_text(kpi, draws, late_in, ledger)
    write_atomic(out / "kpi" / f"kpi_{day}.csv", "\n".join(lines) + "\n")
    for row in alarm_rows:
        ledger.add(*row)
    ledger.write(out / "dirt" / f"dirt_{day}.csv")
    return len(lines) - 1, ledger.counts


class DayWriters:
    """Runs the days' text-making writes: inline without ``workers``, else in that many processes, at most that many
    days pending, so memory stays a few days of samples. The text is a pure function of the draws, so the exports
    are the same either way."""

    def __init__(self, workers: int = 0) -> None:
        import multiprocessing
        import threading
        from concurrent.futures import ProcessPoolExecutor

        # fork where this process has no other thread; spawned (a fresh interpreter) where one might hold a lock
        ctx = multiprocessing.get_context("fork" if threading.active_count() == 1 else "spawn")
        self.pool = ProcessPoolExecutor(workers, mp_context=ctx, initializer=die_with_parent) if workers else None
        self.workers, self.pending, self.done = workers, deque(), []

    def submit(self, fn, *args) -> None:
        if self.pool is None:
            self.done.append(fn(*args))
            return
        if len(self.pending) >= self.workers:
            self.done.append(self.pending.popleft().result())
        self.pending.append(self.pool.submit(fn, *args))

    def __enter__(self) -> DayWriters:
        return self

    def __exit__(self, *exc) -> None:
        try:
            while self.pending and exc[0] is None:
                self.done.append(self.pending.popleft().result())
        finally:
            if self.pool is not None:
                self.pool.shutdown(wait=True, cancel_futures=True)


def writer_processes(elements: int) -> int:
    """Processes for the text of a simulation with ``elements`` elements: none for a small network (a process's
    start costs more than its day) or a host of two cores, else up to four beside the simulation."""
    import os

    return 0 if elements * STEPS_PER_DAY < 200_000 else max(0, min(4, (os.cpu_count() or 1) - 2))


def simulate_stage(cfg: WorkloadConfig, out: Path, progress=None) -> dict:
    """The simulated exports of the workload ``cfg`` in ``out`` and their manifest body."""
    s = simulate(cfg.topology, cfg.days, cfg.seed, out, cfg.dirt, cfg.start.isoformat(), progress, cfg.dynamics)
    return {
        "workload": cfg.model_dump(mode="json"),
        "rows_out": s.kpi_rows,
        "alarm_lines": s.alarm_rows,
        "faults": s.faults,
        "dirt": s.dirt,
        "elements": s.elements,
    }


def _simulate_day(
    topo: Topology, adj: sp.csr_matrix, s: _State, rng: np.random.Generator, day: date, cas: Cascade | None = None
) -> tuple[pd.DataFrame, pd.DataFrame, list[dict], dict[str, np.ndarray]]:
    """One day of the network. ``cas``: the cascade dynamics (shared-risk links, rerouted load); None keeps the
    original one-hop dynamics, draw for draw."""
    n, steps = topo.n, STEPS_PER_DAY
    t0 = datetime(day.year, day.month, day.day, tzinfo=UTC)
    drift, seen, load = np.zeros((steps, n)), np.zeros((steps, n)), np.zeros((steps, n))
    down = np.zeros((steps, n), dtype=bool)
    hidden = {k: np.zeros((steps, n), np.float32) for k in ("rate", "cap")}
    hidden["faulted_neighbours"], hidden["links_down"] = np.zeros((steps, n), np.int16), np.zeros((steps, n), np.int16)
    faults: list[dict] = []
    alarm_rows: list[tuple[int, int, str, str]] = []
    for t in range(steps):
        in_fault = s.fault_left > 0
        nbr_faults = adj @ in_fault.astype(float)
        idle = (~in_fault) & (s.rate == 0)
        p_episode = EPISODE_RATE + CASCADE_EPISODE * nbr_faults
        new = idle & (rng.random(n) < p_episode)
        s.rate[new] = 1.0 / rng.uniform(6, 30, new.sum())  # reaches 1.0 in 30 min .. 2.5 h
        s.cap[new] = np.where(rng.random(new.sum()) < 0.3, rng.uniform(0.3, 0.55, new.sum()), 1.6)
        active = s.rate > 0
        s.drift[active] = np.minimum(s.drift[active] + s.rate[active], s.cap[active])
        fizzled = active & (s.cap < 1) & (s.drift >= s.cap) & (rng.random(n) < 0.05)
        s.rate[fizzled], s.drift[fizzled] = 0.0, 0.0
        graph_hazard = CASCADE_HAZARD * nbr_faults  # one hop, at once
        if cas is not None:  # instead: overload from rerouted traffic, over hops and with a lag
            start_episodes(cas, new, rng)
            graph_hazard, hidden["links_down"][t] = cascade_step(cas, in_fault, rng)
        hazard = BASE_HAZARD + DRIFT_HAZARD * np.clip(s.drift - 0.6, 0, None) + graph_hazard
        onset = (~in_fault) & (rng.random(n) < hazard)
        faults.extend(_onsets(topo, s, rng, onset, nbr_faults, t, t0, alarm_rows))
        ended = in_fault & (s.fault_left == 1)
        for e in np.flatnonzero(ended):
            alarm_rows.append((t, e, "cleared", "NODE_UP"))
        s.fault_left[in_fault] -= 1
        drift[t] = s.drift
        seen[t] = s.drift * (cas.visibility if cas is not None else 1.0)
        load[t] = cas.load if cas is not None else 0.0
        down[t] = s.fault_left > 0
        hidden["rate"][t], hidden["cap"][t] = s.rate, np.where(s.rate > 0, s.cap, 0.0)
        hidden["faulted_neighbours"][t] = adj @ down[t].astype(float)
        _precursor_alarms(t, seen[t], rng, alarm_rows)
    kpi = _kpis(topo, s, rng, seen, down, t0, load)
    alarms = _alarm_frame(topo, alarm_rows, t0, rng)
    hidden.update({"drift": drift.astype(np.float32), "visible_drift": seen.astype(np.float32)})
    return kpi, alarms, faults, {**hidden, "load": load.astype(np.float32)}


def _onsets(topo, s: _State, rng, onset: np.ndarray, nbr_faults, t: int, t0, alarm_rows: list) -> list[dict]:
    """The faults that start at step ``t``: their alarms, durations and ground-truth records; episodes end."""
    for e in np.flatnonzero(onset):
        rng.integers(3, 13)  # drawn and unused (the duration is the draw below): kept so a seed's exports stay
        alarm_rows.append((t, e, "critical", "NODE_DOWN"))
    s.fault_left[onset] = rng.integers(3, 13, onset.sum())
    ts = (t0 + timedelta(minutes=STEP_MINUTES * t)).isoformat().replace("+00:00", "Z")
    out = [
        {
            "element_id": topo.element_ids[e],
            "start": ts,
            "duration_min": int(s.fault_left[e]) * STEP_MINUTES,  # the fault's real length (NODE_DOWN..NODE_UP)
            "precursor_drift": round(float(s.drift[e]), 3),
            "faulted_neighbours": int(nbr_faults[e]),
        }
        for e in np.flatnonzero(onset)
    ]
    s.drift[onset], s.rate[onset] = 0.0, 0.0
    return out


def _precursor_alarms(t: int, drift: np.ndarray, rng: np.random.Generator, rows: list) -> None:
    p = 0.08 * drift + 0.002  # precursor alarms grow with drift; a small background of noise
    hit = np.flatnonzero(rng.random(len(drift)) < p)
    for e in hit:
        d = drift[e]
        if d < 0.05:
            rows.append((t, e, "warning", "NOISE"))
        else:
            sev = "major" if d > 0.8 else ("minor" if d > 0.4 else "warning")
            kind = ("HIGH_CPU", "HIGH_TEMP", "LINK_DEGRADED", "IF_ERRORS")[int(rng.integers(0, 4))]
            rows.append((t, e, sev, kind))


def _kpis(topo, s: _State, rng, drift, down, t0, load) -> pd.DataFrame:
    """The KPIs: ``drift`` as the element's own KPIs show it, ``load`` the rerouted traffic it carries (zero
    without the cascade dynamics, which leaves every value as it was)."""
    steps, n = drift.shape
    hours = (np.arange(steps) * STEP_MINUTES / 60.0)[:, None]
    diurnal = 0.5 + 0.5 * np.sin(2 * np.pi * (hours - 9) / 24)
    noise = rng.standard_normal((7, steps, n))
    traffic = s.base_traffic * (0.4 + 0.9 * diurnal) * (1 + 0.05 * noise[0])
    traffic = np.where(down, traffic * 0.02, traffic * (1 + load))
    cpu = s.base_cpu + 20 * diurnal + 35 * drift + 3 * noise[1]
    mem = 40 + 10 * diurnal + 12 * drift + 2 * noise[2]
    temp = s.base_temp + 4 * diurnal + 18 * drift + 1.5 * noise[3]
    over = np.clip(load - 0.3, 0, None)  # queues build as the rerouted load nears the headroom
    latency = s.base_latency * (1 + 0.1 * noise[4] ** 2) + 40 * drift**2 + np.where(down, 400.0, 0.0) + 60 * over**2
    loss = np.abs(0.05 * noise[5]) + 2.5 * drift**2 + np.where(down, 60.0, 0.0) + 4 * over**2
    errors = rng.poisson(0.3 + 25 * drift**2 + np.where(down, 200.0, 0.0))
    ts = pd.date_range(t0, periods=steps, freq=f"{STEP_MINUTES}min")
    return pd.DataFrame(
        {
            "timestamp": np.repeat(ts.strftime("%Y-%m-%dT%H:%M:%SZ").to_numpy(), n),
            "element_id": np.tile(np.array(topo.element_ids), steps),
            "cpu_util": np.clip(cpu, 0, 100).ravel().round(2),
            "mem_util": np.clip(mem, 0, 100).ravel().round(2),
            "temperature_c": np.clip(temp, -20, 120).ravel().round(2),
            "traffic_gbps": np.clip(traffic, 0, None).ravel().round(3),
            "latency_ms": np.clip(latency, 0, None).ravel().round(2),
            "packet_loss_pct": np.clip(loss, 0, 100).ravel().round(3),
            "if_errors": errors.ravel().astype(np.int64),
        }
    )


def _alarm_frame(topo, rows, t0, rng) -> pd.DataFrame:
    rows.sort(key=lambda r: (r[0], r[1]))
    jitter = rng.integers(0, STEP_MINUTES * 60, len(rows)) if rows else np.zeros(0, dtype=int)
    ts = [t0 + timedelta(minutes=STEP_MINUTES * t, seconds=int(j)) for (t, *_), j in zip(rows, jitter)]
    # a fault alarm is stamped at the step of the onset (no jitter) so labels align with KPIs
    ts = [
        t0 + timedelta(minutes=STEP_MINUTES * r[0]) if r[3] in ("NODE_DOWN", "NODE_UP") else x for r, x in zip(rows, ts)
    ]
    return pd.DataFrame(
        {
            "alarm_id": [""] * len(rows),
            "timestamp": [x.strftime("%Y-%m-%dT%H:%M:%SZ") for x in ts],
            "element_id": [topo.element_ids[r[1]] for r in rows],
            "severity": [r[2] for r in rows],
            "alarm_type": [r[3] for r in rows],
            "text": [f"{r[3]} on {topo.names[r[1]]}" for r in rows],
        }
    )
