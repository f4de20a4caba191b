"""The day-by-day features stage against straightforward pandas over the whole history, on a lake with gaps:
rows missing at random, an element absent for a whole day and one with two rows in a day (so its windows
reach back two days through the chained history), and each day split over two Parquet files."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tasks.core.config import FeaturesConfig
from tasks.core.schema import KPI_VALUES, STEPS_PER_DAY
from tasks.core.stages.features import build_features, day_groups, feature_names
from tasks.core.topology import load_topology

DAYS = 3


def _slope(a):
    return np.polyfit(np.arange(len(a)), a, 1)[0] if len(a) > 1 else 0.0


pytestmark = pytest.mark.engine  # a Dask cluster runs the features stage


@pytest.fixture(scope="module")
def gappy(tmp_path_factory):
    topo = load_topology("topozoo/Abilene")
    rng = np.random.default_rng(11)
    t0 = pd.Timestamp("2026-03-01", tz="UTC")
    ts = t0 + pd.to_timedelta(np.arange(DAYS * STEPS_PER_DAY) * 5, unit="min")
    kpi = pd.DataFrame(
        {
            "timestamp": np.repeat(ts, topo.n),
            "element_id": np.tile(topo.element_ids, len(ts)),
        }
    )
    for k in KPI_VALUES:
        kpi[k] = rng.normal(50, 10, len(kpi)).round(3)
    day = (kpi["timestamp"] - t0).dt.days
    drop = rng.random(len(kpi)) < 0.2
    drop |= (kpi["element_id"] == topo.element_ids[0]) & (day == 1)  # absent for a whole day
    second = (kpi["element_id"] == topo.element_ids[1]) & (day == 1)
    drop = np.where(second, second.cumsum() > 2, drop)  # its first two rows of day 1 only
    kpi = kpi[~drop].reset_index(drop=True)
    n_al = 120
    alarms = pd.DataFrame(
        {
            "timestamp": t0 + pd.to_timedelta(rng.integers(0, DAYS * 24 * 3600, n_al), unit="s"),
            "element_id": rng.choice(topo.element_ids, n_al),
            "severity": rng.choice(["warning", "minor", "major", "cleared"], n_al),
            "alarm_type": "HIGH_CPU",
        }
    )
    onset = t0 + pd.Timedelta(hours=30, minutes=2)
    faults = pd.DataFrame(
        {
            "timestamp": [onset, onset + pd.Timedelta(minutes=40)],
            "element_id": [topo.element_ids[3]] * 2,
            "severity": ["critical", "cleared"],
            "alarm_type": ["NODE_DOWN", "NODE_UP"],
        }
    )
    alarms = pd.concat([alarms, faults], ignore_index=True)
    lake = tmp_path_factory.mktemp("gappy")
    for name, frame in (("kpi", kpi), ("alarms", alarms)):
        for d, part in frame.groupby(frame["timestamp"].dt.strftime("%Y-%m-%d")):
            (lake / name / f"date={d}").mkdir(parents=True)
            half = len(part) // 2  # two files per day, like Spark's maxRecordsPerFile
            for i, chunk in enumerate((part.iloc[:half], part.iloc[half:])):
                pq.write_table(
                    pa.Table.from_pandas(chunk, preserve_index=False), lake / name / f"date={d}" / f"p{i}.parquet"
                )
    (lake / "topology.json").write_text(json.dumps(topo.to_json()))
    cfg = FeaturesConfig(n_workers=2, store_dtype="float64")  # the algorithm's parity, at float64
    from tasks.core.runtime import dask_cluster, dask_spec, detect_hardware

    out = tmp_path_factory.mktemp("gappy-out")
    seen = []
    with dask_cluster(dask_spec(cfg, "pandas", detect_hardware())) as client:
        summary = build_features(client, lake, topo, cfg, "pandas", out, progress=lambda d, n: seen.append((d, n)))
    feats = pd.read_parquet(out / "features").sort_values(["element_id", "timestamp"]).reset_index(drop=True)
    kpi = kpi.sort_values(["element_id", "timestamp"]).reset_index(drop=True)
    return {"lake": lake, "topo": topo, "kpi": kpi, "alarms": alarms, "feats": feats, "summary": summary, "seen": seen}


def test_days_rows_and_progress(gappy):
    assert len(day_groups(gappy["lake"] / "kpi")) == DAYS
    assert gappy["summary"]["rows_in"] == gappy["summary"]["rows_out"] == len(gappy["kpi"]) == len(gappy["feats"])
    assert gappy["summary"]["days"] == DAYS and gappy["seen"][-1] == (DAYS, DAYS)
    assert list(gappy["summary"]["day_parts_s"]) == ["shared_tables", "first_day", "other_days"]  # where they went
    names = feature_names(FeaturesConfig())
    labels = ["in_fault", "minutes_to_fault", "label"]
    assert list(gappy["feats"].columns) == ["element_id", "timestamp", *names[:-12], *labels, *names[-12:]]
    assert (gappy["feats"]["timestamp"] == gappy["kpi"]["timestamp"]).all()


def test_rolling_windows_cross_days_and_gaps(gappy):
    feats, kpi = gappy["feats"], gappy["kpi"]
    for k in ("cpu_util", "if_errors"):
        g = kpi.groupby("element_id")[k]
        for w in FeaturesConfig().windows:
            r = g.rolling(w, min_periods=1)
            idx = lambda s: s.reset_index(level=0, drop=True).sort_index().to_numpy()
            np.testing.assert_allclose(feats[f"{k}_mean_{w}"], idx(r.mean()), rtol=1e-12, err_msg=f"{k} {w}")
            np.testing.assert_allclose(feats[f"{k}_std_{w}"], idx(r.std(ddof=0)), rtol=1e-9, atol=1e-9)
            np.testing.assert_array_equal(feats[f"{k}_max_{w}"], idx(r.max()))
            np.testing.assert_allclose(feats[f"{k}_slope_{w}"], idx(r.apply(_slope, raw=True)), rtol=1e-7, atol=1e-9)


def test_alarm_counts_are_the_last_hour(gappy):
    feats, alarms = gappy["feats"], gappy["alarms"]
    pre = alarms[alarms["severity"].isin(["warning", "minor", "major"])].copy()
    pre["sample"] = pre["timestamp"].dt.ceil("5min")  # an alarm counts toward the next sample
    rows = feats.sample(400, random_state=1)
    for _, r in rows.iterrows():
        mine = pre[(pre["element_id"] == r["element_id"]) & (pre["sample"] <= r["timestamp"])]
        hour = mine[mine["sample"] > r["timestamp"] - pd.Timedelta(minutes=60)]
        for s in ("warning", "minor", "major"):
            assert r[f"alarms_{s}_1h"] == (hour["severity"] == s).sum()
        assert r["alarms_1h"] == len(hour)
        since = (r["timestamp"] - mine["sample"].max()).total_seconds() / 60 if len(mine) else 1440.0
        assert r["minutes_since_alarm"] == min(since, 1440.0)


def test_labels_and_neighbours(gappy):
    feats, topo = gappy["feats"], gappy["topo"]
    el = topo.element_ids[3]
    onset = pd.Timestamp("2026-03-01", tz="UTC") + pd.Timedelta(hours=30, minutes=2)
    mine = feats[feats["element_id"] == el]
    lead = mine[(mine["timestamp"] < onset) & (mine["timestamp"] >= onset - pd.Timedelta(minutes=60))]
    assert len(lead) and (lead["label"] == 1).all() and (feats["label"].sum() == len(lead))
    down = mine[(mine["timestamp"] >= onset) & (mine["timestamp"] <= onset + pd.Timedelta(minutes=40))]
    assert len(down) and (down["in_fault"] == 1).all() and feats["in_fault"].sum() == len(down)
    indptr, indices = topo.csr()
    for ts in feats["timestamp"].drop_duplicates().sample(20, random_state=2):
        at = feats[feats["timestamp"] == ts].set_index("element_id")
        for i, e in enumerate(topo.element_ids):
            if e not in at.index:
                continue
            nb = [topo.element_ids[j] for j in indices[indptr[i] : indptr[i + 1]] if topo.element_ids[j] in at.index]
            for k in ("latency_ms", "alarms_1h"):
                v = at.loc[nb, k]
                assert at.loc[e, f"nbr_{k}_mean"] == pytest.approx(v.mean() if len(v) else 0.0, rel=1e-12)
                assert at.loc[e, f"nbr_{k}_max"] == (v.max() if len(v) else 0.0)


def test_unknown_element_is_named(gappy, tmp_path):
    from tasks.core.stages.features import read_kpi, shared_tables, write_day

    day = read_kpi(day_groups(gappy["lake"] / "kpi")[0][1], "pandas")
    day.loc[5, "element_id"] = "NOT-IN-TOPOLOGY"
    with pytest.raises(ValueError, match="NOT-IN-TOPOLOGY"):
        write_day("d", day, None, shared_tables(gappy["lake"], gappy["topo"]), FeaturesConfig(), tmp_path)
