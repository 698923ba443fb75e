"""Where XLA compiles the ops being created: some gradients are written two ways, one for TensorFlow's kernels (with or
without the auto-clustering of `--xla_clustering=fusible`) and one for a `jit_compile` program, where XLA compiles the
plainer form faster or the kernel-friendly op has no XLA lowering; and a layer compiles a small XLA program of its own
inside an otherwise plain graph only where the process asked for XLA's auto-clustering."""

from __future__ import annotations

import os

import tensorflow as tf
from tensorflow.python.ops import control_flow_util  # no public API says whether a graph is an XLA program's


def in_xla_program() -> bool:
    """Whether ops created now are compiled by XLA as one program (a `jit_compile` function, or inside one)."""
    return control_flow_util.GraphOrParentsInXlaContext(tf.compat.v1.get_default_graph())


def auto_clustering() -> bool:
    """Whether this process asked TensorFlow to cluster ops for XLA by itself on CPU: TF_XLA_FLAGS with
    `--tf_xla_auto_jit=1` or `2` and `--tf_xla_cpu_global_jit` (the runners' `--xla_clustering=fusible` sets both),
    or `tf.config.optimizer.set_jit(True)`. A run that did not ask for XLA gets no XLA program of a layer's making.
    TensorFlow reads TF_XLA_FLAGS once, when it loads; this reads the environment when called (a runner sets the
    flags before TensorFlow loads and never changes them)."""
    flags = os.environ.get("TF_XLA_FLAGS", "").split()
    auto_jit = any(flag in ("--tf_xla_auto_jit=1", "--tf_xla_auto_jit=2") for flag in flags)
    if auto_jit and "--tf_xla_cpu_global_jit" in flags:
        return True
    return tf.config.optimizer.get_jit() == "autoclustering"
