"""TensorFlow CPU ops of our own (the C++ sources beside this file), compiled for the installed TensorFlow on first use.

XLA's CPU code runs a layer norm's forward and backward as several passes over each tensor, with its reductions as
trees of separate passes, and an AdamW update as a pass per output (the moments, the weight, its bfloat16 copy);
a C++ kernel does each in one pass (`layer_norm.cc`, `adamw.cc`; bench/speed/README.md, "Since: the layer norm and
the update as native ops"), and the gradient norm's sum of squares reads every bfloat16 gradient once, as it is
(`sum_of_squares.cc`, where TensorFlow casts each to float32 first); a cached generation step is one op over every
layer (`decode_step.cc`, where XLA runs some 50 small dependent products). The ops are an optimization only: every
caller has the plain TensorFlow form of the same numbers and uses it when `ops()` is None (switched off; no compiler
or a failed build: one warning says so), inside an XLA program (no XLA lowering), and wherever a graph may leave the
process (export: TF Serving has no such op; `generate` in this process may take the decode step). Tests compare the
two.

The library is built with the C++ compiler (`CXX`, default `g++`) and the flags TensorFlow reports
(`tf.sysconfig`), into `$XLNET_TF_NATIVE_CACHE` (default `~/.cache/xlnet_tf/native`), under a name that hashes the
sources, the flags, the compiler and TensorFlow's version: a change to any of them builds again, and a finished
build is moved into place in one rename (two processes building at once both finish). `XLNET_TF_NATIVE=0` switches
the ops off (before the first use in a process).
"""

from __future__ import annotations

import hashlib
import os
import shlex
import shutil
import subprocess
import tempfile
import threading
import warnings

import tensorflow as tf
from tensorflow.python.framework import ops as framework_ops  # RegisterGradient: no public API for an op's gradient

SOURCES = ("adamw.cc", "decode_step.cc", "layer_norm.cc", "sum_of_squares.cc")
HEADERS = ("bfloat16_bits.h",)  # included by the sources: part of the cache key
SWITCH = "XLNET_TF_NATIVE"
CACHE = "XLNET_TF_NATIVE_CACHE"
_HERE = os.path.dirname(os.path.abspath(__file__))
_LOCK = threading.Lock()
_STATE = {}


def switched_on() -> bool:
    """False where `XLNET_TF_NATIVE=0` (or `false`/`off`)."""
    return os.environ.get(SWITCH, "1").strip().lower() not in ("0", "false", "off", "no")


def _cpu_flags() -> list:
    """`-mavx2 -mfma` where the CPU has both (every x86 host the benchmarks name), else the compiler's baseline: the
    kernels are bound by memory, not by the vector width."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            words = set(f.read().split())
    except OSError:
        return []
    return ["-mavx2", "-mfma"] if {"avx2", "fma"} <= words else []


def _command(compiler: str, output: str) -> list:
    sources = [os.path.join(_HERE, s) for s in SOURCES]
    # -ffp-contract=off: every product and sum rounded as the TensorFlow ops an op replaces round them;
    # -fno-math-errno: sqrt as one instruction (vectorized; no op reads errno)
    return (shlex.split(compiler)
            + ["-shared", "-fPIC", "-O3", "-ffp-contract=off", "-fno-math-errno", "-fopenmp-simd", "-w"]
            + _cpu_flags() + sources + ["-o", output] + tf.sysconfig.get_compile_flags() + tf.sysconfig.get_link_flags())


def _key(compiler_path: str) -> str:
    digest = hashlib.sha256()
    for name in SOURCES + HEADERS:
        with open(os.path.join(_HERE, name), "rb") as f:
            digest.update(f.read())
    version = subprocess.run(shlex.split(compiler_path)[:1] + ["--version"], capture_output=True, text=True,
                             check=False).stdout
    digest.update(" ".join(_command(compiler_path, "OUT") + [version, tf.__version__]).encode())
    return digest.hexdigest()[:16]


def library_path() -> str:
    """The built library's path (building it if needed); raises `RuntimeError` saying why it cannot be built."""
    compiler = os.environ.get("CXX", "g++")
    words = shlex.split(compiler) or ["g++"]
    compiler_path = shutil.which(words[0])
    if compiler_path is None:
        raise RuntimeError(f"no C++ compiler {compiler!r} on PATH (set CXX)")
    compiler_path = shlex.join([compiler_path] + words[1:])
    cache = os.environ.get(CACHE) or os.path.join(os.path.expanduser("~"), ".cache", "xlnet_tf", "native")
    target = os.path.join(cache, f"xlnet_tf_ops_{_key(compiler_path)}.so")
    if os.path.exists(target):
        return target
    os.makedirs(cache, exist_ok=True)
    fd, partial = tempfile.mkstemp(suffix=".so", dir=cache)
    os.close(fd)
    try:
        done = subprocess.run(_command(compiler_path, partial), capture_output=True, text=True, check=False)
        if done.returncode != 0:
            raise RuntimeError(f"{compiler} failed: {done.stderr.strip()[-600:]}")
        os.chmod(partial, 0o755)  # (mkstemp makes it private; a shared cache serves other users too)
        os.replace(partial, target)
    finally:
        if os.path.exists(partial):
            os.remove(partial)
    return target


@tf.autograph.experimental.do_not_convert  # called while a layer is traced: plain Python, nothing to convert
def ops():
    """The loaded ops module (`tf.load_op_library`), or None: switched off, a GPU visible (the ops have CPU kernels
    only), or it could not be built or loaded (one warning per process says why, and the callers' TensorFlow forms
    run)."""
    with _LOCK:
        if "ops" not in _STATE:
            _STATE["ops"] = None
            # CPU kernels only: where a GPU is visible, TensorFlow's forms run (no host round trips of a placed op)
            if switched_on() and not tf.config.list_logical_devices("GPU"):
                try:
                    _STATE["ops"] = tf.load_op_library(library_path())
                except (RuntimeError, OSError, tf.errors.OpError) as error:
                    warnings.warn(f"xlnet_tf: the native ops (xlnet_tf/layers/native) are not available, so "
                                  f"TensorFlow's slower forms run ({SWITCH}=0 chooses that without this warning): "
                                  f"{error}", stacklevel=2)
        return _STATE["ops"]


@framework_ops.RegisterGradient("XlnetTfSumOfSquares")
def _sum_of_squares_gradient(op, grad):
    """d/dx sum(x^2) = 2x for each input, as the cast and `L2Loss` form the op replaces differentiates."""
    return [2.0 * tf.cast(grad, x.dtype) * x for x in op.inputs]
