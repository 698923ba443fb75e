"""Choosing the next token from a step's logits: the repetition penalty, temperature, top-k and top-p, and
Gumbel-max sampling with counter-based noise.

Greedy is `temperature == 0`; sampling draws from `softmax(logits' / temperature)` restricted to the `top_k` best
tokens and the smallest set of probability `>= top_p`; `logits'` carry the CTRL repetition penalty on the tokens
seen (positive logits divided by it, negative ones multiplied). The noise is hashed from `(seed, row key, step,
token)`: reproducible, and a row's draws depend on its key, never on the batch. Everything here compiles with XLA
(sort, top_k, the uint32 hash).

`structure` below is a `settings.ProgramStructure` (what is fixed in a compiled program); `values` a dict of its
run-time scalars: `seed` uint32, `temperature`, `top_p`, `penalty` float32, and optionally `top_k` int32.
"""

from __future__ import annotations

import tensorflow as tf

NEG = -1e30  # filtered logits (finite: no inf - inf anywhere)


def _mix32(x):
    """murmur3's 32-bit finalizer (a bijective mixer) on uint32."""
    x = tf.bitwise.bitwise_xor(x, tf.bitwise.right_shift(x, tf.constant(16, tf.uint32)))
    x = x * tf.constant(0x85EBCA6B, tf.uint32)
    x = tf.bitwise.bitwise_xor(x, tf.bitwise.right_shift(x, tf.constant(13, tf.uint32)))
    x = x * tf.constant(0xC2B2AE35, tf.uint32)
    return tf.bitwise.bitwise_xor(x, tf.bitwise.right_shift(x, tf.constant(16, tf.uint32)))


def gumbel_noise(seed, row_keys, step, n_token: int):
    """`[B, n_token]` float32 Gumbel(0, 1) noise, a pure function of `(seed, row_keys [B], step, token)` (uint32
    scalars/vectors; a counter-based hash, so a row's draws depend on its key, never on its batch)."""
    base = _mix32(tf.bitwise.bitwise_xor(row_keys, _mix32(seed)))
    base = _mix32(base + tf.cast(step, tf.uint32) * tf.constant(0x9E3779B9, tf.uint32))
    tokens = _mix32(tf.cast(tf.range(n_token), tf.uint32) + tf.constant(0x632BE5AB, tf.uint32))
    bits = _mix32(tf.bitwise.bitwise_xor(base[:, None], tokens[None, :]))
    uniform = (tf.cast(tf.bitwise.right_shift(bits, tf.constant(8, tf.uint32)), tf.float32) + 0.5) * 2.0 ** -24
    return -tf.math.log(-tf.math.log(uniform))


def sampling_logits(logits, seen, structure, values):
    """The logits whose softmax the next token is drawn from: repetition penalty on `seen [B, V]` (True =
    in the prompt or output), then `/ temperature`, then top-k and top-p (filtered tokens get -1e30).

    `structure.greedy` None: greedy or sampling is decided at run time (`temperature == 0` is greedy; the
    division then uses 1); `values["top_k"]`, when given, is a run-time k in `[0, structure.top_k]` (0 = off)."""
    x = logits
    if structure.penalty:
        pen = values["penalty"]
        x = tf.where(seen, tf.where(x > 0, x / pen, x * pen), x)
    if structure.greedy:
        return x
    temperature = values["temperature"]
    if structure.greedy is None:
        temperature = tf.where(temperature > 0, temperature, tf.ones_like(temperature))
    x = x / temperature
    if structure.top_k:
        best = tf.math.top_k(x, k=min(structure.top_k, x.shape[-1])).values
        if "top_k" in values:  # a run-time k within the compiled bound
            k = tf.cast(values["top_k"], tf.int32)
            kth = tf.gather(best, tf.maximum(tf.minimum(k, best.shape[-1]) - 1, 0), axis=1)[:, None]
            x = tf.where((k > 0) & (x < kth), NEG, x)
        else:
            x = tf.where(x < best[:, -1:], NEG, x)
    if structure.top_p:
        ordered = tf.sort(x, axis=-1, direction="DESCENDING")
        before = tf.math.cumsum(tf.nn.softmax(ordered, -1), axis=-1, exclusive=True)
        cut = tf.reduce_min(tf.where(before < values["top_p"], ordered, -NEG), -1, keepdims=True)
        x = tf.where((values["top_p"] < 1.0) & (x < cut), NEG, x)  # top_p = 1 keeps every token
    return x


def choose(logits, seen, step, row_keys, structure, values, forced=None):
    """The next token of each row from `logits [B, V]` float32 (`seen [B, V]` bool: True = in the prompt or
    output; `step` the new token's index; `row_keys [B]` uint32; `forced [B]` int32 or None: teacher forcing)
    -> `(token [B], log-prob under the model [B], log-prob under the sampling distribution [B], 0 for greedy)`."""
    x = sampling_logits(logits, seen, structure, values)
    if structure.greedy:
        token = tf.argmax(x, -1, output_type=tf.int32)
    else:
        noise = gumbel_noise(values["seed"], row_keys, step, x.shape[-1])
        token = tf.argmax(x + noise, -1, output_type=tf.int32)
        if structure.greedy is None:  # decided at run time
            token = tf.where(values["temperature"] > 0, token, tf.argmax(x, -1, output_type=tf.int32))
    if forced is not None:
        token = forced
    pick = lambda v: tf.gather(v, token, batch_dims=1)  # noqa: E731
    sampled = tf.zeros_like(pick(logits)) if structure.greedy else pick(tf.nn.log_softmax(x, -1))
    if structure.greedy is None:
        sampled = tf.where(values["temperature"] > 0, sampled, tf.zeros_like(sampled))
    return token, pick(tf.nn.log_softmax(logits, -1)), sampled
