"""Real network topologies from ``topohub`` as element ids, links and a CSR adjacency."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from tasks.core.errors import ConfigError


class TopologyError(ConfigError):
    pass


_KEY = re.compile(r"[A-Za-z0-9_-]+(/[A-Za-z0-9_.-]+)+")


def check_topology_key(key: str) -> str:
    """A topohub key names a network shipped in the topohub package (``group/name``); anything else, a path
    outside the package included, is rejected with the key named."""
    from importlib.resources import files

    if not _KEY.fullmatch(key or "") or ".." in key.split("/"):
        raise TopologyError(f"unknown topology {key!r}: expected a topohub key such as 'topozoo/Abilene'")
    if not (files("topohub") / "data" / f"{key}.json").is_file():
        raise TopologyError(
            f"unknown topology {key!r}: expected a topohub key such as 'topozoo/Abilene', "
            "'topozoo/Geant2012', 'sndlib/polska' or 'backbone/world'"
        )
    return key


@dataclass(frozen=True)
class Topology:
    name: str
    element_ids: tuple[str, ...]
    names: tuple[str, ...]
    edges: tuple[tuple[int, int], ...]  # undirected, i < j

    @property
    def n(self) -> int:
        return len(self.element_ids)

    def csr(self) -> tuple[np.ndarray, np.ndarray]:
        """Symmetric adjacency in CSR form: (indptr[n+1], indices[nnz]), neighbours sorted."""
        nbrs: list[list[int]] = [[] for _ in range(self.n)]
        for a, b in self.edges:
            nbrs[a].append(b)
            nbrs[b].append(a)
        indptr = np.zeros(self.n + 1, dtype=np.int64)
        indptr[1:] = np.cumsum([len(x) for x in nbrs])
        indices = np.array([j for x in nbrs for j in sorted(x)], dtype=np.int64)
        return indptr, indices

    def to_json(self) -> dict:
        return {
            "name": self.name,
            "elements": [{"element_id": e, "name": n} for e, n in zip(self.element_ids, self.names)],
            "links": [{"a": self.element_ids[a], "b": self.element_ids[b]} for a, b in self.edges],
        }

    @classmethod
    def from_json(cls, data: dict) -> Topology:
        ids = tuple(e["element_id"] for e in data["elements"])
        index = {e: i for i, e in enumerate(ids)}
        edges = set()
        for link in data["links"]:
            a, b = index[link["a"]], index[link["b"]]
            if a != b:
                edges.add((min(a, b), max(a, b)))
        names = tuple(str(e.get("name", e["element_id"])) for e in data["elements"])
        return cls(data.get("name", "?"), ids, names, tuple(sorted(edges)))

    @classmethod
    def read(cls, path: Path) -> Topology:
        return cls.from_json(json.loads(Path(path).read_text()))


def load_topology(key: str) -> Topology:
    """Load a topohub network by key (e.g. ``topozoo/Abilene``, ``backbone/world``)."""
    import topohub

    check_topology_key(key)
    try:
        raw = topohub.get(key)
    except KeyError:
        raise TopologyError(
            f"unknown topology {key!r}: expected a topohub key such as 'topozoo/Abilene', "
            "'topozoo/Geant2012', 'sndlib/polska' or 'backbone/world'"
        ) from None
    node_ids = [n["id"] for n in raw["nodes"]]
    index = {nid: i for i, nid in enumerate(node_ids)}
    width = max(4, len(str(len(node_ids))))
    ids = tuple(f"NE-{i:0{width}d}" for i in range(len(node_ids)))
    names = tuple(str(n.get("name") or f"node{n['id']}") for n in raw["nodes"])
    edges = set()
    for e in raw["edges"]:
        a, b = index[e["source"]], index[e["target"]]
        if a != b:
            edges.add((min(a, b), max(a, b)))
    return Topology(key, ids, names, tuple(sorted(edges)))
