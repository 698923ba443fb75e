"""The sequence tasks' SavedModel signatures: `classifier`, `regression` and `embedding` exports of one text or a
pair of texts (`text_pair`), and long-document classifier / regression exports.

`serving_default`: `text [B]` string (+ `text_b [B]` for pair tasks), packed in the graph as the classifier
records were (`preprocessing.encode_and_pack`: `A <sep> (B <sep>) <cls>`, left-padded, a longer text cut by the
builder's rule) -> by task:
- `classifier`: `probabilities [B, C]`, `logits [B, C]` float32, `label_id [B]` int32, `label [B]` string (the
  export's label names, else the label ids as strings);
- `regression`: `score [B]`;
- `embedding`: `pooled [B, D]` (the sequence summary) and `sequence [B, L, D]` (the last layer's states).
`from_ids`: `input_ids`, `segment_ids` int32 `[B, L]`, `attention_mask` float32 `[B, L]` (1 = real token) -> the
same outputs. `features`: the text inputs -> `token_states [B, L, D]`, `input_ids [B, L]`, `attention_mask
[B, L]` and `pooled [B, D]`, the model's summary (projection included). L: the longest packed input of the
request (leading columns that are padding in every row dropped).

Long documents (a classifier / regression exported with `max_segments` S > 1, the model built with `mem_len`):
the same inputs and outputs; a text is packed with S * `max_seq_length` positions as the record builder does (a
longer one keeps its first tokens and its `<sep> (B <sep>) <cls>` end), cut into S segments and read segment by
segment with the model's memories, in the graph. Every request runs S segments (short texts lead with
padding-only segments, masked). `from_ids` then takes `[B, s, max_seq_length]` with s <= S (leading padding
segments added); `features` gives `token_states [B, S*L, D]` (each segment read with the memories of the earlier
ones), `input_ids` and `attention_mask [B, S*L]`, and `pooled` the summary the head reads (`document_summary`).
"""

from __future__ import annotations

from typing import Dict

import tensorflow as tf

from xlnet_tf.artifacts.export_info import ExportInfo
from xlnet_tf.serving.base import ServingModule, ids_specs
from xlnet_tf.serving.checks import checked_texts, signature_function, string_spec, trim_left
from xlnet_tf.text import layout, preprocessing


class SequenceServing(ServingModule):
    """A text (or pair) -> one prediction: the text path, long documents and `features` of the sequence tasks.
    A subclass gives `head_outputs` (its task's predictions from packed inputs)."""

    def __init__(self, model, info: ExportInfo, spiece_proto: bytes):
        super().__init__(model, info, spiece_proto)
        self.text_pair = bool(info.text_pair)
        self.max_segments = int(info.max_segments or 1)

    def head_outputs(self, input_ids, segment_ids, attention_mask) -> Dict[str, tf.Tensor]:
        """Packed `[N, L]` (or a whole document `[N, S, L]`) -> the task's predictions."""
        raise NotImplementedError

    # ------------------------------------------------------------------------------------ packing
    def pack_texts(self, text, text_b=None):
        """Texts -> `(input_ids, segment_ids, attention_mask)` `[N, L]`, or for a long-document model `[N, S, L]`
        (`preprocessing.encode_and_pack`: the classifier builder's packing)."""
        f = preprocessing.encode_and_pack(self.encoder, text, text_b, self.max_seq_length, self.max_segments)
        return f["input_ids"], f["segment_ids"], f["attention_mask"]

    def full_document(self, input_ids, segment_ids, attention_mask):
        """`[N, s, L]` (s <= max_segments) -> `[N, max_segments, L]`: leading segments of padding added
        (masked memory: the model's result is the same)."""
        missing = self.max_segments - tf.shape(input_ids)[1]
        pad = [[0, 0], [missing, 0], [0, 0]]
        shape = [None, self.max_segments, self.max_seq_length]
        return (tf.ensure_shape(tf.pad(input_ids, pad), shape),
                tf.ensure_shape(tf.pad(segment_ids, pad, constant_values=layout.SEG_ID_PAD), shape),
                tf.ensure_shape(tf.pad(attention_mask, pad), shape))

    def predict(self, input_ids, segment_ids, attention_mask) -> Dict[str, tf.Tensor]:
        """Packed inputs (text path or `from_ids`) -> the predictions: a document completed to `max_segments`,
        else the columns that are padding in every row dropped."""
        if self.max_segments > 1:
            return self.head_outputs(*self.full_document(input_ids, segment_ids, attention_mask))
        return self.head_outputs(*trim_left(input_ids, segment_ids, attention_mask))

    # ------------------------------------------------------------------------------------ signatures
    def text_signature(self, outputs, signature: str):
        """`text [B]` (+ `text_b [B]` for a pair task) -> `outputs(text, text_b)`."""
        if not self.text_pair:
            return super().text_signature(outputs, signature)

        def pair(text, text_b):
            text, text_b = checked_texts(signature, {"text": text, "text_b": text_b})
            return outputs(text, text_b)

        return signature_function(pair, [string_spec("text"), string_spec("text_b")])

    def text_outputs(self, text, text_b=None):
        return self.predict(*self.pack_texts(text, text_b))

    def text_features(self, text, text_b=None):
        input_ids, segment_ids, attention_mask = self.pack_texts(text, text_b)
        if self.max_segments > 1:
            return self.document_states(input_ids, segment_ids, attention_mask)
        return self.summarized_states(input_ids, segment_ids, attention_mask)

    def ids_signature(self):
        """`input_ids`, `segment_ids`, `attention_mask` `[B, L]` (a long-document export: `[B, s, L]`)."""
        rank = 3 if self.max_segments > 1 else 2

        def from_ids(input_ids, segment_ids, attention_mask):
            return self.predict(*self.checked_ids(input_ids, segment_ids, attention_mask, rank=rank))

        return signature_function(from_ids, ids_specs(rank))

    def more_id_checks(self, shape, **more):
        if self.max_segments == 1:
            return []
        return [tf.debugging.Assert(
            tf.equal(shape[-1], self.max_seq_length) & (shape[1] <= self.max_segments),
            [f"from_ids: a document is [batch, segments <= {self.max_segments}, {self.max_seq_length}] "
             "(the packed text left-padded as a whole to segments * max_seq_length, then cut into segments)"])]

    # ------------------------------------------------------------------------------------ features
    def document_states(self, input_ids, segment_ids, attention_mask) -> Dict[str, tf.Tensor]:
        """A long document `[N, S, L]` -> the content stream of every segment, each read with the memories of the
        earlier ones (`FineTuningModel.read_document` with every segment and every row kept), `[N, S*L, D]`, and
        the summary the head reads (`document_summary`)."""
        model = self.model
        saved = model.document_summary, model.summary_rows_only
        # read_document keeps every segment's rows for an `all_segments` summary, and every row of the last layer
        # without `summary_rows_only`: set for this trace only (the loop is the model's, not a copy)
        model.document_summary, model.summary_rows_only = "all_segments", False
        try:
            content = model.read_document(input_ids, segment_ids, attention_mask, training=False)
        finally:
            model.document_summary, model.summary_rows_only = saved
        length = self.max_segments * self.max_seq_length
        mask = tf.reshape(tf.cast(attention_mask, tf.float32), [-1, length])
        if model.document_summary == "all_segments":
            pooled = model.sequence_summary(content, mask)
        else:
            pooled = model.sequence_summary(content[:, -self.max_seq_length:], mask[:, -self.max_seq_length:])
        return {"token_states": tf.cast(content, tf.float32), "input_ids": tf.reshape(input_ids, [-1, length]),
                "attention_mask": mask, "pooled": tf.cast(pooled, tf.float32)}


class ClassifierServing(SequenceServing):
    """`classifier`: the label distribution, the chosen label's id and name."""

    TASKS = ("classifier",)
    LONG_DOCUMENTS = True

    def __init__(self, model, info: ExportInfo, spiece_proto: bytes):
        super().__init__(model, info, spiece_proto)
        labels = info.labels or [str(i) for i in range(max(getattr(model, "num_labels", 0), 1))]
        self.labels = tf.constant(list(labels))

    def head_outputs(self, input_ids, segment_ids, attention_mask):
        logits = self.model({"input_ids": input_ids, "segment_ids": segment_ids, "attention_mask": attention_mask},
                            training=False)["logits"]
        label_id = tf.argmax(logits, -1, output_type=tf.int32)
        return {"logits": logits, "probabilities": tf.nn.softmax(logits, -1), "label_id": label_id,
                "label": tf.gather(self.labels, label_id)}


class RegressionServing(SequenceServing):
    """`regression`: one score per text."""

    TASKS = ("regression",)
    LONG_DOCUMENTS = True

    def head_outputs(self, input_ids, segment_ids, attention_mask):
        out = self.model({"input_ids": input_ids, "segment_ids": segment_ids, "attention_mask": attention_mask},
                         training=False)
        return {"score": out["score"]}


class EmbeddingServing(SequenceServing):
    """`embedding`: the sequence summary and the last layer's states (a classifier's backbone and summary, no
    output layer)."""

    TASKS = ("embedding",)

    def head_outputs(self, input_ids, segment_ids, attention_mask):
        out = self.model.backbone(input_ids, segment_ids=segment_ids, attention_mask=attention_mask)
        pooled = self.model.sequence_summary(out["content"], attention_mask)
        return {"pooled": tf.cast(pooled, tf.float32), "sequence": tf.cast(out["content"], tf.float32)}
