"""The fault model: a temporal encoder per element followed by message passing over the topology.

Pure PyTorch (no Horovod, no device decisions): ``x`` is [batch, window, elements, features], the
adjacency a sparse, row-normalised [elements, elements] tensor (neighbour mean as a sparse matmul).
"""

from __future__ import annotations

import warnings

import numpy as np
import torch
from torch import nn


def normalised_adjacency(indptr: np.ndarray, indices: np.ndarray, n: int) -> torch.Tensor:
    """Row-normalised sparse adjacency (mean over neighbours) in CSR."""
    deg = np.diff(indptr).astype(np.float32)
    vals = np.repeat(np.divide(1.0, deg, out=np.zeros_like(deg), where=deg > 0), np.diff(indptr))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # "sparse CSR support is in beta"
        return torch.sparse_csr_tensor(
            torch.as_tensor(indptr, dtype=torch.int64),
            torch.as_tensor(indices, dtype=torch.int64),
            torch.as_tensor(vals, dtype=torch.float32),
            size=(n, n),
            check_invariants=False,
        )


class GraphLayer(nn.Module):
    """h' = relu(W_self h + W_nbr mean_{j in N(i)} h_j), with a residual connection."""

    def __init__(self, hidden: int) -> None:
        super().__init__()
        self.self_lin = nn.Linear(hidden, hidden)
        self.nbr_lin = nn.Linear(hidden, hidden, bias=False)
        self.norm = nn.LayerNorm(hidden)

    def forward(self, h: torch.Tensor, adj: torch.Tensor) -> torch.Tensor:
        b, e, d = h.shape
        flat = h.transpose(0, 1).reshape(e, b * d)  # elements first, so one sparse matmul serves the batch
        agg = torch.sparse.mm(adj, flat.float()).reshape(e, b, d).transpose(0, 1).to(h.dtype)
        return self.norm(h + torch.relu(self.self_lin(h) + self.nbr_lin(agg)))


class FaultGNN(nn.Module):
    def __init__(self, n_features: int, hidden: int = 32, layers: int = 2) -> None:
        super().__init__()
        self.inp = nn.Sequential(nn.Linear(n_features, hidden), nn.ReLU())
        self.temporal = nn.GRU(hidden, hidden, batch_first=True)
        self.graph = nn.ModuleList(GraphLayer(hidden) for _ in range(layers))
        self.head = nn.Sequential(nn.Linear(2 * hidden, hidden), nn.ReLU(), nn.Linear(hidden, 1))
        self.config = {"n_features": n_features, "hidden": hidden, "layers": layers}

    def forward(self, x: torch.Tensor, adj: torch.Tensor) -> torch.Tensor:
        b, w, e, f = x.shape
        h = self.inp(x).permute(0, 2, 1, 3).reshape(b * e, w, -1)
        _, last = self.temporal(h)
        local = last[-1].reshape(b, e, -1)
        g = local
        for layer in self.graph:
            g = layer(g, adj)
        return self.head(torch.cat([local, g], dim=-1)).squeeze(-1)  # [batch, elements] logits


def windows_at(x: torch.Tensor, t: torch.Tensor, window: int) -> torch.Tensor:
    """x [T, E, F], t [B] -> [B, window, E, F] (the window ending at each t), gathered on x's device."""
    offsets = torch.arange(window - 1, -1, -1, device=x.device)
    idx = (t[:, None] - offsets[None, :]).clamp_min(0)
    return x[idx]


class ScoringModel(nn.Module):
    """The model with its topology baked in, for serving: [batch, window, elements, features] -> P(fault)."""

    def __init__(self, model: FaultGNN, adj: torch.Tensor) -> None:
        super().__init__()
        self.model = model
        self.register_buffer("adj_dense", adj.to_dense())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.sigmoid(self.model(x, self.adj_dense.to_sparse_csr()))
