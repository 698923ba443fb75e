"""In-graph preprocessing (serving) equals the Python tokenizer and the record builders' packing."""

import numpy as np
import pytest
import sentencepiece as spm
import tensorflow as tf

from tests import data_fixtures
from tfrecords import classifier_data
from tfrecords import spm as spm_lib
from xlnet_tf.text import preprocessing, tokenization
from xlnet_tf.text import packing_tf

TRICKY = [
    "Hello  world,\tin 1,000,000 ways; 2000, 3,5 and 12,",
    "Café naïve résumé — ``quoted'' text\u00a0with NBSP\u200bzero\u2009width\u3000ideographic",
    "", "   ", "Ａｂｃ ﬁve 1914, 1918,x ½ Ⅻ",
    "e\u0301 o\u0308 a\u0323\u0302 \u1e9b\u0323",  # combining accents
    "東京は日本の首都です。北京是中国的首都。",  # CJK without spaces
    "ÉCOLE Straße İstanbul ǅ",
]


@pytest.fixture(scope="module")
def digit_comma_spm(tmp_path_factory):
    """A SentencePiece model that has pieces like `▁1914,` (split_by_number off, as the release)."""
    text = [f"In {y}, the {n:,} men, and {y}, {n}, again." for y, n in
            zip(range(1800, 2000), range(1000, 900000, 4500))] * 3
    prefix = str(tmp_path_factory.mktemp("dc") / "sp")
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(text), model_prefix=prefix, model_type="unigram", vocab_size=300,
        control_symbols=list(spm_lib.CONTROL_SYMBOLS), user_defined_symbols=list(spm_lib.USER_DEFINED_SYMBOLS),
        unk_id=0, bos_id=1, eos_id=2, pad_id=-1, split_by_number=False, hard_vocab_limit=False,
        minloglevel=2)
    return prefix + ".model"


@pytest.mark.parametrize("lower,keep_accents", [(False, False), (True, False), (False, True)])
def test_normalize_equals_python(lower, keep_accents):
    got = packing_tf.normalize(tf.constant(TRICKY), lower, keep_accents).numpy()
    want = [tokenization.preprocess_text(t, lower=lower, keep_accents=keep_accents) for t in TRICKY]
    assert [g.decode("utf-8") for g in got] == want


def _encode_both(model_file, texts, uncased=False):
    encoder = preprocessing.XLNetTextEncoder(open(model_file, "rb").read(), uncased=uncased)
    python = tokenization.XLNetTokenizer(model_file, uncased=uncased)
    return encoder.encode(tf.constant(texts)).to_list(), [python.encode(t) for t in texts]


def test_ids_equal_python_tokenizer_on_real_text():
    lines = [l for l in open(f"{data_fixtures.CORPUS_DIR}/austen_moby_slice.txt", encoding="utf-8").read()
             .split("\n") if l.strip()][:300]
    for uncased in (False, True):
        got, want = _encode_both(data_fixtures.tiny_spm(uncased), lines + TRICKY, uncased)
        assert got == want


def test_digit_comma_resplit_equals_python(digit_comma_spm):
    python = tokenization.XLNetTokenizer(digit_comma_spm)
    assert python._digit_comma.any(), "the fixture model must contain digit-comma pieces"
    texts = ["In 1914, the 45,000 men, 1999,x and 12, 7,", "x1914, y", "1914,1915, 2000,"] + TRICKY
    got, want = _encode_both(digit_comma_spm, texts)
    assert got == want
    plain = python.sp.encode(python.normalize(texts[0]))
    assert want[0] != plain  # the re-split really happened on this text


def test_digit_comma_resplit_equals_python_on_random_mixes(digit_comma_spm):
    """Random mixes of numbers with commas, spaced or glued to letters and to each other (pieces with and
    without a leading ▁), in batches with empty texts and texts without any re-split: the ids equal the Python
    tokenizer's, and each new token's source (what SQuAD's spans read) is the piece it came from: in order, every
    piece at least once, a piece kept whole keeps its id, a re-split one ends with its comma."""
    r = np.random.RandomState(0)
    words = ["1914,", "x1914,", "45,000,", "12,", "7,", ",", "men,", "1999,x", "2000,", "a", "In", "1,5", "0,"]
    texts = ["", "no numbers here"] + [
        (" " if r.rand() < 0.7 else "").join(r.choice(words, r.randint(1, 12))) for _ in range(150)]
    got, want = _encode_both(digit_comma_spm, texts)
    assert got == want
    python = tokenization.XLNetTokenizer(digit_comma_spm)
    assert sum(len(python.sp.encode(python.normalize(t))) != len(w) for t, w in zip(texts, want)) > 50

    encoder = preprocessing.XLNetTextEncoder(open(digit_comma_spm, "rb").read())
    normalized = packing_tf.normalize(tf.constant(texts))
    pieces = encoder.tokenizer.tokenize(normalized).flat_values.numpy()
    new_ids, source = encoder._tokenize(normalized)
    ids, source = new_ids.flat_values.numpy(), source.numpy()
    assert np.all(np.diff(source) >= 0) and np.array_equal(np.unique(source), np.arange(len(pieces)))
    resplit = python._digit_comma[pieces]
    last = np.r_[source[1:] != source[:-1], True]  # each piece's last new token
    np.testing.assert_array_equal(ids[~resplit[source]], pieces[source][~resplit[source]])
    assert np.all(ids[last & resplit[source]] == python.sp.piece_to_id(","))
    assert resplit.sum() > 50


def test_pack_pair_equals_builder_packing(rng):
    max_len = 12
    for _ in range(60):
        la, lb = rng.randint(0, 16), rng.randint(0, 16)
        a = list(rng.randint(10, 99, la))
        b = list(rng.randint(10, 99, lb))
        ids_a = tf.ragged.constant([a], dtype=tf.int32, row_splits_dtype=tf.int64)
        ids_b = tf.ragged.constant([b], dtype=tf.int32, row_splits_dtype=tf.int64)
        got = packing_tf.pack_pair(ids_a, ids_b, max_len)[0]
        want = classifier_data.pack_ids(a, b, max_len)
        for key in ("input_ids", "segment_ids", "attention_mask"):
            np.testing.assert_array_equal(got[key].numpy()[0], want[key], err_msg=f"{key} la={la} lb={lb}")
    single = packing_tf.pack_pair(tf.ragged.constant([[5, 6, 7]], dtype=tf.int32, row_splits_dtype=tf.int64),
                                  None, 6)[0]
    np.testing.assert_array_equal(single["input_ids"].numpy()[0],
                                  classifier_data.pack_ids([5, 6, 7], None, 6)["input_ids"])
