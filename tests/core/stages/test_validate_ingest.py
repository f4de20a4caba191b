"""GX validation and Spark ingest against the simulator's ledger of injected dirt."""

import csv
import json
from collections import Counter
from pathlib import Path

import pandas as pd
import pytest

from tasks.core.config import load_config
from tasks.core.datadocs import assets_dir, vendor_site
from tasks.core.stages.ingest import run_ingest
from tasks.core.stages.raw import discover
from tasks.core.stages.simulate import simulate
from tasks.core.stages.validate import DATA_DOCS, expectation_rows, expectations_markdown, run_validation

pytestmark = pytest.mark.spark

REASON = {
    "alarm_malformed": "malformed",
    "alarm_bad_severity": "not_in_set_severity",
    "malformed": "malformed",
    "duplicate": "duplicate",
}


def _expected(raw) -> Counter:
    out = Counter()
    for p in sorted((raw / "dirt").glob("*.csv")):
        for r in csv.DictReader(open(p)):
            if r["kind"] == "out_of_order":
                continue  # not bad: it must be ingested, at its own timestamp
            reason = REASON.get(r["kind"]) or f"{'null' if r['kind'] == 'null' else 'out_of_range'}_{r['column']}"
            if reason == "malformed":  # identified by the raw line itself, as Spark captured it
                line = (raw / r["file"]).read_text().splitlines()[int(r["line"]) - 1]
                out[(r["source"], reason, line)] += 1
            else:
                out[(r["source"], reason, r["element_id"], r["timestamp"])] += 1
    return out


def _quarantined(lake, source: str) -> Counter:
    q = pd.read_parquet(lake / "quarantine" / source)
    out = Counter()
    for row in q.to_dict("records"):
        if row["malformed"]:
            out[(source, row["reasons"], row["_corrupt_record"])] += 1
        else:
            ts = row["timestamp"].strftime("%Y-%m-%dT%H:%M:%SZ")
            out[(source, row["reasons"], row["element_id"], ts)] += 1
    return out


@pytest.mark.parametrize("dirt", [0.001, 0.01, 0.1])
def test_every_injected_row_quarantined_with_its_reason(spark, tmp_path, dirt):
    raw = tmp_path / "raw"
    simulate("topozoo/Abilene", 2, 21, raw, dirt=dirt)
    layout = discover(raw)
    (tmp_path / "v").mkdir()
    validation = run_validation(spark, layout, tmp_path / "v", build_docs=False)
    truth = pd.read_json(raw / "ground_truth.json", typ="series")
    assert validation["violations"]["kpi"]["malformed"] == truth["dirt_rows"]["malformed"]
    lake = tmp_path / "lake"
    lake.mkdir()
    res = run_ingest(spark, layout, lake, load_config("local").ingest)
    for source in ("kpi", "alarms"):
        s = res["sources"][source]
        assert s["rows_in"] == s["rows_out"] + s["rows_quarantined"]
    expected = _expected(raw)
    got = _quarantined(lake, "kpi") + _quarantined(lake, "alarms")
    missing, extra = expected - got, got - expected
    assert not missing and not extra, f"missing {list(missing.items())[:5]} extra {list(extra.items())[:5]}"
    # out-of-order and late rows are in the lake, under their own date
    kpi = pd.read_parquet(lake / "kpi")
    bad_samples = sum(v for k, v in expected.items() if k[0] == "kpi" and k[1] != "duplicate")
    assert len(kpi) == 11 * 288 * 2 - bad_samples
    assert not kpi.duplicated(["element_id", "timestamp"]).any()
    assert (kpi["timestamp"].dt.strftime("%Y-%m-%d") == kpi["date"].astype(str)).all()


def test_validation_reports_gx_results_and_docs(spark, tiny_raw, tmp_path):
    summary = run_validation(spark, discover(tiny_raw), tmp_path, build_docs=True)
    assert summary["gx_success"]["topology"] is True
    assert summary["gx_success"]["kpi_rows"] is False  # dirt was injected
    names = {e["expectation"] for e in summary["expectations"]["kpi_rows"]}
    assert {
        "expect_column_values_to_not_be_null",
        "expect_column_values_to_be_between",
        "expect_column_values_to_be_in_set",
        "expect_compound_columns_to_be_unique",
    } <= names
    assert summary["data_docs"].endswith("index.html")
    assert (tmp_path / "validation_result.json").stat().st_size > 1000
    # every script, style and font GX's pages load from CDNs now comes from the site itself
    assert assets_dir(), "the Data Docs assets are not installed in this environment: run `make setup`"
    docs = vendor_site((tmp_path / DATA_DOCS).parent)
    assert docs["offline"] and docs["pages"] >= 6, docs["external"]
    assert "jquery@3.7.1/dist/jquery.min.js" in docs["vendored"]


def test_tolerated_dirt_passes_gx_with_the_same_counts(spark, tiny_raw, tmp_path):
    """mostly = 1 - validate.max_quarantine_rate: GX passes the injected dirt the pipeline quarantines, and still
    counts every bad row, as Spark's rule predicates do."""
    strict = run_validation(spark, discover(tiny_raw), tmp_path / "strict", build_docs=False)
    tolerant = run_validation(spark, discover(tiny_raw), tmp_path / "tolerant", build_docs=False, mostly=0.8)
    assert not all(strict["gx_success"].values())
    assert all(tolerant["gx_success"].values()), tolerant["gx_success"]
    assert tolerant["gx_mostly"] == 0.8 and tolerant["violations"] == strict["violations"]

    def counts(s):
        return {k: [e["unexpected_count"] for e in v] for k, v in s["expectations"].items()}

    assert counts(tolerant) == counts(strict)
    # the counts are GX's; Spark's predicates, which count where GX leaves a count out, find the same
    from tasks.core.stages.readers import read_alarms, read_kpi
    from tasks.core.stages.rules import alarm_rules, kpi_rules
    from tasks.core.stages.validate import _spark_counts

    layout = discover(tiny_raw)
    ids, span = list(layout.topology().element_ids), (layout.start, layout.end)
    kpi, alarms = read_kpi(spark, layout).cache(), read_alarms(spark, layout).cache()  # as validation holds them:
    # a CSV read that prunes every column but the corrupt record's parses nothing, so it finds no malformed line
    results = json.loads(Path(strict["result_json"]).read_text())  # and checks them against GX's, rule for rule
    assert _spark_counts(kpi, "kpi", kpi_rules(ids, *span), results) == strict["violations"]["kpi"]
    assert _spark_counts(alarms, "alarms", alarm_rules(ids, *span), results) == strict["violations"]["alarms"]
    kpi.unpersist(), alarms.unpersist()
    md = expectations_markdown(strict)
    assert "| kpi_rows | **no** |" in md and "| topology | yes |" in md
    assert "expect_column_values_to_be_between" in md and "at least 100% of rows" in md
    assert "| kpi_rows | **no** |" not in expectations_markdown(tolerant)


def test_expectation_rows_list_only_what_found_bad_rows():
    exps = {
        "kpi_rows": [
            {"expectation": "e1", "column": "cpu", "reason": "range", "success": True, "unexpected_count": 4},
            {"expectation": "e2", "column": "mem", "reason": "range", "success": True, "unexpected_count": 0},
            {"expectation": "e3", "column": ["a", "b"], "reason": None, "success": False, "unexpected_count": 2},
        ],
        "topology": [{"expectation": "e4", "column": "x", "reason": None, "success": True, "unexpected_count": 0}],
    }
    rows = expectation_rows(exps)
    assert [(r["expectation"], r["column"], r["unexpected"], r["passed"]) for r in rows] == [
        ("e1", "cpu", 4, True),
        ("e3", "a, b", 2, False),
    ]
    md = expectations_markdown({"gx_success": {"kpi_rows": False}, "expectations": exps, "gx_mostly": 0.8})
    assert "at least 80% of rows" in md and "| kpi_rows | e3 | a, b |  | 2 | **no** |" in md
    clean = {"gx_success": {"topology": True}, "expectations": {"topology": exps["topology"]}}
    assert "No expectation found a bad row." in expectations_markdown(clean)


def test_ingest_output_typed_and_partitioned(spark, tiny_raw, tmp_path):
    res = run_ingest(spark, discover(tiny_raw), tmp_path, load_config("local").ingest)
    parts = sorted(p.name for p in (tmp_path / "kpi").iterdir() if p.is_dir())
    assert parts == ["date=2026-01-05", "date=2026-01-06", "date=2026-01-07"]
    df = pd.read_parquet(tmp_path / "kpi")
    assert str(df["timestamp"].dtype).startswith("datetime64") and df["cpu_util"].dtype == "float64"
    assert df["if_errors"].dtype == "int64"
    assert res["sources"]["kpi"]["parquet"]["row_groups"] >= 3
    parts = [f"{s}_{p}" for s in ("kpi", "alarms") for p in ("count", "quarantine", "lake", "footers")]
    assert list(res["timings_s"]) == parts and all(
        v >= 0 for v in res["timings_s"].values()
    )  # where ingest's time goes
    assert "timings_s" not in res["sources"]["kpi"]


def test_raw_changed_between_validation_and_ingest_is_rejected_not_cached(spark, tmp_path):
    """A day re-sent (or an exporter still writing) after validation fails ingest with exit 2
    naming the file; nothing is published under the old bytes' fingerprint; the rerun validates the new bytes."""
    import shutil

    from tasks.core.errors import DataRejected
    from tasks.core.runtime import resolve_runtime
    from tasks.ingest import ingest_task
    from tasks.validate import validate_task

    raw = tmp_path / "raw"
    simulate("topozoo/Abilene", 1, 5, raw, dirt=0.0)
    cfg = load_config("local", [f"paths.root={tmp_path / 'store'}", "validate.build_data_docs=false"])
    root = tmp_path / "store"
    rt = resolve_runtime(cfg, root)
    validation = validate_task.fn(str(raw), cfg.validate_, rt, root)
    assert validation["raw_files"] and validation.inputs["raw"] == discover(raw).fingerprint()
    day = sorted((raw / "kpi").glob("*.csv"))[0]
    lines = day.read_text().splitlines(keepends=True)
    day.write_text("".join(lines) + lines[-1])  # the exporter appended one more row after validation
    with pytest.raises(DataRejected, match=r"input changed during the run \(kpi/kpi_") as err:
        ingest_task.fn(str(raw), validation, cfg.ingest, rt, root)
    assert err.value.file == str(day)
    assert list((root / "ingest").glob("*")) == []  # neither a published lake nor a staging directory
    again = validate_task.fn(str(raw), cfg.validate_, rt, root)  # the rerun fingerprints and counts the new bytes
    assert again.fingerprint != validation.fingerprint and again["rows_in"] == validation["rows_in"] + 1
    lake = ingest_task.fn(str(raw), again, cfg.ingest, rt, root)
    assert lake["rows_in"] == again["rows_in"]
    shutil.rmtree(root)


def test_a_large_value_set_is_checked_on_its_derived_column_with_the_same_counts(
    spark, tiny_raw, tmp_path, monkeypatch
):
    """The topology's elements (3,815 on backbone/world) are checked by GX on ``element_id_in_set``, one SQL IN
    expression, instead of GX's own set check (a Py4J call per value): the same rows counted, nulls skipped alike."""
    import shutil

    from tasks.core.stages import rules

    raw = tmp_path / "raw"
    shutil.copytree(tiny_raw, raw)
    kpi = sorted((raw / "kpi").glob("*.csv"))[0]
    lines = kpi.read_text().splitlines()
    fields = lines[1].split(",")
    fields[1] = "no-such-element"  # a row from an element the topology does not have
    kpi.write_text("\n".join([*lines, ",".join(fields)]) + "\n")
    plain = run_validation(spark, discover(raw), tmp_path / "plain", build_docs=False)
    monkeypatch.setattr(rules, "LARGE_SET", 4)  # the 11 elements now count as a large set
    derived = run_validation(spark, discover(raw), tmp_path / "derived", build_docs=False)
    assert derived["violations"] == plain["violations"]
    assert derived["violations"]["kpi"]["not_in_set_element_id"] == 1
    got = {e["column"]: e for e in derived["expectations"]["kpi_rows"] if e["reason"] == "not_in_set_element_id"}
    assert list(got) == ["element_id_in_set"] and got["element_id_in_set"]["unexpected_count"] == 1
