"""Task models: `XLNetBackbone` + head + loss."""

from __future__ import annotations

from typing import Union

import keras
import tensorflow as tf

from xlnet_tf.backbone import XLNetBackbone
from xlnet_tf.config import XLNetConfig
from xlnet_tf.heads import LMHead


def masked_mean(values, weights):
    """Weighted mean of `values` over all entries; 0 when every weight is 0."""
    weights = tf.cast(weights, values.dtype)
    return tf.math.divide_no_nan(tf.reduce_sum(values * weights), tf.reduce_sum(weights))


@keras.saving.register_keras_serializable(package="xlnet_tf")
class XLNetPretrainer(keras.Model):
    """Permutation language model: backbone query stream at the targets -> tied LM head -> loss.

    Args:
      config: `XLNetConfig` (or its dict). query_stream: see `XLNetBackbone`.

    Call: `model(features, mems=None, training=False)` with `features` holding `input_ids [B, L]`,
    `segment_ids [B, L]`, `perm_mask [B, L, L]` (1 = may NOT attend), `target_mapping [B, P, L]`, and
    optionally `attention_mask [B, L]` (1 = real). Returns `{"logits": [B, P, n_token] float32,
    "new_mems": list or None, "content": [B, L, D], "query": [B, P, D]}`.

    `compute_plm_loss(features, outputs)` is the mean cross-entropy over `target_mask` (`[B, P]`, 1 = real
    slot) against `target_ids [B, P]`; `plm_metrics` adds the accuracy on the same slots.
    """

    def __init__(self, config: Union[XLNetConfig, dict], query_stream: str = "targets", **kwargs):
        super().__init__(**kwargs)
        if isinstance(config, dict):
            config = XLNetConfig.from_dict(config)
        self.config = config
        self.query_stream = query_stream
        self.backbone = XLNetBackbone(config, query_stream=query_stream, name="transformer",
                                      dtype=self.dtype_policy)
        self.lm_head = LMHead(config.n_token, name="lm_loss", dtype=self.dtype_policy)
        self.backbone.build()
        self.lm_head.build()

    def call(self, features, mems=None, training=False):
        out = self.backbone(features["input_ids"], segment_ids=features.get("segment_ids"),
                            attention_mask=features.get("attention_mask"), mems=mems,
                            perm_mask=features.get("perm_mask"),
                            target_mapping=features["target_mapping"], training=training)
        logits = self.lm_head(out["query"], self.backbone.word_embedding)
        return {"logits": logits, **out}

    @staticmethod
    def per_token_loss(features, outputs):
        return tf.nn.sparse_softmax_cross_entropy_with_logits(
            labels=tf.cast(features["target_ids"], tf.int32), logits=outputs["logits"])

    def compute_plm_loss(self, features, outputs):
        return masked_mean(self.per_token_loss(features, outputs), features["target_mask"])

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
        """Head variables under their names in the original release."""
        return {"model/lm_loss/bias": self.lm_head.bias}

    def get_config(self):
        return {"config": self.config.to_dict(), "query_stream": self.query_stream, "name": self.name}
