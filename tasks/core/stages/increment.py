"""New days processed as they arrive: a run over exports that an earlier run's outputs already cover but for new
days validates and ingests only the new files, and recomputes only the feature days the new data can change.

The earlier run (the *base*) is found in the store: its validate output read the same raw directory, every file it
read is still there with the same bytes (content digests), the new files are exports of days after its window, and
its ingest and features outputs exist for this run's configuration and code. The increment's outputs are published
under the fingerprints a full run over all the files would have, and hold what it would hold (row for row): so an
increment is taken only where that is exact, and otherwise the run is a full one, saying why.

What makes it exact (checked, else the full run): no new row falls into the base's days or between them and the new
days (a late sample re-sent in a new file), no base row falls into the new days (it was quarantined as out of the
window then), and no new alarm repeats a base alarm's id (the dedup key of alarms). Features look back (rolling
windows, alarm counts, minutes since an alarm) except the labels, which look ``horizon_minutes`` ahead: the days
from the one holding ``first new day - horizon`` on are recomputed, the earlier ones linked from the base.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from tasks.core.store import MANIFEST, completed

LAKE_PARTS = ("kpi", "alarms", "quarantine/kpi", "quarantine/alarms")


@dataclass(frozen=True)
class Increment:
    """An earlier run's outputs that this run extends, and the export files it adds (paths under the raw root)."""

    base_validate: Path
    base_ingest: Path
    base_features: Path
    new_files: tuple[str, ...]
    old_start: datetime
    old_end: datetime
    late_days: tuple[str, ...] = ()  # the base's days that new KPI rows fall on (late samples), YYYY-MM-DD
    first_kpi: str | None = None  # the earliest new KPI row's time in the window (ISO), None: none
    first_alarm: str | None = None  # the earliest new alarm's time in the window (ISO), None: none

    @property
    def new_start(self) -> datetime:
        from tasks.core.stages.raw import file_day

        return min(file_day(Path(f)) for f in self.new_files)

    def describe(self) -> dict[str, Any]:
        return {
            "base": self.base_validate.name,
            "new_files": list(self.new_files),
            "base_window": [self.old_start.isoformat(), self.old_end.isoformat()],
            "late_days": list(self.late_days),
            "first_kpi": self.first_kpi,
            "first_alarm": self.first_alarm,
        }

    def taken(self, described: dict[str, Any] | None) -> Increment | None:
        """This increment as validation took it (with what it found: late days, the first day), or None where it
        did not (a full run)."""
        if not described or described.get("base") != self.base_validate.name:
            return None
        firsts = {k: described[k] for k in ("first_kpi", "first_alarm")}
        return replace(self, late_days=tuple(described["late_days"]), **firsts)

    def ingest_files(self, root: Path, base_file_days: dict[str, list[str]]) -> set[str]:
        """The export files the new rows' ingest reads (paths under ``root``): the new ones, and every base KPI file
        with rows on a late day (that day's lake is recomputed from all its rows)."""
        late, root = set(self.late_days), Path(os.path.abspath(root))  # Spark's paths: absolute, links kept
        again = {Path(f).relative_to(root).as_posix() for f, days in base_file_days.items() if late & set(days)}
        return set(self.new_files) | again


def _not_extending(new: tuple[str, ...], end: datetime) -> str:
    """Why an earlier run whose window ends at ``end`` cannot be extended by the ``new`` files ("" where it can)."""
    from tasks.core.stages.raw import file_day

    others = [f for f in new if not f.startswith(("kpi/", "alarms/"))]
    if others:
        return f"the new files are not only day exports: {others}"
    if min(file_day(Path(f)) for f in new) < end:
        return "a new file is of a day the earlier run covered (a backfill): the whole window is recomputed"
    if not any(f.startswith("alarms/") for f in new) or not any(f.startswith("kpi/") for f in new):
        return "the new days lack a KPI or an alarm export"
    return ""


def find_base(
    root: Path,
    raw: Path,
    digests: Callable[[], dict[str, str]],
    chain: Callable[[str], tuple[str, str, str]],
    stamps: dict[str, list[int]] | None = None,
) -> tuple[Increment | None, str]:
    """The newest earlier run this one can extend, or None and why not. ``digests()``: the raw files' content
    hashes (read only where an earlier run read this directory and ``stamps``, their sizes and times, differ from
    what it recorded); ``chain(raw_fp)``: the validate, ingest and features fingerprints this run's configuration
    and code give that raw fingerprint."""
    raw, why = Path(raw).resolve(), "no earlier run over these exports in the store"
    runs = [(p, json.loads(p.read_text())) for p in sorted((Path(root) / "validate").glob(f"*/{MANIFEST}"))]
    runs = [(p, m) for p, m in runs if m.get("raw_dir") == str(raw) and m.get("raw_digests")]
    if stamps is not None and any(m.get("raw_files") == stamps for _, m in runs):
        return None, "the same files as an earlier run (nothing new)"  # a rerun: no file is read
    candidates, now = [], digests() if runs else {}
    for m_path, m in runs:
        old = m["raw_digests"]
        if any(now.get(k) != v for k, v in old.items()):
            why = "an export file read by the earlier run changed or went: the whole window is recomputed"
        elif old != now:
            candidates.append((len(old), m_path.stat().st_mtime, m_path.parent, m))
    for _, _, vdir, m in sorted(candidates, key=lambda c: c[:2], reverse=True):
        new = tuple(sorted(set(now) - set(m["raw_digests"])))
        start, end = (datetime.fromisoformat(m["window"][k]) for k in ("start", "end"))
        if why_not := _not_extending(new, end):
            why = why_not
            continue
        val_fp, ingest_fp, features_fp = chain(m["input_fingerprints"]["raw"])
        ingest, features = completed(root, "ingest", ingest_fp), completed(root, "features", features_fp)
        if val_fp != vdir.name or ingest is None or features is None:
            why = "the earlier run's outputs are of another configuration or code version, or incomplete"
            continue
        return Increment(vdir, ingest.path, features.path, new, start, end), ""
    return None, why


# ---------------------------------------------------------------- validate
def late_rows_probe(old_start: datetime, new_start: datetime, new_end: datetime):
    """What validation finds in the new files' parsed rows besides GX: the base's days their KPI rows fall on (late
    samples), the time of their earliest KPI row and alarm in the window, and their alarm ids (:func:`separable`)."""

    def probe(frames: dict[str, Any]) -> dict[str, Any]:
        from pyspark.sql import functions as F

        from tasks.core.stages.raw import CORRUPT

        ts, day = F.col("timestamp"), F.to_date("timestamp").cast("string").alias("day")
        within = ts.isNotNull() & (ts >= F.lit(old_start)) & (ts < F.lit(new_end))
        kpi = frames["kpi"].filter(within & (ts < F.lit(new_start))).select(day).distinct().collect()
        iso = F.date_format(F.min(ts), "yyyy-MM-dd'T'HH:mm:ssXXX")  # in the session's time zone, UTC
        first = {s: df.filter(within).agg(iso).first()[0] for s, df in frames.items() if df is not None}
        ids = frames["alarms"].filter(F.col(CORRUPT).isNull() & F.col("alarm_id").isNotNull()).select("alarm_id")
        return {
            "late_days": sorted(r[0] for r in kpi),
            "first_kpi": first["kpi"],
            "first_alarm": first.get("alarms"),
            "alarm_ids": sorted({r[0] for r in ids.distinct().collect()}),
        }

    return probe


def _column(path: Path, column: str) -> list:
    import pyarrow.dataset as ds

    if not any(Path(path).rglob("*.parquet")):
        return []
    return ds.dataset(path, format="parquet", partitioning="hive").to_table(columns=[column]).column(0).to_pylist()


def separable(inc: Increment, probe: dict[str, Any], new_end: datetime) -> str:
    """Why the new files cannot be processed apart from the base (a full run needed), or "" when they can."""
    for name in ("kpi", "alarms"):
        early = [t for t in _column(inc.base_ingest / "quarantine" / name, "timestamp") if t is not None]
        if any(inc.old_end <= t.replace(tzinfo=inc.old_end.tzinfo) < new_end for t in early):
            return f"earlier {name} rows are timed in the new days (quarantined as out of the window then)"
    base_ids = set(_column(inc.base_ingest / "alarms", "alarm_id"))
    base_ids |= set(_column(inc.base_ingest / "quarantine" / "alarms", "alarm_id"))
    again = base_ids.intersection(probe["alarm_ids"])
    if again:
        return f"{len(again)} new alarms repeat the ids of earlier ones (e.g. {sorted(again)[0]})"
    return ""


def _merged(b: dict[str, Any], d: dict[str, Any]) -> dict[str, Any]:
    """One expectation's result over base + new rows: passed where both passed, unexpected rows added."""
    count = (
        None
        if b["unexpected_count"] is None or d["unexpected_count"] is None
        else b["unexpected_count"] + d["unexpected_count"]
    )
    return {**d, "success": d["success"] and b["success"], "unexpected_count": count}


def merge_validation(base: dict[str, Any], delta: dict[str, Any], window: dict[str, str]) -> dict[str, Any]:
    """The validate manifest body of base + new files: counts added, suites passed where both passed. (GX's Data
    Docs and result file in the output are the new files'.)"""
    from tasks.core.stages.validate import quarantine_rate

    out = dict(delta)
    out["rows"] = {s: base["rows"].get(s, 0) + n for s, n in delta["rows"].items()}
    out["violations"] = {
        s: {r: base["violations"].get(s, {}).get(r, 0) + n for r, n in by.items()}
        for s, by in delta["violations"].items()
    }
    out["expectations"] = {
        suite: [_merged(b, d) for b, d in zip(base["expectations"][suite], exps, strict=True)]
        for suite, exps in delta["expectations"].items()
    }
    out["gx_success"] = {k: v and base["gx_success"].get(k, True) for k, v in delta["gx_success"].items()}
    out["topology_ok"] = bool(delta["topology_ok"] and base["topology_ok"])
    out["files"] = {k: (v if k == "elements" else base["files"].get(k, 0) + v) for k, v in delta["files"].items()}
    out["window"] = window
    out["rows_in"] = out["rows_out"] = base["rows_in"] + delta["rows_in"]
    out["quarantine_rate"] = quarantine_rate(out)
    out["work_rows"] = delta["rows_in"]
    return out


# ---------------------------------------------------------------- ingest
def link_tree(src: Path, dst: Path, only: tuple[str, ...]) -> None:
    """Hard links (a copy across file systems) of the files under ``src``'s ``only`` entries into ``dst``: store
    outputs are never written again, so a link shares them safely."""
    for part in only:
        top = Path(src) / part
        for p in [top] if top.is_file() else sorted(q for q in top.rglob("*") if q.is_file()):
            t = Path(dst) / p.relative_to(src)
            t.parent.mkdir(parents=True, exist_ok=True)
            try:
                os.link(p, t)
            except OSError:
                shutil.copy2(p, t)


def _new_rows(f: Path, new: set[str]):
    """The rows of the quarantine file ``f`` that come from the ``new`` export files (absolute paths)."""
    from urllib.parse import unquote, urlparse

    import pyarrow.parquet as pq

    t = pq.read_table(f, partitioning=None)
    keep = [unquote(urlparse(u).path) in new for u in t.column("_source_file").to_pylist()]
    return t.filter(keep) if any(keep) else None


def merge_lake(inc: Increment, delta: Path, out: Path, new: set[str], new_end: datetime) -> None:
    """``out``: the base's lake and quarantine (linked) with what ``delta`` (the new files, and the base files with
    rows on a late day) adds: the new days' and the late days' KPI partitions whole (a late day's replace the
    base's), the new files' alarms, and of the other quarantined KPI rows those of the ``new`` files."""
    import pyarrow.parquet as pq

    late = {f"date={d}" for d in inc.late_days}
    first, last = f"date={inc.new_start.date().isoformat()}", f"date={new_end.date().isoformat()}"
    kept = [
        f.relative_to(inc.base_ingest).as_posix()
        for part in LAKE_PARTS
        for f in sorted((inc.base_ingest / part).rglob("*"))
        if f.is_file() and not (part.endswith("kpi") and f.relative_to(inc.base_ingest / part).parts[0] in late)
    ]
    link_tree(inc.base_ingest, out, (*kept, "topology.json"))
    for part in LAKE_PARTS:
        for f in sorted((delta / part).rglob("*.parquet")):
            rel = f.relative_to(delta / part)
            if len(rel.parts) == 1:  # an empty dataset's placeholder file (nothing written)
                continue
            t = out / part / rel
            t.parent.mkdir(parents=True, exist_ok=True)
            t = t.with_name(f"increment-{t.name}") if t.exists() else t
            if part.endswith("alarms") or rel.parts[0] in late or first <= rel.parts[0] < last:
                os.replace(f, t)
            elif part == "quarantine/kpi" and (rows := _new_rows(f, new)) is not None:
                pq.write_table(rows, t, compression="zstd")
        dates = [d for d in (out / part).glob("*=*") if d.is_dir()]
        for f in (out / part).glob("*.parquet"):  # a placeholder beside partitions holds no rows: dropped
            if dates and pq.ParquetFile(f).metadata.num_rows == 0:
                f.unlink()
    shutil.rmtree(delta)


def _reason_counts(path: Path, reasons: list[str]) -> dict[str, int]:
    import pyarrow.compute as pc
    import pyarrow.dataset as ds

    if not any(Path(path).rglob("*.parquet")):
        return dict.fromkeys(reasons, 0)
    t = ds.dataset(path, format="parquet", partitioning="hive").to_table(columns=reasons)
    return {r: int(pc.sum(t.column(r).cast("int64")).as_py() or 0) for r in reasons}


def merge_ingest(
    base: dict[str, Any], delta: dict[str, Any], out: Path, window: dict[str, str], rows: dict[str, int]
) -> dict[str, Any]:
    """The ingest manifest body of the merged lake in ``out``, counted from its files (lake rows from the Parquet
    footers, quarantine reasons from its columns); every source's rows must be ``rows`` (validation's count of
    the base's and the new files' rows): none lost, none twice."""
    from tasks.core.errors import InvariantBroken
    from tasks.core.stages.ingest import FILE_DAYS, _parquet_facts

    body, sources = dict(delta), {}
    for name, d in delta["sources"].items():
        lake, quarantine = _parquet_facts(out / name), _parquet_facts(out / "quarantine" / name)
        if lake["rows"] + quarantine["rows"] != rows[name]:
            raise InvariantBroken(
                f"ingest of new days: {name} holds {lake['rows']} lake + {quarantine['rows']} quarantined rows, "
                f"validation counted {rows[name]} rows in the exports"
            )
        sources[name] = {
            **d,
            "rows_in": rows[name],
            "rows_out": lake["rows"],
            "rows_quarantined": quarantine["rows"],
            "quarantine_by_reason": _reason_counts(out / "quarantine" / name, list(d["quarantine_by_reason"])),
            FILE_DAYS: {**base["sources"][name][FILE_DAYS], **d[FILE_DAYS]},
            "parquet": lake,
        }
    body["sources"] = sources
    for k in ("rows_in", "rows_out", "rows_quarantined"):
        body[k] = sum(s[k] for s in sources.values())
    body["window"], body["work_rows"] = window, delta["rows_in"]
    return body


# ---------------------------------------------------------------- features
def first_day_to_recompute(inc: Increment, horizon_minutes: int) -> str:
    """The lake's ``date=`` name of the earliest day whose features the new rows can change: a KPI row changes its
    own time on (rolling windows look back, neighbours at the same time), an alarm the times from ``horizon_minutes``
    before it on (a label looks that far ahead; alarm counts and minutes since an alarm look back)."""
    at = [inc.new_start]
    at += [datetime.fromisoformat(inc.first_kpi)] if inc.first_kpi else []
    at += [datetime.fromisoformat(inc.first_alarm) - timedelta(minutes=horizon_minutes)] if inc.first_alarm else []
    return f"date={min(at).date().isoformat()}"
