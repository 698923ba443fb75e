"""A gathered table's gradient kept as rows (training/gradient_rows.py): the same norm and the same AdamW update as
the dense gradient, eagerly and compiled."""

import keras
import numpy as np
import pytest
import tensorflow as tf

from xlnet_tf.training import gradient_rows
from xlnet_tf.training.optimization import XLNetAdamW


def _slices(seed=0, vocab=50, rows=24, width=6):
    rng = np.random.RandomState(seed)
    indices = tf.constant(rng.randint(0, 8, rows) * 5 + 1, tf.int32)  # repeats, and never index 0
    values = tf.constant(rng.randn(rows, width).astype(np.float32))
    return tf.IndexedSlices(values, indices, tf.constant([vocab, width]))


@pytest.mark.parametrize("compiled", [False, True])
def test_summed_rows_are_the_dense_gradient(compiled):
    grad = _slices()
    fn = tf.function(gradient_rows.summed_rows, jit_compile=True) if compiled else gradient_rows.summed_rows
    indices, rows = fn(grad)
    dense = tf.convert_to_tensor(grad).numpy()
    rebuilt = np.zeros_like(dense)
    np.add.at(rebuilt, indices.numpy(), rows.numpy())
    np.testing.assert_allclose(rebuilt, dense, rtol=1e-6, atol=1e-6)
    distinct = np.unique(grad.indices.numpy())
    assert list(indices.numpy()[:len(distinct)]) == list(distinct)  # each index once, ascending
    assert not rows.numpy()[len(distinct):].any() and not indices.numpy()[len(distinct):].any()
    np.testing.assert_allclose(gradient_rows.sum_of_squares(grad).numpy(), np.square(dense).sum(), rtol=1e-5)


@pytest.mark.parametrize("compiled", [False, True])
def test_the_update_from_rows_is_the_dense_update(compiled):
    """Two AdamW steps (moments decayed where no row is, weight decay everywhere) from the rows and from the dense
    gradient: the same moments and weights to float32 rounding."""
    results = []
    for as_rows in (True, False):
        table = keras.Variable(np.random.RandomState(1).randn(50, 6).astype(np.float32), name="table")
        optimizer = XLNetAdamW(learning_rate=0.01, weight_decay_rate=0.01)
        optimizer.build([table])

        def step(grad):
            optimizer.apply_gradients([(grad if as_rows else tf.convert_to_tensor(grad), table)])

        step = tf.function(step, jit_compile=True) if compiled else step
        for seed in (0, 1):
            step(_slices(seed))
        results.append([table.numpy(), *(v.numpy() for v in optimizer.variables if v.shape == table.shape)])
    for a, b in zip(*results):
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7)
    assert len(results[0]) == 3  # the table, m and v compared
