"""SavedModel export: fine-tuned classifier (pair task) and SQuAD 2.0 models, reloaded in a fresh process
that imports only tensorflow and tensorflow_text, give the training-side predictions on raw text."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

from tests import data_fixtures, tie_safe

REPO = data_fixtures.REPO_ROOT
DATA = os.path.join(REPO, "data", "finetune")
TINY = ["--n_layer=2", "--d_model=32", "--n_head=2", "--d_head=16", "--d_inner=64",
        f"--n_token={data_fixtures.TINY_VOCAB}", "--dropout=0.0", "--dropatt=0.0", "--warmup_steps=5",
        "--steps_per_loop=10", "--train_steps=20", "--save_steps=20", "--learning_rate=1e-3",
        f"--spiece_model_file={data_fixtures.tiny_spm()}"]

RELOAD = r'''
import json, sys
import numpy as np
import tensorflow as tf
import tensorflow_text  # noqa: F401  (registers the SentencePiece ops)
path, inputs_file, out_file = sys.argv[1:]
loaded = tf.saved_model.load(path)
requests = json.load(open(inputs_file))
out = {}
for name, kwargs in requests.items():
    signature, args = kwargs["signature"], kwargs["args"]
    dtypes = kwargs.get("dtypes", {})
    tensors = {k: tf.constant(v, dtype=dtypes.get(k) or ("string" if np.asarray(v).dtype.kind == "U" else None))
               for k, v in args.items()}
    result = loaded.signatures[signature](**tensors)
    for key, value in result.items():
        value = value.numpy()
        out[f"{name}/{key}"] = value.astype("S") if value.dtype == object else value
np.savez(out_file, **out)
'''


_run = data_fixtures.run_with_flags


def _reload_in_subprocess(path, requests, tmp_path):
    (tmp_path / "reload.py").write_text(RELOAD)
    (tmp_path / "requests.json").write_text(json.dumps(requests))
    out = tmp_path / "out.npz"
    proc = subprocess.run([sys.executable, str(tmp_path / "reload.py"), path, str(tmp_path / "requests.json"),
                           str(out)], capture_output=True, text=True, timeout=300,
                          env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", "PYTHONPATH": ""}, cwd=str(tmp_path))
    assert proc.returncode == 0, proc.stderr[-3000:]
    return dict(np.load(out, allow_pickle=False))


@pytest.fixture(scope="module")
def classifier_export(tmp_path_factory):
    """A text-pair classifier trained on records built lowercased with accents kept (both facts reach the
    export through export_info.json: serving must tokenize as the builder did), exported as version 3."""
    from run import export_savedmodel, run_classifier
    from tfrecords import classifier_data
    from tfrecords.readers import processors

    root = tmp_path_factory.mktemp("clf")
    classifier_data.build_classifier_records(processors.get_processor("tsv"), f"{DATA}/paraphrase",
                                             data_fixtures.tiny_spm(), str(root / "records"), max_seq_length=64,
                                             uncased=True, keep_accents=True, eval_batch_size=16)
    _run(run_classifier, TINY + [f"--record_dir={root}/records", f"--model_dir={root}/m", "--do_train",
                                 "--max_seq_length=64", "--train_batch_size=16", "--uncased"])
    path = export_savedmodel.export_from_model_dir(str(root / "m"), str(root / "export"), version=3)
    return root, path


def test_a_bfloat16_export_predicts_as_float32_except_near_ties(classifier_export, tmp_path):
    """--export_dtype=bfloat16 (Keras mixed_bfloat16: float32 weights, bfloat16 matmuls): the same signatures, logits
    within bfloat16's rounding of the float32 export's, the same label wherever float32's two logits are further
    apart than twice the largest difference, and the export's settings record its dtype policy."""
    from bench.speed import bf16_export_compare
    from run import export_savedmodel

    root, path = classifier_export
    bf16_path = export_savedmodel.export_from_model_dir(str(root / "m"), str(tmp_path / "export"), dtype="bfloat16")
    recorded = json.load(open(os.path.join(bf16_path, "assets.extra", "xlnet_export.json")))
    assert recorded["dtype_policy"] == "mixed_bfloat16"
    assert json.load(open(os.path.join(path, "assets.extra", "xlnet_export.json")))["dtype_policy"] == "float32"
    rows = _dev_rows()
    request = {"signature": "serving_default", "args": {"text": [r[1] for r in rows], "text_b": [r[2] for r in rows]}}
    for side in ("f32", "b16"):
        (tmp_path / side).mkdir()
    f32 = _reload_in_subprocess(path, {"dev": request}, tmp_path / "f32")
    b16 = _reload_in_subprocess(bf16_path, {"dev": request}, tmp_path / "b16")
    # the rule of bench/speed/bf16_export_compare.py: labels may differ only where float32's top two logits are
    # within twice the largest logit difference (a near-tie, which the rounding may order either way)
    labels = lambda out: [x.decode() for x in out["dev/label"]]  # noqa: E731
    result = bf16_export_compare.compare(f32["dev/logits"], b16["dev/logits"], labels(f32), labels(b16),
                                         [r[0] for r in rows])
    assert 0 < result["max_logit_difference"] < 0.05, result  # computed in bfloat16 (8 significant bits)
    assert result["differ_elsewhere"] == 0, result
    assert result["rows_beyond_near_tie"] >= len(rows) // 2, result  # the rule decides most rows


ACCENTED = [("Café crème à Zürich", "Le garçon naïf"), ("Über Mädchen ÉTÉ", "ça résumé"),
            ("Ångström São Paulo", "Œuvre Ñandú")]


def _dev_rows():
    """The paraphrase slice's dev rows: [label, text_a, text_b]."""
    return [line.split("\t") for line in open(f"{DATA}/paraphrase/dev.tsv", encoding="utf-8").read().splitlines()[1:]]


def _pairs(n=12):
    rows = _dev_rows()
    texts = [r[1] for r in rows[:n]] + ["", "Café naïve ``quoted'' text, 1,000,000 words " * 20]
    texts_b = [r[2] for r in rows[:n]] + ["Only B.", ""]
    return texts + [a for a, _ in ACCENTED], texts_b + [b for _, b in ACCENTED]


def _served_tokenizer():
    """The Python tokenizer of the classifier_export's records (lowercased, accents kept)."""
    from xlnet_tf.text import tokenization

    return tokenization.XLNetTokenizer(data_fixtures.tiny_spm(), uncased=True, keep_accents=True)


def test_classifier_export_matches_in_process_model(classifier_export, tmp_path):
    from tfrecords import classifier_data
    from xlnet_tf import checkpoints
    from xlnet_tf.training import finetuning
    from xlnet_tf.text import tokenization
    from xlnet_tf.config import XLNetConfig
    from xlnet_tf.models import XLNetClassifier

    root, path = classifier_export
    assert path.endswith(os.path.join("export", "3"))
    info = json.load(open(root / "m" / "export_info.json"))
    assert info["text_pair"] and info["labels"] == ["0", "1"]
    # no train/serve skew: the records' normalization is the export's (and it shapes these features)
    assert (info["text"]["keep_accents"], info["text"]["uncased"]) == (True, True)
    tokenizer = _served_tokenizer()
    assert tokenizer.encode(ACCENTED[0][0]) != tokenization.XLNetTokenizer(data_fixtures.tiny_spm(),
                                                                          uncased=True).encode(ACCENTED[0][0])
    texts, texts_b = _pairs()
    # training-side predictions: the Python tokenizer and the record builder's packing
    packed = [classifier_data.pack_example(tokenizer, a, b, 64) for a, b in zip(texts, texts_b)]
    features = {k: np.stack([p[k] for p in packed]) for k in packed[0]}
    rows = _dev_rows()
    dev = next(iter(classifier_data.classifier_dataset(str(root / "records"), 16, False, split="dev",
                                                       max_seq_length=64)))
    real = dev["is_real_example"].numpy() > 0
    assert real.sum() > 8
    for ids, k in zip(dev["input_ids"].numpy()[real], dev["example_index"].numpy()[real]):
        # the records hold the same packing of the same normalization
        np.testing.assert_array_equal(ids, classifier_data.pack_example(tokenizer, rows[k][1], rows[k][2],
                                                                        64)["input_ids"])
    model = XLNetClassifier(XLNetConfig.from_json_file(str(root / "m" / "xlnet_config.json")), num_labels=2,
                            task_name="tsv")
    checkpoints.load_init_checkpoint(model, finetuning.list_checkpoints(str(root / "m"))[-1], require_heads=True)
    expected = model(features)["logits"].numpy()

    out = _reload_in_subprocess(path, {
        "text": {"signature": "serving_default", "args": {"text": texts, "text_b": texts_b}},
        "ids": {"signature": "from_ids", "args": {k: features[k].tolist() for k in features},
                "dtypes": {"input_ids": "int32", "segment_ids": "int32", "attention_mask": "float32"}},
        "empty": {"signature": "serving_default", "args": {"text": [], "text_b": []},
                  "dtypes": {"text": "string", "text_b": "string"}},
        "features": {"signature": "features", "args": {"text": texts, "text_b": texts_b}},
    }, tmp_path)
    np.testing.assert_allclose(out["text/logits"], expected, atol=1e-5)
    # `features`: pooled is what the classifier's output layer reads, token_states the packed input's rows
    pooled = out["features/pooled"]
    assert pooled.shape == (len(texts), 32)
    np.testing.assert_allclose(model.logit(pooled).numpy(), out["text/logits"], atol=1e-5)
    in_process = model.pooled(tf.constant(features["input_ids"], tf.int32),
                              tf.constant(features["segment_ids"], tf.int32),
                              tf.constant(features["attention_mask"], tf.float32), False)
    np.testing.assert_allclose(pooled, in_process.numpy(), atol=1e-5)
    length = int(features["attention_mask"].sum(1).max())  # the longest packed input; left padding dropped
    assert out["features/token_states"].shape == (len(texts), length, 32)
    np.testing.assert_array_equal(out["features/input_ids"], features["input_ids"][:, -length:])
    np.testing.assert_array_equal(out["features/attention_mask"], features["attention_mask"][:, -length:])
    np.testing.assert_allclose(out["ids/logits"], expected, atol=1e-5)
    np.testing.assert_allclose(out["text/probabilities"].sum(-1), 1.0, atol=1e-5)
    tie_safe.assert_no_near_ties(expected)  # the label is the argmax: compared only where it cannot tie
    assert list(out["text/label"]) == [info["labels"][i].encode() for i in expected.argmax(-1)]
    assert out["empty/logits"].shape == (0, 2)


def test_in_graph_packing_equals_the_builder():
    from tfrecords import classifier_data
    from xlnet_tf.text import tokenization
    from xlnet_tf.serving.sequence import ClassifierServing

    tokenizer = tokenization.XLNetTokenizer(data_fixtures.tiny_spm())
    module = ClassifierServing.__new__(ClassifierServing)  # only the encoder and packing are used here
    from xlnet_tf.text.preprocessing import XLNetTextEncoder

    module.encoder = XLNetTextEncoder(open(data_fixtures.tiny_spm(), "rb").read())
    module.max_seq_length, module.max_segments = 64, 1
    texts, texts_b = _pairs()
    ids, segs, mask = module.pack_texts(tf.constant(texts), tf.constant(texts_b))
    for k, (a, b) in enumerate(zip(texts, texts_b)):
        want = classifier_data.pack_example(tokenizer, a, b, 64)
        np.testing.assert_array_equal(ids.numpy()[k], want["input_ids"])
        np.testing.assert_array_equal(segs.numpy()[k], want["segment_ids"])
        np.testing.assert_array_equal(mask.numpy()[k], want["attention_mask"])


def test_saved_model_cli_warmup_and_bad_requests(classifier_export, tmp_path):
    from tensorflow_serving.apis import prediction_log_pb2

    from tensorflow.core.protobuf import saved_model_pb2

    _, path = classifier_export
    # the signatures as `saved_model_cli show --all` prints them (read from saved_model.pb: no second process)
    with open(os.path.join(path, "saved_model.pb"), "rb") as f:
        signatures = saved_model_pb2.SavedModel.FromString(f.read()).meta_graphs[0].signature_def
    serving_default, from_ids = signatures["serving_default"], signatures["from_ids"]
    assert {"text", "text_b"} <= set(serving_default.inputs)
    assert serving_default.inputs["text"].dtype == tf.string.as_datatype_enum
    assert {"probabilities", "label_id"} <= set(serving_default.outputs)
    assert serving_default.outputs["label_id"].dtype == tf.int32.as_datatype_enum
    assert [d.size for d in from_ids.inputs["input_ids"].tensor_shape.dim] == [-1, -1]
    assert from_ids.inputs["input_ids"].dtype == tf.int32.as_datatype_enum
    assert {"token_states", "pooled"} <= set(signatures["features"].outputs)
    warmup = os.path.join(path, "assets.extra", "tf_serving_warmup_requests")
    records = list(tf.data.TFRecordDataset(warmup).as_numpy_iterator())
    assert records
    log = prediction_log_pb2.PredictionLog.FromString(records[0])
    assert set(log.predict_log.request.inputs) == {"text", "text_b"}
    loaded = tf.saved_model.load(path)
    with pytest.raises((TypeError, ValueError, tf.errors.InvalidArgumentError)):
        loaded.signatures["serving_default"](text=tf.constant([1, 2]), text_b=tf.constant([3, 4]))
    from run import export_savedmodel
    from xlnet_tf.errors import UserError

    with pytest.raises(UserError, match=f"{path} exists: choose another --version"):  # checked before building
        export_savedmodel.export_from_model_dir(os.path.dirname(os.path.dirname(path)) + "/m",
                                                os.path.dirname(path), version=3)


def test_squad_export_answers_like_the_python_post_processing(tmp_path):
    from run import export_savedmodel, run_squad
    from xlnet_tf.metrics import squad_postprocess

    root = tmp_path
    for split, per_article in (("train", 100), ("dev", 25)):  # 20 steps of 16 read 320 questions
        data = json.load(open(f"{DATA}/squad_wordnet/{split}-v2.0.json", encoding="utf-8"))
        data["data"] = [{**a, "paragraphs": a["paragraphs"][:per_article]} for a in data["data"]]
        json.dump(data, open(root / f"{split}-v2.0.json", "w", encoding="utf-8"))
    _run(run_squad, TINY + [f"--train_file={root}/train-v2.0.json",
                            f"--predict_file={root}/dev-v2.0.json", f"--record_dir={root}/records",
                            f"--model_dir={root}/m", "--do_train", "--do_predict", "--max_seq_length=192",
                            "--doc_stride=128", "--max_query_length=48", "--train_batch_size=16"])
    path = export_savedmodel.export_from_model_dir(str(root / "m"), str(root / "export"), version=1)
    predictions = json.load(open(root / "m" / "predictions.json"))
    eval_data = squad_postprocess.load_eval_data(str(root / "records"), "dev")
    windows = np.bincount(eval_data.features["example_index"], minlength=len(eval_data.examples))
    dataset = json.load(open(root / "dev-v2.0.json"))
    qas = [(q["id"], q["question"], p["context"]) for a in dataset["data"] for p in a["paragraphs"] for q in p["qas"]]
    single = {ex["id"] for k, ex in enumerate(eval_data.examples) if windows[k] == 1}
    qas = [x for x in qas if x[0] in single][:60]
    assert len(qas) >= 40
    args = {"question": [q for _, q, _ in qas], "context": [c for _, _, c in qas]}
    out = _reload_in_subprocess(path, {"q": {"signature": "serving_default", "args": args},
                                       "f": {"signature": "features", "args": args}}, tmp_path)
    answers = [a.decode("utf-8") for a in out["q/answer"]]
    same = sum(answers[k] == predictions[qid] for k, (qid, _, _) in enumerate(qas))
    assert same == len(qas), [(predictions[qid], answers[k]) for k, (qid, _, _) in enumerate(qas)
                              if answers[k] != predictions[qid]][:5]
    for key in ("start_top_index", "end_top_index", "cls_logits", "answer_start", "score"):
        assert f"q/{key}" in out
    # `features`: the first window `P <sep> Q <sep> <cls>` right-padded, pooled = the state at <cls>
    states, ids, mask = out["f/token_states"], out["f/input_ids"], out["f/attention_mask"]
    assert states.shape[0] == len(qas) and states.shape[1] <= 192 and states.shape[2] == 32
    assert ids.shape == mask.shape == states.shape[:2] and mask[:, 0].all()
    cls = (ids == 3).argmax(1)
    np.testing.assert_array_equal(cls, mask.sum(1) - 1)  # <cls> ends every row
    np.testing.assert_array_equal(out["f/pooled"], states[np.arange(len(qas)), cls])


@pytest.mark.slow  # the default run serves a lowercased, accents-kept pair model: classifier_export
def test_served_features_are_the_records_features_for_every_normalization(tmp_path):
    """No train/serve skew: records built with accents kept, lowercased, and of text pairs train a model whose
    export tokenizes and packs a text as the builder did (export_info.json carries keep_accents, uncased,
    text_pair): the served logits equal the trained model's on the records' features."""
    from run import export_savedmodel, run_classifier
    from tfrecords import classifier_data
    from tfrecords.readers import processors
    from xlnet_tf import checkpoints
    from xlnet_tf.training import finetuning
    from xlnet_tf.text import tokenization
    from xlnet_tf.config import XLNetConfig
    from xlnet_tf.models import XLNetClassifier

    rows = [("yes", "Café crème à Zürich", "Le garçon naïf"), ("no", "Über Mädchen ÉTÉ", "ça résumé"),
            ("yes", "Ångström São Paulo", "Œuvre Ñandú"), ("no", "plain ascii text", "more plain words")] * 4
    data = tmp_path / "task"
    data.mkdir()
    for split in ("train", "dev"):
        (data / f"{split}.tsv").write_text("label\ttext_a\ttext_b\n" + "".join(f"{a}\t{b}\t{c}\n" for a, b, c in rows),
                                           encoding="utf-8")
    spm = data_fixtures.tiny_spm()
    kept = tokenization.XLNetTokenizer(spm, uncased=True, keep_accents=True)
    stripped = tokenization.XLNetTokenizer(spm, uncased=True)
    assert kept.encode(rows[0][1]) != stripped.encode(rows[0][1])  # the fact shapes the features
    classifier_data.build_classifier_records(processors.get_processor("tsv", text_column="text_a", text_b_column="text_b"),
                                             str(data), spm, str(tmp_path / "records"), max_seq_length=32,
                                             uncased=True, keep_accents=True, eval_batch_size=16)
    _run(run_classifier, TINY + [f"--record_dir={tmp_path}/records", f"--model_dir={tmp_path}/m", "--do_train",
                                 "--max_seq_length=32", "--train_batch_size=8", "--train_steps=2", "--save_steps=2",
                                 "--steps_per_loop=1", "--warmup_steps=0", "--uncased"])
    info = json.load(open(tmp_path / "m" / "export_info.json"))
    assert (info["text"]["keep_accents"], info["text"]["uncased"], info["text_pair"]) == (True, True, True)
    path = export_savedmodel.export_from_model_dir(str(tmp_path / "m"), str(tmp_path / "export"))
    dev = next(iter(classifier_data.classifier_dataset(str(tmp_path / "records"), 16, False, split="dev",
                                                       max_seq_length=32)))
    model = XLNetClassifier(XLNetConfig.from_json_file(str(tmp_path / "m" / "xlnet_config.json")), num_labels=2,
                            task_name="tsv")
    checkpoints.load_init_checkpoint(model, finetuning.list_checkpoints(str(tmp_path / "m"))[-1], require_heads=True)
    expected = model({k: dev[k] for k in ("input_ids", "segment_ids", "attention_mask")})["logits"].numpy()
    order = dev["example_index"].numpy()
    served = _reload_in_subprocess(path, {"text": {"signature": "serving_default", "args": {
        "text": [rows[i][1] for i in order], "text_b": [rows[i][2] for i in order]}}}, tmp_path)
    np.testing.assert_allclose(served["text/logits"], expected, atol=1e-5)


def test_race_export_serves_raw_text_as_the_builder_packs_it(tmp_path):
    """The multiple-choice export (raw article, question, options) reloads in a fresh process and scores each
    question's choices as the trained model scores the RACE builder's packing of the same text; a request with
    fewer options than the model's 4 gets one score per option it sent. (The raw-text signature could not be
    traced before: a ragged index in the choice text, then an unknown sequence length in the model.)"""
    from tfrecords import race_data
    from xlnet_tf import serving
    from xlnet_tf.text import tokenization
    from xlnet_tf.config import XLNetConfig
    from xlnet_tf.models import XLNetMultipleChoice

    model = XLNetMultipleChoice(XLNetConfig(n_layer=1, d_model=32, n_head=2, d_head=16, d_inner=64,
                                            n_token=data_fixtures.TINY_VOCAB, initializer_range=0.3))
    path = serving.export(model, "race", data_fixtures.tiny_spm(), str(tmp_path / "export"), 1, 48,
                          max_qa_length=16)
    articles = ["The whale swam in the cold sea for many days.", "A king ruled the northern lands long ago."]
    questions = ["Where did the _ swim?", "Who ruled the lands?"]
    options = [["whale", "bird", "king", "sea"], ["a king", "a whale", "nobody", "the sea"]]
    tokenizer = tokenization.XLNetTokenizer(data_fixtures.tiny_spm())
    packed = [race_data.pack_race_example(tokenizer, a, [race_data.make_qa(q, o) for o in opts], 48, 16)
              for a, q, opts in zip(articles, questions, options)]
    features = {k: np.stack([p[k] for p in packed]) for k in packed[0]}
    expected = model(features)["logits"].numpy()
    out = _reload_in_subprocess(path, {
        "four": {"signature": "serving_default",
                 "args": {"article": articles, "question": questions, "options": options}},
        "two": {"signature": "serving_default",
                "args": {"article": articles, "question": questions, "options": [o[:2] for o in options]}},
        "features": {"signature": "features",
                     "args": {"article": articles, "question": questions, "options": options}},
    }, tmp_path)
    np.testing.assert_allclose(out["four/logits"], expected, atol=1e-5)
    np.testing.assert_allclose(out["two/logits"], expected[:, :2], atol=1e-5)
    # `features`: one packed sequence per option; the scorer on `pooled` gives the logits
    length = int(features["attention_mask"].sum(-1).max())
    assert out["features/token_states"].shape == (2, 4, length, 32)
    np.testing.assert_array_equal(out["features/input_ids"], features["input_ids"][..., -length:])
    np.testing.assert_allclose(model.scorer(out["features/pooled"]).numpy()[..., 0], expected, atol=1e-5)


# last_segment/last in the default run: tests/run/test_bad_inputs_keras.py (from_checkpoint of a long-document run)
@pytest.mark.parametrize("document_summary,summary_type", [
    pytest.param("last_segment", "last", marks=pytest.mark.slow), ("all_segments", "mean")])
def test_features_of_a_long_document_model(document_summary, summary_type):
    """A long-document classifier's `features`: every segment's states, each read with the memories of the
    earlier ones (`[B, S*L, D]`), and the summary its head reads (the output layer on `pooled` gives
    serving_default's logits). Traced in process (the export path is the classifier's)."""
    import tensorflow as tf

    from xlnet_tf.config import XLNetConfig
    from xlnet_tf.models import XLNetClassifier
    from xlnet_tf.artifacts.export_info import ExportInfo
    from xlnet_tf.serving.sequence import ClassifierServing

    model = XLNetClassifier(XLNetConfig(n_layer=2, d_model=32, n_head=2, d_head=16, d_inner=64,
                                        n_token=data_fixtures.TINY_VOCAB, initializer_range=0.3),
                            num_labels=3, mem_len=16, summary_type=summary_type, document_summary=document_summary)
    module = ClassifierServing(model, ExportInfo("classifier", 16, max_segments=3),
                               open(data_fixtures.tiny_spm(), "rb").read())
    module.signatures()
    texts = tf.constant(["A short one.", _pairs()[0][0] * 2, _pairs()[0][-1]])
    out = module.serve_features(texts)
    logits = module.serve_text(texts)["logits"].numpy()
    assert out["token_states"].shape == (3, 48, 32) and out["attention_mask"].shape == (3, 48)
    np.testing.assert_allclose(model.logit(out["pooled"]).numpy(), logits, atol=1e-5)
    ids, segs, mask = module.pack_texts(texts)
    np.testing.assert_array_equal(out["input_ids"].numpy(), tf.reshape(ids, [3, 48]).numpy())
    np.testing.assert_allclose(out["pooled"].numpy(), model.pooled(ids, segs, mask, False).numpy(), atol=1e-5)
    # the last segment's rows are what a one-segment reading with the memories gives: same summary
    last = model.sequence_summary(out["token_states"][:, -16:], out["attention_mask"][:, -16:]).numpy()
    if document_summary == "last_segment":
        np.testing.assert_allclose(last, out["pooled"].numpy(), atol=1e-5)
    assert model.document_summary == document_summary and model.summary_rows_only  # restored after the trace


def test_features_of_an_embedding_export_are_its_outputs():
    """An embedding export's `features` gives serving_default's `pooled` and `sequence` (as token_states)."""
    import tensorflow as tf

    from xlnet_tf.config import XLNetConfig
    from xlnet_tf.models import XLNetClassifier
    from xlnet_tf.artifacts.export_info import ExportInfo
    from xlnet_tf.serving.sequence import EmbeddingServing

    model = XLNetClassifier(XLNetConfig(n_layer=1, d_model=32, n_head=2, d_head=16, d_inner=64,
                                        n_token=data_fixtures.TINY_VOCAB, initializer_range=0.3), summary_type="mean")
    module = EmbeddingServing(model, ExportInfo("embedding", 32), open(data_fixtures.tiny_spm(), "rb").read())
    module.signatures()
    texts = tf.constant(_pairs(4)[0])
    out, served = module.serve_features(texts), module.serve_text(texts)
    np.testing.assert_allclose(out["pooled"].numpy(), served["pooled"].numpy(), atol=1e-5)
    np.testing.assert_allclose(out["token_states"].numpy(), served["sequence"].numpy(), atol=1e-5)
    assert out["attention_mask"].shape == out["input_ids"].shape == served["sequence"].shape[:2]


def test_export_traces_each_signature_once(tmp_path, monkeypatch):
    """`tf.saved_model.save` traces the signatures itself: a concrete function traced before the save is traced
    again inside it (the save context is part of the tracing cache key), which doubled every export's time."""
    from xlnet_tf import serving
    from xlnet_tf.config import XLNetConfig
    from xlnet_tf.models import XLNetClassifier
    from xlnet_tf.serving.base import ServingModule

    modules = []
    signatures = ServingModule.signatures
    monkeypatch.setattr(ServingModule, "signatures", lambda self: modules.append(self) or signatures(self))
    model = XLNetClassifier(XLNetConfig(n_layer=1, d_model=16, n_head=2, d_head=8, d_inner=32,
                                        n_token=data_fixtures.TINY_VOCAB), num_labels=2)
    serving.export(model, "classifier", data_fixtures.tiny_spm(), str(tmp_path), 1, 16)
    (module,) = modules
    counts = {name: getattr(module, name).experimental_get_tracing_count()
              for name in ("serve_text", "serve_ids", "serve_features")}
    assert counts == {"serve_text": 1, "serve_ids": 1, "serve_features": 1}
