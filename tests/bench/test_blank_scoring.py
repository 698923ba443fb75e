"""Zero-shot fill-in-the-blank scoring (bench/studies/cloze/blank_scoring.py) on a tiny random model: the candidate's
pieces are where fill() says, the answer cannot leak into its own prediction, left padding and batching change
nothing, and the shipped cloze slice scores end to end."""

import numpy as np
import pytest
import tensorflow as tf

from tests import data_fixtures


def _model(objective="plm"):
    import keras

    from xlnet_tf.config import XLNetConfig
    from xlnet_tf.models import XLNetPretrainer

    keras.utils.set_random_seed(5)
    return XLNetPretrainer(XLNetConfig(n_token=data_fixtures.TINY_VOCAB, n_layer=2, d_model=32, n_head=2, d_head=16,
                                       d_inner=64, dropout=0.0, dropatt=0.0), objective=objective)


def _piece_log_probs(model, rows, seq_len=48, max_pieces=4, mlm=False):
    from bench.studies.cloze import blank_scoring

    batch = blank_scoring.features(rows, seq_len, max_pieces, mlm)
    logits = model({k: tf.constant(v) for k, v in batch.items()}, training=False)["logits"]
    logp = tf.nn.log_softmax(tf.cast(logits, tf.float32)).numpy()
    return logp, batch


def test_fill_marks_the_candidate_pieces_and_cuts_the_passage_from_the_left():
    from bench.studies.cloze import blank_scoring
    from xlnet_tf.text.layout import CLS_ID, SEP_ID

    tok = data_fixtures.tiny_tokenizer()
    passage = "The quick brown fox jumps over the lazy dog again and again."
    row = blank_scoring.fill(tok, passage, "She saw the _ near the barn.", "extraordinary", seq_len=64)
    assert tok.sp.DecodeIds([row.input_ids[p] for p in row.candidate]) == "extraordinary"
    assert row.candidate == list(range(row.candidate[0], row.candidate[-1] + 1))
    assert row.input_ids[-2:] == [SEP_ID, CLS_ID] and len(row.input_ids) == len(row.segment_ids)
    short = blank_scoring.fill(tok, passage, "She saw the _ near the barn.", "extraordinary", seq_len=24)
    assert len(short.input_ids) == 24
    full_passage = tok.encode(passage)
    kept = short.input_ids[:short.input_ids.index(SEP_ID)]
    assert kept == full_passage[len(full_passage) - len(kept):]  # the passage's last pieces stay
    with pytest.raises(blank_scoring.BlankError, match="exactly one"):
        blank_scoring.fill(tok, passage, "No blank here.", "fox", seq_len=64)


def test_the_answer_cannot_leak_into_its_own_prediction():
    from bench.studies.cloze import blank_scoring

    model = _model()
    rng = np.random.default_rng(0)
    ids = list(rng.integers(10, data_fixtures.TINY_VOCAB, 30))
    base = blank_scoring.FilledRow(ids, [0] * 30, [12, 13, 14])

    def changed(position):
        new = list(ids)
        new[position] = (new[position] + 7) % data_fixtures.TINY_VOCAB
        return blank_scoring.FilledRow(new, [0] * 30, [12, 13, 14])

    logp, _ = _piece_log_probs(model, [base, changed(12), changed(13), changed(14), changed(3), changed(20)])
    # piece 1 (position 12) sees no candidate piece; piece 2 sees piece 1 only; piece 3 sees pieces 1-2
    np.testing.assert_array_equal(logp[1, 0], logp[0, 0])
    np.testing.assert_array_equal(logp[2, :2], logp[0, :2])
    np.testing.assert_array_equal(logp[3, :3], logp[0, :3])
    assert np.abs(logp[1, 1] - logp[0, 1]).max() > 1e-4  # piece 2 does see piece 1
    assert np.abs(logp[2, 2] - logp[0, 2]).max() > 1e-4  # piece 3 sees piece 2
    for k in (4, 5):  # the context on both sides of the blank is seen
        assert np.abs(logp[k, 0] - logp[0, 0]).max() > 1e-4


def test_left_padding_and_batching_change_no_score():
    from bench.studies.cloze import blank_scoring

    tok = data_fixtures.tiny_tokenizer()
    words = ["fox", "extraordinary", "barn", "a"]
    scores = {}
    for seq_len in (40, 72):
        scorer = blank_scoring.BlankScorer(_model(), tok, seq_len=seq_len, max_pieces=6, batch_size=3)
        scores[seq_len] = scorer.score("The quick brown fox.", "She saw the _ near the barn.", words)
        alone = [scorer.score("The quick brown fox.", "She saw the _ near the barn.", [w])[0] for w in words]
        np.testing.assert_allclose(scores[seq_len], alone, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(scores[40], scores[72], rtol=1e-5, atol=1e-5)
    assert np.all(scores[40] < 0) and len(set(np.round(scores[40], 4))) == 4


def test_mlm_models_read_the_candidate_as_masks():
    from bench.studies.cloze import blank_scoring
    from xlnet_tf.text.layout import MASK_ID

    row = blank_scoring.FilledRow(list(range(10, 40)), [0] * 30, [5, 6])
    batch = blank_scoring.features([row], 32, 3, mlm=True)
    assert list(batch["input_ids"][0, 7:9]) == [MASK_ID, MASK_ID]
    assert list(batch["target_ids"][0]) == [15, 16, 0] and list(batch["target_mask"][0]) == [1, 1, 0]
    assert not batch["perm_mask"].any()
    logp, _ = _piece_log_probs(_model("mlm"), [row, blank_scoring.FilledRow(list(range(10, 40)), [0] * 30, [5])],
                               seq_len=32, max_pieces=3, mlm=True)
    assert np.isfinite(logp).all()


def test_shipped_cloze_slice_scores_end_to_end():
    import os

    from bench.studies.cloze import cloze_baselines
    from tfrecords.sets import cloze
    from bench.studies.cloze import blank_scoring

    questions = cloze.read_questions(os.path.join(data_fixtures.REPO_ROOT, "data", "finetune", "cloze", "dev"))[:6]
    scorer = blank_scoring.BlankScorer(_model(), data_fixtures.tiny_tokenizer(), seq_len=96, batch_size=8)
    scores = scorer.score_questions(questions)
    assert [len(s) for s in scores] == [len(q["options"][0]) for q in questions]
    assert 0.0 <= cloze_baselines.lm_zero_shot(questions, scorer) <= 100.0
