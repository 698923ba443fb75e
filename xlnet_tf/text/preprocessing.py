"""In-graph (TensorFlow + tensorflow-text) XLNet preprocessing for serving and Keras training: the same
normalization, SentencePiece pieces (digit-comma re-split included) and packing as `xlnet_tf.text.tokenization`
and the record builders, so a SavedModel (and `XLNetPreprocessor` in a `tf.data` pipeline) takes raw UTF-8
strings and produces exactly the training-time ids.

The normalization and every packer are the in-graph twins in xlnet_tf/text/packing_tf.py (the layouts:
xlnet_tf/text/layout.py); this module tokenizes (`XLNetTextEncoder`) and composes: `encode_and_pack`
(classification, long documents), `encode_and_pack_choices` (multiple choice), `encode_and_pack_squad` (SQuAD's
first window), and the Keras layer `XLNetPreprocessor`.
"""

from __future__ import annotations

import numbers
from typing import Optional, Tuple

import keras
import tensorflow as tf

from xlnet_tf.text import tokenization
from xlnet_tf.text import packing_tf
from xlnet_tf.text.packing_tf import normalize  # noqa: F401  (the twin of tokenization.preprocess_text)


class XLNetTextEncoder(tf.Module):
    """Raw strings -> XLNet token ids, in-graph (a trackable module: the SentencePiece model travels
    inside the SavedModel).

    Args:
      model_proto: serialized SentencePiece model (`spiece.model` bytes).
      uncased, keep_accents: as `tokenization.XLNetTokenizer`.
    """

    def __init__(self, model_proto: bytes, uncased: bool = False, keep_accents: bool = False,
                 name: Optional[str] = None):
        super().__init__(name=name)
        import tensorflow_text as tf_text

        self.uncased = uncased
        self.keep_accents = keep_accents
        self.tokenizer = tf_text.SentencepieceTokenizer(model=model_proto, out_type=tf.int32)
        py = tokenization.XLNetTokenizer(model_proto=model_proto, check_special_ids=True)
        pieces = [py.id_to_piece(i) for i in range(py.vocab_size)]
        self._digit_comma = tf.constant([len(p) > 1 and p[-1] == "," and p[-2].isdigit() for p in pieces])
        self._comma_id = py.piece_to_id(",")

    def encode(self, text):
        """`[N]` strings -> RaggedTensor `[N, (tokens)]` int32 ids, as `XLNetTokenizer.encode`."""
        return self._tokenize(normalize(text, self.uncased, self.keep_accents))[0]

    def encode_normalized_with_offsets(self, normalized):
        """Already-normalized `[N]` strings -> `(ids, begin, end)` RaggedTensors `[N, (tokens)]`; begin/end
        are byte offsets of each token's SentencePiece piece in its string (the pieces of a digit-comma
        re-split share the span of the piece they came from)."""
        ids, source, begin, end = self._tokenize(normalized, with_offsets=True)
        return ids, begin, end

    def encode_with_spans(self, text, split_unknown: bool = False):
        """`[N]` raw strings -> `(ids, begin, end)` RaggedTensors `[N, (tokens)]`: the text tokenized word by word
        (words split at Python's whitespace, as `preprocess_text` collapses it; each normalized and encoded: the
        ids of `encode`), `begin`/`end` int64 the byte span of each token in its raw string (the token's own piece
        where normalization kept its word unchanged, else the whole word). SQuAD serving reads its answers out
        of these spans. (tensorflow-text's `WhitespaceTokenizer`, used before, cut a multi-byte space such as
        U+00A0 after its first byte, which then became an extra `<unk>`.)

        `split_unknown`: a `<unk>` piece of several characters (e.g. a run of CJK characters unknown to the
        vocabulary) becomes one `<unk>` per character, each with its own span: the SQuAD builder's
        `split_unknown` (`xlnet_tf.text.offsets.tokenize_with_offsets`), which its records' manifest and the
        run's export_info record."""
        import tensorflow_text as tf_text

        words, w_begin, w_end = tf_text.regex_split_with_offsets(text, f"{packing_tf.PYTHON_SPACE}+")
        flat = words.flat_values
        norm = normalize(flat, self.uncased, self.keep_accents)
        ids, p_begin, p_end = self.encode_normalized_with_offsets(norm)  # [words, (pieces)]
        word_of, ids_per_word = packing_tf.row_ids(tf.cast(ids.row_splits, tf.int64)), ids.row_lengths()
        ids, p_begin, p_end = (ids.flat_values, tf.cast(p_begin.flat_values, tf.int64),
                               tf.cast(p_end.flat_values, tf.int64))
        if split_unknown:
            ids, p_begin, p_end, word_of = _split_unknown(ids, p_begin, p_end, word_of, norm)
            ids_per_word = tf.math.bincount(tf.cast(word_of, tf.int32), minlength=tf.size(flat),
                                            maxlength=tf.size(flat), dtype=tf.int64)
        same = tf.gather(tf.equal(norm, flat), word_of)  # normalization kept the word: exact offsets
        wb = tf.cast(tf.gather(w_begin.flat_values, word_of), tf.int64)
        we = tf.cast(tf.gather(w_end.flat_values, word_of), tf.int64)
        begin = tf.where(same, wb + p_begin, wb)
        end = tf.where(same, wb + p_end, we)
        per_text = tf.math.unsorted_segment_sum(tf.cast(ids_per_word, tf.int64),
                                                packing_tf.row_ids(tf.cast(words.row_splits, tf.int64)), words.nrows())
        return tuple(tf.RaggedTensor.from_row_lengths(v, per_text, validate=False) for v in (ids, begin, end))

    def _tokenize(self, normalized, with_offsets: bool = False):
        if with_offsets:
            ids, begin, end = self.tokenizer.tokenize_with_offsets(normalized)
        else:
            ids = self.tokenizer.tokenize(normalized)
        new_ids, source = self._split_digit_comma(ids)
        if not with_offsets:
            return new_ids, source
        begin = new_ids.with_flat_values(tf.gather(begin.flat_values, source))
        end = new_ids.with_flat_values(tf.gather(end.flat_values, source))
        return new_ids, source, begin, end

    def _split_digit_comma(self, ids):
        """The original `encode_pieces` re-split of pieces like `▁2000,` into `▁2000` + `,`.

        Returns the new ids `[N, (tokens')]` and, per new token, the flat index of the token it came from.
        """
        flat = ids.flat_values  # [T] ids of all texts
        is_dc = tf.gather(self._digit_comma, flat)
        dc_pos = tf.where(is_dc)[:, 0]
        pieces = self.tokenizer.id_to_string(tf.gather(flat, dc_pos))
        core = tf.strings.regex_replace(tf.strings.regex_replace(pieces, ",$", ""), "\u2581", "")
        sub_ids = self.tokenizer.tokenize(core)
        sub = sub_ids.with_flat_values(self.tokenizer.id_to_string(sub_ids.flat_values))  # [n, (m)]
        # A piece that did not start a word loses the "▁" its re-split starts with (or that piece).
        row = packing_tf.row_ids(sub.row_splits)
        first = tf.equal(tf.range(tf.size(row, out_type=tf.int64)), tf.gather(sub.row_starts(), row))
        strip = first & tf.gather(tf.logical_not(tf.strings.regex_full_match(pieces, "\u2581.*")), row)
        values = tf.where(strip, tf.strings.regex_replace(sub.flat_values, "^\u2581", ""), sub.flat_values)
        kept = packing_tf.keep_where(sub.with_flat_values(values),
                                     sub.with_flat_values(tf.logical_not(first) | (tf.strings.length(values) > 0)))
        kept_ids = tf.cast(self.tokenizer.string_to_id(kept.flat_values), flat.dtype)
        # Every token becomes a list (itself, or its re-split and a comma), in token order: each list's place in
        # the output is the exclusive cumulative sum of the lengths before it.
        lengths = tf.ones_like(flat, tf.int64)
        lengths = tf.tensor_scatter_nd_update(lengths, dc_pos[:, None], kept.row_lengths() + 1)
        out_start = tf.math.cumsum(lengths, exclusive=True)
        keep_pos = tf.where(tf.logical_not(is_dc))[:, 0]
        dc_start = tf.gather(out_start, dc_pos)  # [n]
        kept_row = packing_tf.row_ids(kept.row_splits)
        within = tf.range(tf.size(kept_row, out_type=tf.int64)) - tf.gather(kept.row_starts(), kept_row)
        where = tf.concat([tf.gather(out_start, keep_pos), tf.gather(dc_start, kept_row) + within,
                           dc_start + kept.row_lengths()], 0)
        new_values = tf.concat([tf.gather(flat, keep_pos), kept_ids,
                                tf.fill(tf.shape(dc_pos), tf.cast(self._comma_id, flat.dtype))], 0)
        total = tf.reduce_sum(lengths)
        new_flat = tf.scatter_nd(where[:, None], new_values, total[None])
        sources = packing_tf.repeat_index(lengths)  # the token each new one comes from
        per_text = tf.math.unsorted_segment_sum(lengths, packing_tf.row_ids(ids.row_splits), ids.nrows())
        return tf.RaggedTensor.from_row_lengths(new_flat, per_text, validate=False), sources


def _split_unknown(ids, begin, end, word_of, words):
    """Every `<unk>` token whose piece covers several characters of its (normalized) word becomes one `<unk>` per
    character. `ids`, `begin`, `end` (byte offsets in the word), `word_of` `[T]` -> the same four, `[T']`."""
    text = tf.strings.substr(tf.gather(words, word_of), begin, end - begin)  # each token's bytes
    chars = tf.strings.unicode_split(text, "UTF-8")  # [T, (characters)]
    n_chars = chars.row_lengths()
    split = tf.logical_and(tf.equal(ids, tf.cast(tokenization.UNK_ID, ids.dtype)), n_chars > 1)
    copies = tf.where(split, n_chars, tf.ones_like(n_chars))
    token = packing_tf.repeat_index(copies)  # [T'] the token each comes from
    k = tf.ragged.range(copies).flat_values  # [T'] its character within that token
    char_bytes = tf.strings.length(chars.flat_values)  # [C]
    char_start = tf.cast(tf.math.cumsum(char_bytes, exclusive=True), tf.int64)  # within the flat characters
    row_start = tf.gather(chars.row_starts(), token)
    last = tf.maximum(tf.size(char_bytes, out_type=tf.int64) - 1, 0)  # gathers stay in range for empty tokens
    flat_char = tf.minimum(row_start + k, last)
    offset_in_token = tf.gather(char_start, flat_char) - tf.gather(char_start, tf.minimum(row_start, last))
    is_split = tf.gather(split, token)
    new_begin = tf.where(is_split, tf.gather(begin, token) + offset_in_token, tf.gather(begin, token))
    new_end = tf.where(is_split, new_begin + tf.cast(tf.gather(char_bytes, flat_char), tf.int64),
                       tf.gather(end, token))
    return tf.gather(ids, token), new_begin, new_end, tf.gather(word_of, token)


def encode_and_pack(encoder: XLNetTextEncoder, text, text_b, max_seq_length: int, max_segments: int = 1
                    ) -> packing_tf.Features:
    """Raw strings `[N]` (and `text_b [N]`, or None) -> the classifier's features, as the classifier builder packs
    them (`packing_tf.pack_document`, the twin of `packing.pack_pair`): `input_ids`, `segment_ids` int32 and
    `attention_mask` float32 (1 = real token) `[N, max_seq_length]`, left-padded; for documents of S =
    `max_segments` > 1 segments the text packed with S * `max_seq_length` positions (a longer text keeps its
    first tokens and its `<sep> (B <sep>) <cls>` end), read as `[N, S, max_seq_length]`. The one text-to-features
    path of serving (`xlnet_tf.serving.base.ServingModule`) and Keras training (`XLNetPreprocessor`)."""
    ids_b = None if text_b is None else encoder.encode(text_b)
    return packing_tf.pack_document(encoder.encode(text), ids_b, max_seq_length, max_segments)[0]


def encode_and_pack_choices(encoder: XLNetTextEncoder, article, question, options, max_seq_length: int,
                            max_qa_length: int, qa_truncation: str = "tail") -> packing_tf.Features:
    """Multiple choice: `article`, `question` `[N]` and `options` `[N, C]` strings -> `input_ids`, `segment_ids`
    int32 and `attention_mask` float32 `[N, C, max_seq_length]`, as the RACE builder packs them: each option's
    text `packing_tf.choice_text` (twin of `layout.choice_text`), packed by `packing_tf.pack_choice`."""
    choices = tf.shape(options, out_type=tf.int64)[1]
    qa = encoder.encode(tf.reshape(packing_tf.choice_text(question, options), [-1]))  # [N*C, (q)]
    qa = tf.RaggedTensor.from_uniform_row_length(qa, choices, nrows=tf.shape(options, out_type=tf.int64)[0])
    return packing_tf.pack_choice(encoder.encode(article), qa, max_seq_length, max_qa_length, qa_truncation)[0]


def encode_and_pack_squad(encoder: XLNetTextEncoder, question, context, max_seq_length: int,
                          max_query_length: int, split_unknown: bool = True
                          ) -> Tuple[packing_tf.Features, packing_tf.Features]:
    """SQuAD, first window: `question`, `context` `[N]` strings -> (`features`, `spans`). `features`: the
    question's first `max_query_length` ids and the context's tokens packed by `packing_tf.pack_squad_window`
    (twin of `packing.pack_squad_window`: `input_ids`, `segment_ids` int32, `attention_mask`, `p_mask` float32
    `[N, max_seq_length]`, `cls_index`, `paragraph_len` int32 [N]). The context is tokenized word by word
    (`XLNetTextEncoder.encode_with_spans`, `split_unknown` as the builder's); a longer context keeps its first window. `spans`: `begin`, `end` int64
    `[N, max_seq_length]`, the byte span in `context` of the paragraph token at each position (-1 elsewhere)."""
    ids, begin, end = encoder.encode_with_spans(context, split_unknown=split_unknown)
    query = encoder.encode(question)[:, :max_query_length]
    features = packing_tf.pack_squad_window(ids, query, max_seq_length)
    shape = [None, max_seq_length]
    spans = {k: packing_tf.head(v, features["paragraph_len"]).to_tensor(tf.constant(-1, tf.int64), shape=shape)
             for k, v in (("begin", begin), ("end", end))}
    return features, spans


def _read_proto(spiece_model) -> bytes:
    """A SentencePiece model as bytes: `spiece_model` is the serialized model or a path to it."""
    if isinstance(spiece_model, bytes):
        return spiece_model
    if not tf.io.gfile.exists(spiece_model):
        raise ValueError(f"spiece_model: no SentencePiece model at {spiece_model!r} (pass the path of "
                         f"spiece.model or its bytes)")
    with tf.io.gfile.GFile(spiece_model, "rb") as f:
        return f.read()


class _Packers:
    """`encode_and_pack` of one text and of a text pair as `tf.function`s (strings `[N]` in), traced once per
    encoder. A plain object: Keras and the SavedModel's object graph do not track what it holds. Without it,
    every call in a new graph (each `tf.data` map of the preprocessor, each `fit` / `evaluate` / `predict`)
    built the whole tokenization and packing graph again (about 5 s on the 2-core host)."""

    def __init__(self, encoder: XLNetTextEncoder, max_seq_length: int, max_segments: int):
        texts = tf.TensorSpec([None], tf.string)
        pack = lambda text, text_b: encode_and_pack(encoder, text, text_b, max_seq_length, max_segments)  # noqa
        self.one = tf.function(lambda text: pack(text, None), input_signature=[texts], autograph=False)
        self.two = tf.function(pack, input_signature=[texts, texts], autograph=False)


@keras.saving.register_keras_serializable(package="xlnet_tf")
class XLNetPreprocessor(keras.layers.Layer):
    """Raw text -> classifier features, in-graph (KerasHub's *preprocessor*: what `fit`/`predict` map over
    raw `tf.data`, the same tokenization and packing as the SavedModel's `serving_default`).

    Args:
      spiece_model: path of the SentencePiece model (`spiece.model`) or its bytes; None only when the
        layer is restored from a `.keras` file (the model travels as an asset, `spiece.model`).
      sequence_length: packed length L (`A <sep> B <sep> <cls>`, left-padded, longer pair truncated first);
        with several segments, the length of one segment.
      uncased, keep_accents: as `tokenization.XLNetTokenizer` (must match the pretrained model).
      max_segments: S > 1 packs each text as a document of S segments of L, for a long-document classifier
        (built with `mem_len`): the text packed with S * L positions, left-padded as a whole, then cut into
        segments (the record builder's `max_segments` packing, and the exported `serving_default`'s).

    Call: `preprocessor(x, y=None, sample_weight=None)` with `x` a string tensor `[B]` (or a scalar string,
    e.g. mapped before batching), or a pair `(text_a, text_b)`; a dict that already holds `input_ids` is
    passed through. Returns `x` (or `(x, y)`, `(x, y, sample_weight)` when given) with `x = {"input_ids":
    [B, L] int32, "segment_ids": [B, L] int32 (0 A, 1 B, 2 CLS, 4 pad), "attention_mask": [B, L] float32
    (1 = real token, 0 = padding)}` (`[L]` each for a scalar string; `[B, S, L]` / `[S, L]` with
    `max_segments` S > 1).
    """

    def __init__(self, spiece_model=None, sequence_length: int = 128, uncased: bool = False,
                 keep_accents: bool = False, max_segments: int = 1, **kwargs):
        kwargs.setdefault("trainable", False)
        super().__init__(**kwargs)
        if sequence_length < 3:
            raise ValueError(f"XLNetPreprocessor: sequence_length must be >= 3 (room for <sep> <sep> <cls>), "
                             f"got {sequence_length}")
        if isinstance(max_segments, bool) or not isinstance(max_segments, numbers.Integral) or max_segments < 1:
            raise ValueError(f"XLNetPreprocessor: max_segments must be an integer >= 1 (segments of "
                             f"sequence_length per document), got {max_segments!r}")
        self.sequence_length = int(sequence_length)
        self.max_segments = int(max_segments)
        self.uncased = uncased
        self.keep_accents = keep_accents
        self.encoder = None
        self._proto = None
        if spiece_model is not None:
            self.set_spiece_model(spiece_model)
        # Strings in, int/float features out: no input conversion or autocasting (as KerasHub's
        # preprocessing layers).
        self._convert_input_args = False
        self._allow_non_tensor_positional_args = True
        self.built = True

    def set_spiece_model(self, spiece_model) -> None:
        """Loads the SentencePiece model (path or bytes)."""
        self._proto = _read_proto(spiece_model)
        self.encoder = XLNetTextEncoder(self._proto, uncased=self.uncased, keep_accents=self.keep_accents)
        self._packers = _Packers(self.encoder, self.sequence_length, self.max_segments)

    @property
    def spiece_proto(self) -> bytes:
        """The serialized SentencePiece model."""
        self._check_ready()
        return self._proto

    def _check_ready(self):
        if self.encoder is None:
            raise ValueError(f"{self.name}: no SentencePiece model; pass spiece_model= (or load the layer "
                             f"with keras.models.load_model, which restores it)")

    def call(self, x, y=None, sample_weight=None):
        self._check_ready()
        if isinstance(x, dict):
            if "input_ids" not in x:
                raise ValueError(f"{self.name}: got a dict without 'input_ids' ({sorted(x)}); pass raw strings, "
                                 f"a (text_a, text_b) pair, or packed features")
            return keras.utils.pack_x_y_sample_weight(x, y, sample_weight)
        if isinstance(x, (tuple, list)):
            if len(x) not in (1, 2):
                raise ValueError(f"{self.name}: x must be texts or a (text_a, text_b) pair, got {len(x)} "
                                 f"segments")
            text, text_b = x[0], (x[1] if len(x) == 2 else None)
        else:
            text, text_b = x, None
        text = tf.convert_to_tensor(text)
        text_b = None if text_b is None else tf.convert_to_tensor(text_b)
        if text.dtype != tf.string or (text_b is not None and text_b.dtype != tf.string):
            raise ValueError(f"{self.name}: expects string tensors, got {text.dtype}"
                             f"{'' if text_b is None else ' and ' + str(text_b.dtype)}")
        for name, t in (("text", text), ("text_b", text_b)):
            if t is not None and (t.shape.rank or 0) > 1:
                raise ValueError(f"{self.name}: {name} must be a batch of strings [B] (or one string), got "
                                 f"shape {t.shape}; a text pair is a tuple (texts_a, texts_b), not a 2-D array")
        scalar = text.shape.rank == 0
        if scalar:
            text = text[None]
            text_b = None if text_b is None else text_b[None]
        packers = self._live_packers()
        features = packers.one(text) if text_b is None else packers.two(text, text_b)
        if scalar:
            features = {k: v[0] for k, v in features.items()}
        return keras.utils.pack_x_y_sample_weight(features, y, sample_weight)

    def _live_packers(self) -> _Packers:
        """The packers, built again when the SentencePiece model they read is gone. TF Text keeps the model in a
        resource owned by the kernel that created it, and `tf.random.set_seed` (so `keras.utils.set_random_seed`)
        clears TensorFlow's kernel cache: a preprocessor built before a seed was set then failed every call with
        "Resource ... SentencepieceResource does not exist". A one-string eager probe (outside any graph being
        traced, so a `tf.data` map checks when it is built) finds that and loads the model again."""
        with tf.init_scope():
            try:
                self.encoder.tokenizer.tokenize(tf.constant([""]))
            except tf.errors.NotFoundError:
                self.set_spiece_model(self._proto)
        return self._packers

    def compute_output_spec(self, x, y=None, sample_weight=None):  # noqa: D102 (symbolic shapes)
        lead = tuple(x.shape[:1]) if not isinstance(x, (tuple, list, dict)) else (None,)
        segments = (self.max_segments,) if self.max_segments > 1 else ()
        spec = lambda dtype: keras.KerasTensor(lead + segments + (self.sequence_length,), dtype)  # noqa: E731
        features = {"input_ids": spec("int32"), "segment_ids": spec("int32"), "attention_mask": spec("float32")}
        return keras.utils.pack_x_y_sample_weight(features, y, sample_weight)

    # The SentencePiece model is a file in the `.keras` archive, not a config value.
    def save_assets(self, dir_path):
        with tf.io.gfile.GFile(f"{dir_path}/spiece.model", "wb") as f:
            f.write(self.spiece_proto)

    def load_assets(self, dir_path):
        self.set_spiece_model(f"{dir_path}/spiece.model")

    def get_config(self):
        config = super().get_config()
        config.update(sequence_length=self.sequence_length, uncased=self.uncased, keep_accents=self.keep_accents,
                      max_segments=self.max_segments)
        return config
