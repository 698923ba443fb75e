"""Keras-native use of the task models: compile/fit/evaluate/predict (raw text through XLNetPreprocessor),
fit == training.Trainer step for step, distribution strategies, .keras round trips, from_checkpoint, and the
README example run as written at tiny size."""

import json
import os
import re
import subprocess
import sys

import keras
import numpy as np
import pytest
import tensorflow as tf

from tests import data_fixtures, tie_safe
from xlnet_tf import checkpoints
from xlnet_tf.training import finetuning, optimization, loop as training
from xlnet_tf.config import XLNetConfig
from xlnet_tf.errors import UserError
from xlnet_tf.artifacts.export_info import ExportInfo
from xlnet_tf.models import XLNetClassifier, XLNetForSquad, XLNetMultipleChoice, XLNetPretrainer
from xlnet_tf.text.preprocessing import XLNetPreprocessor

REPO = data_fixtures.REPO_ROOT
TOPIC = os.path.join(REPO, "data", "finetune", "topic")
TINY = XLNetConfig(n_token=data_fixtures.TINY_VOCAB, n_layer=2, d_model=32, n_head=2, d_head=16, d_inner=64,
                   dropout=0.0, dropatt=0.0)


def _read_topic(split, labels):
    rows = [line.split("\t") for line in open(os.path.join(TOPIC, f"{split}.tsv"), encoding="utf-8")
            .read().splitlines()[1:]]
    return [r[1] for r in rows], np.array([labels.index(r[0]) for r in rows], np.int32)


@pytest.mark.slow  # raw-text fit learning; CI keeps the runner learning tests and the Keras tagging fit
def test_fit_on_raw_topic_text_beats_the_majority_baseline():
    """model.fit on tf.data of (text, label) with the shipped topic slice (11 labels), from scratch."""
    labels = [line for line in open(os.path.join(TOPIC, "labels.txt"), encoding="utf-8").read().split("\n") if line]
    train_x, train_y = _read_topic("train", labels)
    dev_x, dev_y = _read_topic("dev", labels)
    keras.utils.set_random_seed(0)
    model = XLNetClassifier(TINY.replace(d_model=64, d_head=32, d_inner=128), num_labels=len(labels),
                            preprocessor=XLNetPreprocessor(data_fixtures.tiny_spm(), sequence_length=96))
    train = tf.data.Dataset.from_tensor_slices((train_x, train_y)).shuffle(len(train_x), seed=0).batch(
        32, drop_remainder=True)
    steps = 3 * (len(train_x) // 32)
    model.compile(optimizer=optimization.create_optimizer(model, learning_rate=1e-3, train_steps=steps,
                                                          warmup_steps=30))
    history = model.fit(train, epochs=3, verbose=0).history
    assert history["loss"][-1] < history["loss"][0]
    result = model.evaluate(tf.data.Dataset.from_tensor_slices((dev_x, dev_y)).batch(64), return_dict=True,
                            verbose=0)
    majority = np.bincount(dev_y).max() / len(dev_y)  # 68 / 300 ("People")
    assert result["accuracy"] > majority + 0.1, (result, majority)
    predicted = model.predict(dev_x[:64], verbose=0)["logits"].argmax(-1)
    assert np.mean(predicted == dev_y[:64]) > majority  # predict on a list of strings


def _classifier_features(rng, n=24, length=12, vocab=50):
    return {"input_ids": rng.randint(0, vocab, (n, length)).astype(np.int32),
            "segment_ids": np.where(np.arange(length) < length // 2, 0, 1)[None].repeat(n, 0).astype(np.int32),
            "attention_mask": np.ones((n, length), np.float32), "label": rng.randint(0, 3, n).astype(np.int32),
            "is_real_example": (np.arange(n) % 5 != 4).astype(np.float32)}  # padded examples weigh 0


def test_fit_takes_the_trainers_steps(tmp_path, rng):
    """Same weights, AdamW (warm-up, decay, weight decay, clipping), batches and order: Keras fit's per-step
    losses and final weights equal training.Trainer's."""
    config = XLNetConfig(n_token=50, n_layer=2, d_model=16, n_head=2, d_head=8, d_inner=32, dropout=0.0,
                         dropatt=0.0)
    features = _classifier_features(rng)
    steps = 6
    dataset = tf.data.Dataset.from_tensor_slices(features).batch(4, drop_remainder=True)  # 6 batches
    keras.utils.set_random_seed(3)
    reference = XLNetClassifier(config, num_labels=3)
    model = XLNetClassifier(config, num_labels=3)
    model.set_weights(reference.get_weights())
    make_optimizer = lambda m: optimization.create_optimizer(  # noqa: E731
        m, learning_rate=3e-3, train_steps=steps, warmup_steps=2, weight_decay=0.01, clip=0.5)

    loop = training.TrainLoopConfig(model_dir=str(tmp_path / "trainer"), train_steps=steps, steps_per_loop=1,
                                    save_steps=steps, global_batch_size=4)
    trainer = training.Trainer(tf.distribute.get_strategy(), reference, make_optimizer(reference),
                               finetuning.task_loss_fn, lambda ctx, skip: dataset.repeat(), loop,
                               log=lambda line: None)
    trainer_losses = [record["loss"] for record in trainer.train()]

    model.compile(optimizer=make_optimizer(model))
    made_while_tracing = []  # a variable made inside the traced step makes TensorFlow trace it twice

    def creator(next_creator, **kwargs):
        made_while_tracing.append(tf.inside_function() and kwargs.get("name"))
        return next_creator(**kwargs)

    # One step per epoch: Keras's logged loss is then that step's loss (the iterator carries on).
    with tf.variable_creator_scope(creator):
        fit_losses = model.fit(dataset, epochs=steps, steps_per_epoch=1, verbose=0).history["loss"]
    assert not any(made_while_tracing), [name for name in made_while_tracing if name]
    assert len(fit_losses) == len(trainer_losses) == steps
    np.testing.assert_allclose(fit_losses, trainer_losses, atol=1e-5)
    assert fit_losses[-1] < fit_losses[0]
    for a, b in zip(model.get_weights(), reference.get_weights()):
        np.testing.assert_allclose(a, b, atol=1e-5)


DISTRIBUTED = r'''
import json, sys
import numpy as np, tensorflow as tf
cpu = tf.config.list_physical_devices("CPU")[0]
tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
import keras
from xlnet_tf.training import optimization
from xlnet_tf.config import XLNetConfig
from xlnet_tf.models import XLNetClassifier
config = XLNetConfig(n_token=50, n_layer=2, d_model=16, n_head=2, d_head=8, d_inner=32, dropout=0.0, dropatt=0.0)
rng = np.random.RandomState(0)
features = {"input_ids": rng.randint(0, 50, (16, 10)).astype(np.int32), "segment_ids": np.zeros((16, 10), np.int32),
            "attention_mask": np.ones((16, 10), np.float32), "label": rng.randint(0, 3, 16).astype(np.int32),
            "is_real_example": np.array([1.0] * 13 + [0.0] * 3, np.float32)}  # replicas hold unequal weights
dataset = tf.data.Dataset.from_tensor_slices(features).batch(8)
keras.utils.set_random_seed(1)
initial = XLNetClassifier(config, num_labels=3).get_weights()
out = {}
for name, strategy in (("one", tf.distribute.get_strategy()),
                       ("mirrored", tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"]))):
    with strategy.scope():
        model = XLNetClassifier(config, num_labels=3)
        model.set_weights(initial)
        model.compile(optimizer=optimization.create_optimizer(model, learning_rate=1e-2, train_steps=4, clip=0.01))
    history = model.fit(dataset, epochs=2, verbose=0).history
    out[name] = {"replicas": strategy.num_replicas_in_sync, "loss": history["loss"],
                 "accuracy": history["accuracy"], "eval": model.evaluate(dataset, verbose=0, return_dict=True),
                 "weights": [w.tolist() for w in model.get_weights()]}
json.dump(out, open(sys.argv[1], "w"))
'''


def test_fit_under_a_mirrored_strategy_equals_one_device(tmp_path):
    """2 replicas (logical CPUs, own process) with the same global batch: the same losses, metrics and
    weights as one device, with clipping active and replicas holding different numbers of real examples."""
    (tmp_path / "run.py").write_text(DISTRIBUTED)
    proc = subprocess.run([sys.executable, str(tmp_path / "run.py"), str(tmp_path / "out.json")],
                          capture_output=True, text=True, timeout=300, cwd=REPO,
                          env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", "PYTHONPATH": REPO})
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.load(open(tmp_path / "out.json"))
    one, mirrored = out["one"], out["mirrored"]
    assert mirrored["replicas"] == 2
    np.testing.assert_allclose(mirrored["loss"], one["loss"], atol=1e-5)
    np.testing.assert_allclose(mirrored["accuracy"], one["accuracy"], atol=1e-6)
    assert mirrored["eval"] == pytest.approx(one["eval"], abs=1e-5)
    for a, b in zip(mirrored["weights"], one["weights"]):
        np.testing.assert_allclose(np.array(a), np.array(b), atol=1e-5)


def _squad_features(rng, n=8, length=10):
    return {"input_ids": rng.randint(0, 50, (n, length)).astype(np.int32),
            "segment_ids": np.zeros((n, length), np.int32), "attention_mask": np.ones((n, length), np.float32),
            "p_mask": np.zeros((n, length), np.float32), "cls_index": np.full([n], length - 1, np.int32)}


def _pretrain_features(rng, n=8, length=10, n_pred=3):
    mapping = np.zeros((n, n_pred, length), np.float32)
    for b in range(n):
        for p, pos in enumerate(np.sort(rng.choice(length, n_pred, replace=False))):
            mapping[b, p, pos] = 1.0
    mask = np.ones((n, n_pred), np.float32)
    mask[-1, -1] = 0.0  # a padded slot
    return {"input_ids": rng.randint(0, 50, (n, length)).astype(np.int32),
            "segment_ids": np.zeros((n, length), np.int32),
            "perm_mask": (rng.rand(n, length, length) > 0.5).astype(np.float32), "target_mapping": mapping,
            "target_ids": rng.randint(0, 50, (n, n_pred)).astype(np.int32), "target_mask": mask}


def test_every_task_model_fits_evaluates_and_predicts(rng):
    """compile() + fit/evaluate/predict with (features, labels) or labels inside the features; evaluate's
    loss and metrics equal the task loss and the accuracies computed here."""
    config = XLNetConfig(n_token=50, n_layer=1, d_model=16, n_head=2, d_head=8, d_inner=32, dropout=0.0,
                         dropatt=0.0)
    features = _classifier_features(rng, n=8)
    labels = features.pop("label")
    weights = features.pop("is_real_example")

    clf = XLNetClassifier(config, num_labels=3)
    clf.compile(optimizer=keras.optimizers.Adam(1e-2))
    history = clf.fit(features, labels, batch_size=4, epochs=3, verbose=0, shuffle=False).history
    assert history["loss"][-1] < history["loss"][0]
    logits = clf.predict(features, batch_size=8, verbose=0)["logits"]
    result = clf.evaluate(features, labels, sample_weight=weights, batch_size=8, verbose=0, return_dict=True)
    expected = clf.task_loss({**features, "label": labels, "is_real_example": weights}, {"logits": logits})
    assert result["loss"] == pytest.approx(float(expected), abs=1e-5)
    real = weights > 0
    tie_safe.assert_accuracy_matches(result["accuracy"], logits, labels, mask=real)

    reg = XLNetClassifier(config, regression=True)
    reg.compile(optimizer=keras.optimizers.Adam(1e-2), loss="mse", metrics=["mae"])  # a user's Keras loss
    scores = labels.astype(np.float32) * 0.75 + 0.1  # real-valued targets (refused by a classifier)
    reg_history = reg.fit(features, scores, batch_size=4, epochs=3, verbose=0, shuffle=False).history
    assert reg_history["loss"][-1] < reg_history["loss"][0] and "mae" in reg_history
    predicted = reg.predict(features, batch_size=8, verbose=0)["score"]
    assert reg.evaluate(features, scores, batch_size=8, verbose=0, return_dict=True)["loss"] == pytest.approx(
        float(np.mean((predicted - scores) ** 2)), rel=1e-4)

    mc = XLNetMultipleChoice(config, num_choices=4)
    mc_features = {k: np.stack([np.roll(v, c, axis=-1) for c in range(4)], 1) for k, v in features.items()}
    mc.compile(optimizer=keras.optimizers.Adam(1e-2))
    mc_labels = labels % 4
    mc_history = mc.fit(mc_features, mc_labels, batch_size=4, epochs=3, verbose=0, shuffle=False).history
    assert mc_history["loss"][-1] < mc_history["loss"][0]
    assert mc.predict(mc_features, verbose=0)["logits"].shape == (8, 4)

    squad = XLNetForSquad(config, start_n_top=2, end_n_top=2)
    squad.compile(optimizer=keras.optimizers.Adam(1e-2))
    x = _squad_features(rng)
    y = {"start_positions": rng.randint(0, 9, 8), "end_positions": rng.randint(0, 9, 8),
         "is_impossible": rng.randint(0, 2, 8).astype(np.float32)}
    squad_history = squad.fit(x, y, batch_size=4, epochs=3, verbose=0, shuffle=False).history
    assert squad_history["loss"][-1] < squad_history["loss"][0]
    assert {"start_accuracy", "end_accuracy", "answer_class_accuracy"} <= set(squad_history)
    # evaluate runs at inference (top-k outputs): its loss is the teacher-forced one
    teacher = squad({**x, **y}, training=True)
    result = squad.evaluate(x, y, batch_size=8, verbose=0, return_dict=True)
    assert result["loss"] == pytest.approx(float(squad.task_loss({**x, **y}, teacher)), abs=1e-5)
    tie_safe.assert_accuracy_matches(result["start_accuracy"], teacher["start_log_probs"].numpy(),
                                     y["start_positions"])
    assert set(squad.predict(x, verbose=0)) >= {"start_top_index", "end_top_log_probs", "cls_logits"}

    pre = XLNetPretrainer(config)
    pre.compile(optimizer=keras.optimizers.Adam(1e-2))
    records = _pretrain_features(rng)  # labels inside the features, as the pretraining records
    pre_history = pre.fit(tf.data.Dataset.from_tensor_slices(records).batch(4), epochs=3, verbose=0).history
    assert pre_history["loss"][-1] < pre_history["loss"][0]
    out = pre.predict(records, batch_size=8, verbose=0)
    assert out["logits"].shape == (8, 3, 50) and "new_mems" not in out
    result = pre.evaluate(records, batch_size=8, verbose=0, return_dict=True)
    mask = records["target_mask"] > 0
    assert result["loss"] == pytest.approx(float(pre.task_loss(records, out)), abs=1e-5)
    tie_safe.assert_accuracy_matches(result["accuracy"], out["logits"], records["target_ids"], mask=mask)


def test_clear_errors():
    config = XLNetConfig(n_token=50, n_layer=1, d_model=16, n_head=2, d_head=8, d_inner=32)
    with pytest.raises(ValueError, match="mem_len=8.*training.loop.Trainer"):
        XLNetPretrainer(config.replace(mem_len=8)).compile()
    clf = XLNetClassifier(config)
    clf.compile()
    with pytest.raises(ValueError, match="raw text but has no preprocessor.*XLNetPreprocessor"):
        clf.fit(np.array(["raw text without a preprocessor"]), np.array([1]), verbose=0)
    with pytest.raises(ValueError, match="takes a dict of features"):
        clf.compute_loss(np.zeros((1, 4), np.int32), np.zeros([1]), {"logits": np.zeros((1, 2), np.float32)})
    with pytest.raises(ValueError, match="spiece_model: no SentencePiece model at 'missing.model'"):
        XLNetPreprocessor("missing.model")
    with pytest.raises(ValueError, match="no SentencePiece model"):
        XLNetPreprocessor()(tf.constant(["text"]))
    with pytest.raises(ValueError, match="y must be a dict"):
        XLNetForSquad(config).compute_loss({"input_ids": np.zeros((1, 4), np.int32)}, np.zeros([1]), {})


def test_preprocessor_packs_as_the_records_and_serving():
    from tfrecords import classifier_data
    from xlnet_tf.text import tokenization

    tokenizer = tokenization.XLNetTokenizer(data_fixtures.tiny_spm())
    preprocessor = XLNetPreprocessor(data_fixtures.tiny_spm(), sequence_length=24)
    texts = ["Call me Ishmael.", "It is a truth universally acknowledged, 1,000 times " * 3, ""]
    texts_b = ["Some years ago.", "", "Only B."]
    single = preprocessor(tf.constant(texts))
    pair = preprocessor((tf.constant(texts), tf.constant(texts_b)))
    for k in range(len(texts)):
        for got, b in ((single, None), (pair, texts_b[k])):
            want = classifier_data.pack_example(tokenizer, texts[k], b, 24)
            for key in ("input_ids", "segment_ids", "attention_mask"):
                np.testing.assert_array_equal(got[key].numpy()[k], want[key], err_msg=f"{key} {k} {b}")
    # unbatched strings (mapped before .batch) and labels passed through
    features, label = preprocessor(tf.constant(texts[0]), tf.constant(3))
    np.testing.assert_array_equal(features["input_ids"].numpy(), single["input_ids"].numpy()[0])
    assert int(label) == 3
    ds = tf.data.Dataset.from_tensor_slices(((texts, texts_b), [0, 1, 2])).batch(3).map(preprocessor)
    batch, labels = next(iter(ds))
    np.testing.assert_array_equal(batch["segment_ids"].numpy(), pair["segment_ids"].numpy())
    assert labels.numpy().tolist() == [0, 1, 2]


def test_the_packing_is_traced_once_for_every_fit_evaluate_and_predict():
    """Texts in memory are packed by the preprocessor's traced packing: a second `predict` (or `fit`, `evaluate`)
    does not build the tokenization graph again (it did, through a new `tf.data` map: ~5 s a call)."""
    config = XLNetConfig(n_token=data_fixtures.TINY_VOCAB, n_layer=1, d_model=16, n_head=2, d_head=8, d_inner=32)
    clf = XLNetClassifier(config, num_labels=2, preprocessor=XLNetPreprocessor(data_fixtures.tiny_spm(),
                                                                                sequence_length=16))
    clf.compile(optimizer=keras.optimizers.Adam(1e-3))
    texts, pairs = ["Call me Ishmael.", "Dull."], (["Call me Ishmael.", "Dull."], ["Some years ago.", "Only B."])
    clf.fit(texts, np.array([0, 1]), verbose=0)
    first = clf.predict(texts, verbose=0)["logits"]
    clf.evaluate(texts, np.array([0, 1]), verbose=0)
    np.testing.assert_array_equal(clf.predict(texts, verbose=0)["logits"], first)
    clf.predict(pairs, verbose=0), clf.predict(pairs, verbose=0)
    packers = clf.preprocessor._packers
    assert (packers.one.experimental_get_tracing_count(), packers.two.experimental_get_tracing_count()) == (1, 1)


def test_keras_files_round_trip_with_equal_outputs(tmp_path, rng):
    """model.save / keras.models.load_model: config, weights, preprocessor (SentencePiece model as an asset),
    compile state and optimizer slots."""
    config = XLNetConfig(n_token=data_fixtures.TINY_VOCAB, n_layer=1, d_model=16, n_head=2, d_head=8,
                         d_inner=32, dropout=0.0, dropatt=0.0)
    texts = ["Call me Ishmael.", "It is a truth universally acknowledged."]
    clf = XLNetClassifier(config, num_labels=3, task_name="topic", summary_type="mean",
                          preprocessor=XLNetPreprocessor(data_fixtures.tiny_spm(), sequence_length=16))
    clf.compile(optimizer=keras.optimizers.Adam(1e-3))
    clf.fit(tf.data.Dataset.from_tensor_slices((texts, [0, 2])).batch(2), verbose=0)
    path = str(tmp_path / "clf.keras")
    clf.save(path)
    restored = keras.models.load_model(path)
    assert isinstance(restored, XLNetClassifier) and restored.task_name == "topic"
    assert restored.summary_type == "mean" and restored.preprocessor.sequence_length == 16
    np.testing.assert_allclose(restored.predict(texts, verbose=0)["logits"], clf.predict(texts, verbose=0)["logits"],
                               atol=1e-6)
    assert int(restored.optimizer.iterations.numpy()) == 1
    for a, b in zip(restored.optimizer.variables, clf.optimizer.variables):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    restored.fit(tf.data.Dataset.from_tensor_slices((texts, [0, 2])).batch(2), verbose=0)  # still compiled

    preprocessor_path = str(tmp_path / "preprocessor.keras")
    keras.saving.save_model(clf.preprocessor, preprocessor_path)
    again = keras.models.load_model(preprocessor_path)
    np.testing.assert_array_equal(again(tf.constant(texts))["input_ids"].numpy(),
                                  clf.preprocessor(tf.constant(texts))["input_ids"].numpy())

    x = _squad_features(rng)
    pretrain = _pretrain_features(rng)
    models = [(XLNetMultipleChoice(config, num_choices=2),
               {k: np.stack([v, v[::-1]], 1) for k, v in _squad_features(rng).items() if k not in ("p_mask", "cls_index")}),
              (XLNetForSquad(config, start_n_top=2, end_n_top=3, use_answer_class=False), x),
              (XLNetPretrainer(config), pretrain)]
    for model, features in models:
        before = model(features)
        name = str(tmp_path / f"{type(model).__name__}.keras")
        model.save(name)
        after = keras.models.load_model(name)(features)
        for key, value in before.items():
            if value is not None and not isinstance(value, list):
                np.testing.assert_allclose(after[key].numpy(), value.numpy(), atol=1e-6, err_msg=key)


def _release_dir(path, config, seed=0):
    """A stand-in for the original release's directory (tiny): xlnet_config.json (original keys only),
    xlnet_model.ckpt.* without a 'checkpoint' state file, spiece.model."""
    keras.utils.set_random_seed(seed)
    source = XLNetPretrainer(config)
    os.makedirs(path, exist_ok=True)
    checkpoints.save_original_checkpoint(source, os.path.join(path, "xlnet_model.ckpt"))
    os.remove(os.path.join(path, "checkpoint"))
    config.to_json_file(os.path.join(path, "xlnet_config.json"), original_only=True)
    with open(data_fixtures.tiny_spm(), "rb") as f, open(os.path.join(path, "spiece.model"), "wb") as out:
        out.write(f.read())
    return source


def test_from_checkpoint_release_hugging_face_and_runner_dirs(tmp_path):
    import safetensors.numpy
    import torch  # noqa: F401  (the HF state below comes from transformers' own model)
    import transformers

    from tests.parity_utils import hf_config, randomize_

    config = XLNetConfig(n_token=data_fixtures.TINY_VOCAB, n_layer=2, d_model=16, n_head=2, d_head=8, d_inner=32)
    source = _release_dir(str(tmp_path / "release"), config)
    model = XLNetClassifier.from_checkpoint(str(tmp_path / "release"), num_labels=4, sequence_length=20,
                                            config_overrides={"dropout": 0.0})
    np.testing.assert_array_equal(model.backbone.word_embedding.numpy(), source.backbone.word_embedding.numpy())
    assert model.config.dropout == 0.0 and model.num_labels == 4
    assert model.preprocessor.sequence_length == 20
    assert model.predict(["Call me Ishmael."], verbose=0)["logits"].shape == (1, 4)

    hf = transformers.XLNetLMHeadModel(hf_config(config)).eval()
    randomize_(hf, seed=4)
    hf_dir = tmp_path / "hf"
    hf_dir.mkdir()
    safetensors.numpy.save_file({k: v.detach().numpy().copy() for k, v in hf.state_dict().items()
                                 if k != "lm_loss.weight"}, str(hf_dir / "model.safetensors"))
    hf.config.to_json_file(str(hf_dir / "config.json"))
    squad = XLNetForSquad.from_checkpoint(str(hf_dir), start_n_top=2, end_n_top=2)
    np.testing.assert_allclose(squad.backbone.word_embedding.numpy(),
                               hf.transformer.word_embedding.weight.detach().numpy())
    assert squad.preprocessor is None  # text preprocessing is the classifier's

    # A runner's model_dir: our object-based checkpoint, xlnet_config.json and export_info.json
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    tuned = XLNetClassifier(config, num_labels=3, task_name="topic", summary_type="first")
    manager = tf.train.CheckpointManager(tf.train.Checkpoint(model=checkpoints.trackable_weights(tuned)),
                                         str(run_dir), max_to_keep=1, checkpoint_name="ckpt")
    manager.save(checkpoint_number=7)
    config.to_json_file(str(run_dir / "xlnet_config.json"))
    info = ExportInfo.for_run(task="classifier", num_labels=3, task_name="topic", summary_type="first",
                              use_summ_proj=True, max_seq_length=24, spiece_model_file=data_fixtures.tiny_spm())
    json.dump(info.to_dict(), open(run_dir / "export_info.json", "w"))
    loaded = XLNetClassifier.from_checkpoint(str(run_dir), require_heads=True)
    assert (loaded.num_labels, loaded.task_name, loaded.summary_type) == (3, "topic", "first")
    # the run's tokenization is checked as the exporter checks it: another SentencePiece model, another casing
    other = tmp_path / "other.model"
    other.write_bytes(b"another SentencePiece model")
    with pytest.raises(UserError, match=r"run/export_info.json: the model was fine-tuned with other text settings: "
                                        r"spiece_sha256: '[0-9a-f]{64}' there, '[0-9a-f]{64}' given"):
        XLNetClassifier.from_checkpoint(str(run_dir), spiece_model=str(other))
    with pytest.raises(UserError, match="uncased: False there, True given"):
        XLNetClassifier.from_checkpoint(str(run_dir), uncased=True)
    with pytest.raises(UserError, match=r"run/export_info.json: the model was fine-tuned with other task settings: "
                                        r"num_labels: 3 there, 4 given; summary_type: 'first' there, 'last' given"):
        XLNetClassifier.from_checkpoint(str(run_dir), num_labels=4, summary_type="last")
    assert loaded.preprocessor.sequence_length == 24
    for a, b in zip(loaded.get_weights(), tuned.get_weights()):
        np.testing.assert_array_equal(a, b)

    with pytest.raises(FileNotFoundError, match="does not exist"):
        XLNetClassifier.from_checkpoint(str(tmp_path / "nowhere"))
    with pytest.raises(ValueError, match="no config given"):
        XLNetClassifier.from_checkpoint(str(_bare_copy(tmp_path, "release")))


def _bare_copy(tmp_path, name):
    """The release directory without its config."""
    import shutil

    bare = tmp_path / f"{name}_bare"
    shutil.copytree(tmp_path / name, bare)
    os.remove(bare / "xlnet_config.json")
    return bare


def _readme_keras_example():
    readme = open(os.path.join(REPO, "README.md"), encoding="utf-8").read()
    section = readme.split("## Keras: fit on raw text", 1)[1]
    return re.search(r"```python\n(.*?)```", section, re.S).group(1)


def test_readme_keras_example_runs_as_written(tmp_path, monkeypatch):
    """The README's Keras example, verbatim, against a tiny stand-in of the release directory it names."""
    code = _readme_keras_example()
    release = re.search(r'from_checkpoint\("([^"]+)"', code).group(1)
    _release_dir(str(tmp_path / release), XLNetConfig(n_token=data_fixtures.TINY_VOCAB, n_layer=1, d_model=16,
                                                       n_head=2, d_head=8, d_inner=32))
    monkeypatch.chdir(tmp_path)
    namespace = {"__name__": "readme_example"}
    exec(compile(code, "README.md", "exec"), namespace)  # noqa: S102 (the documented example)
    model = namespace["model"]
    assert isinstance(model, XLNetClassifier) and int(model.optimizer.iterations.numpy()) == 3
    restored = keras.models.load_model(str(tmp_path / "classifier.keras"))  # outputs: the round-trip test
    assert restored.preprocessor.sequence_length == 128
    for a, b in zip(restored.get_weights(), model.get_weights()):
        np.testing.assert_array_equal(a, b)
    import tensorflow_text  # noqa: F401

    serve = tf.saved_model.load(str(tmp_path / "serving" / "clf" / "1")).signatures["serving_default"]
    np.testing.assert_allclose(serve(text=tf.constant(["What a film!"]))["logits"].numpy(),
                               model.predict(["What a film!"], verbose=0)["logits"], atol=1e-5)
