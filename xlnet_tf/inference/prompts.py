"""Prompts as a generation program reads them: left-padded to one length that the segments tile, and the memory
buffer that holds them and the new tokens."""

from __future__ import annotations

from typing import Sequence

import numpy as np

from xlnet_tf.errors import UserError
from xlnet_tf.inference.settings import GenerationSettings
from xlnet_tf.text.layout import PADDING_ID

# Prepended (with <eod>) to each prompt when `padding_text` is on: the original authors' advice for short
# prompts is to give XLNet a long context to condition on. Any long neutral text serves; this one is ours.
PADDING_TEXT = (
    "The river valley was settled by farmers in the early years of the nineteenth century. They cleared the "
    "forest along the banks, built mills where the water fell fastest, and traded grain and timber with the "
    "towns downstream. A road followed the river by the middle of the century, and a railway some decades "
    "later; the mills grew into factories, and the villages into small towns with schools, churches and a "
    "weekly newspaper. The valley's history was written down by a local teacher, whose notes on the families, "
    "the floods and the harvests of each year are still kept in the town library.")


def pack_prompts(prompts: Sequence[Sequence[int]], n_token: int, mem_len: int, settings: GenerationSettings):
    """Left-pads `prompts` (each kept to its last `mem_len` tokens) -> `(ids [B, Lp] int32, mask [B, Lp]
    bool (True = real token), lengths [B], truncated [B] bool, segment length S)`, `Lp` a multiple of S."""
    rows = []
    for i, p in enumerate(prompts):
        p = np.asarray(p, np.int64).reshape(-1)
        if p.size == 0:
            raise UserError(f"prompts[{i}] is empty: give at least one token")
        if p.min() < 0 or p.max() >= n_token:
            raise UserError(f"prompts[{i}] holds ids outside the vocabulary [0, {n_token}): "
                            f"{sorted(set(p[(p < 0) | (p >= n_token)].tolist()))[:5]}")
        rows.append(p)
    truncated = np.array([len(p) > mem_len for p in rows])
    rows = [p[-mem_len:] for p in rows]
    lengths = np.array([len(p) for p in rows])
    length = round_up(int(lengths.max()), settings.pad_multiple)
    seg = min(settings.segment_len, length)
    length = round_up(length, seg)
    ids = np.full((len(rows), length), PADDING_ID, np.int32)
    mask = np.zeros((len(rows), length), bool)
    for b, p in enumerate(rows):
        ids[b, length - len(p):] = p
        mask[b, length - len(p):] = True
    return ids, mask, lengths, truncated, seg


def memory_length(settings: GenerationSettings, padded_prompt: int) -> int:
    """The memory buffer: `mem_len`, at most the whole past (the padded prompt and the new tokens): a longer
    buffer would hold nothing more, so the outputs are the same and no buffer the program cannot allocate is
    asked for."""
    whole = padded_prompt + settings.max_new_tokens
    return min(settings.mem_len, whole) if settings.mem_len else whole


def round_up(n: int, k: int) -> int:
    """The least multiple of `k` that is `>= n`."""
    return -(-n // k) * k
