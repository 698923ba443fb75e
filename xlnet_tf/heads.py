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


SUMMARY_TYPES = ("last", "first", "mean", "attn")


@keras.saving.register_keras_serializable(package="xlnet_tf")
class SequenceSummary(keras.layers.Layer):
    """Pools `[B, L, D]` to `[B, D]` (the original `summarize_sequence`, scope `sequnece_summary`).

    Args:
      d_model: hidden size.
      summary_type: `last` (the `<cls>` of left-padded inputs), `first`, `mean` (over real tokens only;
        the original averaged the pads too) or `attn` (a learned query `summary_bias` attending over the
        sequence, scope `abs_attn`, post-LayerNorm without residual).
      use_proj: then `tanh(dense(d_model))` (`summary`).
      dropout: on the output. n_head, d_head: for `attn`. initializer_range, layer_norm_eps.

    Call: `summary(hidden [B, L, D], attention_mask [B, L] or None (1 = real token))` -> `[B, D]`.
    """

    def __init__(self, d_model: int, summary_type: str = "last", use_proj: bool = True,
                 dropout: float = 0.0, n_head: int = 1, d_head: int = 64,
                 initializer_range: float = 0.02, layer_norm_eps: float = 1e-12, **kwargs):
        super().__init__(**kwargs)
        if summary_type not in SUMMARY_TYPES:
            raise ValueError(f"summary_type must be one of {SUMMARY_TYPES}, got {summary_type!r}")
        self.d_model = d_model
        self.summary_type = summary_type
        self.use_proj = use_proj
        self.dropout = dropout
        self.n_head = n_head
        self.d_head = d_head
        self.initializer_range = initializer_range
        self.layer_norm_eps = layer_norm_eps
        init = keras.initializers.RandomNormal(stddev=initializer_range)
        self.summary = keras.layers.Dense(d_model, activation="tanh", kernel_initializer=init,
                                          name="summary", dtype=self.dtype_policy) if use_proj else None
        self.layer_norm = (keras.layers.LayerNormalization(epsilon=layer_norm_eps, name="LayerNorm",
                                                           dtype=self.dtype_policy)
                           if summary_type == "attn" else None)
        self.drop = keras.layers.Dropout(dropout, dtype=self.dtype_policy)

    def build(self, input_shape=None):
        init = keras.initializers.RandomNormal(stddev=self.initializer_range)
        if self.summary_type == "attn":
            self.summary_bias = self.add_weight(name="summary_bias", shape=(self.d_model,), initializer=init)
            for name in ("q", "k", "v", "o"):
                setattr(self, name, self.add_weight(name=name, shape=(self.d_model, self.n_head, self.d_head),
                                                    initializer=init))
            self.layer_norm.build((None, self.d_model))
        if self.summary is not None:
            self.summary.build((None, self.d_model))
        super().build(input_shape)

    def _attn_pool(self, hidden, attention_mask, training):
        w = lambda v: tf.cast(v, hidden.dtype)  # noqa: E731
        q = tf.einsum("d,dnh->nh", w(self.summary_bias), w(self.q))
        k = tf.einsum("bld,dnh->blnh", hidden, w(self.k))
        v = tf.einsum("bld,dnh->blnh", hidden, w(self.v))
        score = tf.cast(tf.einsum("nh,blnh->bnl", q, k), tf.float32) / (self.d_head ** 0.5)
        if attention_mask is not None:
            pad = tf.equal(tf.cast(attention_mask, tf.float32), 0.0)[:, None, :]
            score = tf.where(pad, tf.constant(-1e30, tf.float32), score)
        prob = tf.cast(tf.nn.softmax(score, -1), hidden.dtype)
        vec = tf.einsum("bnl,blnh->bnh", prob, v)
        out = self.drop(tf.einsum("bnh,dnh->bd", vec, w(self.o)), training=training)
        return self.layer_norm(out)

    def call(self, hidden, attention_mask=None, training=False):
        if self.summary_type == "last":
            pooled = hidden[:, -1]
        elif self.summary_type == "first":
            pooled = hidden[:, 0]
        elif self.summary_type == "mean":
            if attention_mask is None:
                pooled = tf.reduce_mean(hidden, axis=1)
            else:
                mask = tf.cast(attention_mask, hidden.dtype)[:, :, None]
                pooled = tf.reduce_sum(hidden * mask, 1) / tf.maximum(tf.reduce_sum(mask, 1), 1.0)
        else:
            pooled = self._attn_pool(hidden, attention_mask, training)
        if self.summary is not None:
            pooled = self.summary(pooled)
        return self.drop(pooled, training=training)

    def get_config(self):
        config = super().get_config()
        config.update(d_model=self.d_model, summary_type=self.summary_type, use_proj=self.use_proj,
                      dropout=self.dropout, n_head=self.n_head, d_head=self.d_head,
                      initializer_range=self.initializer_range, layer_norm_eps=self.layer_norm_eps)
        return config
