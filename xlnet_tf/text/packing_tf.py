"""The in-graph twins of xlnet_tf/text/packing.py (and of `tokenization.preprocess_text` and
`layout.choice_text`): what `XLNetPreprocessor` and the SavedModel signatures pack, tested equal to their numpy
forms, on random ids and on the shipped data of every task (tests/text/test_text_twins.py).

Each packer takes ragged token ids `[N, (n)]` (no special tokens, any integer dtype) and returns, batch first and
with a static last dimension L, the features the record readers give for the numpy packer's records: `input_ids`
int32, `segment_ids` int32 (0 A, 1 B, 2 CLS, 4 padding), `attention_mask` float32 (1 = real token, 0 = padding;
the readers cast the records' int64 to float32, SQuAD's `p_mask` too), and, as the numpy packers, whether
anything was cut (bool). The layouts and the truncation rule are `layout`'s.
"""

from __future__ import annotations

import functools
import sys
import unicodedata
from typing import Dict, Optional, Tuple

import tensorflow as tf

from xlnet_tf.text.layout import (CLS_ID, LEFT, PADDING_ID, RIGHT, SEG_ID_A, SEG_ID_B, SEG_ID_CLS, SEG_ID_PAD, SEP_ID)
from xlnet_tf.text.packing import QA_TRUNCATIONS

Features = Dict[str, tf.Tensor]

# ---- normalization: the twin of tokenization.preprocess_text ---------------------------------------------------

# An RE2 class of Python's `str.split()` separators (what the original's whitespace collapsing splits on).
PYTHON_SPACE = "[\\t\\n\\x0b\\x0c\\r\\x1c-\\x1f \\x{85}\\p{Z}]"


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


def _lower(text):
    """`str.lower` of UTF-8 strings of any shape. `tf.strings.lower` stops at the first NUL, so the pieces between
    NULs are lowered one by one."""
    pieces = tf.strings.split(tf.reshape(text, [-1]), "\x00")  # [T, (k >= 1)]
    last = tf.equal(tf.ragged.range(pieces.row_lengths()), pieces.row_lengths()[:, None] - 1)
    nul = tf.where(last.flat_values, "", tf.constant(b"\x00"))  # the NUL after every piece but the last
    lowered = tf.strings.join([tf.strings.lower(pieces.flat_values, encoding="utf-8"), nul])
    return tf.reshape(tf.strings.reduce_join(pieces.with_flat_values(lowered), axis=1), tf.shape(text))


def normalize(text, lower: bool = False, keep_accents: bool = False):
    """`tokenization.preprocess_text` on a string tensor (any shape): whitespace collapsed and stripped, ``` `` ```
    and `''` -> `"`, accents stripped (NFKD, combining marks dropped) unless `keep_accents`, lowercased when
    `lower`. Equal to the Python form on the shipped texts; code points newer than this Python's Unicode data can
    differ (ICU's tables are used for NFKD and lowercasing)."""
    import tensorflow_text as tf_text

    text = tf.strings.regex_replace(text, f"{PYTHON_SPACE}+", " ")
    text = tf.strings.regex_replace(text, "^ | $", "")
    text = tf.strings.regex_replace(text, "``", '"')
    text = tf.strings.regex_replace(text, "''", '"')
    if not keep_accents:
        text = tf_text.normalize_utf8(text, "NFKD")
        text = tf.strings.regex_replace(text, combining_class_regex(), "")
    if lower:
        text = _lower(text)
    return text


# ---- the multiple-choice text: the twin of layout.choice_text -----------------------------------------------------

def choice_text(question, options):
    """`layout.choice_text` for every option: `question` `[N]` strings, `options` `[N, C]` -> `[N, C]` strings (a
    cloze question's every `_` filled by the option, else `question + " " + option`)."""
    shape = tf.shape(options)
    q = tf.repeat(question, shape[1])
    o = tf.reshape(options, [-1])
    parts = tf.strings.split(q, "_")  # >= 1 part; one when `"_" in question` is False
    after = parts[:, 1:]
    filled = tf.strings.join([after.with_flat_values(tf.repeat(o, after.row_lengths())), after])
    cloze = tf.strings.join([parts[:, :1].flat_values, tf.strings.reduce_join(filled, axis=1)])
    plain = tf.strings.join([q, o], separator=" ")
    return tf.reshape(tf.where(parts.row_lengths() > 1, cloze, plain), shape)


# ---- helpers -----------------------------------------------------------------------------------------------------

def _ids(ids) -> tf.RaggedTensor:
    """Ragged ids as int32 values with int64 row splits."""
    if not isinstance(ids, tf.RaggedTensor):
        raise TypeError(f"expected ragged token ids [N, (n)], got {type(ids).__name__}")
    return tf.cast(ids.with_row_splits_dtype(tf.int64), tf.int32)


def head(ids: tf.RaggedTensor, keep) -> tf.RaggedTensor:
    """Each row's first `keep[i]` ids (`keep` [N]; at most the row, none below 0; int64 row splits), by one gather
    (`tf.ragged.boolean_mask` built ~500 graph ops, a fifth of a packer's whole graph)."""
    return _keep_run(ids, keep, "head", from_end=False)


def tail(ids: tf.RaggedTensor, keep) -> tf.RaggedTensor:
    """Each row's last `keep[i]` ids (as `head`, from the other end)."""
    return _keep_run(ids, keep, "tail", from_end=True)


def _keep_run(ids: tf.RaggedTensor, keep, name: str, from_end: bool) -> tf.RaggedTensor:
    """`head` / `tail`: one run of `keep[i]` (clipped to [0, row]) consecutive values per row, gathered."""
    _one_ragged_dimension(ids, name)
    starts, lengths = tf.cast(ids.row_starts(), tf.int64), tf.cast(ids.row_lengths(), tf.int64)
    keep = tf.clip_by_value(tf.cast(keep, tf.int64), 0, lengths)
    first = starts + lengths - keep if from_end else starts
    index = tf.ragged.range(first, first + keep)
    return index.with_flat_values(tf.gather(ids.flat_values, index.flat_values))


def _one_ragged_dimension(rows: tf.RaggedTensor, name: str) -> None:
    """The gathers below index `flat_values` by row starts: right only for `[N, (n), ...]` (ragged rank 1)."""
    if not isinstance(rows, tf.RaggedTensor) or rows.ragged_rank != 1:
        raise ValueError(f"{name}: expected a RaggedTensor [N, (n), ...] of ragged rank 1, got {rows!r}")


def row_ids(row_splits) -> tf.Tensor:
    """The row of every value of rows with these int64 `row_splits` [N + 1] -> int64 [row_splits[-1]]: what
    `RaggedTensor.value_rowids()` gives, by one sorted search (that builds ~70 graph ops, `tf.repeat` ~50)."""
    return tf.searchsorted(row_splits[1:], tf.range(row_splits[-1]), side="right", out_type=tf.int64)


def repeat_index(counts) -> tf.Tensor:
    """`tf.repeat(tf.range(N), counts)` for int64 `counts` [N] (each index `counts[i]` times), by `row_ids`."""
    return row_ids(tf.concat([tf.zeros([1], tf.int64), tf.math.cumsum(tf.cast(counts, tf.int64))], 0))


def keep_where(rows: tf.RaggedTensor, mask: tf.RaggedTensor) -> tf.RaggedTensor:
    """`tf.ragged.boolean_mask(rows, mask)` for `[N, (n)]` rows and a bool mask of the same row lengths, in a
    few graph ops instead of hundreds."""
    _one_ragged_dimension(rows, "keep_where")
    _one_ragged_dimension(mask, "keep_where")
    lengths = tf.math.unsorted_segment_sum(tf.cast(mask.flat_values, tf.int64), row_ids(mask.row_splits),
                                           mask.nrows())
    return tf.RaggedTensor.from_row_lengths(tf.boolean_mask(rows.flat_values, mask.flat_values), lengths,
                                            validate=False)


def _filled(value: int, counts) -> tf.RaggedTensor:
    """Rows of `counts[i]` (int64 [N]) copies of `value`, int32."""
    return tf.RaggedTensor.from_row_lengths(tf.fill([tf.reduce_sum(counts)], tf.constant(value, tf.int32)), counts,
                                            validate=False)


def shrink_pair(len_a, len_b, budget):
    """`layout.shrink_pair` on int64 tensors of lengths (any shape): the lengths A and B keep to fit `budget`
    tokens (the original's `_truncate_seq_pair`: the last token of the longer goes first, of B on ties)."""
    excess = tf.maximum(len_a + len_b - budget, 0)
    d = tf.minimum(excess, tf.maximum(len_a - len_b, 0))
    len_a, excess = len_a - d, excess - d
    d = tf.minimum(excess, tf.maximum(len_b - len_a, 0))
    len_b, excess = len_b - d, excess - d
    return len_a - excess // 2, len_b - (excess + 1) // 2


def pad(tokens, segments, length: int, side: str = LEFT) -> Features:
    """`packing.pad` for ragged rows: `tokens` and their `segments` `[N, (n <= length)]` padded to `[N, length]` on
    `side` ("left" | "right"): ids `PADDING_ID`, segment `SEG_ID_PAD`, `attention_mask` float32 0 (1 on the real
    tokens). A row longer than `length` fails an assertion (numpy: ValueError)."""
    if side not in (LEFT, RIGHT):
        raise ValueError(f"side must be {LEFT!r} or {RIGHT!r}, got {side!r}")
    tokens, segments = _ids(tokens), _ids(segments)
    check = tf.debugging.assert_less_equal(tokens.row_lengths(), tf.constant(length, tf.int64),
                                           message=f"packed sequence exceeds max_seq_length {length}")
    with tf.control_dependencies([check] if check is not None else []):
        mask = tf.ones_like(tokens, tf.float32)
    values = ((tokens, PADDING_ID), (segments, SEG_ID_PAD), (mask, 0))
    if side == RIGHT:
        dense = [t.to_tensor(tf.cast(v, t.dtype), shape=[None, length]) for t, v in values]
    else:
        dense = [tf.reverse(tf.reverse(t, [1]).to_tensor(tf.cast(v, t.dtype), shape=[None, length]), [1])
                 for t, v in values]
    return dict(zip(("input_ids", "segment_ids", "attention_mask"), dense))


# ---- the packers ---------------------------------------------------------------------------------------------------

def pack_pair(ids_a, ids_b: Optional[tf.RaggedTensor], length: int) -> Tuple[Features, tf.Tensor]:
    """`packing.pack_pair` for N rows (classification / regression): `A <sep> [B <sep>] <cls>`, left-padded to
    `[N, length]`. With B (a non-empty row): `shrink_pair(len A, len B, length - 3)`, and a B cut to nothing takes
    no `<sep>`; without (`ids_b` None or an empty row): `A[:length - 2]`. Returns the features and `truncated`
    bool [N]."""
    ids_a = _ids(ids_a)
    n = ids_a.nrows()
    ids_b = _filled(0, tf.zeros([n], tf.int64)) if ids_b is None else _ids(ids_b)
    len_a, len_b = ids_a.row_lengths(), ids_b.row_lengths()
    has_b = len_b > 0
    pair_a, pair_b = shrink_pair(len_a, len_b, length - 3)
    new_a = tf.where(has_b, pair_a, tf.minimum(len_a, length - 2))
    new_b = tf.where(has_b, pair_b, 0)
    a, b = head(ids_a, new_a), head(ids_b, new_b)
    one, sep_b = tf.ones([n], tf.int64), tf.cast(new_b > 0, tf.int64)  # a B cut to nothing: no <sep>
    tokens = tf.concat([a, _filled(SEP_ID, one), b, _filled(SEP_ID, sep_b), _filled(CLS_ID, one)], axis=1)
    segments = tf.concat([_filled(SEG_ID_A, new_a + 1), _filled(SEG_ID_B, new_b + sep_b),
                          _filled(SEG_ID_CLS, one)], axis=1)
    return pad(tokens, segments, length, LEFT), (new_a < len_a) | (new_b < len_b)


def pack_document(ids_a, ids_b: Optional[tf.RaggedTensor], length: int, max_segments: int
                  ) -> Tuple[Features, tf.Tensor]:
    """A long document of S = `max_segments` segments: `packing.pack_pair` at `S * length` (as the classifier
    builder packs, left-padded as a whole), read as `[N, S, length]` (as its reader reshapes the records).
    Returns the features and `truncated` bool [N]; S = 1 gives `pack_pair`'s `[N, length]`."""
    features, truncated = pack_pair(ids_a, ids_b, length * max_segments)
    if max_segments == 1:
        return features, truncated
    return {k: tf.reshape(v, [-1, max_segments, length]) for k, v in features.items()}, truncated


def pack_choice(context_ids, qa_ids: tf.RaggedTensor, length: int, max_qa_length: int, qa_truncation: str = "tail"
                ) -> Tuple[Features, tf.Tensor]:
    """`packing.pack_choice` for every choice of N questions: `context_ids` `[N, (c)]` and the question+option ids
    `qa_ids` `[N, C, (q)]` (ragged, C the same for every question: `RaggedTensor.from_uniform_row_length`) ->
    `context <sep> qa <sep> <cls>` left-padded to `[N, C, length]`. The qa keeps its last (`"tail"`, the
    original's) or first `max_qa_length` ids, the context its first `length - 3 - len(qa)`. Returns the features
    and `truncated` bool [N, C]."""
    if qa_truncation not in QA_TRUNCATIONS:
        raise ValueError(f"qa_truncation must be one of {QA_TRUNCATIONS}, got {qa_truncation!r}")
    if not isinstance(qa_ids, tf.RaggedTensor) or qa_ids.ragged_rank != 2 or qa_ids.uniform_row_length is None:
        raise ValueError("qa_ids must be [N, C, (q)]: a RaggedTensor with a uniform number of choices C")
    choices = tf.cast(qa_ids.uniform_row_length, tf.int64)
    context = _ids(context_ids)
    n = context.nrows()
    qa = _ids(qa_ids.values)  # [N * C, (q)], question-major
    context = tf.gather(context, tf.repeat(tf.range(n), choices))
    len_c, len_q = context.row_lengths(), qa.row_lengths()
    qa = qa[:, -max_qa_length:] if qa_truncation == "tail" else qa[:, :max_qa_length]
    new_q = qa.row_lengths()
    new_c = tf.minimum(len_c, tf.maximum(length - 3 - new_q, 0))
    context = head(context, new_c)
    one = tf.ones_like(new_q)
    tokens = tf.concat([context, _filled(SEP_ID, one), qa, _filled(SEP_ID, one), _filled(CLS_ID, one)], axis=1)
    segments = tf.concat([_filled(SEG_ID_A, new_c + 1), _filled(SEG_ID_B, new_q + 1), _filled(SEG_ID_CLS, one)],
                         axis=1)
    flat = pad(tokens, segments, length, LEFT)
    shape = tf.stack([n, choices, length])
    features = {k: tf.ensure_shape(tf.reshape(v, shape), [None, None, length]) for k, v in flat.items()}
    return features, tf.reshape((new_q < len_q) | (new_c < len_c), shape[:2])


def pack_squad_window(doc_ids, query_ids, length: int) -> Features:
    """`packing.pack_squad_window` for the first window of N questions: `P <sep> Q <sep> <cls>` right-padded to
    `[N, length]`; the caller cuts the question (`query_ids`), and a paragraph longer than the window keeps its
    first `length - 3 - len(Q)` ids (the builder's first window, `squad_data.doc_spans(...)[0]`). Returns the
    features with `p_mask` float32 [N, length] (1 = cannot be in the answer: `<sep>`s, the question, padding),
    `cls_index` int32 [N] and `paragraph_len` int32 [N] (the paragraph ids kept)."""
    doc, query = _ids(doc_ids), _ids(query_ids)
    q_len = query.row_lengths()
    p_len = tf.minimum(doc.row_lengths(), length - 3 - q_len)
    doc = head(doc, p_len)
    one = tf.ones_like(q_len)
    tokens = tf.concat([doc, _filled(SEP_ID, one), query, _filled(SEP_ID, one), _filled(CLS_ID, one)], axis=1)
    segments = tf.concat([_filled(SEG_ID_A, doc.row_lengths() + 1), _filled(SEG_ID_B, q_len + 1),
                          _filled(SEG_ID_CLS, one)], axis=1)
    features = pad(tokens, segments, length, RIGHT)
    cls_index = p_len + q_len + 2
    position = tf.range(length, dtype=tf.int64)[None, :]
    answerable = (position < p_len[:, None]) | tf.equal(position, cls_index[:, None])
    return {**features, "p_mask": 1.0 - tf.cast(answerable, tf.float32),
            "cls_index": tf.cast(cls_index, tf.int32), "paragraph_len": tf.cast(p_len, tf.int32)}
