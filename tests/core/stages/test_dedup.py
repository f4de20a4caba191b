"""Dedup never loses a clean row: a dirty re-send of a clean sample never displaces it."""

from __future__ import annotations

import csv

import pandas as pd
import pytest

from tasks.core.config import load_config
from tasks.core.stages.ingest import run_ingest
from tasks.core.stages.raw import discover
from tasks.core.stages.simulate import simulate

pytestmark = pytest.mark.spark


def _dirty_copies(row: list[str]) -> dict[str, str]:
    """Dirty re-sends of one clean CSV row (timestamp, element_id, cpu_util, ...), each breaking one rule."""
    ts, el, cpu, mem, temp, traffic, lat, loss, err = row
    return {
        "null": ",".join([ts, el, "", mem, temp, traffic, lat, loss, err]),
        "out_of_range": ",".join([ts, el, "180.5", mem, temp, traffic, lat, loss, err]),
        "malformed_token": ",".join([ts, el, cpu, mem, temp, traffic, "n/a#", loss, err]),
        "truncated": ",".join([ts, el, cpu, mem]),
        # an embedded newline splits the row into two broken lines; the first still parses the key
        "embedded_newline": ",".join([ts, el, cpu, f'"{mem}\n{mem}"', temp, traffic, lat, loss, err]),
    }


def _clean_rows(path) -> dict[tuple[str, str], list[str]]:
    with open(path, newline="") as f:
        rows = list(csv.reader(f))[1:]
    return {(r[0], r[1]): r for r in rows if len(r) == 9}


def test_dirty_resends_never_displace_clean_samples(spark, tmp_path):
    raw = tmp_path / "raw"
    simulate("topozoo/Abilene", 2, 5, raw, dirt=0.05)  # the simulator's own dirt kinds mixed in
    day1, day2 = sorted((raw / "kpi").glob("kpi_*.csv"))
    dirt = pd.concat(pd.read_csv(p, dtype=str, keep_default_na=False) for p in sorted((raw / "dirt").glob("*.csv")))
    touched = set(zip(dirt["timestamp"], dirt["element_id"]))
    candidates = [(k, r) for k, r in _clean_rows(day1).items() if k not in touched]
    picks = candidates[:: max(1, len(candidates) // 12)][:10]
    assert len(picks) == 10
    same_day = [(k, r) for k, r in _clean_rows(day2).items() if k not in touched][:4]
    extra: list[str] = []
    for i, (_, row) in enumerate(picks):  # re-sent dirty, in a later export file
        copies = list(_dirty_copies(row).values())
        extra.append(copies[i % len(copies)])
    with open(day2, "a", newline="") as f:
        f.write("\n".join(extra) + "\n")
        for i, (_, row) in enumerate(same_day):  # re-sent dirty later in the same file
            copies = list(_dirty_copies(row).values())
            f.write(copies[(i + 1) % len(copies)] + "\n")

    lake = tmp_path / "lake"
    lake.mkdir()
    res = run_ingest(spark, discover(raw), lake, load_config("local").ingest)
    kpi = pd.read_parquet(lake / "kpi")
    keys = set(zip(kpi["timestamp"].dt.strftime("%Y-%m-%dT%H:%M:%SZ"), kpi["element_id"]))
    # every clean sample's key is in the lake with its clean values, beyond the row-count identity
    for key, row in picks + same_day:
        assert key in keys, f"clean sample {key} lost to a dirty re-send"
        got = kpi[(kpi["element_id"] == key[1]) & (kpi["timestamp"].dt.strftime("%Y-%m-%dT%H:%M:%SZ") == key[0])]
        assert len(got) == 1 and got["cpu_util"].iloc[0] == pytest.approx(float(row[2]))
    # the lake holds exactly the keys that have at least one clean copy: all 11 x 288 x 2 samples but those
    # whose only copy the simulator made dirty (nulls, out of range, malformed)
    only_dirty = dirt[dirt["kind"].isin(["null", "out_of_range", "malformed"])]
    lost = set(zip(only_dirty["timestamp"], only_dirty["element_id"]))
    assert keys == {k for k in _all_keys(raw) if k not in lost}
    s = res["sources"]["kpi"]
    assert s["rows_in"] == s["rows_out"] + s["rows_quarantined"]
    q = pd.read_parquet(lake / "quarantine" / "kpi")
    dup = q[q["duplicate"]]
    assert not set(zip(dup["timestamp"].dt.strftime("%Y-%m-%dT%H:%M:%SZ"), dup["element_id"])) & {
        k for k, _ in picks + same_day
    }, "a clean original was quarantined as a duplicate of a dirty copy"


def _all_keys(raw) -> set[tuple[str, str]]:
    import json

    truth = json.loads((raw / "ground_truth.json").read_text())
    topo = json.loads((raw / "topology.json").read_text())
    ts = pd.date_range(truth["start"], periods=288 * truth["days"], freq="5min", tz="UTC")
    return {(t.strftime("%Y-%m-%dT%H:%M:%SZ"), e["element_id"]) for t in ts for e in topo["elements"]}


def test_file_numbers_keep_the_file_order_and_give_the_uri_back(spark, tiny_raw):
    """The ingest carries a row's export file as a number (number_files): ranked in the same order as the URIs it
    replaces, each number gives its row's URI back, and a row from a file outside the listing fails loudly."""
    from pyspark.sql import functions as F

    from tasks.core.stages.ingest import FILE_NO, number_files
    from tasks.core.stages.readers import read_kpi

    df = read_kpi(spark, discover(tiny_raw))
    numbered, uris = number_files(df.withColumn("_uri", F.col("_source_file")))
    assert "_source_file" not in numbered.columns
    plan = numbered._jdf.queryExecution().optimizedPlan().toString()
    assert "xxhash64(file:" not in plan  # the listed files' hashes are folded into a literal map, not hashed a row
    # the guard is a conditional: the RAPIDS Accelerator evaluates a coalesce's raise_error for the whole batch
    # (a coalesce guard fails every KPI batch under the plugin)
    assert plan.count("raise_error(") == plan.count("THEN cast(raise_error(") == 1
    got = numbered.select(FILE_NO, "_uri", F.element_at(uris, F.col(FILE_NO)).alias("back")).distinct().collect()
    assert len(got) == len(discover(tiny_raw).kpi_files) > 1
    assert all(r["back"] == r["_uri"] for r in got)  # the quarantine's _source_file is the URI Spark read
    assert [r["_uri"] for r in sorted(got, key=lambda r: r[FILE_NO])] == sorted(r["_uri"] for r in got)

    stray, _ = number_files(df.withColumn("_source_file", F.lit("file:///elsewhere/kpi_2026-01-09.csv")))
    with pytest.raises(Exception, match="not in the input's listing: file:///elsewhere/kpi_2026-01-09.csv"):
        stray.agg(F.max(FILE_NO)).collect()
