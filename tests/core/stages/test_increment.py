"""An increment's logic without engines: finding the base run, the days to recompute, merging lakes and figures."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.parquet as pq
import pytest

from tasks.core.stages.increment import (
    Increment,
    find_base,
    first_day_to_recompute,
    merge_ingest,
    merge_lake,
    merge_validation,
)
from tasks.core.store import MANIFEST

OLD = {"topology.json": "t0", "kpi/kpi_2026-01-05.csv": "k5", "alarms/alarms_2026-01-05.jsonl": "a5"}
NEW = {"kpi/kpi_2026-01-06.csv": "k6", "alarms/alarms_2026-01-06.jsonl": "a6"}
WINDOW = {"start": "2026-01-05T00:00:00+00:00", "end": "2026-01-06T00:00:00+00:00"}


def _store(root: Path, raw: Path, outputs: bool = True) -> None:
    v = root / "validate" / "v1"
    v.mkdir(parents=True)
    manifest = {
        "raw_dir": str(raw.resolve()),
        "raw_digests": OLD,
        "window": WINDOW,
        "input_fingerprints": {"raw": "r1"},
    }
    (v / MANIFEST).write_text(json.dumps(manifest))
    for stage, fp in (("ingest", "i1"), ("features", "f1")):
        if outputs:
            (root / stage / fp).mkdir(parents=True)
            (root / stage / fp / MANIFEST).write_text("{}")


def _chain(raw_fp: str) -> tuple[str, str, str]:
    return ("v1", "i1", "f1") if raw_fp == "r1" else ("x", "y", "z")


@pytest.mark.parametrize(
    "now, outputs, why",
    [
        (OLD, True, "no earlier run"),  # the same files: nothing new to extend by
        ({**OLD, "kpi/kpi_2026-01-05.csv": "changed", **NEW}, True, "changed or went"),
        ({**OLD, "kpi/kpi_2026-01-04.csv": "k4", **NEW}, True, "backfill"),
        ({**OLD, "kpi/kpi_2026-01-06.csv": "k6"}, True, "lack a KPI or an alarm export"),
        ({**OLD, **NEW}, False, "another configuration or code version"),
    ],
)
def test_no_increment_is_taken_where_it_would_not_be_exact(tmp_path, now, outputs, why):
    _store(tmp_path / "store", tmp_path / "raw", outputs)
    inc, reason = find_base(tmp_path / "store", tmp_path / "raw", lambda: now, _chain)
    assert inc is None and why in reason, reason


def test_a_rerun_over_the_same_files_reads_none_of_them(tmp_path):
    _store(tmp_path / "store", tmp_path / "raw")
    m = tmp_path / "store" / "validate" / "v1" / MANIFEST
    m.write_text(json.dumps({**json.loads(m.read_text()), "raw_files": {"kpi/kpi_2026-01-05.csv": [10, 1]}}))

    def digests():
        raise AssertionError("a file was hashed")

    inc, why = find_base(tmp_path / "store", tmp_path / "raw", digests, _chain, {"kpi/kpi_2026-01-05.csv": [10, 1]})
    assert inc is None and "nothing new" in why


def test_the_base_is_found_with_the_new_days_files(tmp_path):
    _store(tmp_path / "store", tmp_path / "raw")
    inc, why = find_base(tmp_path / "store", tmp_path / "raw", lambda: {**OLD, **NEW}, _chain)
    assert why == "" and inc.new_files == tuple(sorted(NEW))
    assert inc.base_ingest == tmp_path / "store" / "ingest" / "i1"
    assert inc.new_start == datetime(2026, 1, 6, tzinfo=UTC) and inc.old_end == inc.new_start
    # validation's findings ride along; another base's description is not taken
    found = {**inc.describe(), "late_days": ["2026-01-05"], "first_kpi": "2026-01-05T23:55:00+00:00"}
    assert inc.taken(found).late_days == ("2026-01-05",) and inc.taken({**found, "base": "v2"}) is None
    root = tmp_path / "raw"
    again = inc.taken(found).ingest_files(root, {str(root / "kpi/kpi_2026-01-05.csv"): ["2026-01-05"]})
    assert again == {*NEW, "kpi/kpi_2026-01-05.csv"}  # a late day's lake is recomputed from all its files


def _inc(tmp_path, **kw) -> Increment:
    base = tmp_path / "base"
    return Increment(
        base, base, base, tuple(NEW), datetime(2026, 1, 5, tzinfo=UTC), datetime(2026, 1, 6, tzinfo=UTC), **kw
    )


def test_features_recompute_from_a_late_row_or_a_horizon_before_a_new_alarm(tmp_path):
    assert first_day_to_recompute(_inc(tmp_path), 60) == "date=2026-01-06"
    late = _inc(tmp_path, first_kpi="2026-01-05T00:30:00+00:00")
    assert first_day_to_recompute(late, 60) == "date=2026-01-05"  # a KPI row changes its own time on
    alarm = _inc(tmp_path, first_alarm="2026-01-06T00:30:00+00:00")
    assert first_day_to_recompute(alarm, 60) == "date=2026-01-05"  # a label looks an hour ahead
    assert first_day_to_recompute(alarm, 20) == "date=2026-01-06"


def _write(path: Path, rows: list[dict]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_pylist(rows), path)


def _rows(path: Path) -> list[tuple]:
    t = ds.dataset(path, format="parquet", partitioning="hive").to_table().to_pylist()
    return sorted(tuple(sorted((k, str(v)) for k, v in r.items())) for r in t)


def test_the_lake_merge_keeps_the_base_replaces_late_days_and_adds_only_new_rows(tmp_path):
    base, delta, out = tmp_path / "base", tmp_path / "delta", tmp_path / "out"
    old, new = "file:///raw/kpi/kpi_2026-01-05.csv", "file:///raw/kpi/kpi_2026-01-06.csv"
    _write(base / "kpi/date=2026-01-04/p.parquet", [{"v": 4}])
    _write(base / "kpi/date=2026-01-05/p.parquet", [{"v": 5}])
    _write(base / "quarantine/kpi/date=2026-01-05/p.parquet", [{"v": 50, "_source_file": old}])
    _write(base / "quarantine/kpi/date=unknown/p.parquet", [{"v": -1, "_source_file": old}])
    _write(base / "alarms/date=2026-01-05/p.parquet", [{"a": "x"}])
    (base / "topology.json").write_text("{}")
    # the delta read the new file and the base's file with rows of the late day 2026-01-05
    _write(delta / "kpi/date=2026-01-04/d.parquet", [{"v": 4}])  # the re-read file's other day: the base's
    _write(delta / "kpi/date=2026-01-05/d.parquet", [{"v": 5}, {"v": 55}])  # the late day, recomputed whole
    _write(delta / "kpi/date=2026-01-06/d.parquet", [{"v": 6}])
    _write(delta / "quarantine/kpi/date=2026-01-05/d.parquet", [{"v": 50, "_source_file": old}])
    _write(
        delta / "quarantine/kpi/date=unknown/d.parquet",
        [{"v": -1, "_source_file": old}, {"v": -2, "_source_file": new}],
    )
    _write(delta / "alarms/date=2026-01-05/d.parquet", [{"a": "late"}])
    inc = _inc(tmp_path, late_days=("2026-01-05",))
    merge_lake(inc, delta, out, {"/raw/kpi/kpi_2026-01-06.csv"}, datetime(2026, 1, 7, tzinfo=UTC))
    assert [r[0][1] for r in _rows(out / "kpi")] == ["2026-01-04", "2026-01-05", "2026-01-05", "2026-01-06"]
    assert sorted(dict(r)["v"] for r in _rows(out / "kpi")) == ["4", "5", "55", "6"]
    assert sorted(dict(r)["v"] for r in _rows(out / "quarantine/kpi")) == ["-1", "-2", "50"]
    assert sorted(dict(r)["a"] for r in _rows(out / "alarms")) == ["late", "x"]
    assert (out / "topology.json").is_file() and not delta.exists()
    assert (out / "kpi/date=2026-01-04/p.parquet").stat().st_ino == (
        base / "kpi/date=2026-01-04/p.parquet"
    ).stat().st_ino


def test_merged_counts_must_account_for_every_row_validation_counted(tmp_path):
    out = tmp_path / "out"
    _write(out / "kpi/date=2026-01-05/p.parquet", [{"v": 1}, {"v": 2}])
    _write(out / "quarantine/kpi/date=2026-01-05/p.parquet", [{"v": 3, "malformed": False, "duplicate": True}])
    source = {"quarantine_by_reason": {"malformed": 0, "duplicate": 1}, "file_days": {"b": ["2026-01-06"]}}
    base = {"sources": {"kpi": {"file_days": {"a": ["2026-01-05"]}}}}
    delta = {"sources": {"kpi": source}, "rows_in": 1}
    body = merge_ingest(base, delta, out, WINDOW, {"kpi": 3})
    kpi = body["sources"]["kpi"]
    assert (kpi["rows_in"], kpi["rows_out"], kpi["rows_quarantined"]) == (3, 2, 1) and body["work_rows"] == 1
    assert kpi["quarantine_by_reason"] == {"malformed": 0, "duplicate": 1} and set(kpi["file_days"]) == {"a", "b"}
    with pytest.raises(Exception, match="validation counted 4 rows"):
        merge_ingest(base, delta, out, WINDOW, {"kpi": 4})


def test_merged_validation_adds_counts_and_passes_where_both_passed():
    exp = {"expectation": "e", "column": "c", "reason": "range", "success": True, "unexpected_count": 2}
    base = {
        "rows": {"kpi": 10}, "violations": {"kpi": {"range": 2}}, "expectations": {"kpi_rows": [exp]},
        "gx_success": {"kpi_rows": True}, "topology_ok": True, "files": {"kpi_files": 1, "elements": 3}, "rows_in": 10,
    }  # fmt: skip
    delta = {
        **base, "rows": {"kpi": 5}, "violations": {"kpi": {"range": 1}}, "rows_in": 5,
        "expectations": {"kpi_rows": [{**exp, "success": False, "unexpected_count": 1}]},
        "gx_success": {"kpi_rows": False},
    }  # fmt: skip
    out = merge_validation(base, delta, WINDOW)
    assert out["rows"] == {"kpi": 15} and out["violations"] == {"kpi": {"range": 3}} and out["rows_in"] == 15
    assert out["expectations"]["kpi_rows"][0]["unexpected_count"] == 3 and not out["gx_success"]["kpi_rows"]
    assert out["files"] == {"kpi_files": 2, "elements": 3} and out["quarantine_rate"] == pytest.approx(3 / 15)
    assert out["work_rows"] == 5 and out["window"] == WINDOW
