"""The model's passes for generation: a prompt segment read with memories, and the cached one-position step.

The memory after the prompt is kept as each layer's keys and values, a ring of `R = M + 1` slots
(`[B, H, R, Dh]`, position p in slot `p % R`: a step writes one slot and moves nothing), with a `[B, R]` mask,
**True = a real position**. A step computes ONE position through every layer (`XLNetLayer.decode_step`): the
chosen token's content stream at t (its keys and values written into slot `t % R`) and, in the same pass, the
query stream at t + 1, which predicts the next token (the query never sees its own position's content, so no
dummy token is computed). Attention masks here are **True = may NOT attend**. Every token is in segment 0 (the
"same segment" attention term).
"""

from __future__ import annotations

import collections

import tensorflow as tf

from xlnet_tf.layers import column_pieces
from xlnet_tf.layers.attention import heads_first

# What every step reads unchanged (`step_kernels`): per layer `XLNetLayer.decoding_kernels`, and the word
# embedding transposed `[D, n_token]` (the LM head's) cut by columns.
StepKernels = collections.namedtuple("StepKernels", "layers embedding")


def read_segment(model, input_ids, mems, content_mask, query_mask=None, causal=False):
    """One pass over `input_ids [B, S]` with memories `mems` (list of `[B, M, D]`).

    content_mask `[B, S, M + S]`, query_mask `[B, 1, M + S]` (or None: no query): True = may NOT attend. The
    query row sits one past the segment (position S), so it predicts the token after the segment's last.
    causal: the content mask blocks every key after its query, so only the distances `klen .. 0` are encoded
    (the original's `attn_type="uni"`: `klen + 1` of them instead of `klen + qlen`; a blocked score reads
    another row's value and is masked away), about half the position term's work.
    Returns `(logits [B, n_token] float32 or None, layer inputs: list of [B, S, D])`.
    """
    backbone = model.backbone
    c = backbone.config
    batch, qlen = tf.shape(input_ids)[0], input_ids.shape[1]
    klen = mems[0].shape[1] + qlen
    content = backbone.embed(input_ids)
    pos_emb = backbone.position_encoding(qlen=qlen, klen=klen)[:1]  # the forward direction only (no bi_data)
    if causal:  # its rows for the distances klen .. 0, as "uni" encodes them (a no-op for a "uni" model)
        pos_emb = pos_emb[:, :klen + 1]
    biases = None if c.untie_r else (backbone.r_w_bias, backbone.r_r_bias, backbone.r_s_bias)
    same_segment = tf.zeros([batch, qlen, klen], tf.bool)  # every token in segment 0
    query, kwargs = None, {}
    if query_mask is not None:
        query = tf.tile(tf.cast(backbone.mask_emb, backbone.compute_dtype), [batch, 1, 1])
        kwargs = dict(query_mask=query_mask, query_seg_diff=same_segment[:, :1],
                      query_pos=tf.fill([batch, 1], qlen))
    layer_inputs = []
    for layer, mem in zip(backbone.xl_layers, mems):
        layer_inputs.append(content)
        content, query = layer(content, query, pos_emb=pos_emb, mems=mem, content_mask=content_mask,
                               seg_diff=same_segment, biases=biases, training=False, **kwargs)
    logits = None if query is None else model.lm_head(query, backbone.word_embedding)[:, 0]
    return logits, layer_inputs


def segment_masks(mem_real, real, causal):
    """Content `[B, S, M+S]` and query `[B, 1, M+S]` masks (True = may NOT attend) of a prompt segment, from
    `mem_real [B, M]` and `real [B, S]` (True = a real position)."""
    mlen, qlen = mem_real.shape[1], real.shape[1]
    blocked = tf.logical_not(tf.concat([mem_real, real], 1))[:, None, :]  # padding and empty slots
    rows = tf.range(qlen)[:, None]
    cols = tf.range(mlen + qlen)[None, :]
    content = blocked
    if causal:
        content = content | (cols > rows + mlen)[None]
    content = content & tf.logical_not(tf.equal(cols, rows + mlen))[None]  # a token sees itself
    return content, blocked


def ring_cache(model, mems, mem_real, prompt_len: int):
    """The memory after the prompt as the steps keep it: each layer's keys and values `[B, H, R, Dh]` (projections
    of the cached layer inputs `mems`, each `[B, M, D]`), R = M + 1 slots, position p in slot `p % R`, and `[B, R]`
    bool, True = a real position (`mem_real [B, M]` likewise)."""
    shift = prompt_len % (mem_real.shape[1] + 1)
    ring = lambda x, axis: tf.roll(tf.concat([tf.zeros_like(x[:, :1]), x], 1), shift, axis)  # noqa: E731
    kv = []
    for layer, mem in zip(model.backbone.xl_layers, mems):
        keys, values = layer.rel_attn.project_keys_values(mem)  # [B, M, H, Dh]
        kv.append(tuple(heads_first(ring(x, 1)) for x in (keys, values)))
    return kv, ring(mem_real, 1)


def step_kernels(model, mem_len: int) -> StepKernels:
    """What every step reads unchanged, arranged once before the loop in the layout the step's products read
    (XLA would otherwise copy a transpose of each inside every step; bench/speed/generation_profile.py): per layer the
    relative encoding of the distances `M + 1 .. 0` (column `M + 1 - d` holds distance d: every distance a step
    needs) and the position-wise kernels (`XLNetLayer.decoding_kernels`), and the word embedding transposed."""
    pos_emb = step_position_encoding(model, mem_len)
    layers = [layer.decoding_kernels(pos_emb) for layer in model.backbone.xl_layers]
    embedding = tf.cast(model.backbone.word_embedding, model.backbone.compute_dtype)
    return StepKernels(layers, column_pieces.split_columns(tf.transpose(embedding)))


def step_position_encoding(model, mem_len: int):
    """`[1, M + 2, D]`: the forward relative encoding of the distances `M + 1 .. 0`, every one a step reads."""
    return model.backbone.position_encoding(qlen=1, klen=mem_len + 1)[:1]


def decode_position(model, token, t, kv, real, kernels: StepKernels):
    """One position: `token [B]`'s content stream at `t` (keys and values into slot `t % R`) and the query stream
    at `t + 1` over the ring `kv` (per layer `(keys, values)` `[B, H, R, Dh]`, `real [B, R]` True = a real
    position); the query does not see slot `(t + 1) % R` (position t - M). Returns `(logits [B, n_token] float32,
    kv, real)`: the backbone's numbers on `[mems; token]` (tests/inference/test_generation.py compares them with the whole
    prefix recomputed) with one position projected and no copy of the memory per step."""
    backbone = model.backbone
    batch, slots = tf.shape(token)[0], real.shape[1]
    slot, ids = t % slots, tf.range(slots)
    real = real | tf.equal(ids, slot)[None]
    columns = slots - tf.math.floormod(t - ids, slots)  # distance d = (t - j) mod R at column M + 1 - d
    content_blocked = tf.logical_not(real)
    query_blocked = content_blocked | tf.equal(ids, (t + 1) % slots)[None]
    h = backbone.embed(token[:, None])
    g = tf.tile(tf.cast(backbone.mask_emb, backbone.compute_dtype), [batch, 1, 1])
    # the two streams as two rows of one [B, 2, D] input: every position-wise matmul (projections, feed-forward)
    # reads its weights once for both (one position per step is bound by reading them)
    streams = tf.concat([h, g], 1)
    shared = None if backbone.config.untie_r else (backbone.r_w_bias, backbone.r_r_bias, backbone.r_s_bias)
    new_kv = []
    for layer, (keys, values), layer_kernels in zip(backbone.xl_layers, kv, kernels.layers):
        streams, keys, values = layer.decode_step(streams, keys, values, slot, layer_kernels, columns,
                                                  content_blocked, query_blocked, biases=shared)
        new_kv.append((keys, values))
    return model.lm_head.transposed_logits(streams[:, 1], kernels.embedding), new_kv, real
