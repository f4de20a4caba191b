"""The KPI shuffle by day on the CPU: a partition per (day, element bucket), every copy of a key in one, and the
same lake and quarantine as the general path, counted by the write's own observation."""

from __future__ import annotations

from datetime import UTC, datetime

import pandas as pd
import pyarrow.parquet as pq
import pytest

from tasks.core.config import load_config
from tasks.core.stages.ingest import SLOT, by_day, run_ingest
from tasks.core.stages.raw import discover
from tasks.core.stages.simulate import simulate

pytestmark = pytest.mark.spark

SPAN = (datetime(2026, 1, 5, tzinfo=UTC), datetime(2026, 1, 8, tzinfo=UTC))  # 3 days


def _rows() -> list[tuple]:
    """Samples of 7 elements over the 3 days, copies of some keys, a day before the span and a row with no time."""
    rows = [
        (f"2026-01-0{d} {h:02d}:00:00", f"NE-{e}", float(h)) for d in (5, 6, 7) for h in (0, 11, 23) for e in range(7)
    ]
    rows += [("2026-01-06 11:00:00", "NE-3", 99.0), ("2026-01-07 23:00:00", "NE-6", 98.0)]  # copies
    rows += [("2026-01-01 00:00:00", "NE-1", 1.0), ("2026-01-01 00:00:00", "NE-1", 2.0), (None, "NE-2", 3.0)]
    return rows


def test_each_day_and_bucket_gets_a_partition_of_its_own(spark):
    from pyspark.sql import functions as F

    df = spark.createDataFrame(_rows(), "ts string, element_id string, v double")
    df = df.withColumn("timestamp", F.to_timestamp("ts")).withColumn("_day", F.to_date("timestamp"))
    out, cluster = by_day(df, SPAN, partitions=6)
    assert cluster == ("_day", SLOT)
    assert out.rdd.getNumPartitions() == 6  # 3 days x 2 buckets
    got = out.withColumn("pid", F.spark_partition_id()).toPandas()
    inside = got[got["_day"].notna() & (got["timestamp"] >= pd.Timestamp("2026-01-05"))]
    # each (day, bucket) in one partition and each partition holds one (day, bucket): no two days share a task
    assert (inside.groupby(["_day", SLOT])["pid"].nunique() == 1).all()
    assert (inside.groupby("pid")["_day"].nunique() == 1).all()
    assert sorted(inside["pid"].unique()) == list(range(6))
    # every copy of a key in one partition, inside the span or not (the window rule quarantines those after)
    keys = got.assign(ts=got["ts"].fillna("none")).groupby(["ts", "element_id"])["pid"].nunique()
    assert (keys == 1).all()
    assert len(got) == len(_rows())


def _lake(path) -> pd.DataFrame:
    return pd.read_parquet(path).assign(date=lambda d: d["date"].astype(str))


def _sorted(df: pd.DataFrame, cols: list[str]) -> pd.DataFrame:
    return df.sort_values(cols, na_position="first").reset_index(drop=True)


def test_buckets_keep_the_lake_quarantine_and_counts_of_the_general_path(spark, tmp_path):
    raw = tmp_path / "raw"
    simulate("topozoo/Abilene", 2, 11, raw, dirt=0.05)
    layout = discover(raw)
    runs = {}
    for name, sets in {"by-day": ["ingest.shuffle_partitions=8"], "general": ["ingest.dedup_by_day=false"]}.items():
        (tmp_path / name).mkdir()
        runs[name] = run_ingest(spark, layout, tmp_path / name, load_config("local", sets).ingest)
    by_day_kpi, general = runs["by-day"]["sources"]["kpi"], runs["general"]["sources"]["kpi"]
    assert by_day_kpi["rows_quarantined"] > 0 and by_day_kpi["quarantine_by_reason"]["duplicate"] > 0
    for k in ("rows_in", "rows_out", "rows_quarantined", "quarantine_by_reason", "schema"):
        assert by_day_kpi[k] == general[k], k
    key = ["date", "element_id", "timestamp"]
    pd.testing.assert_frame_equal(
        _sorted(_lake(tmp_path / "by-day" / "kpi"), key), _sorted(_lake(tmp_path / "general" / "kpi"), key)
    )
    qkey = [*key, "_corrupt_record", "_source_file", "reasons", "cpu_util"]
    pd.testing.assert_frame_equal(
        _sorted(_lake(tmp_path / "by-day" / "quarantine" / "kpi"), qkey),
        _sorted(_lake(tmp_path / "general" / "quarantine" / "kpi"), qkey),
    )
    # 8 partitions over 2 days: 4 buckets a day, each written by its own task, each file in element and time order
    for day in sorted((tmp_path / "by-day" / "kpi").glob("date=*")):
        files = sorted(day.glob("*.parquet"))
        assert len(files) == 4, day
        for f in files:
            t = pq.read_table(f, columns=["element_id", "timestamp"]).to_pandas()
            assert t.equals(t.sort_values(["element_id", "timestamp"]).reset_index(drop=True)), f
        assert SLOT not in pq.read_schema(files[0]).names
