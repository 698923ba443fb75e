"""Task heads on top of `XLNetBackbone` outputs."""

from __future__ import annotations

import functools

import keras
import tensorflow as tf

from xlnet_tf.layers import initializers
from xlnet_tf.layers import column_pieces, precision


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

    def transposed_logits(self, hidden, embedding_pieces):
        """`call` for rows `hidden [B, D]` against the embedding transposed to `[D, n_token]` and cut by
        `column_pieces.split_columns` (`embedding_pieces`) -> float32 `[B, n_token]`: for a decoding loop that
        arranges the table once, outside the loop (XLA otherwise copies the transpose of the whole table inside
        every step of a one-row product)."""
        pieces = [tf.cast(piece, hidden.dtype) for piece in embedding_pieces]
        return tf.cast(column_pieces.product(hidden, pieces), tf.float32) + tf.cast(self.bias, tf.float32)

    def get_config(self):
        config = super().get_config()
        config.update(n_token=self.n_token)
        return config


SUMMARY_TYPES = ("last", "first", "mean", "attn")
# What the summary of a long document (several segments read with memories) reads: the last segment (which
# sees the earlier ones through the memories) or every segment (models.XLNetClassifier's document_summary).
DOCUMENT_SUMMARIES = ("last_segment", "all_segments")


@keras.saving.register_keras_serializable(package="xlnet_tf")
class SequenceSummary(keras.layers.Layer):
    """Pools `[B, L, D]` to `[B, D]` (the original `summarize_sequence`, scope `sequnece_summary`).

    Args:
      d_model: hidden size.
      summary_type: `last` (the `<cls>` of left-padded inputs), `first`, `mean` (over real tokens only;
        the original averaged the pads too) or `attn` (a learned query `summary_bias` attending over the
        sequence, scope `abs_attn`, post-LayerNorm without residual).
      use_proj: then `tanh(dense(d_model))` (`summary`).
      dropout: on the output (and, for `attn`, on its output projection). dropatt: for `attn`, on the
        attention probabilities (the original's `multihead_attn`). n_head, d_head: for `attn`.
      initializer_range, layer_norm_eps.

    Call: `summary(hidden [B, L, D], attention_mask [B, L] or None (1 = real token))` -> `[B, D]`.
    """

    def __init__(self, d_model: int, summary_type: str = "last", use_proj: bool = True,
                 dropout: float = 0.0, n_head: int = 1, d_head: int = 64,
                 initializer_range: float = 0.02, layer_norm_eps: float = 1e-12, dropatt: float = 0.0,
                 **kwargs):
        super().__init__(**kwargs)
        if summary_type not in SUMMARY_TYPES:
            raise ValueError(f"summary_type must be one of {SUMMARY_TYPES}, got {summary_type!r}")
        self.d_model = d_model
        self.summary_type = summary_type
        self.use_proj = use_proj
        self.dropout = dropout
        self.dropatt = dropatt
        self.n_head = n_head
        self.d_head = d_head
        self.initializer_range = initializer_range
        self.layer_norm_eps = layer_norm_eps
        self.summary = keras.layers.Dense(d_model, activation="tanh",
                                          kernel_initializer=initializers.normal(initializer_range),
                                          name="summary", dtype=self.dtype_policy) if use_proj else None
        self.layer_norm = (keras.layers.LayerNormalization(epsilon=layer_norm_eps, name="LayerNorm",
                                                           dtype=precision.layer_norm_policy(self.dtype_policy))
                           if summary_type == "attn" else None)
        self.drop = keras.layers.Dropout(dropout, dtype=self.dtype_policy)
        self.prob_dropout = keras.layers.Dropout(dropatt, dtype=self.dtype_policy)

    def build(self, input_shape=None):
        if self.summary_type == "attn":
            init = functools.partial(initializers.normal, self.initializer_range)  # a fresh one per weight
            self.summary_bias = self.add_weight(name="summary_bias", shape=(self.d_model,), initializer=init())
            for name in ("q", "k", "v", "o"):
                setattr(self, name, self.add_weight(name=name, shape=(self.d_model, self.n_head, self.d_head),
                                                    initializer=init()))
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
        prob = self.prob_dropout(tf.cast(tf.nn.softmax(score, -1), hidden.dtype), training=training)
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
                      initializer_range=self.initializer_range, layer_norm_eps=self.layer_norm_eps,
                      dropatt=self.dropatt)
        return config


def _mask_logits(logits, p_mask):
    """`logits * (1 - p_mask) - 1e30 * p_mask` in float32 (the original's masking; 1 = not an answer)."""
    logits = tf.cast(logits, tf.float32)
    if p_mask is None:
        return logits
    p_mask = tf.cast(p_mask, tf.float32)
    return logits * (1.0 - p_mask) - 1e30 * p_mask


@keras.saving.register_keras_serializable(package="xlnet_tf")
class SquadHead(keras.layers.Layer):
    """XLNet's SQuAD head (`function_builder.get_qa_outputs`): start logits; end logits conditioned on a
    start (`dense_0` tanh on `[H ; H_start]`, LayerNorm, `dense_1`); beam search over `start_n_top` starts x
    `end_n_top` ends; answer class from `[sum_l softmax(start)_l H_l ; H_cls]` (SQuAD 2.0).

    Args:
      d_model; start_n_top, end_n_top; dropout (answer class); use_answer_class; initializer_range;
      layer_norm_eps.

    Call: `head(hidden [B, L, D], p_mask [B, L] (1 = cannot be in the answer), cls_index [B],
    start_positions [B] or None)`. With `start_positions` (training): `{"start_log_probs": [B, L],
    "end_log_probs": [B, L], "cls_logits": [B]}`. Without: `{"start_top_log_probs": [B, Ks],
    "start_top_index": [B, Ks], "end_top_log_probs": [B, Ks * Ke], "end_top_index": [B, Ks * Ke],
    "cls_logits": [B]}`, the end arrays start-major (`[:, i * Ke + j]` = j-th end for the i-th start), as the
    original. Log-probabilities are float32 log-softmaxes over the masked logits.
    """

    def __init__(self, d_model: int, start_n_top: int = 5, end_n_top: int = 5, dropout: float = 0.0,
                 use_answer_class: bool = True, initializer_range: float = 0.02,
                 layer_norm_eps: float = 1e-12, **kwargs):
        super().__init__(**kwargs)
        self.d_model = d_model
        self.start_n_top = start_n_top
        self.end_n_top = end_n_top
        self.dropout = dropout
        self.use_answer_class = use_answer_class
        self.initializer_range = initializer_range
        self.layer_norm_eps = layer_norm_eps
        dense = lambda units, name, **kw: keras.layers.Dense(  # noqa: E731
            units, kernel_initializer=initializers.normal(initializer_range), name=name,
            dtype=self.dtype_policy, **kw)
        self.start_dense = dense(1, "start_logits")
        self.end_dense_0 = dense(d_model, "end_logits_dense_0", activation="tanh")
        self.end_layer_norm = keras.layers.LayerNormalization(
            epsilon=layer_norm_eps, name="end_logits_LayerNorm", dtype=precision.layer_norm_policy(self.dtype_policy))
        self.end_dense_1 = dense(1, "end_logits_dense_1")
        if use_answer_class:
            self.cls_dense_0 = dense(d_model, "answer_class_dense_0", activation="tanh")
            self.cls_dense_1 = dense(1, "answer_class_dense_1", use_bias=False)
        self.drop = keras.layers.Dropout(dropout, dtype=self.dtype_policy)

    def build(self, input_shape=None):
        d = self.d_model
        self.start_dense.build((None, d))
        self.end_dense_0.build((None, 2 * d))
        self.end_layer_norm.build((None, d))
        self.end_dense_1.build((None, d))
        if self.use_answer_class:
            self.cls_dense_0.build((None, 2 * d))
            self.cls_dense_1.build((None, d))
        super().build(input_shape)

    def _end_logits(self, hidden, start_states, p_mask):
        """hidden `[B, L, D]`, start_states `[B, K, D]` -> masked end logits `[B, K, L]`."""
        length = tf.shape(hidden)[1]
        k = tf.shape(start_states)[1]
        h = tf.broadcast_to(hidden[:, None], [tf.shape(hidden)[0], k, length, self.d_model])
        s = tf.broadcast_to(start_states[:, :, None], tf.shape(h))
        x = self.end_dense_1(self.end_layer_norm(self.end_dense_0(tf.concat([h, s], -1))))[..., 0]
        return _mask_logits(x, None if p_mask is None else p_mask[:, None, :])

    def call(self, hidden, p_mask=None, cls_index=None, start_positions=None, training=False):
        start_logits = _mask_logits(self.start_dense(hidden)[..., 0], p_mask)
        start_log_probs = tf.nn.log_softmax(start_logits, -1)
        out = {}
        if start_positions is not None:
            start_states = tf.gather(hidden, tf.cast(start_positions, tf.int32)[:, None], batch_dims=1)
            end_logits = self._end_logits(hidden, start_states, p_mask)[:, 0]
            out.update(start_log_probs=start_log_probs, end_log_probs=tf.nn.log_softmax(end_logits, -1))
        else:
            top_lp, top_index = tf.math.top_k(start_log_probs, k=self.start_n_top)
            start_states = tf.gather(hidden, top_index, batch_dims=1)  # [B, Ks, D]
            end_log_probs = tf.nn.log_softmax(self._end_logits(hidden, start_states, p_mask), -1)
            end_lp, end_index = tf.math.top_k(end_log_probs, k=self.end_n_top)  # [B, Ks, Ke]
            ks_ke = self.start_n_top * self.end_n_top
            out.update(start_top_log_probs=top_lp, start_top_index=top_index,
                       end_top_log_probs=tf.reshape(end_lp, [-1, ks_ke]),
                       end_top_index=tf.reshape(end_index, [-1, ks_ke]))
        if self.use_answer_class:
            if cls_index is None:
                cls_state = hidden[:, -1]
            else:
                cls_state = tf.gather(hidden, tf.cast(cls_index, tf.int32)[:, None], batch_dims=1)[:, 0]
            weights = tf.cast(tf.exp(start_log_probs), hidden.dtype)
            start_state = tf.einsum("bl,bld->bd", weights, hidden)
            x = self.drop(self.cls_dense_0(tf.concat([start_state, cls_state], -1)), training=training)
            out["cls_logits"] = tf.cast(self.cls_dense_1(x)[:, 0], tf.float32)
        return out

    def get_config(self):
        config = super().get_config()
        config.update(d_model=self.d_model, start_n_top=self.start_n_top, end_n_top=self.end_n_top,
                      dropout=self.dropout, use_answer_class=self.use_answer_class,
                      initializer_range=self.initializer_range, layer_norm_eps=self.layer_norm_eps)
        return config
