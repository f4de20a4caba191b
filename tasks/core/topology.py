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
        """Today's export: ``{"name", "elements": [{"element_id", "name"}], "links": [{"a", "b"}]}``, or
        ``{"topohub": "<key>"}`` for a network shipped in topohub (its elements named as the simulator names them).
        A duplicate element id or a link to an unknown element raises :class:`TopologyError` naming it."""
        if isinstance(data, dict) and set(data) <= {"topohub", "name"} and "topohub" in data:
            return load_topology(str(data["topohub"]))
        if not isinstance(data, dict) or not isinstance(data.get("elements"), list):
            raise TopologyError("expected an object with 'elements' (a list) and 'links' (a list)")
        return cls.from_parts(
            data.get("name", "?"),
            [(str(_field(e, "element_id", "element", i)), e.get("name")) for i, e in enumerate(data["elements"], 1)],
            [(_field(x, "a", "link", i), _field(x, "b", "link", i)) for i, x in enumerate(data.get("links", []), 1)],
        )

    @classmethod
    def from_parts(cls, name: str, elements: list[tuple[str, str | None]], links: list[tuple]) -> Topology:
        """From element (id, name) pairs and links between ids; ids unique, every link between known elements."""
        index: dict[str, int] = {}
        for i, (eid, _) in enumerate(elements, 1):
            if eid in index:
                raise TopologyError(f"element {i}: id {eid!r} already used by element {index[eid] + 1}")
            index[eid] = i - 1
        edges = set()
        for i, (a, b) in enumerate(links, 1):
            for end in (a, b):
                if str(end) not in index:
                    raise TopologyError(f"link {i} ({a} - {b}): unknown element {str(end)!r}")
            x, y = index[str(a)], index[str(b)]
            if x != y:
                edges.add((min(x, y), max(x, y)))
        ids = tuple(e for e, _ in elements)
        names = tuple(str(n if n is not None else e) for e, n in elements)
        return cls(name, ids, names, tuple(sorted(edges)))

    @classmethod
    def read(cls, path: Path) -> Topology:
        """A topology file by its format: JSON (:meth:`from_json`), GraphML or GML (through networkx). GraphML: node
        ids are element ids. GML: a node's ``element_id`` attribute, else its ``label`` where labels are unique,
        else its ``id``. A node's ``name`` (else ``label``) attribute is its name."""
        path = Path(path)
        if path.suffix.lower() in (".graphml", ".gml"):
            return _read_networkx(path)
        return cls.from_json(json.loads(path.read_text()))

    def isolated(self) -> list[str]:
        """Elements with no link: nothing propagates to or from them, so the graph model cannot place them."""
        linked = {i for edge in self.edges for i in edge}
        return [e for i, e in enumerate(self.element_ids) if i not in linked]


def _field(obj, key: str, what: str, i: int):
    if not isinstance(obj, dict) or key not in obj:
        raise TopologyError(f"{what} {i}: expected an object with {key!r}, got {str(obj)[:80]}")
    return obj[key]


def _read_networkx(path: Path) -> Topology:
    import networkx as nx

    try:
        g = nx.read_graphml(path) if path.suffix.lower() == ".graphml" else nx.read_gml(path, label="id")
    except Exception as exc:  # networkx raises its own, lxml's or ValueError for a malformed file
        raise TopologyError(f"not a readable {path.suffix[1:].upper()} graph ({type(exc).__name__}: {exc})") from None
    if path.suffix.lower() == ".graphml":
        _graphml_links_known(path)
    nodes = list(g.nodes(data=True))
    labels = [a.get("label") for _, a in nodes]
    by_label = path.suffix.lower() == ".gml" and None not in labels and len(set(labels)) == len(labels)

    def element_id(node, attrs) -> str:  # GML: an element_id attribute, else unique labels, else the numeric id
        return str(attrs.get("element_id") or (attrs["label"] if by_label else node))

    ids = {n: element_id(n, a) for n, a in nodes}
    elements = [(ids[n], a.get("name") or a.get("label")) for n, a in nodes]
    name = g.graph.get("name") or path.parent.name
    return Topology.from_parts(str(name), elements, [(ids[a], ids[b]) for a, b in g.edges()])


def _graphml_links_known(path: Path) -> None:
    """networkx adds a node for an edge's undeclared end: a link to an unknown element must be refused instead."""
    import xml.etree.ElementTree as ET

    tree = ET.parse(path)
    local = [(el.tag.rsplit("}", 1)[-1], el) for el in tree.iter()]
    declared = {el.get("id") for tag, el in local if tag == "node"}
    for i, el in enumerate((el for tag, el in local if tag == "edge"), 1):
        for end in (el.get("source"), el.get("target")):
            if end not in declared:
                raise TopologyError(f"link {i} ({el.get('source')} - {el.get('target')}): unknown element {end!r}")


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
