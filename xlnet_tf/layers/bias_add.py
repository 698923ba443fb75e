"""A bias add whose bias gradient is a matrix product: the sum of the incoming gradient's rows as `ones @ dy`.

The automatic gradient of `tf.nn.bias_add` is `BiasAddGrad`, a column sum that TensorFlow's XLA auto-clustering
(`--xla_clustering=fusible`) compiles into the cluster around it, where XLA's CPU reduction (a tree of
reduce-windows) took 1.1-1.9 ms per `[1024, 3072]` feed-forward gradient at the speed benchmark's size. As a matmul
with a row of ones it runs on oneDNN's kernels (float32 accumulation), outside the clusters
(bench/speed/README.md, "Since: the gelu's derivative and rel_shift's gradient"). Inside a `jit_compile` function
(one XLA program) the gradient is the plain column sum, which XLA compiled faster than the matmul (the production
pretraining step 0.972x with the matmul).

Numbers: the values are `tf.nn.bias_add`'s; the input gradient is the incoming gradient; the bias gradient is its
column sum (float32 accumulation, in the gradient's dtype).
"""

from __future__ import annotations

import tensorflow as tf

from xlnet_tf.layers.xla_context import in_xla_program


def _column_sums(dy):
    """`dy [..., N]` summed over every leading axis -> `[N]`: as `ones [1, rows] @ dy [rows, N]`, or in an XLA
    program as a reduction."""
    if in_xla_program():
        return tf.reduce_sum(dy, axis=list(range(len(dy.shape) - 1)))
    rows = tf.reshape(dy, [-1, tf.shape(dy)[-1]])
    return tf.reshape(tf.matmul(tf.ones([1, tf.shape(rows)[0]], dy.dtype), rows), [-1])


@tf.custom_gradient
def bias_add(h, bias):
    """`h [..., N] + bias [N]` (`tf.nn.bias_add`; the same dtype), with the bias gradient as a matmul."""

    def grad(dy):
        return dy, tf.cast(_column_sums(dy), bias.dtype)

    return tf.nn.bias_add(h, bias), grad
