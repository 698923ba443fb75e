"""In-graph (TensorFlow + tensorflow-text) XLNet preprocessing for serving and Keras training: the same
normalization, SentencePiece pieces (digit-comma re-split included) and packing as `xlnet_tf.tokenization`
and the record builders, so a SavedModel (and `XLNetPreprocessor` in a `tf.data` pipeline) takes raw UTF-8
strings and produces exactly the training-time ids.

Packing follows the fine-tuning records: `A <sep> B <sep> <cls>`, left-padded with id 0, segment ids
A=0, B=1, CLS=2, pad=4, `attention_mask` 1 = real token; the longer segment is truncated first.
"""

from __future__ import annotations

import functools
import numbers
import sys
import unicodedata
from typing import Optional, Tuple

import keras
import tensorflow as tf

from xlnet_tf import tokenization

# Python's `str.split()` separators (what the original's whitespace collapsing splits on).
_PY_SPACE = "[\\t\\n\\x0b\\x0c\\r\\x1c-\\x1f \\x{85}\\p{Z}]"


@functools.lru_cache(maxsize=None)
def combining_class_regex() -> str:
    """An RE2 class of every code point with a non-zero canonical combining class, i.e. exactly what
    `unicodedata.combining(c)` drops in the original's accent stripping (this Python's Unicode data)."""
    ranges, start, prev = [], None, None
    for cp in range(sys.maxunicode + 1):
        if unicodedata.combining(chr(cp)):
            if start is None:
                start = cp
            elif cp != prev + 1:
                ranges.append((start, prev))
                start = cp
            prev = cp
    if start is not None:
        ranges.append((start, prev))
    parts = [f"\\x{{{a:X}}}" if a == b else f"\\x{{{a:X}}}-\\x{{{b:X}}}" for a, b in ranges]
    return "[" + "".join(parts) + "]"


def normalize(text, lower: bool = False, keep_accents: bool = False):
    """`tokenization.preprocess_text` on a string tensor (any shape)."""
    import tensorflow_text as tf_text

    text = tf.strings.regex_replace(text, f"{_PY_SPACE}+", " ")
    text = tf.strings.regex_replace(text, "^ | $", "")
    text = tf.strings.regex_replace(text, "``", '"')
    text = tf.strings.regex_replace(text, "''", '"')
    if not keep_accents:
        text = tf_text.normalize_utf8(text, "NFKD")
        text = tf.strings.regex_replace(text, combining_class_regex(), "")
    if lower:
        text = tf.strings.lower(text, encoding="utf-8")
    return text


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
        n = tf.shape(dc_pos, out_type=tf.int64)[0]
        pieces = self.tokenizer.id_to_string(tf.gather(flat, dc_pos))
        core = tf.strings.regex_replace(tf.strings.regex_replace(pieces, ",$", ""), "\u2581", "")
        sub_ids = self.tokenizer.tokenize(core)
        sub = sub_ids.with_flat_values(self.tokenizer.id_to_string(sub_ids.flat_values))  # [n, (m)]
        # A piece that did not start a word loses the "▁" its re-split starts with (or that piece).
        first = sub[:, :1]
        strip = tf.gather(tf.logical_not(tf.strings.regex_full_match(pieces, "\u2581.*")),
                          first.value_rowids())
        values = tf.where(strip, tf.strings.regex_replace(first.flat_values, "^\u2581", ""),
                          first.flat_values)
        first = tf.RaggedTensor.from_value_rowids(values, first.value_rowids(), nrows=n)
        first = tf.ragged.boolean_mask(first, tf.strings.length(first) > 0)
        replaced = tf.concat([first, sub[:, 1:]], axis=1)
        replaced = replaced.with_flat_values(
            tf.cast(self.tokenizer.string_to_id(replaced.flat_values), flat.dtype))
        replaced = tf.concat([replaced, tf.fill([n, 1], tf.cast(self._comma_id, flat.dtype))], axis=1)
        # Every token becomes a list (itself, or its re-split), back in token order, then per text.
        keep_pos = tf.where(tf.logical_not(is_dc))[:, 0]
        singles = tf.RaggedTensor.from_tensor(tf.gather(flat, keep_pos)[:, None])
        order = tf.math.invert_permutation(tf.concat([keep_pos, dc_pos], axis=0))
        lists = tf.gather(tf.concat([singles, replaced], axis=0), order)
        sources = tf.concat([keep_pos, tf.repeat(dc_pos, replaced.row_lengths())], axis=0)
        source_lists = tf.gather(
            tf.RaggedTensor.from_row_lengths(sources, tf.concat([singles.row_lengths(), replaced.row_lengths()], 0)),
            order)
        per_text = tf.reduce_sum(tf.RaggedTensor.from_row_lengths(lists.row_lengths(), ids.row_lengths()),
                                 axis=1)
        return (tf.RaggedTensor.from_row_lengths(lists.flat_values, per_text),
                source_lists.flat_values)


def pair_lengths(len_a, len_b, budget):
    """Lengths after the original `_truncate_seq_pair` (pop the longer, ties pop B) to `budget` tokens."""
    over = len_a + len_b > budget
    half = (budget + 1) // 2
    new_a = tf.minimum(len_a, tf.maximum(half, budget - len_b))
    new_a = tf.where(over, new_a, len_a)
    new_b = tf.where(over, budget - new_a, len_b)
    return new_a, new_b


def pack_pair(ids_a, ids_b, max_seq_length: int) -> Tuple[tf.Tensor, tf.Tensor, tf.Tensor]:
    """Ragged ids A (and B, or None) -> `input_ids`, `segment_ids` int32 and `attention_mask` float32
    `[N, max_seq_length]`: `A <sep> (B <sep>) <cls>`, left-padded (id 0, segment 4). A row whose B is
    empty is packed as a single segment, as the record builder does."""
    sep, cls = tokenization.SEP_ID, tokenization.CLS_ID
    n = ids_a.nrows()
    if ids_b is None:
        ids_b = tf.RaggedTensor.from_row_lengths(tf.zeros([0], ids_a.dtype), tf.zeros([n], tf.int64))
    len_a, len_b = ids_a.row_lengths(), ids_b.row_lengths()
    has_b = len_b > 0
    pair_a, pair_b = pair_lengths(len_a, len_b, tf.constant(max_seq_length - 3, tf.int64))
    new_a = tf.where(has_b, pair_a, tf.minimum(len_a, max_seq_length - 2))
    new_b = tf.where(has_b, pair_b, 0)
    ids_a = tf.ragged.boolean_mask(ids_a, tf.ragged.range(len_a) < new_a[:, None])
    ids_b = tf.ragged.boolean_mask(ids_b, tf.ragged.range(len_b) < new_b[:, None])
    one = tf.ones([n], tf.int64)
    sep_a = tf.RaggedTensor.from_row_lengths(tf.fill([n], sep), one)
    sep_b = tf.RaggedTensor.from_row_lengths(tf.fill([tf.reduce_sum(tf.cast(has_b, tf.int32))], sep),
                                             tf.cast(has_b, tf.int64))
    cls_t = tf.RaggedTensor.from_row_lengths(tf.fill([n], cls), one)
    tokens = tf.concat([ids_a, tf.cast(sep_a, ids_a.dtype), ids_b, tf.cast(sep_b, ids_a.dtype),
                        tf.cast(cls_t, ids_a.dtype)], axis=1)
    segs = tf.concat([tf.zeros_like(ids_a) + tokenization.SEG_ID_A, tf.zeros_like(sep_a) + tokenization.SEG_ID_A,
                      tf.zeros_like(ids_b) + tokenization.SEG_ID_B, tf.zeros_like(sep_b) + tokenization.SEG_ID_B,
                      tf.zeros_like(cls_t) + tokenization.SEG_ID_CLS], axis=1)
    return left_pad(tokens, tf.cast(segs, tokens.dtype), max_seq_length)


def left_pad(tokens, segs, max_seq_length: int):
    """Ragged `[N, (<= L)]` tokens/segments -> dense left-padded `[N, L]` plus the attention mask."""
    lengths = tokens.row_lengths()
    pad = max_seq_length - lengths
    pad_rows = tf.RaggedTensor.from_row_lengths(tf.zeros([tf.reduce_sum(pad)], tokens.dtype), pad)
    seg_pad = tf.RaggedTensor.from_row_lengths(
        tf.fill([tf.reduce_sum(pad)], tf.cast(tokenization.SEG_ID_PAD, segs.dtype)), pad)
    mask = tf.concat([tf.RaggedTensor.from_row_lengths(tf.zeros([tf.reduce_sum(pad)]), pad),
                      tf.ones_like(tokens, tf.float32)], axis=1)
    input_ids = tf.concat([pad_rows, tokens], axis=1).to_tensor(shape=[None, max_seq_length])
    segment_ids = tf.concat([seg_pad, segs], axis=1).to_tensor(shape=[None, max_seq_length])
    return (tf.cast(input_ids, tf.int32), tf.cast(segment_ids, tf.int32),
            mask.to_tensor(shape=[None, max_seq_length]))


def encode_and_pack(encoder: XLNetTextEncoder, text, text_b, max_seq_length: int):
    """Raw strings `[N]` (and `text_b [N]`, or None) -> `input_ids`, `segment_ids` int32 and
    `attention_mask` float32 `[N, max_seq_length]` (1 = real token), left-padded: the one text-to-features
    path of serving (`serving.ServingModule`) and Keras training (`XLNetPreprocessor`)."""
    ids_b = None if text_b is None else encoder.encode(text_b)
    return pack_pair(encoder.encode(text), ids_b, max_seq_length)


def encode_and_pack_document(encoder: XLNetTextEncoder, text, text_b, max_seq_length: int,
                             max_segments: int = 1):
    """`encode_and_pack` for documents of `max_segments` S segments: the text packed with S *
    `max_seq_length` positions (the record builder's packing: a longer text keeps its first tokens and its
    `<sep> (B <sep>) <cls>` end, the whole left-padded), cut into S segments. Returns `input_ids`,
    `segment_ids` int32 and `attention_mask` float32 (1 = real token) `[N, S, max_seq_length]`, or
    `[N, max_seq_length]` when S = 1 (`encode_and_pack`'s)."""
    packed = encode_and_pack(encoder, text, text_b, max_seq_length * max_segments)
    if max_segments == 1:
        return packed
    return tuple(tf.reshape(t, [-1, max_segments, max_seq_length]) for t in packed)


def _read_proto(spiece_model) -> bytes:
    """A SentencePiece model as bytes: `spiece_model` is the serialized model or a path to it."""
    if isinstance(spiece_model, bytes):
        return spiece_model
    if not tf.io.gfile.exists(spiece_model):
        raise ValueError(f"spiece_model: no SentencePiece model at {spiece_model!r} (pass the path of "
                         f"spiece.model or its bytes)")
    with tf.io.gfile.GFile(spiece_model, "rb") as f:
        return f.read()


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
        ids, segs, mask = encode_and_pack_document(self.encoder, text, text_b, self.sequence_length,
                                                   self.max_segments)
        features = {"input_ids": ids, "segment_ids": segs, "attention_mask": mask}
        if scalar:
            features = {k: v[0] for k, v in features.items()}
        return keras.utils.pack_x_y_sample_weight(features, y, sample_weight)

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
