"""Failure dynamics beyond one hop (``workload.dynamics: cascade``), from how IP/optical networks fail:

- **Shared-risk link groups.** Links that share a conduit, a duct or an amplifier fail together (a fibre cut).
  Each link belongs to one group of 1-3 links; a group fails at random and stays down for 30 min to 2 h.
- **Rerouting overloads alternate paths.** Traffic that crossed a failed element (its transit share) or a failed
  link moves to the neighbouring elements that are still up, and for a link, to the other neighbours of both
  ends. The element's load follows its rerouted share with a lag (routing reconvergence, queues filling: a time
  constant of about 30 min), and an element loaded past its headroom may fail itself, which moves its traffic on:
  a cascade over several hops, with delays.
- **Local precursors that are noisier and sometimes absent.** How visible a degradation episode is in the
  element's own KPIs varies per episode, and a quarter show nothing at all (a silent software fault).

Pure NumPy state; every draw comes from the simulator's generator, so a seed gives the same network history.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

SRLG_RATE = 1.0 / (288 * 3)  # a shared-risk group fails about every three days
SRLG_STEPS = (6, 25)  # down for 30 min .. 2 h (steps of 5 min)
TRANSIT_SHARE = 0.6  # of a failed element's traffic, what crossed it and must be rerouted
LINK_SHARE = 0.5  # of the smaller end's traffic, what a link carried
LOAD_LAG = 0.15  # per step: the load closes this fraction of its gap to the rerouted share
OVERLOAD_AT = 0.4  # extra load (a fraction of the element's own traffic) its headroom absorbs
OVERLOAD_HAZARD = 0.1  # fault hazard per step per unit of load above the headroom
SILENT_SHARE = 0.25  # degradation episodes invisible in the element's own KPIs


@dataclass
class Cascade:
    edges: np.ndarray  # [m, 2] element indices
    group: np.ndarray  # [m] the shared-risk group of each link
    group_left: np.ndarray  # [g] steps each group stays down
    traffic: np.ndarray  # [n] each element's own base traffic
    nbrs: list[np.ndarray]  # neighbours of each element
    load: np.ndarray  # [n] extra load, a fraction of the element's own traffic, lagging its rerouted share
    visibility: np.ndarray  # [n] how much of the running episode's drift the element's KPIs show


def make_cascade(edges: list[tuple[int, int]], n: int, traffic: np.ndarray, rng: np.random.Generator) -> Cascade:
    """The network's shared-risk groups (links shuffled, cut into groups of 1-3) and a quiet initial state."""
    e = np.array(edges, dtype=np.int64).reshape(-1, 2)
    order = rng.permutation(len(e))
    sizes = rng.integers(1, 4, len(e))
    group = np.zeros(len(e), np.int64)
    g, i = 0, 0
    while i < len(e):
        group[order[i : i + sizes[g]]] = g
        i += sizes[g]
        g += 1
    nbrs = [[] for _ in range(n)]
    for a, b in e:
        nbrs[a].append(b)
        nbrs[b].append(a)
    return Cascade(
        e, group, np.zeros(g, np.int64), traffic, [np.array(x, np.int64) for x in nbrs], np.zeros(n), np.ones(n)
    )


def start_episodes(c: Cascade, new: np.ndarray, rng: np.random.Generator) -> None:
    """Each new degradation episode's visibility: none for a silent one, else a fraction in [0.3, 1]."""
    k = int(new.sum())
    c.visibility[new] = np.where(rng.random(k) < SILENT_SHARE, 0.0, rng.uniform(0.3, 1.0, k))


def rerouted_share(c: Cascade, down: np.ndarray, link_down: np.ndarray) -> np.ndarray:
    """[n] extra traffic each element carries now, as a fraction of its own: from failed elements (their transit
    share to their neighbours still up) and failed links (their flow to the other neighbours of both ends)."""
    extra = np.zeros(len(c.traffic))
    for d in np.flatnonzero(down):
        up = c.nbrs[d][~down[c.nbrs[d]]]
        if len(up):
            extra[up] += TRANSIT_SHARE * c.traffic[d] / len(up)
    for a, b in c.edges[link_down & ~down[c.edges[:, 0]] & ~down[c.edges[:, 1]]]:
        flow = LINK_SHARE * min(c.traffic[a], c.traffic[b])
        for end, other in ((a, b), (b, a)):
            alt = c.nbrs[end][(c.nbrs[end] != other) & ~down[c.nbrs[end]]]
            if len(alt):
                extra[alt] += 0.5 * flow / len(alt)
    return extra / c.traffic


def step(c: Cascade, down: np.ndarray, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """One 5-minute step: groups fail or recover, load moves towards its rerouted share. Returns the overload
    hazard [n] and how many of each element's links are down [n]."""
    new = (c.group_left == 0) & (rng.random(len(c.group_left)) < SRLG_RATE)
    c.group_left[new] = rng.integers(*SRLG_STEPS, int(new.sum()))
    link_down = c.group_left[c.group] > 0
    c.group_left[c.group_left > 0] -= 1
    c.load += LOAD_LAG * (rerouted_share(c, down, link_down) - c.load)
    links = np.bincount(c.edges[link_down].ravel(), minlength=len(c.traffic))
    return OVERLOAD_HAZARD * np.clip(c.load - OVERLOAD_AT, 0, None), links
