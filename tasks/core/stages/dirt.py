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


def _lines(kpi: pd.DataFrame, rows) -> list[str]:
    """The export's text of some rows as they are, no dirt (the same text ``kpi_text`` makes of them)."""
    part = kpi.iloc[np.asarray(rows, dtype=np.int64)]
    return [",".join(row) for row in zip(*(_as_text(part[c]) for c in KPI_NAMES))]


def _malformed(clean: str, rng: np.random.Generator) -> str:
    """A truncated export (too few fields) or a non-numeric token in a numeric column."""
    fields = clean.split(",")
    if rng.random() < 0.5:
        return ",".join(fields[: int(rng.integers(2, len(fields) - 1))])
    j = int(rng.integers(2, len(fields)))
    fields[j] = "n/a#"
    return ",".join(fields)


def _arrival_order(n: int, kind, rng, n_late_in: int, last_day: bool):
    """The order rows arrive in: out-of-order rows moved, some held back for tomorrow (``late``), re-sent
    duplicates a little later, yesterday's ``n_late_in`` late rows mixed in. Returns (keys, origin, late): each
    arriving line's sort key and origin (a row; -1 - row: its re-sent copy; n + j: yesterday's j-th late row)."""
    keys = np.arange(n, dtype=float)
    ooo = np.flatnonzero(kind == "out_of_order")
    late = ooo[rng.random(len(ooo)) < 0.3] if not last_day else ooo[:0]
    keys[ooo] = rng.uniform(0, n, len(ooo))
    out_keys, origin = list(keys), list(range(n))
    for i in np.flatnonzero(kind == "duplicate"):  # the re-sent copy arrives a little later in the same export
        out_keys.append(i + float(rng.uniform(1, 60)))
        origin.append(-1 - i)
    for j in range(n_late_in):  # yesterday's late rows land in today's export
        out_keys.append(float(rng.uniform(0, n)))
        origin.append(n + j)
    return out_keys, origin, set(late.tolist())


def draw_kpi_dirt(kpi: pd.DataFrame, rng: np.random.Generator, rate: float, n_late_in: int, last_day: bool) -> dict:
    """Everything random about one day's KPI dirt, drawn in the simulator's order (which kind each row gets, the
    column it hits, how a malformed row breaks, the arrival order), with the few texts the draws need: the
    malformed rows' lines and the clean rows held back for tomorrow (``late_lines``). ``kpi_text`` makes the rest,
    with no randomness, where it likes (another process)."""
    n = len(kpi)
    kind = _dirt_kinds(n, rng, rate)
    col_pick = rng.integers(0, len(KPI_VALUES), n)
    bad = np.flatnonzero(kind == "malformed")  # a row gets one kind: these lines are clean until broken here
    malformed = {int(i): _malformed(line, rng) for i, line in zip(bad, _lines(kpi, bad))}
    keys, origin, late = _arrival_order(n, kind, rng, n_late_in, last_day)
    late_lines = _lines(kpi, sorted(late))  # out of order, so clean
    # arrays, not Python objects per row: a day's draws cross to a writer process as a few buffers
    return {"kind": kind.astype("U"), "col_pick": col_pick, "malformed": malformed, "keys": np.asarray(keys),
            "origin": np.asarray(origin, dtype=np.int64), "late": late, "late_lines": late_lines}  # fmt: skip


def kpi_text(kpi: pd.DataFrame, draws: dict, late_in: list[str], ledger: DirtLedger) -> list[str]:
    """The CSV lines (header first) of one day from its draws (``draw_kpi_dirt``), yesterday's late lines mixed in;
    every dirty line is recorded in ``ledger``."""
    n, kind = len(kpi), draws["kind"]
    cells = {c: _as_text(kpi[c]) for c in KPI_NAMES}
    notes = _dirty_cells(cells, kind, draws["col_pick"])
    lines = np.array([",".join(row) for row in zip(*(cells[c] for c in KPI_NAMES))], dtype=object)
    for i, line in draws["malformed"].items():
        lines[i] = line
        notes[i] = ("malformed", "")
    origin, late = draws["origin"], draws["late"]
    final: list[str] = ["timestamp,element_id," + ",".join(KPI_VALUES)]
    for pos in np.argsort(draws["keys"], kind="stable"):
        o = origin[pos]
        if 0 <= o < n and o in late:
            continue
        line = lines[o] if 0 <= o < n else lines[-1 - o] if o < 0 else late_in[o - n]
        final.append(line)
        _record(ledger, o, n, cells, kind, notes, line, len(final))
    return final


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
