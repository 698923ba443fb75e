"""Sinusoidal relative positional encoding (Transformer-XL / XLNet)."""

from __future__ import annotations

import keras
import tensorflow as tf


@keras.saving.register_keras_serializable(package="xlnet_tf")
class RelativePositionalEncoding(keras.layers.Layer):
    """Sinusoidal embeddings of relative distances, once per direction (never per example).

    Args:
      d_model: embedding size (even).
      attn_type: `"bi"` (distances `klen .. -qlen+1`, `klen + qlen` of them) or `"uni"`
        (distances `klen .. 0`, `klen + 1` of them).
      clamp_len: distances are clipped to `[-clamp_len, clamp_len]` when `clamp_len > 0`.
      bi_data: also return the backward direction (negated distances), used by the second half of
        every batch.

    Call: `layer(qlen=..., klen=...)` with Python ints returns `[n_dir, P, d_model]`, `n_dir = 2 if bi_data else 1`,
    row `p` encoding the distance `klen - p` (forward) or `p - klen` (backward); embedding = `[sin | cos]`
    blocks (not interleaved), as the original.
    """

    def __init__(self, d_model: int, attn_type: str = "bi", clamp_len: int = -1, bi_data: bool = False,
                 **kwargs):
        super().__init__(**kwargs)
        if attn_type not in ("bi", "uni"):
            raise ValueError(f"attn_type must be 'bi' or 'uni', got {attn_type!r}")
        self.d_model = d_model
        self.attn_type = attn_type
        self.clamp_len = clamp_len
        self.bi_data = bi_data

    def num_positions(self, qlen: int, klen: int) -> int:
        return klen + qlen if self.attn_type == "bi" else klen + 1

    def call(self, qlen: int, klen: int):
        end = -qlen if self.attn_type == "bi" else -1
        fwd = tf.range(klen, end, -1, dtype=tf.float32)
        seqs = [fwd, -fwd] if self.bi_data else [fwd]
        if self.clamp_len > 0:
            seqs = [tf.clip_by_value(s, -float(self.clamp_len), float(self.clamp_len)) for s in seqs]
        inv_freq = 1.0 / tf.pow(10000.0, tf.range(0, self.d_model, 2, dtype=tf.float32) / self.d_model)
        pos = tf.stack(seqs)  # [n_dir, P]
        sinusoid = pos[:, :, None] * inv_freq[None, None, :]
        emb = tf.concat([tf.sin(sinusoid), tf.cos(sinusoid)], axis=-1)
        return tf.cast(emb, self.compute_dtype)

    def get_config(self):
        config = super().get_config()
        config.update(d_model=self.d_model, attn_type=self.attn_type, clamp_len=self.clamp_len,
                      bi_data=self.bi_data)
        return config
