"""The input contract checked before any engine starts (docs/DATA.md): the raw directory's layout and its topology.

Cheap by design (a directory listing, the topology file, each KPI export's header and first rows): what it
rejects costs a second, not a JVM's start. The stages check the rest (every row, every file's columns and bytes)
as they read.
"""

from __future__ import annotations

import csv
from pathlib import Path

from tasks.core.errors import DataRejected
from tasks.core.stages.raw import TOPOLOGY_FILES, RawLayout, check_kpi_rows, discover

CONTRACT = "docs/DATA.md"


def preflight(raw: Path | str) -> RawLayout:
    """The raw exports at ``raw`` as a :class:`RawLayout`, or :class:`DataRejected` with one line naming the file,
    line or element and what was expected."""
    if not str(raw).strip():
        raise DataRejected(f"--raw is empty: expected a directory of raw exports ({CONTRACT})")
    raw = Path(raw)
    if not raw.exists():
        raise DataRejected(f"{raw}: no such directory (expected a directory of raw exports, {CONTRACT})", file=str(raw))
    if not raw.is_dir():
        raise DataRejected(f"{raw}: not a directory (expected a directory of raw exports, {CONTRACT})", file=str(raw))
    if not any(raw.iterdir()):
        raise DataRejected(
            f"{raw}: empty directory (expected {TOPOLOGY_FILES[0]}, kpi/kpi_YYYY-MM-DD.csv, "
            f"alarms/alarms_YYYY-MM-DD.jsonl: {CONTRACT})",
            file=str(raw),
        )
    layout = discover(raw)
    topo = layout.topology()
    if topo.n == 0:
        raise DataRejected(f"{layout.topology_file}: topology has no elements", file=str(layout.topology_file))
    if alone := topo.isolated():
        more = f" and {len(alone) - 1} more" if len(alone) > 1 else ""
        raise DataRejected(
            f"{layout.topology_file}: element {alone[0]!r}{more} has no link (expected every element linked to at "
            "least one other: the graph features and the model aggregate over neighbours)",
            file=str(layout.topology_file),
        )
    for path in layout.kpi_files:
        _first_rows(path)
    return layout


def _first_rows(path: Path) -> None:
    """The header and the first rows' types (what ingest's full check reads first): a few kB, not the file."""
    try:
        check_kpi_rows(path)
    except UnicodeDecodeError:
        raise DataRejected(f"{path}: undecodable bytes in the first rows (expected UTF-8)", file=str(path)) from None
    except csv.Error as exc:
        raise DataRejected(f"{path}: not readable as CSV ({exc})", file=str(path), expected="CSV") from None
