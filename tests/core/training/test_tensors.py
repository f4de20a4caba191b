"""The dense training tensors: built column by column from Arrow, checked against a plain pandas reference."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from tasks.core.topology import Topology
from tasks.core.training.frame_tensors import build, feature_files, file_tensors, load_x, write_meta, write_recipe
from tasks.core.training.tensors import prepare_tensors, split_times

NAMES = ["a", "b", "c"]


def _features(tmp_path, rng, n_t=40, drop=0.1, unit="us"):
    topo = Topology("t", ("e0", "e1", "e2", "e3"), ("e0", "e1", "e2", "e3"), ((0, 1), (1, 2), (2, 3)))
    times = pd.date_range("2026-01-01", periods=n_t, freq="5min", tz="UTC").as_unit(unit)
    df = pd.DataFrame([(e, t) for t in times for e in topo.element_ids], columns=["element_id", "timestamp"]).sample(
        frac=1 - drop, random_state=1
    )  # missing cells, rows in no particular order
    for name in NAMES:
        df[name] = rng.normal(5.0, 3.0, len(df))
    df.loc[df.sample(frac=0.05, random_state=2).index, "a"] = np.nan
    df["c"] = 7.0  # constant: std 0 -> 1
    df["label"] = (rng.random(len(df)) < 0.2).astype(np.int8)
    df["in_fault"] = (rng.random(len(df)) < 0.1).astype(np.int8)
    (tmp_path / "features").mkdir()
    half = len(df) // 2  # two files, as the features stage writes several
    df.iloc[:half].to_parquet(tmp_path / "features" / "part-0.parquet")
    df.iloc[half:].to_parquet(tmp_path / "features" / "part-1.parquet")
    return topo, df


def _reference(df, topo, test_fraction):
    times = np.sort(df["timestamp"].unique())
    t_idx = np.searchsorted(times, df["timestamp"].to_numpy())
    e_idx = df["element_id"].map({e: i for i, e in enumerate(topo.element_ids)}).to_numpy()
    val_start, _ = split_times(len(times), test_fraction)
    values = df[NAMES].to_numpy(np.float64)
    mu = np.nanmean(values[t_idx < val_start], axis=0)
    sd = np.nanstd(values[t_idx < val_start], axis=0)
    sd[sd < 1e-9] = 1.0
    x = np.zeros((len(times), topo.n, len(NAMES)), dtype=np.float32)
    x[t_idx, e_idx] = np.nan_to_num((values - mu) / sd, nan=0.0)
    y = np.zeros((len(times), topo.n), dtype=np.int8)
    y[t_idx, e_idx] = df["label"].to_numpy()
    mask = np.zeros((len(times), topo.n), dtype=np.int8)
    mask[t_idx, e_idx] = 1 - df["in_fault"].to_numpy()
    return x, y, mask, mu, sd, pd.DatetimeIndex(times).as_unit("us").asi8


@pytest.mark.parametrize("unit", ["us", "ns"])
def test_tensors_match_a_pandas_reference(tmp_path, unit):
    topo, df = _features(tmp_path, np.random.default_rng(0), unit=unit)
    meta = prepare_tensors(tmp_path / "features", topo, NAMES, 3, 0.25, tmp_path / "data.npz", threads=2)
    d = np.load(tmp_path / "data.npz")
    x, y, mask, mu, sd, times = _reference(df, topo, 0.25)
    np.testing.assert_allclose(d["X"], x, atol=1e-6)
    assert d["X"].dtype == np.float32
    np.testing.assert_array_equal(d["y"], y)
    np.testing.assert_array_equal(d["mask"], mask)
    np.testing.assert_allclose(d["mean"], mu)
    np.testing.assert_allclose(d["std"], sd)
    np.testing.assert_array_equal(d["times"], times)
    assert d["std"][2] == 1.0 and np.all(d["X"][:, :, 2] == 0.0)  # a constant feature is all zeros
    val_start, test_start = split_times(40, 0.25)
    assert (meta["val_start"], meta["test_start"]) == (val_start, test_start)
    assert meta["rows"] == len(df) and meta["cells_filled"] == len(df) < 40 * topo.n
    np.testing.assert_array_equal(d["train_t"], np.arange(2, val_start))
    np.testing.assert_array_equal(d["test_t"], np.arange(test_start, 40))


def test_an_element_outside_the_topology_is_named(tmp_path):
    topo, df = _features(tmp_path, np.random.default_rng(0))
    small = Topology("t", topo.element_ids[:3], topo.names[:3], ((0, 1), (1, 2)))
    with pytest.raises(ValueError, match=r"element_id \['e3'\] not in the topology \(3 elements expected\)"):
        prepare_tensors(tmp_path / "features", small, NAMES, 3, 0.25, tmp_path / "data.npz")


def test_the_rewired_graph_keeps_every_degree_and_moves_the_links():
    from tasks.core.topology import load_topology
    from tasks.core.training.tensors import model_graph

    topo = load_topology("topozoo/Geant2012")
    real_ptr, real_idx = model_graph(topo, "real")
    ptr, idx = model_graph(topo, "rewired", seed=1)
    assert np.array_equal(np.diff(ptr), np.diff(real_ptr))  # the same degree everywhere
    links = {(i, j) for i in range(topo.n) for j in idx[ptr[i] : ptr[i + 1]]}
    real = {(i, j) for i in range(topo.n) for j in real_idx[real_ptr[i] : real_ptr[i + 1]]}
    assert all((j, i) in links and i != j for i, j in links) and len(links) == len(real)  # symmetric, no loops
    assert len(links & real) < 0.5 * len(real)  # most links re-drawn
    assert np.array_equal(model_graph(topo, "rewired", seed=1)[1], idx)  # seeded
    none_ptr, none_idx = model_graph(topo, "none")
    assert len(none_idx) == 0 and len(none_ptr) == topo.n + 1 and not none_ptr.any()


def test_steps_to_the_next_onset_for_the_hazard_head():
    from tasks.core.training.tensors import steps_to_onset

    in_fault = np.array([[0, 1], [0, 1], [1, 0], [1, 0], [0, 0], [0, 1], [1, 1]], dtype=np.int8)  # [T=7, E=2]
    ttf = steps_to_onset(in_fault)
    # element 0: onsets at steps 2 and 6; element 1: at step 5 (already in fault at step 0: no onset there)
    assert ttf[:, 0].tolist() == [2, 1, 4, 3, 2, 1, -1]
    assert ttf[:, 1].tolist() == [5, 4, 3, 2, 1, -1, -1]


def test_the_label_is_an_onset_within_the_horizon_of_the_stored_steps(tiny_features, tmp_path):
    """On real features: a row's label is 1 exactly when the next onset is 1..label_steps steps ahead."""
    from tasks.core.config import load_config
    from tasks.core.stages.features import feature_names

    topo = Topology.read(tiny_features / "topology.json")
    names = feature_names(load_config("local").features)
    prepare_tensors(tiny_features / "features", topo, names, 3, 0.25, tmp_path / "d.npz", horizon_minutes=60)
    d = np.load(tmp_path / "d.npz")
    assert int(d["label_steps"]) == 12  # 60 minutes of 5-minute samples
    usable = d["mask"] > 0
    ahead = (d["ttf"] >= 1) & (d["ttf"] <= 12)
    assert d["y"][usable].sum() > 0
    agree = (d["y"][usable] == ahead[usable]).mean()
    assert agree > 0.995, agree  # (a quarantined row inside a fault episode can look like an onset)


@pytest.mark.parametrize(("graph", "stored"), [("real", "float64"), ("rewired", "float64"), ("real", "float32")])
def test_the_ranks_own_build_equals_the_host_build(tmp_path, graph, stored):
    """file_tensors (one body for cuDF and pandas; pandas here), reading a file at a time, gives what
    prepare_tensors writes, array for array: from float64 features, and from float32 ones (standardised in place)."""
    topo, df = _features(tmp_path, np.random.default_rng(0))
    if stored == "float32":
        for f in (tmp_path / "features").glob("*.parquet"):
            part = pd.read_parquet(f)
            part.astype({n: "float32" for n in NAMES}).to_parquet(f)
    meta = prepare_tensors(tmp_path / "features", topo, NAMES, 3, 0.25, tmp_path / "data.npz", 2, graph, 5, 30.0)
    d = np.load(tmp_path / "data.npz")
    arrays, info = file_tensors(feature_files(tmp_path / "features"), topo, NAMES, 3, 0.25, graph, 5, 30.0)
    assert set(arrays) == set(d.files)
    for k in d.files:
        np.testing.assert_array_equal(np.asarray(arrays[k]), d[k], err_msg=k)
    assert arrays["X"].dtype == np.float32 and info["rows"] == len(df)
    assert set(info.pop("tensor_parts_s")) == {"step_index", "fill_cells", "train_stats", "standardise", "the_rest"}
    assert info == {k: v for k, v in meta.items() if k != "feature_names"}


def test_a_recipe_gives_the_small_arrays_to_evaluation_and_x_again(tmp_path):
    topo, _ = _features(tmp_path, np.random.default_rng(0))
    (tmp_path / "topology.json").write_text(json.dumps(topo.to_json()))
    prepare_tensors(tmp_path / "features", topo, NAMES, 3, 0.25, tmp_path / "host.npz")
    out = tmp_path / "train"
    out.mkdir()
    recipe = write_recipe(out, tmp_path / "features", NAMES, 3, 0.25, "real", 0, 60.0)
    arrays, info = build(recipe, gpu=False)
    write_meta(recipe, arrays, info)
    meta, host = np.load(out / "data.npz"), np.load(tmp_path / "host.npz")
    assert set(meta.files) == set(host.files) - {"X", "y", "mask"}
    assert info["tensor_device"] == "cpu" and info["feature_names"] == NAMES
    np.testing.assert_array_equal(load_x(out / "data.npz", "cpu").numpy(), host["X"])
    np.testing.assert_array_equal(load_x(tmp_path / "host.npz", "cpu").numpy(), host["X"])
    # the steps from 17 on alone (both files reach back before them): built with the training's statistics
    np.testing.assert_array_equal(load_x(out / "data.npz", "cpu", 17).numpy(), host["X"][17:])
    np.testing.assert_array_equal(load_x(tmp_path / "host.npz", "cpu", 17).numpy(), host["X"][17:])


def test_the_frame_build_names_an_element_outside_the_topology(tmp_path):
    topo, df = _features(tmp_path, np.random.default_rng(0))
    small = Topology("t", topo.element_ids[:3], topo.names[:3], ((0, 1), (1, 2)))
    with pytest.raises(ValueError, match=r"features: element_id \['e3'\] not in the topology \(3 elements"):
        file_tensors(feature_files(tmp_path / "features"), small, NAMES, 3, 0.25)


def test_features_are_gathered_in_float32_only_where_that_is_exact(tmp_path):
    from tasks.core.training.frame_tensors import raw_dtype

    def stored(**cols) -> list[str]:
        path = tmp_path / f"{len(list(tmp_path.iterdir()))}.parquet"
        pd.DataFrame(cols).to_parquet(path)
        return [str(path)]

    counts = np.array([0, 2**24], np.int64)
    assert raw_dtype(stored(a=np.float32([1.5, 2.5]), n=counts), ["a", "n"]) == "float32"
    assert raw_dtype(stored(a=np.float32([1.5, 2.5]), n=counts + 1), ["a", "n"]) == "float64"  # 2**24 + 1
    assert raw_dtype(stored(a=np.float32([1.5, 2.5]), n=-counts - 1), ["a"]) == "float32"  # only the names count
    assert raw_dtype(stored(a=np.float64([1.5, 2.5]), n=counts), ["a", "n"]) == "float64"


def test_the_training_statistics_are_the_same_gathered_a_block_of_features_at_a_time():
    from tasks.core.training.frame_tensors import train_stats

    rng = np.random.default_rng(7)
    x = rng.normal(3.0, 2.0, (5000, 11)).astype(np.float32)
    x[rng.random(x.shape) < 0.1] = np.nan
    x[:, 4] = 1.5  # constant: its std is taken as 1
    cells = rng.permutation(5000)[:3000]  # the training rows in the files' order, not the matrix's
    one = train_stats(x, cells, block=1)
    for block in (3, 8, 16):
        got = train_stats(x, cells, block=block)
        assert all(np.array_equal(a, b) for a, b in zip(got, one)), block  # bit for bit
    assert one[1][4] == 1.0 and np.isclose(one[0][0], np.nanmean(x[cells, 0].astype(np.float64)))
