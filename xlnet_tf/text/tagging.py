"""Token classification (tagging): words -> SentencePiece pieces -> windows, in numpy (for the record builder,
tfrecords/tagging_data.py) and in the graph (`*_tf`, for serving), side by side and tested equal on real text;
and the stitching of per-window predictions back to one prediction per word.

Alignment. Each word is tokenized on its own with XLNet's normalization (`XLNetTokenizer.encode_batch` /
`XLNetTextEncoder.encode`: whitespace collapsed, accents stripped unless `keep_accents`, lowercased when uncased,
the digit-comma re-split), so its pieces start with "▁" as in running text; a word that normalizes to nothing
(e.g. a lone combining accent) becomes one `<unk>` piece, so that every word has a first piece. The word's label
goes on its FIRST piece; its other pieces carry `IGNORE_LABEL` (-100), which losses and metrics skip, unless
`label_all_pieces` (every piece carries its word's label).

Layout of one window (the classifier's, `layout.PADDING_SIDE["tagging"]` = left), for L = `max_seq_length`:

    position        0 .. p-1 | pieces of the window    <sep>  <cls>
    input_ids       0 .. 0   | piece ids               4      3
    segment_ids     4 .. 4   | 0 ...                   0      2
    attention_mask  0 .. 0   | 1 ...                          1     (1 = real token, 0 = padding)
    label_ids       -100     | label on scored pieces, -100 on the others, -100 at <sep> <cls>
    word_ids        -1       | index of the piece's word in its sentence     -1     -1
    is_max_context  0        | 1 on the first piece of each word whose prediction this window gives, else 0

Windows. A sentence is never cut: its P pieces go in windows of at most M = L - 2 pieces starting at 0, `step`,
2 `step`, ... (`step = min(M, doc_stride)`; SQuAD's doc-stride windows), the last one ending at P; a sentence of
P <= M pieces is one window, an empty one a window of no pieces. A piece's context in a window is
`min(pieces left of it, pieces right of it) + 0.01 * window length` (SQuAD's max-context score, computed in
integers as 100 * min + length); each word is predicted in the window where its first piece scores highest (the
first such window on ties): `is_max_context` marks that position, exactly one per word over the sentence's
windows, and `stitch` reads the predictions back at those positions. Training reads every window's labels
(`label_ids`), a word may thus be trained on in two overlapping windows.

Arrays come without a batch axis from the numpy packer (`pack_sentence`: a list, one dict per window) and with a
leading window axis from the in-graph one (`pack_sentences_tf`); dtypes: int32, `attention_mask` float32 (what the
record reader gives).
"""

from __future__ import annotations

from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np

from xlnet_tf import errors
from xlnet_tf.text import packing
from xlnet_tf.text.layout import CLS_ID, LEFT, PADDING_SIDE, SEG_ID_A, SEG_ID_CLS, SEP_ID, UNK_ID

IGNORE_LABEL = -100  # label_ids at pieces no loss or metric reads (Keras/PyTorch's ignore index)
NO_WORD = -1  # word_ids at <sep>, <cls> and padding
SPECIALS = 2  # <sep> <cls> at the end of every window
FEATURE_NAMES = ("input_ids", "segment_ids", "attention_mask", "label_ids", "word_ids", "is_max_context")

Features = Dict[str, np.ndarray]
assert PADDING_SIDE["tagging"] == LEFT

_WNUT16_TYPES = ("company", "facility", "geo-loc", "movie", "musicartist", "other", "person", "product",
                 "sportsteam", "tvshow")
# Tag sets whose labels are known, by the name a build records (`--tagset`): a build naming one must hold only
# its labels, so a flag file reused for other data is refused rather than stamping a wrong name on the records.
# universal: the 12 tags of Petrov, Das and McDonald (2012); wnut16: the BIO tags of WNUT 2016's 10 entity
# types (tfrecords/sets/wnut16.py). Other names are free (recorded and compared, not checked).
KNOWN_TAGSETS: Dict[str, Tuple[str, ...]] = {
    "universal": ("NOUN", "VERB", "ADJ", "ADV", "PRON", "DET", "ADP", "NUM", "CONJ", "PRT", ".", "X"),
    "wnut16": ("O",) + tuple(f"{p}-{t}" for t in _WNUT16_TYPES for p in ("B", "I")),
}


def check_tagset(tagset: Optional[str], labels: Sequence[str], where: str = "the labels") -> None:
    """ValueError naming the labels that are not tags of `tagset` when it is one of KNOWN_TAGSETS (None and
    other names pass)."""
    known = KNOWN_TAGSETS.get(tagset)
    if known is None:
        return
    bad = [label for label in labels if label not in known]
    if bad:
        raise ValueError(f"{where}: {errors.some(bad)} {'is not a' if len(bad) == 1 else 'are not'} {tagset} "
                         f"tag{'' if len(bad) == 1 else 's'}; drop "
                         f"--tagset={tagset} or name these labels' own tag set")


def check_window(max_seq_length: int, doc_stride: int) -> None:
    """ValueError naming the argument unless `max_seq_length` >= 3 (a piece, `<sep>`, `<cls>`) and
    `doc_stride` >= 1."""
    if isinstance(max_seq_length, bool) or not isinstance(max_seq_length, (int, np.integer)) or max_seq_length < 3:
        raise ValueError(f"max_seq_length must be an integer >= 3 (a piece, <sep> and <cls>), got {max_seq_length!r}")
    if isinstance(doc_stride, bool) or not isinstance(doc_stride, (int, np.integer)) or doc_stride < 1:
        raise ValueError(f"doc_stride must be an integer >= 1, got {doc_stride!r}")


# ---- numpy ---------------------------------------------------------------------------------------------------

def word_piece_ids(tokenizer, words: Sequence[str]) -> List[List[int]]:
    """The pieces of each word (`tokenizer`: an `XLNetTokenizer`), each word on its own, `[UNK_ID]` for a word
    that normalizes to nothing."""
    return [ids if ids else [UNK_ID] for ids in tokenizer.encode_batch(list(words))]


def window_spans(num_pieces: int, max_pieces: int, doc_stride: int) -> List[Tuple[int, int]]:
    """`(start, length)` of the windows over `num_pieces` pieces (module docstring); `[(0, 0)]` for none."""
    if num_pieces == 0:
        return [(0, 0)]
    step = min(max_pieces, doc_stride)
    spans, start = [], 0
    while True:
        length = min(num_pieces - start, max_pieces)
        spans.append((start, length))
        if start + length >= num_pieces:
            return spans
        start += step


def num_windows(num_pieces: int, max_pieces: int, doc_stride: int) -> int:
    """`len(window_spans(...))` in closed form."""
    step = min(max_pieces, doc_stride)
    return 1 if num_pieces <= max_pieces else 1 + -(-(num_pieces - max_pieces) // step)


def max_context_window(spans: Sequence[Tuple[int, int]], num_pieces: int) -> np.ndarray:
    """int64 [num_pieces]: the window (index into `spans`) where each piece has the most context: the highest
    `100 * min(left, right) + length`, the first window on ties."""
    best = np.full([num_pieces], -1, np.int64)
    best_score = np.full([num_pieces], -1, np.int64)
    for k, (start, length) in enumerate(spans):
        pos = np.arange(start, start + length)
        score = 100 * np.minimum(pos - start, start + length - 1 - pos) + length
        better = score > best_score[pos]
        best[pos[better]] = k
        best_score[pos[better]] = score[better]
    return best


def _left_pad(values: np.ndarray, length: int, fill: int) -> np.ndarray:
    out = np.full([length], fill, np.int32)
    out[length - len(values):] = values
    return out


def pack_window(piece_ids: Sequence[int], word_ids: Sequence[int], label_ids: Sequence[int],
                is_max_context: Sequence[int], length: int) -> Features:
    """One window: its pieces (`piece_ids`, with their `word_ids`, `label_ids`, `is_max_context`, all [n <= L-2])
    then `<sep> <cls>`, left-padded to `length` (module docstring). ValueError when they do not fit."""
    n = len(piece_ids)
    tokens = list(piece_ids) + [SEP_ID, CLS_ID]
    segments = [SEG_ID_A] * (n + 1) + [SEG_ID_CLS]
    features = packing.pad(tokens, segments, length, LEFT)
    specials = np.full([SPECIALS], NO_WORD, np.int32)
    features["label_ids"] = _left_pad(np.concatenate([np.asarray(label_ids, np.int32),
                                                      np.full([SPECIALS], IGNORE_LABEL, np.int32)]), length,
                                      IGNORE_LABEL)
    features["word_ids"] = _left_pad(np.concatenate([np.asarray(word_ids, np.int32), specials]), length, NO_WORD)
    features["is_max_context"] = _left_pad(np.concatenate([np.asarray(is_max_context, np.int32),
                                                           np.zeros([SPECIALS], np.int32)]), length, 0)
    return features


def pack_sentence(word_pieces: Sequence[Sequence[int]], labels: Optional[Sequence[int]], max_seq_length: int,
                  doc_stride: int, label_all_pieces: bool = False) -> List[Features]:
    """One sentence -> its windows (module docstring), each a dict of `FEATURE_NAMES` arrays [L] plus
    `window_index` (int32 scalar, 0-based).

    Args:
      word_pieces: the piece ids of each word (`word_piece_ids`); every word has at least one.
      labels: the label id of each word, or None (an unlabeled sentence: `label_ids` all `IGNORE_LABEL`).
      max_seq_length, doc_stride: L and the distance between window starts (`check_window`).
      label_all_pieces: put each word's label on all its pieces, not only the first.
    """
    check_window(max_seq_length, doc_stride)
    lengths = np.array([len(p) for p in word_pieces], np.int64)
    if (lengths < 1).any():
        raise ValueError(f"word {int(np.argmin(lengths))} has no pieces (word_piece_ids gives <unk> to such words)")
    if labels is not None and len(labels) != len(word_pieces):
        raise ValueError(f"{len(labels)} labels for {len(word_pieces)} words")
    pieces = np.array([i for p in word_pieces for i in p], np.int32)
    word_of = np.repeat(np.arange(len(lengths), dtype=np.int32), lengths)
    first = np.zeros([len(pieces)], bool)
    first[np.cumsum(lengths) - lengths] = True
    piece_labels = np.full([len(pieces)], IGNORE_LABEL, np.int32)
    if labels is not None:
        labels = np.asarray(labels, np.int32)
        scored = slice(None) if label_all_pieces else first
        piece_labels[scored] = labels[word_of[scored]]
    spans = window_spans(len(pieces), max_seq_length - SPECIALS, doc_stride)
    best = max_context_window(spans, len(pieces))
    out = []
    for k, (start, n) in enumerate(spans):
        part = slice(start, start + n)
        features = pack_window(pieces[part], word_of[part], piece_labels[part],
                               (best[part] == k) & first[part], max_seq_length)
        features["window_index"] = np.int32(k)
        out.append(features)
    return out


def stitch(word_ids: np.ndarray, is_max_context: np.ndarray, values: np.ndarray,
           num_words: Optional[int] = None) -> np.ndarray:
    """The windows of ONE sentence -> one value per word.

    Args:
      word_ids, is_max_context: int [K, L] (or [L]) of the sentence's K windows.
      values: [K, L, ...] per-position predictions (tag ids, logits, ...).
      num_words: the sentence's word count; None = 1 + the largest word id seen.
    Returns `values` at each word's max-context position, [num_words, ...] in word order. ValueError naming the
    words when some word has no such position or more than one.
    """
    word_ids, is_max_context, values = (np.asarray(x) for x in (word_ids, is_max_context, values))
    mask = is_max_context > 0
    words, picked = word_ids[mask], values[mask]
    if num_words is None:
        num_words = int(word_ids.max()) + 1 if word_ids.size else 0
    if words.size and (words.min() < 0 or words.max() >= num_words):
        raise ValueError(f"max-context positions name words outside 0..{num_words - 1}")
    counts = np.bincount(words, minlength=num_words) if words.size else np.zeros([num_words], np.int64)
    bad = np.flatnonzero(counts != 1)
    if bad.size:
        raise ValueError(f"{bad.size} word(s) without exactly one max-context position, e.g. word {int(bad[0])} "
                         f"({int(counts[bad[0]])})")
    out = np.empty((num_words,) + picked.shape[1:], picked.dtype)
    out[words] = picked
    return out


def stitch_examples(example_index: np.ndarray, word_ids: np.ndarray, is_max_context: np.ndarray,
                    values: np.ndarray, num_words: Optional[Sequence[int]] = None) -> List[np.ndarray]:
    """Windows of many sentences, in any order (`example_index` int [N]; -1 = a padding record, skipped) ->
    a list indexed by example index (0 .. the largest, or `len(num_words)`) of `stitch`'s [num_words_i, ...]."""
    example_index = np.asarray(example_index).reshape([-1])
    count = len(num_words) if num_words is not None else (int(example_index.max()) + 1 if example_index.size else 0)
    order = np.argsort(example_index, kind="stable")
    bounds = np.searchsorted(example_index[order], np.arange(count + 1))
    out = []
    for e in range(count):
        rows = order[bounds[e]:bounds[e + 1]]
        if not rows.size:
            raise ValueError(f"example {e} has no windows")
        out.append(stitch(word_ids[rows], is_max_context[rows], values[rows],
                          None if num_words is None else int(num_words[e])))
    return out


# ---- in the graph --------------------------------------------------------------------------------------------

def word_piece_ids_tf(encoder, words):
    """`word_piece_ids` in the graph: `words` RaggedTensor `[N, (w)]` of strings (`encoder`: an
    `XLNetTextEncoder`) -> int32 RaggedTensor `[N, (w), (k >= 1)]` (`<unk>` for a word normalizing to nothing)."""
    import tensorflow as tf

    pieces = encoder.encode(words.flat_values)  # [W, (k)]
    empty = tf.cast(tf.equal(pieces.row_lengths(), 0), pieces.row_splits.dtype)
    unk = tf.RaggedTensor.from_row_lengths(tf.fill([tf.reduce_sum(empty)], tf.constant(UNK_ID, pieces.dtype)), empty)
    return words.with_flat_values(tf.concat([pieces, unk], axis=1))


def _left_pad_tf(rows, length: int, fill):
    import tensorflow as tf

    return tf.reverse(tf.reverse(rows, [1]).to_tensor(tf.cast(fill, rows.dtype), shape=[None, length]), [1])


def pack_sentences_tf(word_pieces, max_seq_length: int, doc_stride: int, labels=None,
                      label_all_pieces: bool = False, max_windows: Optional[int] = None):
    """`pack_sentence` for N sentences in the graph, every window of every sentence.

    Args:
      word_pieces: RaggedTensor `[N, (w), (k >= 1)]` of piece ids (`word_piece_ids_tf`).
      labels: None, or RaggedTensor `[N, (w)]` of label ids.
      max_windows: if given, a sentence needing more windows fails an assertion (a request bound).
    Returns a dict, T = the windows of all sentences, sentence by sentence: `FEATURE_NAMES` `[T, L]` (int32,
    `attention_mask` float32), `example_index` int32 [T] (the sentence of each window) and `window_index` int32 [T]
    (its index among its sentence's windows): row by row what `pack_sentence` gives.
    """
    import tensorflow as tf

    from xlnet_tf.text import packing_tf

    check_window(max_seq_length, doc_stride)
    max_pieces = max_seq_length - SPECIALS
    step = min(max_pieces, doc_stride)
    word_pieces = tf.cast(word_pieces.with_row_splits_dtype(tf.int64), tf.int32)
    pieces = word_pieces.values  # [W, (k)]
    n_sent = word_pieces.nrows()
    total = tf.shape(pieces.flat_values, out_type=tf.int64)[0]
    # every piece: its word (in the sentence), whether it starts the word, its sentence and position there
    word_global = pieces.value_rowids()
    first = tf.equal(tf.range(total), tf.gather(pieces.row_starts(), word_global))
    sent_of_word = word_pieces.value_rowids()
    word_in_sent = tf.range(tf.shape(sent_of_word, out_type=tf.int64)[0]) - tf.gather(word_pieces.row_starts(),
                                                                                      sent_of_word)
    word_of_piece = tf.cast(tf.gather(word_in_sent, word_global), tf.int32)
    sent_pieces = tf.math.unsorted_segment_sum(pieces.row_lengths(), sent_of_word, n_sent)  # P per sentence
    sent_start = tf.cumsum(sent_pieces, exclusive=True)
    # the windows: sentence, index, start, length
    windows = tf.where(sent_pieces <= max_pieces, tf.ones_like(sent_pieces),
                       1 + (sent_pieces - max_pieces + step - 1) // step)
    checks = []
    if max_windows is not None:
        checks.append(tf.debugging.assert_less_equal(
            windows, tf.constant(max_windows, tf.int64),
            message=f"a sentence needs more than max_windows={max_windows} windows of {max_seq_length} tokens"))
    with tf.control_dependencies(checks):
        win_sent = tf.repeat(tf.range(n_sent), windows)
    win_index = tf.ragged.range(windows).flat_values
    win_start = tf.gather(sent_start, win_sent) + win_index * step  # in the flat pieces
    win_len = tf.minimum(tf.cast(max_pieces, tf.int64), tf.gather(sent_pieces, win_sent) - win_index * step)
    where = tf.ragged.range(win_start, win_start + win_len)  # [T, (n)] flat piece index at each window position
    at = where.flat_values
    win_of = where.value_rowids()
    local = at - tf.gather(win_start, win_of)
    length = tf.gather(win_len, win_of)
    score = 100 * tf.minimum(local, length - 1 - local) + length
    best_score = tf.math.unsorted_segment_max(score, at, total)
    candidate = tf.where(tf.equal(score, tf.gather(best_score, at)), win_of, tf.int64.max)
    best_window = tf.math.unsorted_segment_min(candidate, at, total)
    is_max_context = tf.equal(tf.gather(best_window, at), win_of) & tf.gather(first, at)
    # per-piece labels
    piece_labels = tf.fill([total], tf.constant(IGNORE_LABEL, tf.int32))
    if labels is not None:
        word_label = tf.gather(tf.cast(labels.flat_values, tf.int32), word_global)
        scored = tf.ones_like(first) if label_all_pieces else first
        piece_labels = tf.where(scored, word_label, piece_labels)
    # pack: pieces <sep> <cls>, left-padded
    rows = lambda flat: where.with_flat_values(tf.gather(flat, at))  # noqa: E731
    ones = tf.ones_like(win_len)
    filled = lambda value, counts: tf.RaggedTensor.from_row_lengths(  # noqa: E731
        tf.fill([tf.reduce_sum(counts)], tf.constant(value, tf.int32)), counts)
    specials = filled(NO_WORD, 2 * ones)
    tokens = tf.concat([rows(pieces.flat_values), filled(SEP_ID, ones), filled(CLS_ID, ones)], axis=1)
    segments = tf.concat([filled(SEG_ID_A, win_len + 1), filled(SEG_ID_CLS, ones)], axis=1)
    features = packing_tf.pad(tokens, segments, max_seq_length, LEFT)
    features["label_ids"] = _left_pad_tf(tf.concat([rows(piece_labels), filled(IGNORE_LABEL, 2 * ones)], axis=1),
                                         max_seq_length, IGNORE_LABEL)
    features["word_ids"] = _left_pad_tf(tf.concat([rows(word_of_piece), specials], axis=1), max_seq_length, NO_WORD)
    features["is_max_context"] = _left_pad_tf(
        tf.concat([where.with_flat_values(tf.cast(is_max_context, tf.int32)), filled(0, 2 * ones)], axis=1),
        max_seq_length, 0)
    features["example_index"] = tf.cast(win_sent, tf.int32)
    features["window_index"] = tf.cast(win_index, tf.int32)
    return features


def stitch_tf(example_index, word_ids, is_max_context, values, num_words):
    """`stitch_examples` in the graph: windows `example_index` int [T], `word_ids`, `is_max_context` [T, L],
    `values` [T, L, ...] and the sentences' `num_words` int [N] -> RaggedTensor `[N, (num_words), ...]`, each
    word's value at its max-context position. Fails an assertion unless there are exactly as many such
    positions as words."""
    import tensorflow as tf

    num_words = tf.cast(num_words, tf.int64)
    mask = is_max_context > 0
    length = tf.shape(word_ids)[1]
    example = tf.boolean_mask(tf.repeat(tf.cast(example_index, tf.int64)[:, None], length, axis=1), mask)
    word = tf.cast(tf.boolean_mask(word_ids, mask), tf.int64)
    picked = tf.boolean_mask(values, mask)
    total = tf.reduce_sum(num_words)
    check = tf.debugging.assert_equal(tf.shape(word, out_type=tf.int64)[0], total,
                                      message="stitch_tf: not one max-context position per word")
    with tf.control_dependencies([check]):
        flat = tf.gather(tf.cumsum(num_words, exclusive=True), example) + word
    shape = tf.concat([total[None], tf.shape(picked, out_type=tf.int64)[1:]], 0)
    return tf.RaggedTensor.from_row_lengths(tf.scatter_nd(flat[:, None], picked, shape), num_words)
