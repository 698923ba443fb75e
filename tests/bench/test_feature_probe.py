"""bench.studies.transfer.feature_probe: a linear probe of a model's frozen features, random init against
checkpoints."""

import json
import os

import numpy as np
import pytest

from bench import cli
from bench.studies.transfer import feature_probe
from xlnet_tf.errors import UserError
from tests import data_fixtures

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TOPIC = os.path.join(REPO, "tests", "data", "labeled", "topic")


def tiny_checkpoint(directory):
    """A tiny XLNetClassifier's weights as a runner saves them (`ckpt-N`), with its config; returns the model."""
    import keras
    import tensorflow as tf

    from xlnet_tf import checkpoints
    from xlnet_tf.config import XLNetConfig
    from xlnet_tf.models.sequence import XLNetClassifier

    config = XLNetConfig(n_token=data_fixtures.TINY_VOCAB, n_layer=1, d_model=16, n_head=2, d_head=8, d_inner=32,
                         initializer_range=0.3, dropout=0.0, dropatt=0.0)
    keras.utils.set_random_seed(5)
    model = XLNetClassifier(config)
    os.makedirs(directory)
    tf.train.CheckpointManager(tf.train.Checkpoint(model=checkpoints.trackable_weights(model)), directory,
                               max_to_keep=1, checkpoint_name="ckpt").save(checkpoint_number=3)
    config.to_json_file(os.path.join(directory, "xlnet_config.json"))
    return model


def test_the_probe_reads_each_checkpoint_and_seeds_of_random_weights(tmp_path):
    from xlnet_tf.text.preprocessing import XLNetPreprocessor

    source = tiny_checkpoint(str(tmp_path / "wide"))
    prefix = str(tmp_path / "probe")
    cli.parse(feature_probe.FLAGS, feature_probe.define_flags, [
        f"--data_dir={TOPIC}", f"--models=random,wide={tmp_path / 'wide'}",
        f"--spiece_model={data_fixtures.tiny_spm()}", f"--config={tmp_path / 'wide' / 'xlnet_config.json'}",
        "--sequence_length=24", "--random_seeds=0,1",
        f"--output={prefix}"])
    out = feature_probe.main()
    got = [(r["model"], r["features"], r["n"]) for r in out["rows"]]
    assert got == [("random", "cls", 2), ("random", "mean", 2), ("wide", "cls", 1), ("wide", "mean", 1)]
    for row in out["rows"]:
        assert 0 <= row["dev"] <= 100 and 0 <= row["test"] <= 100 and row["C"][0] in feature_probe.C_GRID
    assert out["rows"][0]["dev_std"] is not None and out["rows"][2]["dev_std"] is None
    assert out["examples"] == {"train": 55, "dev": 20, "test": 20}
    # the checkpoint's own weights are what the probe reads
    args = type("Args", (), {"config": str(tmp_path / "wide" / "xlnet_config.json"),
                             "spiece_model": data_fixtures.tiny_spm(), "sequence_length": 24})
    loaded = feature_probe.load(str(tmp_path / "wide"), args, seed=0)
    source.preprocessor = XLNetPreprocessor(data_fixtures.tiny_spm(), 24)
    texts = ["Call me Ishmael.", "The river runs north of the city."]
    for name in feature_probe.SUMMARIES:
        np.testing.assert_allclose(feature_probe.features(loaded, texts)[name],
                                   feature_probe.features(source, texts)[name], rtol=1e-5, atol=1e-6)
    assert json.load(open(prefix + ".json"))["rows"] == out["rows"]
    md = open(prefix + ".md").read()
    assert "| wide | mean |" in md and "| TF-IDF word 1-2-grams" in md and "| majority class |" in md


def test_mean_features_leave_the_padding_out():
    """Left padding must not move a text's mean: the same text alone and beside a longer one."""
    import keras

    from xlnet_tf.config import XLNetConfig
    from xlnet_tf.models.sequence import XLNetClassifier
    from xlnet_tf.text.preprocessing import XLNetPreprocessor

    keras.utils.set_random_seed(1)
    config = XLNetConfig(n_token=data_fixtures.TINY_VOCAB, n_layer=1, d_model=16, n_head=2, d_head=8, d_inner=32,
                         dropout=0.0, dropatt=0.0)
    model = XLNetClassifier(config, preprocessor=XLNetPreprocessor(data_fixtures.tiny_spm(), 24))
    alone = feature_probe.features(model, ["Short one."])
    beside = feature_probe.features(model, ["Short one.", "A much longer text that fills most of the positions."])
    for name in feature_probe.SUMMARIES:
        np.testing.assert_allclose(beside[name][0], alone[name][0], rtol=1e-4, atol=1e-5)


def test_the_probe_finds_a_signal_that_is_there_and_chooses_c_on_dev():
    rng = np.random.default_rng(0)
    labels = rng.integers(0, 2, size=300)
    x = rng.normal(size=(300, 8))
    x[:, 0] += 4.0 * labels  # one feature carries the label (Bayes accuracy 97.7%)
    split = {"dev": (x[200:250], labels[200:250]), "test": (x[250:], labels[250:])}
    out = feature_probe.probe(x[:200], labels[:200], split)
    assert out["dev"] > 85 and out["test"] > 85 and out["C"] in feature_probe.C_GRID
    noise = feature_probe.probe(rng.normal(size=(200, 8)), labels[:200], split)
    assert noise["test"] < 75


@pytest.mark.parametrize("entry, message", [("plm", "is not LABEL=CHECKPOINT"), ("plm=/nonexistent", "does not exist"),
                                            ("=x", "is not LABEL=CHECKPOINT")])
def test_a_bad_models_entry_is_a_one_line_error(entry, message):
    with pytest.raises(UserError, match=message):
        feature_probe.parse_models([entry])


def test_a_label_given_twice_is_refused():
    with pytest.raises(UserError, match="given twice"):
        feature_probe.parse_models(["random", "random"])
