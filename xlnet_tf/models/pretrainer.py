"""The pretraining task model: `XLNetBackbone` + the tied LM head + the PLM / MLM loss over target slots."""

from __future__ import annotations

from typing import Union

import keras
import tensorflow as tf

from xlnet_tf.layers import initializers, tied_embedding
from xlnet_tf.backbone import XLNetBackbone
from xlnet_tf.config import XLNetConfig
from xlnet_tf.heads import LMHead, SequenceSummary
from xlnet_tf.models.common import masked_mean, summary_variables, token_ids
from xlnet_tf.models.task import Task, combine_weights, global_weighted_mean


@keras.saving.register_keras_serializable(package="xlnet_tf")
class XLNetPretrainer(Task):
    """Permutation language model: backbone query stream at the targets -> tied LM head -> loss.

    Args:
      config: `XLNetConfig` (or its dict). query_stream: see `XLNetBackbone`.
      objective: "plm" (XLNet: the query stream predicts the targets) or "mlm" (BERT's masked LM on
        the same records: no query stream; the content stream's output at the targets, gathered by
        `target_mapping`, feeds the LM head; `perm_mask` then only keeps the reuse part from seeing the
        new part, so that its states can serve as the next segment's memory).
      nsp: add next-sentence prediction (off by default, as XLNet; the paper's "+ next-sent pred"
        ablation and BERT's second loss): a "last" sequence summary (tanh projection) of the content
        stream and a 2-way output, trained on the records' `is_next` [B] (1 = B continues A). The loss
        adds its cross-entropy, averaged over the examples weighted by their real target slots (the
        mean when, as almost always, every example has the same number), to the LM loss.

    Call: `model(features, mems=None, training=False)` with `features` holding `input_ids [B, L]`,
    `segment_ids [B, L]`, `perm_mask [B, L, L]` (1 = may NOT attend), `target_mapping [B, P, L]`, and
    optionally `attention_mask [B, L]` (1 = real). Returns `{"logits": [B, P, n_token] float32,
    "new_mems": list or None, "content": [B, L, D], "query": [B, P, D]}`.

    `task_loss(features, outputs)` is the mean cross-entropy over `target_mask` (`[B, P]`, 1 = real
    slot) against `target_ids [B, P]`; `plm_metrics` adds the accuracy on the same slots. Keras: `fit` on the
    records' feature dicts (labels inside); no memories across batches there (`config.mem_len` must be
    unset; `training.Trainer` carries them).
    """

    label_key = None  # labels: target_ids and target_mask
    default_learning_rate = 1e-4

    def __init__(self, config: Union[XLNetConfig, dict], query_stream: str = "targets",
                 objective: str = "plm", nsp: bool = False, **kwargs):
        super().__init__(**kwargs)
        if isinstance(config, dict):
            config = XLNetConfig.from_dict(config)
        if objective not in ("plm", "mlm"):
            raise ValueError(f"XLNetPretrainer: objective must be 'plm' or 'mlm', got {objective!r}")
        self.config = config
        self.query_stream = query_stream
        self.objective = objective
        self.nsp = nsp
        self.backbone = XLNetBackbone(config, query_stream=query_stream, name="transformer",
                                      dtype=self.dtype_policy)
        self.lm_head = LMHead(config.n_token, name="lm_loss", dtype=self.dtype_policy)
        self.backbone.build()
        self.lm_head.build()
        if nsp:
            self.nsp_summary = SequenceSummary(
                config.d_model, "last", use_proj=True, dropout=config.dropout, n_head=config.n_head,
                d_head=config.d_head, initializer_range=config.initializer_range,
                layer_norm_eps=config.layer_norm_eps, name="nsp_summary", dtype=self.dtype_policy)
            self.nsp_output = keras.layers.Dense(2, kernel_initializer=initializers.normal(config.initializer_range),
                                                 name="nsp_output", dtype=self.dtype_policy)
            self.nsp_summary.build([None, None, config.d_model])
            self.nsp_output.build([None, config.d_model])

    def call(self, features, mems=None, training=False):
        mlm = self.objective == "mlm"
        # training: the word embedding read once for the input rows and the tied head (its gradient summed in place);
        # otherwise read plainly (a SavedModel of the call records no custom gradient that a caller differentiating
        # the loaded model would meet with the gather's row gradient)
        table = self.backbone.word_embedding
        if training is True:
            rows_table, head_table = tied_embedding.tied_reads(table, self.compute_dtype)
        else:
            rows_table, head_table = table, tf.cast(table, self.compute_dtype)
        ids = token_ids(features)
        out = self.backbone(ids, segment_ids=features.get("segment_ids"),
                            attention_mask=features.get("attention_mask"), mems=mems,
                            perm_mask=features.get("perm_mask"),
                            target_mapping=None if mlm else features["target_mapping"], training=training,
                            input_embeddings=tf.gather(rows_table, ids))
        if mlm:
            mapping = tf.cast(features["target_mapping"], out["content"].dtype)
            out["query"] = tf.einsum("bpl,bld->bpd", mapping, out["content"])
        logits = self.lm_head(out["query"], head_table)
        if self.nsp:
            pooled = self.nsp_summary(out["content"], features.get("attention_mask"), training=training)
            out["nsp_logits"] = tf.cast(self.nsp_output(pooled), tf.float32)
        return {"logits": logits, **out}

    @staticmethod
    def per_token_loss(features, outputs):
        """The LM cross-entropy per prediction slot [B, P]."""
        return tf.nn.sparse_softmax_cross_entropy_with_logits(
            labels=tf.cast(features["target_ids"], tf.int32), logits=outputs["logits"])

    def per_slot_loss(self, features, outputs):
        """The training loss per slot [B, P]: the LM cross-entropy plus, with `nsp`, the example's NSP
        cross-entropy (so that the mean over real slots weights each example by its target count)."""
        loss = self.per_token_loss(features, outputs)
        if self.nsp:
            if "is_next" not in features:
                raise ValueError("XLNetPretrainer(nsp=True) needs the records' next-sentence labels "
                                 "(build them with --nsp)")
            nsp = tf.nn.sparse_softmax_cross_entropy_with_logits(
                labels=tf.cast(features["is_next"], tf.int32), logits=outputs["nsp_logits"])
            loss = loss + nsp[:, None]
        return loss

    def task_loss(self, features, outputs, sample_weight=None):
        """Mean training loss over the real target slots (`target_mask`, times `sample_weight [B]`)."""
        weights = self.keras_targets(features, outputs)[2]
        return global_weighted_mean(self.per_slot_loss(features, outputs), combine_weights(weights, sample_weight))

    def keras_targets(self, features, outputs):
        return features["target_ids"], outputs["logits"], features["target_mask"]

    def default_metrics(self):
        return [keras.metrics.SparseCategoricalAccuracy(name="accuracy")]

    def compile(self, *args, **kwargs):
        if self.config.mem_len:
            raise ValueError(f"XLNetPretrainer.compile: config.mem_len={self.config.mem_len}, but Keras fit/evaluate "
                             f"do not carry Transformer-XL memories across batches; build the model with "
                             f"mem_len=None for Keras, or train with xlnet_tf.training.loop.Trainer (run/pretrain.py)")
        super().compile(*args, **kwargs)

    def plm_metrics(self, features, outputs):
        """Returns `(loss, accuracy, number of real target slots)` for the batch."""
        mask = tf.cast(features["target_mask"], tf.float32)
        correct = tf.cast(tf.equal(tf.argmax(outputs["logits"], -1, output_type=tf.int32),
                                   tf.cast(features["target_ids"], tf.int32)), tf.float32)
        return (masked_mean(self.per_token_loss(features, outputs), mask), masked_mean(correct, mask),
                tf.reduce_sum(mask))

    def get_build_config(self):
        return None  # variables are created in __init__

    def original_variables(self):
        """Head variables under their names in the original release (the NSP head, which the release
        never had, under `model/nsp/...`)."""
        out = {"model/lm_loss/bias": self.lm_head.bias}
        if self.nsp:
            out.update(summary_variables(self.nsp_summary, "model/nsp/summary"))
            out["model/nsp/output/kernel"] = self.nsp_output.kernel
            out["model/nsp/output/bias"] = self.nsp_output.bias
        return out

    def get_config(self):
        return {**super().get_config(), "config": self.config.to_dict(), "query_stream": self.query_stream,
                "objective": self.objective, "nsp": self.nsp}
