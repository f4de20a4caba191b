"""The model's shapes, scoring, and the checkpoint round trip (pure PyTorch, CPU)."""

import numpy as np
import pytest
import torch

from tasks.core.topology import load_topology
from tasks.core.training.checkpoint import latest_checkpoint, load_checkpoint, save_checkpoint
from tasks.core.training.model import (
    FaultGNN,
    ScoringModel,
    load_model,
    normalised_adjacency,
    same_shape,
    score_snapshots,
    warm_start,
    windows_at,
)


def _adj():
    topo = load_topology("topozoo/Abilene")
    indptr, indices = topo.csr()
    return topo, normalised_adjacency(indptr, indices, topo.n)


def test_shapes_and_neighbour_mean():
    topo, adj = _adj()
    x = torch.randn(10, topo.n, 7)  # [T, E, F]
    w = windows_at(x, torch.tensor([0, 5, 9]), 4)
    assert w.shape == (3, 4, topo.n, 7)
    assert torch.equal(w[1, -1], x[5]) and torch.equal(w[0, 0], x[0])  # clamped at the start
    model = FaultGNN(7, hidden=8, layers=2)
    assert model(w, adj).shape == (3, topo.n)
    flat = torch.randn(topo.n, 3)
    agg = adj.aggregate(flat)
    i = 0
    nbrs = topo.csr()[1][topo.csr()[0][i] : topo.csr()[0][i + 1]]
    torch.testing.assert_close(agg[i], flat[nbrs].mean(0))


def test_scoring_is_a_probability_and_matches_the_serving_model():
    topo, adj = _adj()
    torch.manual_seed(0)
    x = torch.randn(12, topo.n, 5)
    model = FaultGNN(5, hidden=8, layers=1)
    scores = score_snapshots(model, x, adj, np.arange(3, 12), 3, batch=4)
    assert scores.shape == (9, topo.n) and ((scores >= 0) & (scores <= 1)).all()
    serving = ScoringModel(model, adj).eval()
    torch.testing.assert_close(serving(windows_at(x, torch.arange(3, 12), 3)), scores)


def test_checkpoint_round_trip_and_newest_complete(tmp_path):
    model = FaultGNN(5, hidden=8, layers=1)
    for epoch in (0, 1):
        save_checkpoint(tmp_path, epoch, {"model": model.state_dict(), "history": [epoch]}, "fp")
    (tmp_path / "epoch_0002.pt").write_bytes(b"half")  # a write that never completed: no marker
    path = latest_checkpoint(tmp_path, "fp")
    assert path.name == "epoch_0001.pt" and latest_checkpoint(tmp_path, "other-fp") is None
    state = load_checkpoint(path)
    assert state["epoch"] == 1 and state["history"] == [1]
    restored = FaultGNN(5, hidden=8, layers=1)
    restored.load_state_dict(state["model"])
    for a, b in zip(model.state_dict().values(), restored.state_dict().values()):
        assert torch.equal(a, b)


def test_load_model_reads_what_the_worker_writes(tmp_path):
    model = FaultGNN(5, hidden=8, layers=1)
    torch.save({"model": model.state_dict(), "config": model.config, "window": 3, "best_epoch": 0}, tmp_path / "m.pt")
    loaded, ck = load_model(tmp_path / "m.pt")
    assert ck["window"] == 3 and not loaded.training
    assert loaded.config == {"n_features": 5, "hidden": 8, "layers": 1}


def test_a_warm_start_takes_the_weights_of_a_model_of_the_same_shape_only(tmp_path):
    from tasks.core.config import TrainConfig

    champion = FaultGNN(5, hidden=8, layers=1)
    torch.save({"model": champion.state_dict(), "config": champion.config, "window": 3}, tmp_path / "gnn.pt")
    cfg = TrainConfig(hidden=8, layers=1, window=3)
    assert same_shape(tmp_path / "gnn.pt", 5, cfg) == ""
    assert "this run's is" in same_shape(tmp_path / "gnn.pt", 6, cfg)  # another feature count
    assert "this run's is" in same_shape(tmp_path / "gnn.pt", 5, cfg.model_copy(update={"window": 6}))
    assert "hazard" in same_shape(tmp_path / "gnn.pt", 5, cfg.model_copy(update={"hazard_steps": 3}))
    model = FaultGNN(5, hidden=8, layers=1)
    warm_start(model, str(tmp_path / "gnn.pt"), 3)
    assert all(torch.equal(a, b) for a, b in zip(model.state_dict().values(), champion.state_dict().values()))
    with pytest.raises(ValueError, match="a model of"):
        warm_start(FaultGNN(5, hidden=16, layers=1), str(tmp_path / "gnn.pt"), 3)


def test_a_damaged_newest_checkpoint_is_named_and_skipped(tmp_path):
    """A truncated newest checkpoint (its marker written) falls back to the one before it."""
    from tasks.core.training.checkpoint import load_latest

    model = FaultGNN(5, hidden=8, layers=1)
    for epoch in (0, 1):
        save_checkpoint(tmp_path, epoch, {"model": model.state_dict(), "history": [epoch]}, "fp")
    newest = tmp_path / "epoch_0001.pt"
    newest.write_bytes(newest.read_bytes()[:100])  # a disk that lost the tail
    said = []
    path, state = load_latest(tmp_path, "fp", said.append)
    assert path.name == "epoch_0000.pt" and state["epoch"] == 0
    assert len(said) == 1 and "epoch_0001.pt is damaged" in said[0]
    (tmp_path / "epoch_0000.pt").write_bytes(b"")
    assert load_latest(tmp_path, "fp", said.append) is None  # nothing usable: train from the start


def test_dropout_is_in_the_config_only_when_used_and_off_in_eval():
    import torch

    from tasks.core.training.model import FaultGNN

    plain = FaultGNN(5, hidden=8, layers=1)
    assert "dropout" not in plain.config  # older checkpoints' config, unchanged
    model = FaultGNN(5, hidden=8, layers=1, dropout=0.5)
    assert model.config["dropout"] == 0.5 and FaultGNN(**model.config).config == model.config
    from tasks.core.training.model import normalised_adjacency

    adj = normalised_adjacency(np.array([0, 1, 2]), np.array([1, 0]), 2)
    x = torch.randn(3, 4, 2, 5)
    model.eval()
    assert torch.equal(model(x, adj), model(x, adj))  # no dropout when scoring
    model.train()
    assert not torch.equal(model(x, adj), model(x, adj))


def test_the_loss_is_unweighted_by_default_and_the_balanced_weight_is_capped(tmp_path):
    from tasks.core.config import TrainConfig
    from tasks.core.training.worker import Data

    rng = np.random.default_rng(0)
    T, N = 40, 5
    y = np.zeros((T, N), np.int8)
    y[:20][rng.random((20, N)) < 0.1] = 1  # ~10 positives among the 100 training cells
    path = tmp_path / "data.npz"
    np.savez(
        path,
        X=rng.random((T, N, 3)).astype(np.float32),
        y=y,
        mask=np.ones((T, N), np.int8),
        indptr=np.array([0, 1, 2, 3, 4, 4]),
        indices=np.array([1, 2, 3, 4]),
        train_t=np.arange(20),
        val_t=np.arange(20, 30),
    )
    pos = float(y[:20].sum())
    cpu = torch.device("cpu")
    assert TrainConfig().pos_weight == 1.0  # calibrated and higher PR-AUC on the quality yardstick
    assert Data.load(str(path), cpu, TrainConfig().pos_weight).pos_weight.item() == 1.0
    assert Data.load(str(path), cpu, None).pos_weight.item() == pytest.approx((100 - pos) / pos)
    y[:20] = 0
    y[0, 0] = 1  # one positive in 100: 99 negatives per positive, capped at 50
    np.savez(path, **{**dict(np.load(path)), "y": y})
    assert Data.load(str(path), cpu, None).pos_weight.item() == 50.0


def test_temporal_graph_reads_neighbours_histories_one_hop_per_step(tmp_path):
    topo, adj = _adj()
    indptr, indices = topo.csr()
    i = 0
    nbrs = set(indices[indptr[i] : indptr[i + 1]].tolist())
    two_hops = {int(k) for j in nbrs for k in indices[indptr[j] : indptr[j + 1]]} - nbrs - {i}
    j, k = min(nbrs), min(two_hops)
    x = torch.randn(1, 4, topo.n, 5)
    moved = {n: x.clone() for n in (j, k)}
    for n in (j, k):
        moved[n][0, 0, n] += 3.0  # an element's first step of the window, not its last

    def effect(model, n):
        with torch.no_grad():
            return (model(moved[n], adj)[0, i] - model(x, adj)[0, i]).abs().item()

    torch.manual_seed(0)
    over_time = FaultGNN(5, hidden=8, layers=0, temporal_graph=True).eval()
    torch.manual_seed(0)
    last_only = FaultGNN(5, hidden=8, layers=0).eval()
    assert effect(over_time, j) > 1e-4  # a neighbour's history reaches the element's encoder
    assert effect(over_time, k) == 0.0  # one hop per step: two hops away does not
    assert effect(last_only, j) == 0.0  # without message passing, nothing of the neighbour
    torch.save({"model": over_time.state_dict(), "config": over_time.config, "window": 4}, tmp_path / "m.pt")
    loaded, _ = load_model(tmp_path / "m.pt")
    torch.testing.assert_close(loaded(x, adj), over_time(x, adj))


def test_the_hazard_head_gives_the_label_from_its_first_steps_and_a_survival_loss():
    from tasks.core.training.model import hazard_loss, label_logit

    topo, adj = _adj()
    torch.manual_seed(0)
    model = FaultGNN(5, hidden=8, layers=1, hazard_steps=6, label_steps=3).eval()
    x = torch.randn(2, 4, topo.n, 5)
    h = model(x, adj, hazard=True)
    assert h.shape == (2, topo.n, 6)
    p = 1 - torch.prod(1 - torch.sigmoid(h[..., :3]), dim=-1)  # P(onset within 3 steps), directly
    torch.testing.assert_close(torch.sigmoid(model(x, adj)), p)
    torch.testing.assert_close(torch.sigmoid(label_logit(torch.full((1, 3), -30.0))), torch.tensor([3 * 9.3576e-14]))
    z = torch.tensor([[[0.3, -0.2, 1.0, 0.5]]] * 3).reshape(3, 1, 4)  # three cells, K = 4
    ttf = torch.tensor([[2], [-1], [9]])  # an onset at step 2; none in the data; one beyond the horizon
    remaining = torch.tensor([[10], [2], [10]])  # the second cell's data ends 2 steps later: censored there
    got = hazard_loss(z, ttf, remaining)[:, 0]
    ls = torch.nn.functional.logsigmoid
    want = [-(ls(-z[0, 0, 0]) + ls(z[0, 0, 1])), -(ls(-z[1, 0, :2]).sum()), -(ls(-z[2, 0]).sum())]
    torch.testing.assert_close(got, torch.stack(want))


def test_weights_digest_follows_the_weights_not_the_save(tmp_path):
    """The evaluate stage's key: the same weights saved twice (another time, another record) share a digest;
    one changed weight does not."""
    import time

    from tasks.core.training.checkpoint import weights_digest

    torch.manual_seed(0)
    layer = torch.nn.Linear(4, 3)
    torch.save({"model": layer.state_dict(), "config": {"a": 1}, "saved_at": time.time()}, tmp_path / "a.pt")
    time.sleep(0.01)
    torch.save({"model": layer.state_dict(), "config": {"a": 1}, "saved_at": time.time()}, tmp_path / "b.pt")
    assert weights_digest(tmp_path / "a.pt") == weights_digest(tmp_path / "b.pt")
    with torch.no_grad():
        layer.weight[0, 0] += 1e-6
    torch.save({"model": layer.state_dict(), "config": {"a": 1}}, tmp_path / "c.pt")
    assert weights_digest(tmp_path / "c.pt") != weights_digest(tmp_path / "a.pt")


def test_the_training_spec_round_trips_typed(tmp_path):
    """spec.json as every rank reads it: the train section a TrainConfig again, paths as paths."""
    from tasks.core.config import load_config
    from tasks.core.training.launch import training_spec
    from tasks.core.training.spec import TrainingSpec

    cfg = load_config("local", ["train.epochs=3", "train.dropout=0.2"]).train
    nodes = {"run_id": "r", "interval_s": 5.0, "flow_host": "a"}
    spec = training_spec("ddp", "cpu", cfg, tmp_path / "d.npz", tmp_path / "ck", tmp_path, "fp", 2, node_metrics=nodes)
    spec.write(tmp_path / "spec.json")
    back = TrainingSpec.read(tmp_path / "spec.json")
    assert back == spec and back.train.engine == "ddp" and back.train.dropout == 0.2 and back.node_metrics.run_id == "r"


def test_the_grus_kernel_is_chosen_by_its_time_and_leaves_cudnn_as_it_was():
    from tasks.core.training.model import recurrent_kernel
    from tasks.core.training.recurrent import choose_kernel, fastest

    assert fastest({"cudnn": 0.04, "native": 0.01}) == "native"
    assert fastest({"cudnn": 0.04, "native": "RuntimeError: no fused cell"}) == "cudnn"  # one that failed: skipped
    assert fastest({}) == "cudnn"
    gru = torch.nn.GRU(4, 4, batch_first=True)
    assert choose_kernel(gru, 8, 3, torch.device("cpu"), False, "native") == ("native", {"requested": "native"})
    assert choose_kernel(gru, 8, 3, torch.device("cpu"), False)[0] == "cudnn"  # off a GPU nothing is timed
    before = torch.backends.cudnn.enabled
    with recurrent_kernel("native"):
        assert not torch.backends.cudnn.enabled
    with pytest.raises(ValueError), recurrent_kernel("native"):
        raise ValueError
    assert torch.backends.cudnn.enabled == before


def test_the_native_gru_scores_as_the_default_one():
    topo, adj = _adj()
    torch.manual_seed(0)
    x = torch.randn(10, topo.n, 5)
    model = FaultGNN(5, hidden=8, layers=1)
    ref = score_snapshots(model, x, adj, np.arange(3, 10), 3)
    model.recurrent = "native"
    torch.testing.assert_close(score_snapshots(model, x, adj, np.arange(3, 10), 3), ref)
