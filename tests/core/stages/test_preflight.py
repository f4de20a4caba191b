"""The input contract checked before any engine starts (docs/DATA.md): one line naming the file, line or element."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from tasks.core.errors import DataRejected
from tasks.core.stages.preflight import preflight

EXAMPLE = Path(__file__).resolve().parents[3] / "docs" / "example-network"


@pytest.fixture
def network(tmp_path) -> Path:
    """The shipped example network, copied (its topology as JSON, which the tests then break)."""
    from tasks.core.topology import Topology

    raw = tmp_path / "raw"
    shutil.copytree(EXAMPLE, raw)
    topo = Topology.read(raw / "topology.graphml")
    (raw / "topology.graphml").unlink()
    (raw / "topology.json").write_text(json.dumps(topo.to_json()))
    return raw


def _topology(raw: Path, edit) -> None:
    data = json.loads((raw / "topology.json").read_text())
    edit(data)
    (raw / "topology.json").write_text(json.dumps(data))


def test_the_example_network_passes_as_shipped():
    layout = preflight(EXAMPLE)
    topo = layout.topology()
    assert topo.name == "metro-west" and topo.n == 8 and len(topo.edges) == 10
    assert layout.topology_file.name == "topology.graphml" and len(layout.kpi_files) == 3
    assert str(layout.start.date()) == "2026-01-05" and str(layout.end.date()) == "2026-01-08"


@pytest.mark.parametrize(
    "where, message",
    [
        ("", "--raw is empty"),
        ("missing", "no such directory"),
        ("a-file", "not a directory"),
        ("empty", "empty directory"),
    ],
)
def test_a_missing_or_empty_directory_is_named(tmp_path, where, message):
    (tmp_path / "a-file").write_text("x")
    (tmp_path / "empty").mkdir()
    with pytest.raises(DataRejected, match=message):
        preflight(str(tmp_path / where) if where else "")


def test_a_link_to_an_unknown_element_names_the_link(network):
    _topology(network, lambda d: d["links"].append({"a": "rtr-ams-01", "b": "rtr-xx-99"}))
    with pytest.raises(DataRejected, match=r"topology.json: .*link 11 \(rtr-ams-01 - rtr-xx-99\): unknown element"):
        preflight(network)


def test_duplicate_ids_and_an_element_without_links_are_named(network):
    _topology(network, lambda d: d["elements"].append({"element_id": "rtr-ams-02", "name": "again"}))
    with pytest.raises(DataRejected, match=r"element 9: id 'rtr-ams-02' already used by element 2"):
        preflight(network)
    _topology(network, lambda d: d["elements"].pop())
    _topology(network, lambda d: d["elements"].append({"element_id": "rtr-osl-01", "name": "Oslo"}))
    with pytest.raises(DataRejected, match=r"element 'rtr-osl-01' has no link"):
        preflight(network)


def test_a_wrong_layout_or_header_is_named(network):
    day = network / "kpi" / "kpi_2026-01-06.csv"
    day.write_text(day.read_text().replace("packet_loss_pct", "pkt_loss", 1))
    with pytest.raises(DataRejected, match=r"kpi_2026-01-06.csv: header .*missing column\(s\) \['packet_loss_pct'\]"):
        preflight(network)
    shutil.rmtree(network / "kpi")
    with pytest.raises(DataRejected, match=r"no KPI exports found \(expected kpi_YYYY-MM-DD.csv\)"):
        preflight(network)


def test_timestamps_in_another_format_are_named_with_the_file(network):
    day = network / "kpi" / "kpi_2026-01-05.csv"
    day.write_text(day.read_text().replace("Z,", ",").replace("T", " "))  # local time, no zone
    expected = r"kpi_2026-01-05.csv: line 2: column 'timestamp' .* expected ISO-8601 with a zone"
    with pytest.raises(DataRejected, match=expected):
        preflight(network)


def test_gml_topologies_are_read(network, tmp_path):
    import networkx as nx

    from tasks.core.topology import Topology

    topo = Topology.read(network / "topology.json")
    g = nx.Graph(name="metro-west")
    g.add_nodes_from((e, {"name": n}) for e, n in zip(topo.element_ids, topo.names))  # ids written as labels
    g.add_edges_from((topo.element_ids[a], topo.element_ids[b]) for a, b in topo.edges)
    (network / "topology.json").unlink()
    nx.write_gml(g, network / "topology.gml")
    got = preflight(network).topology()
    assert got.element_ids == topo.element_ids and got.edges == topo.edges and got.names == topo.names


def test_the_preflight_reads_the_first_rows_not_the_whole_file(network):
    """Undecodable bytes at the start are named at once; the full UTF-8 and line-length pass is ingest's."""
    day = network / "kpi" / "kpi_2026-01-07.csv"
    lines = day.read_bytes().split(b"\n")
    day.write_bytes(b"\n".join([lines[0], lines[1].replace(b"rtr", b"r\xff\xfe"), *lines[2:]]))
    with pytest.raises(DataRejected, match=r"kpi_2026-01-07.csv: undecodable bytes in the first rows"):
        preflight(network)
