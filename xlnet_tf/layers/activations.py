"""The feed-forward activations computed in float32 and rounded once, with their derivatives written out: the
backward pass keeps only the activation's input and recomputes the rest.

TensorFlow's `tf.nn.gelu` is a composite of ops (a cube, a tanh or an erfc, products). On a bfloat16 input each of
them rounds its result to bfloat16, and XLA's CPU code converts to float32 and back around every one: at the speed
benchmark's size (`[1024, 3072]` per layer) 3.6 ms against 1.7 ms for the same formula in float32 rounded once
(bench/speed/README.md, "Since: the gelu in float32"). Here the forward pass is
`tf.nn.gelu` of the input in float32, rounded once to the input's dtype (what PyTorch's bfloat16 gelu computes); its
automatic gradient would keep every intermediate of the forward pass for the backward (four more tensors of the
activation's size), so the backward pass computes the derivative from the input, in float32.

Numbers: in float32 the values are `tf.nn.gelu`'s; in bfloat16 they are `tf.nn.gelu`'s in float32 rounded once (closer
to the exact values than `tf.nn.gelu` in bfloat16, which rounds after each op). The gradient is the analytic
derivative in float32, equal to the automatic one to float32 rounding (in bfloat16, rounded once at the end).
"""

from __future__ import annotations

import math

import tensorflow as tf

_SQRT_2_OVER_PI = 0.7978845608028654  # tf.nn.gelu's constant
_CUBIC = 0.044715
_INV_SQRT_2 = 0.7071067811865476


def _float32(x):
    return tf.cast(x, tf.float32)


def _float32_for_the_derivative(x):
    """`x` in float32 by nodes of their own: the forward pass casts `x` too, and TensorFlow's common subexpression
    elimination would merge two equal casts, so that the forward pass wrote its float32 copy of `x` (twice the bytes
    of a bfloat16 `x`) for the backward pass to read. A bfloat16 is the upper half of a float32: the same value."""
    if x.dtype != tf.bfloat16:
        return _float32(x)
    bits = tf.cast(tf.bitcast(x, tf.uint16), tf.uint32)
    return tf.bitcast(tf.bitwise.left_shift(bits, tf.constant(16, tf.uint32)), tf.float32)


# The derivatives compute from `x` with nodes of their own: TensorFlow's graph optimization (common subexpression
# elimination, after rewriting `pow(x, 3)` as `x * square(x)` and `x * x` as `square(x)`) would otherwise merge them
# with the forward pass's, and the forward pass would write those intermediates for the backward pass to read. Hence
# products like `x * (x * c)` rather than squares, and `_float32_for_the_derivative`.

def _tanh_form_derivative(x):
    """d/dx of `0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))`, float32 `x`."""
    cubic = x * (x * (_SQRT_2_OVER_PI * _CUBIC))  # sqrt(2/pi) 0.044715 x^2
    t = tf.tanh(x * (_SQRT_2_OVER_PI + cubic))
    return 0.5 * (1.0 + t) + 0.5 * (x * (1.0 - tf.square(t))) * (_SQRT_2_OVER_PI + 3.0 * cubic)


def _erf_form_derivative(x):
    """d/dx of `x Phi(x)` = `Phi(x) + x phi(x)`, float32 `x` (erf, not the forward pass's erfc)."""
    return 0.5 + 0.5 * tf.math.erf(x * _INV_SQRT_2) + x * tf.exp(x * (x * -0.5)) / math.sqrt(2.0 * math.pi)


def _with_derivative(forward, derivative):
    """`forward(x)` computed on `x` in float32 and rounded once to `x`'s dtype, whose gradient is
    `dy * derivative(x)`, computed in float32 and cast to `x`'s dtype."""

    @tf.custom_gradient
    def activation(x):
        def grad(dy):
            return tf.cast(_float32(dy) * derivative(_float32_for_the_derivative(x)), x.dtype)

        return tf.cast(forward(_float32(x)), x.dtype), grad

    return activation


# `0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))` (the original release's form, Hugging Face's `gelu_new`), any
# shape, the dtype of `x`: `tf.nn.gelu(x, approximate=True)`'s values (in float32, rounded once).
gelu_tanh = _with_derivative(lambda x: tf.nn.gelu(x, approximate=True), _tanh_form_derivative)
# `0.5 x erfc(-x / sqrt(2))` = `x Phi(x)` (Hugging Face's `gelu`): `tf.nn.gelu(x, approximate=False)`'s values (likewise).
gelu_erf = _with_derivative(lambda x: tf.nn.gelu(x, approximate=False), _erf_form_derivative)
