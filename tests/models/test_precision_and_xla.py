"""Mixed precision forwards stay finite and close to float32; train steps compile with XLA."""

import numpy as np
import pytest
import tensorflow as tf

from tests.parity_utils import TINY, random_inputs
from xlnet_tf.config import XLNetConfig
from xlnet_tf.models import XLNetPretrainer

CONFIG = XLNetConfig(**{**TINY, "dropout": 0.0, "dropatt": 0.0, "mem_len": 4, "reuse_len": 4})


def _features(rng, batch=2, seq_len=8, n_pred=3):
    inputs = random_inputs(rng, batch, seq_len, CONFIG.n_token, n_pred=n_pred, left_pad=[0, 3])
    inputs["target_ids"] = rng.randint(0, CONFIG.n_token, (batch, n_pred))
    inputs["target_mask"] = inputs["target_mapping"].sum(-1)
    return inputs


@pytest.mark.parametrize("policy", ["mixed_bfloat16", "mixed_float16"])
def test_mixed_precision_forward_is_finite_and_close(rng, policy):
    ref = XLNetPretrainer(CONFIG)
    model = XLNetPretrainer(CONFIG, dtype=policy)
    model.set_weights(ref.get_weights())
    features = _features(rng)
    mems = [rng.randn(2, 4, CONFIG.d_model).astype(np.float32) for _ in range(CONFIG.n_layer)]
    expected = ref(features, mems=mems)
    out = model(features, mems=mems)
    assert model.backbone.word_embedding.dtype == "float32"
    assert out["content"].dtype == tf.as_dtype(policy.split("_")[1])
    assert out["logits"].dtype == tf.float32
    for key in ("logits", "content", "query"):
        value = tf.cast(out[key], tf.float32).numpy()
        assert np.all(np.isfinite(value)), key
        scale = np.abs(expected[key].numpy()).max()
        tol = 0.06 if policy == "mixed_bfloat16" else 0.01
        assert np.abs(value - expected[key].numpy()).max() <= tol * max(scale, 1.0), key
    loss = model.task_loss(features, out)
    assert np.isfinite(loss.numpy())


def test_train_step_compiles_with_xla_and_matches_eager(rng):
    model = XLNetPretrainer(CONFIG)
    features = {k: tf.constant(v) for k, v in _features(rng).items()}
    mems = [tf.zeros([2, 4, CONFIG.d_model]) for _ in range(CONFIG.n_layer)]

    def step(features, mems):
        with tf.GradientTape() as tape:
            out = model(features, mems=mems, training=True)
            loss = model.task_loss(features, out)
        grads = tape.gradient(loss, model.trainable_variables)
        return loss, tf.linalg.global_norm(grads), out["new_mems"]

    eager_loss, eager_norm, _ = step(features, mems)
    xla = tf.function(step, jit_compile=True)
    loss, norm, new_mems = xla(features, mems)
    assert abs(float(loss) - float(eager_loss)) < 1e-5
    assert abs(float(norm) - float(eager_norm)) < 1e-4 * max(1.0, float(eager_norm))
    assert all(m.shape == (2, 4, CONFIG.d_model) for m in new_mems)
    # every gradient is defined (no variable silently disconnected)
    with tf.GradientTape() as tape:
        loss = model.task_loss(features, model(features, mems=mems, training=True))
    grads = tape.gradient(loss, model.trainable_variables)
    assert all(g is not None for g in grads)
    # the concrete function is fully static
    concrete = xla.get_concrete_function(features, mems)
    assert all(t.shape.is_fully_defined() for t in tf.nest.flatten(concrete.structured_outputs))
