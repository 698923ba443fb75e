"""Schedule values, AdamW against a numpy reference, per-layer learning-rate multipliers, clipping."""

import keras
import numpy as np
import pytest
import tensorflow as tf

from xlnet_tf import checkpoints
from xlnet_tf.training import optimization
from xlnet_tf.config import XLNetConfig
from xlnet_tf.models import XLNetPretrainer

CONFIG = XLNetConfig(n_token=40, n_layer=3, d_model=8, n_head=2, d_head=4, d_inner=16, dropout=0.0,
                     dropatt=0.0)


def test_schedule_values():
    s = optimization.WarmupDecaySchedule(1.0, train_steps=110, warmup_steps=10, min_lr_ratio=0.1)
    values = {step: float(s(step)) for step in (0, 5, 10, 60, 110, 200)}
    assert values[0] == 0.0 and values[5] == pytest.approx(0.5)
    assert values[10] == pytest.approx(1.0)
    assert values[60] == pytest.approx(0.1 + 0.9 * 0.5)
    assert values[110] == pytest.approx(0.1) and values[200] == pytest.approx(0.1)
    cos = optimization.WarmupDecaySchedule(2.0, train_steps=100, min_lr_ratio=0.0, decay="cos")
    assert float(cos(0)) == pytest.approx(2.0) and float(cos(50)) == pytest.approx(1.0)
    assert float(cos(100)) == pytest.approx(0.0, abs=1e-6)
    with pytest.raises(ValueError, match="warmup_steps"):
        optimization.WarmupDecaySchedule(1.0, train_steps=5, warmup_steps=6)


def test_weight_decay_rules_follow_the_original():
    assert optimization.uses_weight_decay("model/transformer/layer_0/rel_attn/q/kernel")
    assert optimization.uses_weight_decay("model/transformer/layer_0/rel_attn/r_w_bias")
    assert not optimization.uses_weight_decay("model/transformer/layer_0/ff/layer_1/bias")
    assert not optimization.uses_weight_decay("model/transformer/layer_0/ff/LayerNorm/gamma")
    assert not optimization.uses_weight_decay("model/lm_loss/bias")


@pytest.mark.parametrize("bias_correction", [True, False])
def test_adamw_matches_numpy_reference(bias_correction):
    w0 = np.array([[0.5, -1.0], [2.0, 0.25]], np.float32)
    b0 = np.array([0.1, -0.2], np.float32)
    w, b = keras.Variable(w0, name="kernel"), keras.Variable(b0, name="bias")
    opt = optimization.XLNetAdamW(0.1, weight_decay_rate=0.01, epsilon=1e-6, adam_variant="standard" if bias_correction else "no_bias_correction",
                                  lr_multipliers={w.path: 0.5}, decay_paths=[w.path])
    grads = [np.array([[0.1, -0.3], [0.2, 0.0]], np.float32), np.array([1.0, -2.0], np.float32)]
    ref = {"w": w0.astype(np.float64), "b": b0.astype(np.float64)}
    state = {k: [np.zeros_like(v), np.zeros_like(v)] for k, v in ref.items()}
    for step in range(1, 4):
        opt.apply_gradients(zip([tf.constant(g) for g in grads], [w, b]))
        for key, g, mult, decay in (("w", grads[0], 0.5, True), ("b", grads[1], 1.0, False)):
            m, v = state[key]
            m[:] = 0.9 * m + 0.1 * g
            v[:] = 0.999 * v + 0.001 * g * g
            mh, vh = (m / (1 - 0.9 ** step), v / (1 - 0.999 ** step)) if bias_correction else (m, v)
            u = mh / (np.sqrt(vh) + 1e-6) + (0.01 * ref[key] if decay else 0)
            ref[key] = ref[key] - 0.1 * mult * u
        # float32 bias correction (1 - 0.999**t) carries ~1e-5 relative error: atol 1e-5 on updates of 0.1
        np.testing.assert_allclose(w.numpy(), ref["w"], rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(b.numpy(), ref["b"], rtol=1e-5, atol=1e-5)


def test_every_layer_gets_its_learning_rate_multiplier():
    model = XLNetPretrainer(CONFIG)
    rate = 0.5
    opt = optimization.create_optimizer(model, learning_rate=1.0, train_steps=10, lr_layer_decay_rate=rate)
    names = optimization.variable_names(model)
    seen_layers = set()
    for variable in model.trainable_variables:
        name = names[variable.path]
        mult = opt.lr_multipliers[variable.path]
        if name.startswith("model/transformer/layer_"):
            layer = int(name.split("/")[2].split("_")[1])
            seen_layers.add(layer)
            assert mult == pytest.approx(rate ** (CONFIG.n_layer - 1 - layer)), name
        elif "word_embedding" in name or "mask_emb" in name:
            assert mult == pytest.approx(rate ** CONFIG.n_layer), name
        else:
            assert mult == 1.0, name
    assert seen_layers == set(range(CONFIG.n_layer))
    # every trainable variable is named (no stray variable escapes the rules)
    assert set(names.values()) == set(checkpoints.model_variables(model))


def test_multiplier_scales_the_actual_update():
    """One step with equal gradients: a layer-0 weight moves rate**(n-1) as far as a last-layer one."""
    model = XLNetPretrainer(CONFIG)
    opt = optimization.create_optimizer(model, learning_rate=0.01, train_steps=10, lr_layer_decay_rate=0.5,
                                        clip=None)
    layers = model.backbone.xl_layers
    first, last = layers[0].rel_attn.q, layers[-1].rel_attn.q
    before = [first.numpy().copy(), last.numpy().copy()]
    grads = [tf.ones_like(v) for v in model.trainable_variables]
    opt.apply_gradients(zip(grads, model.trainable_variables))
    # schedule at step 0 with no warmup is the full rate
    moved = [np.abs(first.numpy() - before[0]).mean(), np.abs(last.numpy() - before[1]).mean()]
    assert moved[0] / moved[1] == pytest.approx(0.5 ** (CONFIG.n_layer - 1), rel=1e-3)


def test_global_norm_clipping():
    w = keras.Variable(np.zeros([4], np.float32))
    opt = optimization.XLNetAdamW(1.0, global_clipnorm=1.0, adam_variant="no_bias_correction", epsilon=0.0)
    opt.apply_gradients([(tf.constant([30.0, 40.0, 0.0, 0.0]), w)])
    # clipped gradient (0.6, 0.8): m = 0.1 g, v = 0.001 g^2 -> update = 0.1/sqrt(0.001) * sign
    np.testing.assert_allclose(w.numpy()[:2], -np.array([1, 1]) * 0.1 / np.sqrt(0.001), rtol=1e-5)
