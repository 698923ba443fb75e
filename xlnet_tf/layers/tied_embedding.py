"""The word embedding of a language model read once for both of its uses: the rows the backbone gathers and the whole
table the tied LM head multiplies by.

Read twice (a gather and a cast for the head), the table's gradient is summed by TensorFlow's tape as the head's
dense gradient plus the gathered rows made dense first: `UnsortedSegmentSum` writes the rows into a zero
`[n_token, D]` table, then `AddN` reads both tables and writes a third, two passes over the whole table per step
(4 x 768 pretraining, 32,000 x 768 float32: 15 ms of a 620 ms step in a one-thread profile). `tied_reads` reads it
once, with a gradient that adds the rows to the head's gradient where they are: in place with
`ScatterNdNonAliasingAdd` (TensorFlow's `tensor_scatter_nd_add` copies the whole table first on CPU: 10 ms here),
as `tensor_scatter_nd_add` inside an XLA program (which has no lowering of the former, and updates in place
itself). The same sum, each row's terms added in another order (float rounding).
"""

from __future__ import annotations

import tensorflow as tf

from xlnet_tf.layers.xla_context import in_xla_program


def _add_rows(dense, indices, values):
    """`dense` with `values [N, D]` added to its rows `indices [N]` (repeats add up)."""
    indices = tf.expand_dims(tf.cast(indices, tf.int32), -1)
    if in_xla_program():
        return tf.tensor_scatter_nd_add(dense, indices, values)
    return tf.raw_ops.ScatterNdNonAliasingAdd(input=dense, indices=indices, updates=values)


def tied_reads(table, head_dtype):
    """`table` (a `[n_token, D]` variable or tensor) -> `(rows_table, head_table)`: the table as stored, for
    gathering the input's rows (`tf.gather`, then `XLNetBackbone(..., input_embeddings=...)`), and cast to
    `head_dtype` for the tied head's product (`heads.LMHead`). Values as reading the table twice; the gradient with
    respect to `table` is dense (the head's, in the table's dtype, plus the gathered rows' added in place)."""

    @tf.custom_gradient
    def reads(stored):
        def gradient(rows_gradient, head_gradient):
            total = None if head_gradient is None else tf.cast(head_gradient, stored.dtype)
            if rows_gradient is None:
                return tf.zeros_like(stored) if total is None else total
            if isinstance(rows_gradient, tf.IndexedSlices):
                values = tf.cast(rows_gradient.values, stored.dtype)
                return _add_rows(tf.zeros_like(stored) if total is None else total, rows_gradient.indices, values)
            rows_gradient = tf.cast(rows_gradient, stored.dtype)
            return rows_gradient if total is None else total + rows_gradient

        return (tf.identity(stored), tf.cast(stored, head_dtype)), gradient

    return reads(tf.convert_to_tensor(table))
