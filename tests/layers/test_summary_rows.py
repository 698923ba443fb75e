"""`summary_rows_only`: the last layer computes only the row the summary reads, with the same results."""

import numpy as np
import pytest
import tensorflow as tf

from xlnet_tf.backbone import XLNetBackbone
from xlnet_tf.config import XLNetConfig
from xlnet_tf.models import XLNetClassifier, XLNetMultipleChoice

CONFIG = dict(n_token=60, d_model=16, n_layer=3, n_head=2, d_head=8, d_inner=24, dropout=0.0, dropatt=0.0)


def features(batch, length, seed=0, segments=None):
    rng = np.random.default_rng(seed)
    shape = [batch, length] if segments is None else [batch, segments, length]
    mask = np.ones(shape, np.float32)
    mask[0, ..., :3] = 0.0  # left padding in the first example (of each segment)
    seg = np.zeros(shape, np.int32)
    seg[..., length // 2:] = 1
    seg[..., -1] = 2
    return {"input_ids": tf.constant(rng.integers(5, 60, size=shape), tf.int32),
            "segment_ids": tf.constant(seg), "attention_mask": tf.constant(mask),
            "label": tf.constant(rng.integers(0, 3, size=[batch]), tf.int32)}


def pair(summary_type="last", **kwargs):
    """Two classifiers with the same weights, the first with summary_rows_only, the second without."""
    models = []
    for rows_only in (True, False):
        tf.keras.utils.set_random_seed(3)
        models.append(XLNetClassifier(XLNetConfig(**CONFIG), num_labels=3, summary_type=summary_type,
                                      summary_rows_only=rows_only, **kwargs))
    return models


@pytest.mark.parametrize("summary_type", ["last", "first"])
def test_same_logits_and_gradients_as_every_row(summary_type):
    fast, full = pair(summary_type)
    feats = features(4, 12)
    grads, logits = [], []
    for model in (fast, full):
        with tf.GradientTape() as tape:
            out = model(feats, training=True)
            loss = model.task_loss(feats, out)
        grads.append([None if g is None else tf.convert_to_tensor(g).numpy()
                      for g in tape.gradient(loss, model.trainable_variables)])
        logits.append(out["logits"].numpy())
    np.testing.assert_allclose(logits[0], logits[1], atol=1e-6)
    used = 0
    for a, b, v in zip(*grads, fast.trainable_variables):
        assert (a is None) == (b is None), v.path  # mask_emb: the query stream's, unused here
        if a is not None:
            np.testing.assert_allclose(a, b, atol=1e-6, err_msg=v.path)
            used += 1
    assert used == len(fast.trainable_variables) - 1


def test_the_last_layer_really_computes_one_row():
    backbone = XLNetBackbone(XLNetConfig(**CONFIG))
    feats = features(2, 10)
    full = backbone(feats["input_ids"], segment_ids=feats["segment_ids"], attention_mask=feats["attention_mask"])
    rows = backbone(feats["input_ids"], segment_ids=feats["segment_ids"], attention_mask=feats["attention_mask"],
                    output_positions=tf.constant([[9, 4], [0, 9]]))
    assert rows["content"].shape == (2, 2, 16)
    np.testing.assert_allclose(rows["content"].numpy()[0], full["content"].numpy()[0, [9, 4]], atol=1e-6)
    np.testing.assert_allclose(rows["content"].numpy()[1], full["content"].numpy()[1, [0, 9]], atol=1e-6)


def test_documents_with_memories_and_multiple_choice():
    fast, full = pair(mem_len=12)
    doc = features(2, 6, seed=1, segments=3)
    np.testing.assert_allclose(fast(doc)["logits"].numpy(), full(doc)["logits"].numpy(), atol=1e-6)
    choices = []
    for rows_only in (True, False):
        tf.keras.utils.set_random_seed(5)
        choices.append(XLNetMultipleChoice(XLNetConfig(**CONFIG), num_choices=3, summary_rows_only=rows_only))
    feats = features(2, 9, seed=2, segments=3)  # [B, C, L]
    np.testing.assert_allclose(choices[0](feats)["logits"].numpy(), choices[1](feats)["logits"].numpy(), atol=1e-6)


def test_round_trips_in_config_and_compiles_with_xla():
    fast, _ = pair()
    assert fast.get_config()["summary_rows_only"] is True
    again = XLNetClassifier.from_config(fast.get_config())
    assert again.summary_rows_only is True
    feats = features(2, 8)
    step = tf.function(lambda f: fast.task_loss(f, fast(f, training=True)), jit_compile=True)
    assert np.isfinite(step(feats).numpy())
