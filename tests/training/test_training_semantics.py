"""The original release's training semantics, each against its formula computed independently in numpy:
per-layer decay modes x Adam variants (one optimizer step per variable), the clip threshold with 2
mirrored replicas (global / per-replica / float16 loss scaling), per-example positional-encoding dropout,
`mask_emb` initialisation and the `attn` summary's attention dropout."""

import json
import os
import re
import subprocess
import sys

import keras
import numpy as np
import pytest
import tensorflow as tf

from tests import data_fixtures
from xlnet_tf.training import optimization
from xlnet_tf.config import XLNetConfig
from xlnet_tf.heads import SequenceSummary
from xlnet_tf.models import XLNetPretrainer

CONFIG = XLNetConfig(n_token=40, n_layer=3, d_model=8, n_head=2, d_head=4, d_inner=16, dropout=0.0,
                     dropatt=0.0, untie_r=True)
RATE, LR, EPS, WD, CLIP = 0.5, 0.01, 1e-3, 0.01, 1.0
B1, B2 = 0.9, 0.999
TRAIN_STEPS = 100


# ---------------------------------------------------------------------------------- the optimizer
def _original_layer(name):
    """The layer index the original's `get_train_op` sees in a variable's name, or None. Our per-layer
    `r_*_bias` / `seg_embed` are slices of variables the original stores stacked `[n_layer, ...]` directly
    under `model/transformer/` (no `layer_i` in their names)."""
    if re.search(r"/rel_attn/(r_w_bias|r_r_bias|r_s_bias|seg_embed)$", name):
        return None
    m = re.search(r"model/transformer/layer_(\d+)/", name)
    return int(m.group(1)) if m else None


def _our_layer(name):
    m = re.match(r"model/transformer/layer_(\d+)/", name)
    return int(m.group(1)) if m else None


def _expected_update(name, w, grads_seq, mode, variant, decayed):
    """The original's update of one variable over the steps, in float64: clipped gradient (clipping done by
    the caller) x per-layer factor (mode `gradient`), Adam moments, the variant's step, lr x factor (mode
    `learning_rate`)."""
    n = CONFIG.n_layer
    lr_mult = grad_mult = 1.0
    if mode == "gradient" and _original_layer(name) is not None:
        grad_mult = RATE ** (n - 1 - _original_layer(name))
    if mode == "learning_rate":
        if _our_layer(name) is not None:
            lr_mult = RATE ** (n - 1 - _our_layer(name))
        elif re.match(r"model/transformer/(word_embedding|mask_emb)/", name):
            lr_mult = RATE ** n
    w = w.astype(np.float64)
    m = np.zeros_like(w)
    v = np.zeros_like(w)
    for t, g in enumerate(grads_seq, start=1):
        g = g * grad_mult
        m = B1 * m + (1 - B1) * g
        v = B2 * v + (1 - B2) * g * g
        if variant == "standard":
            u = (m / (1 - B1 ** t)) / (np.sqrt(v / (1 - B2 ** t)) + EPS)
        elif variant == "tf1":  # lr_t = lr sqrt(1 - b2^t) / (1 - b1^t); epsilon before the correction
            u = np.sqrt(1 - B2 ** t) / (1 - B1 ** t) * m / (np.sqrt(v) + EPS)
        else:  # AdamWeightDecayOptimizer
            u = m / (np.sqrt(v) + EPS)
        if decayed:
            u = u + WD * w
        w = w - LR * (1 - (t - 1) / TRAIN_STEPS) * lr_mult * u  # linear decay from step 0 (no warm-up)
    return w


@pytest.mark.parametrize("variant", ["standard", "no_bias_correction", "tf1"])
@pytest.mark.parametrize("mode", ["learning_rate", "gradient"])
def test_update_matches_the_formula(mode, variant):
    keras.utils.set_random_seed(3)
    model = XLNetPretrainer(CONFIG)
    weight_decay = 0.0 if variant == "tf1" else WD
    opt = optimization.create_optimizer(
        model, learning_rate=LR, train_steps=TRAIN_STEPS, weight_decay=weight_decay, adam_epsilon=EPS, clip=CLIP,
        lr_layer_decay_rate=RATE, lr_layer_decay_mode=mode, adam_variant=variant)
    names = optimization.variable_names(model)
    variables = model.trainable_variables
    before = [v.numpy().copy() for v in variables]
    rng = np.random.RandomState(0)
    # gradients of about the size of epsilon, so the gradient-mode factor (which Adam normalizes away
    # except through epsilon) visibly changes the step; the first step's global norm is above CLIP
    steps = [[rng.normal(0, s, v.shape).astype(np.float32) for v in variables] for s in (0.2, 2e-3)]
    clipped = []
    for grads in steps:
        norm = np.sqrt(sum(float(np.sum(g.astype(np.float64) ** 2)) for g in grads))
        clipped.append([g * min(1.0, CLIP / norm) for g in grads])
        opt.apply_gradients(zip([tf.constant(g) for g in grads], variables))
    assert np.sqrt(sum(np.sum(g.astype(np.float64) ** 2) for g in steps[0])) > CLIP  # clipping active
    for i, (v, w0) in enumerate(zip(variables, before)):
        name = names[v.path]
        decayed = weight_decay > 0 and optimization.uses_weight_decay(name)
        want = _expected_update(name, w0, [c[i] for c in clipped], mode, variant, decayed)
        np.testing.assert_allclose(v.numpy(), want, rtol=2e-5, atol=2e-7, err_msg=f"{mode} {variant} {name}")


def test_original_choice_of_adam_variant():
    assert optimization.resolve_adam_variant("original", 0.01) == "no_bias_correction"
    assert optimization.resolve_adam_variant("original", 0.0) == "tf1"
    assert optimization.resolve_adam_variant("standard", 0.01) == "standard"
    with pytest.raises(ValueError, match="adam_variant"):
        optimization.resolve_adam_variant("adam", 0.0)
    with pytest.raises(ValueError, match="lr_layer_decay_mode"):
        optimization.create_optimizer(XLNetPretrainer(CONFIG), learning_rate=1.0, train_steps=2,
                                      lr_layer_decay_mode="layers")


def test_gradient_mode_leaves_embeddings_and_stacked_variables_alone():
    model = XLNetPretrainer(CONFIG)
    opt = optimization.create_optimizer(model, learning_rate=1.0, train_steps=2, lr_layer_decay_rate=0.5,
                                        lr_layer_decay_mode="gradient")
    names = optimization.variable_names(model)
    factors = {names[v.path]: opt.grad_multipliers[v.path] for v in model.trainable_variables}
    assert not opt.lr_multipliers
    assert factors["model/transformer/word_embedding/lookup_table"] == 1.0
    assert factors["model/transformer/mask_emb/mask_emb"] == 1.0
    assert factors["model/transformer/layer_0/rel_attn/r_w_bias"] == 1.0  # stacked in the original
    assert factors["model/transformer/layer_0/rel_attn/seg_embed"] == 1.0
    assert factors["model/transformer/layer_0/rel_attn/q/kernel"] == 0.25
    assert factors["model/transformer/layer_1/ff/layer_1/kernel"] == 0.5
    assert factors["model/transformer/layer_2/ff/LayerNorm/gamma"] == 1.0


# ------------------------------------------------------------------------------ clipping, 2 replicas
def test_clip_threshold_with_two_replicas():
    """Replica 0's share of the global gradient is 1.0 per element, replica 1's 0.25, clip 0.3 x sqrt(size):
    global clip gives 0.3, per-replica clip 0.3 + 0.25, and float16 loss scaling the same as float32 (it
    used to clip each replica's share of the summed gradient, i.e. at 2 x clip: 0.6)."""
    out = subprocess.run([sys.executable, os.path.join(os.path.dirname(os.path.dirname(__file__)), "clip_probe.py")],
                         capture_output=True, text=True, timeout=600,
                         env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"})
    assert out.returncode == 0, out.stderr[-3000:]
    got = json.loads(out.stdout.strip().splitlines()[-1])
    share0, share1, clip_per_element = 1.0, 0.25, 0.3
    expected = {"global": clip_per_element,
                "per_replica": clip_per_element + share1,
                "global_float16": clip_per_element,
                "per_replica_float16": clip_per_element + share1}
    assert share0 + share1 > clip_per_element
    for key, want in expected.items():
        np.testing.assert_allclose(got[key]["update"], want, rtol=1e-5, err_msg=key)
        # Keras fit (Task.train_step) finishes its step with the same function
        np.testing.assert_allclose(got["fit_" + key]["update"], want, rtol=1e-5, err_msg="fit_" + key)
    # the reported gradient norm is the true (unscaled) one: global 1.25 x sqrt(size)
    np.testing.assert_allclose(got["global_float16"]["grad_norm"], got["global"]["grad_norm"], rtol=1e-5)
    np.testing.assert_allclose(got["global"]["grad_norm"], 1.25 * np.sqrt(got["size"]), rtol=1e-5)


# ------------------------------------------------------------------------------------ the model
def test_positional_dropout_draws_a_mask_per_example():
    rate = 0.5
    config = XLNetConfig(n_token=40, n_layer=1, d_model=16, n_head=2, d_head=8, d_inner=16, dropout=rate,
                         dropatt=0.0, bi_data=True)
    keras.utils.set_random_seed(1)
    backbone = XLNetPretrainer(config).backbone
    clean, per_example = backbone.positions(4, 6, 9, training=False)
    assert not per_example and clean.shape == (2, 15, 16)  # once per direction at inference
    dropped, per_example = backbone.positions(4, 6, 9, training=True)
    assert per_example and dropped.shape == (4, 15, 16)
    dropped, clean = dropped.numpy(), clean.numpy()
    # the original tiles the encoding over the batch (forward rows, then backward) and then drops out
    tiled = np.repeat(clean, 2, axis=0)
    kept = dropped != 0
    np.testing.assert_allclose(dropped[kept], tiled[kept] / (1 - rate), rtol=1e-6)
    assert abs(1 - kept.mean() - rate) < 0.05
    for i in range(4):
        for j in range(i + 1, 4):
            assert (kept[i] != kept[j]).mean() > 0.3, (i, j)  # independent masks: about 2p(1-p) differ


def test_per_example_positions_equal_shared_ones_without_dropout():
    """The per-example path (training with dropout) computes the same attention as the shared one."""
    config = XLNetConfig(n_token=40, n_layer=2, d_model=16, n_head=2, d_head=8, d_inner=16, dropout=0.0,
                         dropatt=0.0, bi_data=True)
    keras.utils.set_random_seed(2)
    backbone = XLNetPretrainer(config).backbone
    layer = backbone.xl_layers[0].rel_attn
    content = tf.random.normal([4, 6, 16])
    pos_emb, _ = backbone.positions(4, 6, 6, training=False)
    shared, _ = layer(content, pos_emb=pos_emb)
    per_example, _ = layer(content, pos_emb=tf.repeat(pos_emb, 2, axis=0), per_example_positions=True)
    np.testing.assert_allclose(per_example.numpy(), shared.numpy(), atol=1e-5)


def test_mask_emb_is_glorot_uniform_as_the_original():
    """TF1's default initializer for `[1, 1, d]`: uniform in +-sqrt(6 / (fan_in 1 + fan_out d))."""
    config = XLNetConfig(n_token=40, n_layer=1, d_model=512, n_head=2, d_head=8, d_inner=16)
    keras.utils.set_random_seed(4)
    values = XLNetPretrainer(config).backbone.mask_emb.numpy().ravel()
    limit = np.sqrt(6.0 / (1 + 512))
    assert np.abs(values).max() <= limit
    assert np.abs(values).max() > 0.9 * limit  # uniform over the whole range, not normal(0, 0.02)
    assert abs(values.std() - limit / np.sqrt(3)) < 0.1 * limit


def test_attn_summary_applies_dropatt_to_the_probabilities():
    keras.utils.set_random_seed(5)
    hidden = tf.random.normal([3, 7, 8])
    outs = {}
    for dropatt in (0.0, 0.5):
        summary = SequenceSummary(8, "attn", use_proj=False, dropout=0.0, dropatt=dropatt, n_head=2, d_head=4)
        summary.build()
        if dropatt:
            summary.set_weights(outs["weights"])
        outs[dropatt] = (summary(hidden, training=True).numpy(), summary(hidden, training=False).numpy())
        outs["weights"] = summary.get_weights()
        assert summary.get_config()["dropatt"] == dropatt
    np.testing.assert_allclose(outs[0.5][1], outs[0.0][1], atol=1e-6)  # inference: no dropout
    assert np.abs(outs[0.5][0] - outs[0.0][0]).max() > 1e-3  # training: the probabilities are dropped
    np.testing.assert_allclose(outs[0.0][0], outs[0.0][1], atol=1e-6)


def test_recipe_flag_files_state_their_modes():
    """Every recipe of the authors' runs names the optimizer semantics it reproduces."""
    flags_dir = os.path.join(data_fixtures.REPO_ROOT, "run", "flags")
    recipes = ["pretrain_base", "pretrain_large", "imdb", "yelp5", "mnli", "qqp", "qnli", "sst2", "cola",
               "mrpc", "rte", "stsb", "race", "squad_v1", "squad_v2"]
    for name in recipes:
        text = open(os.path.join(flags_dir, f"{name}.flags"), encoding="utf-8").read()
        assert "--adam_variant=original" in text, name
        assert "--clip_mode=per_replica" in text, name
        if "--lr_layer_decay_rate" in text and "--lr_layer_decay_rate=1.0" not in text:
            assert "--lr_layer_decay_mode=gradient" in text, name


# ------------------------------------------------------------------------------ clipping once
def _apply_once(gradient, clip=1.0):
    """training.apply_clipped_gradients on one variable [1, 2] with SGD (rate 1) whose global_clipnorm is `clip`
    -> (the variable after, the optimizer's global_clipnorm while it applied, after it, loss, norm)."""
    from xlnet_tf.training import loop as training

    variable = tf.Variable([1.0, 2.0])
    optimizer = keras.optimizers.SGD(learning_rate=1.0, global_clipnorm=clip)
    optimizer.build([variable])
    seen = []
    original = optimizer.apply

    def spy(grads, variables=None):
        seen.append(optimizer.global_clipnorm)
        return original(grads, variables)

    optimizer.apply = spy
    loss, norm = training.apply_clipped_gradients(optimizer, [variable], [tf.constant(gradient)],
                                                  tf.constant(5.0), 10.0)
    return variable.numpy(), seen, optimizer.global_clipnorm, float(loss), float(norm)


def test_gradients_are_clipped_once():
    """The step divides by the weight and clips itself; the optimizer's own global-norm clip (a second pass over
    every gradient) is off while it applies them, and back on after (a direct apply_gradients still clips)."""
    variable, seen, after, loss, norm = _apply_once([30.0, 40.0])  # global gradient (3, 4): norm 5 -> (0.6, 0.8)
    assert seen == [None] and after == 1.0
    np.testing.assert_allclose(variable, [0.4, 1.2], rtol=1e-6)
    assert loss == 0.5 and norm == pytest.approx(5.0)
    variable, _, _, _, norm = _apply_once([30.0, 40.0], clip=None)  # no clip: the plain global gradient
    np.testing.assert_allclose(variable, [-2.0, -2.0], rtol=1e-6)
    assert norm == pytest.approx(5.0)


def test_a_non_finite_gradient_norm_gives_a_nan_update_as_clip_by_global_norm():
    """As tf.clip_by_global_norm: a non-finite norm makes every clipped gradient NaN (a loss-scaling wrapper then
    skips the step), never a silent zero step."""
    variable, _, _, _, norm = _apply_once([np.inf, 1.0])
    assert np.isinf(norm) and np.isnan(variable).all()
