"""Whether the ops being created are compiled by XLA as one program: some gradients are written two ways, one for
TensorFlow's kernels (with or without the auto-clustering of `--xla_clustering=fusible`) and one for a `jit_compile`
program, where XLA compiles the plainer form faster or the kernel-friendly op has no XLA lowering."""

from __future__ import annotations

import tensorflow as tf
from tensorflow.python.ops import control_flow_util  # no public API says whether a graph is an XLA program's


def in_xla_program() -> bool:
    """Whether ops created now are compiled by XLA as one program (a `jit_compile` function, or inside one)."""
    return control_flow_util.GraphOrParentsInXlaContext(tf.compat.v1.get_default_graph())
