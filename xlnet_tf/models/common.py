"""What every task model shares: the loss helpers, the fine-tuning config, and the fine-tuning base model
(backbone + sequence summary, reading a document of several segments with memories).
"""

from __future__ import annotations

import tensorflow as tf

from xlnet_tf.backbone import XLNetBackbone, cache_mems
from xlnet_tf.config import XLNetConfig
from xlnet_tf.errors import UserError
from xlnet_tf.heads import DOCUMENT_SUMMARIES, SequenceSummary
from xlnet_tf.models.task import Task


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


def finetuning_config(config) -> XLNetConfig:
    """The config a fine-tuning model runs with: no memories, no bidirectional data, no same_length
    (as the original's RunConfig when fine-tuning)."""
    if isinstance(config, dict):
        config = XLNetConfig.from_dict(config)
    return config.replace(mem_len=None, reuse_len=None, bi_data=False, same_length=False)


def summary_variables(summary: SequenceSummary, scope: str = "model/sequnece_summary"):
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


class FineTuningModel(Task):
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
