"""Classifier fine-tuning data: packing, task processors, records + manifest, reader, CLI."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from tests import data_fixtures as F
from tfrecords import classifier_data as cd
from tfrecords import manifest as manifest_lib
from tfrecords.readers import processors
from xlnet_tf.text.tokenization import CLS_ID, SEP_ID, XLNetTokenizer

GLUE = os.path.join(F.DATA_DIR, "glue")
TOPIC = os.path.join(F.DATA_DIR, "labeled", "topic")
PARAPHRASE = os.path.join(F.DATA_DIR, "labeled", "paraphrase")


def _env():
    return dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", CUDA_VISIBLE_DEVICES="-1")


def original_convert(tokens_a, tokens_b, max_seq_length):
    """Transcription of the original `classifier_utils.convert_single_example` on ids
    (its `input_mask` is 1 for padding)."""
    tokens_a, tokens_b = list(tokens_a), (list(tokens_b) if tokens_b else None)
    if tokens_b:
        while True:
            if len(tokens_a) + len(tokens_b) <= max_seq_length - 3:
                break
            if len(tokens_a) > len(tokens_b):
                tokens_a.pop()
            else:
                tokens_b.pop()
    elif len(tokens_a) > max_seq_length - 2:
        tokens_a = tokens_a[:max_seq_length - 2]
    tokens, segment_ids = [], []
    for t in tokens_a:
        tokens.append(t)
        segment_ids.append(0)
    tokens.append(SEP_ID)
    segment_ids.append(0)
    if tokens_b:
        for t in tokens_b:
            tokens.append(t)
            segment_ids.append(1)
        tokens.append(SEP_ID)
        segment_ids.append(1)
    tokens.append(CLS_ID)
    segment_ids.append(2)
    input_ids, input_mask = tokens, [0] * len(tokens)
    if len(input_ids) < max_seq_length:
        delta = max_seq_length - len(input_ids)
        input_ids = [0] * delta + input_ids
        input_mask = [1] * delta + input_mask
        segment_ids = [4] * delta + segment_ids
    return input_ids, input_mask, segment_ids


def _eq(f, ids, seg, mask):
    np.testing.assert_array_equal(f["input_ids"], ids)
    np.testing.assert_array_equal(f["segment_ids"], seg)
    np.testing.assert_array_equal(f["attention_mask"], mask)
    assert f["input_ids"].dtype == np.int32 and f["segment_ids"].dtype == np.int32
    assert f["attention_mask"].dtype == np.float32


# ---- packing ----------------------------------------------------------------------------------

def test_pack_single_left_padded_cls_last():
    f = cd.pack_ids([11, 12, 13], None, 8)
    _eq(f, [0, 0, 0, 11, 12, 13, SEP_ID, CLS_ID], [4, 4, 4, 0, 0, 0, 0, 2],
        [0, 0, 0, 1, 1, 1, 1, 1])


def test_pack_pair_segments_include_their_sep():
    f = cd.pack_ids([11, 12], [21], 8)
    _eq(f, [0, 0, 11, 12, SEP_ID, 21, SEP_ID, CLS_ID], [4, 4, 0, 0, 0, 1, 1, 2],
        [0, 0, 1, 1, 1, 1, 1, 1])


def test_pack_truncates_longer_segment_first_b_on_ties():
    a, b = [101, 102, 103, 104, 105, 106], [201, 202, 203]
    f = cd.pack_ids(a, b, 8)  # budget 5: a 6->3, then tie -> b 3->2
    _eq(f, [101, 102, 103, SEP_ID, 201, 202, SEP_ID, CLS_ID], [0, 0, 0, 0, 1, 1, 1, 2], [1] * 8)
    f = cd.pack_ids([1, 2, 3], [7, 8, 9], 8)  # tie: pop B
    np.testing.assert_array_equal(f["input_ids"], [1, 2, 3, SEP_ID, 7, 8, SEP_ID, CLS_ID])
    f = cd.pack_ids(list(range(100, 110)), None, 5)  # single: first L-2
    np.testing.assert_array_equal(f["input_ids"], [100, 101, 102, SEP_ID, CLS_ID])
    assert a == [101, 102, 103, 104, 105, 106] and b == [201, 202, 203]  # inputs untouched


def test_pack_empty_b_is_single_layout_and_bad_length_rejected():
    np.testing.assert_array_equal(cd.pack_ids([5, 6], [], 6)["input_ids"],
                                  cd.pack_ids([5, 6], None, 6)["input_ids"])
    with pytest.raises(ValueError, match="max_seq_length"):
        cd.pack_ids([1], None, 2)


def test_pack_matches_transcription_of_the_original(rng):
    for _ in range(300):
        L = int(rng.randint(3, 24))
        a = rng.randint(10, 900, size=rng.randint(0, 30)).tolist()
        b = rng.randint(10, 900, size=rng.randint(0, 30)).tolist() if rng.rand() < .7 else None
        ids, input_mask, seg = original_convert(a, b, L)
        f = cd.pack_ids(a, b, L)
        np.testing.assert_array_equal(f["input_ids"], ids)
        np.testing.assert_array_equal(f["segment_ids"], seg)
        np.testing.assert_array_equal(f["attention_mask"], 1 - np.array(input_mask))
        assert f["input_ids"][-1] == CLS_ID and f["segment_ids"][-1] == 2


def test_pack_example_tokenizes_with_normalization():
    tok = F.tiny_tokenizer()
    f = cd.pack_example(tok, "The whale  swam.", "It was ``large''.", 32)
    ref = cd.pack_ids(tok.encode("The whale swam."), tok.encode('It was "large".'), 32)
    for k in ref:
        np.testing.assert_array_equal(f[k], ref[k])
    unc = XLNetTokenizer(F.tiny_spm(), uncased=True)
    np.testing.assert_array_equal(cd.pack_example(unc, "THE WHALE", None, 16)["input_ids"],
                                  cd.pack_example(tok, "the whale", None, 16)["input_ids"])


# ---- processors -------------------------------------------------------------------------------

# task -> split -> (count, first text_a, first text_b, first label, first guid)
GLUE_EXPECTED = {
    "cola": {"train": (4, "The dog chased the ball across the yard.", None, "1", "train-0"),
             "dev": (2, "They have finished the report.", None, "1", "dev-0"),
             "test": (2, "The kettle boiled over.", None, None, "0")},
    "sst-2": {"train": (3, "a warm , funny little film ", None, "1", "train-0"),
              "dev": (2, "an utterly forgettable sequel ", None, "0", "dev-0"),
              "test": (2, "a bold and tender story ", None, None, "0")},
    "mrpc": {"train": (3, "The company said profits rose 5 percent.",
                       "Profits increased by 5 percent, the company said.", "1", "train-0"),
             "dev": (2, "Shares fell sharply in early trading.",
                     "The museum reopened after a long renovation.", "0", "dev-0"),
             "test": (2, "The train left at noon.", "At noon the train departed.", None, "0")},
    "sts-b": {"train": (3, "A man is playing a guitar.", "A man plays the guitar.", "4.800", "0"),
              "dev": (2, "A cat is sleeping.", "A cat sleeps on a sofa.", "3.750", "0"),
              "test": (1, "A dog runs in a field.", "A dog is running outside.", None, "0")},
    "qqp": {"train": (3, "How do I learn to cook?", "What is the best way to learn cooking?", "1",
                      "11"),
            "dev": (2, "How do planes fly?", "Where is the nearest airport?", "0", "31"),
            "test": (2, "What is rain?", "Why does it rain?", None, "0")},
    "mnli_matched": {"train": (3, "The boy opened the window.", "The window was opened.",
                               "entailment", "0"),
                     "dev": (2, "She sold her old car.", "She no longer owns that car.",
                             "entailment", "0"),
                     "test": (1, "He laughed at the joke.", "He found the joke funny.", None, "0")},
    "mnli_mismatched": {"train": (3, "The boy opened the window.", "The window was opened.",
                                  "entailment", "0"),
                        "dev": (3, "Thank you for your gift.", "The writer received a gift.",
                                "entailment", "0"),
                        "test": (2, "Please send the form.", "No form is needed.", None, "0")},
    "qnli": {"train": (2, "When was the bridge built?", "The bridge was built in 1890.",
                       "entailment", "0"),
             "dev": (2, "What is the capital?", "The capital is a large port city.",
                     "not_entailment", "0"),
             "test": (1, "Where is the castle?", "The castle stands on a hill above the town.",
                      None, "0")},
    "rte": {"train": (2, "The council approved the new park last year.",
                      "A new park was approved.", "entailment", "0"),
            "dev": (1, "Snow fell across the region overnight.", "It snowed.", "entailment", "0"),
            "test": (1, "The shop sells bread and cakes.", "The shop sells cars.", None, "0")},
    "wnli": {"train": (2, "The trophy did not fit in the case because it was too big.",
                       "The trophy was too big.", "1", "0"),
             "dev": (1, "Anna thanked Maria because she had helped her.",
                     "Maria had helped Anna.", "1", "0"),
             "test": (1, "The cup fell off the table because it was wobbly.",
                      "The table was wobbly.", None, "0")},
}
GLUE_DIRS = {"cola": "CoLA", "sst-2": "SST-2", "mrpc": "MRPC", "sts-b": "STS-B", "qqp": "QQP",
             "mnli_matched": "MNLI", "mnli_mismatched": "MNLI", "qnli": "QNLI", "rte": "RTE",
             "wnli": "WNLI"}


@pytest.mark.parametrize("task", sorted(GLUE_EXPECTED))
def test_glue_processor_reads_official_layout(task):
    proc = processors.get_processor(task)
    data_dir = os.path.join(GLUE, GLUE_DIRS[task])
    regression = task == "sts-b"
    assert proc.is_regression(data_dir) == regression
    labels = proc.get_labels(data_dir)
    for split, (n, a, b, label, guid) in GLUE_EXPECTED[task].items():
        exs = proc.get_examples(data_dir, split)
        assert len(exs) == n, split
        assert (exs[0].text_a, exs[0].text_b, exs[0].label, exs[0].guid) == (a, b, label, guid)
        if split == "test":
            assert all(ex.label is None for ex in exs)
        else:
            assert all(ex.label is not None for ex in exs)
        f = cd.convert_examples(F.tiny_tokenizer(), exs, labels, regression, 24)
        assert f["input_ids"].shape == (n, 24) and (f["input_ids"][:, -1] == CLS_ID).all()
        assert ((f["segment_ids"] == 1).any(axis=1) == (b is not None)).all()
        if regression:
            assert f["label"].dtype == np.float32
        else:
            assert f["label"].dtype == np.int32 and f["label"].max() < len(labels)
    if regression:
        f = processors.label_ids(proc.get_examples(data_dir, "train"), None, True)
        np.testing.assert_allclose(f, [4.8, 0.25, 3.6], rtol=1e-6)


def test_glue_label_lists_and_aliases():
    assert processors.get_processor("MNLI").name == "mnli_matched"
    assert processors.get_processor("mnli_matched").get_labels() == ["contradiction", "entailment",
                                                             "neutral"]
    assert processors.get_processor("qnli").get_labels() == ["entailment", "not_entailment"]
    assert processors.get_processor("sst2").get_labels() == ["0", "1"]
    assert processors.get_processor("stsb").get_labels() is None
    with pytest.raises(ValueError, match="unknown task"):
        processors.get_processor("glue")
    with pytest.raises(ValueError, match="tsv/csv tasks only"):
        processors.get_processor("mrpc", label_column="x")
    with pytest.raises(cd.DataError, match="no split 'validation'"):
        processors.get_processor("rte").get_examples(os.path.join(GLUE, "RTE"), "validation")


def test_glue_quirks_qqp_short_rows_skipped_label_in_last_column(tmp_path):
    q = tmp_path / "QQP"
    q.mkdir()
    raw = open(os.path.join(GLUE, "QQP", "train.tsv"), encoding="utf-8").read()
    (q / "train.tsv").write_text(raw + "14\t27\t28\tA question cut short\n", encoding="utf-8")
    proc = processors.get_processor("qqp")
    assert len(proc.get_examples(str(q), "train")) == 3 and proc.num_skipped("train") == 1
    (q / "dev.tsv").write_text(raw.split("\n")[0] + "\n1\t2\n", encoding="utf-8")
    with pytest.raises(cd.DataError, match=r"dev\.tsv: no usable rows"):
        proc.get_examples(str(q), "dev")
    s = tmp_path / "STS-B"
    s.mkdir()
    raw = open(os.path.join(GLUE, "STS-B", "train.tsv"), encoding="utf-8").read()
    (s / "train.tsv").write_text(raw.replace("\t0.250\n", "\tstray\t0.250\n"), encoding="utf-8")
    assert [e.label for e in processors.get_processor("sts-b").get_examples(str(s), "train")] == [
        "4.800", "0.250", "3.600"]  # the original reads the label at column -1


def test_imdb_processor(tmp_path):
    root = tmp_path / "aclImdb"
    files = {"train/pos/0_9.txt": "Great film.<br /><br />Loved it.", "train/neg/1_2.txt": "Bad.",
             "train/neg/0_1.txt": "Awful acting.", "train/unsup/5_0.txt": "ignored",
             "test/pos/3_8.txt": "Fine movie.", "test/neg/2_3.txt": "Boring."}
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text, encoding="utf-8")
    proc = processors.get_processor("imdb")
    exs = proc.get_examples(str(tmp_path), "train")  # the parent of aclImdb works too
    assert [(e.guid, e.label) for e in exs] == [("neg/0_1.txt", "neg"), ("neg/1_2.txt", "neg"),
                                               ("pos/0_9.txt", "pos")]
    assert exs[2].text_a == "Great film.  Loved it."
    dev = proc.get_examples(str(root), "dev")  # dev = test/, as the original
    assert [e.text_a for e in dev] == ["Boring.", "Fine movie."]
    with pytest.raises(cd.DataError, match="directory not found"):
        proc.get_examples(str(tmp_path / "nowhere"), "train")


def test_yelp_processors(tmp_path):
    (tmp_path / "train.csv").write_text(
        '"2","The food was ""great"", really."\n"1","Slow service\\n and \\""cold\\"" soup."\n',
        encoding="utf-8")
    (tmp_path / "test.csv").write_text('"5","Perfect."\n', encoding="utf-8")
    y2 = processors.get_processor("yelp2")
    assert y2.get_labels() == ["1", "2"]
    exs = y2.get_examples(str(tmp_path), "train")
    assert [e.label for e in exs] == ["2", "1"]
    assert exs[0].text_a == 'The food was "great", really.'
    assert exs[1].text_a == 'Slow service\\n and "cold" soup.'
    y5 = processors.get_processor("yelp5")
    assert y5.get_labels() == ["1", "2", "3", "4", "5"]
    assert y5.get_examples(str(tmp_path), "dev")[0].label == "5"
    with pytest.raises(cd.DataError, match=r"train\.csv:1: unknown label '2'"):
        processors.label_ids(exs, ["1", "3"], False)


def test_generic_tsv_on_topic_and_paraphrase():
    topic = processors.get_processor("tsv")
    with open(os.path.join(TOPIC, "labels.txt"), encoding="utf-8") as f:
        want = [ln.strip() for ln in f if ln.strip()]
    assert topic.get_labels(TOPIC) == sorted(want) and len(want) == 11
    assert not topic.is_regression(TOPIC)
    dev = topic.get_examples(TOPIC, "dev")
    assert len(dev) == 20 and dev[0].text_b is None and dev[0].source.endswith("dev.tsv:2")
    with open(os.path.join(TOPIC, "dev.tsv"), encoding="utf-8") as f:
        first = f.read().split("\n")[1].split("\t")
    assert (dev[0].label, dev[0].text_a) == (first[0], first[1])
    assert processors.get_processor("tsv", labels_file=os.path.join(TOPIC, "labels.txt")).get_labels(
        TOPIC) == want
    para = processors.get_processor("tsv")
    exs = para.get_examples(PARAPHRASE, "train")
    assert len(exs) == 60 and all(e.text_b for e in exs)
    assert para.get_labels(PARAPHRASE) == ["0", "1"]
    assert para.config()["columns_used"] == {"text_a": "sentence1", "text_b": "sentence2"}
    single = processors.get_processor("tsv", text_column="sentence2", text_b_column="")
    assert single.get_examples(PARAPHRASE, "dev")[0].text_b is None


def test_generic_regression_detection_and_csv(tmp_path):
    d = tmp_path / "reg"
    d.mkdir()
    (d / "train.tsv").write_text("label\ttext\n0.5\ta\n1.25\tb\n3\tc\n", encoding="utf-8")
    assert processors.get_processor("tsv").is_regression(str(d))
    assert processors.get_processor("tsv", regression=False).get_labels(str(d)) == ["0.5", "1.25", "3"]
    (d / "train.tsv").write_text("label\ttext\n10\ta\n2\tb\n", encoding="utf-8")
    assert processors.get_processor("tsv").get_labels(str(d)) == ["2", "10"]  # numeric order
    assert processors.get_processor("tsv", regression=True).is_regression(str(d))
    c = tmp_path / "csv"
    c.mkdir()
    (c / "train.csv").write_text(
        'question1,question2,label\n"Is it, really?",Yes,b\nNo,"x ""y""",a\n', encoding="utf-8")
    exs = processors.get_processor("csv").get_examples(str(c), "train")
    assert [(e.text_a, e.text_b, e.label) for e in exs] == [("Is it, really?", "Yes", "b"),
                                                          ("No", 'x "y"', "a")]


# ---- bad input --------------------------------------------------------------------------------

def _write(path, data: bytes):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return str(path)


def test_bad_input_names_file_and_line(tmp_path):
    d = tmp_path / "bad"
    _write(d / "train.tsv", b"label\ttext\na\tfine\nb\tok\n")
    _write(d / "dev.tsv", b"label\ttext\na\tfine\nc\tunknown label\n")
    proc = processors.get_processor("tsv")
    exs = proc.get_examples(str(d), "dev")
    with pytest.raises(cd.DataError, match=r"dev\.tsv:3: unknown label 'c'"):
        processors.label_ids(exs, proc.get_labels(str(d)), False)
    with pytest.raises(cd.DataError, match=r"dev\.tsv:3: unknown label 'c'"):
        cd.build_classifier_records(proc, str(d), F.tiny_spm(), str(tmp_path / "out"),
                                    max_seq_length=16)
    assert not (tmp_path / "out").exists()  # nothing written before every split is checked
    with pytest.raises(cd.DataError, match=r"train\.tsv:1: no column 'category'"):
        processors.get_processor("tsv", label_column="category").get_labels(str(d))
    _write(d / "nolabel.tsv", b"text\nhello\n")
    with pytest.raises(cd.DataError, match=r"nolabel\.tsv:1: no column 'label'"):
        proc.get_examples(str(d), "nolabel")
    _write(d / "test.tsv", b"text\nhello\n")  # test splits may be unlabeled
    assert proc.get_examples(str(d), "test")[0].label is None
    _write(d / "short.tsv", b"label\ttext\na\tx\nb\n")
    with pytest.raises(cd.DataError, match=r"short\.tsv:3: 1 field\(s\), no column 'text'"):
        proc.get_examples(str(d), "short")
    _write(d / "empty.tsv", b"")
    with pytest.raises(cd.DataError, match=r"empty\.tsv: empty file"):
        proc.get_examples(str(d), "empty")
    _write(d / "header.tsv", b"label\ttext\n\n")
    with pytest.raises(cd.DataError, match=r"header\.tsv: only a header"):
        proc.get_examples(str(d), "header")
    _write(d / "latin1.tsv", b"label\ttext\na\tok\nb\tcaf\xe9\n")
    with pytest.raises(cd.DataError, match=r"latin1\.tsv:3: invalid UTF-8"):
        proc.get_examples(str(d), "latin1")
    with pytest.raises(cd.DataError, match=r"missing\.tsv: file not found"):
        proc.get_examples(str(d), "missing")
    s = tmp_path / "stsb"
    _write(s / "train.tsv", (open(os.path.join(GLUE, "STS-B", "train.tsv"), "rb").read()
                             .replace(b"\t0.250\n", b"\tlow\n")))
    with pytest.raises(cd.DataError, match=r"train\.tsv:3: label 'low' is not a number"):
        processors.label_ids(processors.get_processor("sts-b").get_examples(str(s), "train"), None, True)


# ---- records and reader -----------------------------------------------------------------------

def _read_all(ds):
    batches = [{k: v.numpy() for k, v in b.items()} for b in ds]
    return batches, {k: np.concatenate([b[k] for b in batches]) for k in batches[0]}


@pytest.fixture(scope="module")
def topic_records(tmp_path_factory):
    out = str(tmp_path_factory.mktemp("topic_records"))
    logs = []
    m = cd.build_classifier_records(processors.get_processor("tsv"), TOPIC, F.tiny_spm(), out,
                                    max_seq_length=48, splits=("train", "dev", "test"),
                                    eval_batch_size=8, seed=3, log=logs.append)
    assert any("dev: 20 examples (+4 padding)" in s for s in logs)
    return out, m


def test_manifest_contents(topic_records):
    out, m = topic_records
    disk = manifest_lib.read_manifest(out, kind=cd.CLASSIFIER_KIND)
    assert disk["task"] == "tsv" and disk["max_seq_length"] == 48 and disk["text"]["uncased"] is False
    assert disk["label_list"] == processors.get_processor("tsv").get_labels(TOPIC)
    assert disk["spiece_model"]["sha256"] == XLNetTokenizer(F.tiny_spm()).sha256
    dev = disk["splits"]["dev"]
    assert (dev["num_examples"], dev["num_padding"], dev["num_records"]) == (20, 4, 24)
    assert disk["splits"]["train"]["num_padding"] == 0 and disk["splits"]["train"]["shuffled"]
    assert sum(disk["splits"]["train"]["label_counts"].values()) == 55
    assert sorted(os.listdir(out)) == sorted(
        ["manifest.json"] + [f"{s}.{x}" for s in ("train", "dev", "test")
                             for x in ("tfrecord", "guids.txt")])  # no temporary files left
    assert cd.read_guids(out, "dev") == [f"dev-{k}" for k in range(20)]


def test_eval_records_equal_in_memory_features_and_pad_whole_batches(topic_records):
    out, _ = topic_records
    proc = processors.get_processor("tsv")
    want = cd.convert_examples(F.tiny_tokenizer(), proc.get_examples(TOPIC, "dev"),
                               proc.get_labels(TOPIC), False, 48)
    batches, got = _read_all(cd.classifier_dataset(out, 8, False, 48, F.tiny_spm()))
    assert len(batches) == 3 and all(b["input_ids"].shape == (8, 48) for b in batches)
    real = got["is_real_example"] == 1
    assert real.sum() == 20 and (got["example_index"][~real] == -1).all()
    np.testing.assert_array_equal(got["example_index"][real], np.arange(20))
    for k in ("input_ids", "segment_ids", "attention_mask", "label"):
        np.testing.assert_array_equal(got[k][real], want[k])
        assert got[k].dtype == want[k].dtype
    # padding examples are valid minimal sequences: <sep> <cls>
    np.testing.assert_array_equal(got["input_ids"][~real][:, -2:], [[SEP_ID, CLS_ID]] * 4)
    assert (got["attention_mask"][~real].sum(axis=1) == 2).all()
    # another batch size: the reader pads further so no real example is dropped
    batches, got7 = _read_all(cd.classifier_dataset(out, 7, False, 48, split="test"))
    assert len(batches) == 4 and got7["is_real_example"].sum() == 20
    assert all(b["label"].shape == (7,) for b in batches)


def test_train_records_shuffled_but_indexed(topic_records):
    out, _ = topic_records
    proc = processors.get_processor("tsv")
    want = cd.convert_examples(F.tiny_tokenizer(), proc.get_examples(TOPIC, "train"),
                               proc.get_labels(TOPIC), False, 48)
    _, got = _read_all(cd.classifier_dataset(out, 5, False, 48, split="train"))
    idx = got["example_index"]
    assert sorted(idx.tolist()) == list(range(55)) and idx.tolist() != list(range(55))
    for k in ("input_ids", "segment_ids", "attention_mask", "label"):
        np.testing.assert_array_equal(got[k], want[k][idx])
    ds = cd.classifier_dataset(out, 16, True, 48, seed=1)
    spec = ds.element_spec
    assert spec["input_ids"].shape.as_list() == [16, 48] and spec["label"].dtype.name == "int32"
    assert spec["attention_mask"].dtype.name == "float32"
    it = iter(ds)
    seen = np.concatenate([next(it)["example_index"].numpy() for _ in range(7)])  # > 1 epoch
    assert set(seen.tolist()) == set(range(55))


def test_training_drops_padding_and_pipelines_split_eval(topic_records):
    out, _ = topic_records
    import tensorflow as tf

    it = iter(cd.classifier_dataset(out, 8, True, 48, split="dev", seed=0))
    flags = np.concatenate([next(it)["is_real_example"].numpy() for _ in range(5)])
    assert (flags == 1).all()  # dev has 4 padding records; training never sees them
    seen = []
    for pid in range(2):
        ctx = tf.distribute.InputContext(num_input_pipelines=2, input_pipeline_id=pid,
                                         num_replicas_in_sync=2)
        batches, got = _read_all(cd.classifier_dataset(out, 5, False, 48, input_context=ctx))
        assert all(b["input_ids"].shape == (5, 48) for b in batches)
        seen += got["example_index"][got["is_real_example"] == 1].tolist()
    assert sorted(seen) == list(range(20))


def test_pair_and_regression_records(tmp_path):
    out = str(tmp_path / "stsb")
    cd.build_classifier_records(processors.get_processor("sts-b"), os.path.join(GLUE, "STS-B"),
                                F.tiny_spm(), out, max_seq_length=20, splits=("dev", "test"),
                                eval_batch_size=4)
    _, got = _read_all(cd.classifier_dataset(out, 4, False, 20))
    assert got["label"].dtype == np.float32
    np.testing.assert_array_equal(got["label"], np.float32([3.75, 0.0, 0.0, 0.0]))
    np.testing.assert_array_equal(got["is_real_example"], [1, 1, 0, 0])
    assert ((got["segment_ids"][:2] == 1).sum(axis=1) > 1).all()  # B and its <sep>
    assert (np.sum(got["input_ids"][:2] == SEP_ID, axis=1) == 2).all()
    assert json.load(open(os.path.join(out, "manifest.json")))["splits"]["test"]["has_labels"] \
        is False


def test_manifest_mismatches_are_clear(topic_records, tmp_path):
    out, _ = topic_records
    with pytest.raises(manifest_lib.ManifestError, match="max_seq_length: 48 in the records, 64 given"):
        cd.classifier_dataset(out, 8, False, 64)
    fake = tmp_path / "other.model"
    fake.write_bytes(b"not the same model")
    with pytest.raises(manifest_lib.ManifestError, match="text.spiece_sha256: '[0-9a-f]+' in the records"):
        cd.classifier_dataset(out, 8, False, 48, str(fake))
    with pytest.raises(manifest_lib.ManifestError, match="task: 'tsv' in the records, 'mrpc' given"):
        cd.classifier_dataset(out, 8, False, 48, task="mrpc")
    with pytest.raises(manifest_lib.ManifestError, match="text.uncased: False in the records, True given"):
        cd.classifier_dataset(out, 8, False, 48, uncased=True)
    with pytest.raises(manifest_lib.ManifestError, match="no split 'validation'"):
        cd.classifier_dataset(out, 8, False, 48, split="validation")
    with pytest.raises(manifest_lib.ManifestError, match="does not exist"):
        cd.classifier_dataset(str(tmp_path / "none"), 8, False, 48)
    with pytest.raises(cd.DataError, match="max_seq_length: 48 there, 32 now"):
        cd.build_classifier_records(processors.get_processor("tsv"), TOPIC, F.tiny_spm(), out,
                                    max_seq_length=32, splits=("dev",))


# ---- CLI --------------------------------------------------------------------------------------

def test_cli_builds_paraphrase_and_rejects_bad_flags(tmp_path):
    out = str(tmp_path / "para")
    args = [sys.executable, "tfrecords/build_classifier.py", "--task=tsv",
            f"--data_dir={PARAPHRASE}", f"--spiece_model={F.tiny_spm()}", f"--output_dir={out}",
            "--max_seq_length=40", "--splits=train,dev,test", "--eval_batch_size=16"]
    r = subprocess.run(args, cwd=F.REPO_ROOT, env=_env(), capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    m = manifest_lib.read_manifest(out, kind=cd.CLASSIFIER_KIND)
    assert m["label_list"] == ["0", "1"] and m["splits"]["dev"]["num_padding"] == 12
    assert m["processor"]["columns_used"] == {"text_a": "sentence1", "text_b": "sentence2"}
    r = subprocess.run(args + ["--bogus_flag=1"], cwd=F.REPO_ROOT, env=_env(),
                       capture_output=True, text=True, timeout=60)
    assert r.returncode != 0 and "bogus_flag" in r.stderr
    r = subprocess.run(args[:-3] + ["--label_column=nope"], cwd=F.REPO_ROOT, env=_env(),
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 2
    assert "build_classifier.py: error:" in r.stderr and "no column 'nope'" in r.stderr
    assert "Traceback" not in r.stderr
