"""tied_embedding.tied_reads: the word embedding read once for the gathered rows and the tied head, with the
gradient of reading it twice, summed in place (no dense copy of the rows, no AddN of two whole tables)."""

import keras
import numpy as np
import pytest
import tensorflow as tf

from tests.parity_utils import TINY, random_inputs
from xlnet_tf.config import XLNetConfig
from xlnet_tf.layers import tied_embedding
from xlnet_tf.models import XLNetPretrainer

IDS = tf.constant([[1, 3, 3], [7, 1, 0]])  # repeated rows: their terms must add up


def _loss(rows_table, head_table, hidden):
    rows = tf.gather(rows_table, IDS)
    logits = tf.einsum("bd,nd->bn", tf.cast(hidden, head_table.dtype), head_table)
    return tf.reduce_sum(tf.sin(rows)) + tf.reduce_sum(tf.cos(tf.cast(logits, tf.float32)))


def _gradients(head_dtype, tied, compile_=None):
    table = keras.Variable(np.random.RandomState(0).normal(size=(9, 4)).astype(np.float32), autocast=False)
    hidden = tf.constant(np.random.RandomState(1).normal(size=(5, 4)).astype(np.float32))

    def step():
        with tf.GradientTape() as tape:
            if tied:
                rows_table, head_table = tied_embedding.tied_reads(table, head_dtype)
            else:
                rows_table, head_table = table, tf.cast(table, head_dtype)
            loss = _loss(rows_table, head_table, hidden)
        return loss, tape.gradient(loss, table.value)

    if compile_ is not None:
        step = tf.function(step, jit_compile=compile_)
    loss, grad = step()
    return float(loss), tf.convert_to_tensor(grad).numpy()


@pytest.mark.parametrize("compile_", [None, False, True])
@pytest.mark.parametrize("head_dtype", ["float32", "bfloat16"])
def test_values_and_gradient_equal_reading_the_table_twice(head_dtype, compile_):
    want_loss, want = _gradients(head_dtype, tied=False, compile_=compile_)
    loss, grad = _gradients(head_dtype, tied=True, compile_=compile_)
    assert loss == want_loss
    np.testing.assert_allclose(grad, want, rtol=1e-6, atol=1e-6)
    assert np.abs(grad[[1, 3, 7, 0]]).min() > 0  # the gathered rows have gradient of their own


def test_either_use_alone():
    table = tf.constant(np.arange(12, dtype=np.float32).reshape(4, 3))
    with tf.GradientTape(persistent=True) as tape:
        tape.watch(table)
        rows_table, head_table = tied_embedding.tied_reads(table, "float32")
        rows_only = tf.reduce_sum(tf.gather(rows_table, [2, 2]))
        head_only = tf.reduce_sum(head_table * 2.0)
    np.testing.assert_array_equal(tape.gradient(rows_only, table), [[0] * 3, [0] * 3, [2] * 3, [0] * 3])
    np.testing.assert_array_equal(tape.gradient(head_only, table), np.full((4, 3), 2.0))


def test_the_pretrainers_table_gradient_is_summed_in_place(rng):
    """The pretrainer reads its table through tied_reads: in the traced training gradient no op makes the gathered
    rows a dense table (UnsortedSegmentSum) or adds two whole tables (AddN); a scatter adds the rows."""
    config = XLNetConfig(**{**TINY, "dropout": 0.0, "dropatt": 0.0})
    model = XLNetPretrainer(config, dtype="mixed_bfloat16")
    inputs = random_inputs(rng, 2, 8, config.n_token, n_pred=3)
    inputs["target_ids"] = rng.randint(0, config.n_token, (2, 3))
    inputs["target_mask"] = inputs["target_mapping"].sum(-1)
    features = {k: tf.constant(v) for k, v in inputs.items()}

    @tf.function
    def gradient(features):
        with tf.GradientTape() as tape:
            loss = model.task_loss(features, model(features, training=True))
        return tape.gradient(loss, model.backbone.word_embedding)

    graph = gradient.get_concrete_function(features).graph
    table_shape = [config.n_token, config.d_model]
    table_sized = {op.type for op in graph.get_operations() if op.outputs and op.outputs[0].shape == table_shape}
    assert "ScatterNdNonAliasingAdd" in table_sized  # in place (TensorScatterAdd would copy the table first)
    assert not table_sized & {"UnsortedSegmentSum", "AddN", "AddV2", "TensorScatterAdd"}, table_sized
    # the whole table is cast once (for the head), not also for the gathered rows (Keras casts a layer's float inputs)
    casts = [op for op in graph.get_operations() if op.type == "Cast" and op.outputs[0].shape == table_shape
             and op.outputs[0].dtype == tf.bfloat16]
    assert len(casts) == 1, [op.name for op in casts]
    grad = gradient(features)
    assert isinstance(grad, tf.Tensor) and grad.dtype == tf.float32
    assert grad.shape == (config.n_token, config.d_model)


@pytest.mark.parametrize("policy", ["float32", "mixed_bfloat16"])
def test_the_pretrainers_gradients_equal_reading_the_table_twice(rng, monkeypatch, policy):
    """Every gradient of a pretrainer's training loss (mems, repeated ids) equals the one of reading the table twice."""
    config = XLNetConfig(**{**TINY, "dropout": 0.0, "dropatt": 0.0, "mem_len": 4})
    model = XLNetPretrainer(config, dtype=policy)
    inputs = random_inputs(rng, 2, 8, config.n_token, n_pred=3)
    inputs["input_ids"][:, :4] = inputs["input_ids"][:, 4:]  # repeated rows
    inputs["target_ids"] = rng.randint(0, config.n_token, (2, 3))
    inputs["target_mask"] = inputs["target_mapping"].sum(-1)
    features = {k: tf.constant(v) for k, v in inputs.items()}
    mems = [tf.constant(rng.randn(2, 4, config.d_model).astype(np.float32)) for _ in range(config.n_layer)]

    def gradients():
        with tf.GradientTape() as tape:
            loss = model.task_loss(features, model(features, mems=mems, training=True))
        return [tf.convert_to_tensor(g).numpy() for g in tape.gradient(loss, model.trainable_variables)]

    tied = gradients()
    monkeypatch.setattr(tied_embedding, "tied_reads", lambda table, dtype: (table, tf.cast(table, dtype)))
    twice = gradients()
    for got, want, variable in zip(tied, twice, model.trainable_variables):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-7, err_msg=variable.path)


def test_inference_reads_the_table_plainly(rng):
    """Outside training the pretrainer records no custom gradient around its table (a SavedModel of the call would
    keep one, recorded for a dense gradient, that a caller differentiating the loaded model meets with rows)."""
    config = XLNetConfig(**{**TINY, "dropout": 0.0, "dropatt": 0.0})
    model = XLNetPretrainer(config)
    inputs = random_inputs(rng, 2, 8, config.n_token, n_pred=3)
    features = {k: tf.constant(v) for k, v in inputs.items()}
    table_shape = [config.n_token, config.d_model]
    for training, custom in ((False, 0), (True, 1)):
        graph = tf.function(lambda f: model(f, training=training)["logits"]).get_concrete_function(features).graph
        ops = [op for op in graph.get_operations() if op.type == "IdentityN" and op.outputs[0].shape == table_shape]
        assert len(ops) == custom, training
