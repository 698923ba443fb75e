"""The packers of XLNet's layouts in numpy (for the record builders); `packing_tf` holds their in-graph twins.

Each takes token ids (no special tokens) and returns the features of one sequence, arrays without a batch axis:
`input_ids` int32 [L], `segment_ids` int32 [L] (0 A, 1 B, 2 CLS, 4 pad), `attention_mask` [L] (1 = real token,
0 = padding; float32 for the left-padded layouts, int32 for SQuAD's, as their records have always been read),
and whether anything was cut. See `layout` for the table of layouts and the truncation rule.
"""

from __future__ import annotations

from typing import Dict, Optional, Sequence, Tuple

import numpy as np

from xlnet_tf.text.layout import (CLS_ID, LEFT, PADDING_ID, RIGHT, SEG_ID_A, SEG_ID_B, SEG_ID_CLS, SEG_ID_PAD, SEP_ID,
                                  shrink_pair)

Features = Dict[str, np.ndarray]
QA_TRUNCATIONS = ("tail", "head")


def pad(tokens: Sequence[int], segments: Sequence[int], length: int, side: str = LEFT,
        mask_dtype=np.float32) -> Features:
    """`tokens` and their `segments` padded to `length` on `side` ("left" | "right"): ids `PADDING_ID`, segment
    `SEG_ID_PAD`, attention mask 0. ValueError when they do not fit."""
    n = len(tokens)
    if n > length:
        raise ValueError(f"packed sequence of {n} tokens exceeds max_seq_length {length}")
    if side not in (LEFT, RIGHT):
        raise ValueError(f"side must be {LEFT!r} or {RIGHT!r}, got {side!r}")
    ids = np.full([length], PADDING_ID, np.int32)
    seg = np.full([length], SEG_ID_PAD, np.int32)
    mask = np.zeros([length], mask_dtype)
    real = slice(length - n, length) if side == LEFT else slice(0, n)
    ids[real], seg[real], mask[real] = tokens, segments, 1
    return {"input_ids": ids, "segment_ids": seg, "attention_mask": mask}


def pack_pair(ids_a: Sequence[int], ids_b: Optional[Sequence[int]], length: int) -> Tuple[Features, bool]:
    """Classification / regression (and a long document at `length` = S * L): `A <sep> [B <sep>] <cls>`,
    left-padded. With B (non-empty): `shrink_pair(len A, len B, length - 3)` (a B cut to nothing is left out
    with its `<sep>`, as the original's `if tokens_b:` after truncating); without: `A[:length - 2]`.
    Returns the features and whether anything was cut."""
    ids_a = list(ids_a)
    ids_b = list(ids_b) if ids_b is not None and len(ids_b) else []
    if ids_b:
        len_a, len_b = shrink_pair(len(ids_a), len(ids_b), length - 3)
    else:
        len_a, len_b = min(len(ids_a), length - 2), 0
    truncated = len_a < len(ids_a) or len_b < len(ids_b)
    tokens = ids_a[:len_a] + [SEP_ID]
    segments = [SEG_ID_A] * len(tokens)
    if len_b:  # a B cut to nothing takes no <sep> (the original tests the truncated list)
        tokens += ids_b[:len_b] + [SEP_ID]
        segments += [SEG_ID_B] * (len_b + 1)
    tokens.append(CLS_ID)
    segments.append(SEG_ID_CLS)
    return pad(tokens, segments, length, LEFT), truncated


def pack_choice(context_ids: Sequence[int], qa_ids: Sequence[int], length: int, max_qa_length: int,
                qa_truncation: str = "tail") -> Tuple[Features, bool]:
    """Multiple choice, one choice: `context <sep> qa <sep> <cls>`, left-padded. The question+option `qa` keeps
    its last (`qa_truncation="tail"`, the original's) or first `max_qa_length` ids; the context what is left
    (`length - 3 - len(qa)`, its first ids). Returns the features and whether anything was cut."""
    if qa_truncation not in QA_TRUNCATIONS:
        raise ValueError(f"qa_truncation must be one of {QA_TRUNCATIONS}, got {qa_truncation!r}")
    qa = list(qa_ids)
    if len(qa) > max_qa_length:
        qa = qa[-max_qa_length:] if qa_truncation == "tail" else qa[:max_qa_length]
    context = list(context_ids[:length - 3 - len(qa)])  # a fresh list: never alias the article's ids
    truncated = len(qa) < len(qa_ids) or len(context) < len(context_ids)
    tokens = context + [SEP_ID] + qa + [SEP_ID, CLS_ID]
    segments = [SEG_ID_A] * (len(context) + 1) + [SEG_ID_B] * (len(qa) + 1) + [SEG_ID_CLS]
    return pad(tokens, segments, length, LEFT), truncated


def pack_squad_window(doc_ids: Sequence[int], query_ids: Sequence[int], length: int) -> Features:
    """SQuAD, one window: `P <sep> Q <sep> <cls>`, right-padded, with `p_mask` int32 [L] (1 = cannot be in the
    answer: `<sep>`s, the question, padding; 0 = paragraph and `<cls>`) and `cls_index` (int). The caller cuts
    the windows (doc stride) and the question; ValueError when they do not fit."""
    n, q = len(doc_ids), len(query_ids)
    tokens = list(doc_ids) + [SEP_ID] + list(query_ids) + [SEP_ID, CLS_ID]
    segments = [SEG_ID_A] * (n + 1) + [SEG_ID_B] * (q + 1) + [SEG_ID_CLS]
    if len(tokens) > length:
        raise ValueError(f"{len(tokens)} tokens do not fit max_seq_length {length}")
    features = pad(tokens, segments, length, RIGHT, mask_dtype=np.int32)
    p_mask = np.ones([length], np.int32)
    p_mask[:n] = 0
    p_mask[n + q + 2] = 0
    return {**features, "p_mask": p_mask, "cls_index": n + q + 2}
