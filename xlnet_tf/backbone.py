"""XLNetBackbone: embeddings, masks, segment matrix, relative positions, two streams and memories."""

from __future__ import annotations

import functools
from typing import Optional, Union

import keras
import tensorflow as tf

from xlnet_tf.layers import initializers
from xlnet_tf.config import XLNetConfig
from xlnet_tf.layers.attention import gather_rows
from xlnet_tf.layers.block import XLNetLayer
from xlnet_tf.layers.position import RelativePositionalEncoding

QUERY_STREAM_MODES = ("targets", "full")


def causal_mask(qlen: int, mlen: int, same_length: bool = False):
    """`[qlen, mlen + qlen]` bool, True = blocked (attn_type `uni`): keys in the future of each query.

    With `same_length`, the first `qlen` key columns are also blocked below the diagonal (the original's
    `_create_mask`), so every query attends to the same number of keys.
    """
    rows = tf.range(qlen)[:, None]
    cols = tf.range(mlen + qlen)[None, :]
    blocked = cols > rows + mlen
    if same_length:
        blocked = blocked | ((cols < rows) & (cols < qlen))
    return blocked


def cache_mems(layer_input, prev_mem, mem_len: int, reuse_len: Optional[int], stop_gradient: bool = True):
    """New memory `[B, mem_len', D]`: `[prev_mem; layer_input[:, :reuse_len]]`, last `mem_len` positions,
    no gradient (the original's `_cache_mem`) unless `stop_gradient=False`."""
    cur = layer_input[:, :reuse_len] if reuse_len else layer_input
    if prev_mem is not None:
        cur = tf.concat([tf.cast(prev_mem, cur.dtype), cur], axis=1)
    cur = cur[:, -mem_len:]
    return tf.stop_gradient(cur) if stop_gradient else cur


@keras.saving.register_keras_serializable(package="xlnet_tf")
class XLNetBackbone(keras.layers.Layer):
    """The XLNet transformer (no task head): content stream, query stream at the targets, memories.

    Args:
      config: `XLNetConfig` (or its dict).
      query_stream: `"targets"` computes the query stream only at the P target positions (gathering mask
        and relative-position rows); `"full"` is the original full-length formulation (scatter to L rows
        and gather back). Both give the same numbers; `"targets"` is O(P * klen) instead of O(L * klen).
      remat: rematerialize each layer's activations in training (`tf.recompute_grad`; the same losses and
        gradients, dropout masks replayed): a step holds one layer's activations instead of all of them, for a
        second forward pass per layer. A plain attribute: `backbone.remat = True` before the step is traced.

    Call inputs (batch-major):
      input_ids: `[B, L]` int. segment_ids: `[B, L]` int or None (only equality matters; 0 = A, 1 = B,
        2 = CLS, 4 = pad). attention_mask: `[B, L]`, **1 = real token, 0 = padding**, or None.
      mems: list of `n_layer` tensors `[B, M, D]`, or None.
      mem_mask: `[B, M]`, **1 = real memory position, 0 = padding** (never attended), or None (all real).
      mem_segment_ids: `[B, M]` int segment ids of the memory positions, or None (segment 0, as the
        original's pretraining, where memory is always text A).
      mem_gradient: the returned `new_mems` keep their gradient (default: stopped, as Transformer-XL).
      perm_mask: `[B, L, L]`, **1 = position i may NOT attend to position j**, or None.
      target_mapping: `[B, P, L]` one-hot rows (an all-zero row is a padded slot), or None (no query
        stream).
      output_positions: `[B, R]` int positions, or None (all): the last layer computes the content stream
        only at these rows (its keys and values still cover every position), and `content` is `[B, R, D]`,
        equal to those rows of the full output. A head that reads one row (the `<cls>` summary) saves most
        of the last layer's work. Memories are unaffected (they cache layer inputs).
      input_embeddings: `[B, L, D]` the word embeddings of `input_ids` as the caller gathered them (a language model
        reads its table once for these rows and its tied head: `tied_embedding.tied_reads`), or None (`embed`).
    Returns a dict:
      `content` `[B, L, D]` (`[B, R, D]` with `output_positions`); `query` `[B, P, D]` (None without
      `target_mapping`); `new_mems`: list of
      `n_layer` tensors `[B, mem_len, D]` (the layer inputs, last `mem_len` of `[mems; first reuse_len]`),
      or None when `config.mem_len` is 0/None.
    """

    def __init__(self, config: Union[XLNetConfig, dict], query_stream: str = "targets", remat: bool = False,
                 **kwargs):
        super().__init__(**kwargs)
        self.remat = bool(remat)
        if isinstance(config, dict):
            config = XLNetConfig.from_dict(config)
        if query_stream not in QUERY_STREAM_MODES:
            raise ValueError(f"query_stream must be one of {QUERY_STREAM_MODES}, got {query_stream!r}")
        self.config = config
        self.query_stream = query_stream
        c = config
        policy = self.dtype_policy
        self.position_encoding = RelativePositionalEncoding(
            c.d_model, attn_type=c.attn_type, clamp_len=c.clamp_len, bi_data=c.bi_data,
            name="position_encoding", dtype=policy)
        self.xl_layers = [
            XLNetLayer(c.d_model, c.n_head, c.d_head, c.d_inner, ff_activation=c.ff_activation,
                       dropout=c.dropout, dropatt=c.dropatt, layer_norm_eps=c.layer_norm_eps,
                       initializer_range=c.initializer_range, own_biases=c.untie_r, name=f"layer_{i}",
                       dtype=policy)
            for i in range(c.n_layer)]
        self.drop = keras.layers.Dropout(c.dropout, dtype=policy)

    def build(self, input_shape=None):
        c = self.config
        init = functools.partial(initializers.normal, c.initializer_range)  # a fresh one per weight
        # read as stored (no autocast): `embed` gathers the rows in float32 and casts only them, where an
        # autocast read would cast the whole table to the compute dtype first; every reader casts itself
        self.word_embedding = self.add_weight(name="word_embedding", shape=(c.n_token, c.d_model),
                                              initializer=init(), autocast=False)
        # the original creates mask_emb without an initializer: TF1's default glorot_uniform
        self.mask_emb = self.add_weight(name="mask_emb", shape=(1, 1, c.d_model),
                                        initializer=initializers.glorot_uniform())
        if not c.untie_r:  # shared across layers
            for name in ("r_w_bias", "r_r_bias", "r_s_bias"):
                setattr(self, name, self.add_weight(name=name, shape=(c.n_head, c.d_head),
                                                    initializer=init()))
        for layer in self.xl_layers:
            layer.build()
        super().build(input_shape)

    # ---------------------------------------------------------------------------------------------- call
    def positions(self, batch, qlen, klen, training=False):
        """The relative positional encoding after dropout, and whether it is per example.

        Without dropout (inference, or `dropout == 0`) it is `[n_dir, P, D]`, one row set per direction,
        projected once per direction by the layers. With dropout it is `[B, P, D]` (each bi_data half
        taking its direction) with an independent dropout mask per example, as the original, which tiles
        the encoding over the batch before dropout (one mask shared by the batch would correlate every
        example's positional noise).
        """
        pos_emb = self.position_encoding(qlen=qlen, klen=klen)
        per_example = self.config.dropout > 0 and training is not None and training is not False
        if per_example:
            pos_emb = tf.repeat(pos_emb, batch // pos_emb.shape[0], axis=0)
            pos_emb = self.drop(pos_emb, training=training)
        return pos_emb, per_example

    def embed(self, input_ids):
        """`[B, L]` ids -> `[B, L, D]` word embeddings (no scaling), in the compute dtype."""
        return tf.cast(tf.gather(self.word_embedding, input_ids), self.compute_dtype)

    def _blocked(self, batch, qlen, mlen, attention_mask, perm_mask, mem_mask=None):
        """`[B|1, L|1, M+L]` bool (True = may NOT attend) for the query stream, or None."""
        blocked = None
        if self.config.attn_type == "uni":
            blocked = causal_mask(qlen, mlen, self.config.same_length)[None]
        data = None
        if attention_mask is not None:
            data = tf.equal(tf.cast(attention_mask, tf.float32), 0.0)[:, None, :]
        if perm_mask is not None:
            pm = tf.cast(perm_mask, tf.float32) > 0.0
            data = pm if data is None else (data | pm)
        if mlen and mem_mask is not None:
            mem_blocked = tf.equal(tf.cast(mem_mask, tf.float32), 0.0)[:, None, :]  # [B, 1, M]
            if data is None:
                data = tf.zeros([batch, 1, qlen], tf.bool)
            rows = tf.maximum(tf.shape(mem_blocked)[1], tf.shape(data)[1])
            data = tf.concat([tf.broadcast_to(mem_blocked, [batch, rows, mlen]),
                              tf.broadcast_to(data, [batch, rows, qlen])], -1)
        elif data is not None and mlen:
            data = tf.concat([tf.zeros(tf.concat([tf.shape(data)[:2], [mlen]], 0), tf.bool), data], -1)
        if data is not None:
            blocked = data if blocked is None else (blocked | data)
        return blocked

    def call(self, input_ids, segment_ids=None, attention_mask=None, mems=None, perm_mask=None,
             target_mapping=None, training=False, mem_mask=None, mem_segment_ids=None, mem_gradient=False,
             output_positions=None, input_embeddings=None):
        c = self.config
        input_ids = tf.convert_to_tensor(input_ids)
        batch, qlen = tf.shape(input_ids)[0], input_ids.shape[1]
        if qlen is None:
            qlen = tf.shape(input_ids)[1]
        if mems is not None and len(mems) != c.n_layer:
            raise ValueError(f"mems must hold one tensor per layer ({c.n_layer}), got {len(mems)}")
        mlen = 0 if not mems else mems[0].shape[1]
        klen = mlen + qlen

        # ---- masks (True = blocked)
        blocked = self._blocked(batch, qlen, mlen, attention_mask, perm_mask, mem_mask)
        content_mask = None
        if blocked is not None:
            rows = tf.range(qlen)[:, None]
            cols = tf.range(klen)[None, :]
            content_mask = blocked & tf.logical_not(tf.equal(cols, rows + mlen))[None]  # sees itself
        # ---- segments
        seg_diff = None
        if segment_ids is not None:
            seg = tf.cast(segment_ids, tf.int32)
            mem_seg = (tf.zeros([batch, mlen], tf.int32) if mem_segment_ids is None
                       else tf.cast(mem_segment_ids, tf.int32))
            keys = seg if not mlen else tf.concat([mem_seg, seg], 1)
            seg_diff = tf.not_equal(seg[:, :, None], keys[:, None, :])

        # ---- query stream inputs
        query_kwargs = {}
        query = None
        if target_mapping is not None:
            target_mapping = tf.convert_to_tensor(target_mapping)
            n_pred = tf.shape(target_mapping)[1]
            query = tf.tile(tf.cast(self.mask_emb, self.compute_dtype), [batch, n_pred, 1])
            query = self.drop(query, training=training)
            if self.query_stream == "full":
                query_mask = None if blocked is None else tf.broadcast_to(blocked, [batch, qlen, klen])
                query_kwargs = dict(target_mapping=target_mapping, query_mask=query_mask, query_seg_diff=seg_diff)
            else:
                pos = tf.argmax(target_mapping, axis=-1, output_type=tf.int32)  # [B, P]
                query_kwargs = dict(query_pos=pos, query_weight=tf.reduce_sum(target_mapping, -1),
                                    query_mask=gather_rows(blocked, pos, [batch, qlen, klen]),
                                    query_seg_diff=gather_rows(seg_diff, pos, [batch, qlen, klen]))

        # ---- embeddings and positions
        words = (self.embed(input_ids) if input_embeddings is None
                 else tf.cast(input_embeddings, self.compute_dtype))
        content = self.drop(words, training=training)
        pos_emb, per_example = self.positions(batch, qlen, klen, training)
        biases = None if c.untie_r else (self.r_w_bias, self.r_r_bias, self.r_s_bias)

        new_mems = [] if c.mem_len else None
        for i, layer in enumerate(self.xl_layers):
            mem = mems[i] if mems else None
            if new_mems is not None:
                new_mems.append(cache_mems(content, mem, c.mem_len, c.reuse_len, stop_gradient=not mem_gradient))
            last = i == len(self.xl_layers) - 1
            kwargs = dict(pos_emb=pos_emb, per_example_positions=per_example, content_mask=content_mask,
                          seg_diff=seg_diff, biases=biases, content_pos=output_positions if last else None,
                          training=training, **query_kwargs)
            if self.remat and training:
                content, query = self._recomputed(layer, content, query, mem, kwargs)
            else:
                content, query = layer(content, query, mems=mem, **kwargs)
        content = self.drop(content, training=training)
        if query is not None:
            query = self.drop(query, training=training)
        return {"content": content, "query": query, "new_mems": new_mems}

    def _recomputed(self, layer, content, query, mem, kwargs):
        """`layer(content, query, mems=mem, **kwargs)` under `tf.recompute_grad`: its activations are not kept for
        the gradient but rebuilt from its inputs, so a training step holds one layer's activations at a time. The
        dropout masks come from one seed drawn here, outside the recomputed function (`seeded_dropout`), so the
        recomputation replays the forward pass's masks."""
        seed = None
        drops = [d for d in (self.drop, layer.rel_attn.prob_dropout) if d.rate]
        if drops:
            seed = drops[0].seed_generator.next()
        args = [content] + ([query] if query is not None else []) + ([mem] if mem is not None else [])

        def run(*xs):
            q = xs[1] if query is not None else None
            m = xs[-1] if mem is not None else None
            c_out, q_out = layer(xs[0], q, mems=m, dropout_seed=seed, **kwargs)
            return (c_out,) if q_out is None else (c_out, q_out)

        out = tf.recompute_grad(run)(*args)
        return out[0], (out[1] if query is not None else None)

    def get_config(self):
        config = super().get_config()
        config.update(config=self.config.to_dict(), query_stream=self.query_stream, remat=self.remat)
        return config
