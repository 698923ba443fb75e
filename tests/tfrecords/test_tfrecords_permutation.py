"""tfrecords/pretrain/permutation.py: factorization orders, span masks, compact encoding, decoding.

The reference below is a line-by-line numpy transcription of the original `data_utils`
parser + `_local_perm` (reference §2.7); the TF decoder must reproduce it exactly.
"""

import numpy as np
import pytest

from tests import data_fixtures  # noqa: F401
from tfrecords.pretrain import permutation as P
from xlnet_tf.text.tokenization import CLS_ID, SEP_ID


# ---- the original, transcribed ----------------------------------------------------------------

def original_local_perm(inputs, targets, is_masked, perm_size, seq_len, row_perm):
    """`_local_perm` with `tf.random_shuffle(index)` replaced by `index[row_perm]`."""
    index = np.arange(seq_len).reshape(-1, perm_size).T
    index = index[row_perm]
    index = index.T.reshape(-1)
    non_func_tokens = np.logical_not(np.logical_or(inputs == SEP_ID, inputs == CLS_ID))
    non_mask_tokens = np.logical_and(np.logical_not(is_masked), non_func_tokens)
    masked_or_func_tokens = np.logical_not(non_mask_tokens)
    smallest_index = -np.ones([seq_len], dtype=np.int64)
    rev_index = np.where(non_mask_tokens, smallest_index, index)
    target_tokens = np.logical_and(masked_or_func_tokens, non_func_tokens)
    target_mask = target_tokens.astype(np.float32)
    self_rev_index = np.where(target_tokens, rev_index, rev_index + 1)
    perm_mask = np.logical_and(self_rev_index[:, None] <= rev_index[None, :],
                               masked_or_func_tokens)
    perm_mask = perm_mask.astype(np.float32)
    new_targets = np.concatenate([inputs[0:1], targets[:-1]], axis=0)
    inputs_k = inputs
    inputs_q = target_mask
    return perm_mask, new_targets, target_mask, inputs_k, inputs_q, index, rev_index


def original_parser(inputs, target, is_masked, reuse_len, perm_size, num_predict,
                    row_perm_0, row_perm_1):
    seq_len = inputs.shape[0]
    pm0, t0, tm0, k0, q0, _, _ = original_local_perm(
        inputs[:reuse_len], target[:reuse_len], is_masked[:reuse_len], perm_size, reuse_len,
        row_perm_0)
    pm1, t1, tm1, k1, q1, _, _ = original_local_perm(
        inputs[reuse_len:], target[reuse_len:], is_masked[reuse_len:], perm_size,
        seq_len - reuse_len, row_perm_1)
    perm_mask_0 = np.concatenate([pm0, np.ones([reuse_len, seq_len - reuse_len])], axis=1)
    perm_mask_1 = np.concatenate([np.zeros([seq_len - reuse_len, reuse_len]), pm1], axis=1)
    perm_mask = np.concatenate([perm_mask_0, perm_mask_1], axis=0)
    target = np.concatenate([t0, t1], axis=0)
    target_mask = np.concatenate([tm0, tm1], axis=0)
    input_q = np.concatenate([q0, q1], axis=0)
    indices = np.arange(seq_len, dtype=np.int64)
    indices = indices[target_mask.astype(bool)]
    actual_num_predict = indices.shape[0]
    pad_len = num_predict - actual_num_predict
    target_mapping = np.eye(seq_len, dtype=np.float32)[indices]
    target_mapping = np.concatenate([target_mapping, np.zeros([pad_len, seq_len])], axis=0)
    target = np.concatenate([target[indices], np.zeros([pad_len], np.int64)], axis=0)
    target_mask = np.concatenate([np.ones([actual_num_predict]), np.zeros([pad_len])], axis=0)
    return {"perm_mask": perm_mask.astype(np.float32),
            "target_mapping": target_mapping.astype(np.float32),
            "target_ids": target.astype(np.int64),
            "target_mask": target_mask.astype(np.float32),
            "input_q": input_q.astype(np.float32)}


def rank_from_row_perm(n, perm_size, row_perm):
    return original_local_perm(np.zeros(n, np.int64), np.zeros(n, np.int64), np.zeros(n, bool),
                               perm_size, n, row_perm)[5]


def decode_tf(ids, rank, tidx, reuse_len):
    import tensorflow as tf

    out = P.decode_order(tf.constant(ids[None]), tf.constant(rank[None]),
                         tf.constant(tidx[None]), reuse_len)
    return {k: v.numpy()[0] for k, v in out.items()}


# ---- tests -------------------------------------------------------------------------------------

@pytest.mark.parametrize("n,perm_size", [(8, 4), (16, 16), (24, 8), (256, 256), (512, 64)])
def test_block_perm_rank_is_local_perm_index(n, perm_size):
    rng = np.random.default_rng(n + perm_size)
    rank = P.block_perm_rank(n, perm_size, rng)
    row_perm = np.random.default_rng(n + perm_size).permutation(perm_size)
    np.testing.assert_array_equal(rank, rank_from_row_perm(n, perm_size, row_perm))
    assert sorted(rank) == list(range(n))
    np.testing.assert_array_equal(rank // perm_size, np.arange(n) // perm_size)
    with pytest.raises(ValueError, match="must divide"):
        P.block_perm_rank(n + 1, perm_size, rng)


def test_worked_example_of_the_reference():
    # Reference §2.7: inputs [10,11,12,13,14,15,SEP,CLS], masked {1,2,5}, perm_size 4,
    # index [2,3,1,0,6,7,5,4] -> rev_index [-1,3,1,-1,-1,7,5,4].
    inputs = np.array([10, 11, 12, 13, 14, 15, SEP_ID, CLS_ID])
    masked = np.zeros(8, bool)
    masked[[1, 2, 5]] = True
    row_perm = np.array([2, 3, 1, 0])
    pm, _, tmask, _, q, index, rev = original_local_perm(inputs, inputs, masked, 4, 8, row_perm)
    np.testing.assert_array_equal(index, [2, 3, 1, 0, 6, 7, 5, 4])
    np.testing.assert_array_equal(rev, [-1, 3, 1, -1, -1, 7, 5, 4])
    sees = lambda m, i: set(np.flatnonzero(m[i] == 0).tolist())  # noqa: E731
    assert sees(pm, 1) == {0, 2, 3, 4}
    assert sees(pm, 5) == set(range(8)) - {5}
    assert sees(pm, 0) == {0, 3, 4}

    # Our encoding: the example is the new part of a 16-token sequence.
    R = 8
    reuse = np.array([20, 21, 22, 23, 24, 25, 26, 27])
    reuse_masked = np.zeros(8, bool)
    reuse_masked[[2, 7]] = True
    ids = np.concatenate([reuse, inputs])
    is_masked = np.concatenate([reuse_masked, masked])
    rank = np.concatenate([rank_from_row_perm(8, 4, np.array([1, 0, 3, 2])), index])
    perm_rank, tidx, tids = P.encode_ranked(ids, is_masked, rank, num_predict=5)
    np.testing.assert_array_equal(perm_rank[R:], [-1, 3, 1, -1, -1, 7, 5, 4])
    np.testing.assert_array_equal(tidx, [2, 7, 9, 10, 13])
    np.testing.assert_array_equal(tids, ids[tidx])
    for dec in (decode_tf(ids, perm_rank, tidx, R), P.decode_order_numpy(ids, perm_rank, tidx, R)):
        m = dec["perm_mask"]
        np.testing.assert_array_equal(m[R:, R:], pm)
        assert sees(m, R + 1) == set(range(R)) | {R + 0, R + 2, R + 3, R + 4}
        assert sees(m, R + 5) == set(range(16)) - {R + 5}
        assert sees(m, R + 0) == set(range(R)) | {R + 0, R + 3, R + 4}
        assert (m[:R, R:] == 1).all() and (m[R:, :R] == 0).all()
        np.testing.assert_array_equal(dec["input_q"][R:], q)
        np.testing.assert_array_equal(dec["target_mask"], np.ones(5))
        np.testing.assert_array_equal(dec["target_mapping"].argmax(-1), tidx)


def _random_example(rng, L, R, perm_size, num_predict):
    reuse = rng.integers(9, 50, R)
    la = int(rng.integers(1, L - R - 3))
    lb = L - R - 3 - la
    new = np.concatenate([rng.integers(9, 50, la), [SEP_ID], rng.integers(9, 50, lb),
                          [SEP_ID, CLS_ID]])
    ids = np.concatenate([reuse, new]).astype(np.int64)
    k0, k1 = P.split_num_predict(num_predict, L, R)
    is_masked = np.zeros(L, bool)
    is_masked[rng.choice(R, k0, replace=False)] = True
    # the new part may draw functional tokens (-> padded slots)
    is_masked[R + rng.choice(L - R, k1, replace=False)] = True
    return ids, is_masked, rng.permutation(perm_size), rng.permutation(perm_size)


@pytest.mark.parametrize("L,R,perm_size,num_predict", [(32, 16, 8, 7), (32, 16, 16, 12),
                                                       (48, 16, 16, 9), (64, 32, 4, 20)])
def test_decoding_equals_original_parser(L, R, perm_size, num_predict):
    import tensorflow as tf

    rng = np.random.default_rng(L * 1000 + perm_size)
    batch = [_random_example(rng, L, R, perm_size, num_predict) for _ in range(64)]
    refs, recs = [], []
    for ids, is_masked, pi0, pi1 in batch:
        target = np.concatenate([ids[1:], [CLS_ID]])  # next tokens: shifted back = inputs
        refs.append(original_parser(ids, target, is_masked, R, perm_size, num_predict,
                                    pi0, pi1))
        rank = np.concatenate([rank_from_row_perm(R, perm_size, pi0),
                               rank_from_row_perm(L - R, perm_size, pi1)])
        recs.append((ids,) + P.encode_ranked(ids, is_masked, rank, num_predict))
    ids, ranks, tidx, tids = (np.stack(x) for x in zip(*recs))
    out = P.decode_order(tf.constant(ids), tf.constant(ranks), tf.constant(tidx), R)
    for b, ref in enumerate(refs):
        for k in ("perm_mask", "target_mapping", "target_mask", "input_q"):
            np.testing.assert_array_equal(out[k].numpy()[b], ref[k], err_msg=f"{k} #{b}")
            np.testing.assert_array_equal(
                P.decode_order_numpy(ids[b], ranks[b], tidx[b], R)[k], ref[k])
        np.testing.assert_array_equal(tids[b], ref["target_ids"])
        P.check_compact_example(ids[b], np.zeros(L, np.int64), ranks[b], tidx[b], tids[b], R,
                                perm_size)
    assert any((r["target_mask"] == 0).any() for r in refs)  # padding was exercised


def test_padding_only_for_drawn_functional_tokens():
    rng = np.random.default_rng(0)
    for _ in range(50):
        ids, is_masked, _, _ = _random_example(rng, 32, 16, 8, 10)
        rank, tidx, tids = P.encode_order(ids, is_masked, 16, 8, 10, rng)
        func = P.functional_mask(ids)
        assert (tidx < 0).sum() == (is_masked & func).sum()
        assert (rank[func] >= 0).all()  # <sep>/<cls> always take part in the order
        assert not np.isin(tidx[tidx >= 0], np.flatnonzero(func)).any()


def _words(ws):
    starts = np.flatnonzero(ws)
    if starts.size == 0 or starts[0] != 0:
        starts = np.concatenate([[0], starts])
    return list(zip(starts, np.concatenate([starts[1:], [len(ws)]])))


@pytest.mark.parametrize("reverse", [False, True])
def test_span_mask_exact_count_whole_words(reverse):
    rng = np.random.default_rng(1)
    partial_tokens = 0
    for trial in range(200):
        n = int(rng.integers(20, 300))
        lens = rng.integers(1, 4, n)  # words of 1..3 tokens
        bounds = np.cumsum(np.concatenate([[0], lens]))
        ws = np.zeros(n, bool)
        ws[bounds[bounds < n]] = True
        goal = int(rng.integers(0, n // 3 + 1))
        seed = int(rng.integers(1 << 30))
        m = P.sample_span_mask(ws, goal, np.random.default_rng(seed), reverse=reverse)
        assert m.dtype == bool and m.shape == (n,) and m.sum() == goal
        natural_ws = ws[::-1] if reverse else ws
        natural_m = m[::-1] if reverse else m
        part = [natural_m[a:b].sum() for a, b in _words(natural_ws)
                if 0 < natural_m[a:b].sum() < b - a]
        # partial words only from the final single-token fill, when no free word fits
        # the last budget (< 3 tokens here)
        assert sum(part) <= 2, (trial, part)
        partial_tokens += sum(part)
        again = P.sample_span_mask(ws, goal, np.random.default_rng(seed), reverse=reverse)
        np.testing.assert_array_equal(m, again)
    assert partial_tokens < 20


def test_span_mask_reverse_lays_spans_on_natural_order():
    ws = np.random.default_rng(3).random(200) < 0.6
    a = P.sample_span_mask(ws, 40, np.random.default_rng(5), reverse=True)
    b = P.sample_span_mask(ws[::-1], 40, np.random.default_rng(5), reverse=False)
    np.testing.assert_array_equal(a, b[::-1])


def test_span_mask_makes_spans_and_respects_edges():
    ws = np.ones(256, bool)  # every token a word
    m = P.sample_span_mask(ws, 43, np.random.default_rng(0))
    runs = np.diff(np.flatnonzero(np.diff(np.concatenate([[0], m, [0]]))))[::2]
    assert m.sum() == 43 and runs.max() > 1  # n-gram spans, not only single tokens
    assert P.sample_span_mask(ws[:10], 10, np.random.default_rng(0)).all()
    assert not P.sample_span_mask(ws[:10], 0, np.random.default_rng(0)).any()
    with pytest.raises(ValueError):
        P.sample_span_mask(ws[:5], 6, np.random.default_rng(0))
    # no word start at all: only the single-token fill applies
    assert P.sample_span_mask(np.zeros(30, bool), 7, np.random.default_rng(0)).sum() == 7


def test_split_num_predict():
    assert P.split_num_predict(85, 512, 256) == (43, 42)
    assert P.split_num_predict(10, 64, 32) == (5, 5)
    assert sum(P.split_num_predict(21, 128, 32)) == 21
    np.testing.assert_allclose(P.ngram_probs(), [0.438, 0.219, 0.146, 0.109, 0.088], atol=1e-3)


def test_check_compact_example_catches_corruption():
    rng = np.random.default_rng(0)
    ids, is_masked, _, _ = _random_example(rng, 32, 16, 8, 10)
    rank, tidx, tids = P.encode_order(ids, is_masked, 16, 8, 10, rng)
    seg = np.zeros(32, np.int64)
    P.check_compact_example(ids, seg, rank, tidx, tids, 16, 8)
    bad = rank.copy()
    bad[np.flatnonzero(bad >= 0)[0]] = -1
    with pytest.raises(ValueError, match="invalid record"):
        P.check_compact_example(ids, seg, bad, tidx, tids, 16, 8)
    bad_ids = tids.copy()
    bad_ids[0] += 1
    with pytest.raises(ValueError, match="target_ids"):
        P.check_compact_example(ids, seg, rank, tidx, bad_ids, 16, 8)


def test_left_context_is_the_originals_choice_of_ctx_size():
    """`np.random.choice(ctx_size)`: uniform over [0, ctx - 1], never ctx (which let spans touch)."""
    rng = np.random.default_rng(0)
    for ctx in (1, 6, 7, 30):
        draws = np.array([P.left_context(u, ctx) for u in rng.random(20000)])
        assert draws.min() == 0 and draws.max() == ctx - 1
        counts = np.bincount(draws, minlength=ctx)
        assert counts.min() > 0.8 * 20000 / ctx  # uniform
    assert P.left_context(0.999999, 6) == 5 and P.left_context(0.0, 6) == 0
    assert P.left_context(0.5, 0) == 0  # mask_alpha < mask_beta


class _MaxDraws:
    """A generator whose uniform draws are all just below 1: 5-word spans with the largest left context."""

    def random(self, n):
        return np.full(n, 1 - 1e-9)

    def integers(self, n):
        return 0


def test_spans_keep_a_right_context_and_never_touch():
    # every token a word; n = 5 words, ctx = 30: the original places the span at cur + 29, ours did at
    # cur + 30; the next span starts >= 1 token after the previous one ends
    mask = P.sample_span_mask(np.ones(200, bool), goal=10, rng=_MaxDraws(), mask_alpha=6, mask_beta=1)
    assert np.flatnonzero(mask).tolist() == list(range(29, 34)) + list(range(34 + 1 + 29, 34 + 1 + 34))
    for seed in range(200):  # the span phase alone (goal reachable by spans): runs are separated
        mask = P.sample_span_mask(np.ones(512, bool), goal=20, rng=np.random.default_rng(seed))
        d = np.diff(np.concatenate([[0], mask.astype(np.int8), [0]]))
        starts, ends = np.flatnonzero(d == 1), np.flatnonzero(d == -1)
        assert mask.sum() == 20 and (starts[1:] > ends[:-1]).all()
