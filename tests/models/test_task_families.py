"""Every task family through the shared harness (tests/task_harness.py): build tiny, fit a step, predict, `.keras`
round trip, export and reload, the outputs compared at each hand-over."""

import json
import os

import keras
import numpy as np
import pytest
import tensorflow as tf

from tests import data_fixtures, task_harness

FAMILIES = {f.name: f for f in task_harness.FAMILIES}


@pytest.fixture(scope="module")
def fitted():
    """name -> (model after one fit step, features, its predictions, weights before the step)."""
    out = {}
    for family in task_harness.FAMILIES:
        keras.utils.set_random_seed(0)
        rng = np.random.RandomState(0)
        model = family.build(task_harness.tiny_config())
        x, y = family.data(rng)
        model.compile(optimizer=keras.optimizers.Adam(1e-2))
        before = [np.array(w) for w in model.trainable_weights]
        history = model.fit(x, y, batch_size=task_harness.BATCH, epochs=1, verbose=0, shuffle=False).history
        out[family.name] = (model, x, model.predict(x, batch_size=task_harness.BATCH, verbose=0), before,
                            history["loss"][0])
    return out


def _compared(family, outputs):
    return {k: np.asarray(outputs[k]) for k in family.compared}


def test_the_harness_covers_every_task_model():
    from xlnet_tf.models import TASK_MODELS
    from xlnet_tf.serving import SERVING_MODULES

    exported = {f.export_task for f in task_harness.FAMILIES}
    assert exported == set(TASK_MODELS) - {"embedding"}  # embedding: a classifier's backbone, exported below
    assert exported <= set(SERVING_MODULES)
    built = {type(f.build(task_harness.tiny_config())) for f in task_harness.FAMILIES}
    assert built == set(TASK_MODELS.values())


@pytest.mark.parametrize("name", sorted(FAMILIES))
def test_one_fit_step_moves_the_weights_and_predict_gives_finite_outputs(fitted, name):
    model, x, predicted, before, loss = fitted[name]
    assert np.isfinite(loss)
    moved = [np.abs(np.array(w) - b).max() for w, b in zip(model.trainable_weights, before)]
    assert max(moved) > 0, "fit changed no weight"
    for key, value in _compared(FAMILIES[name], predicted).items():
        assert value.shape[0] == task_harness.BATCH and np.all(np.isfinite(value)), key


@pytest.mark.parametrize("name", sorted(FAMILIES))
def test_a_keras_file_restores_the_same_model(fitted, tmp_path, name):
    model, x, predicted, _, _ = fitted[name]
    path = str(tmp_path / f"{name}.keras")
    model.save(path)
    restored = keras.models.load_model(path)
    assert type(restored) is type(model) and restored.get_config() == model.get_config()
    again = restored.predict(x, batch_size=task_harness.BATCH, verbose=0)
    for key, value in _compared(FAMILIES[name], predicted).items():
        np.testing.assert_allclose(np.asarray(again[key]), value, atol=1e-5, err_msg=key)


@pytest.mark.parametrize("name", sorted(FAMILIES))
def test_an_export_reloaded_answers_from_ids_as_the_model(fitted, tmp_path, name):
    from xlnet_tf import serving

    family = FAMILIES[name]
    model, x, predicted, _, _ = fitted[name]
    path = serving.export(model, family.export_task, data_fixtures.tiny_spm(), str(tmp_path / "export"), 1,
                          task_harness.LENGTH, **family.export_options)
    assert os.path.basename(path) == "1"
    loaded = tf.saved_model.load(path)
    assert {"serving_default", "from_ids", "features"} <= set(loaded.signatures)
    served = loaded.signatures["from_ids"](**{k: tf.constant(x[k]) for k in family.id_inputs})
    for key, value in _compared(family, predicted).items():
        got = served[key].numpy()
        if name == "tagger":  # the export returns the positions' logits as the model
            got = got.reshape(value.shape)
        np.testing.assert_allclose(got, value, atol=1e-4, err_msg=key)


@pytest.mark.parametrize("name", sorted(FAMILIES))
def test_a_bfloat16_export_answers_as_the_float32_model_to_bfloat16_rounding(fitted, tmp_path, name):
    """`--export_dtype=bfloat16`'s model (Keras mixed_bfloat16) of every task: its export's float outputs within
    bfloat16's rounding of the float32 model's (indices, which can tie, are left out)."""
    from xlnet_tf import serving

    family = FAMILIES[name]
    model, x, predicted, _, _ = fitted[name]
    twin = family.build(task_harness.tiny_config(), dtype="mixed_bfloat16")
    twin.predict(x, batch_size=task_harness.BATCH, verbose=0)  # builds its weights
    twin.set_weights(model.get_weights())
    path = serving.export(twin, family.export_task, data_fixtures.tiny_spm(), str(tmp_path / "export"), 1,
                          task_harness.LENGTH, **family.export_options)
    with open(os.path.join(path, "assets.extra", "xlnet_export.json"), encoding="utf-8") as f:
        recorded = json.load(f)
    assert recorded["dtype_policy"] == "mixed_bfloat16" and recorded["weights_dtype"] == "bfloat16"
    loaded = tf.saved_model.load(path)
    # the weights stored rounded once (serving/half_weights.py), LayerNorm's in float32
    stored = {("LayerNorm" in v.name, v.dtype) for v in loaded.model_variables}
    assert stored == {(False, tf.bfloat16), (True, tf.float32)}, stored
    served = loaded.signatures["from_ids"](**{k: tf.constant(x[k]) for k in family.id_inputs})
    for key, value in _compared(family, predicted).items():
        if key.endswith("_index"):
            continue
        got = served[key].numpy().reshape(value.shape)
        assert got.dtype == np.float32, key
        np.testing.assert_allclose(got, value, atol=0.03 * (1 + np.abs(value).max()), err_msg=key)


@pytest.mark.parametrize("name", sorted(FAMILIES))
def test_the_half_weights_twin_of_a_mixed_model_computes_exactly_its_outputs(fitted, name):
    """serving/half_weights.rounded_once: every task's mixed_bfloat16 model (weights after a fit step, so the
    LayerNorm parameters are no bfloat16 values) and its pure bfloat16 twin give the same outputs, bit for bit; a
    float32 model is its own."""
    from xlnet_tf.serving import half_weights

    family = FAMILIES[name]
    model, x, _, _, _ = fitted[name]
    assert half_weights.rounded_once(model) is model
    mixed = family.build(task_harness.tiny_config(), dtype="mixed_bfloat16")
    mixed.predict(x, batch_size=task_harness.BATCH, verbose=0)  # builds its weights
    mixed.set_weights(model.get_weights())
    twin = half_weights.rounded_once(mixed)
    assert type(twin) is type(mixed) and twin.dtype_policy.name == "bfloat16"
    norms = [w for w in twin.weights if "LayerNorm" in w.path]
    assert norms and all(w.dtype == "float32" for w in norms)
    assert all(w.dtype == "bfloat16" for w in twin.weights if "LayerNorm" not in w.path)
    assert any(np.any(np.asarray(w.value) != np.asarray(tf.cast(tf.cast(w.value, tf.bfloat16), tf.float32)))
               for w in norms)  # the test would see LayerNorm parameters rounded
    features = {k: tf.constant(v) for k, v in x.items()}
    ours, theirs = mixed(features), twin(features)
    for key in family.compared:
        np.testing.assert_array_equal(np.asarray(theirs[key]), np.asarray(ours[key]), err_msg=key)
