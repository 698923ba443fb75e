"""The training runners' `--xla_clustering`: TensorFlow's XLA auto-clustering of the fusible ops, its settings and
their one check. Free of TensorFlow, so that a runner checks and applies them before TensorFlow loads (TensorFlow
reads TF_XLA_FLAGS once, when it loads).

"fusible" keeps the matmuls on TensorFlow's oneDNN kernels, which run at the bfloat16 rate on CPUs with bfloat16
arithmetic where XLA's CPU dots do not, and lets XLA fuse the ops around them; the `training.Trainer` then compiles
the clipped AdamW update as one XLA program (bench/speed/README.md).
"""

from xlnet_tf.errors import UserError

MODES = ("off", "fusible")
# TF_XLA_FLAGS of "fusible": auto-clustering on CPU, of the ops XLA can fuse (no dots, no convolutions)
FUSIBLE_FLAGS = ("--tf_xla_auto_jit=2", "--tf_xla_cpu_global_jit", "--tf_xla_ops_to_cluster=FUSIBLE")


def check(mode: str, jit_compile: bool) -> None:
    """UserError for a mode outside `MODES`, or for clustering with `jit_compile` (the whole step is then one XLA
    program: nothing is left to cluster)."""
    if mode not in MODES:
        raise UserError(f"--xla_clustering must be one of {MODES}, got {mode!r}")
    if mode != "off" and jit_compile:
        raise UserError(f"--xla_clustering={mode} clusters the ops that run outside XLA, but --jit_compile compiles "
                        "the whole step with XLA: give --nojit_compile")


def flags_present(tf_xla_flags: str) -> bool:
    """Whether a TF_XLA_FLAGS value holds every one of `FUSIBLE_FLAGS`."""
    present = tf_xla_flags.split()
    return all(flag in present for flag in FUSIBLE_FLAGS)


def with_fusible_flags(tf_xla_flags: str) -> str:
    """A TF_XLA_FLAGS value with `FUSIBLE_FLAGS` appended (what the runners and the speed harness set)."""
    return " ".join([tf_xla_flags, *FUSIBLE_FLAGS]).strip()
