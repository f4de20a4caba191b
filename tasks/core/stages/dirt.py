"""Dirt injection for the simulator, with a ledger of every injected row (for checking validation)."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np
import pandas as pd

from tasks.core.schema import KPI_NAMES, KPI_VALUES

KPI_DIRT = ("null", "out_of_range", "malformed", "duplicate", "out_of_order")
ALARM_DIRT = ("alarm_malformed", "alarm_bad_severity")
DIRT_KINDS = KPI_DIRT + ALARM_DIRT
# Values outside each column's valid range (see schema.KPI_COLUMNS).
_BAD_VALUE = {
    "cpu_util": "180.5",
    "mem_util": "-4.0",
    "temperature_c": "450.0",
    "traffic_gbps": "-1.5",
    "latency_ms": "-3.0",
    "packet_loss_pct": "140.0",
    "if_errors": "-7",
}


class DirtLedger:
    """Rows of (kind, source, element_id, timestamp, column, file, line) for one day."""

    FIELDS = ("kind", "source", "element_id", "timestamp", "column", "file", "line")

    def __init__(self, day: str) -> None:
        self.day = day
        self.rows: list[tuple] = []
        self.counts: dict[str, int] = {k: 0 for k in DIRT_KINDS}

    def add(self, kind: str, source: str, element: str, ts: str, column: str, file: str, line: int) -> None:
        self.rows.append((kind, source, element, ts, column, file, line))
        self.counts[kind] += 1

    def write(self, path: Path) -> None:
        with open(path, "w", newline="") as f:
            w = csv.writer(f)
            w.writerow(self.FIELDS)
            w.writerows(self.rows)


def _as_text(column: pd.Series) -> np.ndarray:
    """A column's values as the text an export writes (``str`` of each value, as pandas' ``astype(str)``),
    built from Python scalars: several times faster than pandas' string conversion at a million rows."""
    if column.dtype == object or str(column.dtype).startswith(("str", "string")):
        return column.to_numpy(dtype=object)
    return np.array([str(v) for v in column.tolist()], dtype=object)


def _dirt_kinds(n: int, rng: np.random.Generator, rate: float) -> np.ndarray:
    """Which kind of dirt (or none: '') each of the day's ``n`` rows gets; the kinds share ``rate`` equally."""
    kind = np.full(n, "", dtype=object)
    if rate > 0:
        u = rng.random(n)
        share = rate / len(KPI_DIRT)
        for i, k in enumerate(KPI_DIRT):
            kind[(u >= i * share) & (u < (i + 1) * share)] = k
    return kind


def _dirty_cells(cells: dict, kind: np.ndarray, col_pick: np.ndarray) -> dict[int, tuple[str, str]]:
    """Nulls and out-of-range values written into ``cells`` in place; returns row -> (kind, column)."""
    notes: dict[int, tuple[str, str]] = {}
    for i in np.flatnonzero(kind == "null"):
        col = KPI_VALUES[col_pick[i]]
        cells[col][i] = ""
        notes[i] = ("null", col)
    for i in np.flatnonzero(kind == "out_of_range"):
        col = KPI_VALUES[col_pick[i]]
        cells[col][i] = _BAD_VALUE[col]
        notes[i] = ("out_of_range", col)
    return notes


def _malform(lines: np.ndarray, kind: np.ndarray, rng: np.random.Generator, notes: dict) -> None:
    """Truncated exports (too few fields) or a non-numeric token in a numeric column, in place."""
    for i in np.flatnonzero(kind == "malformed"):
        fields = lines[i].split(",")
        if rng.random() < 0.5:
            lines[i] = ",".join(fields[: int(rng.integers(2, len(fields) - 1))])
        else:
            j = int(rng.integers(2, len(fields)))
            fields[j] = "n/a#"
            lines[i] = ",".join(fields)
        notes[i] = ("malformed", "")


def _arrivals(lines, kind, rng, late_in: list[str], last_day: bool):
    """The order rows arrive in: out-of-order rows moved, some held back for tomorrow (``late``), re-sent
    duplicates a little later, yesterday's late rows mixed in. Returns (lines, keys, origin, late)."""
    n = len(lines)
    keys = np.arange(n, dtype=float)
    ooo = np.flatnonzero(kind == "out_of_order")
    late = ooo[rng.random(len(ooo)) < 0.3] if not last_day else ooo[:0]
    keys[ooo] = rng.uniform(0, n, len(ooo))
    out_lines, out_keys, origin = list(lines), list(keys), list(range(n))
    for i in np.flatnonzero(kind == "duplicate"):  # the re-sent copy arrives a little later in the same export
        out_lines.append(lines[i])
        out_keys.append(i + float(rng.uniform(1, 60)))
        origin.append(-1 - i)
    for j, line in enumerate(late_in):  # yesterday's late rows land in today's export
        out_lines.append(line)
        out_keys.append(float(rng.uniform(0, n)))
        origin.append(n + j)  # >= n: a late row from yesterday
    return out_lines, out_keys, origin, set(late.tolist())


def inject_kpi_dirt(
    kpi: pd.DataFrame,
    rng: np.random.Generator,
    rate: float,
    ledger: DirtLedger,
    late_in: list[str],
    last_day: bool,
) -> tuple[list[str], list[str]]:
    """Return the CSV lines (header first) for one day and the clean rows held back for tomorrow."""
    n = len(kpi)
    cells = {c: _as_text(kpi[c]) for c in KPI_NAMES}
    kind = _dirt_kinds(n, rng, rate)
    notes = _dirty_cells(cells, kind, rng.integers(0, len(KPI_VALUES), n))
    lines = np.array([",".join(row) for row in zip(*(cells[c] for c in KPI_NAMES))], dtype=object)
    _malform(lines, kind, rng, notes)
    out_lines, out_keys, origin, late = _arrivals(lines, kind, rng, late_in, last_day)
    final: list[str] = ["timestamp,element_id," + ",".join(KPI_VALUES)]
    for pos in np.argsort(np.asarray(out_keys), kind="stable"):
        o = origin[pos]
        if 0 <= o < n and o in late:
            continue
        final.append(out_lines[pos])
        _record(ledger, o, n, cells, kind, notes, out_lines[pos], len(final))
    return final, [lines[i] for i in sorted(late)]


def _record(ledger: DirtLedger, o: int, n: int, cells, kind, notes, line: str, line_no: int) -> None:
    """The ledger row for the line at ``line_no`` that came from row ``o`` (a copy when < 0, late when >= n)."""
    file = f"kpi/kpi_{ledger.day}.csv"
    if 0 <= o < n and o in notes:
        k, col = notes[o]
        ledger.add(k, "kpi", cells["element_id"][o], cells["timestamp"][o], col, file, line_no)
    elif 0 <= o < n and kind[o] == "out_of_order":
        ledger.add("out_of_order", "kpi", cells["element_id"][o], cells["timestamp"][o], "", file, line_no)
    elif o < 0:
        i = -1 - o
        ledger.add("duplicate", "kpi", cells["element_id"][i], cells["timestamp"][i], "", file, line_no)
    elif o >= n:
        ts, el = line.split(",")[:2]
        ledger.add("out_of_order", "kpi", el, ts, "late", file, line_no)


def inject_alarm_dirt(alarms: pd.DataFrame, rng: np.random.Generator, rate: float, ledger: DirtLedger) -> list[str]:
    file = f"alarms/alarms_{ledger.day}.jsonl"
    lines: list[str] = []
    for rec in alarms.to_dict("records"):
        u = rng.random() if rate > 0 else 1.0
        line = json.dumps(rec)
        if u < rate / 2:
            line = line[: int(rng.integers(5, max(6, len(line) - 2)))]
            ledger.add("alarm_malformed", "alarms", rec["element_id"], rec["timestamp"], "", file, len(lines) + 1)
        elif u < rate:
            line = json.dumps({**rec, "severity": "SEVERE"})
            ledger.add(
                "alarm_bad_severity", "alarms", rec["element_id"], rec["timestamp"], "severity", file, len(lines) + 1
            )
        lines.append(line)
    return lines
