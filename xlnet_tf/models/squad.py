"""SQuAD span extraction: start / end (beam over the top starts) and, for SQuAD 2.0, the answer class."""

from __future__ import annotations

import keras
import tensorflow as tf

from xlnet_tf.backbone import XLNetBackbone
from xlnet_tf.heads import SquadHead
from xlnet_tf.models.common import finetuning_config, token_ids
from xlnet_tf.models.task import Task, combine_weights, global_weighted_mean


@keras.saving.register_keras_serializable(package="xlnet_tf")
class XLNetForSquad(Task):
    """Span extraction (SQuAD 1.1 / 2.0) with XLNet's beam-search head (see `heads.SquadHead`).

    Call: `model(features, training)` with `input_ids`, `segment_ids`, `attention_mask` (1 = real), `p_mask`
    (1 = cannot be in the answer) `[B, L]`, `cls_index [B]`, and when training `start_positions`,
    `end_positions`, `is_impossible [B]`. Training uses the gold start for the end logits; inference
    returns the top-k arrays (`teacher_forcing=True` returns the training outputs at inference).
    `task_loss`: `(CE_start + CE_end) / 2 (+ BCE(cls_logits, is_impossible) / 2 with the answer class)`, as
    the original. Original scopes (outside `model/`): `start_logits/dense`,
    `end_logits/{dense_0,LayerNorm,dense_1}`, `answer_class/{dense_0,dense_1}`.

    Keras: labels are the features `start_positions`, `end_positions` (and `is_impossible`), inside `x` or
    as a dict `y`; `evaluate` recomputes the teacher-forced outputs for its loss; `compile()` defaults to
    this loss and the start / end accuracies (and the answer class's).
    """

    label_key = None
    default_learning_rate = 3e-5

    def __init__(self, config, start_n_top: int = 5, end_n_top: int = 5, use_answer_class: bool = True,
                 **kwargs):
        super().__init__(**kwargs)
        self.config = config = finetuning_config(config)
        self.start_n_top = start_n_top
        self.end_n_top = end_n_top
        self.use_answer_class = use_answer_class
        self.backbone = XLNetBackbone(config, name="transformer", dtype=self.dtype_policy)
        self.head = SquadHead(config.d_model, start_n_top, end_n_top, dropout=config.dropout,
                              use_answer_class=use_answer_class, initializer_range=config.initializer_range,
                              layer_norm_eps=config.layer_norm_eps, name="squad", dtype=self.dtype_policy)
        self.backbone.build()
        self.head.build()

    def call(self, features, training=False, teacher_forcing=None):
        hidden = self.backbone(token_ids(features), segment_ids=features.get("segment_ids"),
                               attention_mask=features.get("attention_mask"), training=training)["content"]
        teacher_forcing = training if teacher_forcing is None else teacher_forcing
        start_positions = features.get("start_positions") if teacher_forcing else None
        return self.head(hidden, features.get("p_mask"), features.get("cls_index"), start_positions,
                         training=training)

    def task_loss(self, features, outputs, sample_weight=None):
        return global_weighted_mean(self.per_example_loss(features, outputs),
                                    combine_weights(features.get("is_real_example"), sample_weight))

    def outputs_for_loss(self, features, outputs):
        """Inference outputs (top-k) carry no gold-start end log-probabilities: recompute them once per traced
        step (Keras calls the loss and the metrics with the same `outputs`)."""
        if "start_log_probs" in outputs:
            return outputs
        cached = getattr(self, "_teacher_forced", None)
        if cached is None or cached[0] is not outputs:
            cached = (outputs, self(features, training=False, teacher_forcing=True))
            self._teacher_forced = cached
        return cached[1]

    def keras_targets(self, features, outputs):
        y_true = {"start": features["start_positions"], "end": features["end_positions"]}
        y_pred = {"start": outputs["start_log_probs"], "end": outputs["end_log_probs"]}
        if self.use_answer_class:
            y_true["answer_class"] = tf.cast(features["is_impossible"], tf.float32)
            y_pred["answer_class"] = outputs["cls_logits"]
        return y_true, y_pred, features.get("is_real_example")

    def default_metrics(self):
        """Keras names them `start_accuracy`, `end_accuracy`, `answer_class_accuracy`."""
        metrics = {"start": [keras.metrics.SparseCategoricalAccuracy(name="accuracy")],
                   "end": [keras.metrics.SparseCategoricalAccuracy(name="accuracy")]}
        if self.use_answer_class:  # logits: > 0 is "impossible"
            metrics["answer_class"] = [keras.metrics.BinaryAccuracy(name="accuracy", threshold=0.0)]
        return metrics

    @classmethod
    def task_kwargs_from_export_info(cls, info):
        out = {k: info[k] for k in ("start_n_top", "end_n_top") if k in info}
        if "version_2_with_negative" in info:
            out["use_answer_class"] = bool(info["version_2_with_negative"])
        return out

    def per_example_loss(self, features, outputs):
        def gold_nll(log_probs, positions):
            return -tf.gather(log_probs, tf.cast(positions, tf.int32)[:, None], batch_dims=1)[:, 0]

        loss = 0.5 * (gold_nll(outputs["start_log_probs"], features["start_positions"])
                      + gold_nll(outputs["end_log_probs"], features["end_positions"]))
        if self.use_answer_class:
            loss += 0.5 * tf.nn.sigmoid_cross_entropy_with_logits(
                labels=tf.cast(features["is_impossible"], tf.float32), logits=outputs["cls_logits"])
        return loss

    def original_variables(self):
        h = self.head
        out = {"start_logits/dense/kernel": h.start_dense.kernel, "start_logits/dense/bias": h.start_dense.bias,
               "end_logits/dense_0/kernel": h.end_dense_0.kernel, "end_logits/dense_0/bias": h.end_dense_0.bias,
               "end_logits/LayerNorm/gamma": h.end_layer_norm.gamma,
               "end_logits/LayerNorm/beta": h.end_layer_norm.beta,
               "end_logits/dense_1/kernel": h.end_dense_1.kernel, "end_logits/dense_1/bias": h.end_dense_1.bias}
        if self.use_answer_class:
            out.update({"answer_class/dense_0/kernel": h.cls_dense_0.kernel,
                        "answer_class/dense_0/bias": h.cls_dense_0.bias,
                        "answer_class/dense_1/kernel": h.cls_dense_1.kernel})
        return out

    def get_build_config(self):
        return None  # variables are created in __init__

    def get_config(self):
        return {**super().get_config(), "config": self.config.to_dict(), "start_n_top": self.start_n_top,
                "end_n_top": self.end_n_top, "use_answer_class": self.use_answer_class}
