"""SavedModel export for TF Serving: raw UTF-8 strings in (tokenized in-graph exactly as training), named
predictions out; a second signature takes token ids. Written with `tf.saved_model.save` on a `tf.Module`
with explicit signatures (Keras 3's `model.export()` writes every variable twice).

Signatures (`serving_default` / `from_ids`), by task:
- `classifier`: `text` (+ `text_b` for pair tasks) -> `probabilities [B, C]`, `logits [B, C]`,
  `label_id [B]` int32, `label [B]` string.
- `regression`: `text` (+ `text_b`) -> `score [B]`.
- `race`: `article [B]`, `question [B]`, `options [B, 4]` -> `probabilities [B, 4]`, `logits`, `label_id`,
  `answer [B]` (the chosen option).
- `squad`: `question [B]`, `context [B]` -> `answer [B]` (text of the original context), `answer_start`,
  `answer_end` (byte offsets), `score`, `start_top_index/log_probs [B, Ks]`, `end_top_index/log_probs
  [B, Ks*Ke]` (start-major), `cls_logits [B]` (2.0). One window of `max_seq_length` tokens: longer
  contexts are truncated (their tail cannot be answered).
- `embedding`: `text` (+ `text_b`) -> `pooled [B, D]` (the sequence summary) and `sequence [B, L, D]`.
- `tagging`: `text [B]`, sentences split into words at whitespace (Python's `str.split()`: runs of spaces, tabs,
  newlines and the other Unicode separators; a tokenization that differs goes through `from_words`) -> one tag per
  word: `tags [B, W]` string (padded with ""), `tag_ids [B, W]` int32 (-1 padding), `probabilities [B, W]` (of the
  chosen tag; 0 padding), `logits [B, W, num_labels]` (0 padding), `word_begin` / `word_end` `[B, W]` int64 byte
  offsets of each word in its string (-1 padding), `num_words [B]` int32; W = the most words of a request. Each
  word is tokenized on its own and the pieces windowed as the tagging records were (xlnet_tf/text/tagging.py:
  `word_piece_ids_tf`, `pack_sentences_tf` with the export's `max_seq_length` and `doc_stride`), the model runs
  on every window and each word's prediction is read from the window where it has the most context
  (`stitch_tf`), as the runner's predictions are. A sentence may take at most `max_windows` windows (the request
  bound; the exporter's `--export_max_windows`). `from_words`: `words [B, W]` strings (one word per element, as
  a CoNLL line gives it; anything after `num_words` is ignored) and `num_words [B]` int32 -> the same outputs
  without the offsets, padded to the request's W. `from_ids`: windows `[T, L]` -> per position `logits
  [T, L, num_labels]` (0 at columns that are padding in every window), `probabilities`, `tag_ids`, `tags [T, L]`.
- long-document `classifier` / `regression` (exported with `max_segments` S > 1): the same inputs and
  outputs; a text is packed with S * `max_seq_length` positions as the record builder does (a longer one
  keeps its first tokens and its `<sep> (B <sep>) <cls>` end), cut into S segments and read segment by
  segment with the model's memories, in the graph. Every request runs S segments (short texts lead with
  padding-only segments, masked). `from_ids` then takes `[B, s, max_seq_length]` with s <= S (leading
  padding segments added).
Text is tokenized and packed by xlnet_tf/text/preprocessing.py with the in-graph twins of the builders' packers
(xlnet_tf/text/packing_tf.py), so `serving_default` feeds the model what the records hold.
`from_ids` takes `input_ids`, `segment_ids` int32 `[B, L]` and `attention_mask` float32 `[B, L]` (1 = real
token; SQuAD adds `p_mask`, `cls_index`; RACE takes `[B, 4, L]`). Batch size and length are variable.

`features` (every export): the backbone's last-layer content stream for the text path's inputs (the same inputs
and bounds as `serving_default`): `token_states [B, L, D]` float32 (one row per token of the packed input, L the
longest packed input of the request: leading positions that are padding in every row dropped), `input_ids
[B, L]` int32, `attention_mask [B, L]` float32 (1 = real token) and `pooled [B, D]`: the sequence summary the
head reads (classifier, regression, embedding, race: the model's summary layer, projection included) or, for
SQuAD and tagging, the state at `<cls>`. By task: race `[B, C, L, D]`, `[B, C, L]`, `[B, C, D]` (one packed
sequence per option); SQuAD the first window (`P <sep> Q <sep> <cls>`, right-padded: the positions after the
longest input dropped); long documents `[B, S*L, D]` (each segment read with the memories of the earlier ones,
`attention_mask [B, S*L]`); tagging one row per window, T of them (T = B when every sentence fits one window),
with `example_index [T]` int32 (the sentence of each window), `word_ids [T, L]` int32 (each position's word in
its sentence, -1 at `<sep>`, `<cls>`, padding), `is_max_context [T, L]` int32 (1 where a word's tag is read), and
per word `word_states [B, W, D]` (the state of the word's first piece in the window its tag is read from; 0
padding) and `num_words [B]`.

Bad requests are rejected with an error that names the input (never a silently wrong answer): raw text must
be valid UTF-8 (as for the record builders) and the text inputs of one request must have the same batch
size; `from_ids` needs ids in `[0, n_token)`, every tensor of one shape, an attention mask of 0/1, at most the
exported `max_seq_length` positions (texts are truncated as the builders do; ids are not, because only the
caller knows which tokens may go) and, for SQuAD, `cls_index` inside the sequence; RACE takes at most 4
options; a tagger's sentence at most `max_windows` windows of pieces, and `from_words` a `num_words` in
`[0, W]`.
"""

from __future__ import annotations

import dataclasses
import os
from typing import Dict, Optional, Sequence

import numpy as np
import tensorflow as tf

from xlnet_tf import files
from xlnet_tf.artifacts.text_settings import TextSettings
from xlnet_tf.artifacts.versioned_json import VersionedJson
from xlnet_tf.serving.checks import _rank_is, _same_batch, _trim_left, _valid_utf8, signature_function
from xlnet_tf.serving.tagging import TaggingSignatures
from xlnet_tf.text import layout, preprocessing, tagging, tokenization

TASKS = ("classifier", "regression", "squad", "race", "embedding", "tagging", "lm")
DEFAULT_MAX_WINDOWS = 16  # a tagger's windows per sentence of a request
WARMUP_FILE = "tf_serving_warmup_requests"
EXPORT_FILE_NAME = "xlnet_export.json"
EXPORT_FILE = VersionedJson("xlnet_tf.export", 1, "export the model again with run/export_savedmodel.py")


class _Untracked:
    """Holds the Keras model out of the SavedModel's object graph (saving would otherwise try to trace
    the Keras model's own `call` with default float inputs); its variables are tracked explicitly."""

    def __init__(self, value):
        self.value = value


class ServingModule(TaggingSignatures, tf.Module):
    """The exported module: the task model, the in-graph encoder and the signatures of one task."""

    def __init__(self, model, task: str, spiece_proto: bytes, max_seq_length: int, uncased: bool = False,
                 keep_accents: bool = False, labels: Optional[Sequence[str]] = None, text_pair: bool = False,
                 max_query_length: int = 64, max_qa_length: int = 128, max_answer_length: int = 64,
                 max_segments: int = 1, qa_truncation: str = "tail", split_unknown: bool = True,
                 doc_stride: Optional[int] = None, max_windows: int = DEFAULT_MAX_WINDOWS, generation=None):
        super().__init__(name=f"xlnet_{task}")
        if task not in TASKS:
            raise ValueError(f"task must be one of {TASKS}, got {task!r}")
        self._model = _Untracked(model)
        self.model_variables = list(model.variables)  # tracked explicitly: they are what gets saved
        self.encoder = preprocessing.XLNetTextEncoder(spiece_proto, uncased=uncased, keep_accents=keep_accents)
        self.task = task
        self.max_seq_length = max_seq_length
        self.text_pair = text_pair
        self.max_query_length = max_query_length
        self.max_qa_length = max_qa_length
        self.qa_truncation = qa_truncation
        self.split_unknown = bool(split_unknown)
        self.max_answer_length = max_answer_length
        self.max_segments = int(max_segments)
        if self.max_segments > 1 and (task not in ("classifier", "regression") or not getattr(model, "mem_len", None)):
            raise ValueError(f"max_segments={max_segments}: long documents need a classifier/regression model "
                             "built with mem_len")
        if task == "tagging":
            if doc_stride is None:
                raise ValueError("a tagging export needs doc_stride (the records' windows: export_info.json's)")
            tagging.check_window(max_seq_length, doc_stride)
            if isinstance(max_windows, bool) or not isinstance(max_windows, (int, np.integer)) or max_windows < 1:
                raise ValueError(f"max_windows must be an integer >= 1, got {max_windows!r}")
        if task == "lm":
            from xlnet_tf.serving.lm import GenerationBounds

            generation = GenerationBounds(**generation) if isinstance(generation, dict) else generation
            if not isinstance(generation, GenerationBounds):
                raise ValueError("an lm export needs generation bounds (xlnet_tf.serving.lm.GenerationBounds)")
        self.generation = generation
        self.doc_stride = None if doc_stride is None else int(doc_stride)
        self.max_windows = int(max_windows)
        num = getattr(model, "num_labels", 4 if task == "race" else 0)
        if task == "tagging" and not labels:
            labels = getattr(model, "labels", None)  # XLNetTagger keeps its tag names
        self.labels = tf.constant(list(labels) if labels else [str(i) for i in range(max(num, 1))])

    @property
    def model(self):
        return self._model.value

    def _checked_ids(self, input_ids, segment_ids, attention_mask, p_mask=None, cls_index=None, rank=2):
        """`from_ids` validation: the three id inputs, returned only after every check passed (one message
        per input). The value checks read the rank-checked tensors (data dependencies: Grappler keeps them)."""
        input_ids, segment_ids, attention_mask = (
            _rank_is("from_ids", name, t, rank) for name, t in
            (("input_ids", input_ids), ("segment_ids", segment_ids), ("attention_mask", attention_mask)))
        checks = self._check_id_values(input_ids, segment_ids, attention_mask, p_mask, cls_index)
        if rank == 3 and self.task == "race":
            checks.append(tf.debugging.Assert(tf.shape(input_ids)[1] <= 4,
                                              ["from_ids: input_ids holds at most 4 choices (A-D)"]))
        with tf.control_dependencies(checks):
            return tf.identity(input_ids), tf.identity(segment_ids), tf.identity(attention_mask)

    def _check_id_values(self, input_ids, segment_ids, attention_mask, p_mask, cls_index):
        n_token = self.model.backbone.config.n_token
        shape = tf.shape(input_ids)
        checks = [
            tf.debugging.Assert(tf.reduce_all(tf.equal(tf.shape(segment_ids), shape)),
                                ["from_ids: segment_ids must have the shape of input_ids"]),
            tf.debugging.Assert(tf.reduce_all(tf.equal(tf.shape(attention_mask), shape)),
                                ["from_ids: attention_mask must have the shape of input_ids"]),
            tf.debugging.Assert(tf.reduce_all((input_ids >= 0) & (input_ids < n_token)),
                                [f"from_ids: input_ids must be in [0, {n_token}) (the exported vocabulary)"]),
            tf.debugging.Assert(tf.reduce_all(tf.equal(attention_mask, 0.0) | tf.equal(attention_mask, 1.0)),
                                ["from_ids: attention_mask must be 1 (real token) or 0 (padding)"]),
            tf.debugging.Assert(shape[-1] <= self.max_seq_length,
                                [f"from_ids: input_ids is longer than the exported max_seq_length="
                                 f"{self.max_seq_length}; shorten the ids (keeping <sep>/<cls>) or send text "
                                 "to serving_default"]),
        ]
        if self.max_segments > 1:
            checks.append(tf.debugging.Assert(
                tf.equal(shape[-1], self.max_seq_length) & (shape[1] <= self.max_segments),
                [f"from_ids: a document is [batch, segments <= {self.max_segments}, {self.max_seq_length}] "
                 "(the packed text left-padded as a whole to segments * max_seq_length, then cut into segments)"]))
        if p_mask is not None:
            checks.append(tf.debugging.Assert(tf.reduce_all(tf.equal(tf.shape(p_mask), shape)),
                                              ["from_ids: p_mask must have the shape of input_ids"]))
        if cls_index is not None:
            checks.append(tf.debugging.Assert(
                tf.equal(tf.shape(cls_index)[0], shape[0])
                & tf.reduce_all((cls_index >= 0) & (cls_index < shape[-1])),
                ["from_ids: cls_index must hold one position per row, inside the sequence"]))
        return checks

    # ------------------------------------------------------------------------------------ text tasks
    def _classify(self, input_ids, segment_ids, attention_mask):
        if self.max_segments > 1:
            input_ids, segment_ids, attention_mask = self._full_document(input_ids, segment_ids, attention_mask)
        else:
            input_ids, segment_ids, attention_mask = _trim_left(input_ids, segment_ids, attention_mask)
        features = {"input_ids": input_ids, "segment_ids": segment_ids, "attention_mask": attention_mask}
        if self.task == "embedding":
            out = self.model.backbone(input_ids, segment_ids=segment_ids, attention_mask=attention_mask)
            pooled = self.model.sequence_summary(out["content"], attention_mask)
            return {"pooled": tf.cast(pooled, tf.float32), "sequence": tf.cast(out["content"], tf.float32)}
        out = self.model(features, training=False)
        if self.task == "regression":
            return {"score": out["score"]}
        return self._label_outputs(out["logits"])

    def _label_outputs(self, logits):
        label_id = tf.argmax(logits, -1, output_type=tf.int32)
        return {"logits": logits, "probabilities": tf.nn.softmax(logits, -1), "label_id": label_id,
                "label": tf.gather(self.labels, label_id)}

    def _pack_texts(self, text, text_b=None):
        """Texts -> `(input_ids, segment_ids, attention_mask)` `[N, L]`, or for a long-document model `[N, S, L]`
        (`preprocessing.encode_and_pack`: the classifier builder's packing)."""
        f = preprocessing.encode_and_pack(self.encoder, text, text_b, self.max_seq_length, self.max_segments)
        return f["input_ids"], f["segment_ids"], f["attention_mask"]

    def _full_document(self, input_ids, segment_ids, attention_mask):
        """`[N, s, L]` (s <= max_segments) -> `[N, max_segments, L]`: leading segments of padding added
        (masked memory: the model's result is the same)."""
        missing = self.max_segments - tf.shape(input_ids)[1]
        pad = [[0, 0], [missing, 0], [0, 0]]
        return (tf.ensure_shape(tf.pad(input_ids, pad), [None, self.max_segments, self.max_seq_length]),
                tf.ensure_shape(tf.pad(segment_ids, pad, constant_values=layout.SEG_ID_PAD),
                                [None, self.max_segments, self.max_seq_length]),
                tf.ensure_shape(tf.pad(attention_mask, pad), [None, self.max_segments, self.max_seq_length]))

    # ------------------------------------------------------------------------------------------ RACE
    def _race_pack(self, article, question, options):
        """`preprocessing.encode_and_pack_choices` (the RACE builder's packing, the question+option text cut as
        the records were: `qa_truncation`)."""
        f = preprocessing.encode_and_pack_choices(self.encoder, article, question, options, self.max_seq_length,
                                                  self.max_qa_length, self.qa_truncation)
        return f["input_ids"], f["segment_ids"], f["attention_mask"]

    def _race(self, input_ids, segment_ids, attention_mask, options=None):
        b, c, length = tf.shape(input_ids)[0], tf.shape(input_ids)[1], tf.shape(input_ids)[2]
        flat = [tf.reshape(x, [-1, length]) for x in (input_ids, segment_ids, attention_mask)]
        ids, segs, mask = _trim_left(*flat)
        shape = tf.stack([b, c, -1])
        out = self.model({"input_ids": tf.reshape(ids, shape), "segment_ids": tf.reshape(segs, shape),
                          "attention_mask": tf.reshape(mask, shape)}, training=False)
        result = self._label_outputs(out["logits"])
        result["label"] = tf.gather(tf.constant(list("ABCD")), result["label_id"])
        if options is not None:
            result["answer"] = tf.gather(options, result["label_id"], batch_dims=1)
        return result

    # ----------------------------------------------------------------------------------------- SQuAD
    def _squad_pack(self, question, context):
        """`preprocessing.encode_and_pack_squad` (the builder's first window): the model's features, and the
        byte spans of the paragraph tokens plus the paragraph length the answer is read from."""
        features, spans = preprocessing.encode_and_pack_squad(self.encoder, question, context, self.max_seq_length,
                                                              self.max_query_length, self.split_unknown)
        spans["p_len"] = features.pop("paragraph_len")
        return features, spans

    def _squad(self, features):
        length = tf.maximum(tf.reduce_max(tf.cast(tf.reduce_sum(features["attention_mask"], 1), tf.int32)), 1)
        trimmed = {k: (v[:, :length] if v.shape.rank == 2 else v) for k, v in features.items()}
        out = self.model(trimmed, training=False)
        result = {k: out[k] for k in ("start_top_log_probs", "start_top_index", "end_top_log_probs",
                                      "end_top_index")}
        result["cls_logits"] = out.get("cls_logits", tf.zeros_like(out["start_top_log_probs"][:, 0]) - 1e9)
        return result

    def _squad_answer(self, context, result, spans):
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
        answer = tf.strings.strip(tf.strings.substr(context, begin, tf.maximum(end - begin, 0)))
        return {"answer": tf.where(has, answer, ""), "answer_start": begin, "answer_end": end,
                "score": tf.where(has, tf.gather(score, best, batch_dims=1), -np.inf), **result}

    # -------------------------------------------------------------------------------------- features
    def _states(self, input_ids, segment_ids, attention_mask, trim: str = "left"):
        """Packed `[N, L]` -> the backbone's last-layer content stream (every row) and the masks, the columns
        that are padding in every row dropped (left-padded inputs; `trim="right"`: right-padded)."""
        if trim == "left":
            input_ids, segment_ids, attention_mask = _trim_left(input_ids, segment_ids, attention_mask)
        else:
            length = tf.maximum(tf.reduce_max(tf.cast(tf.reduce_sum(attention_mask, 1), tf.int32)), 1)
            input_ids, segment_ids, attention_mask = (x[:, :length] for x in (input_ids, segment_ids, attention_mask))
        content = self.model.backbone(input_ids, segment_ids=segment_ids, attention_mask=attention_mask,
                                      training=False)["content"]
        return content, {"input_ids": input_ids, "attention_mask": tf.cast(attention_mask, tf.float32)}

    def _document_states(self, input_ids, segment_ids, attention_mask):
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

    def _sequence_features(self, input_ids, segment_ids, attention_mask):
        """Classifier / regression / embedding: packed texts -> `features` outputs (the model's summary)."""
        if self.max_segments > 1:
            return self._document_states(input_ids, segment_ids, attention_mask)
        content, out = self._states(input_ids, segment_ids, attention_mask)
        pooled = self.model.sequence_summary(content, out["attention_mask"])
        return {**out, "token_states": tf.cast(content, tf.float32), "pooled": tf.cast(pooled, tf.float32)}

    def _race_features(self, input_ids, segment_ids, attention_mask):
        b, c = tf.shape(input_ids)[0], tf.shape(input_ids)[1]
        flat = [tf.reshape(x, [-1, tf.shape(input_ids)[2]]) for x in (input_ids, segment_ids, attention_mask)]
        out = self._sequence_features(*flat)
        return {k: tf.reshape(v, tf.concat([[b, c], tf.shape(v)[1:]], 0)) for k, v in out.items()}

    def _squad_features(self, features):
        content, out = self._states(features["input_ids"], features["segment_ids"], features["attention_mask"],
                                    trim="right")
        content = tf.cast(content, tf.float32)
        return {**out, "token_states": content, "pooled": tf.gather(content, features["cls_index"], batch_dims=1)}

    def _features_signature(self):
        """The `features` function: the text path's inputs and bounds (module docstring)."""
        S = tf.TensorSpec
        sig = "features"
        if self.task in ("classifier", "regression", "embedding"):
            if self.text_pair:
                def pair_features(text, text_b):
                    with tf.control_dependencies(_same_batch(("text", "text_b"), text, text_b, signature=sig)):
                        return self._sequence_features(*self._pack_texts(
                            _valid_utf8("text", text, signature=sig), _valid_utf8("text_b", text_b, signature=sig)))

                return signature_function(pair_features, [S([None], tf.string, name="text"),
                                                          S([None], tf.string, name="text_b")])
            return signature_function(
                lambda text: self._sequence_features(*self._pack_texts(_valid_utf8("text", text, signature=sig))),
                [S([None], tf.string, name="text")])
        if self.task == "race":
            def race_features(article, question, options):
                checks = _same_batch(("article", "question", "options"), article, question, options, signature=sig)
                checks.append(tf.debugging.Assert(tf.shape(options)[1] <= 4,
                                                  [f"{sig}: options holds at most 4 choices (A-D)"]))
                with tf.control_dependencies(checks):
                    article = _valid_utf8("article", article, signature=sig)
                    question = _valid_utf8("question", question, signature=sig)
                    options = _valid_utf8("options", options, rank=2, signature=sig)
                    return self._race_features(*self._race_pack(article, question, options))

            return signature_function(race_features, [
                S([None], tf.string, name="article"), S([None], tf.string, name="question"),
                S([None, None], tf.string, name="options")])
        if self.task == "squad":
            def squad_features(question, context):
                with tf.control_dependencies(_same_batch(("question", "context"), question, context, signature=sig)):
                    question = _valid_utf8("question", question, signature=sig)
                    context = _valid_utf8("context", context, signature=sig)
                    return self._squad_features(self._squad_pack(question, context)[0])

            return signature_function(squad_features, [S([None], tf.string, name="question"),
                                                       S([None], tf.string, name="context")])
        if self.task == "tagging":
            return signature_function(lambda text: self._tagging_features(_valid_utf8("text", text, signature=sig)),
                                      [S([None], tf.string, name="text")])
        raise ValueError(f"no features signature for task {self.task!r}")

    # ------------------------------------------------------------------------------------ signatures
    def signatures(self) -> Dict[str, tf.types.experimental.PolymorphicFunction]:
        """The signatures of the task, by name: `serving_checks.signature_function`s, which `tf.saved_model.save`
        traces itself (once each)."""
        if self.task == "lm":  # xlnet_tf/serving/lm.py
            from xlnet_tf.serving import lm as serving_lm

            self.serve_generate = serving_lm.generate_function(self, self.generation)
            self.serve_features = serving_lm.features_function(self)
            return {"serving_default": self.serve_generate, serving_lm.SIGNATURE: self.serve_generate,
                    "features": self.serve_features}
        S = tf.TensorSpec
        ids_specs = [S([None, None], tf.int32, name="input_ids"), S([None, None], tf.int32, name="segment_ids"),
                     S([None, None], tf.float32, name="attention_mask")]
        words_fn = None
        if self.task == "tagging":
            text_fn, ids_fn, words_fn = self._tagging_signatures()
        elif self.task in ("classifier", "regression", "embedding"):
            if self.text_pair:
                def classify_pair(text, text_b):
                    with tf.control_dependencies(_same_batch(("text", "text_b"), text, text_b)):
                        return self._classify(*self._pack_texts(_valid_utf8("text", text),
                                                                _valid_utf8("text_b", text_b)))

                text_fn = signature_function(classify_pair, [S([None], tf.string, name="text"),
                                                             S([None], tf.string, name="text_b")])
            else:
                text_fn = signature_function(lambda text: self._classify(*self._pack_texts(_valid_utf8("text", text))),
                                             [S([None], tf.string, name="text")])
            rank = 3 if self.max_segments > 1 else 2

            def classify_ids(input_ids, segment_ids, attention_mask):
                return self._classify(*self._checked_ids(input_ids, segment_ids, attention_mask, rank=rank))

            ids_fn = signature_function(classify_ids, [
                S([None] * rank, spec.dtype, name=spec.name) for spec in ids_specs])
        elif self.task == "race":
            def race_text(article, question, options):
                checks = _same_batch(("article", "question", "options"), article, question, options)
                checks.append(tf.debugging.Assert(tf.shape(options)[1] <= 4,
                                                  ["serving_default: options holds at most 4 choices (A-D)"]))
                with tf.control_dependencies(checks):
                    article, question = _valid_utf8("article", article), _valid_utf8("question", question)
                    options = _valid_utf8("options", options, rank=2)
                    return self._race(*self._race_pack(article, question, options), options=options)

            def race_ids(input_ids, segment_ids, attention_mask):
                return self._race(*self._checked_ids(input_ids, segment_ids, attention_mask, rank=3))

            text_fn = signature_function(race_text, [S([None], tf.string, name="article"),
                                                     S([None], tf.string, name="question"),
                                                     S([None, None], tf.string, name="options")])
            ids_fn = signature_function(race_ids, [S([None, None, None], tf.int32, name="input_ids"),
                                                   S([None, None, None], tf.int32, name="segment_ids"),
                                                   S([None, None, None], tf.float32, name="attention_mask")])
        else:
            def squad_text(question, context):
                with tf.control_dependencies(_same_batch(("question", "context"), question, context)):
                    question, context = _valid_utf8("question", question), _valid_utf8("context", context)
                    features, spans = self._squad_pack(question, context)
                    return self._squad_answer(context, self._squad(features), spans)

            def squad_ids(input_ids, segment_ids, attention_mask, p_mask, cls_index):
                input_ids, segment_ids, attention_mask = self._checked_ids(input_ids, segment_ids, attention_mask,
                                                                           p_mask, cls_index)
                return self._squad({"input_ids": input_ids, "segment_ids": segment_ids,
                                    "attention_mask": attention_mask, "p_mask": p_mask, "cls_index": cls_index})

            text_fn = signature_function(squad_text, [S([None], tf.string, name="question"),
                                                      S([None], tf.string, name="context")])
            ids_fn = signature_function(squad_ids, ids_specs + [S([None, None], tf.float32, name="p_mask"),
                                                                S([None], tf.int32, name="cls_index")])
        self.serve_text, self.serve_ids = text_fn, ids_fn
        out = {"serving_default": text_fn, "from_ids": ids_fn}
        if words_fn is not None:
            self.serve_words = words_fn
            out["from_words"] = words_fn
        self.serve_features = self._features_signature()
        out["features"] = self.serve_features
        return out


def write_warmup_requests(export_path: str, inputs: Dict[str, np.ndarray], model_name: str = "xlnet",
                          signature_name: str = "serving_default", num_records: int = 1) -> str:
    """`assets.extra/tf_serving_warmup_requests`: TFRecord of `PredictionLog`s (TF Serving's format)."""
    from tensorflow_serving.apis import model_pb2, predict_pb2, prediction_log_pb2

    directory = os.path.join(export_path, "assets.extra")
    tf.io.gfile.makedirs(directory)
    path = os.path.join(directory, WARMUP_FILE)
    request = predict_pb2.PredictRequest(
        model_spec=model_pb2.ModelSpec(name=model_name, signature_name=signature_name))
    for key, value in inputs.items():
        request.inputs[key].CopyFrom(tf.make_tensor_proto(value))
    log = prediction_log_pb2.PredictionLog(predict_log=prediction_log_pb2.PredictLog(request=request))
    with tf.io.TFRecordWriter(path) as writer:
        for _ in range(num_records):
            writer.write(log.SerializeToString())
    return path


def export(model, task: str, spiece_model: str, export_dir: str, version: int, max_seq_length: int,
           warmup_inputs: Optional[Dict[str, np.ndarray]] = None, extra_files: Optional[Dict[str, dict]] = None,
           **options) -> str:
    """Writes `<export_dir>/<version>/` (SavedModel + warm-up requests + `assets.extra/xlnet_export.json`: the
    settings that shaped the export, `EXPORT_FILE`, with the TextSettings of its tokenization); returns it.

    Written to a temporary directory and renamed, so a failed export never leaves a half version.
    `extra_files`: more JSON files for `assets.extra/` (name -> content), in the version before it appears.
    """
    with open(spiece_model, "rb") as f:
        proto = f.read()
    module = ServingModule(model, task, proto, max_seq_length, **options)
    signatures = module.signatures()
    path = os.path.join(export_dir, str(int(version)))
    if tf.io.gfile.exists(path):
        raise FileExistsError(f"{path} exists: choose another --version (TF Serving loads the highest)")
    tmp = os.path.join(export_dir, f".tmp-{int(version)}")
    if tf.io.gfile.exists(tmp):
        tf.io.gfile.rmtree(tmp)
    tf.saved_model.save(module, tmp, signatures=signatures)
    if warmup_inputs:
        write_warmup_requests(tmp, warmup_inputs)
    tf.io.gfile.makedirs(os.path.join(tmp, "assets.extra"))
    text = TextSettings(tokenization.file_sha256(spiece_model), bool(options.get("uncased", False)),
                        bool(options.get("keep_accents", False)))
    EXPORT_FILE.write(os.path.join(tmp, "assets.extra", EXPORT_FILE_NAME), {
        "task": task, "max_seq_length": max_seq_length, "config": model.config.to_dict(),
        "text": dataclasses.asdict(text),
        **{k: (list(v) if isinstance(v, (list, tuple)) else v.to_dict() if hasattr(v, "to_dict") else v)
           for k, v in options.items() if k not in ("uncased", "keep_accents")}})
    for name, content in (extra_files or {}).items():
        files.write_json_atomic(os.path.join(tmp, "assets.extra", name), content)
    tf.io.gfile.rename(tmp, path)
    return path
