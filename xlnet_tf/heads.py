"""Task heads on top of `XLNetBackbone` outputs."""

from __future__ import annotations

import keras
import tensorflow as tf


@keras.saving.register_keras_serializable(package="xlnet_tf")
class LMHead(keras.layers.Layer):
    """Language-model logits tied to the word embedding, with an own bias (`model/lm_loss/bias`).

    Args:
      n_token: vocabulary size.

    Call: `head(hidden [B, P, D], embedding [n_token, D])` -> float32 logits `[B, P, n_token]`.
    """

    def __init__(self, n_token: int, **kwargs):
        super().__init__(**kwargs)
        self.n_token = n_token

    def build(self, input_shape=None):
        self.bias = self.add_weight(name="bias", shape=(self.n_token,), initializer="zeros")
        super().build(input_shape)

    def call(self, hidden, embedding):
        logits = tf.einsum("bpd,nd->bpn", hidden, tf.cast(embedding, hidden.dtype))
        return tf.cast(logits, tf.float32) + tf.cast(self.bias, tf.float32)

    def get_config(self):
        config = super().get_config()
        config.update(n_token=self.n_token)
        return config
