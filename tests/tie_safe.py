"""Comparisons of model outputs that give the same verdict on any x86 CPU kind, idle or loaded.

Two computations of the same logits (another graph, another CPU kind's kernels) agree to ~1e-6, so where two
classes are nearer than that their argmax may differ: an argmax is compared only where it cannot tie.
"""

import numpy as np


NEAR_TIE = 1e-4


def accuracy_bounds(scores, labels, mask=None, tol: float = NEAR_TIE):
    """`(lowest, highest)` accuracy of `scores [..., C]` against `labels [...]` (over `mask`'s positions) that
    any computation of `scores` to within `tol` can give: a position counts surely right when its label's
    score beats every other by more than `tol`, possibly right when it is within `tol` of the best."""
    scores = np.asarray(scores, np.float64)
    labels = np.asarray(labels).astype(np.int64)
    own = np.take_along_axis(scores, labels[..., None], -1)[..., 0]
    others = np.where(np.arange(scores.shape[-1]) == labels[..., None], -np.inf, scores).max(-1)
    surely = own > others + tol
    possibly = own >= others - tol
    if mask is not None:
        mask = np.asarray(mask, bool)
        surely, possibly = surely[mask], possibly[mask]
    return float(np.mean(surely)), float(np.mean(possibly))


def assert_accuracy_matches(accuracy, scores, labels, mask=None, tol: float = NEAR_TIE):
    """`accuracy` (measured elsewhere, e.g. by Keras `evaluate`) is one `scores` allow, near-ties either way."""
    low, high = accuracy_bounds(scores, labels, mask, tol)
    assert low - 1e-6 <= accuracy <= high + 1e-6, (accuracy, low, high)


def assert_no_near_ties(values, tol: float = NEAR_TIE):
    """Precondition of comparing the order (argmax, top-k indices) of `values [..., K]` between two
    implementations: no two of the last axis's values are within `tol` (then any computation to ~1e-6 orders
    them alike, on any CPU kind)."""
    v = np.sort(np.asarray(values, np.float64), -1)
    gaps = np.diff(v, axis=-1)
    assert gaps.size == 0 or gaps.min() > tol, f"near-tied values (gap {gaps.min():.2e}): choose other inputs"
