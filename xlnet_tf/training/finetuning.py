"""What the fine-tuning runners share: the loss function for the training loop, strategy-aware
prediction over padded eval sets, and evaluation of one or every checkpoint of a model directory."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Callable, Dict, List, Optional, Sequence

import numpy as np
import tensorflow as tf

from xlnet_tf import checkpoints

if TYPE_CHECKING:
    from xlnet_tf.training import optimization, loop as training


def task_loss_fn(model, features, mems, training):
    """`loss_fn` for `training.Trainer` with a task model (`per_example_loss`; no memories): the loss
    summed over the batch's real examples (`is_real_example`, when present) and their count. A model whose loss
    is a mean over other units (tagging: labelled positions) gives its own sum and weight (`loss_sum_and_weight`),
    the terms of its Keras `task_loss`, so the runners optimize what `fit` does."""
    del mems
    outputs = model(features, training=training)
    if hasattr(model, "loss_sum_and_weight"):
        total, weight = model.loss_sum_and_weight(features, outputs)
        return total, weight, None
    losses = model.per_example_loss(features, outputs)
    weights = features.get("is_real_example")
    weights = tf.ones_like(losses) if weights is None else tf.cast(weights, losses.dtype)
    return tf.reduce_sum(losses * weights), tf.reduce_sum(weights), None


def predict(strategy, model, dataset: tf.data.Dataset, output_keys: Sequence[str],
            passthrough: Sequence[str] = ("example_index", "is_real_example", "label")) -> Dict[str, np.ndarray]:
    """Runs `model` over `dataset` (global batches, static shapes) on every replica.

    Returns numpy arrays concatenated over the batches: the model's `output_keys` and the `passthrough`
    features present in the dataset (so padded examples and the example order can be recovered).
    """
    distributed = strategy.experimental_distribute_dataset(dataset)

    @tf.function
    def step(features):
        outputs = model(features, training=False)
        result = {k: outputs[k] for k in output_keys}
        result.update({k: features[k] for k in passthrough if k in features})
        return result

    collected: Dict[str, List[np.ndarray]] = {}
    for batch in distributed:
        results = strategy.run(step, args=(batch,))
        for key, value in results.items():
            for local in strategy.experimental_local_results(value):
                collected.setdefault(key, []).append(local.numpy())
    if not collected:
        raise ValueError("predict: the dataset yielded no batches (is it smaller than one batch with "
                         "drop_remainder?)")
    return {k: np.concatenate(v) for k, v in collected.items()}


def list_checkpoints(model_dir: str) -> List[str]:
    """Our training checkpoints in `model_dir` (`ckpt-<step>`), in step order."""
    state = tf.train.get_checkpoint_state(model_dir)
    paths = list(state.all_model_checkpoint_paths) if state else []
    steps = [checkpoint_step(p) for p in paths]
    return [p for _, p in sorted(zip(steps, paths)) if tf.io.gfile.exists(p + ".index")]


def checkpoint_step(path: str) -> int:
    """The global step of a checkpoint path (`.../ckpt-1200` -> 1200); -1 when the name has none
    (the original's `eval_all_ckpt` crashed on such names, #31)."""
    m = re.search(r"-(\d+)$", path)
    return int(m.group(1)) if m else -1


def restore_latest_weights(model, model_dir: str) -> Optional[str]:
    """Loads the latest training checkpoint of `model_dir` into `model` (for predicting without training;
    the original's predict ignored the fine-tuned weights, #56); returns its path, or None."""
    found = list_checkpoints(model_dir)
    if found:
        restore_weights(model, found[-1])
    return found[-1] if found else None


def write_predictions_tsv(path: str, header: Sequence[str], outputs: Dict[str, np.ndarray], guids: Sequence[str],
                          value_fn: Callable[[int], str]) -> int:
    """One row per real example, in example order: `guid<TAB>value_fn(row in outputs)` (atomic write)."""
    rows = sorted((int(i), k) for k, i in enumerate(outputs["example_index"]) if outputs["is_real_example"][k] > 0)
    with tf.io.gfile.GFile(path + ".tmp", "w") as f:
        f.write("\t".join(header) + "\n")
        for index, k in rows:
            f.write(f"{guids[index]}\t{value_fn(k)}\n")
    tf.io.gfile.rename(path + ".tmp", path, overwrite=True)
    return len(rows)


def read_predictions_tsv(path: str) -> Dict[str, str]:
    """`write_predictions_tsv`'s file back: `{guid: value}` (the header row skipped)."""
    with tf.io.gfile.GFile(path, "r") as f:
        rows = f.read().splitlines()[1:]
    return dict(row.split("\t", 1) for row in rows)


def restore_weights(model, path: str) -> None:
    """Loads only the weights of one of our training checkpoints into `model`."""
    checkpoints.assign_arrays(model, checkpoints.read_object_checkpoint(path), path, require_heads=True)


def checkpoints_of_steps(model_dir: str, steps: Sequence[int]) -> List[str]:
    """The kept checkpoints of `model_dir` at `steps`, in step order; a step without one is a UserError naming
    --eval_checkpoint_steps and the steps kept."""
    from xlnet_tf.errors import UserError

    kept = {checkpoint_step(p): p for p in list_checkpoints(model_dir)}
    missing = sorted(set(steps) - set(kept))
    if missing:
        raise UserError(f"--eval_checkpoint_steps: no checkpoint of step(s) {', '.join(map(str, missing))} in "
                        f"--model_dir={model_dir} (kept: {', '.join(map(str, sorted(kept))) or 'none'})")
    return [kept[step] for step in sorted(set(steps))]


def evaluate_checkpoints(model, model_dir: str, evaluate: Callable[[int], Dict[str, float]],
                         all_checkpoints: bool, key: str, task: str, split: str,
                         steps: Sequence[int] = ()) -> Dict[str, object]:
    """Evaluates the latest (or every, or those of `steps`: `checkpoints_of_steps`) checkpoint of `model_dir`
    with `evaluate(step) -> metrics`.

    Each evaluation is added to `eval_results.json` (xlnet_tf.artifacts.results; best by `key`) as soon as it is
    measured; returns the file's content. With no checkpoint, evaluates the model as it is (step 0).
    """
    from xlnet_tf.artifacts import results

    paths = list_checkpoints(model_dir)
    if steps:
        paths = checkpoints_of_steps(model_dir, steps)
    elif not all_checkpoints:
        paths = paths[-1:]
    recorded = None
    if not paths:
        recorded = results.record(model_dir, task, key, 0, evaluate(0), split=split)
    for path in paths:
        restore_weights(model, path)
        step = checkpoint_step(path)
        recorded = results.record(model_dir, task, key, step, evaluate(step), split=split, checkpoint=path)
    return recorded.to_dict()


def build_optimizer_and_trainer(strategy, model, optimizer: "optimization.OptimizerSettings",
                                loop: "training.TrainLoopConfig", mixed_precision: str,
                                train_dataset_fn: Callable, log: Callable = print):
    """The optimizer of `optimizer`'s settings (a loss-scaled one for `mixed_precision="float16"`) and a
    `Trainer` running `loop` for a fine-tuning model."""
    from xlnet_tf.training import loop as training

    with strategy.scope():
        built = optimizer.create(model)
        if mixed_precision == "float16":
            import keras

            built = keras.optimizers.LossScaleOptimizer(built)
    return training.Trainer(strategy, model, built, task_loss_fn, train_dataset_fn, loop, log=log)
