"""Left-to-right LM evaluation with memories (xlnet_tf/inference/lm_eval.py) on a tiny random model: exact against one
pass over the whole stream, causal, and different without memories."""

import numpy as np
import pytest

from tests import data_fixtures


def _model(mem_len, attn_type="bi"):
    import keras

    from xlnet_tf.config import XLNetConfig
    from xlnet_tf.models import XLNetPretrainer

    keras.utils.set_random_seed(3)
    return XLNetPretrainer(XLNetConfig(n_token=data_fixtures.TINY_VOCAB, n_layer=2, d_model=32, n_head=2, d_head=16,
                                       d_inner=64, dropout=0.0, dropatt=0.0, mem_len=mem_len, attn_type=attn_type))


def _stream(n, seed=0):
    return np.random.default_rng(seed).integers(10, data_fixtures.TINY_VOCAB, n).astype(np.int32)


@pytest.mark.parametrize("attn_type", ["bi", "uni"])
def test_segments_with_memories_equal_one_pass_over_the_stream(attn_type):
    from xlnet_tf.inference import lm_eval

    rows = _stream(48)[None]
    model = _model(mem_len=48, attn_type=attn_type)  # memories hold the whole past
    segmented = lm_eval.token_nll(model, rows, seg_len=16, use_mems=True)
    whole = lm_eval.token_nll(model, rows, seg_len=48, use_mems=False)
    np.testing.assert_allclose(segmented[:, 1:], whole[:, 1:], rtol=1e-4, atol=1e-4)


def test_reading_is_causal_and_memories_matter():
    from xlnet_tf.inference import lm_eval

    model = _model(mem_len=16)
    rows = _stream(64)[None]
    base = lm_eval.token_nll(model, rows, seg_len=16, use_mems=True)
    changed = rows.copy()
    changed[0, 40] = (changed[0, 40] + 1) % data_fixtures.TINY_VOCAB
    after = lm_eval.token_nll(model, changed, seg_len=16, use_mems=True)
    np.testing.assert_array_equal(base[:, :40], after[:, :40])  # the past does not see the future
    assert np.abs(base[:, 41:] - after[:, 41:]).max() > 1e-4  # the future sees the past (also via memories)
    alone = lm_eval.token_nll(model, rows, seg_len=16, use_mems=False)
    np.testing.assert_allclose(alone[:, :16], base[:, :16], rtol=1e-5, atol=1e-5)  # first segment: no memory yet
    assert np.abs(alone[:, 17:] - base[:, 17:]).min() > 0  # later ones: memories change every prediction


def test_compare_reports_perplexity_and_bits_per_character():
    from xlnet_tf.inference import lm_eval
    from xlnet_tf.text.tokenization import EOD_ID

    tok = data_fixtures.tiny_tokenizer()
    ids = lm_eval.read_stream([f"{data_fixtures.CORPUS_DIR}/sotu_slice.txt"], tok, EOD_ID)[:200]
    report = lm_eval.compare(_model(mem_len=32), ids, seg_len=32, tokenizer=tok, batch_size=2)
    a, b = report["with_memories"], report["without_memories"]
    assert a["tokens"] == b["tokens"] > 100 and a["characters"] == b["characters"] > a["tokens"]
    assert a["perplexity"] != b["perplexity"] and np.isfinite(a["bits_per_character"])
    # a random model is close to uniform over the vocabulary
    assert 0.3 * data_fixtures.TINY_VOCAB < a["perplexity"] < 3 * data_fixtures.TINY_VOCAB
    assert report["with_memories_all_tokens"]["tokens"] > a["tokens"]


def test_a_bi_data_config_is_refused():
    from xlnet_tf.inference import lm_eval

    model = _model(mem_len=16)
    model.config = model.config.replace(bi_data=True)
    with pytest.raises(ValueError, match="bi_data=False"):
        lm_eval.token_nll(model, _stream(32)[None], seg_len=16, use_mems=True)


def test_evaluate_lm_runner_on_a_pretrained_checkpoint(tmp_path):
    import json

    from run import evaluate_lm
    from xlnet_tf import checkpoints

    model = _model(mem_len=16)
    model.config = model.config.replace(bi_data=True, reuse_len=8)  # as a pretraining run writes it
    final = tmp_path / "final"
    checkpoints.save_original_checkpoint(model, str(final / "xlnet_model.ckpt"))
    model.config.to_json_file(str(final / "xlnet_config.json"))
    report = data_fixtures.run_with_flags(evaluate_lm, [
        f"--checkpoint={final}", f"--spiece_model={data_fixtures.tiny_spm()}",
        f"--input_glob={data_fixtures.CORPUS_DIR}/sotu_slice.txt", "--seg_len=16", "--mem_len=48",
        "--max_tokens=160", "--batch_size=2", f"--output_json={tmp_path}/lm.json"])
    assert json.load(open(tmp_path / "lm.json"))["with_memories"] == report["with_memories"]
    # 2 rows of 80 tokens in 5 segments of 16: every segment's first token unscored (and any <eod>)
    assert 140 <= report["with_memories"]["tokens"] == report["without_memories"]["tokens"] <= 150
    assert report["mem_len"] == 48 and report["stream_tokens"] == 160


def test_sliding_window_with_the_whole_past_equals_cached_memories():
    """Recomputing every window of the whole past (context >= stream) reads each token with the same context
    as memories of the whole past do: the same NLL (the vanilla baseline is the same function, only slower)."""
    from xlnet_tf.inference import lm_eval

    model = _model(mem_len=64)
    rows = _stream(64)[None]
    cached = lm_eval.token_nll(model, rows, seg_len=16, use_mems=True)
    window = lm_eval.sliding_window_nll(model, rows, seg_len=16, context=64)
    np.testing.assert_allclose(window[:, 1:], cached[:, 1:], rtol=1e-4, atol=1e-4)
