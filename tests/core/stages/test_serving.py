"""The served predictor (the better model is the default) scores what evaluation scored: the stack of
the tuned tree and the graph model, from raw feature windows, through MLflow's ``pyfunc`` too."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
import torch

from tasks.core.config import load_config
from tasks.core.metrics import pr_auc
from tasks.core.stages.evaluate import evaluate, evaluate_stage
from tasks.core.stages.features import feature_names
from tasks.core.stages.serving import FaultPredictor, raw_grid, write_served
from tasks.core.topology import Topology
from tasks.core.training.model import FaultGNN, windows_at
from tasks.core.training.tensors import prepare_tensors

pytestmark = [pytest.mark.spark]
WINDOW = 4


@pytest.fixture(scope="module")
def trained(tiny_features, tmp_path_factory):
    """A train stage's outputs: the tensors and a (seeded, untrained) graph model in the checkpoint format."""
    out = tmp_path_factory.mktemp("train")
    topo = Topology.read(tiny_features / "topology.json")
    names = feature_names(load_config("local").features)
    prepare_tensors(tiny_features / "features", topo, names, WINDOW, 0.25, out / "data.npz")
    torch.manual_seed(3)
    model = FaultGNN(len(names), hidden=8, layers=1)
    torch.save({"model": model.state_dict(), "config": model.config, "window": WINDOW}, out / "model.pt")
    return out, topo, names


def _test_cells(tiny_features, data: dict, topo: Topology) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(step, element, label) of the rows evaluation scores on the test window, in its order."""
    df = pd.read_parquet(tiny_features / "features", columns=["element_id", "timestamp", "in_fault", "label"])
    t = np.searchsorted(data["times"], pd.DatetimeIndex(df["timestamp"]).as_unit("us").asi8)
    e = df["element_id"].map({x: i for i, x in enumerate(topo.element_ids)}).to_numpy()
    span = t >= data["val_t"][0]
    test = (t[span] >= data["test_t"][0]) & (df["in_fault"].to_numpy()[span] == 0)
    return t[span][test], e[span][test], df["label"].to_numpy()[span][test]


def _served_scores(path, tiny_features, data, topo, names, cells) -> np.ndarray:
    p = FaultPredictor(path)
    grid = torch.from_numpy(raw_grid(tiny_features / "features", topo.element_ids, names, data["times"]))
    steps = np.unique(cells[0])
    out = p.predict(windows_at(grid, torch.as_tensor(steps), WINDOW).numpy())
    return out[np.searchsorted(steps, cells[0]), cells[1]]


def test_the_served_predictor_scores_what_evaluation_scored(trained, tiny_features, tmp_path):
    train_dir, topo, names = trained
    cfg = load_config("local").evaluate
    ev = evaluate(tiny_features / "features", train_dir / "data.npz", train_dir / "model.pt", topo, names, cfg, 0)
    data = dict(np.load(train_dir / "data.npz"))
    cells = _test_cells(tiny_features, data, topo)
    res = ev["results"]
    assert len(cells[0]) == len(res["model"]["scores"]) == ev["test_rows"] > 0
    tree, _ = ev["served"]
    write_served(tmp_path / "half", train_dir, names, tree, 0.5, {})  # both parts weigh: each is checked
    half = _served_scores(tmp_path / "half", tiny_features, data, topo, names, cells)
    expected = 0.5 * res["tree"]["scores"] + 0.5 * res["model"]["scores"]
    np.testing.assert_allclose(half, expected, rtol=1e-5, atol=1e-6)
    write_served(tmp_path / "gnn", train_dir, names, None, 0.0, {})  # the graph model alone: no tree is written
    assert not (tmp_path / "gnn" / "tree.ubj").exists()
    gnn = _served_scores(tmp_path / "gnn", tiny_features, data, topo, names, cells)
    np.testing.assert_allclose(gnn, res["model"]["scores"], rtol=1e-5, atol=1e-6)


def test_evaluation_writes_the_stack_it_chose_and_its_figures(trained, tiny_features, tmp_path):
    train_dir, topo, names = trained
    cfg = load_config("local").evaluate
    body = evaluate_stage(tiny_features, train_dir, names, cfg, 0, tmp_path)
    spec = json.loads((tmp_path / "served" / "served.json").read_text())
    weight = body["results"]["stack"]["tree_weight"]
    assert spec["tree_weight"] == weight == body["served"]["tree_weight"]
    assert spec["kind"] == ("stack" if weight > 0 else "model") and spec["features"] == names
    assert spec["metrics"]["pr_auc"] == body["results"][spec["kind"]]["pr_auc"]
    assert spec["metrics"]["baseline_pr_auc"] == body["results"]["tree"]["pr_auc"]
    data = dict(np.load(train_dir / "data.npz"))
    cells = _test_cells(tiny_features, data, topo)
    scores = _served_scores(tmp_path / "served", tiny_features, data, topo, names, cells)
    assert pr_auc(cells[2], scores) == pytest.approx(spec["metrics"]["pr_auc"], abs=1e-6)


def test_a_window_of_the_wrong_shape_is_refused_with_what_is_expected(trained, tmp_path):
    train_dir, topo, names = trained
    write_served(tmp_path / "s", train_dir, names, None, 0.0, {}, network="Abilene")
    p = FaultPredictor(tmp_path / "s")
    assert p.shape == (WINDOW, topo.n, len(names))
    with pytest.raises(ValueError, match=rf"\[batch, {WINDOW}, {topo.n}, {len(names)}\]"):
        p.predict(np.zeros((1, WINDOW + 1, topo.n, len(names)), np.float32))
    # another network's windows (another element count): refused, naming the network this model serves
    with pytest.raises(ValueError, match=rf"serves the network 'Abilene' of {topo.n} elements; the input has 37"):
        p.predict(np.zeros((1, WINDOW, 37, len(names)), np.float32))
