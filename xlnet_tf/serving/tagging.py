"""A tagger's SavedModel signatures (`serving_default` on raw sentences, `from_words`, `from_ids`, `features`), as a
mixin of `serving.ServingModule` (task `tagging`; xlnet_tf/serving/export.py's docstring describes the inputs and
outputs): sentences split into words at whitespace, each word tokenized on its own and the pieces windowed as the
tagging records were (xlnet_tf/text/tagging.py), each word's prediction read from the window where it has the
most context."""

from __future__ import annotations

import tensorflow as tf

from xlnet_tf.serving.checks import (
    _first_real_column,
    _rank_is,
    _same_batch,
    _trim_left,
    _valid_utf8,
    signature_function,
)
from xlnet_tf.text import packing_tf, tagging


def _split_words(text):
    """`[N]` strings -> words RaggedTensor `[N, (w)]` split at Python's whitespace (`str.split()`), and their
    byte offsets `begin`, `end` `[N, (w)]` int64 in the strings."""
    import tensorflow_text as tf_text

    return tf_text.regex_split_with_offsets(text, f"{packing_tf.PYTHON_SPACE}+")


class TaggingSignatures:
    """The tagging half of `serving.ServingModule` (it provides `model`, `encoder`, `labels`, `max_seq_length`,
    `doc_stride`, `max_windows` and `_checked_ids`)."""

    def _tagging_windows(self, words, signature: str):
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
        first = _first_real_column(packed["attention_mask"])
        return {k: (v[:, first:] if v.shape.rank == 2 else v) for k, v in packed.items()}

    def _model_inputs(self, packed):
        return {k: packed[k] for k in ("input_ids", "segment_ids", "attention_mask")}

    def _tag_words(self, words, width=None, signature: str = "serving_default"):
        """Words RaggedTensor `[N, (w)]` -> one tag per word (module docstring), dense `[N, width]` (default: the
        most words of a sentence) with their padding values, and `num_words [N]` int32."""
        packed = self._tagging_windows(words, signature)
        logits = self.model(self._model_inputs(packed), training=False)["logits"]  # [T, L, C]
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

    def _tag_text(self, text):
        words, begin, end = _split_words(text)
        result = self._tag_words(words)
        width = tf.shape(result["tag_ids"], out_type=tf.int64)[1]
        shape = tf.stack([tf.shape(text, out_type=tf.int64)[0], width])
        result["word_begin"] = begin.to_tensor(tf.constant(-1, tf.int64), shape=shape)
        result["word_end"] = end.to_tensor(tf.constant(-1, tf.int64), shape=shape)
        return result

    def _tag_positions(self, logits):
        """`from_ids` of a tagger: per position `logits [T, L, C]` -> probabilities, tag ids and names."""
        tag_ids = tf.argmax(logits, -1, output_type=tf.int32)
        return {"logits": logits, "probabilities": tf.nn.softmax(logits, -1), "tag_ids": tag_ids,
                "tags": tf.gather(self.labels, tag_ids)}

    def _tagging_signatures(self):
        S = tf.TensorSpec

        def tag_words(words, num_words):
            words = _valid_utf8("words", words, rank=2, signature="from_words")
            num_words = _rank_is("from_words", "num_words", num_words, 1)
            width = tf.shape(words)[1]
            checks = _same_batch(("words", "num_words"), words, num_words, signature="from_words")
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
            return self._tag_words(ragged, width, signature="from_words")

        def tag_ids(input_ids, segment_ids, attention_mask):
            ids, segs, mask = _trim_left(*self._checked_ids(input_ids, segment_ids, attention_mask))
            out = self.model({"input_ids": ids, "segment_ids": segs, "attention_mask": mask}, training=False)
            # logits 0 at the columns dropped (padding in every window): outputs keep the request's length
            pad = tf.shape(input_ids)[1] - tf.shape(ids)[1]
            return self._tag_positions(tf.pad(out["logits"], [[0, 0], [pad, 0], [0, 0]]))

        text_fn = signature_function(lambda text: self._tag_text(_valid_utf8("text", text)),
                                     [S([None], tf.string, name="text")])
        words_fn = signature_function(tag_words, [S([None, None], tf.string, name="words"),
                                                  S([None], tf.int32, name="num_words")])
        ids_fn = signature_function(tag_ids, [
            S([None, None], tf.int32, name="input_ids"), S([None, None], tf.int32, name="segment_ids"),
            S([None, None], tf.float32, name="attention_mask")])
        return text_fn, ids_fn, words_fn

    def _tagging_features(self, text):
        words, _, _ = _split_words(text)
        packed = self._tagging_windows(words, "features")
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
