"""One pretraining example and its record: the step's A/B pair assembled as `reuse | A <sep> B <sep> <cls>`,
whole-word span masks, then the factorization order (`permutation`, DESIGN §4) or, for the MLM objective,
BERT's corruption at the targets; `iter_steps` yields a shard's examples step by step, `serialize_example`
the compact record (`RECORD_FEATURES`, `perm_rank` stored + `STORED_RANK_OFFSET`).
"""

from __future__ import annotations

import dataclasses
from typing import Dict, Iterator, List, Optional, Tuple

import numpy as np

from tfrecords.pretrain import permutation
from tfrecords.pretrain.config import PretrainConfig, mlm_goals
from tfrecords.pretrain.rows import sentence_bounds, split_a_and_b_labeled
from xlnet_tf.text import tokenization
from xlnet_tf.text.tokenization import CLS_ID, MASK_ID, SEP_ID, SEG_ID_A, SEG_ID_B, SEG_ID_CLS

RECORD_FEATURES = ("input_ids", "segment_ids", "perm_rank", "target_index", "target_ids")


@dataclasses.dataclass
class Example:
    """One pretraining example before serialization (int64 arrays)."""

    input_ids: np.ndarray  # [L]
    segment_ids: np.ndarray  # [L]
    perm_rank: np.ndarray  # [L]
    target_index: np.ndarray  # [P]
    target_ids: np.ndarray  # [P]
    is_masked: np.ndarray  # [L] bool, not serialized (tests, stats)
    is_next: Optional[np.ndarray] = None  # [1] next-sentence label, serialized only when the build has `nsp`

    def features(self) -> Dict[str, np.ndarray]:
        out = {k: getattr(self, k) for k in RECORD_FEATURES}
        if self.is_next is not None:
            out["is_next"] = self.is_next
        return out


def make_example(row: np.ndarray, ab: Tuple[int, int, int, int], i: int,
                 cfg: PretrainConfig, word_start: np.ndarray, reverse: bool,
                 rng: np.random.Generator, is_next: Optional[int] = None) -> Example:
    """Assemble, span-mask and order one example from step offset `i` of `row` (with `cfg.nsp`, the
    next-sentence label `is_next` is stored)."""
    ex = _make_example(row, ab, i, cfg, word_start, reverse, rng)
    if cfg.nsp:
        if is_next is None:
            raise ValueError("an nsp build needs the next-sentence label")
        ex.is_next = np.asarray([is_next], np.int64)
    return ex


def _make_example(row, ab, i, cfg, word_start, reverse, rng) -> Example:
    R, L = cfg.reuse_len, cfg.seq_len
    a0, a1, b0, b1 = ab
    inp = row[i:i + R]
    new = np.concatenate([row[a0:a1], [SEP_ID], row[b0:b1], [SEP_ID, CLS_ID]]).astype(np.int64)
    ids = np.concatenate([inp.astype(np.int64), new])
    if ids.shape[0] != L:
        raise AssertionError(f"example length {ids.shape[0]} != seq_len {L}")
    la = a1 - a0
    seg = np.full(L, SEG_ID_A, np.int64)
    seg[R + la + 1:L - 1] = SEG_ID_B
    seg[L - 1] = SEG_ID_CLS
    kw = dict(mask_alpha=cfg.mask_alpha, mask_beta=cfg.mask_beta, max_gram=cfg.max_gram,
              reverse=reverse)
    if cfg.objective == "mlm":
        return _make_mlm_example(ids, seg, inp, new, cfg, word_start, rng, kw)
    k0, k1 = permutation.split_num_predict(cfg.num_predict, L, R)
    m0 = permutation.sample_span_mask(word_start[inp], k0, rng, **kw)
    m1 = permutation.sample_span_mask(word_start[new], k1, rng, **kw)
    is_masked = np.concatenate([m0, m1])
    perm_rank, tidx, tids = permutation.encode_order(ids, is_masked, R, cfg.perm_size,
                                                     cfg.num_predict, rng)
    return Example(ids, seg, perm_rank, tidx, tids, is_masked)


def _make_mlm_example(ids, seg, inp, new, cfg, word_start, rng, kw) -> Example:
    """MLM: whole-word spans over each part's non-functional tokens (the new part's A and B read as
    one run of text), BERT's corruption at the targets, every position plain context."""
    k0, k1 = mlm_goals(cfg)
    m0 = permutation.sample_span_mask(word_start[inp], k0, rng, **kw)
    keep = np.flatnonzero(~permutation.functional_mask(new))
    m1 = np.zeros(new.shape[0], bool)
    m1[keep] = permutation.sample_span_mask(word_start[new[keep]], k1, rng, **kw)
    is_masked = np.concatenate([m0, m1])
    # no order: every rank -1, so every position (functional ones too) is plain context
    perm_rank, target_index, target_ids = permutation.encode_ranked(
        ids, is_masked, np.full(ids.shape[0], -1, np.int64), cfg.num_predict)
    corrupted = mlm_corrupt(ids, is_masked, cfg, word_start.shape[0], rng)
    return Example(corrupted, seg, perm_rank, target_index, target_ids, is_masked)


def mlm_corrupt(ids: np.ndarray, is_target: np.ndarray, cfg: PretrainConfig, vocab_size: int,
                rng: np.random.Generator) -> np.ndarray:
    """BERT's input corruption at the targets: `<mask>` with `mlm_mask_token_prob`, a uniformly random
    non-special id (`[len(SPECIAL_SYMBOLS), vocab_size)`) with `mlm_random_token_prob`, else kept."""
    out = ids.copy()
    pos = np.flatnonzero(is_target)
    u = rng.random(pos.size)
    rand = rng.integers(len(tokenization.SPECIAL_SYMBOLS), vocab_size, pos.size)
    pm, pr = cfg.mlm_mask_token_prob, cfg.mlm_random_token_prob
    out[pos] = np.where(u < pm, MASK_ID, np.where(u < pm + pr, rand, ids[pos]))
    return out


def iter_steps(data: np.ndarray, sids: np.ndarray, cfg: PretrainConfig,
               word_start: np.ndarray, rng: np.random.Generator) -> Iterator[List[Example]]:
    """Yield, step by step, the `global_batch_size` examples (row order) of a shard.

    Stops at the end of the rows, or at the first step where some row cannot fit an A/B
    pair (all rows of that step are dropped, as the original).
    """
    B, T = data.shape
    L, R = cfg.seq_len, cfg.reuse_len
    tot_len = L - R - 3
    half = cfg.per_replica_batch_size // 2
    reverse = [cfg.bi_data and (r // half) % 2 == 1 for r in range(B)]
    bounds = [sentence_bounds(sids[r]) for r in range(B)]
    i = 0
    while i + L <= T:
        step = []
        for r in range(B):
            split = split_a_and_b_labeled(sids[r], bounds[r], i + R, tot_len, rng)
            if split is None:
                return
            ab, is_next = split
            step.append(make_example(data[r], ab, i, cfg, word_start, reverse[r], rng, is_next))
        yield step
        i += R


# `perm_rank` is stored shifted by one (0 = plain context token): a negative int64 costs a 10-byte
# varint, which made -1 for the ~420 context tokens of a 512-token example about 4 KB of its ~6 KB.
STORED_RANK_OFFSET = 1


def serialize_example(ex: Example) -> bytes:
    """A `tf.train.Example` with int64 features `RECORD_FEATURES` (`perm_rank` stored + 1)."""
    import tensorflow as tf

    feats = {k: tf.train.Feature(int64_list=tf.train.Int64List(value=v.tolist()))
             for k, v in ex.features().items()}
    feats["perm_rank"] = tf.train.Feature(int64_list=tf.train.Int64List(
        value=(ex.perm_rank + STORED_RANK_OFFSET).tolist()))
    return tf.train.Example(features=tf.train.Features(feature=feats)).SerializeToString(
        deterministic=True)
