"""Our side of the benchmarks: the model sizes, the ways of running our training step (`Variant`, the first of
a list is production) and the step itself. TensorFlow only: bench/peak_rss.py's `ours` process imports this and
must not load PyTorch; bench/run.py imports it too.
"""

from __future__ import annotations

import dataclasses

import tensorflow as tf


@dataclasses.dataclass(frozen=True)
class Variant:
    """One way of running our training step; the first of a list is the production path."""

    name: str
    jit: bool = True
    policy: str = "float32"
    query_stream: str = "targets"
    attention: str = "production"  # a key of bench.variants.VARIANTS
    optimizer_in_xla: bool = False
    summary_rows_only: bool = True  # classifier: the last layer computes only the summarized row


# What training.Trainer runs with --jit_compile on one replica: loss, gradients, clipping and AdamW in one
# XLA cluster.
PRODUCTION = Variant("production: XLA step incl. AdamW, float32, query stream at targets (classifier: last layer "
                     "at the summarized row), positions projected once",
                     optimizer_in_xla=True)


def bench_config(n_layer: int, d_model: int, mem_len: int = 0, n_token: int = 32000):
    from xlnet_tf.config import XLNetConfig

    return XLNetConfig(n_token=n_token, n_layer=n_layer, d_model=d_model, n_head=d_model // 64, d_head=64,
                       d_inner=4 * d_model, dropout=0.0, dropatt=0.0, mem_len=mem_len or None)


def our_train_step(model, feats, mems, kind: str, variant: Variant):
    """The runners' step: loss and gradients (XLA with `jit`), global-norm clipping, AdamW
    (`xlnet_tf.optimization.create_optimizer`). Returns `(step, forward, step_on)`: the step and the forward
    pass on `feats`, and `step_on(features)`, the same step on any batch of that shape."""
    from xlnet_tf import optimization

    opt = optimization.create_optimizer(model, learning_rate=1e-5, train_steps=1000, weight_decay=0.01)
    opt.build(model.trainable_variables)
    variables = model.trainable_variables

    def loss_fn(features):
        if kind == "plm":
            return model.task_loss(features, model(features, mems=mems, training=True))
        return model.task_loss(features, model(features, training=True))

    def grads(features):
        with tf.GradientTape() as tape:
            loss = loss_fn(features)
        g = tape.gradient(loss, variables)
        return loss, [tf.zeros_like(v) if x is None else tf.convert_to_tensor(x) for x, v in zip(g, variables)]

    def apply(loss, g):
        g, _ = tf.clip_by_global_norm(g, 1.0)
        opt.apply_gradients(zip(g, variables))
        return loss

    if variant.optimizer_in_xla:
        step_on = tf.function(lambda features: apply(*grads(features)), jit_compile=variant.jit)
    else:
        compiled = tf.function(grads, jit_compile=variant.jit)
        step_on = tf.function(lambda features: apply(*compiled(features)))
    forward = tf.function(lambda: loss_fn(feats), jit_compile=variant.jit)
    return (lambda: step_on(feats)), forward, step_on
