"""Span masking, factorization orders and their compact O(L) encoding (numpy), and the
decoding of that encoding into the model's dense masks (TensorFlow, and numpy).

Factorization order (the original `_local_perm`): a part of length n is cut into blocks
of `perm_size`; ONE random permutation `sigma` of `range(perm_size)` is shared by all
blocks, so position `b*perm_size + k` has rank `b*perm_size + sigma[k]` (blocks stay
left to right). The reuse part `[0, reuse_len)` and the new part `[reuse_len, L)` are
ordered independently, and the whole reuse part comes before the new part.

Compact encoding of one example (DESIGN §4):
  perm_rank    int [L]  rank within its part for masked-or-functional tokens
                        (`<sep>`/`<cls>` always), -1 for plain context tokens (the record
                        files store rank + 1, see `pretrain_examples.STORED_RANK_OFFSET`).
  target_index int [P]  positions of the prediction slots, position order, -1 padded.
  target_ids   int [P]  input_ids at those positions, 0 padded.

Decoding (exactly the original parser + `_local_perm`):
  perm_mask[i, j] = 1 means i may NOT attend to j.
  within a part:  perm_mask[i, j] = (self_rank[i] <= rank[j]) & mof[j], where
                  mof = rank >= 0 (masked or functional), target = mof & ~functional,
                  self_rank = rank for targets, rank + 1 otherwise (-1 + 1 = 0 for
                  context, so context sees context and no masked/functional token);
  reuse row, new column: 1 (the reuse part never sees the new part);
  new row, reuse column: 0 (the new part sees all of the reuse part).
  target_mapping[p] = one_hot(target_index[p], L) (all-zero row for a padded slot),
  target_mask[p] = target_index[p] >= 0, input_q[i] = 1 at target positions.
"""

from __future__ import annotations

import bisect
from typing import Dict, Optional, Tuple

import numpy as np

from xlnet_tf.text.tokenization import CLS_ID, SEP_ID

MAX_GRAM = 5


def ngram_probs(max_gram: int = MAX_GRAM) -> np.ndarray:
    """p(n) proportional to 1/n for n = 1..max_gram (the original)."""
    p = 1.0 / np.arange(1, max_gram + 1)
    return p / p.sum()


def split_num_predict(num_predict: int, seq_len: int, reuse_len: int) -> Tuple[int, int]:
    """Targets drawn in the (reuse, new) parts: 43/42 for 85 at reuse_len = seq_len/2
    (the original's `num_predict - num_predict//2`, `num_predict//2`), proportional to
    the part lengths otherwise."""
    k1 = (num_predict * (seq_len - reuse_len)) // seq_len
    return num_predict - k1, k1


def block_perm_rank(n: int, perm_size: int, rng: np.random.Generator) -> np.ndarray:
    """int64 [n]: rank of every position in a `_local_perm` factorization order."""
    if perm_size <= 0 or n % perm_size:
        raise ValueError(f"perm_size={perm_size} must divide the part length {n}")
    sigma = rng.permutation(perm_size)
    pos = np.arange(n)
    return (pos // perm_size) * perm_size + sigma[pos % perm_size]


def left_context(u: float, ctx: int) -> int:
    """The left context of a span, uniform in `[0, ctx - 1]` for `u` uniform in [0, 1): the original's
    `np.random.choice(ctx_size)`. The right context `ctx - l_ctx` is then >= 1, so consecutive spans
    never touch (and never merge into a longer one). `ctx = 0` (mask_alpha < mask_beta) gives 0."""
    return min(int(u * ctx), ctx - 1) if ctx > 0 else 0


def sample_span_mask(word_start: np.ndarray, goal: int, rng: np.random.Generator,
                     mask_alpha: float = 6, mask_beta: float = 1, max_gram: int = MAX_GRAM,
                     reverse: bool = False) -> np.ndarray:
    """Mask exactly `goal` tokens of a segment in spans of whole words.

    Spans of n ~ 1/n words (n <= max_gram) are placed left to right, each in a context
    window of `ctx = n * mask_alpha // mask_beta` tokens with the left context uniform in
    `[0, ctx - 1]` (the original `_sample_mask`, but counting whole words, not sub-pieces:
    PR #16; a deliberate improvement). A span is shortened (fewer words)
    when it would exceed the goal; spans touching the segment end are discarded. The
    remaining budget is filled with random unmasked whole words that fit, and only when
    none fits, with single tokens (the original fills it with random single sub-pieces; whole
    words are the deliberate improvement here too).

    Args:
      word_start: bool [n], True where a token starts a word, in segment order.
      goal: number of tokens to mask (<= n).
      reverse: the segment is time-reversed text; spans are laid out on the natural
        order and the mask is reversed back.
    Returns:
      bool [n] with exactly `goal` True entries.
    """
    ws = np.asarray(word_start, bool)
    n = ws.shape[0]
    if goal > n:
        raise ValueError(f"cannot mask {goal} of {n} tokens")
    if reverse:
        ws = ws[::-1]
    mask = np.zeros(n, bool)
    starts = np.flatnonzero(ws)
    ns = len(starts)
    st = starts.tolist()  # python scalars + bisect: ~10x faster than numpy per call
    cum = np.cumsum(ngram_probs(max_gram)).tolist()
    cum[-1] = 2.0  # guard against round-off
    npred, cur = 0, 0
    draws: list = []
    k = 0
    while cur < n and npred < goal:
        if k >= len(draws):
            draws, k = rng.random(128).tolist(), 0
        nw = bisect.bisect_right(cum, draws[k]) + 1
        l_frac = draws[k + 1]
        k += 2
        nw = min(nw, goal - npred)
        ctx = int((nw * mask_alpha) // mask_beta)
        l_ctx = left_context(l_frac, ctx)
        si = bisect.bisect_left(st, cur + l_ctx)
        if si + nw >= ns:  # no word start left, or the span would touch the end
            break
        beg = st[si]
        end = st[si + nw]
        budget = goal - npred
        while end - beg > budget and nw > 1:
            nw -= 1
            end = st[si + nw]
        if end - beg <= budget:
            mask[beg:end] = True
            npred += end - beg
        cur = end + (ctx - l_ctx)
    remaining = goal - npred
    if remaining > 0:
        wb = starts if (ns and starts[0] == 0) else np.concatenate([[0], starts])
        wb = wb.astype(np.int64)
        we = np.concatenate([wb[1:], [n]])
        wlen = we - wb
        free = np.add.reduceat(mask.astype(np.int64), wb) == 0
        while remaining > 0:
            cand = np.flatnonzero(free & (wlen <= remaining))
            if cand.size:
                w = cand[rng.integers(cand.size)]
                mask[wb[w]:we[w]] = True
                free[w] = False
                remaining -= int(wlen[w])
            else:
                pos = np.flatnonzero(~mask)
                p = pos[rng.integers(pos.size)]
                mask[p] = True
                free[np.searchsorted(wb, p, side="right") - 1] = False
                remaining -= 1
    if reverse:
        mask = mask[::-1].copy()
    return mask


def functional_mask(input_ids: np.ndarray) -> np.ndarray:
    """bool: `<sep>` or `<cls>` (take part in the order, never targets)."""
    ids = np.asarray(input_ids)
    return (ids == SEP_ID) | (ids == CLS_ID)


def encode_order(input_ids: np.ndarray, is_masked: np.ndarray, reuse_len: int,
                 perm_size: int, num_predict: int, rng: np.random.Generator
                 ) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Sample the factorization order of one example and encode it compactly.

    Args:
      input_ids: int [L]; is_masked: bool [L] (span-mask output, reuse part then new).
    Returns:
      perm_rank int64 [L], target_index int64 [num_predict], target_ids int64 [num_predict]
      (see the module docstring).
    """
    seq_len = np.asarray(input_ids).shape[0]
    rank = np.concatenate([block_perm_rank(reuse_len, perm_size, rng),
                           block_perm_rank(seq_len - reuse_len, perm_size, rng)])
    return encode_ranked(input_ids, is_masked, rank, num_predict)


def encode_ranked(input_ids: np.ndarray, is_masked: np.ndarray, rank: np.ndarray,
                  num_predict: int) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
    """`encode_order` for a given order: `rank` int [L] is every position's rank within
    its part (the original `_local_perm`'s `index`, per part)."""
    ids = np.asarray(input_ids, np.int64)
    is_masked = np.asarray(is_masked, bool)
    func = functional_mask(ids)
    mof = is_masked | func
    perm_rank = np.where(mof, np.asarray(rank, np.int64), -1)
    tgt = np.flatnonzero(is_masked & ~func)
    if tgt.size > num_predict:
        raise ValueError(f"{tgt.size} targets > num_predict={num_predict}")
    target_index = np.full(num_predict, -1, np.int64)
    target_ids = np.zeros(num_predict, np.int64)
    target_index[:tgt.size] = tgt
    target_ids[:tgt.size] = ids[tgt]
    return perm_rank, target_index, target_ids


# ---- decoding ------------------------------------------------------------------------------

def decode_order_numpy(input_ids, perm_rank, target_index, reuse_len: int
                       ) -> Dict[str, np.ndarray]:
    """Numpy twin of `decode_order` for one example ([L] inputs); float32 outputs."""
    ids = np.asarray(input_ids)
    rank = np.asarray(perm_rank, np.int64)
    tidx = np.asarray(target_index, np.int64)
    seq_len = ids.shape[-1]
    func = functional_mask(ids)
    mof = rank >= 0
    tgt = mof & ~func
    self_rank = np.where(tgt, rank, rank + 1)
    part = np.arange(seq_len) >= reuse_len
    same = part[:, None] == part[None, :]
    within = (self_rank[:, None] <= rank[None, :]) & mof[None, :]
    cross = part[:, None] < part[None, :]
    perm_mask = np.where(same, within, cross).astype(np.float32)
    tm = np.zeros((tidx.shape[0], seq_len), np.float32)
    valid = tidx >= 0
    tm[np.flatnonzero(valid), tidx[valid]] = 1.0
    return {"perm_mask": perm_mask, "target_mapping": tm,
            "target_mask": valid.astype(np.float32), "input_q": tgt.astype(np.float32)}


def decode_order(input_ids, perm_rank, target_index, reuse_len: int):
    """Decode the compact order into dense masks with TF ops (batched or not).

    Args:
      input_ids, perm_rank: int tensors [..., L]; target_index: int [..., P].
      reuse_len: static length of the reuse part.
    Returns:
      dict of float32 tensors: `perm_mask` [..., L, L] (1 = i may NOT attend to j),
      `target_mapping` [..., P, L] (one-hot rows, all-zero = padded slot),
      `target_mask` [..., P] (1 = real slot), `input_q` [..., L] (1 = target position).
    """
    import tensorflow as tf

    rank = tf.cast(perm_rank, tf.int32)
    ids = tf.cast(input_ids, tf.int32)
    seq_len = rank.shape[-1]
    if seq_len is None:
        raise ValueError("decode_order needs a static sequence length")
    func = tf.logical_or(tf.equal(ids, SEP_ID), tf.equal(ids, CLS_ID))
    mof = rank >= 0
    tgt = tf.logical_and(mof, tf.logical_not(func))
    self_rank = tf.where(tgt, rank, rank + 1)
    within = tf.logical_and(self_rank[..., :, None] <= rank[..., None, :], mof[..., None, :])
    part = tf.range(seq_len) >= reuse_len
    same = tf.equal(part[:, None], part[None, :])
    cross = tf.logical_and(tf.logical_not(part)[:, None], part[None, :])
    perm_mask = tf.where(same, within, cross)
    tidx = tf.cast(target_index, tf.int32)
    return {
        "perm_mask": tf.cast(perm_mask, tf.float32),
        "target_mapping": tf.one_hot(tidx, seq_len, dtype=tf.float32),  # -1 -> zeros
        "target_mask": tf.cast(tidx >= 0, tf.float32),
        "input_q": tf.cast(tgt, tf.float32),
    }


def check_compact_example(input_ids, segment_ids, perm_rank, target_index, target_ids,
                          reuse_len: int, perm_size: Optional[int] = None) -> None:
    """Raise ValueError if a decoded record violates the schema's invariants (used by
    `inspect_records --check` and tests)."""
    ids = np.asarray(input_ids, np.int64)
    rank = np.asarray(perm_rank, np.int64)
    tidx = np.asarray(target_index, np.int64)
    tids = np.asarray(target_ids, np.int64)
    seq_len = ids.shape[0]
    func = functional_mask(ids)
    problems = []
    seg = np.asarray(segment_ids, np.int64)
    if seg.shape != ids.shape or rank.shape != ids.shape:
        problems.append("input_ids, segment_ids and perm_rank differ in length")
    elif not np.isin(seg, [0, 1, 2]).all():
        problems.append("segment id outside {0, 1, 2}")
    if ids[-1] != CLS_ID:
        problems.append("the last token is not <cls>")
    if (rank[func] < 0).any():
        problems.append("a <sep>/<cls> has no rank")
    for lo, hi in ((0, reuse_len), (reuse_len, seq_len)):
        r = rank[lo:hi]
        r = r[r >= 0]
        if r.size != np.unique(r).size:
            problems.append(f"duplicate ranks in part [{lo},{hi})")
        if r.size and (r.min() < 0 or r.max() >= hi - lo):
            problems.append(f"rank out of range in part [{lo},{hi})")
        if perm_size:
            pos = np.flatnonzero(rank[lo:hi] >= 0)
            if (rank[lo:hi][pos] // perm_size != pos // perm_size).any():
                problems.append("a rank left its perm_size block")
    n_real = int((tidx >= 0).sum())
    if (tidx[n_real:] != -1).any() or (tids[n_real:] != 0).any():
        problems.append("padding slots are not at the end / not -1 and 0")
    real = tidx[:n_real]
    if n_real and ((np.diff(real) <= 0).any() or real.min() < 0 or real.max() >= seq_len):
        problems.append("target_index not strictly increasing positions")
    want = np.flatnonzero((rank >= 0) & ~func)
    if not np.array_equal(want, real):
        problems.append("target_index != masked non-functional positions")
    if n_real and not np.array_equal(ids[real], tids[:n_real]):
        problems.append("target_ids != input_ids at target positions")
    if problems:
        raise ValueError("invalid record: " + "; ".join(problems))
