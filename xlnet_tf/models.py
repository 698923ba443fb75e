"""Task models: `XLNetBackbone` + head + loss, each a Keras model that `compile`/`fit`/`evaluate`/`predict`
(and, for text classification, raw text through an `XLNetPreprocessor`) drive as any Keras model (`task.Task`).

Loss names: `per_example_loss` / `per_token_loss` (unreduced), `task_loss(features, outputs, sample_weight=None)`
(the weighted mean `fit` optimizes); Keras's own `compute_loss(x, y, y_pred, sample_weight)` is `Task`'s.
"""

from __future__ import annotations

from typing import Optional, Union

import keras
import tensorflow as tf

# `preprocessing` registers XLNetPreprocessor with Keras: a `.keras` classifier with its preprocessor then loads
# after `import xlnet_tf.models` alone (what registers the task models themselves).
from xlnet_tf import initializers
from xlnet_tf.text import preprocessing  # noqa: F401  (registers XLNetPreprocessor for .keras loading)
from xlnet_tf.backbone import XLNetBackbone, cache_mems
from xlnet_tf.config import XLNetConfig
from xlnet_tf.errors import UserError
from xlnet_tf.heads import DOCUMENT_SUMMARIES, LMHead, SequenceSummary, SquadHead  # noqa: F401 (a models name too)
from xlnet_tf.task import Task, combine_weights, global_weighted_mean

# what the summary of a document of several segments reads (_FineTuningModel)


def masked_mean(values, weights):
    """Weighted mean of `values` over all entries; 0 when every weight is 0."""
    weights = tf.cast(weights, values.dtype)
    return tf.math.divide_no_nan(tf.reduce_sum(values * weights), tf.reduce_sum(weights))


def token_ids(features):
    """`features["input_ids"]` as int32 (Keras's distributed build hands the model a float copy of a batch)."""
    if not hasattr(features, "get"):
        raise ValueError(f"task models take a dict of features (input_ids, segment_ids, attention_mask, ...), "
                         f"got {type(features).__name__}; for raw text attach an XLNetPreprocessor")
    return tf.cast(features["input_ids"], tf.int32)


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
        out = self.backbone(token_ids(features), segment_ids=features.get("segment_ids"),
                            attention_mask=features.get("attention_mask"), mems=mems,
                            perm_mask=features.get("perm_mask"),
                            target_mapping=None if mlm else features["target_mapping"], training=training)
        if mlm:
            mapping = tf.cast(features["target_mapping"], out["content"].dtype)
            out["query"] = tf.einsum("bpl,bld->bpd", mapping, out["content"])
        logits = self.lm_head(out["query"], self.backbone.word_embedding)
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
                             f"mem_len=None for Keras, or train with xlnet_tf.training.Trainer (run/pretrain.py)")
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
            out.update(_summary_variables(self.nsp_summary, "model/nsp/summary"))
            out["model/nsp/output/kernel"] = self.nsp_output.kernel
            out["model/nsp/output/bias"] = self.nsp_output.bias
        return out

    def get_config(self):
        return {**super().get_config(), "config": self.config.to_dict(), "query_stream": self.query_stream,
                "objective": self.objective, "nsp": self.nsp}


def finetuning_config(config) -> XLNetConfig:
    """The config a fine-tuning model runs with: no memories, no bidirectional data, no same_length
    (as the original's RunConfig when fine-tuning)."""
    if isinstance(config, dict):
        config = XLNetConfig.from_dict(config)
    return config.replace(mem_len=None, reuse_len=None, bi_data=False, same_length=False)


def _summary_variables(summary: SequenceSummary, scope: str = "model/sequnece_summary"):
    """Original names of a `SequenceSummary`'s variables (the typo `sequnece` is the original's)."""
    out = {}
    if summary.summary is not None:
        out[f"{scope}/summary/kernel"] = summary.summary.kernel
        out[f"{scope}/summary/bias"] = summary.summary.bias
    if summary.summary_type == "attn":
        out[f"{scope}/summary_bias"] = summary.summary_bias
        for name in ("q", "k", "v", "o"):
            out[f"{scope}/abs_attn/{name}/kernel"] = getattr(summary, name)
        out[f"{scope}/abs_attn/LayerNorm/gamma"] = summary.layer_norm.gamma
        out[f"{scope}/abs_attn/LayerNorm/beta"] = summary.layer_norm.beta
    return out


class _FineTuningModel(Task):
    """Backbone (no perm mask) + sequence summary; subclasses add the output layer.

    `mem_len` (None = no memories) gives the backbone Transformer-XL memories for reading documents of
    several segments (`read_document`); the weights are the same either way. `bptt_segments` k > 0 lets the
    gradient flow back through the memories of the last k segments before the final one (0: Transformer-XL's
    stop-gradient; more activations are kept for the backward pass, k + 1 segments' worth).

    `summary_rows_only` (default): with a `last` or `first` summary, the last layer computes its content
    stream only at the summarized position (`XLNetBackbone`'s `output_positions`; keys and values still
    cover every position), which is all the head reads: the same numbers for about 1/n_layer less work.
    False computes every row, as the original and Hugging Face do.

    `document_summary` (documents of several segments): `last_segment` (default) summarizes the last
    segment, which sees the earlier text only through the memories; `all_segments` summarizes the content
    stream of every segment, the document's `[B, S*L, D]` (with `summary_type` `mean`: the mean over every
    real token of the document; `attn`: attention over them). The segments before the last
    `bptt_segments` + 1 enter that summary without gradient, as their memories do."""

    def __init__(self, config, summary_type: str = "last", use_proj: bool = True, mem_len=None,
                 bptt_segments: int = 0, summary_rows_only: bool = True,
                 document_summary: str = "last_segment", **kwargs):
        super().__init__(**kwargs)
        if document_summary not in DOCUMENT_SUMMARIES:
            raise ValueError(f"document_summary must be one of {DOCUMENT_SUMMARIES}, got {document_summary!r}")
        if document_summary == "all_segments" and summary_type not in ("mean", "attn"):
            raise ValueError(f"document_summary='all_segments' needs summary_type 'mean' or 'attn' (a "
                             f"{summary_type!r} summary reads one position), got {summary_type!r}")
        self.document_summary = document_summary
        if isinstance(bptt_segments, bool) or int(bptt_segments or 0) < 0:
            raise ValueError(f"bptt_segments must be an integer >= 0 (segments before the last that the gradient "
                             f"reaches), got {bptt_segments!r}: a negative value would freeze the backbone")
        self.bptt_segments = int(bptt_segments or 0)
        self.summary_rows_only = bool(summary_rows_only)
        self.config = config = finetuning_config(config).replace(mem_len=mem_len or None)
        self.summary_type = summary_type
        self.use_proj = use_proj
        self.backbone = XLNetBackbone(config, name="transformer", dtype=self.dtype_policy)
        self.sequence_summary = SequenceSummary(
            config.d_model, summary_type, use_proj=use_proj, dropout=config.dropout, dropatt=config.dropatt,
            n_head=config.n_head,
            d_head=config.d_head, initializer_range=config.initializer_range,
            layer_norm_eps=config.layer_norm_eps, name="sequnece_summary", dtype=self.dtype_policy)
        self.backbone.build()
        self.sequence_summary.build()

    @property
    def mem_len(self):
        """Memory length when reading documents of several segments (None: one segment, no memories)."""
        return self.config.mem_len

    def _output_positions(self, input_ids):
        """`[B, 1]` the position the summary reads (the last, `<cls>` of left-padded inputs, or the first),
        or None (every row: another summary, or `summary_rows_only=False`). The `last`/`first` summaries
        read `[B, 1, D]` as they read `[B, L, D]` and never use the attention mask."""
        if not self.summary_rows_only or self.summary_type not in ("last", "first"):
            return None
        position = tf.shape(input_ids)[-1] - 1 if self.summary_type == "last" else 0
        return tf.fill(tf.stack([tf.shape(input_ids)[0], 1]), position)

    def read_document(self, input_ids, segment_ids, attention_mask, training):
        """Transformer-XL's recurrence over the segments of `[B, S, L]` inputs (S static; the document
        left-padded as a whole, so that only leading positions are padding and `<cls>` ends the last
        segment): segment s attends to the cached layer inputs of the previous `mem_len` positions
        (padding there masked, segment ids kept), with no gradient through them (as Transformer-XL) except
        those of the last `bptt_segments` segments before the final one.
        Returns the content stream of the last segment `[B, L, D]` (`[B, 1, D]`, the summarized row, when
        `_output_positions` says so; the last layer of earlier segments, whose output nothing reads, then
        computes that one row too), or with `document_summary='all_segments'` that of every segment
        `[B, S*L, D]` (without gradient before the last `bptt_segments` + 1 segments)."""
        num_segments = input_ids.shape[1]
        if num_segments is None:
            raise ValueError("read_document: the number of segments (axis 1) must be static")
        if num_segments > 1 and not self.mem_len:
            raise ValueError(f"inputs of {num_segments} segments need memories: build the model with mem_len")
        if segment_ids is None:
            segment_ids = tf.zeros_like(input_ids)
        if attention_mask is None:
            attention_mask = tf.ones(tf.shape(input_ids), tf.float32)
        mems = mem_mask = mem_segs = None
        positions = self._output_positions(input_ids[:, 0])
        contents = []
        for s in range(num_segments):
            with_gradient = s >= num_segments - 1 - self.bptt_segments
            out = self.backbone(input_ids[:, s], segment_ids=segment_ids[:, s], attention_mask=attention_mask[:, s],
                                mems=mems, mem_mask=mem_mask, mem_segment_ids=mem_segs, training=training,
                                mem_gradient=with_gradient, output_positions=positions)
            if self.document_summary == "all_segments":
                contents.append(out["content"] if with_gradient else tf.stop_gradient(out["content"]))
            if s + 1 < num_segments:
                mems = out["new_mems"]
                # the memory's padding mask and segment ids, cached as the memories are
                mem_mask = cache_mems(tf.cast(attention_mask[:, s], tf.float32), mem_mask, self.mem_len, None)
                mem_segs = cache_mems(tf.cast(segment_ids[:, s], tf.int32), mem_segs, self.mem_len, None)
        return tf.concat(contents, axis=1) if contents else out["content"]

    def pooled(self, input_ids, segment_ids, attention_mask, training):
        """The summary `[B, D]` of one segment `[B, L]`, or of a document `[B, S, L]` read with memories
        (the summary of its last segment, which ends with `<cls>`, or of all its segments:
        `document_summary`)."""
        if input_ids.shape.rank == 3:
            content = self.read_document(input_ids, segment_ids, attention_mask, training)
            if attention_mask is None:
                mask = None
            elif self.document_summary == "all_segments":
                mask = tf.reshape(attention_mask, [-1, input_ids.shape[1] * input_ids.shape[2]])
            else:
                mask = attention_mask[:, -1]
            return self.sequence_summary(content, mask, training=training)
        out = self.backbone(input_ids, segment_ids=segment_ids, attention_mask=attention_mask,
                            training=training, output_positions=self._output_positions(input_ids))
        return self.sequence_summary(out["content"], attention_mask, training=training)

    def get_build_config(self):
        return None  # variables are created in __init__


def check_document_preprocessor(preprocessor, mem_len) -> None:
    """A classifier's text preprocessor must agree with its memories: one that packs documents of several
    segments needs `mem_len` (memories carry the earlier segments), and a model with `mem_len` (trained on
    documents) needs one that packs several segments (else every text is cut to its first segment)."""
    segments = getattr(preprocessor, "max_segments", None)
    if segments is None:
        return
    if segments > 1 and not mem_len:
        raise UserError(f"XLNetClassifier: the preprocessor packs documents of max_segments={segments} segments, "
                        f"which are read with memories: build the model with mem_len (e.g. the trained one)")
    if segments == 1 and mem_len:
        raise UserError(f"XLNetClassifier: mem_len={mem_len} reads documents of several segments, but the "
                        f"preprocessor packs one segment (longer texts would be cut to it): pass "
                        f"XLNetPreprocessor(..., max_segments=S) with the trained S, or mem_len=None")


@keras.saving.register_keras_serializable(package="xlnet_tf")
class XLNetClassifier(_FineTuningModel):
    """Sequence classification (`num_labels` > 0) or regression (`regression=True`).

    Call: `model(features)` with `input_ids [B, L]`, `segment_ids [B, L]`, `attention_mask [B, L]`
    (1 = real; inputs left-padded with `<cls>` last) -> `{"logits": [B, num_labels]}` (float32) or
    `{"score": [B]}`. Long documents: `[B, S, L]` inputs (S segments of a document left-padded as a whole,
    `<cls>` last) are read segment by segment with memories of `mem_len` positions, and classified from
    the summary of the last segment (`_FineTuningModel.read_document`). `task_loss(features, outputs)`: mean
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
        out = _summary_variables(self.sequence_summary)
        out[f"model/{kind}_{self.task_name}/logit/kernel"] = self.logit.kernel
        out[f"model/{kind}_{self.task_name}/logit/bias"] = self.logit.bias
        return out

    def get_config(self):
        return {**super().get_config(), "config": self.config.to_dict(), "num_labels": self.num_labels,
                "regression": self.regression, "task_name": self.task_name, "summary_type": self.summary_type,
                "use_proj": self.use_proj, "mem_len": self.mem_len, "bptt_segments": self.bptt_segments,
                "summary_rows_only": self.summary_rows_only, "document_summary": self.document_summary}


@keras.saving.register_keras_serializable(package="xlnet_tf")
class XLNetMultipleChoice(_FineTuningModel):
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
        length = ids.shape[-1] if ids.shape[-1] is not None else tf.shape(ids)[-1]  # unknown when serving
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
        out = _summary_variables(self.sequence_summary)
        out["logits/dense/kernel"] = self.scorer.kernel
        out["logits/dense/bias"] = self.scorer.bias
        return out

    def get_config(self):
        return {**super().get_config(), "config": self.config.to_dict(), "num_choices": self.num_choices,
                "summary_type": self.summary_type, "use_proj": self.use_proj,
                "summary_rows_only": self.summary_rows_only}


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


# The one task -> model mapping of a run's export_info.json: the exporter (run/export_savedmodel.py) and
# `Task.from_checkpoint` (through each class's `task_kwargs_from_export_info`) build the same model from it.
TASK_MODELS = {"classifier": XLNetClassifier, "regression": XLNetClassifier, "embedding": XLNetClassifier,
               "race": XLNetMultipleChoice, "squad": XLNetForSquad}


def model_from_export_info(config: XLNetConfig, info: dict, task: Optional[str] = None, **overrides):
    """The task model `info` (an export_info.json's fields) describes, for `task` (default: the recorded one;
    "embedding" = the classifier's backbone and summary, any head), with `overrides` on top of its kwargs."""
    task = task or info.get("task")
    if task not in TASK_MODELS:
        raise UserError(f"task is {task!r}; one of {sorted(TASK_MODELS)}")
    cls = TASK_MODELS[task]
    kwargs = cls.task_kwargs_from_export_info(info)
    if cls is XLNetClassifier:
        kwargs["regression"] = task == "regression"
    return cls(config, **{**kwargs, **overrides})
