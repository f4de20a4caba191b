"""The fault model: a temporal encoder per element followed by message passing over the topology.

Pure PyTorch (no Horovod, no device decisions): ``x`` is [batch, window, elements, features], the
adjacency an edge list with row-normalised weights (neighbour mean as gather + index_add_).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

KERNELS = ("cudnn", "native")  # what runs the GRU on a GPU: cuDNN, or PyTorch's own fused cells (recurrent.py)


@contextmanager
def recurrent_kernel(kernel: str) -> Iterator[None]:
    """cuDNN off while the GRU runs (its backward then follows the ops that ran) for ``native``; nothing else."""
    if kernel != "native":
        yield
        return
    before = torch.backends.cudnn.enabled
    torch.backends.cudnn.enabled = False
    try:
        yield
    finally:
        torch.backends.cudnn.enabled = before


class Adjacency:
    """Row-normalised adjacency as edge lists (target row, source column, weight): neighbour mean as a
    gather + ``index_add_`` (works on CPU and CUDA alike, no cuSPARSE)."""

    def __init__(self, rows: torch.Tensor, cols: torch.Tensor, weights: torch.Tensor, n: int) -> None:
        self.rows, self.cols, self.weights, self.n = rows, cols, weights, n

    def to(self, device) -> Adjacency:
        return Adjacency(self.rows.to(device), self.cols.to(device), self.weights.to(device), self.n)

    def aggregate(self, flat: torch.Tensor) -> torch.Tensor:
        """flat [n, k] -> [n, k]: for each row, the weighted sum of its neighbours' rows."""
        out = torch.zeros_like(flat)
        return out.index_add_(0, self.rows, flat[self.cols] * self.weights[:, None].to(flat.dtype))


def normalised_adjacency(indptr: np.ndarray, indices: np.ndarray, n: int) -> Adjacency:
    """Mean over neighbours: weight 1/degree on every edge of the CSR adjacency."""
    deg = np.diff(indptr)
    w = np.repeat(np.divide(1.0, deg, out=np.zeros(len(deg)), where=deg > 0), deg).astype(np.float32)
    rows = np.repeat(np.arange(n), deg)
    return Adjacency(
        torch.as_tensor(rows, dtype=torch.int64), torch.as_tensor(indices, dtype=torch.int64), torch.as_tensor(w), n
    )


class GraphLayer(nn.Module):
    """h' = norm(h + relu(W_self h + W_nbr mean_{j in N(i)} h_j))."""

    def __init__(self, hidden: int) -> None:
        super().__init__()
        self.self_lin = nn.Linear(hidden, hidden)
        self.nbr_lin = nn.Linear(hidden, hidden, bias=False)
        self.norm = nn.LayerNorm(hidden)

    def forward(self, h: torch.Tensor, adj: Adjacency) -> torch.Tensor:
        b, e, d = h.shape
        flat = h.transpose(0, 1).reshape(e, b * d)  # elements first, so one aggregation serves the batch
        agg = adj.aggregate(flat.float()).reshape(e, b, d).transpose(0, 1).to(h.dtype)
        return self.norm(h + torch.relu(self.self_lin(h) + self.nbr_lin(agg)))


class FaultGNN(nn.Module):
    """Per element: input encoding -> GRU over the window -> ``layers`` rounds of message passing on the last
    state (``layers`` hops) -> head on [own state, graph state]. With ``temporal_graph``, one round of message
    passing also runs at every step of the window before the GRU, so an element's encoder reads its neighbours'
    histories, not only their last state (propagation over time).

    The head gives one logit, P(fault within the label's horizon); with ``hazard_steps`` K it gives instead a
    discrete-time hazard over the next K steps, h_k = P(onset at step k | none before), and the label's logit is
    derived from the first ``label_steps`` of it: P = 1 - prod_k (1 - h_k). ``forward`` returns the label's logit
    either way (scoring, validation and serving are unchanged); ``forward(..., hazard=True)`` the K hazard logits.
    """

    def __init__(
        self,
        n_features: int,
        hidden: int = 32,
        layers: int = 2,
        dropout: float = 0.0,
        temporal_graph: bool = False,
        hazard_steps: int = 0,
        label_steps: int = 12,
    ) -> None:
        super().__init__()
        self.drop = nn.Dropout(dropout) if dropout > 0 else nn.Identity()
        self.inp = nn.Sequential(nn.Linear(n_features, hidden), nn.ReLU())
        self.step_graph = GraphLayer(hidden) if temporal_graph else None
        self.temporal = nn.GRU(hidden, hidden, batch_first=True)
        self.graph = nn.ModuleList(GraphLayer(hidden) for _ in range(layers))
        self.head = nn.Sequential(nn.Linear(2 * hidden, hidden), nn.ReLU(), nn.Linear(hidden, max(1, hazard_steps)))
        self.hazard_steps, self.label_steps = hazard_steps, min(label_steps, max(1, hazard_steps))
        self.recurrent = "cudnn"  # the GRU's kernel on a GPU (recurrent.py chooses); not a property of the weights
        self.config = {"n_features": n_features, "hidden": hidden, "layers": layers}
        if dropout > 0:  # (a model without these keeps the config older checkpoints have)
            self.config["dropout"] = dropout
        if temporal_graph:
            self.config["temporal_graph"] = True
        if hazard_steps:
            self.config.update(hazard_steps=hazard_steps, label_steps=label_steps)

    def forward(self, x: torch.Tensor, adj: torch.Tensor, hazard: bool = False) -> torch.Tensor:
        b, w, e, f = x.shape
        h = self.inp(x)  # [b, w, e, d]
        if self.step_graph is not None:  # every step of every window at once: [b * w, e, d]
            h = self.step_graph(h.reshape(b * w, e, -1), adj).reshape(b, w, e, -1)
        h = h.permute(0, 2, 1, 3).reshape(b * e, w, -1)
        with recurrent_kernel(self.recurrent):
            _, last = self.temporal(h)
        local = last[-1].reshape(b, e, -1)
        g = local
        for layer in self.graph:
            g = layer(g, adj)
        out = self.head(self.drop(torch.cat([local, g], dim=-1)))  # [batch, elements, K]
        if hazard:
            return out
        return label_logit(out[..., : self.label_steps]) if self.hazard_steps else out.squeeze(-1)  # [b, e] logits


def label_logit(hazard_logits: torch.Tensor) -> torch.Tensor:
    """[..., H] hazard logits -> [...] the logit of P(onset within the H steps) = 1 - prod (1 - h_k), computed in
    log space (float32): log S = sum log sigmoid(-h); logit = log(1 - S) - log S."""
    log_s = F.logsigmoid(-hazard_logits.float()).sum(-1)
    return torch.log((-torch.expm1(log_s)).clamp_min(1e-30)) - log_s


def hazard_loss(hazard_logits: torch.Tensor, ttf: torch.Tensor, remaining: torch.Tensor) -> torch.Tensor:
    """Discrete-time survival loss per cell: [b, e, K] logits; ``ttf`` [b, e] steps to the next onset (-1: none in
    the data); ``remaining`` [b, 1] steps of data after each snapshot (censoring). An onset at step m <= K: -log h_m
    - sum_{k<m} log(1 - h_k); otherwise survival over every step known: -sum_{k <= min(K, known)} log(1 - h_k)."""
    k = torch.arange(1, hazard_logits.shape[-1] + 1, device=hazard_logits.device)
    ttf = ttf.long()
    known = torch.where(ttf >= 1, ttf, remaining.long() + 1)  # steps k < known were survived
    z = hazard_logits.float()
    event = (k == ttf[..., None]).float()
    survived = (k < known[..., None]).float()
    return -(event * F.logsigmoid(z) + survived * F.logsigmoid(-z)).sum(-1)


def windows_at(x: torch.Tensor, t: torch.Tensor, window: int) -> torch.Tensor:
    """x [T, E, F], t [B] -> [B, window, E, F] (the window ending at each t), gathered on x's device."""
    offsets = torch.arange(window - 1, -1, -1, device=x.device)
    idx = (t[:, None] - offsets[None, :]).clamp_min(0)
    return x[idx]


class ScoringModel(nn.Module):
    """The model with its topology baked in, for serving: [batch, window, elements, features] -> P(fault)."""

    def __init__(self, model: FaultGNN, adj: Adjacency) -> None:
        super().__init__()
        self.model, self.n = model, adj.n
        self.register_buffer("rows", adj.rows)
        self.register_buffer("cols", adj.cols)
        self.register_buffer("weights", adj.weights)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.sigmoid(self.model(x, Adjacency(self.rows, self.cols, self.weights, self.n)))


def load_model(path) -> tuple[FaultGNN, dict]:
    """A trained model from ``model.pt`` (CPU, eval mode) and its checkpoint record (config, window)."""
    ck = torch.load(path, map_location="cpu", weights_only=False)
    model = FaultGNN(**ck["config"])
    model.load_state_dict(ck["model"])
    model.eval()
    return model, ck


def score_snapshots(
    model: FaultGNN, x: torch.Tensor, adj: Adjacency, ts, window: int, batch: int = 64, bf16: bool = False
) -> torch.Tensor:
    """P(fault) [len(ts), elements] for the snapshots ``ts``, in batches, on ``x``'s device (no grad)."""
    was_training = model.training
    model.eval()
    out = []
    with torch.no_grad():
        for i in range(0, len(ts), batch):
            t = torch.as_tensor(ts[i : i + batch], device=x.device)
            with torch.autocast(x.device.type, dtype=torch.bfloat16, enabled=bf16):
                out.append(torch.sigmoid(model(windows_at(x, t, window), adj).float()))
    model.train(was_training)
    return torch.cat(out) if out else torch.zeros((0, x.shape[1]), device=x.device)


def warm_start(model: FaultGNN, path: str, window: int) -> None:
    """``model`` from the weights of an earlier model of the same shape (the stage checked it: a mismatch here
    means the file changed, and fails the rank)."""
    ck = torch.load(path, map_location="cpu", weights_only=False)
    if ck["config"] != model.config or ck.get("window") != window:
        raise ValueError(f"{path}: a model of {ck['config']}, window {ck.get('window')}; this one is {model.config}")
    model.load_state_dict(ck["model"])


def same_shape(path: Path, n_features: int, cfg) -> str:
    """Why the model in ``path`` cannot start a model of ``n_features`` inputs and the train section ``cfg``
    ("" when it can)."""
    if cfg.hazard_steps:
        return "a hazard model starts from scratch"
    ck = torch.load(path, map_location="cpu", weights_only=False)
    want = FaultGNN(n_features, cfg.hidden, cfg.layers, cfg.dropout, cfg.temporal_graph, 0, 1).config
    if ck["config"] != want or ck.get("window") != cfg.window:
        return f"the champion is a model of {ck['config']} over {ck.get('window')} steps; this run's is {want}"
    return ""
