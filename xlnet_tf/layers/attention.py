"""Relative multi-head attention with segment encoding, and XLNet's two-stream attention."""

from __future__ import annotations

import collections
import contextlib
import functools

import keras
import tensorflow as tf

from xlnet_tf.layers import initializers
from xlnet_tf.layers import column_pieces, precision, seeded_dropout
from xlnet_tf.layers import xla_context
from xlnet_tf.layers.layer_norm import LayerNorm

# Added to blocked scores. Scores are always float32 when masked (softmax runs in float32), so this
# never overflows, whatever the compute dtype.
MASK_VALUE = -1e30


def rel_shift(scores, klen):
    """Aligns position scores to key positions (content stream, all query rows).

    Args:
      scores: `[B, H, Q, P]`, column `p` scored against the relative distance of row `p` of the positional
        encoding (`klen - p`).
      klen: number of keys (`mlen + Q`; an int or a scalar int tensor).

    Returns:
      `[B, H, Q, klen]` with `out[..., i, j] = scores[..., i, Q - i + j]`, i.e. the score of the distance
      `(mlen + i) - j` (query position minus key position).

    The gradient is the one of these reshapes and slices (a zero pad, a reshape and a one-row pad), computed by
    TensorFlow's kernels outside XLA's auto-clusters (`--xla_clustering=fusible`): XLA's CPU fusion of those pads
    divides by `P - 1` for every element, 4.8 of the 7.5 ms of a layer's attention backward cluster at 8 x 128
    (bench/speed/README.md, "Since: the gelu's derivative and rel_shift's gradient"). Inside a `jit_compile`
    function XLA compiles it as before.
    """
    b, h, q, p = (tf.shape(scores)[k] for k in range(4))

    @tf.custom_gradient
    def shift(x):
        def grad(dy):
            with _outside_auto_clusters():
                g = tf.pad(dy, [[0, 0], [0, 0], [0, 0], [0, p - 1 - tf.cast(klen, p.dtype)]])
                g = tf.pad(tf.reshape(g, [b, h, p - 1, q]), [[0, 0], [0, 0], [1, 0], [0, 0]])
                return tf.reshape(g, [b, h, q, p])

        y = tf.reshape(tf.reshape(x, [b, h, p, q])[:, :, 1:, :], [b, h, q, p - 1])
        return y[..., :klen], grad

    return shift(scores)


def _outside_auto_clusters():
    """The ops created inside are left out of TensorFlow's XLA auto-clustering (in a graph; nothing to do
    eagerly). A `jit_compile` function compiles them all the same."""
    if tf.executing_eagerly():
        return contextlib.nullcontext()
    return tf.xla.experimental.jit_scope(compile_ops=False)


def gather_shift(scores, query_pos, qlen, klen, compiled: bool = False):
    """`rel_shift` for query rows at arbitrary positions (the query stream at its targets).

    Args:
      scores: `[B, H, K, P]`, row `k` belongs to the query at position `query_pos[b, k]`.
      query_pos: `[B, K]` int, position of each query row within the current segment (`0 <= pos < qlen`).
      qlen, klen: ints, or scalar int tensors.
      compiled: the gather as a small XLA program of its own (see below), where the sizes are ints and the ops are
        not compiled as one XLA program already; `RelativeAttention` asks for it for the query stream in training
        steps of a process that asked for XLA's auto-clustering (`xla_context.auto_clustering`, as
        `--xla_clustering=fusible`), not in inference (a graph run or exported without XLA stays without it) nor in
        a run that asked for no XLA. One trace (and compilation) per shape and sizes, kept for the process: a
        training step's shapes are fixed.

    Returns:
      `[B, H, K, klen]` with `out[b, :, k, j] = scores[b, :, k, qlen - query_pos[b, k] + j]`. Indices past
      the last row of the encoding (only reachable with `attn_type="uni"` for keys in the future, which
      are masked) are clipped.

    `compiled`, with int sizes and outside an XLA program: the gather is a small XLA program of its own
    (`_compiled_windows`, its gradient too): TensorFlow's `GatherV2` moves one element at a time here and its gradient
    is an `UnsortedSegmentSum` over every element (3.6-4.4 ms per layer forward and backward at 8 x 21 targets and
    klen 192 against 2.1-2.5 ms; bench/speed/README.md, "Since: the tied table read once"). The same values.
    """
    if compiled and isinstance(qlen, int) and isinstance(klen, int) and not xla_context.in_xla_program():
        return _compiled_windows(scores, query_pos, qlen, klen)
    idx = _window_indices(scores, query_pos, qlen, klen)
    idx = tf.broadcast_to(idx[:, None], tf.concat([tf.shape(scores)[:3], [klen]], 0))
    return tf.gather(scores, idx, batch_dims=3)


def _window_indices(scores, query_pos, qlen, klen):
    """`[B, K, klen]`: the column of `scores` each output reads (clipped to the last)."""
    p = tf.shape(scores)[-1]
    idx = qlen - query_pos[:, :, None] + tf.range(klen, dtype=query_pos.dtype)[None, None, :]
    return tf.minimum(idx, tf.cast(p - 1, idx.dtype))


def _windows(scores, query_pos, qlen, klen):
    """`gather_shift`'s values heads last: each row's window a gather of `H`-element slices (XLA compiles this form
    faster than the element-wise gather)."""
    rows = tf.transpose(scores, [0, 2, 3, 1])  # [B, K, P, H]
    out = tf.gather(rows, _window_indices(scores, query_pos, qlen, klen), batch_dims=2)
    return tf.transpose(out, [0, 3, 1, 2])


_compiled_windows = tf.function(_windows, jit_compile=True, autograph=False)


def heads_first(x):
    """`[B, L, H, Dh]` <-> `[B, H, L, Dh]` (its own inverse)."""
    return tf.transpose(x, [0, 2, 1, 3])


# What `RelativeAttention.decode_step` reads unchanged from step to step, arranged once before a decoding loop
# (`RelativeAttention.decoding_kernels`): `position_keys [H, Dh, P]` the projected relative encoding, heads first;
# `qkv` the q, k and v projections side by side `[D, 3 * H * Dh]` and `output` the output projection `[H * Dh, D]`,
# both cut by `column_pieces.split_columns`; all in the compute dtype.
DecodingKernels = collections.namedtuple("DecodingKernels", "position_keys qkv output")


def gather_rows(x, positions, shape):
    """Rows `positions` `[B, R]` of a per-query tensor `x` (a mask or segment matrix `[B|1, L|1, K]`, broadcast
    to `shape` `[B, L, K]` first) -> `[B, R, K]`; None stays None."""
    return None if x is None else tf.gather(tf.broadcast_to(x, shape), positions, batch_dims=1)


@keras.saving.register_keras_serializable(package="xlnet_tf")
class RelativeAttention(precision.CastOnce, keras.layers.Layer):
    """XLNet relative multi-head attention for the content stream and, optionally, the query stream.

    Scores are `(ac + bd + ef) / sqrt(d_head)`: content (`q + r_w_bias` against keys), position
    (`q + r_r_bias` against projected relative encodings, then `rel_shift`), segment (`q + r_s_bias` against
    `seg_embed[same|different]`, a two-way select). Both streams share every weight; keys and values come
    from `[mems; content]`. Followed by the output projection, dropout, residual and post-LayerNorm.

    Args:
      d_model, n_head, d_head: sizes; the projections `q k v o r` are `[d_model, n_head, d_head]`, no bias.
      dropout: on the projected output. dropatt: on attention probabilities.
      layer_norm_eps, initializer_range: LayerNorm epsilon, std of the normal initializer.
      own_biases: create `r_w_bias r_r_bias r_s_bias` `[n_head, d_head]` here (`untie_r=True`); otherwise
        they are passed to `call` (shared across layers).

    Call inputs (batch-major; masks are boolean with **True = may NOT attend**):
      content: `[B, L, D]`; query: `[B, K, D]` or None (single stream).
      pos_emb: `[n_dir, P, D]` from `RelativePositionalEncoding` (n_dir 2 = bi_data: batch rows
        `[forward half; backward half]`), or `[B, P, D]` with `per_example_positions=True` (training with
        dropout: an independent dropout mask per example).
      mems: `[B, M, D]` or None. content_mask: `[B, 1|L, M+L]` or None.
      seg_diff: `[B, L, M+L]` bool, True where query and key are in different segments, or None.
      query_mask / query_seg_diff: the same for the query rows (`[B, K, M+L]`, or `[B, L, M+L]` when
        `target_mapping` is given).
      query_pos: `[B, K]` int positions of the query rows (targets mode), with `query_weight` `[B, K]`
        (0 for padded slots, whose attention output is then zero as in the full-length formulation).
      target_mapping: `[B, K, L]` instead of `query_pos`: the original full-length formulation (scatter
        the queries to L rows, attend, gather back).
      biases: `(r_w_bias, r_r_bias, r_s_bias)` when `own_biases=False`.
      content_pos: `[B, R]` int positions within the segment, or None (all L): the content stream is
        computed only at these rows (keys and values still come from every position), so `content_out` is
        `[B, R, D]`, equal to those rows of the full output. For a model that reads only some rows of its
        last layer (a sequence summary at `<cls>`).

    Returns: `(content_out [B, L, D] (or [B, R, D]), query_out [B, K, D] or None)`.

    Decoding one position at a time over a key/value cache (inference, no dropout): `project_keys_values` fills
    the cache, `decoding_kernels` arranges the weights once, `decode_step` computes both streams at a new position.
    """

    def __init__(self, d_model: int, n_head: int, d_head: int, dropout: float = 0.0,
                 dropatt: float = 0.0, layer_norm_eps: float = 1e-12, initializer_range: float = 0.02,
                 own_biases: bool = True, **kwargs):
        super().__init__(**kwargs)
        self.d_model = d_model
        self.n_head = n_head
        self.d_head = d_head
        self.dropout = dropout
        self.dropatt = dropatt
        self.layer_norm_eps = layer_norm_eps
        self.initializer_range = initializer_range
        self.own_biases = own_biases
        self.scale = 1.0 / (d_head ** 0.5)
        self.layer_norm = LayerNorm(epsilon=layer_norm_eps, name="LayerNorm",
                                    dtype=precision.layer_norm_policy(self.dtype_policy))
        self.output_dropout = keras.layers.Dropout(dropout, dtype=self.dtype_policy)
        self.prob_dropout = keras.layers.Dropout(dropatt, dtype=self.dtype_policy)

    def build(self, input_shape=None):
        init = functools.partial(initializers.normal, self.initializer_range)  # a fresh one per weight
        shape = (self.d_model, self.n_head, self.d_head)
        for name in ("q", "k", "v", "o", "r"):
            setattr(self, name, self.add_weight(name=name, shape=shape, initializer=init()))
        if self.own_biases:
            for name in ("r_w_bias", "r_r_bias", "r_s_bias"):
                setattr(self, name, self.add_weight(name=name, shape=(self.n_head, self.d_head),
                                                    initializer=init()))
        self.seg_embed = self.add_weight(name="seg_embed", shape=(2, self.n_head, self.d_head),
                                         initializer=init())
        self.layer_norm.build((None, None, self.d_model))
        super().build(input_shape)

    # ------------------------------------------------------------------------------------------ helpers
    def _project(self, x, kernel):
        return tf.einsum("bld,dnh->blnh", x, self._w(kernel))

    def _project_positions(self, pos_emb, batch, per_example=False):
        """`[n_dir, P, D]` -> `[n_dir, P, H, Dh]`: projected once per direction, shared by the batch rows
        (the reference implementations broadcast the encoding to `[B, P, D]` and project it per example;
        `bench/speed/variants.py` measures that as an A/B). A per-example `[B, P, D]` (dropout) gives
        `[B, P, H, Dh]`."""
        del batch, per_example  # the same einsum for both layouts
        return tf.einsum("xpd,dnh->xpnh", pos_emb, self._w(self.r))

    def _project_keys_values(self, content, mems=None):
        """Keys and values `[B, M+L, H, Dh]` of `[mems; content]` (content `[B, L, D]`, mems `[B, M, D]` or
        None). The memory rows are projected apart from the content rows and the heads concatenated: the
        numbers of projecting the concatenation, but the backward pass then computes no input gradient for
        memories that take none (training's memories are constants: at mems 64 / seq 128 a third of the
        key and value input-gradient FLOPs; the long-document recipe's memories, with the gradient through
        the segments, still get theirs). Two matmuls per part; one fused matmul over the concatenated
        kernels is measured as an A/B in `bench/speed/variants.py`."""
        keys, values = self._project(content, self.k), self._project(content, self.v)
        if mems is None:
            return keys, values
        mems = tf.cast(mems, content.dtype)
        return (tf.concat([self._project(mems, self.k), keys], axis=1),
                tf.concat([self._project(mems, self.v), values], axis=1))

    def _position_scores(self, q_r, k_r, per_example=False):
        """q_r `[B, H, Q, Dh]` (heads first), k_r `[n_dir, P, H, Dh]` -> `[B, H, Q, P]` (rows of batch half x use
        k_r[x]); with `per_example`, k_r is `[B, P, H, Dh]`."""
        if per_example:
            return tf.matmul(q_r, heads_first(k_r), transpose_b=True)
        n_dir = k_r.shape[0]
        k_r = tf.transpose(k_r, [0, 2, 3, 1])  # [n_dir, H, Dh, P]
        if n_dir == 1:
            return tf.matmul(q_r, k_r[0])  # the batch broadcast over the heads' products
        shape = tf.shape(q_r)
        halves = tf.reshape(q_r, tf.concat([[n_dir, shape[0] // n_dir], shape[1:]], 0))
        scores = tf.matmul(halves, k_r[:, None])
        return tf.reshape(scores, tf.concat([[shape[0]], tf.shape(scores)[2:]], 0))

    def _core(self, q_head, k_head, v_head, k_r, biases, seg_diff, mask, query_pos, qlen, training,
              per_example=False, dropout_seed=None, site=0, compile_windows=False):
        """Attention of queries `[B, Q, H, Dh]` over keys/values `[B, klen, H, Dh]` -> `[B, Q, H, Dh]`.

        The products run heads first (`[B, H, ., Dh]`, batched matmuls): TensorFlow's `Einsum` would transpose
        its operands for each product and each of its gradients (bench/speed/README.md, the attention core)."""
        r_w_bias, r_r_bias, r_s_bias = (self._w(b)[:, None] for b in biases)  # [H, 1, Dh]
        klen = tf.shape(k_head)[1]
        q = heads_first(q_head)
        ac = tf.matmul(q + r_w_bias, heads_first(k_head), transpose_b=True)
        bd = self._position_scores(q + r_r_bias, k_r, per_example)
        if query_pos is None:
            bd = rel_shift(bd, klen)
        else:  # (static sizes where known: gather_shift compiles its gather then, if asked)
            bd = gather_shift(bd, query_pos, qlen, keras.ops.shape(k_head)[1], compiled=compile_windows)
        score = ac + bd
        if seg_diff is not None:
            ef = tf.matmul(q + r_s_bias, tf.transpose(self._w(self.seg_embed), [1, 2, 0]))  # [B, H, Q, 2]
            score += tf.where(seg_diff[:, None], ef[..., 1:], ef[..., :1])
        score = tf.cast(score, tf.float32) * self.scale
        if mask is not None:
            score = tf.where(mask[:, None], tf.constant(MASK_VALUE, tf.float32), score)
        prob = tf.cast(tf.nn.softmax(score, axis=-1), self.compute_dtype)
        prob = seeded_dropout.apply(self.prob_dropout, prob, training, dropout_seed, site)
        return heads_first(tf.matmul(prob, heads_first(v_head)))  # [B, H, Q, Dh] -> [B, Q, H, Dh]

    def _output_pieces(self, pieces: int = column_pieces.PIECES):
        """The output projection arranged `[H * Dh, D]` in the compute dtype, cut by columns (`decode_step`'s)."""
        kernel = tf.reshape(tf.transpose(self._w(self.o), [1, 2, 0]), [self.n_head * self.d_head, -1])
        return column_pieces.split_columns(kernel, pieces)

    def _projection_pieces(self, names: str = "q", pieces: int = column_pieces.PIECES):
        """The projections `names` (letters of "qkv") side by side as one `[D, len(names) * H * Dh]` kernel in
        the compute dtype, cut by columns: `column_pieces.product(x, ...)` is `[..., len(names) * H * Dh]`."""
        kernels = [tf.reshape(self._w(getattr(self, name)), [-1, self.n_head * self.d_head]) for name in names]
        return column_pieces.split_columns(tf.concat(kernels, 1), pieces)

    def _post_attention(self, residual, attn_vec, training, dropout_seed=None, site=1):
        """Output projection, dropout, residual and LayerNorm."""
        out = tf.einsum("bind,hnd->bih", attn_vec, self._w(self.o))
        out = seeded_dropout.apply(self.output_dropout, out, training, dropout_seed, site)
        return self.layer_norm(out + residual)

    def _biases(self, biases):
        """`biases` as given, or this layer's own when None (`own_biases=True`)."""
        if biases is not None:
            return biases
        if not self.own_biases:
            raise ValueError(f"{self.name}: biases must be passed when own_biases=False")
        return self.r_w_bias, self.r_r_bias, self.r_s_bias

    # --------------------------------------------------------------------------------------------- call
    def call(self, content, query=None, *, pos_emb, per_example_positions=False, mems=None,
             content_mask=None, seg_diff=None, query_mask=None, query_seg_diff=None, query_pos=None,
             query_weight=None, target_mapping=None, biases=None, content_pos=None, training=False,
             dropout_seed=None):
        with self.casting_once():  # both streams read q, o, the biases and seg_embed: one cast each
            return self._two_streams(content, query, pos_emb, per_example_positions, mems, content_mask, seg_diff,
                                     query_mask, query_seg_diff, query_pos, query_weight, target_mapping, biases,
                                     content_pos, training, dropout_seed)

    def _two_streams(self, content, query, pos_emb, per_example_positions, mems, content_mask, seg_diff, query_mask,
                     query_seg_diff, query_pos, query_weight, target_mapping, biases, content_pos, training,
                     dropout_seed):
        biases = self._biases(biases)
        qlen = keras.ops.shape(content)[1]  # static where known
        k_head, v_head = self._project_keys_values(content, mems)
        k_r = self._project_positions(pos_emb, tf.shape(content)[0], per_example_positions)
        rows = content
        if content_pos is not None:  # only these rows of the content stream (as the query stream at targets)
            rows = tf.gather(content, content_pos, batch_dims=1)
            shape = [tf.shape(content)[0], qlen, tf.shape(k_head)[1]]
            content_mask = gather_rows(content_mask, content_pos, shape)
            seg_diff = gather_rows(seg_diff, content_pos, shape)
        vec = self._core(self._project(rows, self.q), k_head, v_head, k_r, biases, seg_diff,
                         content_mask, content_pos, qlen, training, per_example_positions, dropout_seed, 0)
        content_out = self._post_attention(rows, vec, training, dropout_seed, 1)
        if query is None:
            return content_out, None

        q_head = self._project(query, self.q)
        if target_mapping is not None:  # full-length formulation, kept for checks and A/B benchmarks
            mapping = tf.cast(target_mapping, q_head.dtype)
            q_full = tf.einsum("bknd,bkl->blnd", q_head, mapping)
            vec = self._core(q_full, k_head, v_head, k_r, biases, query_seg_diff, query_mask, None, qlen,
                             training, per_example_positions, dropout_seed, 2)
            vec = tf.einsum("blnd,bkl->bknd", vec, mapping)
        else:
            # a training step with XLA's auto-clustering compiles the query stream's windows (gather_shift)
            vec = self._core(q_head, k_head, v_head, k_r, biases, query_seg_diff, query_mask, query_pos,
                             qlen, training, per_example_positions, dropout_seed, 2,
                             compile_windows=training is True and xla_context.auto_clustering())
            if query_weight is not None:
                vec *= tf.cast(query_weight, vec.dtype)[:, :, None, None]
        return content_out, self._post_attention(query, vec, training, dropout_seed, 3)

    # ------------------------------------------------------------------ one-position decoding (inference)
    def project_keys_values(self, content, mems=None):
        """The keys and values `call` attends over, for a decoding loop to cache: `content [B, L, D]` and `mems`
        `[B, M, D]` or None -> `(keys, values)`, each `[B, M+L, H, Dh]` (memory rows first), compute dtype."""
        return self._project_keys_values(content, mems)

    def decoding_kernels(self, pos_emb, pieces: int = column_pieces.PIECES) -> DecodingKernels:
        """The weights `decode_step` reads, arranged once before a decoding loop in the layout its products read
        (inside a compiled loop XLA would otherwise copy a transpose of each into every step), the position-wise
        ones cut into `pieces` column blocks (`layers/column_pieces.py`: the few-row products of a step run side
        by side).

        Args:
          pos_emb: `[1, P, D]` the forward relative encoding (`RelativePositionalEncoding`), row `p` encoding
            the distance `klen - p`; it must hold every distance a step will read.
          pieces: column blocks per kernel.

        Returns: `DecodingKernels(position_keys [H, Dh, P], qkv, output)` in the compute dtype.
        """
        return DecodingKernels(position_keys=tf.transpose(self._project_positions(pos_emb, 1)[0], [1, 2, 0]),
                               qkv=self._projection_pieces("qkv", pieces), output=self._output_pieces(pieces))

    def decode_step(self, streams, keys, values, slot, kernels: DecodingKernels, distance_columns,
                    content_blocked, query_blocked, biases=None):
        """Both streams at one new position over a key/value cache, without dropout (inference): what `call` gives
        for that position's content row and the next position's query row, with one position projected.

        Args:
          streams: `[B, 2, D]`; row 0 the content stream of the new position t, row 1 the query stream of
            position t + 1 (it predicts the token there).
          keys, values: `[B, H, R, Dh]` the cache's R slots (`project_keys_values` of earlier positions, heads
            before slots). The content row's key and value are written into slot `slot` (int32 scalar) first.
          kernels: `decoding_kernels(...)`.
          distance_columns: `[R]` int32, per slot the column of `kernels.position_keys` that encodes the distance
            from position t to the slot's position; the query row, one position later, reads the column before
            (one farther). Columns of blocked slots are read and masked away.
          content_blocked, query_blocked: `[B, R]` bool, **True = may NOT attend**: empty and padded slots and
            the slots outside each row's window; the content row must see slot `slot` (itself).
          biases: `(r_w_bias, r_r_bias, r_s_bias)` when `own_biases=False`, as `call`'s.
        Every key is in the query's segment (the segment term's "same" row).

        Returns: `(streams [B, 2, D], keys, values)`: the sub-layer's output for both rows (output projection,
        residual, LayerNorm) and the cache with slot `slot` written.
        """
        biases = self._biases(biases)
        batch, width = tf.shape(streams)[0], self.n_head * self.d_head
        # q, k and v of both rows in one product (the content row's key and value alone: a one-row product that
        # XLA runs as a slow loop)
        q, k_new, v_new = tf.unstack(  # each [B, 2, H, Dh]
            tf.reshape(column_pieces.product(streams, kernels.qkv), [batch, 2, 3, self.n_head, self.d_head]), axis=2)
        where = tf.stack([tf.repeat(tf.range(batch), self.n_head), tf.tile(tf.range(self.n_head), [batch]),
                          tf.fill([batch * self.n_head], slot)], 1)
        keys = tf.tensor_scatter_nd_update(keys, where, tf.reshape(k_new[:, 0], [-1, self.d_head]))
        values = tf.tensor_scatter_nd_update(values, where, tf.reshape(v_new[:, 0], [-1, self.d_head]))
        content = self._attend_one_row(q[:, 0], keys, values, kernels.position_keys, biases, distance_columns,
                                       content_blocked)
        query = self._attend_one_row(q[:, 1], keys, values, kernels.position_keys, biases, distance_columns - 1,
                                     query_blocked)
        out = column_pieces.product(tf.reshape(tf.stack([content, query], 1), [batch, 2, width]), kernels.output)
        return self.layer_norm(out + streams), keys, values

    def _attend_one_row(self, q, keys, values, position_keys, biases, columns, blocked):
        """`_core` for one query row `q [B, H, Dh]` over cache slots (`keys`, `values` `[B, H, R, Dh]`): content
        + position (`position_keys [H, Dh, P]` read at `columns [R]`) + segment ("same") scores, `blocked [B, R]`
        (True = may NOT attend) -> `[B, H, Dh]`. One row per call: XLA runs one-row products as fast loops, two
        rows as slower batched matrix products."""
        r_w, r_r, r_s = (self._w(b) for b in biases)
        ac = tf.einsum("bnd,bnjd->bnj", q + r_w, keys)
        bd = tf.gather(tf.einsum("bnd,ndp->bnp", q + r_r, position_keys), columns, axis=2)
        ef = tf.einsum("bnd,nd->bn", q + r_s, self._w(self.seg_embed)[0])[:, :, None]
        score = tf.cast(ac + bd + ef, tf.float32) * self.scale
        score = tf.where(blocked[:, None, :], tf.constant(MASK_VALUE, tf.float32), score)
        return tf.einsum("bnj,bnjd->bnd", tf.cast(tf.nn.softmax(score, -1), self.compute_dtype), values)

    def get_config(self):
        config = super().get_config()
        config.update(d_model=self.d_model, n_head=self.n_head, d_head=self.d_head, dropout=self.dropout,
                      dropatt=self.dropatt, layer_norm_eps=self.layer_norm_eps,
                      initializer_range=self.initializer_range, own_biases=self.own_biases)
        return config
