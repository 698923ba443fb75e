"""Benchmark-only A/B variants of the attention layer.

Each context manager swaps one method of `xlnet_tf.layers.attention.RelativeAttention` for the
alternative formulation while a model is built and traced, so the harness can measure what the
production choice buys. Outputs are numerically the same (tests/bench/test_bench_variants.py checks it); only
the work done differs.
"""

from __future__ import annotations

import contextlib

import tensorflow as tf

from xlnet_tf.layers.attention import RelativeAttention


@contextlib.contextmanager
def _patched(**methods):
    saved = {name: getattr(RelativeAttention, name) for name in methods}
    for name, fn in methods.items():
        setattr(RelativeAttention, name, fn)
    try:
        yield
    finally:
        for name, fn in saved.items():
            setattr(RelativeAttention, name, fn)


def _per_example_positions(self, pos_emb, batch, per_example=False):
    # The reference formulation: the encoding is broadcast to every example ([B, P, D], each bi_data half
    # taking its direction) and projected per example (training with dropout already gives [B, P, D]).
    if not per_example:
        pos_emb = tf.repeat(pos_emb, batch // pos_emb.shape[0], axis=0)  # [B, P, D]
    return tf.einsum("bpd,dnh->bpnh", pos_emb, self._w(self.r))


def _per_example_scores(self, q_r, k_r, per_example=False):
    del per_example  # always per example here; q_r heads first [B, H, Q, Dh], k_r [B, P, H, Dh]
    return tf.einsum("bnid,bpnd->bnip", q_r, k_r)


def _fused_keys_values(self, content, mems=None):
    kernel = tf.concat([self._w(self.k), self._w(self.v)], axis=1)  # [D, 2H, Dh]
    parts = [content] if mems is None else [tf.cast(mems, content.dtype), content]
    kv = tf.concat([tf.einsum("bld,dnh->blnh", x, kernel) for x in parts], axis=1)  # memory rows apart, as production
    return kv[:, :, :self.n_head], kv[:, :, self.n_head:]


def _concatenated_keys_values(self, content, mems=None):
    # The reference formulation: one projection of [mems; content], whose input gradient covers the memory rows
    keys = content if mems is None else tf.concat([tf.cast(mems, content.dtype), content], axis=1)
    return self._project(keys, self.k), self._project(keys, self.v)


def positional_projection_per_example():
    """Project the relative encoding per example, as Hugging Face and the original do (A side)."""
    return _patched(_project_positions=_per_example_positions, _position_scores=_per_example_scores)


def fused_key_value_projection():
    """One matmul over the concatenated key and value kernels instead of two."""
    return _patched(_project_keys_values=_fused_keys_values)


def keys_values_over_concatenation():
    """Project keys and values of `[mems; content]` in one matmul each (A side of the memory rows' projection)."""
    return _patched(_project_keys_values=_concatenated_keys_values)


VARIANTS = {
    "production": contextlib.nullcontext,
    "positional projection per example": positional_projection_per_example,
    "fused key/value projection": fused_key_value_projection,
    "keys and values over [mems; content]": keys_values_over_concatenation,
}
