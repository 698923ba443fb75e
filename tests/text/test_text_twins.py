"""Each in-graph packer (xlnet_tf/text/packing_tf.py) equals its numpy twin (xlnet_tf/text/packing.py) byte for byte:
on every small length combination at tiny L (empty A, empty B, a B cut to nothing, exact fits, L = 3/4) and on
random ids; and, through the whole text path, what `XLNetPreprocessor` and the serving module pack from the
shipped dev splits of data/finetune/ equals the records the builders write for the same texts (read back with the
builders' readers: the same ids, segments, masks and dtypes). The TF normalization equals
`tokenization.preprocess_text` on every shipped text."""

import collections
import json
import os

import numpy as np
import pytest
import tensorflow as tf

from tests import data_fixtures
from tfrecords import classifier_data, race_data, squad_data
from tfrecords.readers import processors
from xlnet_tf.text import preprocessing, tokenization
from xlnet_tf.serving.race import RaceServing
from xlnet_tf.serving.sequence import ClassifierServing
from xlnet_tf.serving.squad import SquadServing
from xlnet_tf.text import layout, packing, packing_tf

DATA = os.path.join(data_fixtures.REPO_ROOT, "data", "finetune")
KEYS = ("input_ids", "segment_ids", "attention_mask")


def _ragged(rows):
    """int32 ragged ids `[N, (n)]` (int64 row splits, as the encoder gives)."""
    flat = [i for row in rows for i in row]
    return tf.RaggedTensor.from_row_lengths(tf.constant(flat, tf.int32, shape=[len(flat)]),
                                            tf.constant([len(r) for r in rows], tf.int64, shape=[len(rows)]))


def _ids(rng, n):
    return [int(i) for i in rng.randint(10, 99, n)]


def _stacked(features):
    return {k: np.stack([f[k] for f in features]) for k in features[0]}


def _assert_same(got, want, keys=KEYS, what=""):
    """`got` (tensors) equals `want` (arrays): same values and the same dtype."""
    for key in keys:
        g, w = got[key], want[key]
        assert g.dtype.as_numpy_dtype == w.dtype, f"{what} {key}: {g.dtype} vs {w.dtype}"
        np.testing.assert_array_equal(g.numpy(), w, err_msg=f"{what} {key}")


# ---- (a) the twins on ids: every small length combination, and random ones ---------------------------------------

def test_shrink_pair_twin_is_the_numpy_rule():
    a, b, budget = (x.ravel() for x in np.meshgrid(np.arange(25), np.arange(25), np.arange(52), indexing="ij"))
    got_a, got_b = packing_tf.shrink_pair(*(tf.constant(x, tf.int64) for x in (a, b, budget)))
    want = np.array([layout.shrink_pair(*x) for x in zip(a, b, budget)])
    np.testing.assert_array_equal(np.stack([got_a.numpy(), got_b.numpy()], 1), want)


def _pair_rows(rng, length):
    """Every (len A, len B) up to length + 2 (empty sides, exact fits, B cut to nothing), then random pairs."""
    rows = [(_ids(rng, la), _ids(rng, lb)) for la in range(length + 3) for lb in range(length + 3)]
    return rows + [(_ids(rng, rng.randint(0, 2 * length)), _ids(rng, rng.randint(0, 2 * length))) for _ in range(60)]


@pytest.mark.parametrize("length", [3, 4, 5, 8, 13])
def test_pack_pair_twin(rng, length):
    rows = _pair_rows(rng, length)
    for with_b in (True, False):
        got, cut = packing_tf.pack_pair(_ragged([a for a, _ in rows]),
                                        _ragged([b for _, b in rows]) if with_b else None, length)
        packed = [packing.pack_pair(a, b if with_b else None, length) for a, b in rows]
        _assert_same(got, _stacked([f for f, _ in packed]), what=f"L={length} with_b={with_b}")
        np.testing.assert_array_equal(cut.numpy(), [c for _, c in packed])
        assert got["input_ids"].shape[1:] == [length]  # static


def test_a_second_text_cut_to_nothing_takes_no_separator_in_graph():
    """At L = 4 the budget of 1 goes to A: the original (and packing.pack_pair) add no `<sep>` for the emptied B;
    the in-graph packer of earlier versions (preprocessing.pack_pair) added one."""
    got, cut = packing_tf.pack_pair(_ragged([[11]]), _ragged([[21]]), 4)
    np.testing.assert_array_equal(got["input_ids"].numpy(), [[0, 11, 4, 3]])
    np.testing.assert_array_equal(got["segment_ids"].numpy(), [[4, 0, 0, 2]])
    np.testing.assert_array_equal(got["attention_mask"].numpy(), [[0, 1, 1, 1]])
    assert cut.numpy().tolist() == [True]


def test_pack_document_twin(rng):
    length, segments = 5, 3
    rows = _pair_rows(rng, length * segments)
    got, cut = packing_tf.pack_document(_ragged([a for a, _ in rows]), _ragged([b for _, b in rows]), length, segments)
    packed = [packing.pack_pair(a, b, length * segments) for a, b in rows]
    want = {k: v.reshape([-1, segments, length]) for k, v in _stacked([f for f, _ in packed]).items()}
    _assert_same(got, want)
    np.testing.assert_array_equal(cut.numpy(), [c for _, c in packed])
    assert got["input_ids"].shape[1:] == [segments, length]


@pytest.mark.parametrize("length,max_qa_length,truncation", [(4, 1, "tail"), (6, 2, "tail"), (6, 3, "head"),
                                                              (12, 5, "tail"), (12, 9, "head")])
def test_pack_choice_twin(rng, length, max_qa_length, truncation):
    choices = 4
    qa_lengths = list(range(max_qa_length + 3))
    groups = [qa_lengths[i:i + choices] for i in range(0, len(qa_lengths), choices)]
    questions = [(_ids(rng, lc), [_ids(rng, n) for n in group + [rng.randint(0, 2 * length)] * (choices - len(group))])
                 for lc in range(length + 2) for group in groups]
    random_ids = lambda: _ids(rng, rng.randint(0, 2 * length))  # noqa: E731
    questions += [(random_ids(), [random_ids() for _ in range(choices)]) for _ in range(20)]
    qa = tf.RaggedTensor.from_uniform_row_length(_ragged([q for _, qas in questions for q in qas]), choices)
    got, cut = packing_tf.pack_choice(_ragged([c for c, _ in questions]), qa, length, max_qa_length, truncation)
    packed = [[packing.pack_choice(c, q, length, max_qa_length, truncation) for q in qas] for c, qas in questions]
    want = {k: np.stack([np.stack([f[k] for f, _ in p]) for p in packed]) for k in KEYS}
    _assert_same(got, want)
    np.testing.assert_array_equal(cut.numpy(), [[c for _, c in p] for p in packed])
    assert got["input_ids"].shape[2:] == [length]


def test_pack_choice_twin_refuses_what_numpy_refuses():
    qa = tf.RaggedTensor.from_uniform_row_length(_ragged([[1], [2]]), 2)
    with pytest.raises(ValueError, match="qa_truncation must be one of"):
        packing_tf.pack_choice(_ragged([[5]]), qa, 8, 2, qa_truncation="middle")
    with pytest.raises(ValueError, match="uniform number of choices"):
        packing_tf.pack_choice(_ragged([[5]]), _ragged([[1], [2]]), 8, 2)


@pytest.mark.parametrize("length", [4, 6, 11])
def test_pack_squad_window_twin(rng, length):
    """The first window: the paragraph keeps its first `L - 3 - len(Q)` ids (squad_data.doc_spans' first). The
    masks are compared as the SQuAD reader casts them (float32; the numpy packer writes int32)."""
    rows = [(_ids(rng, n), _ids(rng, q)) for n in range(length + 3) for q in range(length - 2)]
    got = packing_tf.pack_squad_window(_ragged([d for d, _ in rows]), _ragged([q for _, q in rows]), length)
    windows = [d[:length - 3 - len(q)] for d, q in rows]
    want = _stacked([packing.pack_squad_window(d, q, length) for d, (_, q) in zip(windows, rows)])
    want.update(attention_mask=want["attention_mask"].astype(np.float32), p_mask=want["p_mask"].astype(np.float32),
                cls_index=want["cls_index"].astype(np.int32),
                paragraph_len=np.array([len(d) for d in windows], np.int32))
    _assert_same(got, want, keys=tuple(want))


def test_choice_text_twin():
    """Every `_` of a cloze question is filled (`"_" in question`); the earlier in-graph copy (serving._race_qa)
    tested `.*_.*`, which misses a `_` after a line break."""
    questions = ["The _ is red.", "Which word means: a fruit?", "", "_", "a _ and _ again", "two\nlines _ here",
                 "trailing_", "Café __ naïve"]
    options = [["apple", "", "x y", "_"]] * len(questions)
    got = packing_tf.choice_text(tf.constant(questions), tf.constant(options)).numpy()
    want = [[layout.choice_text(q, o) for o in opts] for q, opts in zip(questions, options)]
    assert [[s.decode("utf-8") for s in row] for row in got] == want
    assert race_data.make_qa is layout.choice_text  # one rule: the RACE builder's


def test_normalize_twin_keeps_text_after_a_nul():
    """`tf.strings.lower` stops at a NUL; the twin lowers each piece (Python's `str.lower` keeps the rest)."""
    text = ["Ab\x00CD éF", "\x00X\x00"]
    got = [g.decode("utf-8") for g in packing_tf.normalize(tf.constant(text), lower=True).numpy()]
    assert got == [tokenization.preprocess_text(t, lower=True) for t in text]


# ---- (b) the whole text path on the shipped data ---------------------------------------------------------------

@pytest.fixture(scope="module")
def spm():
    return data_fixtures.tiny_spm()


@pytest.fixture(scope="module")
def encoder(spm):
    return preprocessing.XLNetTextEncoder(open(spm, "rb").read())


def _read(dataset):
    """A split read back with a builder's reader: the real examples as arrays in example order (`unique_id` for
    SQuAD), each with the reader's dtype."""
    batches = collections.defaultdict(list)
    for batch in dataset:
        for key, value in batch.items():
            batches[key].append(value.numpy())
    out = {k: np.concatenate(v) for k, v in batches.items()}
    index = out.get("example_index", out.get("unique_id"))
    order = np.argsort(index[out["is_real_example"] > 0], kind="stable")
    return {k: v[out["is_real_example"] > 0][order] for k, v in out.items()}


def _serving(module_class, encoder, **attributes):
    module = module_class.__new__(module_class)  # the text packing reads only the encoder and these
    module.encoder = encoder
    module.qa_truncation, module.split_unknown = "tail", True  # the builders' defaults
    for key, value in attributes.items():
        setattr(module, key, value)
    return module


@pytest.mark.parametrize("task,length,segments", [("topic", 64, 1), ("paraphrase", 64, 1), ("brown_genre", 32, 4)])
def test_classifier_records_equal_the_preprocessor_and_serving(spm, encoder, tmp_path, task, length, segments):
    processor = processors.get_processor("tsv")
    classifier_data.build_classifier_records(processor, f"{DATA}/{task}", spm, str(tmp_path), max_seq_length=length,
                                             splits=("dev",), max_segments=segments)
    records = _read(classifier_data.classifier_dataset(str(tmp_path), 64, False, length, split="dev",
                                                       drop_remainder=False, max_segments=segments))
    examples = processor.get_examples(f"{DATA}/{task}", "dev")
    assert len(examples) == len(records["input_ids"]) >= 40
    texts = tf.constant([ex.text_a for ex in examples])
    pair = any(ex.text_b is not None for ex in examples)
    texts_b = tf.constant([ex.text_b or "" for ex in examples]) if pair else None
    layer = preprocessing.XLNetPreprocessor(spm, sequence_length=length, max_segments=segments)
    _assert_same(layer((texts, texts_b) if pair else texts), records, what=f"{task} preprocessor")
    module = _serving(ClassifierServing, encoder, max_seq_length=length, max_segments=segments)
    served = module.pack_texts(texts, texts_b)
    _assert_same(dict(zip(KEYS, served)), records, what=f"{task} serving")
    full = records["attention_mask"].reshape(len(examples), -1).min(1) > 0
    assert full.any() and (segments > 1 or not full.all())  # some texts cut, some padded (every document is cut)


def test_multiple_choice_records_equal_serving(spm, encoder, tmp_path):
    length, max_qa_length = 64, 16  # the qa is cut (its tail kept) for the longer questions
    race_data.build_race_records(f"{DATA}/mc_wordnet", spm, str(tmp_path), max_seq_length=length,
                                 max_qa_length=max_qa_length, splits=("dev",))
    records = _read(race_data.race_dataset(str(tmp_path), 64, False, length, split="dev", drop_remainder=False))
    examples = race_data.read_race_split(f"{DATA}/mc_wordnet", "dev")
    articles = {}
    questions, options = [], []
    for ex in examples:  # the raw question and options serving takes: `source` is `path#question i`
        path, index = ex.source.rsplit("#question ", 1)
        article = articles.setdefault(path, race_data.read_article(path))
        questions.append(article["questions"][int(index)])
        options.append(article["options"][int(index)])
    assert len(examples) == len(records["input_ids"]) >= 100
    module = _serving(RaceServing, encoder, max_seq_length=length, max_qa_length=max_qa_length)
    # traced as serving_default traces it (the earlier choice text, `parts[:, 0]` of a ragged split, did not trace)
    race_pack = tf.function(module.pack_choices, input_signature=[tf.TensorSpec([None], tf.string),
                                                                  tf.TensorSpec([None], tf.string),
                                                                  tf.TensorSpec([None, None], tf.string)])
    served = race_pack(tf.constant([ex.context for ex in examples]), tf.constant(questions), tf.constant(options))
    _assert_same(dict(zip(KEYS, served)), records, what="mc_wordnet serving")
    assert records["attention_mask"].min(2).max() == 1  # some articles fill the window


def _squad_first_windows_equal_serving(spm, encoder, out, json_file, length=96, query=32, split_unknown=True):
    """The builder's first window (`doc_span_index` 0) of every kept question equals what serving packs; returns the
    number of questions and of those with more than one window."""
    squad_data.build_squad_records(spm, str(out), predict_file=json_file, max_seq_length=length, doc_stride=48,
                                   max_query_length=query, split_unknown=split_unknown)
    records = _read(squad_data.squad_dataset(str(out), 64, False, length, split="dev", drop_remainder=False))
    side = np.load(out / "dev.features.npz")
    examples = json.load(open(out / "dev.examples.json"))["examples"]
    first = side["doc_span_index"] == 0
    assert first.sum() == len(examples)
    module = _serving(SquadServing, encoder, max_seq_length=length, max_query_length=query,
                      split_unknown=split_unknown)
    features, spans = module.pack_first_window(tf.constant([ex["question"] for ex in examples]),
                                         tf.constant([ex["context"] for ex in examples]))
    order = np.argsort(side["example_index"][first])
    want = {k: v[first][order] for k, v in records.items()}
    _assert_same(features, want, keys=("input_ids", "segment_ids", "attention_mask", "p_mask", "cls_index"))
    np.testing.assert_array_equal(spans["p_len"].numpy(), side["paragraph_len"][first][order])
    return len(examples), int((~first).sum())


@pytest.mark.parametrize("version", ["1.1", "2.0"])
def test_squad_first_windows_equal_serving(spm, encoder, tmp_path, version):
    """Serving packs one window per question: it equals the builder's first window of every kept question.
    Serving's offsets are byte spans of the raw context (the builder's side file holds character spans); they are
    not compared here (tests/serving/test_serving.py checks the served answers)."""
    questions, more = _squad_first_windows_equal_serving(spm, encoder, tmp_path,
                                                         f"{DATA}/squad_wordnet/dev-v{version}.json")
    assert questions >= 250 and more  # some questions span several windows


def test_squad_serving_splits_words_at_python_whitespace(spm, encoder, tmp_path):
    """A context with multi-byte spaces (U+00A0, U+2009, U+3000, U+2028, U+0085) and ASCII separators (U+001C):
    serving's ids are the builder's. (tensorflow-text's WhitespaceTokenizer, used before, cut U+00A0 after its
    first byte: one extra `<unk>` per such space.)"""
    context = ("The\u00a0river flows\u2009north, past 1,000\u3000hills;\u2028then\x85it\x1cturns "
               "\u00a0 west.")
    data = {"version": "1.1", "data": [{"title": "t", "paragraphs": [{"context": context, "qas": [
        {"id": "q1", "question": "Where\u00a0does the river flow?", "answers": [{"text": "north",
                                                                              "answer_start": context.index("north")}]},
        {"id": "q2", "question": "How many hills?", "answers": [{"text": "1,000",
                                                                "answer_start": context.index("1,000")}]}]}]}]}
    path = tmp_path / "ws.json"
    path.write_text(json.dumps(data), encoding="utf-8")
    assert _squad_first_windows_equal_serving(spm, encoder, tmp_path / "records", str(path)) == (2, 0)
    ids = encoder.encode_with_spans(tf.constant([context]))[0].to_list()[0]
    assert ids == data_fixtures.tiny_tokenizer().encode(context)


@pytest.mark.parametrize("split_unknown", [True, False])
def test_squad_serving_splits_unknown_runs_as_the_records(spm, encoder, tmp_path, split_unknown):
    """Runs of characters the vocabulary lacks (CJK, Cyrillic, symbols) are one `<unk>` piece; the builder's default
    (`split_unknown`) makes one `<unk>` per character, and serving, told the records' setting (export_info v5), packs
    the same ids. (Serving never split them before: a context with such a run was served with fewer tokens than the
    model was trained on, silently.)"""
    context = "Tokyo (東京都) is large; Москва is far. ★★ stars and 中文 text end here."
    data = {"version": "1.1", "data": [{"title": "t", "paragraphs": [{"context": context, "qas": [
        {"id": "q1", "question": "What is Москва?", "answers": [{"text": "far", "answer_start": context.index("far")}]},
        {"id": "q2", "question": "Which 東京 text?", "answers": [{"text": "Tokyo", "answer_start": 0}]}]}]}]}
    path = tmp_path / "unk.json"
    path.write_text(json.dumps(data, ensure_ascii=False), encoding="utf-8")
    assert _squad_first_windows_equal_serving(spm, encoder, tmp_path / "records", str(path),
                                              split_unknown=split_unknown) == (2, 0)
    ids, begin, end = (v.to_list()[0] for v in encoder.encode_with_spans(tf.constant([context]), split_unknown=True))
    unk = [context.encode()[b:e].decode() for i, b, e in zip(ids, begin, end) if i == 0]
    assert {"東", "京", "都", "М", "中", "文"} <= set(unk)  # one character each, with its own byte span


def test_python_space_class_is_str_split():
    """`packing_tf.PYTHON_SPACE` matches exactly the characters `str.split()` splits on (every one is below
    U+3001; the whole Basic Multilingual Plane is checked)."""
    chars = [chr(cp) for cp in range(0x10000) if not 0xD800 <= cp <= 0xDFFF]
    got = tf.strings.regex_full_match(tf.constant(chars), packing_tf.PYTHON_SPACE).numpy()
    np.testing.assert_array_equal(got, [c.isspace() for c in chars])


def _shipped_texts():
    texts = []
    for task in ("topic", "paraphrase", "brown_genre"):
        for ex in processors.get_processor("tsv").get_examples(f"{DATA}/{task}", "dev"):
            texts += [ex.text_a] + ([ex.text_b] if ex.text_b else [])
    for ex in race_data.read_race_split(f"{DATA}/mc_wordnet", "dev"):
        texts += [ex.context] + list(ex.qa_list)
    for version in ("1.1", "2.0"):
        data = squad_data.load_squad_json(f"{DATA}/squad_wordnet/dev-v{version}.json")
        for paragraph in (p for a in data["data"] for p in a["paragraphs"]):
            texts += [paragraph["context"]] + [q["question"] for q in paragraph["qas"]]
    return sorted(set(texts))


@pytest.mark.parametrize("lower,keep_accents", [(False, False), (True, False), (False, True), (True, True)])
def test_normalize_twin_on_every_shipped_text(lower, keep_accents):
    texts = _shipped_texts()
    assert len(texts) > 1000
    got = packing_tf.normalize(tf.constant(texts), lower, keep_accents).numpy()
    want = [tokenization.preprocess_text(t, lower=lower, keep_accents=keep_accents) for t in texts]
    assert [g.decode("utf-8") for g in got] == want
