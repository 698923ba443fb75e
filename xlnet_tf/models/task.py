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
  checkpoint directories, with its config and SentencePiece model (for a long-document run, a preprocessor
  of its `max_segments`, so that `predict` reads whole texts as the exported model and the records do).

Bad input is refused with one `UserError` naming it, never trained or scored silently:
- labels of a classification task (`num_classes`) must be class ids: integers in `[0, num_classes)`.
  Integer-valued floats (`1.0`, e.g. from pandas) are accepted; other floats are refused (real-valued
  targets are a regression model's), as are strings (map them to ids with the label list). Arrays are
  checked before `fit`/`evaluate` start; a `tf.data` dataset's label dtype is checked up front and its
  values as each batch is read (the same error, raised when the batch is reached).
- `fit`/`evaluate` on data without a single batch (an empty dataset or arrays) stop with "no batches";
  so does `predict` on an empty dataset. `predict` on an empty list or array returns empty outputs of the
  right shapes (`logits [0, num_labels]`), as the exported `serving_default` does for an empty request.
- With a preprocessor, `x` is a batch: a list / array of strings `[N]`, or a pair `(texts_a, texts_b)`; a
  lone string is refused (pass `[text]`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import re
from collections.abc import Mapping
from typing import Optional

import keras
import numpy as np
import tensorflow as tf

from xlnet_tf.models import task_inputs
from xlnet_tf.artifacts import provenance
from xlnet_tf.artifacts.text_settings import TextSettings
from xlnet_tf.errors import UserError

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
    real_valued_labels_hint = ""  # what to use instead when class-id labels are real-valued
    ignore_label: Optional[int] = None  # a label value that marks "no label here" (tagging's -100), accepted

    @property
    def num_classes(self) -> Optional[int]:
        """The `label_key` labels are class ids in `[0, num_classes)`; None: real-valued (or no single label)."""
        return None

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
        from xlnet_tf.training.loop import CLIP_MODES

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
        self._build_optimizer()

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
            features = x
        elif isinstance(y, Mapping):
            features = {**x, **y}
        elif self.label_key is None:
            raise ValueError(f"{type(self).__name__}: y must be a dict of label features, got "
                             f"{type(y).__name__}")
        else:
            features = {**x, self.label_key: y}
        label = features.get(self.label_key) if self.label_key else None
        if label is not None and hasattr(label, "dtype"):
            self._check_label_dtype(label.dtype)
        return features

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

    # --------------------------------------------------------------------------------------- labels
    def _check_label_dtype(self, dtype) -> None:
        """Labels must be numbers: strings (a TF, numpy or Keras string dtype) are refused; their dtype is known
        before any batch is read."""
        if task_inputs.is_string_dtype(dtype):
            raise UserError(self._string_labels_message())

    def _string_labels_message(self) -> str:
        name = type(self).__name__
        if self.num_classes is None:
            return f"{name}: the labels are strings; regression targets must be numbers"
        return (f"{name}: the labels are strings; labels must be class ids, integers in [0, {self.num_classes}): "
                f"map the names to ids with the label list (e.g. [label_list.index(name) for name in names]). "
                f"A text pair with labels is ((texts_a, texts_b), labels)")

    def _labels_in(self, x, y):
        """The `label_key` labels among Keras's `x, y` (`y` itself, `y[label_key]` or `x[label_key]`), or None."""
        if self.label_key is None:
            return None
        if isinstance(y, Mapping):
            return y.get(self.label_key)
        if y is not None:
            return y
        return x.get(self.label_key) if isinstance(x, Mapping) else None

    def _check_labels(self, x, y) -> None:
        """Labels in memory are checked here (`check_label_values`); a dataset's label dtype is checked up
        front, its values as batches are read (`_with_label_checks`)."""
        if isinstance(x, tf.data.Dataset):
            label = self._labels_in(*keras.utils.unpack_x_y_sample_weight(x.element_spec)[:2])
            if isinstance(label, tf.TensorSpec):
                self._check_label_dtype(label.dtype)
            return
        labels = self._labels_in(x, y)
        if labels is not None:
            task_inputs.check_label_values(type(self).__name__, labels, self.num_classes, self.real_valued_labels_hint,
                                           self._string_labels_message(), ignore=self.ignore_label)

    def _with_label_checks(self, dataset: tf.data.Dataset) -> tf.data.Dataset:
        """`dataset` with class-id labels asserted (integer-valued, in `[0, num_classes)`) as it is read."""
        self._check_labels(dataset, None)
        label = self._labels_in(*keras.utils.unpack_x_y_sample_weight(dataset.element_spec)[:2])
        if self.num_classes is None or not isinstance(label, tf.TensorSpec):
            return dataset
        n = self.num_classes
        message = self._dataset_labels_message()

        def check(*data):
            data = data[0] if len(data) == 1 else data
            labels = self._labels_in(*keras.utils.unpack_x_y_sample_weight(data)[:2])
            values = tf.cast(labels, tf.float64)
            valid = (values >= 0) & (values < n)
            if self.ignore_label is not None:
                valid = valid | tf.equal(values, float(self.ignore_label))
            ok = tf.reduce_all(valid & tf.equal(values, tf.round(values)))
            with tf.control_dependencies([tf.debugging.Assert(ok, [message, labels], summarize=8)]):
                return tf.nest.map_structure(lambda t: tf.identity(t) if isinstance(t, tf.Tensor) else t, data)

        return dataset.map(check)

    def _dataset_labels_message(self) -> str:
        return (f"{type(self).__name__}: labels must be class ids, integers in [0, {self.num_classes})"
                f"{self.real_valued_labels_hint}; got labels:")

    @contextlib.contextmanager
    def _label_errors(self):
        """A failed label assertion of `_with_label_checks` (raised by TensorFlow as the batch is read) is
        re-raised as the `UserError` arrays get, with the offending labels."""
        try:
            yield
        except tf.errors.InvalidArgumentError as e:
            message = self._dataset_labels_message() if self.num_classes is not None else None
            found = message and re.search(re.escape(message) + r"\] \[([^\]]*)\]", e.message or "")
            if not found:
                raise
            raise UserError(f"{message} [{found.group(1)}] (in a batch of the dataset)") from None

    # ---------------------------------------------------------------------------------- empty data
    def _no_batches(self, method: str) -> UserError:
        return UserError(f"{type(self).__name__}.{method}: the data holds no batches (an empty dataset or "
                         f"arrays, e.g. after take(0) or a filter that dropped every example); pass at least "
                         f"one example")

    def _refuse_empty(self, x, method: str) -> None:
        """Data known to be empty (a dataset of cardinality 0, arrays of 0 rows) is refused up front."""
        if isinstance(x, tf.data.Dataset):
            empty = int(x.cardinality()) == 0
        else:
            empty = x is not None and task_inputs.num_rows(x) == 0
        if empty:
            raise self._no_batches(method)

    # --------------------------------------------------------------------------- fit/evaluate/predict
    def _text_batch(self, x, method: str):
        """`x` of fit/evaluate/predict with a preprocessor: lists of texts become string arrays `[N]` (an
        empty list too); a lone string is refused (a batch is a list)."""
        if task_inputs.is_one_text(x) or (isinstance(x, tuple) and any(task_inputs.is_one_text(v) for v in x)):
            raise UserError(f"{type(self).__name__}.{method}: x is one string; pass a list of strings (a batch, "
                            f"e.g. [text]), or a pair of lists (texts_a, texts_b)")
        if isinstance(x, list):  # a list is texts; a pair of text lists is a tuple
            return task_inputs.string_array(x)
        if isinstance(x, tuple):
            return tuple(task_inputs.string_array(v) if isinstance(v, list) else v for v in x)
        return x

    def _as_dataset(self, x, y, sample_weight, batch_size, shuffle=False, method="fit"):
        """Raw inputs -> a batched, preprocessed `tf.data.Dataset` (only with a preprocessor)."""
        if isinstance(x, tf.data.Dataset):
            if y is not None or sample_weight is not None:
                raise ValueError("y and sample_weight must be inside the dataset when x is a tf.data.Dataset")
            if batch_size is not None:
                raise ValueError("batch_size must be None when x is a tf.data.Dataset (batch the dataset)")
            self._refuse_empty(x, method)  # before the preprocessor is traced into the pipeline
            return x.map(self.preprocessor, num_parallel_calls=tf.data.AUTOTUNE).prefetch(tf.data.AUTOTUNE)
        x = self._text_batch(x, method)
        self._refuse_empty(x, method)
        # texts in memory are packed at once, eagerly, by the preprocessor's traced packing; a `tf.data` map of
        # it would instantiate and optimize the packing graph again for each new iterator (~2.5 s on the 2-core host)
        data = keras.utils.pack_x_y_sample_weight(self.preprocessor(x), y, sample_weight)
        ds = tf.data.Dataset.from_tensor_slices(data)
        if shuffle:
            ds = ds.shuffle(int(ds.cardinality()), reshuffle_each_iteration=True)
        return ds.batch(batch_size or 32).prefetch(tf.data.AUTOTUNE)

    def _check_features(self, x):
        """Without a preprocessor, raw text is a user error to name before Keras's data adapters see it."""
        if self.preprocessor is None and x is not None and not isinstance(x, (Mapping, tf.data.Dataset)):
            if any(task_inputs.is_text(v) for v in tf.nest.flatten(x)):
                raise ValueError(f"{type(self).__name__} got raw text but has no preprocessor: build it with "
                                 f"preprocessor=XLNetPreprocessor(spiece_model, sequence_length) (or "
                                 f"from_checkpoint with a spiece.model), or pass a dict of features")

    def fit(self, x=None, y=None, batch_size=None, sample_weight=None, validation_data=None, **kwargs):
        self._check_features(x)
        self._check_labels(x, y)
        if validation_data is not None and not isinstance(validation_data, tf.data.Dataset):
            self._check_labels(*keras.utils.unpack_x_y_sample_weight(validation_data)[:2])
        if self.preprocessor is not None and x is not None:
            x = self._as_dataset(x, y, sample_weight, batch_size, shuffle=kwargs.pop("shuffle", True))
            y = sample_weight = batch_size = None
            kwargs["shuffle"] = False  # shuffled above (arrays) or by the user's tf.data pipeline
            if validation_data is not None and not isinstance(validation_data, tf.data.Dataset):
                vx, vy, vw = keras.utils.unpack_x_y_sample_weight(validation_data)
                validation_data = self._as_dataset(vx, vy, vw, kwargs.get("validation_batch_size"),
                                                   method="fit (validation_data)")
            elif validation_data is not None:
                validation_data = self._as_dataset(validation_data, None, None, None, method="fit (validation_data)")
            kwargs.pop("validation_batch_size", None)
        self._refuse_empty(x, "fit")
        if isinstance(x, tf.data.Dataset):
            kwargs.setdefault("shuffle", False)  # Keras ignores it for a dataset (and warns)
            x = self._with_label_checks(x)
        if isinstance(validation_data, tf.data.Dataset):
            validation_data = self._with_label_checks(validation_data)
        self._build_optimizer()
        counter = _BatchCounter()
        kwargs["callbacks"] = _with_callback(kwargs.get("callbacks"), counter)
        with self._label_errors():
            history = super().fit(x=x, y=y, batch_size=batch_size, sample_weight=sample_weight,
                                  validation_data=validation_data, **kwargs)
        if counter.batches == 0 and kwargs.get("epochs", 1) > kwargs.get("initial_epoch", 0):
            raise self._no_batches("fit")
        return history

    def _build_optimizer(self) -> None:
        """Builds the optimizer's slots before `fit` traces its step (and before a `.keras` file's optimizer
        variables are loaded, `compile_from_config`). Without a distribution strategy Keras
        builds them inside the first trace of the step, and TensorFlow then traces the step a second time
        (a `tf.function` that creates variables is traced again once they exist): the step's tracing, the
        slowest part of a first `fit`, is done twice. Every variable of a task model exists after
        `__init__` (as `compile_from_config` relies on; Keras's optimizer refuses a variable it was not
        built with, loudly)."""
        if self.optimizer is None or self.optimizer.built:
            return
        with self.distribute_strategy.scope():
            self.optimizer.build(self.trainable_variables)

    def evaluate(self, x=None, y=None, batch_size=None, sample_weight=None, **kwargs):
        if kwargs.get("_use_cached_eval_dataset"):  # fit's validation: its data was prepared by fit
            return super().evaluate(x=x, y=y, batch_size=batch_size, sample_weight=sample_weight, **kwargs)
        self._check_features(x)
        self._check_labels(x, y)
        if self.preprocessor is not None and x is not None:
            x = self._as_dataset(x, y, sample_weight, batch_size, method="evaluate")
            y = sample_weight = batch_size = None
        self._refuse_empty(x, "evaluate")
        if isinstance(x, tf.data.Dataset):
            x = self._with_label_checks(x)
        counter = _BatchCounter()
        kwargs["callbacks"] = _with_callback(kwargs.get("callbacks"), counter)
        with self._label_errors():
            result = super().evaluate(x=x, y=y, batch_size=batch_size, sample_weight=sample_weight, **kwargs)
        if counter.batches == 0:
            raise self._no_batches("evaluate")
        return result

    def predict(self, x, batch_size=None, **kwargs):
        """Keras's `predict`; with a preprocessor `x` may be texts (a list or array `[N]`, a pair of them, or
        a `tf.data` dataset of them). Empty lists / arrays give empty outputs (e.g. `logits [0, C]`)."""
        self._check_features(x)
        if self.preprocessor is not None and not isinstance(x, tf.data.Dataset):
            x = self._text_batch(x, "predict")
        if not isinstance(x, tf.data.Dataset) and task_inputs.num_rows(x) == 0:
            return self._predict_empty(x)
        if self.preprocessor is not None:
            x = self._as_dataset(x, None, None, batch_size, method="predict")
            batch_size = None
        self._refuse_empty(x, "predict")
        counter = _BatchCounter()
        kwargs["callbacks"] = _with_callback(kwargs.get("callbacks"), counter)
        try:
            return super().predict(x, batch_size=batch_size, **kwargs)
        except UnboundLocalError:  # Keras's predict on data without a batch
            if counter.batches:
                raise
            raise self._no_batches("predict") from None

    def _predict_empty(self, x):
        """The outputs for 0 examples, as numpy arrays with the right trailing shapes (the model run on an
        empty batch)."""
        features = self.preprocessor(x) if self.preprocessor is not None else x
        return tf.nest.map_structure(np.asarray, self.predict_step(features))

    def train_step(self, data):
        """Keras's step, finished as `training.Trainer`'s (`training.apply_clipped_gradients`): the dense
        gradient is clipped (Keras's optimizer would take the norm of the word embedding's sparse gradient
        with repeated ids counted apart) after the sum over replicas (Keras's optimizer would clip each
        replica's part) or, with `compile(clip_mode="per_replica")`, each replica's share, as the original;
        under float16 loss scaling at clip x scale. So `fit` takes the Trainer's steps on one device and on
        several, in any precision."""
        from xlnet_tf.training import loop as training

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
          sequence_length, uncased: of the preprocessor; default: `export_info.json`'s, else 128 / False (its
            `keep_accents` too: the normalization of the run's records). A long-document run's `max_segments`
            (with its `mem_len` and `document_summary`) gives a preprocessor of that many segments: `predict`
            reads the whole text as the run's records and its export do.
          config_overrides: run-time knobs on top of the config (e.g. `{"dropout": 0.0}`).
          require_heads: the checkpoint must hold the task head too (e.g. a fine-tuned model).
          **task_kwargs: the task's arguments (`num_labels`, ...); a runner's `export_info.json` supplies
            defaults for the classifier (labels, task name, summary).
        Heads absent from the checkpoint keep their fresh initialization (fine-tuning from a pretrained
        model); backbone names and shapes are checked as `checkpoints.load_init_checkpoint` does.
        """
        from xlnet_tf import checkpoints
        from xlnet_tf.artifacts import export_info

        weights = checkpoints.resolve_weights(checkpoint)
        directory = checkpoint if os.path.isdir(checkpoint) else os.path.dirname(checkpoint)
        recorded = export_info.read_optional(directory)
        info = recorded.to_dict() if recorded else {}
        config = checkpoints.resolve_config(config, directory, config_overrides)
        recorded_kwargs = cls.task_kwargs_from_export_info(info)
        as_list = lambda v: list(v) if isinstance(v, (list, tuple)) else v  # noqa: E731
        clash = [f"{k}: {recorded_kwargs[k]!r} there, {task_kwargs[k]!r} given" for k in sorted(task_kwargs)
                 if k in recorded_kwargs and as_list(task_kwargs[k]) != as_list(recorded_kwargs[k])]
        if clash:  # a fine-tuned head read with another label list, task or summary is silently wrong
            raise UserError(f"{os.path.join(directory, export_info.NAME)}: the model was fine-tuned with other task "
                            f"settings: {'; '.join(clash)}; leave them out (they are read from the run)")
        kwargs = {**recorded_kwargs, **task_kwargs}
        if cls.takes_text:
            spiece_model = spiece_model or checkpoints.first_existing(os.path.join(directory, "spiece.model"),
                                                           info.get("spiece_model_file"))
            if spiece_model and "preprocessor" not in kwargs:
                text = TextSettings.of_model(spiece_model, bool(uncased))
                if recorded is not None:  # the run's tokenization: the same model, its normalization
                    given = dataclasses.replace(recorded.text, uncased=recorded.text.uncased if uncased is None
                                                else bool(uncased))
                    if recorded.text.spiece_sha256 is not None:
                        given = dataclasses.replace(given, spiece_sha256=text.spiece_sha256)
                    provenance.require_same(recorded.text, given, where=os.path.join(directory, export_info.NAME),
                                            now="given", what="the model was fine-tuned with other text settings",
                                            remedy="give the run's SentencePiece model and leave uncased unset")
                    text = recorded.text
                kwargs["preprocessor"] = cls.preprocessor_from_export_info(
                    spiece_model, info, sequence_length=sequence_length or info.get("max_seq_length") or 128,
                    text=text)
        model = cls(config, **kwargs)
        checkpoints.load_init_checkpoint(model, weights, require_heads=require_heads)
        return model

    takes_text = False  # from_checkpoint attaches a preprocessor (`preprocessor_from_export_info`)

    @classmethod
    def preprocessor_from_export_info(cls, spiece_model: str, info: dict, sequence_length: int, text: TextSettings):
        """The text preprocessor `from_checkpoint` attaches: an `XLNetPreprocessor` packing as the run's records
        (its `text` settings; a long-document run, export info's max_segments: documents of that many segments,
        as its records and its exported serving_default pack them)."""
        from xlnet_tf.text.preprocessing import XLNetPreprocessor

        return XLNetPreprocessor(spiece_model, sequence_length=sequence_length, uncased=text.uncased,
                                 keep_accents=text.keep_accents, max_segments=info.get("max_segments") or 1)

    @classmethod
    def task_kwargs_from_export_info(cls, info: dict) -> dict:
        """Task arguments recorded by a fine-tuning runner in `export_info.json` (default: none)."""
        del info
        return {}


class _BatchCounter(keras.callbacks.Callback):
    """Counts the batches a `fit` / `evaluate` / `predict` ran (0: the data held none)."""

    def __init__(self):
        super().__init__()
        self.batches = 0

    def on_train_batch_end(self, batch, logs=None):
        self.batches += 1

    on_test_batch_end = on_predict_batch_end = on_train_batch_end


def _with_callback(callbacks, callback):
    """The user's `callbacks` (None, a list or a `CallbackList`) plus `callback`."""
    if isinstance(callbacks, keras.callbacks.CallbackList):
        callbacks.append(callback)
        return callbacks
    return list(callbacks or []) + [callback]
