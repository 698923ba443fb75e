"""The vanilla Transformer's way to generate, for tests and benchmarks: every new token recomputes the whole
prefix from scratch (no memories), the query stream at a dummy position after it. `xlnet_tf.inference.generation`'s cached
generator is tested equal to it (`causal`: exact), and `generation_speed.py` times it as the baseline
Transformer-XL's cache is measured against."""

from __future__ import annotations

import weakref
from typing import List, Optional, Sequence, Tuple

import numpy as np
import tensorflow as tf

from xlnet_tf.errors import UserError
from xlnet_tf.inference.generation import LAYOUTS, check_model
from xlnet_tf.inference.prompts import round_up
from xlnet_tf.text.layout import MASK_ID, PADDING_ID

_RECOMPUTE: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def recompute_perm_mask(length: int, prompt_len: int, layout: str = "causal",
                        window: Optional[int] = None) -> np.ndarray:
    """`[length + 1, length + 1]` float32 perm_mask (**1 = position i may NOT attend to j**) of a prefix of
    `length` tokens plus a dummy last position: the dummy is hidden from all; token i sees the tokens before it
    (the last `window` of them when given); with `bidirectional_prompt`, prompt tokens (i < prompt_len) see the
    whole prompt and no generated token."""
    n = length + 1
    i, j = np.arange(n)[:, None], np.arange(n)[None, :]
    blocked = j >= i
    if window is not None:
        blocked |= j < i - window
    if layout == "bidirectional_prompt":
        prompt = (i < prompt_len) & (j < prompt_len)
        blocked = np.where(prompt, False, blocked) | ((i < prompt_len) & (j >= prompt_len))
    blocked[:, -1] = True
    return blocked.astype(np.float32)


def recompute_logits(model, prompt_ids: Sequence[int], continuation_ids: Optional[Sequence[int]] = None,
                     max_new_tokens: Optional[int] = None, layout: str = "causal", window: Optional[int] = None,
                     bucket: int = 16, jit_compile: bool = False) -> Tuple[List[int], np.ndarray]:
    """The vanilla Transformer path: for every new token, the whole prefix recomputed from scratch (no
    memories) with `recompute_perm_mask`, the query stream at a dummy position after it.

    One row. With `continuation_ids` (teacher forcing) the logits predicting each of them; else greedy decoding
    of `max_new_tokens`. The prefix + dummy is left-padded to a multiple of `bucket` (attention_mask 1 = real;
    one trace per bucket). Returns `(ids, logits [N, n_token] float32)`. The model's config must have
    `bi_data=False` (its backbone runs as configured).
    """
    if layout not in LAYOUTS:
        raise UserError(f"layout must be one of {LAYOUTS}, got {layout!r}")
    check_model(model, layout)
    if model.backbone.config.bi_data:
        raise UserError("model: bi_data=True; build it with bi_data=False (config_overrides) for recompute_logits")
    forward = _RECOMPUTE.get(model, {}).get(jit_compile)
    if forward is None:
        forward = tf.function(lambda f: model(f, training=False)["logits"][:, 0], jit_compile=jit_compile)
        _RECOMPUTE.setdefault(model, {})[jit_compile] = forward
    prompt = [int(i) for i in prompt_ids]
    steps = len(continuation_ids) if continuation_ids is not None else max_new_tokens
    ids, rows = [], []
    for k in range(steps):
        prefix = prompt + ids
        total = round_up(len(prefix) + 1, bucket)
        pad = total - len(prefix) - 1
        mask = np.zeros((total, total), np.float32)
        mask[pad:, pad:] = recompute_perm_mask(len(prefix), len(prompt), layout, window)
        mapping = np.zeros((1, 1, total), np.float32)
        mapping[0, 0, -1] = 1.0
        features = {"input_ids": tf.constant([[PADDING_ID] * pad + prefix + [MASK_ID]], tf.int32),
                    "segment_ids": tf.zeros([1, total], tf.int32),
                    "attention_mask": tf.constant([[0.0] * pad + [1.0] * (len(prefix) + 1)]),
                    "perm_mask": tf.constant(mask[None]), "target_mapping": tf.constant(mapping)}
        logits = forward(features).numpy()[0]
        rows.append(logits)
        ids.append(int(continuation_ids[k]) if continuation_ids is not None else int(np.argmax(logits)))
    return ids, np.stack(rows) if rows else np.zeros((0, model.backbone.config.n_token), np.float32)

