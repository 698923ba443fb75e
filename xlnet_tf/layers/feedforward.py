"""Position-wise feed-forward sub-layer with residual and post-LayerNorm."""

from __future__ import annotations

import keras
import tensorflow as tf

from xlnet_tf.layers import activations, column_pieces, initializers, precision, seeded_dropout
from xlnet_tf.layers.bias_add import bias_add
from xlnet_tf.layers.layer_norm import LayerNorm

ACTIVATIONS = ("gelu", "gelu_exact", "relu")


def get_activation(name: str):
    """`gelu` is the original release's tanh approximation (what the released checkpoints were trained
    with); `gelu_exact` is the erf form (Hugging Face's `"gelu"`), both with their derivatives written out
    (`activations`: the backward pass keeps only their input); `relu`."""
    if name == "gelu":
        return activations.gelu_tanh
    if name == "gelu_exact":
        return activations.gelu_erf
    if name == "relu":
        return keras.activations.relu
    raise ValueError(f"ff_activation must be one of {ACTIVATIONS}, got {name!r}")


@keras.saving.register_keras_serializable(package="xlnet_tf")
class PositionwiseFeedForward(precision.CastOnce, keras.layers.Layer):
    """`LayerNorm(x + dropout(W2 dropout(act(W1 x + b1)) + b2))`.

    Args:
      d_model, d_inner: sizes (`layer_1` is `[d_model, d_inner]`, `layer_2` is `[d_inner, d_model]`).
      activation: `gelu` (tanh approximation, as the original), `gelu_exact` or `relu`.
      dropout, layer_norm_eps, initializer_range: as the rest of the model.

    Call: `x [B, L, D]` -> `[B, L, D]`.
    """

    def __init__(self, d_model: int, d_inner: int, activation: str = "gelu", dropout: float = 0.0,
                 layer_norm_eps: float = 1e-12, initializer_range: float = 0.02, **kwargs):
        super().__init__(**kwargs)
        self.d_model = d_model
        self.d_inner = d_inner
        self.activation = activation
        self.dropout = dropout
        self.layer_norm_eps = layer_norm_eps
        self.initializer_range = initializer_range
        policy = self.dtype_policy
        self.layer_1 = keras.layers.Dense(d_inner, activation=get_activation(activation),
                                          kernel_initializer=initializers.normal(initializer_range),
                                          name="layer_1", dtype=policy)
        self.layer_2 = keras.layers.Dense(d_model, kernel_initializer=initializers.normal(initializer_range),
                                          name="layer_2", dtype=policy)
        self.layer_norm = LayerNorm(epsilon=layer_norm_eps, name="LayerNorm",
                                    dtype=precision.layer_norm_policy(policy))
        self.drop = keras.layers.Dropout(dropout, dtype=policy)

    def build(self, input_shape=None):
        self.layer_1.build((None, None, self.d_model))
        self.layer_2.build((None, None, self.d_inner))
        self.layer_norm.build((None, None, self.d_model))
        super().build(input_shape)

    def call(self, x, training=False, dropout_seed=None, site=0):
        """`dropout_seed`: see `seeded_dropout` (sites `site` and `site + 1`)."""
        y = self._dense(self.layer_1, x)
        y = seeded_dropout.apply(self.drop, y, training, dropout_seed, site)
        y = self._dense(self.layer_2, y)
        y = seeded_dropout.apply(self.drop, y, training, dropout_seed, site + 1)
        return self.layer_norm(y + x)

    def _dense(self, dense, x):
        """`dense(x)` (its kernel, bias and activation, the same values) with the bias gradient as a matmul
        (`bias_add`)."""
        h = keras.ops.matmul(x, self._w(dense.kernel))
        return dense.activation(bias_add(h, self._w(dense.bias)))

    # ------------------------------------------------------------------ one-position decoding (inference)
    def kernel_pieces(self, pieces: int = column_pieces.PIECES):
        """Both kernels in the compute dtype, each cut into `pieces` column blocks by
        `column_pieces.split_columns`: `(layer_1's [D, d_inner] blocks, layer_2's [d_inner, D] blocks)`, for
        `apply_kernel_pieces` (a decoding loop cuts them once, outside the loop)."""
        return tuple(column_pieces.split_columns(tf.cast(dense.kernel, self.compute_dtype), pieces)
                     for dense in (self.layer_1, self.layer_2))

    def apply_kernel_pieces(self, x, kernel_pieces):
        """`call` without dropout (inference) on kernels cut by `kernel_pieces()`: `x [..., D]` -> `[..., D]`; the
        products of a few rows with each kernel's column blocks run side by side."""
        y = self.layer_1.activation(self._product(x, kernel_pieces[0], self.layer_1))
        y = self._product(y, kernel_pieces[1], self.layer_2)
        return self.layer_norm(y + x)

    @staticmethod
    def _product(x, pieces, dense):
        """`dense` (its kernel cut into `pieces`) without its activation."""
        return column_pieces.product(x, pieces) + tf.cast(dense.bias, x.dtype)

    def get_config(self):
        config = super().get_config()
        config.update(d_model=self.d_model, d_inner=self.d_inner, activation=self.activation,
                      dropout=self.dropout, layer_norm_eps=self.layer_norm_eps,
                      initializer_range=self.initializer_range)
        return config
