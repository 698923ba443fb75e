"""The feed-forward activations with written-out derivatives: `tf.nn.gelu`'s values in float32 (rounded once to
bfloat16), the exact derivative."""

import math

import numpy as np
import pytest
import tensorflow as tf

from xlnet_tf.layers import activations
from xlnet_tf.layers.feedforward import get_activation

FORMS = [("gelu", activations.gelu_tanh, True), ("gelu_exact", activations.gelu_erf, False)]


def _exact_derivative(x: np.ndarray, approximate: bool) -> np.ndarray:
    """The derivative in float64."""
    x = x.astype(np.float64)
    if approximate:
        c = math.sqrt(2 / math.pi)
        t = np.tanh(c * (x + 0.044715 * x ** 3))
        return 0.5 * (1 + t) + 0.5 * x * (1 - t ** 2) * c * (1 + 3 * 0.044715 * x ** 2)
    erf = np.vectorize(math.erf)
    return 0.5 * (1 + erf(x / math.sqrt(2))) + x * np.exp(-0.5 * x ** 2) / math.sqrt(2 * math.pi)


def _value_and_gradient(fn, x, upstream):
    with tf.GradientTape() as tape:
        tape.watch(x)
        y = fn(x)
    return y, tape.gradient(y, x, output_gradients=upstream)


@pytest.mark.parametrize("name,fn,approximate", FORMS)
@pytest.mark.parametrize("dtype", [tf.float32, tf.bfloat16])
def test_values_are_tf_gelu_in_float32_and_the_gradient_the_exact_derivative(name, fn, approximate, dtype):
    assert get_activation(name) is fn
    rng = np.random.RandomState(0)
    x = tf.cast(tf.constant(rng.randn(4096).astype(np.float32) * 3.0), dtype)
    upstream = tf.cast(tf.constant(rng.randn(4096).astype(np.float32)), dtype)
    y, grad = _value_and_gradient(fn, x, upstream)
    reference_y, reference_grad = _value_and_gradient(lambda v: tf.nn.gelu(v, approximate=approximate), x, upstream)
    assert y.dtype == grad.dtype == dtype
    rounded_once = tf.cast(tf.nn.gelu(tf.cast(x, tf.float32), approximate=approximate), dtype)
    np.testing.assert_array_equal(tf.cast(y, tf.float32).numpy(), tf.cast(rounded_once, tf.float32).numpy())
    if dtype == tf.bfloat16:  # tf.nn.gelu in bfloat16 rounds after each op: further from the float32 values
        exact_y = tf.nn.gelu(tf.cast(x, tf.float32), approximate=approximate).numpy()
        ours_error = np.abs(tf.cast(y, tf.float32).numpy() - exact_y).sum()
        assert ours_error < np.abs(tf.cast(reference_y, tf.float32).numpy() - exact_y).sum()
    x64 = tf.cast(x, tf.float32).numpy()
    exact = tf.cast(upstream, tf.float32).numpy().astype(np.float64) * _exact_derivative(x64, approximate)
    ours = tf.cast(grad, tf.float32).numpy()
    if dtype == tf.float32:
        np.testing.assert_allclose(ours, exact, rtol=1e-5, atol=2e-5)  # float32 cancellation where it nears 0
        np.testing.assert_allclose(ours, reference_grad.numpy(), rtol=1e-5, atol=2e-5)
    else:  # one rounding to bfloat16 (8 significant bits); the automatic gradient rounds after each op
        np.testing.assert_allclose(ours, exact, rtol=2 ** -8, atol=2e-5)


@pytest.mark.parametrize("name,fn,approximate", FORMS)
def test_compiled_gradient_equals_eager(name, fn, approximate):
    del name, approximate
    x = tf.constant(np.linspace(-6, 6, 1001, dtype=np.float32))

    def gradient(v):
        return _value_and_gradient(fn, v, tf.ones_like(v))[1]

    np.testing.assert_allclose(tf.function(gradient, jit_compile=True)(x).numpy(), gradient(x).numpy(),
                               rtol=1e-5, atol=1e-5)  # XLA's tanh and erf approximations are not Eigen's


@pytest.mark.parametrize("fn,approximate,ours_only,automatic_only", [
    (activations.gelu_tanh, True, None, "TanhGrad"), (activations.gelu_erf, False, "Erf", None)])
def test_the_backward_pass_is_the_written_out_derivative(fn, approximate, ours_only, automatic_only):
    """The gradient's graph is the written-out derivative's, not the automatic one (which differentiates tanh with
    TanhGrad and erfc without an Erf): with the custom gradient gone this fails."""

    def op_types(activation):
        def gradient(v):
            return _value_and_gradient(activation, v, tf.ones_like(v))[1]

        graph = tf.function(gradient).get_concrete_function(tf.TensorSpec([8], tf.float32)).graph
        return {op.type for op in graph.get_operations()}

    ours, automatic = op_types(fn), op_types(lambda v: tf.nn.gelu(v, approximate=approximate))
    if ours_only:
        assert ours_only in ours and ours_only not in automatic
    if automatic_only:
        assert automatic_only in automatic and automatic_only not in ours


@pytest.mark.parametrize("fn", [activations.gelu_tanh, activations.gelu_erf])
def test_the_derivative_reads_a_bfloat16_input_apart_from_the_forward_pass(fn):
    """The forward pass casts a bfloat16 `x` to float32; a second equal cast in the derivative would be merged with
    it by TensorFlow's graph optimization, and the forward pass would then write its float32 copy of `x` for the
    backward pass (the speed benchmark's step measured no gain from the float32 forward pass that way). The
    derivative widens `x` by its bits instead: no second cast of `x` to float32 in the gradient's graph."""

    def gradient(v):
        return _value_and_gradient(fn, v, tf.ones_like(v))[1]

    graph = tf.function(gradient).get_concrete_function(tf.TensorSpec([8], tf.bfloat16)).graph
    x_name = graph.inputs[0].name
    casts_of_x = [op for op in graph.get_operations()
                  if op.type == "Cast" and op.inputs[0].name == x_name and op.outputs[0].dtype == tf.float32]
    bitcasts_of_x = [op for op in graph.get_operations() if op.type == "Bitcast" and op.inputs[0].name == x_name]
    assert len(casts_of_x) == 1 and len(bitcasts_of_x) == 1


def test_widening_bfloat16_by_its_bits_is_the_cast():
    """Every bfloat16 bit pattern (zeros, subnormals, infinities, NaNs) widens to the float32 `tf.cast` gives, eagerly
    and compiled."""
    every = tf.bitcast(tf.constant(np.arange(2 ** 16, dtype=np.uint16)), tf.bfloat16)
    expected = tf.bitcast(tf.cast(every, tf.float32), tf.uint32).numpy()
    for widen in (activations._float32_for_the_derivative,
                  tf.function(activations._float32_for_the_derivative, jit_compile=True)):
        np.testing.assert_array_equal(tf.bitcast(widen(every), tf.uint32).numpy(), expected)
