"""Token classification (tagging: part of speech, named entities, chunks): one label per input position from the
backbone's content stream, as Hugging Face's `XLNetForTokenClassification` (dropout is the backbone's last one,
then a dense layer to `num_labels`; no sequence summary).

Inputs are the tagging records' (`tfrecords/tagging_data.py`, packed by `xlnet_tf/text/tagging.py`): a window of a
sentence's word pieces, `<sep> <cls>` at the end, left-padded. `label_ids [B, L]` holds the label of each word on
its first piece and `IGNORE_LABEL` (-100) everywhere else (the other pieces of a word, `<sep>`, `<cls>`,
padding): those positions take no part in the loss or the metrics. A word in several overlapping windows is
trained in each (as Hugging Face and the original's SQuAD windows do); its prediction is read from the window where
it has the most context (`is_max_context`), see `xlnet_tf/text/tagging.stitch`.
"""

from __future__ import annotations

import keras
import tensorflow as tf

from xlnet_tf import initializers
from xlnet_tf.backbone import XLNetBackbone
from xlnet_tf.models.common import finetuning_config, token_ids
from xlnet_tf.task import Task, combine_weights, global_weighted_mean
from xlnet_tf.text.tagging import IGNORE_LABEL

# original-layout scope of the output layer (the original release has no tagging head; the name follows its
# `model/classification_<task>/logit` convention and maps to Hugging Face's `classifier`)
TAGGING_SCOPE = "model/tagging/logit"


@keras.saving.register_keras_serializable(package="xlnet_tf")
class XLNetTagger(Task):
    """Per-position classification over the content stream.

    Args:
      config: `XLNetConfig` (or its dict); memories and bidirectional data are off when fine-tuning.
      num_labels: the tag set's size (>= 2).
      labels: optional tag names, `num_labels` of them (kept in the config; serving returns names).

    Call: `model(features, training)` with `input_ids`, `segment_ids` int `[B, L]`, `attention_mask [B, L]`
    (1 = real token, 0 = padding) -> `{"logits": [B, L, num_labels]}` float32.
    `per_example_loss`: the cross-entropy summed over each window's labelled positions (`label_ids >= 0`);
    `task_loss`: the sum over the batch's labelled positions divided by their number (windows weighted by
    `is_real_example` and `sample_weight`), i.e. the mean over labelled words, as Hugging Face's loss.
    Keras: `label_ids` inside `x` (or as `y`); `compile()` defaults to this loss and token accuracy over the
    labelled positions.
    """

    label_key = "label_ids"
    ignore_label = IGNORE_LABEL
    default_learning_rate = 5e-5

    def __init__(self, config, num_labels: int = 2, labels=None, **kwargs):
        super().__init__(**kwargs)
        if isinstance(num_labels, bool) or int(num_labels) < 2:
            raise ValueError(f"num_labels must be >= 2 for tagging, got {num_labels!r}")
        if labels is not None and len(labels) != int(num_labels):
            raise ValueError(f"labels: {len(labels)} names for num_labels={num_labels}")
        self.num_labels = int(num_labels)
        self.labels = None if labels is None else [str(x) for x in labels]
        self.config = config = finetuning_config(config)
        self.backbone = XLNetBackbone(config, name="transformer", dtype=self.dtype_policy)
        self.logit = keras.layers.Dense(self.num_labels, kernel_initializer=initializers.normal(config.initializer_range),
                                        name="logit", dtype=self.dtype_policy)
        self.backbone.build()
        self.logit.build((None, None, config.d_model))

    @property
    def num_classes(self):
        return self.num_labels

    def call(self, features, training=False):
        hidden = self.backbone(token_ids(features), segment_ids=features.get("segment_ids"),
                               attention_mask=features.get("attention_mask"), training=training)["content"]
        return {"logits": tf.cast(self.logit(hidden), tf.float32)}

    @staticmethod
    def labelled(features):
        """`[B, L]` float32: 1 at the positions whose label counts (`label_ids >= 0`)."""
        return tf.cast(tf.greater_equal(features["label_ids"], 0), tf.float32)

    def per_position_loss(self, features, outputs):
        """`[B, L]` cross-entropy at each position (0 where the label is ignored)."""
        labels = tf.cast(features["label_ids"], tf.int32)
        safe = tf.where(labels >= 0, labels, tf.zeros_like(labels))
        loss = tf.nn.sparse_softmax_cross_entropy_with_logits(labels=safe, logits=outputs["logits"])
        return loss * self.labelled(features)

    def per_example_loss(self, features, outputs):
        return tf.reduce_sum(self.per_position_loss(features, outputs), axis=1)

    def _position_weights(self, features, sample_weight=None):
        """`[B, L]`: 1 at labelled positions of real windows (times `sample_weight` per window)."""
        window = combine_weights(features.get("is_real_example"), sample_weight)
        weights = self.labelled(features)
        if window is not None:
            weights = weights * tf.cast(tf.reshape(window, [-1, 1]), tf.float32)
        return weights

    def task_loss(self, features, outputs, sample_weight=None):
        return global_weighted_mean(self.per_position_loss(features, outputs),
                                    self._position_weights(features, sample_weight))

    def loss_sum_and_weight(self, features, outputs):
        """The runners' loss terms (`finetuning.task_loss_fn`): the summed cross-entropy of the batch's labelled
        positions and their number, so the training loop's loss is `task_loss` (a mean over labelled words,
        not over windows)."""
        weights = self._position_weights(features)
        return tf.reduce_sum(self.per_position_loss(features, outputs) * weights), tf.reduce_sum(weights)

    def keras_targets(self, features, outputs):
        labels = tf.cast(features["label_ids"], tf.int32)
        weights = self.labelled(features)
        real = features.get("is_real_example")
        if real is not None:
            weights = weights * tf.cast(tf.reshape(real, [-1, 1]), tf.float32)
        return tf.where(labels >= 0, labels, tf.zeros_like(labels)), outputs["logits"], weights

    def default_metrics(self):
        return [keras.metrics.SparseCategoricalAccuracy(name="accuracy")]

    @classmethod
    def task_kwargs_from_export_info(cls, info):
        out = {}
        if "num_labels" in info:
            out["num_labels"] = info["num_labels"]
        if info.get("labels"):
            out["labels"] = list(info["labels"])
        return out

    def original_variables(self):
        return {f"{TAGGING_SCOPE}/kernel": self.logit.kernel, f"{TAGGING_SCOPE}/bias": self.logit.bias}

    def get_build_config(self):
        return None  # variables are created in __init__

    def get_config(self):
        return {**super().get_config(), "config": self.config.to_dict(), "num_labels": self.num_labels,
                "labels": self.labels}

