"""The bias add with its bias gradient as a matmul: tf.nn.bias_add's values, the column sums as gradient."""

import numpy as np
import pytest
import tensorflow as tf

from xlnet_tf.layers import PositionwiseFeedForward
from xlnet_tf.layers.bias_add import bias_add


@pytest.mark.parametrize("dtype", [tf.float32, tf.bfloat16])
@pytest.mark.parametrize("mode", ["eager", "graph", "jit_compile"])
def test_values_and_gradients(dtype, mode, rng):
    h = tf.cast(tf.constant(rng.randn(3, 5, 7).astype(np.float32)), dtype)
    bias = tf.cast(tf.constant(rng.randn(7).astype(np.float32)), dtype)
    upstream = tf.cast(tf.constant(rng.randn(3, 5, 7).astype(np.float32)), dtype)

    def run(h, bias):
        with tf.GradientTape() as tape:
            tape.watch([h, bias])
            y = bias_add(h, bias)
        return (y, *tape.gradient(y, [h, bias], output_gradients=upstream))

    if mode != "eager":
        run = tf.function(run, jit_compile=mode == "jit_compile")
    y, dh, dbias = (tf.cast(t, tf.float32).numpy() for t in run(h, bias))
    np.testing.assert_array_equal(y, tf.cast(tf.nn.bias_add(h, bias), tf.float32).numpy())
    np.testing.assert_array_equal(dh, tf.cast(upstream, tf.float32).numpy())
    sums = tf.cast(upstream, tf.float32).numpy().sum(axis=(0, 1))
    tolerance = 1e-5 if dtype == tf.float32 else 2 ** -8  # float32 accumulation, one rounding to bfloat16
    np.testing.assert_allclose(dbias, sums, rtol=tolerance, atol=tolerance)


@pytest.mark.parametrize("jit_compile", [False, True])
def test_the_bias_gradient_is_a_matmul_outside_xla_programs(jit_compile):
    """The gradient's graph has the matmul and no BiasAddGrad (which XLA's auto-clustering would compile); inside a
    jit_compile function, a plain sum and no matmul."""

    def gradient(h, bias):
        with tf.GradientTape() as tape:
            tape.watch(bias)
            y = bias_add(h, bias)
        return tape.gradient(y, bias)

    graph = tf.function(gradient, jit_compile=jit_compile).get_concrete_function(
        tf.TensorSpec([4, 6]), tf.TensorSpec([6])).graph
    types = {op.type for op in graph.get_operations()}
    assert "BiasAddGrad" not in types
    assert ("MatMul" in types) != jit_compile and ("Sum" in types) == jit_compile


@pytest.mark.parametrize("policy", ["float32", "mixed_bfloat16"])
def test_the_feed_forward_computes_its_dense_layers(policy, rng):
    """PositionwiseFeedForward through `_dense` gives what its Keras Dense layers give, and the same gradients."""
    ff = PositionwiseFeedForward(d_model=6, d_inner=10, activation="gelu", dtype=policy)
    x = tf.constant(rng.randn(2, 3, 6).astype(np.float32))
    ff(x)

    def both(x):
        with tf.GradientTape(persistent=True) as tape:
            ours = ff(x)
            keras_dense = ff.layer_norm(ff.layer_2(ff.layer_1(tf.cast(x, ff.compute_dtype))) + tf.cast(
                x, ff.compute_dtype))
        variables = ff.layer_1.trainable_variables + ff.layer_2.trainable_variables
        return ours, keras_dense, tape.gradient(ours, variables), tape.gradient(keras_dense, variables)

    ours, reference, ours_grads, reference_grads = both(x)
    np.testing.assert_array_equal(tf.cast(ours, tf.float32).numpy(), tf.cast(reference, tf.float32).numpy())
    tolerance = 1e-5 if policy == "float32" else 2e-2
    for a, b in zip(ours_grads, reference_grads):
        np.testing.assert_allclose(tf.cast(a, tf.float32).numpy(), tf.cast(b, tf.float32).numpy(),
                                   rtol=tolerance, atol=tolerance)
