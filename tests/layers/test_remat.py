"""Activation rematerialization (`XLNetBackbone(remat=True)`): the same losses and gradients, dropout replayed."""

import numpy as np
import pytest
import tensorflow as tf

import keras

from xlnet_tf.backbone import XLNetBackbone
from xlnet_tf.config import XLNetConfig
from xlnet_tf.layers import seeded_dropout

CONFIG = dict(n_layer=3, d_model=32, n_head=2, d_head=16, d_inner=64, n_token=50, mem_len=4, dropout=0.0, dropatt=0.0)


def _backbone(**overrides):
    keras.utils.set_random_seed(0)
    bb = XLNetBackbone(XLNetConfig(**{**CONFIG, **overrides}))
    bb.build()
    return bb


def _inputs():
    rng = np.random.RandomState(0)
    ids = tf.constant(rng.randint(0, 50, [2, 6]))
    segs = tf.constant([[0, 0, 0, 1, 1, 2], [0, 0, 1, 1, 1, 2]])
    perm = tf.constant(rng.rand(2, 6, 6) < 0.3, tf.float32)
    mapping = tf.one_hot([[1, 3], [2, 5]], 6)
    mems = [tf.constant(rng.randn(2, 4, 32), tf.float32) for _ in range(3)]
    return ids, segs, perm, mapping, mems


def _reset_seeds(bb, seed=7):
    for d in [bb.drop] + [layer.rel_attn.prob_dropout for layer in bb.xl_layers]:
        if d.rate:
            d.seed_generator.state.assign(tf.constant([seed, 0], d.seed_generator.state.dtype))


def _loss_and_grads(bb, remat, jit=False):
    ids, segs, perm, mapping, mems = _inputs()
    bb.remat = remat
    _reset_seeds(bb)

    def step():
        with tf.GradientTape() as tape:
            out = bb(ids, segment_ids=segs, perm_mask=perm, target_mapping=mapping, mems=mems, training=True)
            loss = tf.reduce_sum(out["content"] ** 2) + tf.reduce_sum(out["query"] ** 3)
        grads = tape.gradient(loss, bb.trainable_variables)
        return loss, [tf.zeros_like(v) if g is None else tf.convert_to_tensor(g)
                      for v, g in zip(bb.trainable_variables, grads)]

    return tf.function(step, jit_compile=True)() if jit else step()


def _max_diff(a, b):
    return max(float(tf.reduce_max(tf.abs(x - y))) for x, y in zip(a, b))


# remat inside the XLA step in the default run: test_finetune_runners.py::test_gradient_accumulation_equals_one_big_batch
@pytest.mark.parametrize("jit", [False, pytest.param(True, marks=pytest.mark.slow)])
def test_remat_gives_the_same_loss_and_gradients_without_dropout(jit):
    bb = _backbone()
    loss, grads = _loss_and_grads(bb, remat=False, jit=jit)
    loss_r, grads_r = _loss_and_grads(bb, remat=True, jit=jit)
    scale = max(float(tf.reduce_max(tf.abs(g))) for g in grads)
    assert scale > 1e-3  # the gradients are not all zero
    assert abs(float(loss) - float(loss_r)) <= 1e-5 * abs(float(loss))
    assert _max_diff(grads, grads_r) <= 1e-5 * scale  # float32 rounding of another operation order (XLA)


def test_remat_replays_dropout_masks(monkeypatch):
    bb = _backbone(dropout=0.1, dropatt=0.1)
    loss, grads = _loss_and_grads(bb, remat=True)
    loss2, grads2 = _loss_and_grads(bb, remat=True)  # the same seed: the same step
    assert float(loss) == float(loss2) and _max_diff(grads, grads2) == 0.0
    # the gradient of the same network (same masks) computed without recomputation
    monkeypatch.setattr(tf, "recompute_grad", lambda f: f)
    loss_ref, grads_ref = _loss_and_grads(bb, remat=True)
    assert float(loss) == float(loss_ref) and _max_diff(grads, grads_ref) < 1e-5
    monkeypatch.undo()
    # what the seeded masks prevent: with the layers' own stateful masks, the recomputation draws other masks
    # and the gradient belongs to another network
    monkeypatch.setattr(seeded_dropout, "apply", lambda layer, x, training, seed=None, site=0:
                        layer(x, training=training))
    loss_bad, grads_bad = _loss_and_grads(bb, remat=True)
    assert float(loss_bad) != float(loss) or _max_diff(grads_bad, grads) > 1e-3


def test_remat_is_an_attribute_kept_by_get_config():
    bb = _backbone()
    assert bb.remat is False and XLNetBackbone.from_config(bb.get_config()).remat is False
    bb.remat = True
    assert XLNetBackbone.from_config(bb.get_config()).remat is True
    ids, segs, _, _, mems = _inputs()
    out_plain = XLNetBackbone.from_config({**bb.get_config(), "remat": False})
    out_plain.build()
    out_plain.set_weights(bb.get_weights())
    # inference never recomputes: the same numbers with and without
    a = bb(ids, segment_ids=segs, mems=mems, training=False)["content"]
    b = out_plain(ids, segment_ids=segs, mems=mems, training=False)["content"]
    np.testing.assert_allclose(a.numpy(), b.numpy(), atol=1e-6)
