"""Held-out language-model evaluation with Transformer-XL memories (left-to-right factorization order).

Any XLNet is a left-to-right LM under the identity factorization order: with `perm_mask[i, j] = 1` (may NOT
attend) for `j >= i`, the query stream at `i` sees the tokens before `i` (and every memory) and predicts
token `i` through `target_mapping = I`; the content stream sees `j <= i`, so its states, cached as memories,
depend only on the past too. `attn_type="uni"` models get the same mask from their config as well.

A token stream is read in segments of `seg_len` tokens. With memories (`mem_len` > 0, which may exceed the
training one: positions are relative), each segment attends to the cached layer inputs of the previous
`mem_len` tokens (no recomputation: Transformer-XL's evaluation); without, each segment is read alone. With
`mem_len >= ` the stream length the segment-wise result equals reading the whole stream at once (tested).

Every position gets its negative log-likelihood (nats); `scored` marks the positions with any context (not
the stream's first token; without memories, not a segment's first token) that are not special symbols.
`compare` scores the tokens both readings score, so perplexity with and without memories is measured on the
same tokens. Bits per character = total nats / ln 2 / characters of the scored pieces (`▁` counts as the
space it stands for).
"""

from __future__ import annotations

import math
from typing import Dict, List, Optional, Sequence

import numpy as np
import tensorflow as tf


def causal_perm_mask(seg_len: int) -> np.ndarray:
    """`[L, L]` float32, 1 where position i may NOT attend to j (j >= i): the identity order's query mask."""
    return np.triu(np.ones((seg_len, seg_len), np.float32))


def segment_features(ids: np.ndarray, first_target: int = 0) -> Dict[str, tf.Tensor]:
    """Features of `ids [B, L]` for the left-to-right reading (one segment, single part); the query stream
    predicts positions `first_target..L-1` (`target_mapping [B, L - first_target, L]`), with their ids as
    `target_ids`."""
    batch, seg_len = ids.shape
    mapping = np.eye(seg_len, dtype=np.float32)[first_target:]
    return {
        "input_ids": tf.constant(ids, tf.int32),
        "segment_ids": tf.zeros([batch, seg_len], tf.int32),
        "perm_mask": tf.constant(np.broadcast_to(causal_perm_mask(seg_len), (batch, seg_len, seg_len))),
        "target_mapping": tf.constant(np.broadcast_to(mapping, (batch,) + mapping.shape)),
        "target_ids": tf.constant(ids[:, first_target:], tf.int32),
    }


def stream_rows(ids: Sequence[int], seg_len: int, batch_size: int) -> np.ndarray:
    """The stream as `batch_size` contiguous rows `[B, n_segments * seg_len]` (Transformer-XL's batching;
    the tail that does not fill a segment of every row is dropped)."""
    ids = np.asarray(ids, np.int32)
    per_row = (len(ids) // batch_size) // seg_len * seg_len
    if per_row == 0:
        raise ValueError(f"the stream has {len(ids)} tokens: fewer than one segment of {seg_len} per row "
                         f"(batch {batch_size})")
    return ids[:per_row * batch_size].reshape(batch_size, per_row)


def token_nll(model, rows: np.ndarray, seg_len: int, use_mems: bool) -> np.ndarray:
    """Negative log-likelihood (nats) of every position of `rows [B, T]`, read segment by segment.

    The model's config must have `bi_data=False` (a pretrained model's says True: that layout reads the
    second half of the rows with backward positions) and `reuse_len=None` (memories of whole segments)."""
    if model.config.bi_data or model.config.reuse_len:
        raise ValueError("lm_eval: build the model with bi_data=False and reuse_len=None (config_overrides); "
                         f"got bi_data={model.config.bi_data}, reuse_len={model.config.reuse_len}")
    @tf.function  # one trace per memory length (it grows to mem_len, then stays)
    def step(features, mems):
        out = model(features, mems=mems, training=False)
        nll = tf.nn.sparse_softmax_cross_entropy_with_logits(labels=features["target_ids"], logits=out["logits"])
        return nll, out["new_mems"]

    mems = None
    pieces = []
    for start in range(0, rows.shape[1], seg_len):
        nll, new_mems = step(segment_features(rows[:, start:start + seg_len]), mems)
        pieces.append(nll.numpy())
        if use_mems:
            mems = new_mems
    return np.concatenate(pieces, axis=1)


def sliding_window_nll(model, rows: np.ndarray, seg_len: int, context: int) -> np.ndarray:
    """The vanilla evaluation Transformer-XL is compared with: for every segment, the whole window of the last
    `context` tokens (the segment at its end) is recomputed from scratch, no memories, and the query stream
    predicts the segment's tokens only; returns their NLL `[B, T]` (windows at the stream's start are shorter:
    one trace per length)."""
    @tf.function
    def step(features):
        out = model(features, training=False)
        return tf.nn.sparse_softmax_cross_entropy_with_logits(labels=features["target_ids"], logits=out["logits"])

    pieces = []
    for start in range(0, rows.shape[1], seg_len):
        begin = max(0, start + seg_len - context)
        pieces.append(step(segment_features(rows[:, begin:start + seg_len], first_target=start - begin)).numpy())
    return np.concatenate(pieces, axis=1)


def scored_positions(rows: np.ndarray, seg_len: int, use_mems: bool, special_ids: Sequence[int]) -> np.ndarray:
    """`[B, T]` bool: positions with context that are not special symbols."""
    mask = ~np.isin(rows, np.asarray(list(special_ids), np.int32))
    if use_mems:
        mask[:, 0] = False
    else:
        mask[:, ::seg_len] = False
    return mask


def summarize(nll: np.ndarray, mask: np.ndarray, rows: np.ndarray, piece_chars: np.ndarray) -> Dict[str, float]:
    """Perplexity per token and bits per character over `mask`."""
    total = float(nll[mask].sum(dtype=np.float64))
    tokens = int(mask.sum())
    chars = int(piece_chars[rows[mask]].sum())
    return {"tokens": tokens, "characters": chars, "nll_per_token": total / tokens,
            "perplexity": math.exp(total / tokens), "bits_per_character": total / math.log(2) / max(chars, 1)}


def piece_char_counts(tokenizer) -> np.ndarray:
    """Characters each piece id stands for (`▁` = one space; special symbols 0)."""
    from xlnet_tf.text.tokenization import SPECIAL_SYMBOLS

    special = set(SPECIAL_SYMBOLS.values())
    return np.array([0 if i in special else len(tokenizer.sp.IdToPiece(i)) for i in range(tokenizer.vocab_size)],
                    np.int64)


def compare(model, ids: Sequence[int], seg_len: int, tokenizer, batch_size: int = 1,
            special_ids: Optional[Sequence[int]] = None) -> Dict[str, Dict[str, float]]:
    """Perplexity and bits per character of the stream `ids` with and without memories, on the tokens both
    readings score (each segment's first token excluded), plus the memory reading on all its tokens."""
    from xlnet_tf.text.tokenization import SPECIAL_SYMBOLS

    special = list(SPECIAL_SYMBOLS.values()) if special_ids is None else list(special_ids)
    rows = stream_rows(ids, seg_len, batch_size)
    chars = piece_char_counts(tokenizer)
    with_mems = token_nll(model, rows, seg_len, use_mems=True)
    without = token_nll(model, rows, seg_len, use_mems=False)
    common = scored_positions(rows, seg_len, False, special)
    return {"with_memories": summarize(with_mems, common, rows, chars),
            "without_memories": summarize(without, common, rows, chars),
            "with_memories_all_tokens": summarize(with_mems, scored_positions(rows, seg_len, True, special), rows,
                                                  chars)}


def encode_lines(lines: Sequence[str], tokenizer, eod_id: int, out: Optional[List[int]] = None) -> List[int]:
    """Appends to `out` the token ids of stripped `lines` (one paragraph each; a blank line ends a document:
    documents are joined by `<eod>`); returns `out`."""
    out = [] if out is None else out
    for line in lines:
        if not line:
            if out and out[-1] != eod_id:
                out.append(eod_id)
            continue
        out.extend(tokenizer.encode(line))
    return out


def read_stream(paths: List[str], tokenizer, eod_id: int) -> List[int]:
    """Token ids of UTF-8 text files: each line encoded, documents (blank-line separated) joined by `<eod>`
    (run/evaluate_lm.py reads its files with tfrecords.readers.corpus.read_text_file, which names bad ones)."""
    out: List[int] = []
    for path in paths:
        with open(path, encoding="utf-8") as f:
            encode_lines([line.strip() for line in f], tokenizer, eod_id, out)
    return out


def rows_needed(seg_len: int, batch_size: int) -> int:
    """The fewest stream tokens `stream_rows` can cut into `batch_size` rows of one segment."""
    return seg_len * batch_size
