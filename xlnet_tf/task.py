"""`Task`: what makes a task model a Keras model a Keras user can drive (KerasHub's *Task* in the
Backbone / Preprocessor / Task split).

- `compile()` defaults to the task's own loss (`loss="auto"`) and to Keras metrics weighted by the real
  examples or target slots (`weighted_metrics="auto"`); a loss or metrics you pass are applied to the task's
  `(y_true, y_pred, sample_weight)` (`keras_targets`), e.g. `label` against `logits`.
- `fit` / `evaluate` / `predict` take feature dicts (our record datasets: labels inside the dict, or
  `(features, labels)`), or - with an `XLNetPreprocessor` attached - raw text: `tf.data` of `(text, label)` or
  `((text_a, text_b), label)`, or arrays/lists of strings.
- The loss of `fit` is the one `training.Trainer` optimizes: the sum over every replica's real examples
  (target slots) divided by their global weight, so one replica gives the Trainer's loss curve.
- `.keras` saving keeps the preprocessor (its SentencePiece model is an asset of the archive);
  `from_checkpoint` builds a task model from the original release, Hugging Face safetensors or one of our
  checkpoint directories, with its config and SentencePiece model.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from typing import Optional

import keras
import numpy as np
import tensorflow as tf

AUTO = "auto"


def combine_weights(weights, sample_weight):
    """`weights` (task weights: `is_real_example [B]`, `target_mask [B, P]`, or None) times Keras's
    `sample_weight [B]` (or None), broadcast over the trailing axes; float32 or None."""
    if sample_weight is None:
        return None if weights is None else tf.cast(weights, tf.float32)
    sample_weight = tf.cast(sample_weight, tf.float32)
    if weights is None:
        return sample_weight
    weights = tf.cast(weights, tf.float32)
    extra = weights.shape.rank - sample_weight.shape.rank
    return weights * tf.reshape(sample_weight, tf.concat([tf.shape(sample_weight), [1] * extra], 0))


def global_weighted_mean(values, weights):
    """This replica's share of the global weighted mean: `sum(values * weights)` over this replica divided
    by `sum(weights)` over every replica of the strategy (0 without weight).

    Keras sums the replicas' gradients (and multiplies each replica's loss by the replica count for its
    loss tracker, which then averages them), so `fit` optimizes and reports the sum over every replica's
    real examples divided by their global weight: `training.Trainer`'s loss, also when replicas hold
    different numbers of real examples.
    """
    weights = tf.ones_like(values) if weights is None else tf.cast(weights, values.dtype)
    local_sum = tf.reduce_sum(values * weights)
    weight = tf.reduce_sum(weights)
    ctx = tf.distribute.get_replica_context()  # None in a cross-replica context
    if ctx is not None and ctx.num_replicas_in_sync > 1:
        weight = ctx.all_reduce(tf.distribute.ReduceOp.SUM, weight)
    return tf.math.divide_no_nan(local_sum, weight)


class Task(keras.Model):
    """Base of the task models (see the module docstring).

    Args:
      preprocessor: an `XLNetPreprocessor` (raw text -> features) for `fit`/`evaluate`/`predict` on text,
        or None (the model then takes feature dicts only).

    A subclass implements `call(features, training)`, `task_loss(features, outputs, sample_weight=None)`
    (the weighted mean loss), `keras_targets(features, outputs) -> (y_true, y_pred, weights)` (what
    Keras losses and metrics compare, with the task's own weights or None) and `default_metrics()`; it sets
    `label_key`, the feature a single label tensor `y` stands for (None: `y` must be a dict of features).
    """

    label_key: Optional[str] = "label"
    default_learning_rate = 2e-5  # of compile(optimizer="auto"): Adam

    def __init__(self, preprocessor=None, **kwargs):
        super().__init__(**kwargs)
        self.preprocessor = preprocessor
        self._uses_task_loss = True

    # ------------------------------------------------------------------------------------------- compile
    def compile(self, optimizer=AUTO, loss=AUTO, metrics=None, weighted_metrics=AUTO, clip_mode="global",
                **kwargs):
        """`keras.Model.compile` with task defaults: `optimizer="auto"` is Adam at
        `default_learning_rate` (pass `optimization.create_optimizer(model, ...)` for the runners' AdamW);
        `loss="auto"` (or None) is `task_loss`; `weighted_metrics="auto"` are `default_metrics()` (none when
        `metrics` are given), weighted by the real examples (`is_real_example`) or target slots
        (`target_mask`). Other losses and metrics receive `keras_targets` (e.g. `label` and `logits`).
        `clip_mode`: "global" (clip the gradient summed over replicas) or "per_replica" (each replica's
        share, as the original on TPU); the threshold is the optimizer's `global_clipnorm`."""
        from xlnet_tf.training import CLIP_MODES

        if clip_mode not in CLIP_MODES:
            raise ValueError(f"clip_mode must be one of {CLIP_MODES}, got {clip_mode!r}")
        self.clip_mode = clip_mode
        if isinstance(optimizer, str) and optimizer == AUTO:
            optimizer = keras.optimizers.Adam(learning_rate=self.default_learning_rate)
        self._uses_task_loss = loss is None or (isinstance(loss, str) and loss == AUTO)
        if isinstance(weighted_metrics, str) and weighted_metrics == AUTO:
            weighted_metrics = self.default_metrics() if metrics is None else None
        super().compile(optimizer=optimizer, loss=None if self._uses_task_loss else loss, metrics=metrics,
                        weighted_metrics=weighted_metrics, **kwargs)

    def compile_from_config(self, config):
        """Restores `compile()` from a `.keras` file (its loss is None = the task loss, its metrics the ones
        resolved at compile time) and builds the optimizer, whose variables are loaded next."""
        self.compile(**keras.saving.deserialize_keras_object(config))
        if self.optimizer is not None:
            self.optimizer.build(self.trainable_variables)  # every variable exists after __init__

    def default_metrics(self):
        return []

    # ------------------------------------------------------------------------------------ loss, metrics
    def features_with_labels(self, x, y=None):
        """Keras's `(x, y)` as one feature dict: `y` a dict of label features, a tensor standing for
        `label_key`, or None (the labels are in `x`, as in our record datasets)."""
        if not isinstance(x, Mapping):
            raise ValueError(f"{type(self).__name__} takes a dict of features (input_ids, segment_ids, "
                             f"attention_mask, ...), got {type(x).__name__}; for raw text build the model with "
                             f"preprocessor=XLNetPreprocessor(...) (or from_checkpoint with a spiece.model)")
        if y is None:
            return x
        if isinstance(y, Mapping):
            return {**x, **y}
        if self.label_key is None:
            raise ValueError(f"{type(self).__name__}: y must be a dict of label features, got "
                             f"{type(y).__name__}")
        return {**x, self.label_key: y}

    def outputs_for_loss(self, features, outputs):
        """The outputs the loss needs (a subclass may recompute them, e.g. SQuAD's teacher forcing)."""
        return outputs

    def compute_loss(self, x=None, y=None, y_pred=None, sample_weight=None, training=True):
        """Keras's loss hook (called by `fit`/`evaluate`): `task_loss` with the `auto` loss, else the compiled
        loss on `keras_targets`; plus any `add_loss` losses."""
        features = self.features_with_labels(x, y)
        outputs = self.outputs_for_loss(features, y_pred)
        if not self._uses_task_loss:
            y_true, y_hat, weights = self.keras_targets(features, outputs)
            return super().compute_loss(x, y_true, y_hat, combine_weights(weights, sample_weight), training)
        loss = self.task_loss(features, outputs, sample_weight)
        for extra in self.losses:
            loss = loss + tf.cast(self._aggregate_additional_loss(extra), loss.dtype)
        return loss

    def compute_metrics(self, x, y, y_pred, sample_weight=None):
        features = self.features_with_labels(x, y)
        y_true, y_hat, weights = self.keras_targets(features, self.outputs_for_loss(features, y_pred))
        return super().compute_metrics(x, y_true, y_hat, combine_weights(weights, sample_weight))

    # --------------------------------------------------------------------------- fit/evaluate/predict
    def _as_dataset(self, x, y, sample_weight, batch_size, shuffle=False):
        """Raw inputs -> a batched, preprocessed `tf.data.Dataset` (only with a preprocessor)."""
        if isinstance(x, tf.data.Dataset):
            if y is not None or sample_weight is not None:
                raise ValueError("y and sample_weight must be inside the dataset when x is a tf.data.Dataset")
            if batch_size is not None:
                raise ValueError("batch_size must be None when x is a tf.data.Dataset (batch the dataset)")
            return x.map(self.preprocessor, num_parallel_calls=tf.data.AUTOTUNE).prefetch(tf.data.AUTOTUNE)
        if isinstance(x, list):  # a list is texts; a pair of text lists is a tuple
            x = np.asarray(x)
        data = keras.utils.pack_x_y_sample_weight(x, y, sample_weight)
        ds = tf.data.Dataset.from_tensor_slices(data)
        if shuffle:
            ds = ds.shuffle(int(ds.cardinality()), reshuffle_each_iteration=True)
        ds = ds.batch(batch_size or 32)
        return ds.map(self.preprocessor, num_parallel_calls=tf.data.AUTOTUNE).prefetch(tf.data.AUTOTUNE)

    def _check_features(self, x):
        """Without a preprocessor, raw text is a user error to name before Keras's data adapters see it."""
        if self.preprocessor is None and x is not None and not isinstance(x, (Mapping, tf.data.Dataset)):
            if any(_is_text(v) for v in tf.nest.flatten(x)):
                raise ValueError(f"{type(self).__name__} got raw text but has no preprocessor: build it with "
                                 f"preprocessor=XLNetPreprocessor(spiece_model, sequence_length) (or "
                                 f"from_checkpoint with a spiece.model), or pass a dict of features")

    def fit(self, x=None, y=None, batch_size=None, sample_weight=None, validation_data=None, **kwargs):
        self._check_features(x)
        if self.preprocessor is not None and x is not None:
            x = self._as_dataset(x, y, sample_weight, batch_size, shuffle=kwargs.pop("shuffle", True))
            y = sample_weight = batch_size = None
            kwargs["shuffle"] = False  # shuffled above (arrays) or by the user's tf.data pipeline
            if validation_data is not None and not isinstance(validation_data, tf.data.Dataset):
                vx, vy, vw = keras.utils.unpack_x_y_sample_weight(validation_data)
                validation_data = self._as_dataset(vx, vy, vw, kwargs.get("validation_batch_size"))
            elif validation_data is not None:
                validation_data = self._as_dataset(validation_data, None, None, None)
            kwargs.pop("validation_batch_size", None)
        if isinstance(x, tf.data.Dataset):
            kwargs.setdefault("shuffle", False)  # Keras ignores it for a dataset (and warns)
        return super().fit(x=x, y=y, batch_size=batch_size, sample_weight=sample_weight,
                           validation_data=validation_data, **kwargs)

    def evaluate(self, x=None, y=None, batch_size=None, sample_weight=None, **kwargs):
        self._check_features(x)
        if self.preprocessor is not None and x is not None:
            x = self._as_dataset(x, y, sample_weight, batch_size)
            y = sample_weight = batch_size = None
        return super().evaluate(x=x, y=y, batch_size=batch_size, sample_weight=sample_weight, **kwargs)

    def predict(self, x, batch_size=None, **kwargs):
        self._check_features(x)
        if self.preprocessor is not None:
            x = self._as_dataset(x, None, None, batch_size)
            batch_size = None
        return super().predict(x, batch_size=batch_size, **kwargs)

    def train_step(self, data):
        """Keras's step, finished as `training.Trainer`'s (`training.apply_clipped_gradients`): the dense
        gradient is clipped (Keras's optimizer would take the norm of the word embedding's sparse gradient
        with repeated ids counted apart) after the sum over replicas (Keras's optimizer would clip each
        replica's part) or, with `compile(clip_mode="per_replica")`, each replica's share, as the original;
        under float16 loss scaling at clip x scale. So `fit` takes the Trainer's steps on one device and on
        several, in any precision."""
        from xlnet_tf import training

        x, y, sample_weight = keras.utils.unpack_x_y_sample_weight(data)
        with tf.GradientTape() as tape:
            y_pred = self(x, training=True)
            loss = self.compute_loss(x, y, y_pred, sample_weight, training=True)
            scaled = self.optimizer.scale_loss(loss)
        replicas = tf.distribute.get_replica_context().num_replicas_in_sync
        # Each replica's loss is its share of the global mean (see `global_weighted_mean`); the loss
        # tracker averages the replicas' values, so each is scaled up by the replica count, as in Keras.
        self._loss_tracker.update_state(loss * replicas, sample_weight=tf.shape(tf.nest.flatten(x)[0])[0])
        variables = self.trainable_weights
        grads = [tf.zeros_like(v) if g is None else tf.convert_to_tensor(g)
                 for g, v in zip(tape.gradient(scaled, variables), variables)]
        # Shares of the global mean: the normalizer is 1 in total, 1 / replicas per replica.
        training.apply_clipped_gradients(self.optimizer, variables, grads, loss, 1.0 / replicas,
                                         getattr(self, "clip_mode", "global"))
        return self.compute_metrics(x, y, y_pred, sample_weight=sample_weight)

    def predict_step(self, data):
        outputs = super().predict_step(data)
        if isinstance(outputs, Mapping):  # e.g. `new_mems: None` without memories
            outputs = {k: v for k, v in outputs.items() if v is not None}
        return outputs

    # ---------------------------------------------------------------------------------------- saving
    def get_config(self):
        """The task's own arguments are added by each subclass."""
        preprocessor = self.preprocessor
        return {"name": self.name,
                "preprocessor": None if preprocessor is None else keras.saving.serialize_keras_object(preprocessor)}

    @classmethod
    def from_config(cls, config):
        config = dict(config)
        if isinstance(config.get("preprocessor"), dict):
            config["preprocessor"] = keras.saving.deserialize_keras_object(config["preprocessor"])
        return cls(**config)

    # ----------------------------------------------------------------------------------- checkpoints
    @classmethod
    def from_checkpoint(cls, checkpoint: str, config=None, spiece_model: Optional[str] = None,
                        sequence_length: Optional[int] = None, uncased: Optional[bool] = None,
                        config_overrides: Optional[dict] = None, require_heads: bool = False, **task_kwargs):
        """A task model initialized from a checkpoint, with its config and (text tasks) preprocessor.

        Args:
          checkpoint: the original release's directory or `xlnet_model.ckpt` prefix (also what
            `run/convert_checkpoint.py` writes), a Hugging Face `model.safetensors` (file or directory), or one
            of our checkpoints (a runner's `--model_dir` - its latest `ckpt-N` - or a `ckpt-N` prefix).
          config: `XLNetConfig`, its dict, or a JSON path (the release's `xlnet_config.json`, ours, or a
            Hugging Face `config.json`); default: `xlnet_config.json` or `config.json` next to the checkpoint.
          spiece_model: the SentencePiece model; default: `spiece.model` next to the checkpoint, or the one
            in `export_info.json` of a runner's model_dir. Text tasks without one take features only.
          sequence_length, uncased: of the preprocessor; default: `export_info.json`'s, else 128 / False.
          config_overrides: run-time knobs on top of the config (e.g. `{"dropout": 0.0}`).
          require_heads: the checkpoint must hold the task head too (e.g. a fine-tuned model).
          **task_kwargs: the task's arguments (`num_labels`, ...); a runner's `export_info.json` supplies
            defaults for the classifier (labels, task name, summary).
        Heads absent from the checkpoint keep their fresh initialization (fine-tuning from a pretrained
        model); backbone names and shapes are checked as `checkpoints.load_init_checkpoint` does.
        """
        from xlnet_tf import checkpoints, export_info
        from xlnet_tf.preprocessing import XLNetPreprocessor

        weights = resolve_weights(checkpoint)
        directory = checkpoint if os.path.isdir(checkpoint) else os.path.dirname(checkpoint)
        recorded = export_info.read_optional(directory)
        info = recorded.to_dict() if recorded else {}
        config = resolve_config(config, directory, config_overrides)
        kwargs = {**cls.task_kwargs_from_export_info(info), **task_kwargs}
        if cls.takes_text:
            spiece_model = spiece_model or _first_existing(os.path.join(directory, "spiece.model"),
                                                           info.get("spiece_model_file"))
            if spiece_model and "preprocessor" not in kwargs:
                kwargs["preprocessor"] = XLNetPreprocessor(
                    spiece_model, sequence_length=sequence_length or info.get("max_seq_length") or 128,
                    uncased=info.get("uncased", False) if uncased is None else uncased)
        model = cls(config, **kwargs)
        checkpoints.load_init_checkpoint(model, weights, require_heads=require_heads)
        return model

    takes_text = False  # from_checkpoint attaches an XLNetPreprocessor

    @classmethod
    def task_kwargs_from_export_info(cls, info: dict) -> dict:
        """Task arguments recorded by a fine-tuning runner in `export_info.json` (default: none)."""
        del info
        return {}


def _is_text(value) -> bool:
    """A string, or an array / tensor of strings."""
    if isinstance(value, (str, bytes)):
        return True
    if isinstance(value, (tf.Tensor, tf.RaggedTensor)):
        return value.dtype == tf.string
    return isinstance(value, np.ndarray) and value.dtype.kind in ("U", "S", "O")


def _read_json(path: str) -> Optional[dict]:
    if not os.path.exists(path):
        return None
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def _first_existing(*paths) -> Optional[str]:
    return next((p for p in paths if p and os.path.exists(p)), None)


def resolve_weights(checkpoint: str) -> str:
    """The path `checkpoints.load_init_checkpoint` reads for `checkpoint`: a release directory without a
    `checkpoint` state file (as the released zip) resolves to its `xlnet_model.ckpt` prefix."""
    if not os.path.exists(checkpoint) and not tf.io.gfile.exists(checkpoint + ".index"):
        raise FileNotFoundError(f"from_checkpoint: {checkpoint} does not exist")
    if os.path.isdir(checkpoint) and tf.train.latest_checkpoint(checkpoint) is None:
        if os.path.exists(os.path.join(checkpoint, "model.safetensors")):
            return checkpoint
        found = tf.io.gfile.glob(os.path.join(checkpoint, "*.ckpt.index"))
        if len(found) != 1:
            raise FileNotFoundError(f"from_checkpoint: {checkpoint} holds no checkpoint (expected a 'checkpoint' "
                                    f"file, one *.ckpt.index such as xlnet_model.ckpt.index, or model.safetensors); "
                                    f"found {[os.path.basename(p) for p in found]}")
        return found[0][:-len(".index")]
    return checkpoint


def resolve_config(config, directory: str, overrides: Optional[dict] = None):
    """An `XLNetConfig` from a config, its dict, a JSON path (ours, the release's or Hugging Face's), or
    None: `xlnet_config.json` / `config.json` in `directory`."""
    from xlnet_tf.config import XLNetConfig

    overrides = dict(overrides or {})
    if config is None:
        config = _first_existing(os.path.join(directory, "xlnet_config.json"), os.path.join(directory, "config.json"))
        if config is None:
            raise ValueError(f"from_checkpoint: no config given and no xlnet_config.json or config.json in "
                             f"{directory}; pass config=")
    if isinstance(config, XLNetConfig):
        return config.replace(**overrides)
    if isinstance(config, Mapping):
        return XLNetConfig.from_dict(dict(config), **overrides)
    values = _read_json(config)
    if values is None:
        raise ValueError(f"from_checkpoint: config file not found: {config}")
    if "vocab_size" in values:  # Hugging Face's config.json
        return XLNetConfig.from_hf_dict(values, **overrides)
    return XLNetConfig.from_json_file(config, **overrides)
