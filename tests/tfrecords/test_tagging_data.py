"""Token classification data: the CoNLL reader and writer (tfrecords/readers/conll.py), the Brown POS corpus script
(tfrecords/sets/brown_pos.py) on its shipped slice, the word-piece alignment and windows (xlnet_tf/text/tagging.py) and
their in-graph twin, and the record builder, reader and CLI (tfrecords/tagging_data.py, build_tagging.py)."""

import collections
import os
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

from tests import data_fixtures as F
from tfrecords.sets import brown_genre, brown_pos
from tfrecords.readers import conll
from tfrecords import squad_data, tagging_data
from tfrecords import manifest as manifest_lib
from tfrecords.records import DataError
from xlnet_tf.text import preprocessing, tagging
from xlnet_tf.text.layout import CLS_ID, SEP_ID, UNK_ID

BROWN = os.path.join(F.REPO_ROOT, "data", "finetune", "brown_pos")
UNIVERSAL = ["."] + sorted(set(brown_pos.UNIVERSAL_TAGS) - {"."})


def _write(path, data: bytes) -> str:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return str(path)


@pytest.fixture(scope="module")
def tok():
    return F.tiny_tokenizer()


@pytest.fixture(scope="module")
def brown_dev():
    return conll.read_conll(os.path.join(BROWN, "dev.txt"))


# ---- the CoNLL reader and writer -----------------------------------------------------------------------------

def test_reader_docstart_blank_lines_crlf_bom_and_columns(tmp_path):
    text = ("\ufeff-DOCSTART- -X- -X- O\r\n\r\n\r\nEU NNP B-ORG\r\nrejects VBZ O\r\n\n\n"
            "-DOCSTART- doc2\nPeter\tNNP\tB-PER\nBlackburn\tNNP\tI-PER\n   \nx y z\n")
    sents = conll.read_conll(_write(tmp_path / "a.txt", text.encode()))
    assert [s.words for s in sents] == [("EU", "rejects"), ("Peter", "Blackburn"), ("x",)]
    assert [s.labels for s in sents] == [("B-ORG", "O"), ("B-PER", "I-PER"), ("z",)]
    assert [s.lines for s in sents] == [(4, 5), (9, 10), (12,)]
    assert [s.doc for s in sents] == ["-X- -X- O", "doc2", "doc2"]
    assert [s.docstart for s in sents] == ["-DOCSTART- -X- -X- O", "-DOCSTART- doc2", ""]
    assert [s.separator for s in sents] == [" ", "\t", " "]
    assert sents[1].source.endswith("a.txt:9") and sents[1].columns[0] == ("Peter", "NNP", "B-PER")
    pos = conll.read_conll(str(tmp_path / "a.txt"), label_column=1)
    assert pos[0].labels == ("NNP", "VBZ")
    assert conll.collect_labels(sents) == ["B-ORG", "B-PER", "I-PER", "O", "z"]
    words = conll.read_conll(_write(tmp_path / "words.txt", b"Hello\nworld\n\nagain\n"))  # one column: unlabeled
    assert [s.labels for s in words] == [None, None] and words[1].words == ("again",)
    tab = conll.read_conll(_write(tmp_path / "tab.txt", b"New York\tNNP\nis\tVBZ\n"))  # a word with a space
    assert tab[0].words == ("New York", "is")


@pytest.mark.parametrize("content,kwargs,message", [
    (b"a B\nb C D\n", {}, r"bad\.txt:2: 3 column\(s\), expected 2 as on line 1"),
    (b"-DOCSTART- x\n\na B\n\nb\n", {}, r"bad\.txt:5: 1 column\(s\), expected 2 as on line 3"),
    (b"a\tB\nb\t\n", {}, r"bad\.txt:2: column 1 is empty"),
    (b"a B\ncaf\xe9 C\n", {}, r"bad\.txt:2: invalid UTF-8"),
    (b"a B\n", {"label_column": 3}, r"bad\.txt:1: 2 column\(s\), no label_column 3"),
    (b"a B\n", {"label_column": 0}, r"bad\.txt: label_column 0 is the word column 0"),
    (b"word\n", {"labeled": True}, r"bad\.txt:1: 1 column, no label column"),
    (b"\n-DOCSTART-\n\n", {}, r"bad\.txt: no tokens"),
    (None, {}, r"bad\.txt: file not found"),
])
def test_reader_errors_name_file_and_line(tmp_path, content, kwargs, message):
    path = tmp_path / "bad.txt"
    if content is not None:
        _write(path, content)
    with pytest.raises(DataError, match=message):
        conll.read_conll(str(path), **kwargs)


def test_unknown_label_and_label_files(tmp_path):
    sents = conll.read_conll(_write(tmp_path / "dev.txt", b"a X\nb Y\n\nc Z\n"))
    with pytest.raises(DataError, match=r"dev\.txt:4: unknown label 'Z'"):
        [conll.label_ids(s, {"X": 0, "Y": 1}) for s in sents]
    assert conll.label_ids(sents[0], {"Y": 0, "X": 1}).tolist() == [1, 0]
    assert conll.read_labels_file(_write(tmp_path / "l.txt", b"B\n\nA\n")) == ["B", "A"]
    with pytest.raises(DataError, match=r"l2\.txt:2: label 'B' listed twice"):
        conll.read_labels_file(_write(tmp_path / "l2.txt", b"B\nB\n"))
    with pytest.raises(DataError, match="listed twice"):
        conll.check_label_list(["A", "A"], "--labels")


def test_writer_appends_a_column_in_the_input_layout(tmp_path):
    text = b"-DOCSTART- d1\n\nEU NNP B-ORG\nrejects VBZ O\n\nPeter\tNNP\tB-PER\n"
    sents = conll.read_conll(_write(tmp_path / "in.txt", text))
    out = str(tmp_path / "out" / "pred.txt")
    assert conll.write_conll(out, sents, [["B-ORG", "B-MISC"], ["O"]]) == 3
    assert open(out, "rb").read() == (b"-DOCSTART- d1\n\nEU NNP B-ORG B-ORG\nrejects VBZ O B-MISC\n\n"
                                      b"Peter\tNNP\tB-PER\tO\n\n")
    back = conll.read_conll(out)
    assert [s.labels for s in back] == [("B-ORG", "B-MISC"), ("O",)]
    assert [s.labels for s in conll.read_conll(out, label_column=-2)] == [s.labels for s in sents]
    with pytest.raises(ValueError, match=r"in\.txt:3: 1 predictions for 2 words"):
        conll.write_conll(out, sents, [["O"], ["O"]])
    with pytest.raises(ValueError, match="blank or holds whitespace"):
        conll.write_conll(out, sents, [["O", "B X"], ["O"]])


# ---- the Brown POS slice -------------------------------------------------------------------------------------

def test_universal_mapping_rules():
    cases = {"nn": "NOUN", "np-tl": "NOUN", "nn-tl-hl": "NOUN", "np$": "NOUN", "nns$-tl": "NOUN", "pn": "NOUN",
             "pps+bez": "PRON", "ppss+ber-n": "PRON", "ppss+md": "PRON", "pps+bez-nc": "PRON", "pp$": "PRON",
             "pp$$": "PRON", "wp$": "PRON", "do*": "VERB", "md*-hl": "VERB", "vb+ppo": "VERB", "vbg+to": "VERB",
             "bez*": "VERB", "*": "ADV", "*-hl": "ADV", "ql": "ADV", "abl": "ADV", "--": ".", "---hl": ".",
             "``": ".", "'": ".", ":-tl": ".", "fw-nn": "X", "fw-in+at-t": "X", "fw-*": "X", "uh": "X", "nil": "X",
             "cs": "ADP", "in-tl": "ADP", "ex+bez": "DET", "abn": "DET", "wdt+ber+pp": "DET", "ap": "ADJ",
             "od": "ADJ", "jj$-tl": "ADJ", "cd$": "NUM", "to+vb": "PRT", "rp": "PRT", "cc-tl": "CONJ"}
    assert {t: brown_pos.universal_tag(t) for t in cases} == cases
    assert set(brown_pos.BASE_TAGS.values()) == set(brown_pos.UNIVERSAL_TAGS)
    for bad in ("xyz", "nn-zz", "", "+nn"):
        with pytest.raises(brown_genre.BrownError):
            brown_pos.universal_tag(bad)


def test_shipped_slice_columns_tags_and_split():
    """Every token of the slice: word, Brown tag, its universal tag (the mapping), Brown's quotes undone; the texts
    are those of the genre task's split (train texts from its train split, dev from dev, as its slice)."""
    assert open(os.path.join(BROWN, "labels.txt")).read().split("\n")[:-1] == UNIVERSAL
    sizes = dict(zip("abcdefghjklmnpr", [44, 27, 17, 17, 36, 48, 75, 30, 80, 29, 24, 6, 29, 29, 9]))
    ids = [f"c{g}{k:02d}" for g, n in sizes.items() for k in range(1, n + 1)]
    splits = brown_pos.split_ids(ids)
    assert {f: s for s, fs in splits.items() for f in fs} == brown_genre.assign_splits(ids)
    genre_slice = {s: [ln.split("\t")[0] for ln in open(os.path.join(F.REPO_ROOT, "data", "finetune", "brown_genre",
                                                                        f"{s}.tsv"))][1:] for s in ("train", "dev")}
    fine = collections.Counter()
    for split in ("train", "dev"):
        sents = conll.read_conll(os.path.join(BROWN, f"{split}.txt"))
        docs = list(dict.fromkeys(s.doc for s in sents))
        assert docs == brown_genre.select_balanced(splits[split], 1, "group") and set(docs) <= set(genre_slice[split])
        assert [brown_genre.group_of(d) for d in docs] == list(brown_genre.GROUP_LABELS)
        for s in sents:
            assert all(len(c) == 3 and c[2] == brown_pos.universal_tag(c[1]) for c in s.columns), s.source
            assert not any("``" in w or "''" in w for w in s.words)
            fine.update(c[1] for c in s.columns)
    assert len(fine) > 100 and fine["``"] == sum(1 for s in ("train", "dev") for ln in
                                                 open(os.path.join(BROWN, f"{s}.txt")) if ln.startswith('"\t``'))


def test_tagged_text_to_conll(tmp_path):
    texts = {"ca01": brown_pos.tagged_sentences("\n\n\tThe/at ``/`` jury/nn ''/'' ./.\n\n\tIt's/pps+bez 1/4''/nn\n")}
    assert texts["ca01"] == [[("The", "at"), ('"', "``"), ("jury", "nn"), ('"', "''"), (".", ".")],
                             [("It's", "pps+bez"), ('1/4"', "nn")]]
    assert brown_pos.conll_text(texts, ["ca01"], "brown").splitlines()[:4] == ["-DOCSTART-\tca01", "", "The\tat",
                                                                              '"\t``']
    text = brown_pos.conll_text(texts, ["ca01"])
    sents = conll.read_conll(_write(tmp_path / "x.txt", text.encode()))
    assert [s.labels for s in sents] == [("DET", ".", "NOUN", ".", "."), ("PRON", "NOUN")]
    with pytest.raises(brown_genre.BrownError, match=r"f:1: token 'jury' is not word/tag"):
        brown_pos.tagged_sentences("jury\n", "f")


# ---- alignment and windows -----------------------------------------------------------------------------------

def test_alignment_round_trip_on_brown_text(tok, brown_dev):
    """Each word's own pieces, concatenated, are exactly the pieces of the sentence's text, and decode to the
    normalized word: the alignment neither adds nor loses text."""
    for s in brown_dev:
        pieces = tagging.word_piece_ids(tok, s.words)
        assert [i for p in pieces for i in p] == tok.encode(" ".join(s.words)), s.source
        for word, p in zip(s.words, pieces):
            assert UNK_ID in p or tok.decode(p) == tok.normalize(word), (s.source, word)


def test_a_word_normalizing_to_nothing_is_one_unknown_piece(tok):
    assert tagging.word_piece_ids(tok, ["a", "\u0301", "b"])[1] == [UNK_ID]


def test_windows_are_squads_and_max_context_is_squads():
    for n in range(0, 40):
        for m in (1, 2, 5, 8):
            for stride in (1, 3, 5, 100):
                spans = tagging.window_spans(n, m, stride)
                assert len(spans) == tagging.num_windows(n, m, stride)
                if n:
                    assert spans == squad_data.doc_spans(n, m, stride)
                    np.testing.assert_array_equal(tagging.max_context_window(spans, n),
                                                  squad_data.max_context_span(spans, n))


def _labels(s, labels=UNIVERSAL):
    return conll.label_ids(s, {lab: i for i, lab in enumerate(labels)})


@pytest.mark.parametrize("length,stride,all_pieces", [(10, 3, False), (16, 5, True), (48, 16, False)])
def test_windows_never_drop_a_word_and_stitch_once_per_word(tok, brown_dev, length, stride, all_pieces):
    long_ones = 0
    for s in brown_dev:
        pieces = tagging.word_piece_ids(tok, s.words)
        flat = [i for p in pieces for i in p]
        word_start = np.cumsum([0] + [len(p) for p in pieces])[:-1]  # sentence position of each word's first piece
        labels = _labels(s)
        windows = tagging.pack_sentence(pieces, labels, length, stride, all_pieces)
        long_ones += len(windows) > 1
        stack = {k: np.stack([w[k] for w in windows]) for k in windows[0]}
        np.testing.assert_array_equal(stack["window_index"], np.arange(len(windows)))
        step = min(length - 2, stride)
        for k, w in enumerate(windows):  # pieces <sep> <cls>, left-padded; window k holds pieces k * step ...
            real = w["attention_mask"] > 0
            ids = w["input_ids"][real]
            assert ids[-2:].tolist() == [SEP_ID, CLS_ID] and not real[:-int(real.sum())].any()
            assert w["segment_ids"][real].tolist() == [0] * (len(ids) - 1) + [2]
            run, start = ids[:-2].tolist(), k * step
            assert run == flat[start:start + len(run)] and (len(run) == length - 2 or k == len(windows) - 1)
            words = w["word_ids"][real][:-2]
            first = start + np.arange(len(run)) == word_start[words]
            want = labels[words] if all_pieces else np.where(first, labels[words], tagging.IGNORE_LABEL)
            np.testing.assert_array_equal(w["label_ids"][real], np.r_[want, [tagging.IGNORE_LABEL] * 2])
            assert (w["label_ids"][~real] == tagging.IGNORE_LABEL).all() and (w["word_ids"][~real] == -1).all()
            assert (w["is_max_context"][real][:-2] <= first).all()
        assert start + len(run) == len(flat)  # the last window ends the sentence
        got = tagging.stitch(stack["word_ids"], stack["is_max_context"], stack["label_ids"], len(s.words))
        np.testing.assert_array_equal(got, labels)
    assert long_ones > (50 if length < 48 else 5)


def test_stitch_refuses_a_missing_or_doubled_word():
    word_ids = np.array([[0, 1, -1], [1, 2, -1]])
    ok = np.array([[1, 1, 0], [0, 1, 0]])
    np.testing.assert_array_equal(tagging.stitch(word_ids, ok, word_ids * 10), [0, 10, 20])
    with pytest.raises(ValueError, match="word 1 \\(2\\)"):
        tagging.stitch(word_ids, np.array([[1, 1, 0], [1, 1, 0]]), word_ids)
    with pytest.raises(ValueError, match="word 3 \\(0\\)"):
        tagging.stitch(word_ids, ok, word_ids, num_words=4)
    got = tagging.stitch_examples([1, -1, 0], np.array([[0, -1], [-1, -1], [0, 1]]),
                                  np.array([[1, 0], [0, 0], [1, 1]]), np.array([[7, 0], [0, 0], [5, 6]]))
    assert [g.tolist() for g in got] == [[5, 6], [7]]


@pytest.mark.parametrize("length,stride,all_pieces", [(12, 4, False), (32, 10, True), (128, 64, False)])
def test_in_graph_twin_equals_numpy_on_brown_text(tok, brown_dev, length, stride, all_pieces):
    """`word_piece_ids_tf` + `pack_sentences_tf` (serving) give byte for byte what the builder packs, windows
    included, on the shipped Brown dev text (plus an empty sentence and a word that normalizes to nothing); the
    in-graph stitch gives every word's value back."""
    sentences = [list(s.words) for s in brown_dev] + [[], ["\u0301", "x"]]
    labels = [_labels(s).tolist() for s in brown_dev] + [[], [1, 2]]
    want = [w for words, lab in zip(sentences, labels)
            for w in tagging.pack_sentence(tagging.word_piece_ids(tok, words), lab, length, stride, all_pieces)]
    encoder = preprocessing.XLNetTextEncoder(open(F.tiny_spm(), "rb").read())
    words = tf.RaggedTensor.from_row_lengths(tf.constant([w for s in sentences for w in s], tf.string),
                                             tf.constant([len(s) for s in sentences], tf.int64))
    pieces = tagging.word_piece_ids_tf(encoder, words)
    got = tagging.pack_sentences_tf(pieces, length, stride, tf.ragged.constant(labels, tf.int32), all_pieces)
    for key in tagging.FEATURE_NAMES + ("window_index",):
        g, w = got[key].numpy(), np.stack([x[key] for x in want])
        assert g.dtype == w.dtype, (key, g.dtype, w.dtype)
        np.testing.assert_array_equal(g, w, err_msg=key)
    counts = np.bincount(got["example_index"].numpy(), minlength=len(sentences))
    assert counts.max() > 1 or length == 128
    stitched = tagging.stitch_tf(got["example_index"], got["word_ids"], got["is_max_context"], got["label_ids"],
                                 [len(s) for s in sentences])
    assert stitched.to_list() == labels
    with pytest.raises(tf.errors.InvalidArgumentError, match="max_windows=1"):
        tagging.pack_sentences_tf(pieces, 12, 4, max_windows=1)


# ---- records -------------------------------------------------------------------------------------------------

def _read(dataset):
    batches = collections.defaultdict(list)
    for batch in dataset:
        for key, value in batch.items():
            batches[key].append(value.numpy())
    return {k: np.concatenate(v) for k, v in batches.items()}


@pytest.fixture(scope="module")
def brown_records(tmp_path_factory):
    out = str(tmp_path_factory.mktemp("brown_pos_records"))
    logs = []
    m = tagging_data.build_tagging_records(BROWN, F.tiny_spm(), out, max_seq_length=24, doc_stride=8,
                                           labels_file=os.path.join(BROWN, "labels.txt"), tagset="universal",
                                           eval_batch_size=16, seed=3, log=logs.append)
    assert any(line.startswith("dev: 546 sentences, 9290 words") for line in logs)
    return out, m


def test_records_equal_the_packer_and_stitch_back_to_the_gold_tags(tok, brown_records, brown_dev, tmp_path):
    out, m = brown_records
    assert m["label_list"] == UNIVERSAL and m["tagset"] == "universal" and m["doc_stride"] == 8
    e = m["splits"]["dev"]
    assert e["num_examples"] == 546 and e["num_records"] % 16 == 0 and e["num_padding"] < 16
    assert e["num_words"] == sum(map(len, brown_dev)) and e["num_multi_window"] > 100 and e["has_labels"]
    assert sum(e["label_counts"].values()) == e["num_words"] and e["label_counts"]["X"] == 11
    got = _read(tagging_data.tagging_dataset(out, 16, False, 24, F.tiny_spm(), split="dev", tagset="universal"))
    assert got["input_ids"].shape[0] == e["num_records"]
    real = got["is_real_example"] > 0
    assert real.sum() == e["num_windows"] and (got["example_index"][~real] == -1).all()
    want = tagging_data.convert_sentences(tok, brown_dev, UNIVERSAL, 24, 8)
    for key in tagging.FEATURE_NAMES + ("example_index", "window_index"):
        w = np.stack([x[key] for x in want])
        assert got[key].dtype == w.dtype, key
        np.testing.assert_array_equal(got[key][real], w, err_msg=key)
    assert tagging_data.read_guids(out, "dev")[1] == "dev.txt:" + str(brown_dev[1].lines[0])
    # predictions = the records' own labels -> every word's gold tag, written back in the input's layout
    tags = tagging_data.predicted_tags(out, "dev", got["example_index"], got["word_ids"], got["is_max_context"],
                                       np.maximum(got["label_ids"], 0))
    assert tags == [list(s.labels) for s in brown_dev]
    pred = str(tmp_path / "dev.pred.txt")
    assert tagging_data.write_split_predictions(out, "dev", tags, pred) == e["num_words"]
    back = conll.read_conll(pred)
    assert [s.columns for s in back] == [tuple(c + (c[2],) for c in s.columns) for s in brown_dev]
    assert [s.doc for s in back] == [s.doc for s in brown_dev]


def test_train_records_are_shuffled_windows_of_every_sentence(brown_records):
    out, m = brown_records
    got = _read(tagging_data.tagging_dataset(out, 32, True, 24, repeat=False, drop_remainder=False, seed=1))
    e = m["splits"]["train"]
    assert e["num_padding"] == 0 and len(got["example_index"]) == e["num_windows"] == e["num_records"]
    assert set(got["example_index"]) == set(range(337))
    assert not (np.diff(got["example_index"]) >= 0).all()  # shuffled
    assert (got["is_max_context"].sum() == e["num_words"]) and (got["is_max_context"] <= (got["label_ids"] >= 0)).all()


def test_rebuild_adds_splits_and_refuses_other_parameters(brown_records, tmp_path):
    out, m = brown_records
    before = F.snapshot(out)
    with pytest.raises(DataError, match="doc_stride: 8 there, 9 now"):
        tagging_data.build_tagging_records(BROWN, F.tiny_spm(), out, max_seq_length=24, doc_stride=9,
                                           labels_file=os.path.join(BROWN, "labels.txt"), tagset="universal")
    with pytest.raises(DataError, match="tagset: 'universal' there, None now"):
        tagging_data.build_tagging_records(BROWN, F.tiny_spm(), out, max_seq_length=24, doc_stride=8,
                                           labels_file=os.path.join(BROWN, "labels.txt"), splits=("dev",))
    assert F.snapshot(out) == before
    with pytest.raises(manifest_lib.ManifestError, match="doc_stride: 8 in the records, 16 given"):
        tagging_data.tagging_dataset(out, 8, False, 24, doc_stride=16)
    with pytest.raises(manifest_lib.ManifestError, match="max_seq_length: 24 in the records, 32 given"):
        tagging_data.tagging_dataset(out, 8, False, 32)
    # the same parameters: a split is rebuilt in place, the others kept
    data = tmp_path / "data"
    for name in ("train.txt", "dev.txt", "labels.txt"):
        _write(data / name, open(os.path.join(BROWN, name), "rb").read())
    copy = str(tmp_path / "copy")
    kwargs = dict(max_seq_length=24, doc_stride=8, labels_file=str(data / "labels.txt"), tagset="universal")
    tagging_data.build_tagging_records(str(data), F.tiny_spm(), copy, splits=("dev",), **kwargs)
    _write(data / "test.txt", b"-DOCSTART-\tcx\n\nHello\nworld\n")  # unlabeled
    merged = tagging_data.build_tagging_records(str(data), F.tiny_spm(), copy, splits=("test",), **kwargs)
    assert sorted(merged["splits"]) == ["dev", "test"] and not merged["splits"]["test"]["has_labels"]
    got = _read(tagging_data.tagging_dataset(copy, 4, False, 24, split="test", drop_remainder=False))
    assert (got["label_ids"] == tagging.IGNORE_LABEL).all() and got["is_max_context"].sum() == 2


def test_bad_input_stops_before_writing(tmp_path):
    data = tmp_path / "data"
    _write(data / "train.txt", b"a X\nb Y\n")
    _write(data / "dev.txt", b"a X\n\nb Z\n")
    out = tmp_path / "out"
    with pytest.raises(DataError, match=r"dev\.txt:3: unknown label 'Z'"):
        tagging_data.build_tagging_records(str(data), F.tiny_spm(), str(out), max_seq_length=8, doc_stride=2)
    assert not out.exists()
    with pytest.raises(DataError, match=r"test\.txt: file not found"):
        tagging_data.build_tagging_records(str(data), F.tiny_spm(), str(out), splits=("test",))
    with pytest.raises(DataError, match="fewer than 2 labels"):
        tagging_data.build_tagging_records(str(data), F.tiny_spm(), str(out), labels=["X"])
    with pytest.raises(ValueError, match="doc_stride must be an integer >= 1"):
        tagging_data.build_tagging_records(str(data), F.tiny_spm(), str(out), doc_stride=0)
    assert not out.exists()


def test_cli_builds_and_reports_bad_input_in_one_line(tmp_path):
    data = tmp_path / "data"
    _write(data / "train.txt", b"-DOCSTART- -X- O\n\nEU B-ORG\nrejects O\n\nPeter B-PER\nBlackburn I-PER\n")
    out = str(tmp_path / "out")
    env = dict(os.environ, PYTHONPATH=F.REPO_ROOT, TF_CPP_MIN_LOG_LEVEL="2", CUDA_VISIBLE_DEVICES="-1")
    args = [sys.executable, "tfrecords/build_tagging.py", f"--data_dir={data}", f"--spiece_model={F.tiny_spm()}",
            f"--output_dir={out}", "--max_seq_length=8", "--doc_stride=2", "--splits=train", "--tagset=ner"]
    r = subprocess.run(args, cwd=F.REPO_ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    m = tagging_data.read_tagging_manifest(out)
    assert m["label_list"] == ["B-ORG", "B-PER", "I-PER", "O"] and m["splits"]["train"]["num_examples"] == 2
    r = subprocess.run(args + ["--label_column=5"], cwd=F.REPO_ROOT, env=env, capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert "build_tagging.py: error:" in r.stderr and "train.txt:3: 2 column(s), no label_column 5" in r.stderr
