import csv
import json

import pytest

from tasks.core.stages.simulate import simulate
from tasks.core.topology import TopologyError, load_topology


def _read(p):
    return p.read_bytes()


def test_real_topology_and_csr():
    topo = load_topology("topozoo/Abilene")
    assert topo.n == 11 and len(topo.edges) == 14
    indptr, indices = topo.csr()
    assert indptr[-1] == 2 * len(topo.edges) and set(indices) <= set(range(topo.n))


def test_unknown_topology_is_named():
    with pytest.raises(TopologyError, match="topozoo/Nowhere"):
        load_topology("topozoo/Nowhere")


def test_deterministic_for_a_seed(tmp_path):
    a, b, c = tmp_path / "a", tmp_path / "b", tmp_path / "c"
    simulate("topozoo/Abilene", 2, 5, a, dirt=0.05)
    simulate("topozoo/Abilene", 2, 5, b, dirt=0.05)
    simulate("topozoo/Abilene", 2, 6, c, dirt=0.05)
    for rel in ("kpi/kpi_2026-01-06.csv", "alarms/alarms_2026-01-05.jsonl", "ground_truth.json"):
        assert _read(a / rel) == _read(b / rel)
    assert _read(a / "kpi/kpi_2026-01-05.csv") != _read(c / "kpi/kpi_2026-01-05.csv")


def test_layout_row_counts_and_dirt_ledger(tmp_path):
    s = simulate("topozoo/Abilene", 3, 3, tmp_path, dirt=0.05)
    truth = json.loads((tmp_path / "ground_truth.json").read_text())
    assert sorted(p.name for p in (tmp_path / "kpi").iterdir()) == [
        "kpi_2026-01-05.csv",
        "kpi_2026-01-06.csv",
        "kpi_2026-01-07.csv",
    ]
    lines = sum(len(p.read_text().splitlines()) - 1 for p in (tmp_path / "kpi").glob("*.csv"))
    assert lines == truth["kpi_rows_written"] == s.kpi_rows
    # every sample once, plus one extra line per injected duplicate
    assert lines == 11 * 288 * 3 + truth["dirt_rows"]["duplicate"]
    ledger = [r for p in sorted((tmp_path / "dirt").glob("*.csv")) for r in csv.DictReader(open(p))]
    counts = {}
    for r in ledger:
        counts[r["kind"]] = counts.get(r["kind"], 0) + 1
    assert counts == {k: v for k, v in truth["dirt_rows"].items() if v}
    assert all(truth["dirt_rows"][k] > 0 for k in ("null", "out_of_range", "malformed", "duplicate"))
    # the ledger points at the exact line
    for r in ledger[:50]:
        if r["source"] == "kpi" and r["kind"] in ("null", "out_of_range"):
            line = (tmp_path / r["file"]).read_text().splitlines()[int(r["line"]) - 1]
            assert line.startswith(f"{r['timestamp']},{r['element_id']},")


def test_faults_cascade_along_links(tmp_path):
    simulate("topozoo/Geant2012", 4, 1, tmp_path)
    faults = json.loads((tmp_path / "ground_truth.json").read_text())["faults"]
    assert len(faults) > 10
    assert any(f["faulted_neighbours"] > 0 for f in faults)
    assert sum(f["precursor_drift"] > 0.6 for f in faults) > len(faults) / 2  # most faults have precursors


def test_the_hidden_state_is_logged_and_agrees_with_the_faults(tmp_path):
    """The simulator logs its hidden state for the oracle: per step and element, the degradation episode (drift,
    rate, cap) and how many neighbours are down; it agrees with the ground-truth faults and the topology."""
    import numpy as np

    from tasks.core.stages.baselines import oracle_features, read_hidden

    simulate("topozoo/Abilene", 2, 5, tmp_path, dirt=0.0)
    hidden = read_hidden(tmp_path)
    topo = load_topology("topozoo/Abilene")
    assert hidden["drift"].shape == (2 * 288, topo.n) and hidden["elements"] == list(topo.element_ids)
    assert hidden["step_us"] == 300_000_000 and (hidden["drift"] >= 0).all() and (hidden["drift"] <= 1.6).all()
    assert ((hidden["rate"] > 0) | (hidden["cap"] == 0)).all()  # a cap only while an episode runs
    down = np.zeros_like(hidden["drift"], dtype=bool)
    for f in json.loads((tmp_path / "ground_truth.json").read_text())["faults"]:
        t = (np.datetime64(f["start"].rstrip("Z"), "us").astype(np.int64) - hidden["start_us"]) // hidden["step_us"]
        down[t : t + f["duration_min"] // 5, topo.element_ids.index(f["element_id"])] = True
        assert hidden["drift"][t, topo.element_ids.index(f["element_id"])] == 0  # the episode ends at the onset
    assert down.any()
    nbrs = np.zeros((topo.n, topo.n))
    for a, b in topo.edges:
        nbrs[a, b] = nbrs[b, a] = 1
    np.testing.assert_array_equal(hidden["faulted_neighbours"], down.astype(float) @ nbrs)
    import scipy.sparse as sp

    t, e = np.array([0, 10, 300]), np.array([0, 3, 5])
    own = oracle_features(hidden, sp.csr_matrix(nbrs), t, e, full=False)
    full = oracle_features(hidden, sp.csr_matrix(nbrs), t, e, full=True)
    assert own.shape == (3, 6) and full.shape == (3, 12) and np.array_equal(full[:, :6], own)
    assert np.array_equal(own[:, 0], hidden["drift"][t, e]) and np.array_equal(own[:, 4], hidden["load"][t, e])
    assert np.array_equal(full[:, 6], hidden["faulted_neighbours"][t, e])


def test_the_exports_are_the_same_with_their_text_made_in_other_processes(tmp_path, monkeypatch):
    """Every random draw stays in the simulating process, in order; the KPI text and the ledgers made in two
    writer processes give the same files, byte for byte, as made inline."""
    import tasks.core.stages.simulate as sm

    a, b = tmp_path / "inline", tmp_path / "processes"
    inline = sm.simulate("topozoo/Abilene", 3, 5, a, dirt=0.05)
    monkeypatch.setattr(sm, "writer_processes", lambda elements: 2)
    spread = sm.simulate("topozoo/Abilene", 3, 5, b, dirt=0.05)
    files = sorted(p.relative_to(a) for p in a.rglob("*") if p.is_file())
    assert files == sorted(p.relative_to(b) for p in b.rglob("*") if p.is_file()) and len(files) >= 12
    assert [f for f in files if (a / f).read_bytes() != (b / f).read_bytes()] == []
    assert (spread.kpi_rows, spread.dirt) == (inline.kpi_rows, inline.dirt) and sum(spread.dirt.values()) > 0


def test_writer_processes_only_for_a_large_network_on_a_host_with_cores_to_spare(monkeypatch):
    import tasks.core.stages.simulate as sm

    monkeypatch.setattr("os.cpu_count", lambda: 16)
    assert (sm.writer_processes(11), sm.writer_processes(3815)) == (0, 4)
    monkeypatch.setattr("os.cpu_count", lambda: 2)
    assert sm.writer_processes(3815) == 0


SIMULATE_WITH_WRITERS = """
import sys
from pathlib import Path
import tasks.core.stages.simulate as sm
sm.writer_processes = lambda elements: 2
if __name__ == "__main__":
    sm.simulate("backbone/world", 3, 7, Path(sys.argv[1]), dirt=0.01)
"""


@pytest.mark.slow
def test_a_killed_simulation_leaves_no_writer_process(tmp_path):
    """SIGKILL the simulating process while its two writer processes make a day's text: they die with it."""
    import os
    import subprocess
    import sys
    import time

    import psutil

    script = tmp_path / "simulate_with_writers.py"
    script.write_text(SIMULATE_WITH_WRITERS)
    env = {**os.environ, "PYTHONPATH": os.getcwd()}
    proc = subprocess.Popen([sys.executable, str(script), str(tmp_path / "out")], env=env)
    try:
        deadline, writers = time.time() + 120, []
        while len(writers) < 2 and time.time() < deadline and proc.poll() is None:
            writers = psutil.Process(proc.pid).children()
            time.sleep(0.2)
        assert len(writers) == 2, "the writer processes never started"
    finally:
        proc.kill()
        proc.wait()
    gone, alive = psutil.wait_procs(writers, timeout=10)
    assert alive == [] and len(gone) == 2
