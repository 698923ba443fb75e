"""The gradient norm's sum of squares as one native op per dtype (layers/native/sum_of_squares.cc, through
loop.squared_norm): the exact sum to float32 rounding for bfloat16 and float32 lists of any sizes, the same bits every
call, TensorFlow's cast and `L2Loss` where the ops are off or inside an XLA program, and a gathered table's rows each
once."""

import os
import shutil
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

from xlnet_tf.layers.native import library
from xlnet_tf.training import loop

pytestmark = pytest.mark.skipif(shutil.which("g++") is None, reason="no C++ compiler: the native ops cannot build")

# sizes around the op's blocks (256 squares) and its AVX2 steps (32), a chunk (65,536) exactly, one and two, over
# a chunk, and empty
SIZES = [(0,), (1,), (31,), (33,), (255,), (256,), (257,), (3, 1000), (65_536,), (2, 65_536), (70_001,), (300, 700)]
# an element in each of an AVX2 step's four lanes of 8, a block's tail, a chunk's first, a later chunk's lanes
POSITIONS = (0, 7, 8, 16, 24, 31, 255, 256, 65_535, 65_536, 65_536 + 16, 65_536 + 24, 131_071, 131_072 + 200)


def _tensors(dtype, seed=0, scale=1e-2):
    rng = np.random.RandomState(seed)
    return [tf.constant(rng.randn(*s).astype(np.float32) * scale * (i + 1), dtype) for i, s in enumerate(SIZES)]


def _exact(tensors):
    return sum(float(np.sum(np.square(t.numpy().astype(np.float64)))) for t in tensors)


@pytest.mark.parametrize("dtype", [tf.bfloat16, tf.float32])
def test_the_op_is_the_exact_sum_to_float32_rounding(dtype):
    tensors = _tensors(dtype)
    got = float(library.ops().xlnet_tf_sum_of_squares(tensors))
    exact = _exact(tensors)
    assert abs(got - exact) <= 2e-7 * exact
    # at least as close as TensorFlow's float32 cast and L2Loss, up to one float32 rounding of the total
    reference = float(tf.add_n([2.0 * tf.nn.l2_loss(tf.cast(t, tf.float32)) for t in tensors]))
    assert abs(got - exact) <= abs(reference - exact) + np.spacing(np.float32(exact))


def test_the_op_repeats_to_the_bit():
    tensors = _tensors(tf.bfloat16, seed=3)
    runs = {float(library.ops().xlnet_tf_sum_of_squares(tensors)) for _ in range(5)}
    assert len(runs) == 1


@pytest.mark.parametrize("dtype", [tf.bfloat16, tf.float32])
def test_every_element_counts(dtype):
    """One element anywhere (each lane, a block's tail, a chunk's first, a later chunk) is in the sum; a NaN or inf
    there makes it non-finite, and so does a square beyond float32's range (the Trainer's clip relies on both)."""
    base = np.zeros(131_072 + 257, np.float32)
    ops = library.ops()
    for where in POSITIONS:
        for value, expected in ((3.0, 9.0), (np.nan, np.nan), (np.inf, np.inf), (-np.inf, np.inf), (3e19, np.inf)):
            x = base.copy()
            x[where] = value
            ones = tf.constant(np.ones(5, np.float32), dtype)
            got = float(ops.xlnet_tf_sum_of_squares([ones, tf.constant(x, dtype)]))
            np.testing.assert_equal(got - 5.0 if np.isfinite(got) else got, expected, err_msg=f"{where}, {value}")


def _gradients():
    rng = np.random.RandomState(1)
    table = tf.IndexedSlices(tf.constant(rng.randn(6, 4).astype(np.float32), tf.bfloat16),
                             tf.constant([3, 0, 3, 9, 0, 1]), tf.constant([10, 4]))
    return _tensors(tf.bfloat16, seed=2) + _tensors(tf.float32, seed=4)[5:] + [table]


def _dense_exact(grads):
    dense = [tf.convert_to_tensor(g) if isinstance(g, tf.IndexedSlices) else g for g in grads]
    return _exact([tf.cast(g, tf.float32) for g in dense])


def test_squared_norm_takes_the_op_and_agrees_with_tensorflows_form(monkeypatch):
    grads = _gradients()
    exact = _dense_exact(grads)  # a table's repeated indices summed first: the dense gradient's squares
    graph = tf.function(loop.squared_norm).get_concrete_function(grads).graph
    kinds = [op.type for op in graph.get_operations()]
    small = [g for g in grads if isinstance(g, tf.IndexedSlices) or g.shape.num_elements() < loop.NATIVE_NORM_MIN]
    # the large gradients in one op per dtype, the small ones (and the table's few rows) cast and L2Loss each
    assert kinds.count("XlnetTfSumOfSquares") == 2 and kinds.count("L2Loss") == len(small) < len(grads) - 2
    native = float(loop.squared_norm(grads))
    monkeypatch.setattr(library, "_STATE", {"ops": None})
    plain = float(loop.squared_norm(grads))
    assert abs(native - exact) <= 2e-7 * exact and abs(plain - exact) <= 2e-6 * exact


def test_inside_an_xla_program_squared_norm_is_tensorflows_form():
    grads = [g for g in _gradients() if not isinstance(g, tf.IndexedSlices)]
    compiled = tf.function(loop.squared_norm, jit_compile=True)
    kinds = [op.type for op in compiled.get_concrete_function(grads).graph.get_operations()]
    assert "XlnetTfSumOfSquares" not in kinds and "L2Loss" in kinds
    exact = _dense_exact(grads)
    assert abs(float(compiled(grads)) - exact) <= 2e-6 * exact


def test_the_portable_kernel_built_without_avx2(tmp_path, monkeypatch):
    """The op as a CPU without AVX2 runs it (the compiler's loop for every block), in its own process (the op's name
    is registered once per process): the exact sum to float32 rounding, every element counted."""
    monkeypatch.setenv(library.CACHE, str(tmp_path))
    monkeypatch.setattr(library, "SOURCES", ("sum_of_squares.cc",))
    monkeypatch.setattr(library, "_cpu_flags", lambda: [])
    path = library.library_path()
    script = f"""
import numpy as np, tensorflow as tf
ops = tf.load_op_library({path!r})
rng = np.random.RandomState(0)
for dtype in (tf.bfloat16, tf.float32):
    xs = [tf.constant(rng.randn(*s).astype(np.float32), dtype) for s in {SIZES!r}]
    exact = sum(float(np.sum(np.square(x.numpy().astype(np.float64)))) for x in xs)
    got = float(ops.xlnet_tf_sum_of_squares(xs))
    assert abs(got - exact) <= 2e-7 * exact, (dtype, got, exact)
x = np.zeros(70_001, np.float32)
x[65_536 + 24] = 3.0
assert float(ops.xlnet_tf_sum_of_squares([tf.constant(x, tf.bfloat16)])) == 9.0
print("portable kernel ok")
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300,
                          env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"})
    assert "portable kernel ok" in done.stdout, done.stderr[-2000:]


def test_the_norm_is_differentiable_as_tensorflows_form(monkeypatch):
    grads = _gradients()[:-1]  # dense ones
    def gradient_of_norm():
        with tf.GradientTape() as tape:
            tape.watch(grads)
            squares = loop.squared_norm(grads)
        return tape.gradient(squares, grads)
    native = gradient_of_norm()
    monkeypatch.setattr(library, "_STATE", {"ops": None})
    plain = gradient_of_norm()
    for a, b in zip(native, plain):
        np.testing.assert_array_equal(np.asarray(tf.cast(a, tf.float32)), np.asarray(tf.cast(b, tf.float32)))
