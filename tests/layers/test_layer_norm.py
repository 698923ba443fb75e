"""LayerNorm (layers/layer_norm.py): Keras's LayerNormalization, with its training call on the native op
(layers/native/layer_norm.cc) where it can; the same numbers as the Keras form, and the Keras form everywhere else."""

import shutil
import warnings

import numpy as np
import pytest
import tensorflow as tf

from xlnet_tf.layers.layer_norm import LayerNorm
from xlnet_tf.layers.native import library

needs_compiler = pytest.mark.skipif(shutil.which("g++") is None, reason="no C++ compiler: the native ops cannot build")
ULP_BF16 = 2.0 ** -7  # bfloat16's relative spacing


def _layer(policy, d, rng):
    layer = LayerNorm(epsilon=1e-12, dtype=policy)
    layer.build((None, d))
    layer.gamma.assign(rng.randn(d).astype(np.float32) * 0.2 + 1.0)
    layer.beta.assign(rng.randn(d).astype(np.float32) * 0.2)
    return layer


def _run(layer, x, upstream, training, mode="graph"):
    def run(x):
        with tf.GradientTape() as tape:
            tape.watch(x)
            y = layer(x, training=training)
        return (y, *tape.gradient(y, [x, layer.gamma, layer.beta], output_gradients=tf.cast(upstream, y.dtype)))

    if mode != "eager":
        run = tf.function(run, jit_compile=mode == "jit_compile")
    return [tf.cast(t, tf.float64).numpy() for t in run(x)]


def _exact(x, gamma, beta, upstream, eps=1e-12):
    """float64 layer norm and its gradients."""
    mean = x.mean(-1, keepdims=True)
    rstd = 1.0 / np.sqrt(((x - mean) ** 2).mean(-1, keepdims=True) + eps)
    xhat = (x - mean) * rstd
    g = upstream * gamma
    dx = rstd * (g - g.mean(-1, keepdims=True) - xhat * (g * xhat).mean(-1, keepdims=True))
    rows = tuple(range(x.ndim - 1))
    return xhat * gamma + beta, dx, (upstream * xhat).sum(rows), upstream.sum(rows)


def _graph_ops(layer, x, training, jit_compile=False):
    function = tf.function(lambda x: layer(x, training=training), jit_compile=jit_compile)
    return {op.type for op in function.get_concrete_function(x).graph.get_operations()}


@needs_compiler
def test_the_native_ops_build_here():
    assert library.ops() is not None


@needs_compiler
@pytest.mark.parametrize("policy", ["float32", "mixed_bfloat16"])
@pytest.mark.parametrize("shape", [(3, 50, 768), (2, 7, 33), (17, 40)])
@pytest.mark.parametrize("mode", ["eager", "graph"])
def test_training_values_and_gradients_are_the_keras_forms(policy, shape, mode, rng):
    layer = _layer(policy, shape[-1], rng)
    x = tf.constant((rng.randn(*shape) * 3 + 1).astype(np.float32))
    upstream = tf.constant(rng.randn(*shape).astype(np.float32))
    native = _run(layer, x, upstream, training=True, mode=mode)
    keras_form = _run(layer, x, upstream, training=False, mode=mode)
    half = policy == "mixed_bfloat16"
    # what the layer computes from: its input as given (the layer does not autocast it), the upstream gradient in
    # the output's (compute) dtype
    x64 = x.numpy().astype(np.float64)
    up64 = tf.cast(tf.cast(upstream, layer.compute_dtype), tf.float64).numpy()
    exact = _exact(x64, layer.gamma.numpy().astype(np.float64), layer.beta.numpy().astype(np.float64), up64)
    for name, ours, theirs, truth in zip(["y", "dx", "dgamma", "dbeta"], native, keras_form, exact):
        scale = np.abs(truth).max()
        if name == "y" and half:  # one rounding to bfloat16: one unit of its last place apart at most
            np.testing.assert_allclose(ours, theirs, rtol=ULP_BF16, atol=ULP_BF16 * scale, err_msg=name)
            np.testing.assert_allclose(ours, truth, rtol=ULP_BF16, atol=ULP_BF16 * scale, err_msg=name)
        else:  # float32 throughout: to float32 rounding of the float64 values
            np.testing.assert_allclose(ours, truth, rtol=0, atol=2e-5 * scale, err_msg=name)
            if not half:
                np.testing.assert_allclose(ours, theirs, rtol=0, atol=2e-5 * scale, err_msg=name)


@needs_compiler
def test_only_a_training_call_outside_xla_takes_the_op(rng):
    layer = _layer("mixed_bfloat16", 16, rng)
    x = tf.constant(rng.randn(4, 16).astype(np.float32))
    assert "XlnetTfLayerNorm" in _graph_ops(layer, x, training=True)
    for training in (False, None):  # inference and export: a graph TF Serving can run
        assert not any(t.startswith("XlnetTf") for t in _graph_ops(layer, x, training=training))
    assert not any(t.startswith("XlnetTf") for t in _graph_ops(layer, x, training=True, jit_compile=True))
    float16 = _layer("float16", 16, rng)  # a float16 input: Keras's form
    assert not any(t.startswith("XlnetTf") for t in _graph_ops(float16, tf.cast(x, tf.float16), training=True))


@needs_compiler
def test_a_jit_compiled_training_call_runs_the_keras_form(rng):
    layer = _layer("float32", 24, rng)
    x = tf.constant(rng.randn(5, 24).astype(np.float32))
    upstream = tf.constant(rng.randn(5, 24).astype(np.float32))
    compiled = _run(layer, x, upstream, training=True, mode="jit_compile")
    truth = _exact(x.numpy().astype(np.float64), layer.gamma.numpy(), layer.beta.numpy(), upstream.numpy())
    for ours, exact in zip(compiled, truth):
        np.testing.assert_allclose(ours, exact, rtol=0, atol=2e-5 * np.abs(exact).max())


@needs_compiler
def test_the_gradient_repeats_to_the_bit(rng):
    layer = _layer("mixed_bfloat16", 96, rng)
    x = tf.constant(rng.randn(300, 96).astype(np.float32))
    upstream = tf.constant(rng.randn(300, 96).astype(np.float32))
    first, second = _run(layer, x, upstream, True), _run(layer, x, upstream, True)
    for a, b in zip(first, second):
        np.testing.assert_array_equal(a, b)


def test_switched_off_or_unbuildable_the_keras_form_runs(monkeypatch, rng):
    layer = _layer("float32", 8, rng)
    x = tf.constant(rng.randn(3, 8).astype(np.float32))
    monkeypatch.setattr(library, "_STATE", {})
    monkeypatch.setenv(library.SWITCH, "0")
    assert library.ops() is None
    assert not any(t.startswith("XlnetTf") for t in _graph_ops(layer, x, training=True))

    monkeypatch.setattr(library, "_STATE", {})
    monkeypatch.setenv(library.SWITCH, "1")
    monkeypatch.setenv("CXX", "no-such-compiler-here")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert library.ops() is None
    assert any("no C++ compiler 'no-such-compiler-here'" in str(w.message) for w in caught)
    y = layer(x, training=True).numpy()
    np.testing.assert_allclose(y, layer(x, training=False).numpy(), rtol=0, atol=0)


@needs_compiler
def test_a_build_is_cached_by_its_sources_and_flags(monkeypatch, tmp_path):
    monkeypatch.setenv(library.CACHE, str(tmp_path))
    monkeypatch.setattr(library, "SOURCES", ("layer_norm.cc",))  # one source: a shorter build
    path = library.library_path()
    assert path.startswith(str(tmp_path)) and path.endswith(".so")
    assert library.library_path() == path  # built once
    assert [p.name for p in tmp_path.iterdir()] == [path.rsplit("/", 1)[1]]  # no partial build left behind
    monkeypatch.setattr(library, "_cpu_flags", lambda: ["-DXLNET_TF_TEST_FLAG"])
    assert library.library_path() != path  # other flags: another build


@needs_compiler
@pytest.mark.parametrize("policy", ["float32", "mixed_bfloat16"])
def test_a_backbone_trains_on_the_same_gradients(policy, monkeypatch):
    """The two-stream backbone (every layer's two layer norms on the op; memories, remat) against the Keras form."""
    import keras

    from xlnet_tf.backbone import XLNetBackbone
    from xlnet_tf.config import XLNetConfig

    keras.utils.set_random_seed(0)
    config = XLNetConfig(n_layer=2, d_model=32, n_head=2, d_head=16, d_inner=64, n_token=50, mem_len=4,
                         dropout=0.0, dropatt=0.0)
    with _policy(policy):
        backbone = XLNetBackbone(config)
        backbone.build()
    rng = np.random.RandomState(0)
    ids = tf.constant(rng.randint(0, 50, [2, 6]))
    perm = tf.constant(rng.rand(2, 6, 6) < 0.3, tf.float32)
    mapping = tf.one_hot([[1, 3], [2, 5]], 6)
    mems = [tf.constant(rng.randn(2, 4, 32), tf.float32) for _ in range(2)]

    def loss_and_grads(remat):
        backbone.remat = remat

        @tf.function
        def step():
            with tf.GradientTape() as tape:
                out = backbone(ids, perm_mask=perm, target_mapping=mapping, mems=mems, training=True)
                loss = tf.reduce_sum(tf.cast(out["content"], tf.float32) ** 2) + tf.reduce_sum(
                    tf.cast(out["query"], tf.float32) ** 3)
            grads = tape.gradient(loss, backbone.trainable_variables)
            return [loss] + [tf.zeros_like(v) if g is None else tf.convert_to_tensor(g)
                             for v, g in zip(backbone.trainable_variables, grads)]

        graph = step.get_concrete_function().graph.as_graph_def()
        types = {n.op for n in graph.node} | {n.op for f in graph.library.function for n in f.node_def}
        return [t.numpy() for t in step()], types

    native, types = loss_and_grads(remat=False)
    assert {"XlnetTfLayerNorm", "XlnetTfLayerNormGrad"} <= types
    rematerialized, _ = loss_and_grads(remat=True)
    monkeypatch.setattr(LayerNorm, "_takes_native_op", lambda self, inputs, training: False)
    keras_form, keras_types = loss_and_grads(remat=False)
    assert not any(t.startswith("XlnetTf") for t in keras_types)
    tolerance = 1e-4 if policy == "float32" else 3e-2
    for ours, again, theirs in zip(native, rematerialized, keras_form):
        scale = max(np.abs(theirs).max(), 1e-6)
        np.testing.assert_allclose(ours, theirs, rtol=0, atol=tolerance * scale)
        np.testing.assert_array_equal(ours, again)


def _policy(name):
    import contextlib

    import keras

    @contextlib.contextmanager
    def scope():
        saved = keras.config.dtype_policy()
        keras.config.set_dtype_policy(name)
        try:
            yield
        finally:
            keras.config.set_dtype_policy(saved)

    return scope()


@needs_compiler
def test_a_float32_input_under_a_mixed_policy_is_normalized_from_float32(rng):
    """Keras's LayerNormalization does not autocast its input: a float32 input is normalized in float32 and the result
    rounded once; the op must not round the input first (large offsets: two places would differ by whole units)."""
    layer = _layer("mixed_bfloat16", 64, rng)
    x = tf.constant((rng.randn(6, 64) * 0.01 + 300.0).astype(np.float32))
    native, keras_form = (tf.cast(layer(x, training=t), tf.float32).numpy() for t in (True, False))
    assert layer(x, training=True).dtype == tf.bfloat16
    np.testing.assert_allclose(native, keras_form, rtol=ULP_BF16, atol=ULP_BF16 * np.abs(keras_form).max())


@needs_compiler
def test_a_second_derivative_of_the_op_says_how_to_get_one(rng):
    layer = _layer("float32", 8, rng)
    x = tf.constant(rng.randn(3, 8).astype(np.float32))
    with pytest.raises(NotImplementedError, match="XLNET_TF_NATIVE=0"):
        with tf.GradientTape() as outer:
            outer.watch(x)
            with tf.GradientTape() as inner:
                inner.watch(x)
                y = tf.reduce_sum(layer(x, training=True) ** 2)
            g = inner.gradient(y, x)
            total = tf.reduce_sum(g * g)
        outer.gradient(total, x)
