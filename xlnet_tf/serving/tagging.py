"""The tagger's (`tagging`) SavedModel signatures: one tag per word of raw sentences, of pre-split words, or per
position of packed windows.

`serving_default`: `text [B]` string, sentences split into words at whitespace (Python's `str.split()`: runs of
spaces, tabs, newlines and the other Unicode separators; a tokenization that differs goes through `from_words`)
-> one tag per word: `tags [B, W]` string (padded with ""), `tag_ids [B, W]` int32 (-1 padding), `probabilities
[B, W]` (of the chosen tag; 0 padding), `logits [B, W, num_labels]` (0 padding), `word_begin` / `word_end
[B, W]` int64 byte offsets of each word in its string (-1 padding), `num_words [B]` int32; W = the most words of a
request. Each word is tokenized on its own and the pieces windowed as the tagging records were
(xlnet_tf/text/tagging.py: `word_piece_ids_tf`, `pack_sentences_tf` with the export's `max_seq_length` and
`doc_stride`), the model runs on every window and each word's prediction is read from the window where it has
the most context (`stitch_tf`), as the runner's predictions are. A sentence may take at most `max_windows`
windows (the request bound; the exporter's `--export_max_windows`).
`from_words`: `words [B, W]` string (one word per element, as a CoNLL line gives it: not empty, no surrounding
whitespace, no control character; anything after `num_words` is ignored) and `num_words [B]` int32 in `[0, W]`
-> the same outputs without the offsets, padded to the request's W.
`from_ids`: windows `input_ids`, `segment_ids` int32 `[T, L]`, `attention_mask` float32 `[T, L]` (1 = real
token) -> per position `logits [T, L, num_labels]` (0 at columns that are padding in every window),
`probabilities [T, L, num_labels]`, `tag_ids [T, L]` int32, `tags [T, L]` string.
`features`: `text [B]` -> one row per window, T of them (T = B when every sentence fits one window):
`token_states [T, L, D]`, `input_ids [T, L]`, `attention_mask [T, L]` (1 = real token), `pooled [T, D]` (the
state at `<cls>`), `example_index [T]` int32 (the sentence of each window), `word_ids [T, L]` int32 (each
position's word in its sentence, -1 at `<sep>`, `<cls>`, padding), `is_max_context [T, L]` int32 (1 where a word's
tag is read), and per word `word_states [B, W, D]` (the state of the word's first piece in the window its tag is
read from; 0 padding) and `num_words [B]` int32.
"""

from __future__ import annotations

import numpy as np
import tensorflow as tf

from xlnet_tf.artifacts.export_info import ExportInfo
from xlnet_tf.serving.base import ServingModule, ids_specs
from xlnet_tf.serving.checks import (
    first_real_column,
    rank_is,
    same_batch,
    signature_function,
    string_spec,
    trim_left,
    valid_utf8,
)
from xlnet_tf.text import packing_tf, tagging

DEFAULT_MAX_WINDOWS = 16  # a tagger's windows per sentence of a request


def split_words(text):
    """`[N]` strings -> words RaggedTensor `[N, (w)]` split at Python's whitespace (`str.split()`), and their
    byte offsets `begin`, `end` `[N, (w)]` int64 in the strings."""
    import tensorflow_text as tf_text

    return tf_text.regex_split_with_offsets(text, f"{packing_tf.PYTHON_SPACE}+")


class TaggingServing(ServingModule):
    """`tagging`: a tagger's windows of word pieces, each word's tag read where it has the most context.

    Args (beyond `ServingModule`'s; `info.doc_stride` is required: the records' windows):
      max_windows: the most windows of `max_seq_length` one sentence of a request may take (a longer one is
        refused).
    """

    TASKS = ("tagging",)

    def __init__(self, model, info: ExportInfo, spiece_proto: bytes, max_windows: int = DEFAULT_MAX_WINDOWS):
        super().__init__(model, info, spiece_proto)
        if info.doc_stride is None:
            raise ValueError("a tagging export needs doc_stride (the records' windows: export_info.json's)")
        tagging.check_window(info.max_seq_length, info.doc_stride)
        if isinstance(max_windows, bool) or not isinstance(max_windows, (int, np.integer)) or max_windows < 1:
            raise ValueError(f"max_windows must be an integer >= 1, got {max_windows!r}")
        self.doc_stride = int(info.doc_stride)
        self.max_windows = int(max_windows)
        labels = info.labels or getattr(model, "labels", None)  # XLNetTagger keeps its tag names
        self.labels = tf.constant(list(labels) if labels else
                                  [str(i) for i in range(max(getattr(model, "num_labels", 0), 1))])

    # ------------------------------------------------------------------------------------ windows and tags
    def windows(self, words, signature: str):
        """Words `[N, (w)]` -> the tagging records' windows of their pieces (`tagging.word_piece_ids_tf`,
        `tagging.pack_sentences_tf`), every `[T, L]` feature cut to the columns some window uses (windows are
        left-padded). Fails, naming `signature`, when a sentence needs more than `max_windows` windows."""
        pieces = tagging.word_piece_ids_tf(self.encoder, words)  # [N, (w), (k)]
        max_pieces = self.max_seq_length - tagging.SPECIALS
        limit = max_pieces + (self.max_windows - 1) * min(max_pieces, self.doc_stride)  # pieces in max_windows
        per_sentence = tf.reduce_sum(pieces.row_lengths(axis=2), axis=1)
        check = tf.debugging.Assert(
            tf.reduce_all(per_sentence <= limit),
            [f"{signature}: a sentence has more than {limit} pieces, more than max_windows={self.max_windows} "
             f"windows of max_seq_length={self.max_seq_length} (doc_stride={self.doc_stride}) hold; send shorter "
             "sentences or export with a larger --export_max_windows. Pieces per sentence:", per_sentence])
        with tf.control_dependencies([check]):
            packed = tagging.pack_sentences_tf(pieces, self.max_seq_length, self.doc_stride,
                                               max_windows=self.max_windows)
        first = first_real_column(packed["attention_mask"])
        return {k: (v[:, first:] if v.shape.rank == 2 else v) for k, v in packed.items()}

    def tag_words(self, words, width=None, signature: str = "serving_default"):
        """Words RaggedTensor `[N, (w)]` -> one tag per word (module docstring), dense `[N, width]` (default: the
        most words of a sentence) with their padding values, and `num_words [N]` int32."""
        packed = self.windows(words, signature)
        logits = self.model({k: packed[k] for k in ("input_ids", "segment_ids", "attention_mask")},
                            training=False)["logits"]  # [T, L, C]
        num_words = words.row_lengths()
        per_word = tagging.stitch_tf(packed["example_index"], packed["word_ids"], packed["is_max_context"],
                                     logits, num_words)  # [N, (w), C]
        flat = per_word.flat_values
        tag_ids = tf.argmax(flat, -1, output_type=tf.int32)
        probabilities = tf.reduce_max(tf.nn.softmax(flat, -1), -1)
        n = tf.shape(num_words, out_type=tf.int64)[0]
        width = tf.reduce_max(tf.concat([num_words, [0]], 0)) if width is None else tf.cast(width, tf.int64)
        classes = tf.shape(logits, out_type=tf.int64)[-1]

        def dense(values, fill, shape=None):
            return per_word.with_flat_values(values).to_tensor(fill, shape=tf.stack([n, width] + (shape or [])))

        return {"tags": dense(tf.gather(self.labels, tag_ids), ""), "tag_ids": dense(tag_ids, -1),
                "probabilities": dense(probabilities, 0.0), "logits": dense(flat, 0.0, [classes]),
                "num_words": tf.cast(num_words, tf.int32)}

    def tag_positions(self, logits):
        """`from_ids` of a tagger: per position `logits [T, L, C]` -> probabilities, tag ids and names."""
        tag_ids = tf.argmax(logits, -1, output_type=tf.int32)
        return {"logits": logits, "probabilities": tf.nn.softmax(logits, -1), "tag_ids": tag_ids,
                "tags": tf.gather(self.labels, tag_ids)}

    # ------------------------------------------------------------------------------------ signatures
    def text_outputs(self, text):
        words, begin, end = split_words(text)
        result = self.tag_words(words)
        width = tf.shape(result["tag_ids"], out_type=tf.int64)[1]
        shape = tf.stack([tf.shape(text, out_type=tf.int64)[0], width])
        result["word_begin"] = begin.to_tensor(tf.constant(-1, tf.int64), shape=shape)
        result["word_end"] = end.to_tensor(tf.constant(-1, tf.int64), shape=shape)
        return result

    def text_features(self, text):
        words, _, _ = split_words(text)
        packed = self.windows(words, "features")
        content = tf.cast(self.model.backbone(packed["input_ids"], segment_ids=packed["segment_ids"],
                                              attention_mask=packed["attention_mask"], training=False)["content"],
                          tf.float32)
        num_words = words.row_lengths()
        word_states = tagging.stitch_tf(packed["example_index"], packed["word_ids"], packed["is_max_context"],
                                        content, num_words)
        return {"token_states": content, "input_ids": packed["input_ids"],
                "attention_mask": packed["attention_mask"], "pooled": content[:, -1],  # <cls> ends each window
                "example_index": packed["example_index"], "word_ids": packed["word_ids"],
                "is_max_context": packed["is_max_context"], "word_states": word_states.to_tensor(0.0),
                "num_words": tf.cast(num_words, tf.int32)}

    def ids_signature(self):
        """Windows `input_ids`, `segment_ids`, `attention_mask` `[T, L]`."""
        def from_ids(input_ids, segment_ids, attention_mask):
            ids, segs, mask = trim_left(*self.checked_ids(input_ids, segment_ids, attention_mask))
            out = self.model({"input_ids": ids, "segment_ids": segs, "attention_mask": mask}, training=False)
            # logits 0 at the columns dropped (padding in every window): outputs keep the request's length
            pad = tf.shape(input_ids)[1] - tf.shape(ids)[1]
            return self.tag_positions(tf.pad(out["logits"], [[0, 0], [pad, 0], [0, 0]]))

        return signature_function(from_ids, ids_specs())

    def more_signatures(self):
        """`from_words`: `words [B, W]` string and `num_words [B]` int32."""
        def from_words(words, num_words):
            words = valid_utf8("words", words, rank=2, signature="from_words")
            num_words = rank_is("from_words", "num_words", num_words, 1)
            width = tf.shape(words)[1]
            checks = same_batch(("words", "num_words"), words, num_words, signature="from_words")
            checks.append(tf.debugging.Assert(
                tf.reduce_all((num_words >= 0) & (num_words <= width)),
                ["from_words: num_words must be in [0, W], W the words axis of words"]))
            with tf.control_dependencies(checks):
                ragged = tf.RaggedTensor.from_tensor(words, lengths=tf.cast(num_words, tf.int64))
            # a word as the builder reads one from a CoNLL column: not empty, no surrounding space, no control
            # character (tfrecords/readers/conll.py, tfrecords/tables.decode_lines)
            well_formed = tf.strings.regex_full_match(ragged.flat_values, r"[^\p{Cc}\s](?:[^\p{Cc}]*[^\p{Cc}\s])?")
            check = tf.debugging.Assert(tf.reduce_all(well_formed), [
                "from_words: a word is empty, has surrounding whitespace or holds a control character (the tagging "
                "builder refuses such a CoNLL column); send the words as a CoNLL file holds them"])
            with tf.control_dependencies([check]):
                ragged = tf.identity(ragged)
            return self.tag_words(ragged, width, signature="from_words")

        self.serve_words = signature_function(from_words, [string_spec("words", rank=2),
                                                           tf.TensorSpec([None], tf.int32, name="num_words")])
        return {"from_words": self.serve_words}
