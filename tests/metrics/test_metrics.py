import numpy as np
import pytest

from xlnet_tf.metrics import classification as metrics


def test_classification_metrics_use_only_real_examples():
    labels = np.array([1, 0, 1, 1, 0, 1])
    preds = np.array([1, 0, 0, 1, 1, 0])
    weights = np.array([1, 1, 1, 1, 1, 0])  # the last one is padding
    out = metrics.classification_metrics(labels, preds, weights, extra=("f1", "mcc", "macro_f1"))
    assert out["num_examples"] == 5 and out["accuracy"] == pytest.approx(3 / 5)
    tp, fp, fn = 2, 1, 1
    assert out["f1"] == pytest.approx(2 * tp / (2 * tp + fp + fn))
    tn = 1
    mcc = (tp * tn - fp * fn) / np.sqrt((tp + fp) * (tp + fn) * (tn + fp) * (tn + fn))
    assert out["mcc"] == pytest.approx(mcc)


def test_regression_metrics():
    labels = np.array([0.0, 1.0, 2.0, 3.0, 9.0])
    scores = np.array([0.1, 2.5, 0.9, 2.9, 100.0])
    out = metrics.regression_metrics(labels, scores, np.array([1, 1, 1, 1, 0]))
    assert out["spearman"] == pytest.approx(0.8)
    assert out["pearson"] == pytest.approx(np.corrcoef(labels[:4], scores[:4])[0, 1])
