"""Evaluation's reference models: a tuned gradient-boosted tree (XGBoost, on the GPU where one is usable) and the
oracle, the same tree on the simulator's hidden state (the ceiling any model of the KPIs can hope to reach).

Tuning and early stopping use the time-ordered validation window only; the test window is never looked at.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import scipy.sparse as sp

# The small grid the tree is tuned over (depth and leaf size trade variance for bias on these correlated rows); the
# learning rate is fixed and the number of rounds comes from early stopping.
TREE_GRID = (
    {"max_depth": 4, "min_child_weight": 1.0},
    {"max_depth": 6, "min_child_weight": 5.0},
    {"max_depth": 8, "min_child_weight": 20.0},
)
LEARNING_RATE = 0.08
MAX_ROUNDS, PATIENCE, FIXED_ROUNDS = 1000, 20, 200
# Where the training rows are many, the grid point is chosen on a seeded TUNE_SHARE of them (each point stopped
# early on the whole validation window), and only the chosen point is fitted on them all: 3 x 0.25 + 1 fits' worth
# of rows instead of 3 (the full grid's cost grew faster than the rows: docs/BENCHMARKS.md, the scale curve).
TUNE_MIN_ROWS, TUNE_SHARE = 4_000_000, 0.25


CHUNK_ROWS = 1 << 24  # rows handed to XGBoost at a time: one batch below this, as a plain array would be


@dataclass
class Rows:
    """The rows ``idx`` (indices on the matrix's device; all rows where None) of the matrix ``x``, not copied:
    XGBoost is handed ``CHUNK_ROWS`` of them at a time, so the copy is a chunk, not every selected row."""

    x: Any
    idx: Any = None

    def __len__(self) -> int:
        return int(self.x.shape[0] if self.idx is None else len(self.idx))

    def chunks(self):
        for a in range(0, len(self), CHUNK_ROWS):
            yield a, (self.x[a : a + CHUNK_ROWS] if self.idx is None else self.x[self.idx[a : a + CHUNK_ROWS]])


def quantile_matrix(rows: Rows, y, ref=None):
    """XGBoost's quantised matrix of ``rows`` and their labels ``y`` (on the rows' device), fed a chunk at a time
    through its DataIter (one chunk gives the same matrix as the array itself)."""
    import xgboost as xgb

    class Feed(xgb.DataIter):
        def __init__(self) -> None:
            self.parts = None
            super().__init__()

        def next(self, input_data) -> bool:
            self.parts = self.parts or rows.chunks()
            a, x = next(self.parts, (None, None))
            if x is None:
                return False
            input_data(data=x, label=y[a : a + len(x)])
            return True

        def reset(self) -> None:
            self.parts = None

    return xgb.QuantileDMatrix(Feed(), ref=ref)


@dataclass
class Tree:
    """A fitted booster and how it was chosen: its grid point, rounds, device and the validation score."""

    booster: object
    params: dict
    n_iter_: int
    device: str
    val_aucpr: float
    tuned_rows: int = 0  # the training rows the grid point was chosen on

    def predict_proba(self, x) -> np.ndarray:
        """[P(no fault), P(fault)] per row of ``x`` (NumPy, or CuPy: predicted where it lives, returned on the
        host; or ``Rows`` of either, a chunk at a time)."""
        import xgboost as xgb

        if isinstance(x, Rows):
            parts = [self.predict_proba(chunk)[:, 1] for _, chunk in x.chunks()]
            p = np.concatenate(parts) if parts else np.zeros(0)
        elif hasattr(x, "__cuda_array_interface__"):
            p = self.booster.inplace_predict(x, iteration_range=(0, self.n_iter_)).get()
        else:
            p = self.booster.predict(xgb.DMatrix(x), iteration_range=(0, self.n_iter_))
        return np.column_stack([1 - p, p])


def tree_device(requested: str = "auto") -> str:
    """``cuda`` where XGBoost was built with CUDA and a GPU is visible (``auto``), else ``cpu``."""
    if requested != "auto":
        return requested
    import xgboost as xgb

    if not xgb.build_info().get("USE_CUDA"):
        return "cpu"
    try:
        import torch

        return "cuda" if torch.cuda.is_available() else "cpu"
    except ImportError:  # pragma: no cover - torch is a dependency
        return "cpu"


def _params(point: dict, seed: int, device: str) -> dict:
    return {
        "objective": "binary:logistic",
        "eval_metric": "aucpr",
        "tree_method": "hist",
        "learning_rate": LEARNING_RATE,
        "seed": seed,
        "device": device,
        **point,
    }


def fit_tree(x, y, xv, yv, seed: int, device: str = "auto") -> Tree:
    """XGBoost on the training rows ``x``, ``y``: each grid point stopped early (patience ``PATIENCE``) on the
    validation window's rows ``xv``, ``yv``, the one with the best validation PR-AUC kept. Without validation rows:
    the middle grid point for a fixed ``FIXED_ROUNDS`` (nothing to tune on). ``x`` and ``xv`` may be CuPy arrays
    (the DMatrix is then built in GPU memory) and either may be ``Rows`` of a larger matrix."""
    import xgboost as xgb

    from tasks.core.arrays import array_module

    x, xv = (a if isinstance(a, Rows) else Rows(a) for a in (x, xv))
    device, xp = tree_device(device), array_module(x.x)
    y, yv = xp.asarray(y), xp.asarray(yv)
    dtrain = quantile_matrix(x, y)
    if len(yv) == 0 or yv.min() == yv.max():  # nothing to stop on or rank by
        booster = xgb.train(_params(TREE_GRID[1], seed, device), dtrain, FIXED_ROUNDS)
        return Tree(booster, TREE_GRID[1], FIXED_ROUNDS, device, float("nan"))
    dval = quantile_matrix(xv, yv, ref=dtrain)
    (tune, tune_val), tuned_rows = tuning_rows(x, y, seed, (dtrain, dval), xv, yv)
    best = None
    for point in TREE_GRID:
        tree = _fit_point(point, seed, device, tune, tune_val)
        if best is None or tree.val_aucpr > best.val_aucpr:
            best = tree
    if tune is not dtrain:  # the chosen point on every training row
        best = _fit_point(best.params, seed, device, dtrain, dval)
    best.tuned_rows = tuned_rows
    return best


def _fit_point(point: dict, seed: int, device: str, dtrain, dval) -> Tree:
    import xgboost as xgb

    booster = xgb.train(
        _params(point, seed, device),
        dtrain,
        MAX_ROUNDS,
        evals=[(dval, "val")],
        early_stopping_rounds=PATIENCE,
        verbose_eval=False,
    )
    return Tree(booster, point, int(booster.best_iteration) + 1, device, float(booster.best_score))


def tuning_rows(x: Rows, y, seed: int, full: tuple[Any, Any], xv: Rows, yv) -> tuple[tuple[Any, Any], int]:
    """The quantised training and validation matrices the grid is searched on, and the training rows in it: ``full``
    (every row's, the validation's) below ``TUNE_MIN_ROWS`` training rows, else a seeded ``TUNE_SHARE`` of the
    training rows (in their order, with the full matrix's bins) and the validation rows again (XGBoost evaluates
    only a matrix made with the one it trains on as reference)."""
    n = len(x)
    if n < TUNE_MIN_ROWS:
        return full, n
    from tasks.core.arrays import array_module

    xp = array_module(x.x)
    keep = np.sort(np.random.default_rng(seed).choice(n, size=int(n * TUNE_SHARE), replace=False))
    at = xp.asarray(keep)
    share = quantile_matrix(Rows(x.x, at if x.idx is None else x.idx[at]), y[at], ref=full[0])
    return (share, quantile_matrix(xv, yv, ref=share)), len(keep)


# ---- the oracle: the simulator's hidden state --------------------------------------------------------------------

HIDDEN_OWN = ("drift", "rate", "cap", "visible_drift", "load", "links_down")  # the element's own state
HIDDEN = (*HIDDEN_OWN, "faulted_neighbours")


def read_hidden(raw: Path) -> dict | None:
    """The simulator's hidden state as [step, element] arrays over the whole run (``start_us``: the first step),
    or None where the raw exports carry none (real NMS exports, older simulations)."""
    index = Path(raw) / "hidden" / "hidden.json"
    if not index.is_file():
        return None
    meta = json.loads(index.read_text())
    days = [np.load(Path(raw) / "hidden" / f) for f in meta["files"]]
    out = {k: np.concatenate([d[k] for d in days]) for k in HIDDEN if k in days[0]}
    return {**out, "start_us": int(meta["start_us"]), "step_us": int(meta["step_us"]), "elements": meta["elements"]}


def oracle_features(hidden: dict, adj: sp.csr_matrix, t_abs: np.ndarray, e: np.ndarray, full: bool) -> np.ndarray:
    """Per row (absolute step ``t_abs``, element ``e``): the element's own state (its degradation episode, what
    its KPIs show of it, its rerouted load and links down), and with ``full`` its neighbourhood's too (faulted
    neighbours, their summed drift, how many are hot, and the same two hops away; their load)."""
    own = [hidden[k][t_abs, e] for k in HIDDEN_OWN if k in hidden]
    if not full:
        return np.column_stack(own).astype(np.float32)

    def over_nbrs(x: np.ndarray) -> np.ndarray:  # [step, element]: summed over each element's neighbours
        return np.asarray((adj @ x.T).T)

    drift = hidden["drift"]
    nbr_hot = over_nbrs((drift > 0.6).astype(np.float32))
    down = hidden["faulted_neighbours"].astype(np.float32)
    extra = [down, over_nbrs(drift), nbr_hot, over_nbrs(nbr_hot), over_nbrs(down)]  # 2 hops: faults, hot drift
    if "load" in hidden:
        extra.append(over_nbrs(hidden["load"]))
    return np.column_stack(own + [x[t_abs, e] for x in extra]).astype(np.float32)


def oracle_scores(hidden: dict, topo, df, windows, seed: int, device: str = "auto") -> dict[str, dict]:
    """The oracles' scores on the rows ``span`` selects: the tuned tree fitted (on the ``train`` rows, stopped on the
    ``val`` rows) to the element's own hidden state (``oracle_own``) and to the full state, neighbours included
    (``oracle``). The gap between the two is the graph's share of the signal. ``df``: the rows' step (``t_us``)
    and element (``e_idx``, the topology's order), and ``label``."""
    train, val, span = windows
    indptr, indices = topo.csr()
    adj = sp.csr_matrix((np.ones(len(indices), np.float32), indices, indptr), shape=(topo.n, topo.n))
    t_abs = (df["t_us"].to_numpy() - hidden["start_us"]) // hidden["step_us"]
    at = {e: i for i, e in enumerate(hidden["elements"])}
    e_abs = np.array([at.get(e, -1) for e in topo.element_ids], np.int64)[df["e_idx"].to_numpy()]
    if (t_abs < 0).any() or (t_abs >= len(hidden["drift"])).any() or (e_abs < 0).any():
        raise ValueError("the simulator's hidden state does not cover every evaluated row (another simulation?)")
    y = df["label"].to_numpy()
    out = {}
    for name, full in (("oracle_own", False), ("oracle", True)):
        x = oracle_features(hidden, adj, t_abs, e_abs, full)
        tree = fit_tree(x[train], y[train], x[val], y[val], seed, device)
        out[name] = {"tree": tree, "scores": tree.predict_proba(x[span])[:, 1]}
    return out


STACK_WEIGHTS = np.linspace(0.0, 1.0, 11)


def stack_scores(model: np.ndarray, tree: np.ndarray, y: np.ndarray, val: np.ndarray, xp=np) -> tuple[np.ndarray, dict]:
    """The GBDT + GNN stack: ``w * tree + (1 - w) * model`` (both probabilities), ``w`` the grid point with the best
    PR-AUC on the validation rows ``val`` alone (ties: the larger tree weight, the simpler model). Where
    validation cannot rank (no rows, one class), the tree alone. ``xp``: where the weights are ranked (CuPy: on the
    GPU)."""
    from tasks.core.metrics import pr_auc

    yv = y[val]
    if len(yv) == 0 or yv.min() == yv.max():
        return tree.copy(), {"tree_weight": 1.0, "val_pr_auc": float("nan")}
    yd, tv, mv = (xp.asarray(a) for a in (yv, tree[val], model[val]))
    scored = [(pr_auc(yd, w * tv + (1 - w) * mv), w) for w in STACK_WEIGHTS]
    best, w = max(scored, key=lambda s: (s[0], s[1]))
    return w * tree + (1 - w) * model, {"tree_weight": float(w), "val_pr_auc": best}
