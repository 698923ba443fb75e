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
import numpy as np
import tensorflow as tf

from xlnet_tf.layers import initializers
from xlnet_tf.backbone import XLNetBackbone
from xlnet_tf.models.common import finetuning_config, token_ids
from xlnet_tf.models.task import Task, combine_weights, global_weighted_mean
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
    labelled positions. With `preprocessor=XLNetTaggingPreprocessor(...)`, `fit` / `evaluate` take
    pre-tokenized sentences (`x` a list of word lists, `y` a list of label-id lists, one per word) and `predict`
    returns one prediction per word: `{"tag_ids": [...], "probabilities": [...]}` (lists of `[num_words]`
    arrays, and `"tags"` with `labels`), each word read from the window where it has the most context.
    """

    takes_text = True

    label_key = "label_ids"
    ignore_label = IGNORE_LABEL
    default_learning_rate = 5e-5

    def __init__(self, config, num_labels: int = 2, labels=None, **kwargs):
        preprocessor = kwargs.get("preprocessor")
        if preprocessor is not None and not hasattr(preprocessor, "windows"):
            raise ValueError("XLNetTagger: the preprocessor must be an XLNetTaggingPreprocessor (words -> windows), "
                             f"got {type(preprocessor).__name__}")
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

    # ------------------------------------------------------------------------- pre-tokenized sentences
    def _is_sentences(self, x) -> bool:
        return (self.preprocessor is not None and hasattr(self.preprocessor, "windows") and isinstance(x, list)
                and all(isinstance(s, (list, tuple)) for s in x))

    def _windows(self, x, y=None):
        labels = None
        if y is not None:
            labels = [[self.labels.index(t) if isinstance(t, str) and self.labels and t in self.labels else t
                       for t in tags] for tags in y]
        return self.preprocessor.windows(x, labels)

    def fit(self, x=None, y=None, batch_size=None, sample_weight=None, validation_data=None, **kwargs):
        if self._is_sentences(x):
            x, y = self._windows(x, y), None
            if validation_data is not None and not isinstance(validation_data, (dict,)) and \
                    self._is_sentences(validation_data[0]):
                validation_data = self._windows(*validation_data[:2])
        return super().fit(x, y, batch_size=batch_size, sample_weight=sample_weight,
                           validation_data=validation_data, **kwargs)

    def evaluate(self, x=None, y=None, batch_size=None, sample_weight=None, **kwargs):
        if self._is_sentences(x):
            x, y = self._windows(x, y), None
        return super().evaluate(x, y, batch_size=batch_size, sample_weight=sample_weight, **kwargs)

    def predict(self, x, batch_size=None, **kwargs):
        if not self._is_sentences(x):
            return super().predict(x, batch_size=batch_size, **kwargs)
        from xlnet_tf.text import tagging

        windows = self._windows(x)
        features = {k: v for k, v in windows.items() if k != "example_index"}
        logits = super().predict(features, batch_size=batch_size, **kwargs)["logits"]
        probs = np.exp(logits - logits.max(-1, keepdims=True))
        probs /= probs.sum(-1, keepdims=True)
        ids = probs.argmax(-1)
        best = np.take_along_axis(probs, ids[..., None], -1)[..., 0]
        counts = [len(s) for s in x]
        tag_ids = tagging.stitch_examples(windows["example_index"], windows["word_ids"], windows["is_max_context"],
                                          ids, counts)
        out = {"tag_ids": tag_ids,
               "probabilities": tagging.stitch_examples(windows["example_index"], windows["word_ids"],
                                                        windows["is_max_context"], best, counts)}
        if self.labels:
            out["tags"] = [[self.labels[int(i)] for i in row] for row in tag_ids]
        return out

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
        return tf.where(labels >= 0, labels, tf.zeros_like(labels)), outputs["logits"], self._position_weights(features)

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

    @classmethod
    def preprocessor_from_export_info(cls, spiece_model, info, sequence_length, text):
        """Words -> the run's windows (its `doc_stride`, normalization (`text`) and window length)."""
        from xlnet_tf.text.tagging_preprocessor import XLNetTaggingPreprocessor

        return XLNetTaggingPreprocessor(spiece_model, sequence_length=sequence_length, uncased=text.uncased,
                                        keep_accents=text.keep_accents,
                                        doc_stride=info.get("doc_stride") or 64)

    def original_variables(self):
        return {f"{TAGGING_SCOPE}/kernel": self.logit.kernel, f"{TAGGING_SCOPE}/bias": self.logit.bias}

    def get_build_config(self):
        return None  # variables are created in __init__

    def get_config(self):
        return {**super().get_config(), "config": self.config.to_dict(), "num_labels": self.num_labels,
                "labels": self.labels}

