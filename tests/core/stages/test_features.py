"""The features stage on a real Dask LocalCluster, against direct pandas computations."""

import numpy as np
import pandas as pd
import pytest

from tasks.core.config import load_config
from tasks.core.stages.features import feature_names
from tasks.core.topology import Topology

pytestmark = pytest.mark.spark


def test_rows_preserved_and_columns_listed(tiny_lake, tiny_features):
    feats = pd.read_parquet(tiny_features / "features")
    kpi = pd.read_parquet(tiny_lake / "kpi")
    assert len(feats) == len(kpi)
    assert set(feature_names(load_config("local").features)) <= set(feats.columns)
    assert not feats[feature_names(load_config("local").features)].isna().any().any()


def test_rolling_features_match_pandas(tiny_lake, tiny_features):
    feats = pd.read_parquet(tiny_features / "features").sort_values(["element_id", "timestamp"])
    kpi = pd.read_parquet(tiny_lake / "kpi").sort_values(["element_id", "timestamp"])
    g = kpi.groupby("element_id")["latency_ms"]
    # stored as float32 (computed in float64): equal to float32 precision
    np.testing.assert_allclose(feats["latency_ms_mean_12"], g.transform(lambda s: s.rolling(12, 1).mean()), rtol=1e-6)
    np.testing.assert_allclose(feats["latency_ms_max_36"], g.transform(lambda s: s.rolling(36, 1).max()), rtol=1e-6)
    assert feats["latency_ms_mean_12"].dtype == np.float32 and feats["label"].dtype == np.int8


def test_neighbour_features_match_topology(tiny_lake, tiny_features):
    topo = Topology.read(tiny_lake / "topology.json")
    feats = pd.read_parquet(tiny_features / "features")
    at = feats[feats["timestamp"] == feats["timestamp"].iloc[500]].set_index("element_id")
    indptr, indices = topo.csr()
    for i, e in enumerate(topo.element_ids):
        if e not in at.index:
            continue
        nbrs = [topo.element_ids[j] for j in indices[indptr[i] : indptr[i + 1]] if topo.element_ids[j] in at.index]
        expect = at.loc[nbrs, "cpu_util"]
        assert at.loc[e, "nbr_cpu_util_mean"] == pytest.approx(expect.mean() if len(expect) else 0.0)
        assert at.loc[e, "nbr_cpu_util_max"] == pytest.approx(expect.max() if len(expect) else 0.0)


def test_labels_come_from_the_alarm_log(tiny_lake, tiny_features):
    feats = pd.read_parquet(tiny_features / "features")
    alarms = pd.read_parquet(tiny_lake / "alarms")
    onsets = alarms[alarms["alarm_type"] == "NODE_DOWN"]
    assert len(onsets) > 0 and feats["label"].sum() > 0
    o = onsets.iloc[0]
    before = feats[
        (feats["element_id"] == o["element_id"])
        & (feats["timestamp"] < o["timestamp"])
        & (feats["timestamp"] >= o["timestamp"] - pd.Timedelta(minutes=60))
    ]
    assert (before["label"] == 1).all() and len(before) > 0
    assert (feats.loc[feats["label"] == 1, "minutes_to_fault"] <= 60).all()
