"""The cascade dynamics (workload.dynamics=cascade): rerouted load on hand-built networks, the lag, shared-risk
links failing together, and a simulation where faults follow overload from failures elsewhere."""

import json

import numpy as np
import pytest

from tasks.core.stages import cascade as cs
from tasks.core.stages.baselines import read_hidden
from tasks.core.stages.simulate import simulate


def _net(edges, n, traffic):
    return cs.make_cascade(edges, n, np.asarray(traffic, float), np.random.default_rng(0))


def test_a_failed_element_moves_its_transit_traffic_to_its_neighbours_still_up():
    c = _net([(0, 1), (1, 2), (1, 3)], 4, [10.0, 20.0, 5.0, 10.0])
    down = np.array([False, True, False, True])  # 1 fails; its neighbour 3 is down too
    share = cs.rerouted_share(c, down, np.zeros(3, bool))
    moved = cs.TRANSIT_SHARE * 20.0 / 2  # to 0 and 2, the neighbours still up
    assert share == pytest.approx([moved / 10, 0.0, moved / 5, 0.0])


def test_a_failed_link_moves_its_flow_to_the_other_neighbours_of_both_ends():
    # a square 0-1-2-3-0 with a chord 0-2: link 0-1 fails
    c = _net([(0, 1), (1, 2), (2, 3), (3, 0), (0, 2)], 4, [10.0, 10.0, 10.0, 10.0])
    link_down = np.array([True, False, False, False, False])
    share = cs.rerouted_share(c, np.zeros(4, bool), link_down)
    flow = cs.LINK_SHARE * 10.0
    # end 0's other neighbours: 3 and 2 (half the flow, split); end 1's: 2 (the other half)
    assert share == pytest.approx([0.0, 0.0, (flow / 4 + flow / 2) / 10, flow / 4 / 10])


def test_load_follows_the_rerouted_share_with_a_lag_and_overload_raises_the_hazard():
    c = _net([(0, 1), (1, 2)], 3, [10.0, 30.0, 10.0])
    c.group_left[:] = 0
    rng = np.random.default_rng(1)
    down = np.array([False, True, False])
    target = cs.rerouted_share(c, down, np.zeros(2, bool))
    hazards = []
    for _ in range(40):
        c.group_left[:] = 0  # no link failures in this test
        hazard, _ = cs.step(c, down, np.random.default_rng(rng.integers(1 << 30)))
        hazards.append(hazard[0])
    assert c.load[0] == pytest.approx(target[0] * (1 - (1 - cs.LOAD_LAG) ** 40), rel=1e-6)
    assert hazards[0] < hazards[5] < hazards[-1]  # the danger grows over the following half hour, not at once
    assert hazards[-1] == pytest.approx(cs.OVERLOAD_HAZARD * (c.load[0] - cs.OVERLOAD_AT), rel=1e-6)


def test_links_of_a_shared_risk_group_fail_together():
    c = _net([(0, 1), (1, 2), (2, 3), (3, 0)], 4, [10.0] * 4)
    g = c.group[0]
    c.group_left[:] = 0
    c.group_left[g] = 5
    _, links = cs.step(c, np.zeros(4, bool), np.random.default_rng(0))
    members = c.edges[c.group == g]
    assert links.sum() >= 2 * len(members) and all(links[a] and links[b] for a, b in members)
    sizes = np.bincount(_net([(i, i + 1) for i in range(30)], 31, [1.0] * 31).group)
    assert sizes.min() >= 1 and sizes.max() <= 3


def test_the_cascade_simulation_has_overload_faults_and_silent_precursors_and_v1_has_neither(tmp_path):
    simulate("topozoo/Geant2012", 4, 5, tmp_path / "cas", dynamics="cascade")
    simulate("topozoo/Geant2012", 4, 5, tmp_path / "v1")
    cas, v1 = read_hidden(tmp_path / "cas"), read_hidden(tmp_path / "v1")
    assert (v1["load"] == 0).all() and (v1["links_down"] == 0).all() and (v1["visible_drift"] == v1["drift"]).all()
    truth = json.loads((tmp_path / "cas" / "ground_truth.json").read_text())
    assert truth["dynamics"] == "cascade"
    overloaded = 0
    for f in truth["faults"]:
        t = (np.datetime64(f["start"].rstrip("Z"), "us").astype(np.int64) - cas["start_us"]) // cas["step_us"]
        e = cas["elements"].index(f["element_id"])
        overloaded += bool(t > 0 and cas["load"][t - 1, e] > cs.OVERLOAD_AT)
    assert overloaded >= 5, overloaded  # faults that follow rerouted load, not the element's own drift
    assert (cas["links_down"] > 0).any()
    episode = cas["drift"] > 0
    silent = (episode & (cas["visible_drift"] == 0)).sum() / episode.sum()
    assert 0.1 < silent < 0.4, silent  # about a quarter of episodes show nothing in the element's own KPIs
