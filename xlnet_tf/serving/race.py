"""The multiple-choice (`race`) SavedModel signatures: an article, a question and its options in, the chosen
option out.

`serving_default`: `article [B]`, `question [B]` string, `options [B, C]` string (C <= 4 choices, A-D), each
choice packed in the graph as the RACE records were (`preprocessing.encode_and_pack_choices`: the article, then
the question with the option, that text cut to `max_qa_length` ids by the records' `qa_truncation`) ->
`probabilities [B, C]`, `logits [B, C]` float32, `label_id [B]` int32, `label [B]` string (A-D) and `answer [B]`
string (the chosen option).
`from_ids`: `input_ids`, `segment_ids` int32 `[B, C, L]`, `attention_mask` float32 `[B, C, L]` (1 = real token;
C <= 4) -> the same outputs but `answer`.
`features`: the text inputs -> one packed sequence per option: `token_states [B, C, L, D]`, `input_ids [B, C, L]`,
`attention_mask [B, C, L]` and `pooled [B, C, D]` (the model's summary, the scorer's input). L: the longest packed
choice of the request.
"""

from __future__ import annotations

import tensorflow as tf

from xlnet_tf.artifacts.export_info import ExportInfo
from xlnet_tf.serving.base import ServingModule, ids_specs
from xlnet_tf.serving.checks import checked_texts, signature_function, string_spec, trim_left
from xlnet_tf.text import preprocessing

MAX_CHOICES = 4  # A-D
DEFAULT_MAX_QA_LENGTH = 128
DEFAULT_QA_TRUNCATION = "tail"


class RaceServing(ServingModule):
    """`race`: the article read with each option; the option the model scores highest."""

    TASKS = ("race",)

    def __init__(self, model, info: ExportInfo, spiece_proto: bytes):
        super().__init__(model, info, spiece_proto)
        self.max_qa_length = DEFAULT_MAX_QA_LENGTH if info.max_qa_length is None else info.max_qa_length
        self.qa_truncation = info.qa_truncation or DEFAULT_QA_TRUNCATION

    def pack_choices(self, article, question, options):
        """`preprocessing.encode_and_pack_choices` (the RACE builder's packing, the question+option text cut as
        the records were: `qa_truncation`) -> `(input_ids, segment_ids, attention_mask)` `[N, C, L]`."""
        f = preprocessing.encode_and_pack_choices(self.encoder, article, question, options, self.max_seq_length,
                                                  self.max_qa_length, self.qa_truncation)
        return f["input_ids"], f["segment_ids"], f["attention_mask"]

    def choose(self, input_ids, segment_ids, attention_mask, options=None):
        """`[N, C, L]` -> the choice's scores, id and letter (and with `options` `[N, C]`, the chosen text)."""
        b, c, length = tf.shape(input_ids)[0], tf.shape(input_ids)[1], tf.shape(input_ids)[2]
        ids, segs, mask = trim_left(*[tf.reshape(x, [-1, length]) for x in (input_ids, segment_ids, attention_mask)])
        shape = tf.stack([b, c, -1])
        logits = self.model({"input_ids": tf.reshape(ids, shape), "segment_ids": tf.reshape(segs, shape),
                             "attention_mask": tf.reshape(mask, shape)}, training=False)["logits"]
        label_id = tf.argmax(logits, -1, output_type=tf.int32)
        result = {"logits": logits, "probabilities": tf.nn.softmax(logits, -1), "label_id": label_id,
                  "label": tf.gather(tf.constant(list("ABCD")), label_id)}
        if options is not None:
            result["answer"] = tf.gather(options, label_id, batch_dims=1)
        return result

    # ------------------------------------------------------------------------------------ signatures
    def text_signature(self, outputs, signature: str):
        """`article [B]`, `question [B]`, `options [B, C]` (C <= 4) -> `outputs(article, question, options)`."""
        def race_text(article, question, options):
            most = tf.debugging.Assert(tf.shape(options)[1] <= MAX_CHOICES,
                                       [f"{signature}: options holds at most 4 choices (A-D)"])
            article, question, options = checked_texts(
                signature, {"article": article, "question": question, "options": options}, ranks={"options": 2},
                checks=[most])
            return outputs(article, question, options)

        return signature_function(race_text, [string_spec("article"), string_spec("question"),
                                              string_spec("options", rank=2)])

    def text_outputs(self, article, question, options):
        return self.choose(*self.pack_choices(article, question, options), options=options)

    def text_features(self, article, question, options):
        input_ids, segment_ids, attention_mask = self.pack_choices(article, question, options)
        b, c = tf.shape(input_ids)[0], tf.shape(input_ids)[1]
        flat = [tf.reshape(x, [-1, tf.shape(input_ids)[2]]) for x in (input_ids, segment_ids, attention_mask)]
        out = self.summarized_states(*flat)
        return {k: tf.reshape(v, tf.concat([[b, c], tf.shape(v)[1:]], 0)) for k, v in out.items()}

    def ids_signature(self):
        """`input_ids`, `segment_ids`, `attention_mask` `[B, C, L]`."""
        def from_ids(input_ids, segment_ids, attention_mask):
            return self.choose(*self.checked_ids(input_ids, segment_ids, attention_mask, rank=3))

        return signature_function(from_ids, ids_specs(3))

    def more_id_checks(self, shape, **more):
        return [tf.debugging.Assert(shape[1] <= MAX_CHOICES, ["from_ids: input_ids holds at most 4 choices (A-D)"])]
