"""RACE's metrics: accuracy overall and per level, and the signs of a multiple-choice head stuck at chance."""

import numpy as np
from scipy import special

from xlnet_tf.metrics import classification as metrics


def race_metrics(labels, logits, levels, weights):
    """Accuracy over all real questions and per level (middle = 0, high = 1) where present; and what tells a head
    that learns from one stuck at chance: `loss` (mean cross-entropy; log 4 = 1.386 for uniform scores),
    `logit_std` (the mean over questions of the standard deviation of the 4 choices' logits: about 0 when the
    scores ignore the choice) and `top_letter_share` (the share of the most often predicted letter)."""
    predictions = logits.argmax(-1)
    real = weights > 0
    out = {"all": metrics.classification_metrics(labels, predictions, weights)}
    for name, level in (("middle", 0), ("high", 1)):
        mask = (weights > 0) & (levels == level)
        if mask.any():
            out[name] = metrics.classification_metrics(labels, predictions, mask.astype("float32"))
    flat = {"accuracy": out["all"]["accuracy"], "num_examples": out["all"]["num_examples"]}
    if real.any():
        log_probs = special.log_softmax(logits[real].astype(np.float64), axis=-1)
        flat["loss"] = float(-np.mean(log_probs[np.arange(int(real.sum())), labels[real].astype(int)]))
        flat["logit_std"] = float(np.mean(np.std(logits[real].astype(np.float64), axis=-1)))
        flat["top_letter_share"] = float(np.bincount(predictions[real], minlength=logits.shape[-1]).max()
                                         / real.sum())
    for name in ("middle", "high"):
        if name in out:
            flat[f"accuracy_{name}"] = out[name]["accuracy"]
            flat[f"num_examples_{name}"] = out[name]["num_examples"]
    return flat
