"""The raw NMS exports on disk: discovery, file-level checks, and Spark readers with explicit schemas."""

from __future__ import annotations

import codecs
import csv
import json
import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

from tasks.core.errors import DataRejected
from tasks.core.schema import ALARM_COLUMNS, ALARM_NAMES, KPI_COLUMNS, KPI_NAMES
from tasks.core.store import file_digests, fingerprint_files
from tasks.core.topology import Topology

_DAY = re.compile(r"_(\d{4}-\d{2}-\d{2})\.(csv|jsonl)$")
SAMPLE_LINES = 500
MAX_LINE_BYTES = 64 << 10  # a KPI row is ~100 bytes, an alarm record < 1 KiB: a longer line is a broken export
CORRUPT = "_corrupt_record"
TOPOLOGY_FILES = ("topology.json", "topology.graphml", "topology.gml")  # the first present is read
# ISO-8601 with a zone: "Z" or an offset, extended or basic ("+02:00", "+0200", "+02"), normalized to UTC (the
# session time zone is UTC; Spark's cast reads all three offset forms). The
# readers take the timestamp as text, and it is checked against this pattern before Spark's cast: a reader given
# timestampFormat "yyyy-MM-dd'T'HH:mm:ssXXX" keeps the RAPIDS Accelerator's CSV scan off the GPU (no 'XXX' there)
# and parses slower on the CPU, and the readers' default parser is lenient (a value without a zone would pass as UTC).
ISO_ZONED = r"^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}(Z|[+-][0-9]{2}(:?[0-9]{2})?)$"
_ISO_ZONED = re.compile(ISO_ZONED)


@dataclass(frozen=True)
class RawLayout:
    root: Path
    kpi_files: tuple[Path, ...]
    alarm_files: tuple[Path, ...]
    topology_file: Path
    start: datetime
    end: datetime

    @property
    def all_files(self) -> list[Path]:
        return [*self.kpi_files, *self.alarm_files, self.topology_file]

    def fingerprint(self) -> str:
        return fingerprint_files(self.all_files, self.root)

    def digests(self) -> dict[str, str]:
        """Each file's content hash by its path under the root; :meth:`fingerprint` is made from them."""
        return file_digests(self.all_files, self.root)

    def only(self, names: set[str]) -> RawLayout:
        """The layout of just the named export files (paths under the root), with the same topology and window
        (the rules judge their rows as a run over all the files would): what an increment validates and ingests."""
        kpi = tuple(p for p in self.kpi_files if p.relative_to(self.root).as_posix() in names)
        alarms = tuple(p for p in self.alarm_files if p.relative_to(self.root).as_posix() in names)
        return RawLayout(self.root, kpi, alarms, self.topology_file, self.start, self.end)

    def stamps(self) -> dict[str, list[int]]:
        """Each file's size and modification time (ns): names what changed when the fingerprint no longer holds."""
        return {p.relative_to(self.root).as_posix(): [p.stat().st_size, p.stat().st_mtime_ns] for p in self.all_files}

    def read_key(self) -> str:
        """Names the bytes a read of these files sees (each file's size and time): the key under which validation
        offers its parsed frames to ingest (``sparkops.share_frames``)."""
        return json.dumps([str(self.root), self.stamps()], sort_keys=True)

    def topology(self) -> Topology:
        try:
            return Topology.read(self.topology_file)
        except (KeyError, ValueError, TypeError) as exc:  # TopologyError names the element or link
            raise DataRejected(
                f"{self.topology_file}: not a valid topology ({exc}); expected "
                "{'elements': [{'element_id', 'name'}], 'links': [{'a', 'b'}]}, GraphML or GML (docs/DATA.md)",
                file=str(self.topology_file),
            ) from None


def discover(raw: Path) -> RawLayout:
    raw = Path(raw)
    kpi = tuple(sorted((raw / "kpi").glob("kpi_*.csv")))
    alarms = tuple(sorted((raw / "alarms").glob("alarms_*.jsonl")))
    topo = next((raw / n for n in TOPOLOGY_FILES if (raw / n).exists()), raw / TOPOLOGY_FILES[0])
    if not kpi:
        raise DataRejected(f"{raw / 'kpi'}: no KPI exports found (expected kpi_YYYY-MM-DD.csv)", file=str(raw))
    if not topo.is_file():
        expected = ", ".join(TOPOLOGY_FILES)
        raise DataRejected(f"{topo}: topology export missing (expected one of {expected})", file=str(topo))
    days = []
    for p in (*kpi, *alarms, topo):
        if not p.is_file():  # is_file follows links: a directory, a dangling link and a symlink loop all fail
            raise DataRejected(
                f"{p}: not a regular file (a directory, a broken symbolic link or a link loop); "
                "expected one export file per day",
                file=str(p),
            )
    for p in (*kpi, *alarms):
        days.append(file_day(p))
    return RawLayout(raw, kpi, alarms, topo, min(days), max(days) + timedelta(days=1))


def file_day(p: Path) -> datetime:
    """The day an export file carries in its name (``kpi_2026-01-05.csv``), midnight UTC."""
    m = _DAY.search(p.name)
    if not m:
        raise DataRejected(f"{p}: file name does not carry its day (expected *_YYYY-MM-DD.csv|jsonl)", file=str(p))
    return datetime.fromisoformat(m.group(1)).replace(tzinfo=UTC)


def check_unchanged(raw: Path, fingerprint: str, stamps: dict[str, list[int]]) -> None:
    """After a stage has read ``raw``: its bytes must still be the ones fingerprinted before (the stage's
    output is published under that fingerprint, so a cache hit always means identical data). An exporter still
    writing, or a day re-sent mid-run, fails the run with exit 2, naming the files."""
    now = discover(raw)
    if now.fingerprint() == fingerprint:
        return
    new = now.stamps()
    changed = sorted(set(new) ^ set(stamps)) + sorted(k for k in set(new) & set(stamps) if new[k] != stamps[k])
    what = ", ".join(changed[:5]) + (f" and {len(changed) - 5} more" if len(changed) > 5 else "")
    raise DataRejected(
        f"{raw}: input changed during the run ({what or 'contents changed, sizes and times kept'}): the raw files "
        f"are no longer the bytes fingerprinted ({fingerprint}) before they were read; nothing was published. "
        "Rerun once the exporter has finished writing.",
        file=str(raw / changed[0]) if changed else str(raw),
    )


def _long_line(path: Path, line: int, length: int) -> DataRejected:
    return DataRejected(
        f"{path}: line {line} is {length:,} bytes or longer (expected records under {MAX_LINE_BYTES:,} bytes: "
        "a missing line break or a runaway field)",
        file=str(path),
        expected=f"lines under {MAX_LINE_BYTES} bytes",
    )


def _check_utf8(path: Path, max_line: int = MAX_LINE_BYTES) -> None:
    """UTF-8 throughout, and no line longer than ``max_line`` (one streamed pass; a 1 GiB line would otherwise
    reach Spark's JVM and kill it). Chunks are at most ``max_line`` bytes, so only a line crossing chunks can
    be too long: the running length of the current line is all that is tracked."""
    dec = codecs.getincrementaldecoder("utf-8")()
    offset, current, lines = 0, 0, 1
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(max_line), b""):
            try:
                dec.decode(chunk)
            except UnicodeDecodeError as exc:
                raise DataRejected(
                    f"{path}: undecodable bytes at byte offset {offset + exc.start} (expected UTF-8 text)",
                    file=str(path),
                    expected="UTF-8",
                ) from None
            first = chunk.find(b"\n")
            if first < 0:
                current += len(chunk)
            else:
                if current + first > max_line:
                    raise _long_line(path, lines, current + first)
                lines += chunk.count(b"\n")
                current = len(chunk) - chunk.rfind(b"\n") - 1
            if current > max_line:
                raise _long_line(path, lines, current)
            offset += len(chunk)
        try:
            dec.decode(b"", final=True)
        except UnicodeDecodeError:
            raise DataRejected(f"{path}: truncated UTF-8 sequence at end of file", file=str(path)) from None


def _parses(kind: str, value: str) -> bool:
    try:
        if kind == "double":
            float(value)
        elif kind == "long":
            int(value)
        elif kind == "timestamp":  # the readers' own test (the pattern, then a real instant)
            if not _ISO_ZONED.match(value):
                return False
            datetime.fromisoformat(value.replace("Z", "+00:00"))
        return True
    except ValueError:
        return False


def _check_columns(path: Path, rows: list[dict], columns, lines: list[int] | None = None) -> None:
    """A column whose sampled values are mostly not of its type rejects the file, naming the first bad line
    (``lines``: each row's line number) and the expected format."""
    lines = lines or list(range(2, len(rows) + 2))
    for col in columns:
        values = [(n, r.get(col.name)) for n, r in zip(lines, rows) if r.get(col.name) not in (None, "")]
        if col.kind == "string" or not values:
            continue
        bad = [(n, v) for n, v in values if not _parses(col.kind, str(v))]
        if len(bad) > 0.5 * len(values):
            what = "ISO-8601 with a zone (Z, +02:00, +0200 or +02)" if col.kind == "timestamp" else col.kind
            raise DataRejected(
                f"{path}: line {bad[0][0]}: column '{col.name}' is {bad[0][1]!r}, expected {what} "
                f"({len(bad)} of the first {len(values)} values are not)",
                file=str(path),
                column=col.name,
                expected=col.kind,
            )


def check_kpi_file(path: Path) -> None:
    _check_utf8(path)
    try:
        check_kpi_rows(path)
    except csv.Error as exc:
        raise DataRejected(f"{path}: not readable as CSV ({exc})", file=str(path), expected="CSV") from None


def check_kpi_rows(path: Path) -> None:
    with open(path, newline="", encoding="utf-8") as f:
        reader = csv.reader(f)
        header = next(reader, None)
        if header is None:
            raise DataRejected(f"{path}: empty file (expected a header and KPI rows)", file=str(path))
        header = [h.strip() for h in header]
        missing = [c for c in KPI_NAMES if c not in header]
        extra = [c for c in header if c not in KPI_NAMES]
        if missing or extra or header != list(KPI_NAMES):
            detail = (f"missing column(s) {missing}" if missing else "") + (
                f"{'; ' if missing else ''}unexpected column(s) {extra}" if extra else ""
            )
            raise DataRejected(
                f"{path}: header does not match the KPI export schema: {detail or 'columns out of order'}; "
                f"expected {','.join(KPI_NAMES)}",
                file=str(path),
                column=(missing or extra or [None])[0],
                expected=",".join(KPI_NAMES),
            )
        sample, lines, data_rows = [], [], 0
        for row in reader:
            data_rows += 1
            if data_rows > SAMPLE_LINES:
                break
            if len(row) == len(header):
                sample.append(dict(zip(header, row)))
                lines.append(reader.line_num)
    if data_rows == 0:
        raise DataRejected(f"{path}: no KPI rows after the header (empty export)", file=str(path))
    if not sample:
        raise DataRejected(f"{path}: no parsable KPI rows in the first {SAMPLE_LINES} lines", file=str(path))
    _check_columns(path, sample, KPI_COLUMNS, lines)


def check_alarm_file(path: Path) -> None:
    _check_utf8(path)
    sample, lines = [], 0
    with open(path, encoding="utf-8") as f:
        for line in f:
            if not line.strip():
                continue
            lines += 1
            if len(sample) >= SAMPLE_LINES:
                continue
            try:
                rec = json.loads(line)
                if isinstance(rec, dict):
                    sample.append(rec)
            except json.JSONDecodeError:
                pass
    if lines == 0:
        return  # a quiet day has no alarms; an empty alarm source as a whole is checked by the caller
    if not sample:
        raise DataRejected(
            f"{path}: none of the first lines is a JSON object (expected JSON lines)",
            file=str(path),
            expected="JSON lines",
        )
    for col in ALARM_NAMES:
        if all(col not in r for r in sample):
            raise DataRejected(
                f"{path}: field '{col}' missing from every record (expected {list(ALARM_NAMES)})",
                file=str(path),
                column=col,
                expected=",".join(ALARM_NAMES),
            )
    _check_columns(path, sample, ALARM_COLUMNS)


def check_files(layout: RawLayout) -> dict[str, int]:
    """File-level checks; raise :class:`DataRejected` naming the file and column."""
    for p in layout.kpi_files:
        check_kpi_file(p)
    for p in layout.alarm_files:
        check_alarm_file(p)
    _check_utf8(layout.topology_file)
    topo = layout.topology()
    if topo.n == 0:
        raise DataRejected(f"{layout.topology_file}: topology has no elements", file=str(layout.topology_file))
    return {"kpi_files": len(layout.kpi_files), "alarm_files": len(layout.alarm_files), "elements": topo.n}
