"""Run by tests/training/test_training_semantics.py in its own process (one strategy per process): one `Trainer`
step on 2 mirrored logical CPUs with a loss whose per-replica gradients are known, for each clip mode, in
float32 and with float16 loss scaling; then the same step through Keras `fit` (`Task.train_step`, which
finishes with the same `training.apply_clipped_gradients`). Prints one JSON line: the update per element
and the reported gradient norm for each setting (`fit_<setting>`: the update of the `fit` step).

Loss of replica k: `sum_b c_b * sum(all weights)` over its batch; weight = its batch size. So every element's
global gradient is `sum_all c / 4`, and replica k's share is `sum_{b in k} c_b / 4`: 1.0 and 0.25 here.
SGD with learning rate 1 makes the update the negated gradient handed to the optimizer.
"""

import json
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

from xlnet_tf.training import distribute, loop as training
from xlnet_tf.config import XLNetConfig  # noqa: E402
from xlnet_tf.models import XLNetPretrainer  # noqa: E402

CONFIG = XLNetConfig(n_token=20, n_layer=1, d_model=4, n_head=1, d_head=4, d_inner=4, dropout=0.0,
                     dropatt=0.0)
C = [[3.0, 1.0], [0.5, 0.5]]  # per replica batch of 2


def loss_fn(model, features, mems, training_):
    total = tf.add_n([tf.reduce_sum(v) for v in model.trainable_variables])
    return tf.reduce_sum(features["c"]) * total, tf.cast(tf.shape(features["c"])[0], tf.float32), None


def dataset_fn(ctx, skip):
    del ctx, skip  # one pipeline feeds both replicas, alternating: C[0] -> replica 0, C[1] -> replica 1
    return tf.data.Dataset.from_tensor_slices({"c": tf.constant(C)}).repeat()


class FitProbe(XLNetPretrainer):
    """The same loss through Keras: replica k's loss is its share of the global mean (global batch 4)."""

    def call(self, features, training=False):
        return {"c": features["c"]}

    def task_loss(self, features, outputs, sample_weight=None):
        total = tf.add_n([tf.reduce_sum(v) for v in self.trainable_variables])
        return tf.reduce_sum(features["c"]) * total / 4.0

    def keras_targets(self, features, outputs):  # for the (empty) metrics
        return features["c"], outputs["c"], None


def model_and_optimizer(strategy, model_class, float16):
    """A fresh model (seed 0) under `strategy`, SGD at learning rate 1 clipping at 0.3 per element, and
    the model's size."""
    keras.utils.set_random_seed(0)
    with strategy.scope():
        model = model_class(CONFIG)
        size = sum(int(np.prod(v.shape)) for v in model.trainable_variables)
        optimizer = keras.optimizers.SGD(learning_rate=1.0, global_clipnorm=float(0.3 * np.sqrt(size)))
        if float16:
            optimizer = keras.optimizers.LossScaleOptimizer(optimizer)
    return model, optimizer, size


def update_per_element(model, before, setting):
    """The (uniform) update every element received."""
    deltas = np.concatenate([(b - v.numpy()).ravel() for b, v in zip(before, model.trainable_variables)])
    assert np.allclose(deltas, deltas[0], rtol=1e-5), (setting, deltas.min(), deltas.max())
    return float(deltas[0])


def fit_update(strategy, clip_mode, float16):
    model, optimizer, _ = model_and_optimizer(strategy, FitProbe, float16)
    with strategy.scope():
        model.compile(optimizer=optimizer, metrics=[], clip_mode=clip_mode)
    before = [v.numpy().copy() for v in model.trainable_variables]
    data = tf.data.Dataset.from_tensor_slices({"c": tf.constant(np.ravel(C), tf.float32)}).batch(4)
    model.fit(data, epochs=1, verbose=0)
    return update_per_element(model, before, ("fit", clip_mode, float16))


def main():
    strategy = distribute.get_strategy("mirrored", num_cpu_replicas=2)
    assert strategy.num_replicas_in_sync == 2
    results = {}
    for name, clip_mode, float16 in (("global", "global", False), ("per_replica", "per_replica", False),
                                     ("global_float16", "global", True),
                                     ("per_replica_float16", "per_replica", True)):
        model, optimizer, size = model_and_optimizer(strategy, XLNetPretrainer, float16)
        before = [v.numpy().copy() for v in model.trainable_variables]
        loop = training.TrainLoopConfig(model_dir=tempfile.mkdtemp(), train_steps=1, steps_per_loop=1,
                                        save_steps=1, clip_mode=clip_mode)
        trainer = training.Trainer(strategy, model, optimizer, loss_fn, dataset_fn, loop, log=lambda s: None)
        history = trainer.train()
        results[name] = {"update": update_per_element(model, before, name),
                         "grad_norm": history[-1]["grad_norm"]}
        results["size"] = size
        results["fit_" + name] = {"update": fit_update(strategy, clip_mode, float16)}
    print(json.dumps(results))


if __name__ == "__main__":
    main()
