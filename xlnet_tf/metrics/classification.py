"""Evaluation metrics of the fine-tuning tasks (scikit-learn / scipy), over real examples only."""

from __future__ import annotations

from typing import Dict, Optional, Sequence

import numpy as np


def classification_metrics(labels: np.ndarray, predictions: np.ndarray,
                           weights: Optional[np.ndarray] = None,
                           extra: Sequence[str] = ()) -> Dict[str, float]:
    """`accuracy`, plus any of `f1` (binary, positive class 1), `macro_f1`, `mcc` (Matthews)."""
    from sklearn import metrics

    labels, predictions = _real(labels, weights), _real(predictions, weights)
    out = {"accuracy": float(metrics.accuracy_score(labels, predictions)), "num_examples": int(len(labels))}
    if "f1" in extra:
        out["f1"] = float(metrics.f1_score(labels, predictions, pos_label=1, average="binary",
                                           zero_division=0))
    if "macro_f1" in extra:
        out["macro_f1"] = float(metrics.f1_score(labels, predictions, average="macro", zero_division=0))
    if "mcc" in extra:
        out["mcc"] = float(metrics.matthews_corrcoef(labels, predictions))
    return out


def regression_metrics(labels: np.ndarray, scores: np.ndarray,
                       weights: Optional[np.ndarray] = None) -> Dict[str, float]:
    """`pearson`, `spearman` (scipy) and `mse`."""
    from scipy import stats

    labels, scores = _real(labels, weights).astype(np.float64), _real(scores, weights).astype(np.float64)
    return {"pearson": float(stats.pearsonr(labels, scores)[0]),
            "spearman": float(stats.spearmanr(labels, scores)[0]),
            "mse": float(np.mean((labels - scores) ** 2)), "num_examples": int(len(labels))}


def _real(values: np.ndarray, weights: Optional[np.ndarray]) -> np.ndarray:
    values = np.asarray(values)
    return values if weights is None else values[np.asarray(weights) > 0]
