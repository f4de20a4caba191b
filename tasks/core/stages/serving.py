"""The served fault predictor: the model the registry holds and a NOC scores with.

Evaluation writes it as a plain directory beside its metrics (``served/``), so a run's predictor can be loaded
with or without MLflow:

- ``gnn.pt``: the trained graph model (the checkpoint the train stage published);
- ``served.npz``: the adjacency the model was trained over and each feature's train-window mean and std;
- ``tree.ubj``: the tuned XGBoost tree, where the stack gives it weight;
- ``served.json``: what it serves (``stack`` or the graph ``model`` alone), the tree's weight and rounds, the
  feature names in order, the window, and the held-out metrics of what is served.

The input is what the features stage writes, not z-scores: raw feature windows ``[batch, window, elements,
features]`` float32, NaN where a value is missing. The output is P(fault within the label horizon) per element,
``w * tree(last step) + (1 - w) * gnn(window)``: the stack evaluation scored, so the registry serves the figures
the run reports (the better model is the default).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import numpy as np

SERVED = "served.json"


def write_served(
    out: Path,
    train_dir: Path,
    names: list[str],
    tree: Any,
    tree_weight: float,
    metrics: dict[str, float],
    network: str = "",
) -> dict[str, Any]:
    """The predictor's directory ``out`` from the train stage's outputs and evaluation's tree and stack weight;
    returns its description (``served.json``)."""
    out.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(train_dir / "model.pt", out / "gnn.pt")
    d = np.load(train_dir / "data.npz")
    np.savez(out / "served.npz", indptr=d["indptr"], indices=d["indices"], mean=d["mean"], std=d["std"])
    served = {
        "kind": "stack" if tree_weight > 0 else "model",
        "tree_weight": float(tree_weight),
        "tree_iterations": int(tree.n_iter_) if tree_weight > 0 else 0,
        "features": list(names),
        "network": network,
        "elements": len(d["indptr"]) - 1,  # not X's shape: reading it would load the whole [T, E, F] tensor
        "metrics": {k: float(v) for k, v in metrics.items()},
    }
    if tree_weight > 0:
        tree.booster.save_model(out / "tree.ubj")
    (out / SERVED).write_text(json.dumps(served, indent=1))
    return served


class FaultPredictor:
    """A served predictor loaded from its directory (see the module doc); ``predict(windows)`` -> [batch, elements]."""

    def __init__(self, path: Path) -> None:
        from tasks.core.training.model import ScoringModel, load_model, normalised_adjacency

        path = Path(path)
        self.spec = json.loads((path / SERVED).read_text())
        model, ck = load_model(path / "gnn.pt")
        d = np.load(path / "served.npz")
        self.window, self.mean, self.std = int(ck["window"]), d["mean"], d["std"]
        self.gnn = ScoringModel(model, normalised_adjacency(d["indptr"], d["indices"], self.spec["elements"])).eval()
        self.tree = None
        if self.spec["tree_weight"] > 0:
            import xgboost as xgb

            self.tree = xgb.Booster()
            self.tree.load_model(path / "tree.ubj")

    @property
    def shape(self) -> tuple[int, int, int]:
        """(window, elements, features) of one input window."""
        return self.window, self.spec["elements"], len(self.spec["features"])

    def predict(self, windows: np.ndarray) -> np.ndarray:
        import torch

        x = np.asarray(windows, dtype=np.float32)
        if x.ndim == 4 and x.shape[2] != self.shape[1]:
            raise ValueError(
                f"this model serves the network {self.spec.get('network') or '?'!r} of {self.shape[1]} elements; "
                f"the input has {x.shape[2]}: load the champion registered for the input's network"
            )
        if x.ndim != 4 or tuple(x.shape[1:]) != self.shape:
            raise ValueError(
                f"input of shape {list(x.shape)}: expected [batch, window, elements, features] = [batch, "
                f"{', '.join(map(str, self.shape))}] raw feature values (NaN where missing), features in the order "
                f"of served.json"
            )
        z = np.nan_to_num((x.astype(np.float64) - self.mean) / self.std, nan=0.0, posinf=0.0, neginf=0.0)
        with torch.no_grad():
            p = self.gnn(torch.from_numpy(z.astype(np.float32))).numpy().astype(np.float64)
        w = self.spec["tree_weight"]
        if self.tree is None:
            return p
        import xgboost as xgb

        b, _, e, f = x.shape
        last = self.tree.predict(
            xgb.DMatrix(x[:, -1].reshape(b * e, f)), iteration_range=(0, self.spec["tree_iterations"])
        )
        return w * last.reshape(b, e).astype(np.float64) + (1 - w) * p


def raw_grid(features_dir: Path, element_ids: list[str], names: list[str], times: np.ndarray) -> np.ndarray:
    """[len(times), elements, features] float32 raw feature values from a features table (NaN where no row):
    what ``FaultPredictor.predict`` takes, a window at a time."""
    import pandas as pd

    df = pd.read_parquet(features_dir, columns=["element_id", "timestamp", *names])
    t = np.searchsorted(times, pd.DatetimeIndex(df["timestamp"]).as_unit("us").asi8)
    e = df["element_id"].map({x: i for i, x in enumerate(element_ids)}).to_numpy()
    keep = (t < len(times)) & ~pd.isna(e)
    keep[keep] = times[t[keep]] == pd.DatetimeIndex(df["timestamp"][keep]).as_unit("us").asi8
    grid = np.full((len(times), len(element_ids), len(names)), np.nan, dtype=np.float32)
    grid[t[keep], e[keep].astype(np.int64)] = df.loc[keep, names].to_numpy(np.float32)
    return grid
