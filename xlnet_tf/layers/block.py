"""One XLNet layer: two-stream relative attention followed by the shared feed-forward sub-layer."""

from __future__ import annotations

import collections

import keras

from xlnet_tf.layers import column_pieces
from xlnet_tf.layers.attention import RelativeAttention
from xlnet_tf.layers.feedforward import PositionwiseFeedForward

# What `XLNetLayer.decode_step` reads unchanged from step to step (`XLNetLayer.decoding_kernels`): the attention's
# `DecodingKernels` and the feed-forward's `kernel_pieces()`.
LayerDecodingKernels = collections.namedtuple("LayerDecodingKernels", "attention feed_forward")


@keras.saving.register_keras_serializable(package="xlnet_tf")
class XLNetLayer(keras.layers.Layer):
    """`rel_attn` (both streams, shared weights) then `ff` applied to each stream (shared weights).

    Args: as `RelativeAttention` plus `d_inner`, `ff_activation`.

    Call: `layer(content [B, L, D], query [B, K, D] or None, **attention_kwargs)` ->
    `(content [B, L, D], query [B, K, D] or None)`; see `RelativeAttention` for the keyword inputs and
    mask polarity (True = may NOT attend). `decoding_kernels` and `decode_step`: one new position at a time over
    a key/value cache (inference).
    """

    def __init__(self, d_model: int, n_head: int, d_head: int, d_inner: int, ff_activation: str = "gelu",
                 dropout: float = 0.0, dropatt: float = 0.0, layer_norm_eps: float = 1e-12,
                 initializer_range: float = 0.02, own_biases: bool = True, **kwargs):
        super().__init__(**kwargs)
        self.d_model = d_model
        self.n_head = n_head
        self.d_head = d_head
        self.d_inner = d_inner
        self.ff_activation = ff_activation
        self.dropout = dropout
        self.dropatt = dropatt
        self.layer_norm_eps = layer_norm_eps
        self.initializer_range = initializer_range
        self.own_biases = own_biases
        self.rel_attn = RelativeAttention(d_model, n_head, d_head, dropout=dropout, dropatt=dropatt,
                                          layer_norm_eps=layer_norm_eps,
                                          initializer_range=initializer_range, own_biases=own_biases,
                                          name="rel_attn", dtype=self.dtype_policy)
        self.ff = PositionwiseFeedForward(d_model, d_inner, activation=ff_activation, dropout=dropout,
                                          layer_norm_eps=layer_norm_eps,
                                          initializer_range=initializer_range, name="ff",
                                          dtype=self.dtype_policy)

    def build(self, input_shape=None):
        self.rel_attn.build()
        self.ff.build()
        super().build(input_shape)

    def call(self, content, query=None, training=False, per_example_positions=False, dropout_seed=None,
             **attention_kwargs):
        # (a Python flag: Keras does not allow mixing it into the tensor kwargs)
        # dropout_seed: `[2]` int, every dropout mask of the layer drawn from it (xlnet_tf/layers/seeded_dropout.py:
        # a recomputed layer replays its masks); None: the dropout layers' own generators
        content, query = self.rel_attn(content, query, training=training, dropout_seed=dropout_seed,
                                       per_example_positions=per_example_positions, **attention_kwargs)
        with self.ff.casting_once():  # one cast of each feed-forward weight for both streams
            content = self.ff(content, training=training, dropout_seed=dropout_seed, site=4)
            if query is not None:
                query = self.ff(query, training=training, dropout_seed=dropout_seed, site=6)
        return content, query

    # ------------------------------------------------------------------ one-position decoding (inference)
    def decoding_kernels(self, pos_emb, pieces: int = column_pieces.PIECES) -> LayerDecodingKernels:
        """The weights `decode_step` reads, arranged once before a decoding loop: `pos_emb [1, P, D]` as
        `RelativeAttention.decoding_kernels`'s; `pieces` column blocks per position-wise kernel."""
        return LayerDecodingKernels(attention=self.rel_attn.decoding_kernels(pos_emb, pieces),
                                    feed_forward=self.ff.kernel_pieces(pieces))

    def decode_step(self, streams, keys, values, slot, kernels: LayerDecodingKernels, distance_columns,
                    content_blocked, query_blocked, biases=None):
        """The layer at one new position, without dropout (inference): `RelativeAttention.decode_step` (its
        arguments, mask polarity **True = may NOT attend**) then the feed-forward sub-layer on both rows.

        streams `[B, 2, D]` (row 0: the content stream at t, row 1: the query stream at t + 1), keys and values
        `[B, H, R, Dh]` (the cache; slot `slot` receives position t's) -> `(streams [B, 2, D], keys, values)`.
        """
        streams, keys, values = self.rel_attn.decode_step(streams, keys, values, slot, kernels.attention,
                                                          distance_columns, content_blocked, query_blocked, biases)
        return self.ff.apply_kernel_pieces(streams, kernels.feed_forward), keys, values

    def get_config(self):
        config = super().get_config()
        config.update(d_model=self.d_model, n_head=self.n_head, d_head=self.d_head, d_inner=self.d_inner,
                      ff_activation=self.ff_activation, dropout=self.dropout, dropatt=self.dropatt,
                      layer_norm_eps=self.layer_norm_eps, initializer_range=self.initializer_range,
                      own_biases=self.own_biases)
        return config
