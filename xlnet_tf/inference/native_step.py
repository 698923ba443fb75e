"""The cached generation step as one native op (`XlnetTfDecodeStep`, xlnet_tf/layers/native/decode_step.cc).

The same step as `decoding.decode_position` (both streams of one new position through every layer, then the LM
head on the query row; masks **True = may NOT attend**) to float32 rounding, in one op instead of XLA's program of
some 50 small dependent products: the step streams its weights once per token, and the op keeps both threads on
that stream (bench/speed/README.md, "Generation"). A bfloat16 model's step reads bfloat16 weights and cache and
keeps its activations in float32 (its XLA step rounds them to bfloat16).

Used by `generate` in this process where `available(model)` (`GenerationSettings.native_step`, on by default); never
in an exported program (`serving_function`, `request_program`): TF Serving has no such op.
"""

from __future__ import annotations

import collections

import tensorflow as tf

from xlnet_tf.inference import decoding
from xlnet_tf.layers.native import library

ACTIVATIONS = ("gelu", "relu")  # the op's feed-forward activations (`gelu`: the tanh form); others run XLA's step
MAX_HEAD = 256  # d_head (decode_step.cc kMaxHead)

# What every step reads unchanged, arranged once before the loop (`step_kernels`): per layer a `LayerKernels`,
# the word embedding `[V, D]`, the query stream's mask embedding `[D]` and the LM head's bias `[V]` float32.
StepKernels = collections.namedtuple("StepKernels", "layers embedding mask_emb logit_bias")
# per layer, in the compute dtype unless said: `qkv [3 W, D]`, `position_keys [H, P, Dh]`, `attention_biases
# [4, H, Dh]` (r_w, r_r, r_s, the "same segment" row), `output [D, W]`, `ff_in [F, D]`, `ff_in_bias [F]`,
# `ff_out [D, F]`, `ff_out_bias [D]`, `norms [4, D]` float32 (attention LayerNorm gamma, beta; feed-forward's)
LayerKernels = collections.namedtuple("LayerKernels", "qkv position_keys attention_biases output ff_in ff_in_bias "
                                                      "ff_out ff_out_bias norms")


def available(model) -> bool:
    """Whether the op can run `model`'s step: the native ops loaded (`library.ops()`), a feed-forward activation
    in `ACTIVATIONS`, d_head <= `MAX_HEAD` and float32 or bfloat16 compute."""
    c = model.backbone.config
    return (c.ff_activation in ACTIVATIONS and c.d_head <= MAX_HEAD
            and model.backbone.compute_dtype in ("float32", "bfloat16") and library.ops() is not None)


def step_kernels(model, mem_len: int) -> StepKernels:
    """The weights in the op's layouts (every product's weight `[out, in]`), the position keys of the distances
    `M + 1 .. 0` (row `M + 1 - d` holds distance d), as `decoding.step_kernels` arranges them for XLA's step."""
    backbone = model.backbone
    dtype = backbone.compute_dtype
    pos_emb = decoding.step_position_encoding(model, mem_len)
    shared = None if backbone.config.untie_r else (backbone.r_w_bias, backbone.r_r_bias, backbone.r_s_bias)
    layers = []
    for layer in backbone.xl_layers:
        attention, ff = layer.rel_attn, layer.ff
        # XLA's step's arrangement, uncut (one piece each), transposed to the op's [out, in] rows
        arranged = layer.decoding_kernels(pos_emb, pieces=1)
        (qkv,), (output,) = arranged.attention.qkv, arranged.attention.output
        (ff_in,), (ff_out,) = arranged.feed_forward
        r_w, r_r, r_s = (attention._w(b) for b in attention._biases(shared))
        layers.append(LayerKernels(
            qkv=tf.transpose(qkv), position_keys=tf.transpose(arranged.attention.position_keys, [0, 2, 1]),
            attention_biases=tf.stack([r_w, r_r, r_s, attention._w(attention.seg_embed)[0]]),
            output=tf.transpose(output), ff_in=tf.transpose(ff_in), ff_in_bias=tf.cast(ff.layer_1.bias, dtype),
            ff_out=tf.transpose(ff_out), ff_out_bias=tf.cast(ff.layer_2.bias, dtype),
            norms=tf.stack([tf.cast(w, tf.float32) for w in (attention.layer_norm.gamma, attention.layer_norm.beta,
                                                               ff.layer_norm.gamma, ff.layer_norm.beta)])))
    return StepKernels(layers, tf.cast(backbone.word_embedding, dtype),
                       tf.reshape(tf.cast(backbone.mask_emb, dtype), [-1]), tf.cast(model.lm_head.bias, tf.float32))


def decode_position(model, token, t, kv, real, kernels: StepKernels):
    """`decoding.decode_position` (its arguments and returns: `(logits [B, n_token] float32, kv, real)`) by the op,
    with `kernels` from `step_kernels`."""
    backbone = model.backbone
    lists = [[getattr(k, name) for k in kernels.layers] for name in LayerKernels._fields]
    c = backbone.config
    # the op writes slot t % R, builds both rows' windows and reads both rows' inputs itself (a step's TensorFlow
    # ops around it cost more than their arithmetic: each is an executor dispatch)
    logits, real, keys, values = library.ops().xlnet_tf_decode_step(
        tf.cast(token, tf.int32), tf.cast(t, tf.int32), real, [k for k, _ in kv], [v for _, v in kv], *lists,
        kernels.embedding, kernels.mask_emb, kernels.logit_bias, scale=float(backbone.xl_layers[0].rel_attn.scale),
        epsilon=float(c.layer_norm_eps), activation=c.ff_activation)
    return logits, list(zip(keys, values)), real
