"""Sequence-level fine-tuning models: classification / regression of a text, pair or whole document, and
multiple choice (RACE): the summary of each packed sequence, then a dense head."""

from __future__ import annotations

import keras
import tensorflow as tf

from xlnet_tf.layers import initializers
from xlnet_tf.models.common import FineTuningModel, check_document_preprocessor, summary_variables, token_ids
from xlnet_tf.models.task import combine_weights, global_weighted_mean


@keras.saving.register_keras_serializable(package="xlnet_tf")
class XLNetClassifier(FineTuningModel):
    """Sequence classification (`num_labels` > 0) or regression (`regression=True`).

    Call: `model(features)` with `input_ids [B, L]`, `segment_ids [B, L]`, `attention_mask [B, L]`
    (1 = real; inputs left-padded with `<cls>` last) -> `{"logits": [B, num_labels]}` (float32) or
    `{"score": [B]}`. Long documents: `[B, S, L]` inputs (S segments of a document left-padded as a whole,
    `<cls>` last) are read segment by segment with memories of `mem_len` positions, and classified from
    the summary of the last segment (`FineTuningModel.read_document`). `task_loss(features, outputs)`: mean
    cross-entropy / squared error over the batch, weighted by `is_real_example` when present. Original scopes:
    `model/sequnece_summary`, `model/classification_{task_name}/logit` or `model/regression_{task_name}/logit`.

    Keras: `preprocessor=XLNetPreprocessor(...)` lets `fit`/`evaluate`/`predict` take raw text
    (`(text, label)`, `((text_a, text_b), label)`); `compile()` defaults to this loss and accuracy (MSE
    for regression). Labels are class ids in `[0, num_labels)` (integers; `Task` refuses others). A model
    with `mem_len` reads documents: its preprocessor must pack several segments
    (`XLNetPreprocessor(max_segments=S)`), and one that packs several segments needs `mem_len`.
    """

    takes_text = True
    real_valued_labels_hint = "; for real-valued targets use XLNetClassifier(regression=True)"

    def __init__(self, config, num_labels: int = 2, regression: bool = False, task_name: str = "task",
                 summary_type: str = "last", use_proj: bool = True, mem_len=None, bptt_segments: int = 0,
                 summary_rows_only: bool = True, document_summary: str = "last_segment", **kwargs):
        super().__init__(config, summary_type=summary_type, use_proj=use_proj, mem_len=mem_len,
                         bptt_segments=bptt_segments, summary_rows_only=summary_rows_only,
                         document_summary=document_summary, **kwargs)
        if not regression and num_labels < 2:
            raise ValueError(f"num_labels must be >= 2 for classification, got {num_labels}")
        self.num_labels = 1 if regression else num_labels
        self.regression = regression
        self.task_name = task_name
        self.logit = keras.layers.Dense(self.num_labels,
                                        kernel_initializer=initializers.normal(self.config.initializer_range),
                                        name="logit", dtype=self.dtype_policy)
        self.logit.build((None, self.config.d_model))
        check_document_preprocessor(self.preprocessor, self.mem_len)

    @property
    def num_classes(self):
        return None if self.regression else self.num_labels

    def call(self, features, training=False):
        pooled = self.pooled(token_ids(features), features.get("segment_ids"),
                             features.get("attention_mask"), training)
        logits = tf.cast(self.logit(pooled), tf.float32)
        if self.regression:
            return {"score": logits[:, 0]}
        return {"logits": logits}

    def per_example_loss(self, features, outputs):
        if self.regression:
            return tf.square(outputs["score"] - tf.cast(features["label"], tf.float32))
        return tf.nn.sparse_softmax_cross_entropy_with_logits(
            labels=tf.cast(features["label"], tf.int32), logits=outputs["logits"])

    def task_loss(self, features, outputs, sample_weight=None):
        return global_weighted_mean(self.per_example_loss(features, outputs),
                                    combine_weights(features.get("is_real_example"), sample_weight))

    def keras_targets(self, features, outputs):
        if self.regression:
            return tf.cast(features["label"], tf.float32), outputs["score"], features.get("is_real_example")
        return features["label"], outputs["logits"], features.get("is_real_example")

    def default_metrics(self):
        if self.regression:
            return [keras.metrics.MeanSquaredError(name="mse")]
        return [keras.metrics.SparseCategoricalAccuracy(name="accuracy")]

    @classmethod
    def task_kwargs_from_export_info(cls, info):
        out = {}
        if info.get("task") in ("classifier", "regression"):
            out["regression"] = info["task"] == "regression"
            if info.get("num_labels"):
                out["num_labels"] = max(int(info["num_labels"]), 2)
        for ours, theirs in (("task_name", "task_name"), ("summary_type", "summary_type"),
                             ("use_proj", "use_summ_proj"), ("mem_len", "mem_len"),
                             ("document_summary", "document_summary")):
            if theirs in info:
                out[ours] = info[theirs]
        return out

    def original_variables(self):
        kind = "regression" if self.regression else "classification"
        out = summary_variables(self.sequence_summary)
        out[f"model/{kind}_{self.task_name}/logit/kernel"] = self.logit.kernel
        out[f"model/{kind}_{self.task_name}/logit/bias"] = self.logit.bias
        return out

    def get_config(self):
        return {**super().get_config(), "config": self.config.to_dict(), "num_labels": self.num_labels,
                "regression": self.regression, "task_name": self.task_name, "summary_type": self.summary_type,
                "use_proj": self.use_proj, "mem_len": self.mem_len, "bptt_segments": self.bptt_segments,
                "summary_rows_only": self.summary_rows_only, "document_summary": self.document_summary}


@keras.saving.register_keras_serializable(package="xlnet_tf")
class XLNetMultipleChoice(FineTuningModel):
    """Multiple choice (RACE): every choice packed as its own sequence, one score each.

    Call: `model(features)` with `input_ids`, `segment_ids`, `attention_mask` `[B, C, L]` ->
    `{"logits": [B, C]}` float32. `task_loss`: mean cross-entropy against `label [B]` (weighted by
    `is_real_example` when present). Original scope of the scorer: `logits/dense`. Keras: `compile()`
    defaults to this loss and accuracy.
    """

    def __init__(self, config, num_choices: int = 4, summary_type: str = "last", use_proj: bool = True,
                 summary_rows_only: bool = True, **kwargs):
        super().__init__(config, summary_type=summary_type, use_proj=use_proj, summary_rows_only=summary_rows_only,
                         **kwargs)
        self.num_choices = num_choices
        self.scorer = keras.layers.Dense(1, kernel_initializer=initializers.normal(self.config.initializer_range),
                                         name="logits", dtype=self.dtype_policy)
        self.scorer.build((None, self.config.d_model))

    @property
    def num_classes(self):
        return self.num_choices

    def call(self, features, training=False):
        ids = token_ids(features)  # [B, C, L]; C may be below num_choices in a serving request
        length = keras.ops.shape(ids)[-1]  # static where known (unknown when serving)
        flat = lambda x: None if x is None else tf.reshape(x, [-1, length])  # noqa: E731
        pooled = self.pooled(flat(ids), flat(features.get("segment_ids")),
                             flat(features.get("attention_mask")), training)
        scores = tf.cast(self.scorer(pooled), tf.float32)
        return {"logits": tf.reshape(scores, tf.shape(ids)[:-1])}  # [B, C]: each question's own choices

    def per_example_loss(self, features, outputs):
        return tf.nn.sparse_softmax_cross_entropy_with_logits(
            labels=tf.cast(features["label"], tf.int32), logits=outputs["logits"])

    def task_loss(self, features, outputs, sample_weight=None):
        return global_weighted_mean(self.per_example_loss(features, outputs),
                                    combine_weights(features.get("is_real_example"), sample_weight))

    def keras_targets(self, features, outputs):
        return features["label"], outputs["logits"], features.get("is_real_example")

    def default_metrics(self):
        return [keras.metrics.SparseCategoricalAccuracy(name="accuracy")]

    @classmethod
    def task_kwargs_from_export_info(cls, info):
        return {ours: info[theirs] for ours, theirs in (("summary_type", "summary_type"), ("use_proj", "use_summ_proj"))
                if theirs in info}

    def original_variables(self):
        out = summary_variables(self.sequence_summary)
        out["logits/dense/kernel"] = self.scorer.kernel
        out["logits/dense/bias"] = self.scorer.bias
        return out

    def get_config(self):
        return {**super().get_config(), "config": self.config.to_dict(), "num_choices": self.num_choices,
                "summary_type": self.summary_type, "use_proj": self.use_proj, "mem_len": self.mem_len,
                "bptt_segments": self.bptt_segments, "summary_rows_only": self.summary_rows_only,
                "document_summary": self.document_summary}
