"""A sparse gradient (`tf.IndexedSlices`, e.g. the word embedding's: the rows the batch gathered) as each row once.

The gradient of a gathered table is `IndexedSlices` with one row per gathered position, indices repeated. Made dense
(`tf.convert_to_tensor`), it is a `[V, D]` tensor of zeros but for those rows, written, then read by the norm and
the update (the 32,000 x 768 embedding: 98 MB, three passes, for 1,024 rows). `summed_rows` keeps it at the rows:
each distinct index once with its rows summed, in static shapes (sort, segment sums; XLA compiles it), for
`loop.squared_norm` and the AdamW update (`optimization.XLNetAdamW.update_step`), which decay `m` and `v`
densely and add the rows' terms at their indices: the numbers of the dense gradient's update.
"""

from __future__ import annotations

import tensorflow as tf


def summed_rows(gradient: tf.IndexedSlices):
    """`gradient` (`values [n, ...]` at `indices [n]`, repeats allowed) -> `(indices [n], rows [n, ...])`: the first
    slots hold each distinct index once (ascending) with the sum of its rows; the remaining slots index 0 with
    zero rows, which add nothing where they are scattered."""
    indices = gradient.indices
    order = tf.argsort(indices, stable=True)
    ascending = tf.gather(indices, order)
    values = tf.gather(gradient.values, order)
    previous = tf.concat([ascending[:1] - 1, ascending[:-1]], 0)
    segment = tf.cumsum(tf.cast(tf.not_equal(ascending, previous), tf.int32)) - 1  # [n]: slot of each row
    n = tf.shape(indices)[0]
    rows = tf.math.unsorted_segment_sum(values, segment, n)
    distinct = tf.math.unsorted_segment_max(ascending, segment, n)  # empty slots: the dtype's lowest value
    return tf.maximum(distinct, tf.zeros_like(distinct)), rows


def scaled(gradient, factor):
    """`gradient * factor` for a dense gradient or `IndexedSlices` (its values scaled)."""
    if isinstance(gradient, tf.IndexedSlices):
        return tf.IndexedSlices(gradient.values * tf.cast(factor, gradient.values.dtype), gradient.indices,
                                gradient.dense_shape)
    return gradient * tf.cast(factor, gradient.dtype)


def squared_values(gradient):
    """What a gradient's sum of squares squares: a dense gradient itself, an `IndexedSlices` its summed rows (the
    dense gradient's nonzero rows, each once)."""
    return summed_rows(gradient)[1] if isinstance(gradient, tf.IndexedSlices) else gradient


def sum_of_squares(gradient):
    """The sum of a gradient's squares in float32."""
    return tf.reduce_sum(tf.square(tf.cast(squared_values(gradient), tf.float32)))
