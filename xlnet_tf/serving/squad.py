"""The extractive question answering (`squad`) SavedModel signatures: a question and a paragraph in, the answer's
text and byte offsets out.

`serving_default`: `question [B]`, `context [B]` string, packed in the graph as the SQuAD builder's first window
(`preprocessing.encode_and_pack_squad`: `P <sep> Q <sep> <cls>`, right-padded; the question cut to
`max_query_length` ids; one window of `max_seq_length` tokens: a longer context is truncated, its tail cannot be
answered) -> `answer [B]` string (the text of the original context), `answer_start`, `answer_end [B]` int64 (byte
offsets in the context; 0 and 0 when no span is valid), `score [B]` (the best valid span's start + end log
probability; -inf when none), `start_top_index` / `start_top_log_probs [B, Ks]`, `end_top_index` /
`end_top_log_probs [B, Ks*Ke]` (start-major) and `cls_logits [B]` (SQuAD 2.0's answerability; -1e9 for a
model without it). A span is valid inside the paragraph, end >= start, at most `max_answer_length` tokens.
`from_ids`: `input_ids`, `segment_ids` int32 `[B, L]`, `attention_mask`, `p_mask` float32 `[B, L]` (attention:
1 = real token) and `cls_index [B]` int32 (inside the sequence) -> the top-k outputs (no answer text).
`features`: the text inputs -> the first window's `token_states [B, L, D]`, `input_ids [B, L]`, `attention_mask
[B, L]` (the positions after the longest input of the request dropped) and `pooled [B, D]` = the state at
`<cls>`.
"""

from __future__ import annotations

import numpy as np
import tensorflow as tf

from xlnet_tf.artifacts.export_info import ExportInfo
from xlnet_tf.serving.base import ServingModule, ids_specs
from xlnet_tf.serving.checks import checked_texts, signature_function, string_spec
from xlnet_tf.text import preprocessing

DEFAULT_MAX_QUERY_LENGTH = 64
DEFAULT_MAX_ANSWER_LENGTH = 64
TOP_OUTPUTS = ("start_top_log_probs", "start_top_index", "end_top_log_probs", "end_top_index")


class SquadServing(ServingModule):
    """`squad`: the best valid span of the context's first window."""

    TASKS = ("squad",)

    def __init__(self, model, info: ExportInfo, spiece_proto: bytes):
        super().__init__(model, info, spiece_proto)
        self.max_query_length = DEFAULT_MAX_QUERY_LENGTH if info.max_query_length is None else info.max_query_length
        self.max_answer_length = (DEFAULT_MAX_ANSWER_LENGTH if info.max_answer_length is None
                                  else info.max_answer_length)
        self.split_unknown = True if info.split_unknown is None else bool(info.split_unknown)

    def pack_first_window(self, question, context):
        """`preprocessing.encode_and_pack_squad` (the builder's first window): the model's features, and the byte
        spans of the paragraph tokens (`begin`, `end`) plus the paragraph length `p_len` the answer is read
        from."""
        features, spans = preprocessing.encode_and_pack_squad(self.encoder, question, context, self.max_seq_length,
                                                              self.max_query_length, self.split_unknown)
        spans["p_len"] = features.pop("paragraph_len")
        return features, spans

    def top_spans(self, features):
        """The model's top start and end positions of right-padded features (the columns after the longest input
        dropped) and `cls_logits`."""
        length = tf.maximum(tf.reduce_max(tf.cast(tf.reduce_sum(features["attention_mask"], 1), tf.int32)), 1)
        trimmed = {k: (v[:, :length] if v.shape.rank == 2 else v) for k, v in features.items()}
        out = self.model(trimmed, training=False)
        result = {k: out[k] for k in TOP_OUTPUTS}
        result["cls_logits"] = out.get("cls_logits", tf.zeros_like(out["start_top_log_probs"][:, 0]) - 1e9)
        return result

    def answer(self, context, result, spans):
        """The best valid (start, end) pair of `result` (`top_spans`) -> its text in `context` and its byte
        offsets, with the top-k outputs."""
        ke = self.model.end_n_top
        starts = tf.repeat(result["start_top_index"], ke, axis=1)
        start_lp = tf.repeat(result["start_top_log_probs"], ke, axis=1)
        ends = result["end_top_index"]
        p_len = spans["p_len"][:, None]
        valid = ((starts < p_len) & (ends < p_len) & (ends >= starts)
                 & (ends - starts + 1 <= self.max_answer_length))
        score = tf.where(valid, start_lp + result["end_top_log_probs"], -np.inf)
        best = tf.argmax(score, axis=1, output_type=tf.int32)
        has = tf.reduce_any(valid, axis=1)
        s = tf.gather(starts, best, batch_dims=1)
        e = tf.gather(ends, best, batch_dims=1)
        begin = tf.gather(spans["begin"], s, batch_dims=1)
        end = tf.gather(spans["end"], e, batch_dims=1)
        zero = tf.zeros_like(begin)
        begin, end = tf.where(has, begin, zero), tf.where(has, end, zero)
        text = tf.strings.strip(tf.strings.substr(context, begin, tf.maximum(end - begin, 0)))
        return {"answer": tf.where(has, text, ""), "answer_start": begin, "answer_end": end,
                "score": tf.where(has, tf.gather(score, best, batch_dims=1), -np.inf), **result}

    # ------------------------------------------------------------------------------------ signatures
    def text_signature(self, outputs, signature: str):
        """`question [B]`, `context [B]` -> `outputs(question, context)`."""
        def squad_text(question, context):
            question, context = checked_texts(signature, {"question": question, "context": context})
            return outputs(question, context)

        return signature_function(squad_text, [string_spec("question"), string_spec("context")])

    def text_outputs(self, question, context):
        features, spans = self.pack_first_window(question, context)
        return self.answer(context, self.top_spans(features), spans)

    def text_features(self, question, context):
        features = self.pack_first_window(question, context)[0]
        content, out = self.content_states(features["input_ids"], features["segment_ids"],
                                           features["attention_mask"], trim="right")
        content = tf.cast(content, tf.float32)
        return {**out, "token_states": content, "pooled": tf.gather(content, features["cls_index"], batch_dims=1)}

    def ids_signature(self):
        """`input_ids`, `segment_ids`, `attention_mask`, `p_mask` `[B, L]` and `cls_index [B]`."""
        def from_ids(input_ids, segment_ids, attention_mask, p_mask, cls_index):
            input_ids, segment_ids, attention_mask = self.checked_ids(input_ids, segment_ids, attention_mask,
                                                                      p_mask=p_mask, cls_index=cls_index)
            return self.top_spans({"input_ids": input_ids, "segment_ids": segment_ids,
                                   "attention_mask": attention_mask, "p_mask": p_mask, "cls_index": cls_index})

        return signature_function(from_ids, ids_specs() + [tf.TensorSpec([None, None], tf.float32, name="p_mask"),
                                                           tf.TensorSpec([None], tf.int32, name="cls_index")])

    def more_id_checks(self, shape, p_mask=None, cls_index=None):
        return [
            tf.debugging.Assert(tf.reduce_all(tf.equal(tf.shape(p_mask), shape)),
                                ["from_ids: p_mask must have the shape of input_ids"]),
            tf.debugging.Assert(tf.equal(tf.shape(cls_index)[0], shape[0])
                                & tf.reduce_all((cls_index >= 0) & (cls_index < shape[-1])),
                                ["from_ids: cls_index must hold one position per row, inside the sequence"]),
        ]
