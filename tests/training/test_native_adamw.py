"""XLNetAdamW.fused (layers/native/adamw.cc): one native op per weight computes what update_step's TensorFlow ops
compute, to the bit, for every variant, with decay, multipliers, bfloat16 gradients, a gathered table's rows and the
weights' bfloat16 copies; and the Trainer takes it where its update was the compiled one."""

import shutil

import keras
import numpy as np
import pytest
import tensorflow as tf

from xlnet_tf.layers.native import library
from xlnet_tf.training import optimization

pytestmark = pytest.mark.skipif(shutil.which("g++") is None, reason="no C++ compiler: the native ops cannot build")


class _Copies:
    """A stand-in for precision.HalfCopies: `get(variable)` -> its bfloat16 copy."""

    def __init__(self, pairs):
        self.pairs = {id(v): c for v, c in pairs}

    def get(self, variable):
        return self.pairs.get(id(variable))


def _setup(variant, rng, decay=True, multipliers=False):
    shapes = {"table": (30, 6), "kernel": (6, 5), "bias": (5,)}
    variables = {k: keras.Variable(rng.randn(*s).astype(np.float32), name=k) for k, s in shapes.items()}
    opt = optimization.XLNetAdamW(
        1e-2, weight_decay_rate=0.05 if decay else 0.0, epsilon=1e-6, adam_variant=variant,
        decay_paths=[variables["kernel"].path, variables["table"].path],
        lr_multipliers={variables["kernel"].path: 0.5} if multipliers else None,
        grad_multipliers={variables["bias"].path: 0.25} if multipliers else None)
    opt.build(list(variables.values()))
    return variables, opt


def _gradients(variables, rng, step, dtype):
    table = variables["table"]
    indices = tf.constant(np.r_[rng.randint(0, 30, 7), [0, 0, 29]], tf.int32)  # repeats, the first and last rows
    rows = tf.constant(rng.randn(10, 6).astype(np.float32) * (step + 1))
    return [tf.IndexedSlices(rows, indices, tf.constant(table.shape)),
            tf.cast(tf.constant(rng.randn(6, 5).astype(np.float32)), dtype),
            tf.cast(tf.constant(rng.randn(5).astype(np.float32) * 1e-3), dtype)]


def _apply(opt, variables, grads, factor, fused, copies=None):
    """As loop.apply_clipped_gradients hands them over: fused, dense gradients unscaled; otherwise scaled in float32."""
    from xlnet_tf.training import gradient_rows

    pairs = list(zip(grads, variables.values()))
    if fused:
        grads = [gradient_rows.scaled(g, factor) if isinstance(g, tf.IndexedSlices) else g for g, _ in pairs]
        with opt.fused(tf.constant(factor), copies):
            opt.apply_gradients(zip(grads, variables.values()))
    else:
        grads = [gradient_rows.scaled(tf.cast(g, v.dtype), factor) for g, v in pairs]
        opt.apply_gradients(zip(grads, variables.values()))
        if copies is not None:
            for v in variables.values():
                if copies.get(v) is not None:
                    copies.get(v).assign(tf.cast(v, tf.bfloat16))


@pytest.mark.parametrize("variant", optimization.ADAM_VARIANTS)
@pytest.mark.parametrize("dtype", [tf.float32, tf.bfloat16])
@pytest.mark.parametrize("decay,multipliers", [(True, False), (False, True)])
def test_the_fused_update_is_update_steps_to_the_bit(variant, dtype, decay, multipliers):
    assert library.ops() is not None
    runs = {}
    for fused in (False, True):
        rng = np.random.RandomState(0)
        variables, opt = _setup(variant, rng, decay, multipliers)
        copy = tf.Variable(tf.cast(variables["kernel"], tf.bfloat16))
        copies = _Copies([(variables["kernel"], copy)])
        step = tf.function(lambda grads, factor: _apply(opt, variables, grads, factor, fused, copies))
        for i in range(3):
            step(_gradients(variables, rng, i, dtype), 0.7 if i else 1.3)
        runs[fused] = [v.numpy() for v in variables.values()] + [v.numpy() for v in opt.variables] + [copy.numpy()]
    assert len(runs[True]) == len(runs[False])
    for plain, fused in zip(runs[False], runs[True]):
        np.testing.assert_array_equal(fused, plain)
    kernel_before = np.random.RandomState(0)  # the weights moved (the test compares updates, not two no-ops)
    assert not np.array_equal(runs[True][1], _setup(variant, kernel_before, decay, multipliers)[0]["kernel"].numpy())


def test_a_read_before_the_update_keeps_its_value():
    variables, opt = _setup("standard", np.random.RandomState(1))
    kernel = variables["kernel"]
    grads = _gradients(variables, np.random.RandomState(2), 0, tf.float32)

    @tf.function
    def step():
        before = tf.identity(kernel.value)
        with opt.fused(tf.constant(1.0)):
            opt.apply_gradients(zip(grads, variables.values()))
        with tf.control_dependencies([kernel.value]):
            return before * 1.0

    start = kernel.numpy()
    np.testing.assert_array_equal(step().numpy(), start)
    assert not np.array_equal(kernel.numpy(), start)


def test_refusals_name_what_is_wrong():
    ops = library.ops()
    w = tf.Variable(tf.zeros([4, 3]))
    m, v = tf.Variable(tf.zeros([4, 3])), tf.Variable(tf.zeros([4, 3]))
    attrs = dict(beta_1=0.9, one_minus_beta_1=0.1, beta_2=0.999, one_minus_beta_2=0.001, epsilon=1e-6,
                 weight_decay=0.0, adam_variant=0, copy=[])
    with pytest.raises(tf.errors.InvalidArgumentError, match="the gradient must have the variable's shape"):
        ops.xlnet_tf_adam_w(w.handle, m.handle, v.handle, tf.zeros([3, 4]), 1.0, 0.1, 0.1, 0.1, **attrs)
    with pytest.raises(tf.errors.InvalidArgumentError, match="out of range"):
        ops.xlnet_tf_adam_w_rows(w.handle, m.handle, v.handle, tf.constant([4]), tf.zeros([1, 3]), 1.0, 0.1, 0.1,
                                 0.1, **attrs)
    with pytest.raises(tf.errors.InvalidArgumentError, match="adam_variant 0, 1 or 2"):
        ops.xlnet_tf_adam_w(w.handle, m.handle, v.handle, tf.zeros([4, 3]), 1.0, 0.1, 0.1, 0.1,
                            **{**attrs, "adam_variant": 3})
    with pytest.raises(tf.errors.InvalidArgumentError, match="must be four variables"):  # not a hang
        ops.xlnet_tf_adam_w(w.handle, w.handle, v.handle, tf.zeros([4, 3]), 1.0, 0.1, 0.1, 0.1, **attrs)
    copy = tf.Variable(tf.zeros([4, 3]))  # not bfloat16
    with pytest.raises(tf.errors.InvalidArgumentError, match="the copy must be bfloat16"):
        ops.xlnet_tf_adam_w(w.handle, m.handle, v.handle, tf.zeros([4, 3]), 1.0, 0.1, 0.1, 0.1,
                            **{**attrs, "copy": [copy.handle]})


def test_fusable_only_with_the_ops(monkeypatch):
    variables, opt = _setup("standard", np.random.RandomState(0))
    assert optimization.fusable(opt)
    assert not optimization.fusable(keras.optimizers.Adam())
    monkeypatch.setattr(library, "_STATE", {"ops": None})
    assert not optimization.fusable(opt)


@pytest.mark.parametrize("dtype", ["mixed_bfloat16", "float32"])
def test_the_trainer_takes_the_native_update_and_trains_as_the_compiled_one(tmp_path, monkeypatch, dtype):
    """`--xla_clustering=fusible` on one replica: the update is the native ops where they are built, with the same
    losses, norms and weights over three steps as the XLA-compiled update (a different program: equal to rounding)."""
    from tests.training.test_half_copies import _same_run, _trainer

    native = _trainer(tmp_path, "native", dtype=dtype)
    assert native.native_update and native.compiled_update
    native_run = ([(h["loss"], h["grad_norm"]) for h in native.train()], native.model.get_weights())
    monkeypatch.setattr(optimization, "fusable", lambda optimizer: False)
    compiled = _trainer(tmp_path, "compiled", dtype=dtype)
    assert compiled.compiled_update and not compiled.native_update
    compiled_run = ([(h["loss"], h["grad_norm"]) for h in compiled.train()], compiled.model.get_weights())
    _same_run(native_run, compiled_run)
    moved = [not np.array_equal(a, b) for a, b in zip(native_run[1], _trainer(tmp_path, "fresh").model.get_weights())]
    assert sum(moved) > len(moved) // 2


def test_inside_an_xla_program_the_fused_update_refuses():
    variables, opt = _setup("standard", np.random.RandomState(0))
    grads = _gradients(variables, np.random.RandomState(1), 0, tf.float32)

    @tf.function(jit_compile=True)
    def step():
        with opt.fused(tf.constant(1.0)):
            opt.apply_gradients(zip(grads[1:], list(variables.values())[1:]))

    with pytest.raises(RuntimeError, match="inside an XLA program"):
        step()


def _bits(a):
    a = np.asarray(a)
    return a.view(f"u{a.itemsize}")


def test_a_table_row_without_gradient_decays_as_the_plain_update_to_the_sign_of_zero():
    """A row the batch did not gather: m = beta_1 * m exactly (a -0.0 stays -0.0, as TensorFlow's ops leave it)."""
    runs = {}
    for fused in (False, True):
        variables, opt = _setup("standard", np.random.RandomState(0))
        table = variables["table"]
        index = opt._get_variable_index(table)
        start = np.full(table.shape, -0.0, np.float32)
        start[::2] = -1e-3
        opt._m[index].assign(start)
        grads = _gradients(variables, np.random.RandomState(1), 0, tf.float32)
        tf.function(lambda: _apply(opt, variables, grads, 1.0, fused))()
        runs[fused] = [opt._m[index].numpy(), opt._v[index].numpy(), table.numpy()]
    for plain, fused in zip(runs[False], runs[True]):
        np.testing.assert_array_equal(_bits(fused), _bits(plain))
    assert np.signbit(runs[True][0]).sum() > 0


def test_keras_own_gradient_treatments_keep_the_plain_update():
    for kwargs in ({"clipnorm": 0.5}, {"clipvalue": 0.01}, {"use_ema": True}, {"loss_scale_factor": 2.0}):
        assert not optimization.fusable(optimization.XLNetAdamW(1e-3, **kwargs)), kwargs
    assert optimization.fusable(optimization.XLNetAdamW(1e-3))
