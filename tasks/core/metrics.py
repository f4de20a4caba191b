"""Classification metrics for fault prediction (pure NumPy / scikit-learn)."""

from __future__ import annotations

import numpy as np


def pr_auc(y: np.ndarray, score: np.ndarray) -> float:
    from sklearn.metrics import average_precision_score

    y = np.asarray(y)
    if y.size == 0 or y.min() == y.max():
        return float("nan")
    return float(average_precision_score(y, score))


def classification_metrics(y: np.ndarray, score: np.ndarray, precision_target: float) -> dict[str, float]:
    from sklearn.metrics import precision_recall_curve, roc_auc_score

    y = np.asarray(y).astype(int)
    prec, rec, thr = precision_recall_curve(y, score)
    f1 = np.divide(2 * prec * rec, prec + rec, out=np.zeros_like(prec), where=(prec + rec) > 0)
    best = int(np.argmax(f1[:-1])) if len(thr) else 0
    ok = prec[:-1] >= precision_target
    return {
        "pr_auc": pr_auc(y, score),
        "roc_auc": float(roc_auc_score(y, score)) if 0 < y.sum() < len(y) else float("nan"),
        "f1": float(f1[best]) if len(thr) else 0.0,
        "threshold": float(thr[best]) if len(thr) else 0.5,
        f"recall_at_p{int(precision_target * 100)}": float(rec[:-1][ok].max()) if ok.any() else 0.0,
        "positives": int(y.sum()),
        "samples": int(len(y)),
    }


def lead_times(minutes_to_fault: np.ndarray, fault_key: np.ndarray, alerted: np.ndarray) -> np.ndarray:
    """Per fault (rows sharing ``fault_key``), the earliest warning in minutes before the onset."""
    leads = {}
    for key, m, a in zip(fault_key, minutes_to_fault, alerted):
        if a and not np.isnan(m):
            leads[key] = max(leads.get(key, 0.0), float(m))
    return np.array(sorted(leads.values()))
