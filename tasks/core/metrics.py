"""Classification metrics for fault prediction, from one sort of the scores on the scores' own device (NumPy, or
CuPy for scores on the GPU).

The curves are scikit-learn's (``precision_recall_curve``, ``average_precision_score``, ``roc_auc_score``; the
tests hold them to it), computed once per score vector: at millions of held-out rows its input validation and the
three separate sorts cost seconds per model.
"""

from __future__ import annotations

import numpy as np

from tasks.core.arrays import array_module, to_host


def from_torch(t):
    """A torch tensor as a metrics array: on the GPU a CuPy array sharing its memory (DLPack), else NumPy."""
    t = t.float().contiguous()
    if t.is_cuda:
        try:
            import cupy

            return cupy.from_dlpack(t)
        except ImportError:  # a CUDA torch without CuPy
            pass
    return t.cpu().numpy()


def ranking_curve(y, score):
    """(false positives, true positives, threshold) at each distinct score, highest first: scikit-learn's binary
    classification curve, in one sort on the device ``score`` lives on."""
    xp = array_module(score)
    y = xp.asarray(y)
    order = xp.argsort(score)[::-1]  # ties' order is irrelevant: only each run of equal scores' end is kept
    s = score[order]
    ends = xp.concatenate([xp.nonzero(xp.diff(s))[0], xp.asarray([s.size - 1])])
    tps = xp.cumsum(y[order].astype(xp.float64))[ends]
    return 1 + ends - tps, tps, s[ends]


def _pr_curve(fps, tps, thr):
    """precision, recall (one more point each: 1 and 0) and thresholds, recall decreasing, as scikit-learn."""
    xp = array_module(tps)
    one, zero = xp.asarray([1.0]), xp.asarray([0.0])
    precision = tps / (tps + fps)
    recall = tps / tps[-1] if float(tps[-1]) > 0 else xp.ones_like(tps)
    return xp.concatenate([precision[::-1], one]), xp.concatenate([recall[::-1], zero]), thr[::-1]


def precision_recall(y, score, points: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """scikit-learn's ``precision_recall_curve`` points (precision, recall; recall decreasing), on the host; with
    ``points``, at most that many of them, evenly spaced along the curve and both ends kept (:func:`thin`), chosen
    where the curve was computed: a plot's few thousand points cross to the host, not millions."""
    prec, rec, _ = _pr_curve(*ranking_curve(y, score))
    if points is not None:
        keep = array_module(prec).asarray(thin(len(prec), points))
        prec, rec = prec[keep], rec[keep]
    return to_host(prec), to_host(rec)


def thin(n: int, points: int = 2000) -> np.ndarray:
    """At most ``points`` indices of a curve of ``n`` points, evenly spaced, both ends kept."""
    return np.unique(np.linspace(0, n - 1, min(n, points)).round().astype(np.int64)) if n else np.zeros(0, np.int64)


def confusion_counts(y, predicted) -> np.ndarray:
    """The 2x2 confusion matrix of binary labels (rows: true 0, 1; columns: predicted 0, 1), scikit-learn's
    ``confusion_matrix`` with ``labels=[0, 1]``, counted on the device the arrays live on."""
    xp = array_module(predicted)
    cells = 2 * xp.asarray(y).astype(xp.int64) + xp.asarray(predicted).astype(xp.int64)
    return to_host(xp.bincount(cells, minlength=4)).reshape(2, 2)


def _two_classes(y) -> bool:
    return y.size > 0 and bool(y.min() != y.max())


def _average_precision(prec, rec) -> float:
    return float(-(array_module(prec).diff(rec) * prec[:-1]).sum())


def pr_auc(y, score) -> float:
    """Average precision (scikit-learn's PR-AUC); NaN where ``y`` has one class only."""
    xp = array_module(score)
    y = xp.asarray(y)
    if not _two_classes(y):
        return float("nan")
    prec, rec, _ = _pr_curve(*ranking_curve(y, score))
    return _average_precision(prec, rec)


def classification_metrics(y, score, precision_target: float) -> dict[str, float]:
    """PR-AUC, ROC-AUC, the best F1 and its threshold, recall at ``precision_target``, from one sort."""
    xp = array_module(score)
    y = xp.asarray(y).astype(xp.int64)
    if y.size == 0:
        nan = float("nan")
        return {
            "pr_auc": nan,
            "roc_auc": nan,
            "f1": 0.0,
            "threshold": 0.5,
            f"recall_at_p{int(precision_target * 100)}": 0.0,
            "positives": 0,
            "samples": 0,
        }
    fps, tps, thresholds = ranking_curve(y, score)
    prec, rec, thr = _pr_curve(fps, tps, thresholds)
    f1 = xp.where(prec + rec > 0, 2 * prec * rec / xp.where(prec + rec > 0, prec + rec, 1), 0.0)
    best = int(xp.argmax(f1[:-1])) if len(thr) else 0
    ok = prec[:-1] >= precision_target
    positives = int(y.sum())
    roc = float("nan")
    if 0 < positives < len(y):
        tpr = xp.concatenate([xp.asarray([0.0]), tps / tps[-1]])
        fpr = xp.concatenate([xp.asarray([0.0]), fps / fps[-1]])
        roc = float(((fpr[1:] - fpr[:-1]) * (tpr[1:] + tpr[:-1])).sum() / 2)
    return {
        "pr_auc": _average_precision(prec, rec) if _two_classes(y) else float("nan"),
        "roc_auc": roc,
        "f1": float(f1[best]) if len(thr) else 0.0,
        "threshold": float(thr[best]) if len(thr) else 0.5,
        f"recall_at_p{int(precision_target * 100)}": float(rec[:-1][ok].max()) if bool(ok.any()) else 0.0,
        "positives": positives,
        "samples": int(len(y)),
    }


def lead_times(minutes_to_fault: np.ndarray, fault_key: np.ndarray, alerted: np.ndarray) -> np.ndarray:
    """Per fault (rows sharing ``fault_key``), the earliest warning in minutes before the onset, ascending."""
    m = np.asarray(minutes_to_fault, np.float64)
    keep = np.asarray(alerted, bool) & ~np.isnan(m)
    if not keep.any():
        return np.zeros(0)
    keys, which = np.unique(np.asarray(fault_key)[keep], return_inverse=True)
    leads = np.zeros(len(keys))
    np.maximum.at(leads, which, m[keep])
    return np.sort(leads)
