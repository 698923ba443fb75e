"""Token classification: parity with Hugging Face's XLNetForTokenClassification (logits and loss), the ignore
label, Keras fit, and the runner end to end on the shipped Brown part-of-speech slice (beats the most frequent tag
per word learned from the same training file; every dev word gets one prediction; CoNLL predictions written)."""

import collections
import json
import os

import numpy as np
import pytest
import tensorflow as tf
import torch
import transformers

from tests import data_fixtures
from tests.parity_utils import TINY, hf_config, max_diff, randomize_
from xlnet_tf import checkpoints
from xlnet_tf.config import XLNetConfig
from xlnet_tf.models import XLNetTagger
from xlnet_tf.text.tagging import IGNORE_LABEL

CONFIG = XLNetConfig(**{**TINY, "dropout": 0.0, "dropatt": 0.0})
DATA = os.path.join(data_fixtures.REPO_ROOT, "data", "finetune", "brown_pos")


def _inputs(rng, batch=3, length=9, num_labels=5):
    ids = rng.randint(0, CONFIG.n_token, (batch, length))
    seg = np.zeros((batch, length), np.int64)
    seg[:, -1] = 2
    mask = np.ones((batch, length), np.float32)
    mask[1, :3], seg[1, :3] = 0, 4  # left padding
    labels = rng.randint(0, num_labels, (batch, length))
    labels[rng.rand(batch, length) < 0.3] = IGNORE_LABEL
    labels[1, :3] = labels[:, -2:] = IGNORE_LABEL  # padding, <sep>, <cls>
    return {"input_ids": ids, "segment_ids": seg, "attention_mask": mask, "label_ids": labels}


def _hf_pair(seed=3, num_labels=5):
    cfg = hf_config(CONFIG)
    cfg.num_labels = num_labels
    hf = transformers.XLNetForTokenClassification(cfg).eval()
    randomize_(hf, seed=seed)
    ours = XLNetTagger(CONFIG, num_labels=num_labels)
    checkpoints.load_hf_weights(ours, {k: v.detach().numpy() for k, v in hf.state_dict().items()},
                                require_heads=True)
    return hf, ours


def test_token_classification_matches_hf(rng):
    """Same weights (HF `classifier` = our `model/tagging/logit`): logits to 1e-5 at every position, left padding
    included, and the loss equals HF's mean cross-entropy over the labelled positions (HF ignores -100 too)."""
    hf, ours = _hf_pair()
    inputs = _inputs(rng)
    with torch.no_grad():
        ref = hf(input_ids=torch.tensor(inputs["input_ids"]), token_type_ids=torch.tensor(inputs["segment_ids"]),
                 attention_mask=torch.tensor(inputs["attention_mask"]),
                 labels=torch.tensor(inputs["label_ids"]))
    out = ours(inputs)
    assert out["logits"].shape == (3, 9, 5)
    assert max_diff(out["logits"], ref.logits.numpy()) <= 1e-5
    assert abs(float(ours.task_loss(inputs, out)) - float(ref.loss)) <= 1e-5


def test_ignored_positions_take_no_part_in_the_loss(rng):
    _, ours = _hf_pair()
    inputs = _inputs(rng)
    out = ours(inputs)
    logits = out["logits"].numpy()
    labels = inputs["label_ids"]
    real = labels >= 0
    log_probs = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
    want = -np.take_along_axis(log_probs, np.where(real, labels, 0)[..., None], -1)[..., 0][real].mean()
    assert abs(float(ours.task_loss(inputs, out)) - want) <= 1e-5
    # a padding window (is_real_example 0) counts for nothing
    weighted = ours.task_loss({**inputs, "is_real_example": np.array([1, 0, 1], np.float32)}, out)
    keep = real.copy()
    keep[1] = False
    want_weighted = -np.take_along_axis(log_probs, np.where(real, labels, 0)[..., None], -1)[..., 0][keep].mean()
    assert abs(float(weighted) - want_weighted) <= 1e-5


def test_labels_outside_the_tag_set_are_refused_but_the_ignore_label_is_not(rng):
    from xlnet_tf.errors import UserError

    _, ours = _hf_pair()
    ours.compile(optimizer="adam")
    inputs = _inputs(rng)
    ours.fit(inputs, epochs=1, batch_size=3, verbose=0)  # -100 accepted
    bad = dict(inputs, label_ids=np.where(inputs["label_ids"] == IGNORE_LABEL, 7, inputs["label_ids"]))
    with pytest.raises(UserError, match=r"class ids in \[0, 5\)"):
        ours.fit(bad, epochs=1, batch_size=3, verbose=0)


def test_keras_save_and_load_keeps_the_tags(tmp_path, rng):
    import keras

    ours = XLNetTagger(CONFIG, num_labels=3, labels=["NOUN", "VERB", "."])
    inputs = _inputs(rng, num_labels=3)
    path = str(tmp_path / "tagger.keras")
    ours.save(path)
    loaded = keras.saving.load_model(path)
    assert loaded.labels == ["NOUN", "VERB", "."]
    assert max_diff(loaded(inputs)["logits"], ours(inputs)["logits"].numpy()) == 0.0


def _most_frequent_tag_baseline(train, dev):
    from tfrecords.readers import conll

    counts = collections.defaultdict(collections.Counter)
    overall = collections.Counter()
    for s in conll.read_conll(train):
        for w, t in zip(s.words, s.labels):
            counts[w][t] += 1
            overall[t] += 1
    default = overall.most_common(1)[0][0]
    right = total = 0
    for s in conll.read_conll(dev):
        for w, t in zip(s.words, s.labels):
            guess = counts[w].most_common(1)[0][0] if w in counts else default
            right += guess == t
            total += 1
    return right / total, total


def test_tagger_runner_end_to_end_on_brown_pos(tmp_path):
    """The runner on the shipped Brown slice (universal tags), tiny model from scratch: token accuracy well above
    the majority tag, every dev word predicted exactly once, predictions in the input's CoNLL layout."""
    from run import run_tagger

    data_fixtures.run_with_flags(run_tagger, [
        "--n_layer=2", "--d_model=64", "--n_head=2", "--d_head=32", "--d_inner=128",
        f"--n_token={data_fixtures.TINY_VOCAB}", "--dropout=0.0", "--dropatt=0.0", "--warmup_steps=20",
        "--steps_per_loop=50", "--jit_compile=true", f"--spiece_model_file={data_fixtures.tiny_spm()}",
        f"--data_dir={DATA}", f"--record_dir={tmp_path}/records", f"--model_dir={tmp_path}/m", "--do_train",
        "--do_eval", "--do_predict", "--predict_split=dev", "--max_seq_length=64", "--doc_stride=32",
        "--train_batch_size=16", "--train_steps=150", "--save_steps=150", "--learning_rate=2e-3"])
    report = json.load(open(tmp_path / "m" / "eval_results.json"))
    last = report["last"]["dev"]
    _, total = _most_frequent_tag_baseline(f"{DATA}/train.txt", f"{DATA}/dev.txt")
    assert report["task"] == "tagging" and report["key"] == "token_accuracy"
    assert last["num_tokens"] == total == 9290
    majority = last["per_label"]["NOUN"]["support"] / total
    assert last["token_accuracy"] > majority + 0.2, (last["token_accuracy"], majority)
    lines = open(tmp_path / "m" / "predict_dev.txt", encoding="utf-8").read().splitlines()
    source = open(f"{DATA}/dev.txt", encoding="utf-8").read().splitlines()
    assert len(lines) == len(source)
    for got, want in zip(lines, source):
        if not want or want.startswith("-DOCSTART-"):
            assert got == want
        else:
            assert got.rsplit("\t", 1)[0] == want and got.rsplit("\t", 1)[1] in last["per_label"]
    info = json.load(open(tmp_path / "m" / "export_info.json"))
    assert info["task"] == "tagging" and info["doc_stride"] == 32 and info["num_labels"] == 12


def test_the_ner_recipe_scores_every_checkpoint_as_entities_on_the_shipped_tweets(tmp_path):
    """run/flags/ner_wnut16.flags on the shipped WNUT 2016 slice (a tiny model, a short run): its records carry the
    wnut16 tag set, every kept checkpoint is scored on dev with seqeval's entity F1, and the best is named."""
    from run import run_tagger

    ner = os.path.join(data_fixtures.REPO_ROOT, "data", "finetune", "wnut16")
    data_fixtures.run_with_flags(run_tagger, [
        f"--flagfile={os.path.join(data_fixtures.REPO_ROOT, 'run', 'flags', 'ner_wnut16.flags')}",
        "--n_layer=1", "--d_model=32", "--n_head=2", "--d_head=16", "--d_inner=64",
        f"--n_token={data_fixtures.TINY_VOCAB}", f"--spiece_model_file={data_fixtures.tiny_spm()}",
        f"--data_dir={ner}", f"--labels_file={ner}/labels.txt", f"--record_dir={tmp_path}/records",
        f"--model_dir={tmp_path}/m", "--train_steps=8",
        "--warmup_steps=2", "--save_steps=2", "--steps_per_loop=2", "--train_batch_size=8"])
    report = json.load(open(tmp_path / "m" / "eval_results.json"))
    assert report["key"] == "f1" and [e["step"] for e in report["evaluations"]] == [2, 4, 6, 8]
    assert {e["kind"] for e in report["evaluations"]} == {"entities"}
    assert all(e["num_gold"] == 63 for e in report["evaluations"])  # the slice's dev entities
    manifest = json.load(open(tmp_path / "records" / "manifest.json"))
    assert '"wnut16"' in json.dumps(manifest)


def test_fit_takes_the_trainers_steps_for_tagging(tmp_path, rng):
    """The runners' loop optimizes the tagger's Keras loss (a mean over labelled words, not over windows): same
    weights, optimizer and batches give the same per-step losses and final weights in Keras fit and the Trainer."""
    import keras

    from xlnet_tf.training import finetuning, optimization, loop as training

    features = {k: np.concatenate([v, v[::-1]]) for k, v in _inputs(rng, batch=6, length=10, num_labels=4).items()}
    features["is_real_example"] = (np.arange(12) % 5 != 4).astype(np.float32)
    dataset = tf.data.Dataset.from_tensor_slices(features).batch(4, drop_remainder=True)  # 3 batches
    keras.utils.set_random_seed(3)
    reference = XLNetTagger(CONFIG, num_labels=4)
    model = XLNetTagger(CONFIG, num_labels=4)
    model.set_weights(reference.get_weights())
    make_optimizer = lambda m: optimization.create_optimizer(  # noqa: E731
        m, learning_rate=3e-3, train_steps=3, warmup_steps=1, weight_decay=0.01, clip=0.5)
    loop = training.TrainLoopConfig(model_dir=str(tmp_path / "trainer"), train_steps=3, steps_per_loop=1,
                                    save_steps=3, global_batch_size=4)
    trainer = training.Trainer(tf.distribute.get_strategy(), reference, make_optimizer(reference),
                               finetuning.task_loss_fn, lambda ctx, skip: dataset.repeat(), loop,
                               log=lambda line: None)
    trainer_losses = [record["loss"] for record in trainer.train()]
    model.compile(optimizer=make_optimizer(model))
    fit_losses = model.fit(dataset, epochs=3, steps_per_epoch=1, verbose=0).history["loss"]
    np.testing.assert_allclose(fit_losses, trainer_losses, atol=1e-5)
    for a, b in zip(model.get_weights(), reference.get_weights()):
        np.testing.assert_allclose(a, b, atol=1e-5)


def test_keras_fit_and_predict_on_pre_tokenized_sentences(tmp_path):
    """Brown sentences as word lists through XLNetTaggingPreprocessor (the builder's packing, long sentences in
    several windows): fit learns (loss falls), predict gives one tag per word with its probability, and the
    `.keras` file (preprocessor and its SentencePiece model inside) predicts the same in a new model."""
    import keras

    from tfrecords.readers import conll
    from xlnet_tf.training import optimization
    from xlnet_tf.text.tagging_preprocessor import XLNetTaggingPreprocessor

    train = conll.read_conll(f"{DATA}/train.txt", label_column=-1)[:96]
    dev = conll.read_conll(f"{DATA}/dev.txt", label_column=-1)[:24]
    labels = open(f"{DATA}/labels.txt", encoding="utf-8").read().split()
    pre = XLNetTaggingPreprocessor(data_fixtures.tiny_spm(), sequence_length=24, doc_stride=8)
    config = XLNetConfig(n_token=data_fixtures.TINY_VOCAB, n_layer=2, d_model=32, n_head=2, d_head=16, d_inner=64,
                         dropout=0.0, dropatt=0.0)
    keras.utils.set_random_seed(0)
    model = XLNetTagger(config, num_labels=len(labels), labels=labels, preprocessor=pre)
    words, tags = [list(s.words) for s in train], [list(s.labels) for s in train]
    assert len(pre.windows(words)["input_ids"]) > len(words)  # some sentences need several windows
    model.compile(optimizer=optimization.create_optimizer(model, learning_rate=3e-3, train_steps=60, warmup_steps=5))
    history = model.fit(words, tags, batch_size=16, epochs=3, verbose=0).history
    assert history["loss"][-1] < history["loss"][0]
    dev_words = [list(s.words) for s in dev]
    out = model.predict(dev_words, verbose=0)
    assert [len(t) for t in out["tags"]] == [len(w) for w in dev_words]
    assert all(((p > 0) & (p <= 1)).all() for p in out["probabilities"])
    path = str(tmp_path / "tagger.keras")
    model.save(path)
    loaded = keras.saving.load_model(path)
    again = loaded.predict(dev_words, verbose=0)
    for a, b in zip(out["probabilities"], again["probabilities"]):
        np.testing.assert_allclose(a, b, atol=1e-6)
    with pytest.raises(Exception, match="lists of words"):
        model.preprocessor.windows(["a whole sentence as one string"])
