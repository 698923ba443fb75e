"""Bad input to the Keras-level task API (`Task`, the task models, `XLNetPreprocessor`) never gives a silently
wrong result: it does the right thing or raises one `UserError` naming the argument.

Cases: `from_checkpoint` of a long-document run (reads whole texts, as its records), real-valued, out-of-range
and string labels, empty and single-string `predict` inputs, data without a batch, loading a `.keras`
classifier in a fresh process after `import xlnet_tf.models` alone."""

import json
import os
import subprocess
import sys

import keras
import numpy as np
import pytest
import tensorflow as tf

from tests import data_fixtures
from xlnet_tf import checkpoints
from xlnet_tf.config import XLNetConfig
from xlnet_tf.errors import UserError
from xlnet_tf.models import XLNetClassifier
from xlnet_tf.text.preprocessing import XLNetPreprocessor

REPO = data_fixtures.REPO_ROOT
TINY = XLNetConfig(n_token=data_fixtures.TINY_VOCAB, n_layer=2, d_model=16, n_head=2, d_head=8, d_inner=32,
                   dropout=0.0, dropatt=0.0)
TEXTS = ["Call me Ishmael.", "It is a truth universally acknowledged."]


def _long_text(min_tokens=80):
    """Consecutive lines of the test corpus, at least `min_tokens` tokens (several segments of 16)."""
    lines = [line for line in open(os.path.join(data_fixtures.CORPUS_DIR, "austen_moby_slice.txt"),
                                   encoding="utf-8").read().split("\n") if line.strip()]
    tokenizer = data_fixtures.tiny_tokenizer()
    text = ""
    for line in lines:
        text = f"{text} {line}".strip()
        if len(tokenizer.encode(text)) >= min_tokens:
            return text
    raise AssertionError("the corpus slice is too short")


@pytest.fixture(autouse=True)
def seeded():
    """Each test seeds first (a seed set after a preprocessor was built costs its packing a new trace:
    test_a_seed_set_after_the_model_was_built_leaves_its_preprocessor_working)."""
    keras.utils.set_random_seed(0)


def _classifier(text=False, **kwargs):
    """A compiled tiny classifier, with a preprocessor of 16 tokens when `text`."""
    if text:
        kwargs["preprocessor"] = XLNetPreprocessor(data_fixtures.tiny_spm(), sequence_length=16)
    model = XLNetClassifier(TINY.replace(n_layer=1), num_labels=3, **kwargs)  # one layer: the checks need no depth
    # label and data checks, not XLA (tests/models/test_keras_task.py fits with it): the graph path compiles faster
    model.compile(optimizer=keras.optimizers.Adam(1e-3), jit_compile=False)
    return model


def _text_classifier(**kwargs):
    return _classifier(text=True, **kwargs)


# ---- 1. from_checkpoint of a long-document run ----------------------------------------------------------------

def _long_document_run(model_dir, document_summary, summary_type, keep_accents=False):
    """A runner's model_dir of a `--max_segments=3 --mem_len=32` classifier, as the runners write it:
    xlnet_config.json, export_info.json and an object-based checkpoint `ckpt-5`. Returns the model saved."""
    from xlnet_tf.artifacts.export_info import ExportInfo

    # weights of a wider spread than a fresh 0.02 init, as trained ones: attention that reads its context
    # (at 0.02 the whole text moves the logits by ~1e-5, at 0.3 by ~0.5 of ~1.5)
    config = TINY.replace(initializer_range=0.3)
    keras.utils.set_random_seed(3)
    tuned = XLNetClassifier(config, num_labels=3, task_name="topic", summary_type=summary_type, mem_len=32,
                            document_summary=document_summary)
    os.makedirs(model_dir)
    manager = tf.train.CheckpointManager(tf.train.Checkpoint(model=checkpoints.trackable_weights(tuned)),
                                         model_dir, max_to_keep=1, checkpoint_name="ckpt")
    manager.save(checkpoint_number=5)
    config.to_json_file(os.path.join(model_dir, "xlnet_config.json"))
    info = ExportInfo.for_run(task="classifier", max_seq_length=16, uncased=False,
                              spiece_model_file=data_fixtures.tiny_spm(), num_labels=3, task_name="topic",
                              summary_type=summary_type, use_summ_proj=True, max_segments=3, mem_len=32,
                              document_summary=document_summary, keep_accents=keep_accents)
    with open(os.path.join(model_dir, "export_info.json"), "w", encoding="utf-8") as f:
        json.dump(info.to_dict(), f)
    return tuned


def _record_features(texts, max_segments, keep_accents=False):
    """The record builder's features for `texts` (tfrecords/classifier_data.py), `[N, S, 16]` or `[N, 16]`."""
    from tfrecords import classifier_data as cd
    from tfrecords.readers.processors import InputExample
    from xlnet_tf.text.tokenization import XLNetTokenizer

    examples = [InputExample(str(k), t, None, None) for k, t in enumerate(texts)]
    tokenizer = XLNetTokenizer(data_fixtures.tiny_spm(), keep_accents=keep_accents)
    feats = cd.convert_examples(tokenizer, examples, None, True, 16, max_segments)
    shape = [len(texts), max_segments, 16] if max_segments > 1 else [len(texts), 16]
    return {k: tf.constant(feats[k].reshape(shape)) for k in ("input_ids", "segment_ids", "attention_mask")}


# all_segments/mean in the default run: tests/serving/test_serving.py::test_features_of_a_long_document_model
@pytest.mark.parametrize("document_summary,summary_type", [
    ("last_segment", "last"), pytest.param("all_segments", "mean", marks=pytest.mark.slow)])
def test_from_checkpoint_of_a_long_document_run_predicts_on_whole_texts(tmp_path, document_summary, summary_type):
    """Keras predict on raw text equals the run's records (its documents of 3 segments of 16, read with
    memories) to 1e-5, and differs from the first segment alone (what a one-segment preprocessor fed it);
    a text that fits one segment gives the one-segment result (its leading segments are masked padding)."""
    model_dir = str(tmp_path / "long_run")
    tuned = _long_document_run(model_dir, document_summary, summary_type)
    loaded = XLNetClassifier.from_checkpoint(model_dir, require_heads=True)
    assert loaded.preprocessor.max_segments == 3 and loaded.preprocessor.sequence_length == 16
    assert (loaded.mem_len, loaded.document_summary, loaded.summary_type) == (32, document_summary, summary_type)

    long_text, short_text = _long_text(), TEXTS[0]
    got = loaded.predict([long_text, short_text], verbose=0)["logits"]
    records = tuned(_record_features([long_text, short_text], 3))["logits"].numpy()
    np.testing.assert_allclose(got, records, atol=1e-5)
    first_segment = tuned(_record_features([long_text, short_text], 1))["logits"].numpy()
    np.testing.assert_allclose(got[1], first_segment[1], atol=1e-5)
    gap = np.abs(got[0] - first_segment[0]).max()
    assert gap > 0.1, f"the long text reads as its first segment (max |logit difference| {gap})"

    path = str(tmp_path / "long.keras")  # the segments travel with a .keras file
    loaded.save(path)
    restored = keras.models.load_model(path)
    assert restored.preprocessor.max_segments == 3 and restored.mem_len == 32
    np.testing.assert_allclose(restored.predict([long_text], verbose=0)["logits"], got[:1], atol=1e-6)


def test_from_checkpoint_normalizes_as_the_runs_records(tmp_path):
    """export_info's keep_accents reaches the preprocessor: predict equals the run's accent-keeping records."""
    model_dir = str(tmp_path / "accents_run")
    tuned = _long_document_run(model_dir, "last_segment", "last", keep_accents=True)
    loaded = XLNetClassifier.from_checkpoint(model_dir, require_heads=True)
    assert loaded.preprocessor.keep_accents
    texts = ["Café naïve résumé à la crème brûlée, déjà vu.", TEXTS[1]]
    kept, stripped = _record_features(texts, 3, keep_accents=True), _record_features(texts, 3)
    assert not np.array_equal(kept["input_ids"].numpy()[0], stripped["input_ids"].numpy()[0])
    np.testing.assert_allclose(loaded.predict(texts, verbose=0)["logits"], tuned(kept)["logits"].numpy(), atol=1e-5)


def test_a_preprocessor_must_agree_with_the_memories():
    """Documents of several segments need mem_len; a model with mem_len needs documents (else every text is
    cut to its first segment, silently)."""
    spm = data_fixtures.tiny_spm()
    with pytest.raises(UserError, match=r"max_segments=3 .*build the model with mem_len"):
        XLNetClassifier(TINY, preprocessor=XLNetPreprocessor(spm, sequence_length=16, max_segments=3))
    with pytest.raises(UserError, match=r"mem_len=32 reads documents.*max_segments=S"):
        XLNetClassifier(TINY, mem_len=32, preprocessor=XLNetPreprocessor(spm, sequence_length=16))
    with pytest.raises(ValueError, match="max_segments must be an integer >= 1"):
        XLNetPreprocessor(spm, sequence_length=16, max_segments=0)
    features = XLNetPreprocessor(spm, sequence_length=16, max_segments=3)(tf.constant(TEXTS))
    assert features["input_ids"].shape == (2, 3, 16) and features["attention_mask"].shape == (2, 3, 16)


# ---- 2, 3. labels -----------------------------------------------------------------------------------------

def _weights_unchanged(model, before):
    return all(np.array_equal(a, b) for a, b in zip(model.get_weights(), before))


def test_fit_refuses_real_valued_and_out_of_range_labels_before_any_step():
    """Arrays are refused before fit/evaluate start; a dataset's labels as its batch is read (the weights
    stay as they were; Keras's step counter may already have moved, as for any batch that fails to load)."""
    model = _text_classifier()
    before = model.get_weights()
    with pytest.raises(UserError, match=r"labels must be class ids.*\[0\.7, 1\.9\].*regression=True"):
        model.fit(TEXTS, np.array([0.7, 1.9]), verbose=0)
    for labels in ([0, 3], [-1, 0]):
        with pytest.raises(UserError, match=r"class ids in \[0, 3\); got \[(3|-1)\]"):
            model.fit(TEXTS, np.array(labels), verbose=0)
    features = model.preprocessor(tf.constant(TEXTS))  # feature dicts, labels inside or as y
    with pytest.raises(UserError, match=r"real values such as \[0\.5\]"):
        model.fit({**features, "label": np.array([1.0, 0.5])}, verbose=0)
    with pytest.raises(UserError, match=r"class ids in \[0, 3\); got \[7\]"):
        model.evaluate(features, np.array([7, 0]), verbose=0)
    assert int(model.optimizer.iterations.numpy()) == 0

    dataset = lambda labels: tf.data.Dataset.from_tensor_slices((TEXTS, labels)).batch(2)  # noqa: E731
    with pytest.raises(UserError, match=r"labels must be class ids.*regression=True\); got labels: \[0\.7 1\.9\]"):
        model.fit(dataset([0.7, 1.9]), verbose=0)
    for labels in ([0, 3], [-1, 0]):
        with pytest.raises(UserError, match=r"class ids, integers in \[0, 3\).*got labels: \[(0 3|-1 0)\]"):
            model.evaluate(dataset(labels), verbose=0)
    assert _weights_unchanged(model, before)


def test_integer_valued_float_labels_train_as_their_ids():
    """1.0 is accepted as class 1 (labels often come as floats, e.g. from pandas): the same step as ints."""
    as_ints = _text_classifier()
    as_floats = _classifier(preprocessor=as_ints.preprocessor)
    as_floats.set_weights(as_ints.get_weights())
    loss_ints = as_ints.fit(TEXTS, np.array([2, 0]), shuffle=False, verbose=0).history["loss"]
    loss_floats = as_floats.fit(TEXTS, np.array([2.0, 0.0]), shuffle=False, verbose=0).history["loss"]
    np.testing.assert_allclose(loss_floats, loss_ints, atol=1e-6)
    for a, b in zip(as_floats.get_weights(), as_ints.get_weights()):
        np.testing.assert_allclose(a, b, atol=1e-6)
    # a regression model fits real-valued targets: tests/models/test_keras_task.py (every task model fits)


def test_string_labels_are_refused_with_the_label_list_hint():
    model = _text_classifier()
    with pytest.raises(UserError, match=r"labels are strings; labels must be class ids.*label list"):
        model.fit(TEXTS, np.array(["pos", "neg"]), verbose=0)
    with pytest.raises(UserError, match=r"labels are strings.*label list"):
        model.fit(TEXTS, ["pos", "neg"], verbose=0)
    with pytest.raises(UserError, match=r"labels are strings.*label list"):
        model.evaluate(tf.data.Dataset.from_tensor_slices((TEXTS, ["pos", "neg"])).batch(2), verbose=0)
    regression = _text_classifier(regression=True)
    with pytest.raises(UserError, match="regression targets must be numbers"):
        regression.fit(TEXTS, np.array(["0.7", "1.9"]), verbose=0)
    assert int(model.optimizer.iterations.numpy()) == 0


# ---- 4. empty and single-string predict -----------------------------------------------------------------------

def test_predict_on_no_texts_returns_empty_outputs():
    """As the exported serving_default with an empty batch: `logits [0, num_labels]`, `score [0]`."""
    model = _text_classifier()
    for empty in ([], np.array([], str), ([], [])):
        logits = model.predict(empty, verbose=0)["logits"]
        assert logits.shape == (0, 3) and logits.dtype == np.float32, (empty, logits.shape)
    features = model.preprocessor(tf.constant(TEXTS))  # no preprocessor: empty feature arrays
    bare = _classifier()
    assert bare.predict({k: v.numpy()[:0] for k, v in features.items()}, verbose=0)["logits"].shape == (0, 3)
    regression = _text_classifier(regression=True)
    assert regression.predict([], verbose=0)["score"].shape == (0,)
    assert model.predict(TEXTS, verbose=0)["logits"].shape == (2, 3)  # and a batch still predicts


def test_predict_on_one_string_asks_for_a_list():
    model = _text_classifier()
    for one in ("one string", b"one string", np.str_("one string"), tf.constant("one string"),
                ("text a", "text b")):
        with pytest.raises(UserError, match=r"x is one string; pass a list of strings"):
            model.predict(one, verbose=0)
    with pytest.raises(UserError, match=r"fit: x is one string"):
        model.fit("one string", np.array([1]), verbose=0)
    with pytest.raises(ValueError, match=r"text must be a batch of strings \[B\].*tuple \(texts_a, texts_b\)"):
        model.predict([["text a", "text b"]], verbose=0)  # a pair given as rows of a 2-D array


def test_a_seed_set_after_the_model_was_built_leaves_its_preprocessor_working():
    """keras.utils.set_random_seed clears TensorFlow's kernel cache, which held TF Text's SentencePiece model:
    every later predict or fit of a model built before the seed failed ("SentencepieceResource does not
    exist"). Texts in memory and a tf.data pipeline of texts, each after a new seed, pack as before."""
    model = _text_classifier()
    expected = model.predict(TEXTS, verbose=0)["logits"]
    keras.utils.set_random_seed(1)
    np.testing.assert_allclose(model.predict(TEXTS, verbose=0)["logits"], expected, atol=1e-6)
    keras.utils.set_random_seed(2)
    data = tf.data.Dataset.from_tensor_slices(TEXTS).batch(2)
    np.testing.assert_allclose(model.predict(data, verbose=0)["logits"], expected, atol=1e-6)
    keras.utils.set_random_seed(3)
    packed = model.preprocessor(tf.constant(TEXTS))
    np.testing.assert_array_equal(packed["input_ids"].numpy(), _record_features(TEXTS, 1)["input_ids"].numpy())


# ---- 5. data without a batch ----------------------------------------------------------------------------------

def test_evaluate_fit_and_predict_on_data_without_a_batch_stop_with_no_batches():
    model = _text_classifier()
    before = model.get_weights()
    data = tf.data.Dataset.from_tensor_slices((TEXTS, [0, 1]))
    empty = data.take(0).batch(2)  # known to be empty
    filtered = data.filter(lambda text, label: label > 5).batch(2)  # empty only once read
    for dataset in (empty, filtered):
        with pytest.raises(UserError, match=r"evaluate: the data holds no batches"):
            model.evaluate(dataset, verbose=0)
        with pytest.raises(UserError, match=r"fit: the data holds no batches"):
            model.fit(dataset, verbose=0)
        with pytest.raises(UserError, match=r"predict: the data holds no batches"):
            model.predict(dataset.map(lambda text, label: text), verbose=0)
    with pytest.raises(UserError, match=r"fit \(validation_data\): the data holds no batches"):
        model.fit(data.batch(2), validation_data=empty, verbose=0)
    with pytest.raises(UserError, match=r"evaluate: the data holds no batches"):
        model.evaluate([], np.zeros([0], np.int32), verbose=0)
    features = {k: v.numpy()[:0] for k, v in model.preprocessor(tf.constant(TEXTS)).items()}
    with pytest.raises(UserError, match=r"evaluate: the data holds no batches"):
        _classifier().evaluate(features, np.zeros([0], np.int32), verbose=0)
    assert _weights_unchanged(model, before)
    assert len(model.evaluate(data.batch(2), verbose=0)) == 2  # loss and accuracy on real data


# ---- 6. .keras in a fresh process -----------------------------------------------------------------------------

LOAD = r'''
import sys
import numpy as np
import keras
import xlnet_tf.models  # noqa: F401  (the only xlnet_tf import)
model = keras.models.load_model(sys.argv[1])
np.save(sys.argv[2], model.predict(["Call me Ishmael.", "It is a truth universally acknowledged."],
                                   verbose=0)["logits"])
'''


def test_a_keras_classifier_with_its_preprocessor_loads_after_importing_the_models_alone(tmp_path):
    model = _text_classifier()
    path = str(tmp_path / "clf.keras")
    model.save(path)
    (tmp_path / "load.py").write_text(LOAD)
    out = tmp_path / "logits.npy"
    proc = subprocess.run([sys.executable, str(tmp_path / "load.py"), path, str(out)], capture_output=True,
                          text=True, timeout=300, cwd=str(tmp_path),
                          env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", "PYTHONPATH": REPO})
    assert proc.returncode == 0, proc.stderr[-3000:]
    np.testing.assert_allclose(np.load(out), model.predict(TEXTS, verbose=0)["logits"], atol=1e-6)


def test_a_negative_bptt_segments_is_refused_by_the_model():
    """The runner's flag is bounded at parse time; the library refuses it too (every backbone gradient was None
    with a negative value: the backbone silently froze)."""
    from xlnet_tf.config import XLNetConfig
    from xlnet_tf.models import XLNetClassifier

    config = XLNetConfig(n_token=50, n_layer=1, d_model=16, n_head=2, d_head=8, d_inner=32)
    with pytest.raises(ValueError, match="bptt_segments must be an integer >= 0 .* got -1"):
        XLNetClassifier(config, mem_len=8, bptt_segments=-1)
