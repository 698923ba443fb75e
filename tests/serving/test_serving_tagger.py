"""Tagging export: a tagger trained by run/run_tagger.py on the Brown slice, exported and reloaded in a fresh
process that imports only tensorflow and tensorflow_text, tags raw sentences word for word as the runner's
predictions do (same windows, same stitching), and its `from_words` and `features` signatures agree."""

import json
import os

import numpy as np
import pytest

from tests import data_fixtures, fresh_serving, tie_safe

DATA = os.path.join(data_fixtures.REPO_ROOT, "data", "finetune", "brown_pos")
LENGTH, STRIDE = 64, 32
MAX_WINDOWS = 8  # at most 62 + 7 * 32 = 286 pieces a sentence (the dev slice needs 7 windows)
MAX_PIECES = LENGTH - 2 + (MAX_WINDOWS - 1) * STRIDE

def _sentences(split="dev"):
    from tfrecords.readers import conll

    return conll.read_conll(os.path.join(DATA, f"{split}.txt"))


def _long_sentence(sentences, tokenizer, low, high):
    """The words of consecutive dev sentences, joined until they take more than `low` pieces (and at most
    `high`)."""
    from xlnet_tf.text import tagging

    words = []
    for s in sentences:
        words += list(s.words)
        pieces = sum(len(p) for p in tagging.word_piece_ids(tokenizer, words))
        if pieces > low:
            assert pieces <= high, pieces
            return words
    raise AssertionError("dev slice too short")


def _windows(tokenizer, words):
    """The tagging builder's windows of one sentence (numpy), stacked: `[K, L]` each."""
    from xlnet_tf.text import tagging

    windows = tagging.pack_sentence(tagging.word_piece_ids(tokenizer, words), None, LENGTH, STRIDE)
    return {k: np.stack([w[k] for w in windows]) for k in windows[0]}


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """Trains for a few steps, predicts dev, exports (`--export_max_windows=8`) and serves every request below in
    ONE fresh process."""
    from run import export_savedmodel, run_tagger
    from xlnet_tf.text import tokenization

    root = tmp_path_factory.mktemp("tagger")
    data_fixtures.run_with_flags(run_tagger, [
        "--n_layer=1", "--d_model=32", "--n_head=2", "--d_head=16", "--d_inner=64",
        f"--n_token={data_fixtures.TINY_VOCAB}", "--dropout=0.0", "--dropatt=0.0", "--warmup_steps=5",
        "--steps_per_loop=10", f"--spiece_model_file={data_fixtures.tiny_spm()}", f"--data_dir={DATA}",
        f"--record_dir={root}/records", f"--model_dir={root}/m", "--do_train", "--do_predict",
        "--predict_split=dev", f"--max_seq_length={LENGTH}", f"--doc_stride={STRIDE}", "--train_batch_size=16",
        "--eval_batch_size=64", "--train_steps=20", "--save_steps=20", "--learning_rate=3e-3"])
    path = export_savedmodel.export_from_model_dir(str(root / "m"), str(root / "export"), version=1,
                                                   max_windows=MAX_WINDOWS)
    dev = _sentences()
    tokenizer = tokenization.XLNetTokenizer(data_fixtures.tiny_spm())
    long_words = _long_sentence(dev, tokenizer, 150, MAX_PIECES)  # 4 to 8 windows
    too_long = _long_sentence(dev, tokenizer, MAX_PIECES + 10, 10_000)
    some = [list(s.words) for s in dev[:12]]
    windows = _windows(tokenizer, long_words)
    width = max(map(len, some)) + 1
    requests = {
        "dev": {"signature": "serving_default", "args": {"text": [" ".join(s.words) for s in dev]}},
        "long": {"signature": "serving_default",
                 "args": {"text": ["\t".join(long_words[:7]) + "\u00a0 " + " ".join(long_words[7:]), "Short one ."]}},
        "words": {"signature": "from_words", "dtypes": {"num_words": "int32"},
                  "args": {"words": [w + ["IGNORED"] * (width - len(w)) for w in some],
                           "num_words": [len(w) for w in some]}},
        "features": {"signature": "features", "args": {"text": [" ".join(w) for w in some] + [" ".join(long_words)]}},
        "ids": {"signature": "from_ids", "dtypes": {"input_ids": "int32", "segment_ids": "int32",
                                                    "attention_mask": "float32"},
                "args": {k: windows[k].tolist() for k in ("input_ids", "segment_ids", "attention_mask")}},
        "edge": {"signature": "serving_default", "args": {"text": ["", "  \n ", "word"]}},
        "empty": {"signature": "serving_default", "args": {"text": []}},
        "too_long": {"signature": "serving_default", "args": {"text": ["A short one .", " ".join(too_long)]}},
        "bad_num_words": {"signature": "from_words", "dtypes": {"num_words": "int32"},
                          "args": {"words": [["a", "b"]], "num_words": [3]}},
        "empty_word": {"signature": "from_words", "dtypes": {"num_words": "int32"},
                       "args": {"words": [["a", ""]], "num_words": [2]}},
        "control_word": {"signature": "from_words", "dtypes": {"num_words": "int32"},
                         "args": {"words": [["a\x07b", "c"]], "num_words": [2]}},
    }
    out, errors = fresh_serving.serve(path, requests, root / "reload")
    return {"root": root, "path": path, "out": out, "errors": errors, "dev": dev, "long_words": long_words,
            "some": some}


def _model(root):
    from xlnet_tf import checkpoints
    from xlnet_tf.training import finetuning
    from xlnet_tf.config import XLNetConfig
    from xlnet_tf.models import XLNetTagger

    info = json.load(open(root / "m" / "export_info.json"))
    model = XLNetTagger(XLNetConfig.from_json_file(str(root / "m" / "xlnet_config.json")),
                        num_labels=info["num_labels"], labels=info["labels"])
    checkpoints.load_init_checkpoint(model, finetuning.list_checkpoints(str(root / "m"))[-1], require_heads=True)
    return model, info


def _dev_logits(root, model, sentences):
    """The trained model on the dev records (the runner's windows), stitched: one [C] row per word."""
    from tfrecords import tagging_data
    from xlnet_tf.text import tagging

    parts = {k: [] for k in ("example_index", "word_ids", "is_max_context", "logits")}
    for batch in tagging_data.tagging_dataset(str(root / "records"), 64, False, LENGTH, split="dev"):
        parts["logits"].append(model({k: batch[k] for k in ("input_ids", "segment_ids", "attention_mask")})
                               ["logits"].numpy())
        for k in ("example_index", "word_ids", "is_max_context"):
            parts[k].append(batch[k].numpy())
    p = {k: np.concatenate(v) for k, v in parts.items()}
    keep = p["example_index"] >= 0
    return tagging.stitch_examples(p["example_index"][keep], p["word_ids"][keep], p["is_max_context"][keep],
                                   p["logits"][keep], [len(s) for s in sentences])


def _predicted_column(path):
    lines = open(path, encoding="utf-8").read().splitlines()
    return [line.rsplit("\t", 1)[1] for line in lines if line and not line.startswith("-DOCSTART-")]


def _unpadded(out, name, key, num_words):
    return np.concatenate([out[f"{name}/{key}"][b, :n] for b, n in enumerate(num_words)])


def test_served_tags_are_the_runners_predictions_word_for_word(served):
    """Every dev word (546 sentences joined with spaces, sentences longer than a window included) gets the tag
    of the runner's predict_dev.txt; num_words is the sentence's word count and the byte offsets slice each word
    back out of its string. Compared as the quantities where they could tie: the served logits equal the trained
    model's on the records' windows, and a tag may differ from the runner's only where two classes are within
    1e-4 (there are none or almost none)."""
    from tfrecords import tagging_data

    root, out, dev = served["root"], served["out"], served["dev"]
    manifest = tagging_data.read_tagging_manifest(str(root / "records"))
    assert manifest["splits"]["dev"]["num_multi_window"] > 0  # windows and stitching are exercised
    counts = [len(s.words) for s in dev]
    np.testing.assert_array_equal(out["dev/num_words"], counts)
    assert out["dev/tags"].shape == (len(dev), max(counts))
    for b, s in enumerate(dev):  # offsets slice the words back out; padding is "", -1
        text = " ".join(s.words).encode("utf-8")
        begin, end = out["dev/word_begin"][b], out["dev/word_end"][b]
        assert [text[i:j].decode("utf-8") for i, j in zip(begin[:counts[b]], end[:counts[b]])] == list(s.words)
        assert (begin[counts[b]:] == -1).all() and (end[counts[b]:] == -1).all()
        assert (out["dev/tags"][b, counts[b]:] == b"").all() and (out["dev/tag_ids"][b, counts[b]:] == -1).all()

    model, info = _model(root)
    reference = np.concatenate(_dev_logits(root, model, dev))  # [words, C]
    served_logits = _unpadded(out, "dev", "logits", counts)
    np.testing.assert_allclose(served_logits, reference, atol=1e-4)
    tags = [t.decode() for t in _unpadded(out, "dev", "tags", counts)]
    predicted = _predicted_column(root / "m" / "predict_dev.txt")
    assert len(tags) == len(predicted) == sum(counts) == 9290
    top2 = np.sort(reference, -1)[:, -2:]
    near = top2[:, 1] - top2[:, 0] <= tie_safe.NEAR_TIE
    assert near.sum() <= 5, near.sum()
    differ = [k for k, (a, b) in enumerate(zip(tags, predicted)) if a != b]
    assert all(near[k] for k in differ), [(k, tags[k], predicted[k]) for k in differ if not near[k]][:5]
    ids = _unpadded(out, "dev", "tag_ids", counts)
    assert [info["labels"][i] for i in ids] == tags
    probs = np.exp(served_logits - served_logits.max(-1, keepdims=True))
    np.testing.assert_allclose(_unpadded(out, "dev", "probabilities", counts),
                               (probs / probs.sum(-1, keepdims=True)).max(-1), atol=1e-6)


def test_a_sentence_of_several_windows_is_tagged_word_for_word(served):
    """A sentence of 150 to 286 pieces (4 to 8 windows of 62) is split at any whitespace (tab, no-break space)
    and each word gets the prediction of the window where it has the most context: the builder's numpy windows
    through the trained model, stitched, give the same logits; `from_ids` on those windows gives the model's
    logits at every position."""
    from xlnet_tf.text import tagging, tokenization

    root, out, words = served["root"], served["out"], served["long_words"]
    features = _windows(tokenization.XLNetTokenizer(data_fixtures.tiny_spm()), words)
    assert 4 <= len(features["input_ids"]) <= MAX_WINDOWS
    model, info = _model(root)
    logits = model({k: features[k] for k in ("input_ids", "segment_ids", "attention_mask")})["logits"].numpy()
    np.testing.assert_allclose(out["ids/logits"], logits, atol=1e-4)
    assert out["ids/tags"].shape == out["ids/tag_ids"].shape == features["input_ids"].shape
    assert [info["labels"][i].encode() for i in out["ids/tag_ids"][0]] == list(out["ids/tags"][0])
    expected = tagging.stitch(features["word_ids"], features["is_max_context"], logits, len(words))
    assert list(out["long/num_words"]) == [len(words), 3]
    np.testing.assert_allclose(out["long/logits"][0, :len(words)], expected, atol=1e-4)
    top2 = np.sort(expected, -1)[:, -2:]
    clear = top2[:, 1] - top2[:, 0] > tie_safe.NEAR_TIE  # an argmax is compared only where it cannot tie
    assert clear.mean() > 0.95
    np.testing.assert_array_equal(out["long/tag_ids"][0, :len(words)][clear], expected.argmax(-1)[clear])


def test_pre_split_words_bounds_and_edge_cases(served):
    """`from_words` tags pre-split words as serving_default tags the same words (what follows num_words is
    ignored, outputs padded to the request's width); empty sentences have no words; a sentence needing more than
    max_windows windows, a num_words beyond the words axis and a word the builder would refuse (empty, a control
    character) are refused with a message naming the bound."""
    out, errors, some = served["out"], served["errors"], served["some"]
    counts = [len(w) for w in some]
    width = max(counts) + 1
    assert out["words/tags"].shape == (len(some), width)
    np.testing.assert_array_equal(out["words/num_words"], counts)
    np.testing.assert_allclose(_unpadded(out, "words", "logits", counts), _unpadded(out, "dev", "logits", counts),
                               atol=1e-5)
    assert list(_unpadded(out, "words", "tags", counts)) == list(_unpadded(out, "dev", "tags", counts))
    assert "words/word_begin" not in out
    assert list(out["edge/num_words"]) == [0, 0, 1] and out["edge/tags"].shape == (3, 1)
    assert list(out["edge/tags"][:, 0]) == [b"", b"", out["edge/tags"][2, 0]] and out["edge/tags"][2, 0] != b""
    assert out["empty/tags"].shape == (0, 0) and out["empty/num_words"].shape == (0,)
    assert set(errors) == {"too_long", "bad_num_words", "empty_word", "control_word"}, errors
    # what the builder refuses in a CoNLL column
    assert "from_words: a word is empty, has surrounding whitespace or holds a control character" in errors["empty_word"]
    assert "from_words: words holds a control character other than tab and line ends" in errors["control_word"]
    assert (f"serving_default: a sentence has more than {MAX_PIECES} pieces, more than max_windows={MAX_WINDOWS} "
            "windows") in errors["too_long"]
    assert "--export_max_windows" in errors["too_long"]
    assert "from_words: num_words must be in [0, W]" in errors["bad_num_words"]


def test_features_signature_of_a_tagger(served):
    """`features` gives one row of last-layer states per window (the long sentence takes several), `pooled` the
    `<cls>` state ending each window, and per word the state its tag is read from: the tagger's output layer on
    `word_states` gives serving_default's logits."""
    from xlnet_tf.text import tagging

    out, some = served["out"], served["some"]
    f = {k.split("/", 1)[1]: v for k, v in out.items() if k.startswith("features/")}
    counts = [len(w) for w in some] + [len(served["long_words"])]
    n_windows = np.bincount(f["example_index"], minlength=len(counts))
    assert (n_windows[:-1] >= 1).all() and n_windows[-1] >= 4
    t, length, d = f["token_states"].shape
    assert (t, d) == (n_windows.sum(), 32) and length <= LENGTH
    assert f["attention_mask"].shape == f["input_ids"].shape == f["word_ids"].shape == (t, length)
    np.testing.assert_array_equal(f["pooled"], f["token_states"][:, -1])
    assert (f["input_ids"][:, -1] == 3).all() and (f["attention_mask"][:, -1] == 1).all()  # <cls>
    np.testing.assert_array_equal(f["num_words"], counts)
    stitched = tagging.stitch_examples(f["example_index"], f["word_ids"], f["is_max_context"], f["token_states"],
                                       counts)
    for b, states in enumerate(stitched):
        np.testing.assert_array_equal(f["word_states"][b, :counts[b]], states)
    model, _ = _model(served["root"])
    logits = model.logit(f["word_states"][:len(some)]).numpy()
    for b, n in enumerate(counts[:-1]):
        np.testing.assert_allclose(logits[b, :n], out["dev/logits"][b, :n], atol=1e-4)
    np.testing.assert_allclose(model.logit(f["word_states"][-1:]).numpy()[0, :counts[-1]],
                               out["long/logits"][0, :counts[-1]], atol=1e-4)


def test_export_info_and_warmup_of_a_tagger(served):
    """xlnet_export.json carries the windows (doc_stride, max_windows) and the tag names; the warm-up request
    is a raw sentence for serving_default."""
    import tensorflow as tf
    from tensorflow_serving.apis import prediction_log_pb2

    path, root = served["path"], served["root"]
    info = json.load(open(root / "m" / "export_info.json"))
    exported = json.load(open(os.path.join(path, "assets.extra", "xlnet_export.json")))
    assert (exported["schema"], exported["version"]) == ("xlnet_tf.export", 1)
    assert exported["text"] == info["text"]  # the records' tokenization, one object from records to export
    assert exported["task"] == "tagging" and exported["doc_stride"] == STRIDE
    assert exported["max_windows"] == MAX_WINDOWS and exported["labels"] == info["labels"]
    records = list(tf.data.TFRecordDataset(os.path.join(path, "assets.extra", "tf_serving_warmup_requests"))
                   .as_numpy_iterator())
    log = prediction_log_pb2.PredictionLog.FromString(records[0])
    assert set(log.predict_log.request.inputs) == {"text"}
