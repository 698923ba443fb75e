"""Token classification (POS tagging, chunking, NER): CoNLL files -> windows -> records, and their reader.

Input: `<data_dir>/<split>.txt`, CoNLL files (tfrecords/readers/conll.py: one token a line, the label in `label_column`,
default the last; a blank line between sentences; `-DOCSTART-` lines skipped; a file of one column is unlabeled).
The label list is given (`labels`, or `labels_file`: one a line, in id order) or is the sorted set of labels of
`<data_dir>/train.txt` (read even when the train split is not built). A label outside it is a DataError naming
`file:line`, raised before anything is written.

Windows: xlnet_tf/text/tagging.py (`pack_sentence`: the layout, the alignment and the windows are specified
there). Every word is tokenized on its own; its label goes on its first piece (every piece with
`label_all_pieces`), `IGNORE_LABEL` (-100) elsewhere; a sentence longer than `max_seq_length - 2` pieces becomes
overlapping windows `doc_stride` pieces apart, each word predicted in the window where it has the most context
(`is_max_context`). No word is ever dropped: `tagging.stitch_examples` gives one prediction per word back.

Records (`build_tagging_records`, written with records.py): `<output_dir>/<split>.tfrecord`, one record per
window (train: windows in a seeded random order; other splits: file order, padded to a multiple of
`eval_batch_size` with dummy windows, `is_real_example` 0, `example_index` -1), `<split>.guids.txt` (line k =
`<file name>:<line>` of sentence k) and `manifest.json` (kind `xlnet_tagging`: the build's `TaggingBuild` whole,
counts). A build into a directory of records of other build settings is refused naming every differing field;
one with the same settings adds or replaces its splits (records.StagedFiles). Record schema (int64): `input_ids`, `segment_ids`,
`attention_mask`, `label_ids`, `word_ids`, `is_max_context` [L]; `example_index`, `window_index`,
`is_real_example` [1].

Reader (`tagging_dataset`): per-batch dicts with static shapes, see its docstring. Predictions go back to the
input's layout with `write_split_predictions`. No absl flags here; the CLI is `tfrecords/build_tagging.py`.
"""

from __future__ import annotations

import dataclasses
import os
import time
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np

from tfrecords.readers import conll
from tfrecords import manifest as manifest_lib
from tfrecords import record_inputs
from tfrecords import records as records_lib
from tfrecords.records import DataError
from xlnet_tf.artifacts.text_settings import TextSettings
from xlnet_tf.text import tagging, tokenization
from xlnet_tf.text.tagging import FEATURE_NAMES, IGNORE_LABEL

TAGGING_KIND = "xlnet_tagging"
RECORD_NAMES = FEATURE_NAMES + ("example_index", "window_index", "is_real_example")
TRAIN_SPLIT = "train"


@dataclasses.dataclass(frozen=True)
class TaggingBuild:
    """What shapes a tagging record set, recorded whole in its manifest and compared whole on reuse.

    text: the tokenization. max_seq_length, doc_stride: windows of `max_seq_length - 2` pieces, `doc_stride`
    apart. label_list: the labels in id order. tagset: a name for the label set (None = unnamed).
    label_column, word_column: the CoNLL columns read. label_all_pieces: every piece of a word labelled, not only
    its first."""

    text: TextSettings
    max_seq_length: int
    doc_stride: int
    label_list: Tuple[str, ...]
    tagset: Optional[str] = None
    label_column: int = -1
    word_column: int = 0
    label_all_pieces: bool = False


def tagging_build(data_dir: str, spiece_model: str, *, max_seq_length: int = 128, doc_stride: int = 64,
                  labels: Optional[Sequence[str]] = None, labels_file: Optional[str] = None, label_column: int = -1,
                  word_column: int = 0, tagset: Optional[str] = None, label_all_pieces: bool = False,
                  uncased: bool = False, keep_accents: bool = False) -> TaggingBuild:
    """The settings a build with these options makes (the label list resolved as `resolve_labels`); checks
    them, writes nothing."""
    tagging.check_window(max_seq_length, doc_stride)
    if tagset is not None and (not isinstance(tagset, str) or not tagset.strip()):
        raise ValueError(f"tagset must be a non-empty name or None, got {tagset!r}")
    label_list = resolve_labels(data_dir, labels, labels_file, label_column, word_column)
    try:
        tagging.check_tagset(tagset, label_list,
                             f"--tagset={tagset} with the labels of {labels_origin(data_dir, labels, labels_file)}")
    except ValueError as e:
        raise DataError(str(e)) from None
    return TaggingBuild(TextSettings.of_model(spiece_model, uncased, keep_accents), int(max_seq_length),
                        int(doc_stride), tuple(label_list), tagset, int(label_column), int(word_column),
                        bool(label_all_pieces))


def split_file(data_dir: str, split: str) -> str:
    """The CoNLL file of `split`: `<data_dir>/<split>.txt`."""
    return os.path.join(data_dir, f"{split}.txt")


def read_split(data_dir: str, split: str, label_column: int = -1, word_column: int = 0) -> List[conll.Sentence]:
    """The sentences of `split` (DataError naming the file when it is missing or bad)."""
    return conll.read_conll(split_file(data_dir, split), label_column=label_column, word_column=word_column)


def resolve_labels(data_dir: str, labels: Optional[Sequence[str]] = None, labels_file: Optional[str] = None,
                   label_column: int = -1, word_column: int = 0) -> List[str]:
    """The label list (id = position): `labels`, else `labels_file`, else the sorted labels of the train file."""
    if labels is not None and labels_file:
        raise DataError("give the labels or a labels_file, not both")
    if labels is not None:
        out = conll.check_label_list(labels, "labels")
    elif labels_file:
        out = conll.read_labels_file(labels_file)
    else:
        out = conll.collect_labels(read_split(data_dir, TRAIN_SPLIT, label_column, word_column))
    if len(out) < 2:
        raise DataError(f"{labels_origin(data_dir, labels, labels_file)}: fewer than 2 labels: {out}")
    return out


def labels_origin(data_dir: str, labels: Optional[Sequence[str]] = None, labels_file: Optional[str] = None) -> str:
    """Where `resolve_labels` takes the label list from, as a message names it."""
    return "--labels" if labels is not None else labels_file or split_file(data_dir, TRAIN_SPLIT)


# ---- sentences -> windows ------------------------------------------------------------------------------------

def convert_sentences(tokenizer: tokenization.XLNetTokenizer, sentences: Sequence[conll.Sentence],
                      label_list: Sequence[str], max_seq_length: int, doc_stride: int,
                      label_all_pieces: bool = False, first_index: int = 0,
                      stats: Optional[Dict[str, int]] = None) -> List[Dict[str, np.ndarray]]:
    """Sentences -> their windows in order (`tagging.pack_sentence`), each with `example_index` (the sentence's
    position + `first_index`) and `is_real_example` 1; `stats["pieces"]`, if given, grows by the pieces of the
    sentences. DataError naming `file:line` for an unknown label."""
    tagging.check_window(max_seq_length, doc_stride)
    index = {lab: i for i, lab in enumerate(label_list)}
    labels = [conll.label_ids(s, index) for s in sentences]  # fail fast, before tokenizing
    pieces = tagging.word_piece_ids(tokenizer, [w for s in sentences for w in s.words])
    if stats is not None:
        stats["pieces"] = stats.get("pieces", 0) + sum(len(p) for p in pieces)
    out, at = [], 0
    for k, (s, ids) in enumerate(zip(sentences, labels)):
        words = pieces[at:at + len(s.words)]
        at += len(s.words)
        for window in tagging.pack_sentence(words, ids, max_seq_length, doc_stride, label_all_pieces):
            window["example_index"] = np.int32(first_index + k)
            window["is_real_example"] = np.int32(1)
            out.append(window)
    return out


def dummy_window(max_seq_length: int) -> Dict[str, np.ndarray]:
    """A padding record: no pieces, `example_index` -1, `is_real_example` 0."""
    window = tagging.pack_window([], [], [], [], max_seq_length)
    window.update(window_index=np.int32(0), example_index=np.int32(-1), is_real_example=np.int32(0))
    return window


def sentence_guid(sentence: conll.Sentence) -> str:
    return f"{os.path.basename(sentence.path)}:{sentence.lines[0]}"


# ---- records -------------------------------------------------------------------------------------------------

def build_tagging_records(data_dir: str, spiece_model: str, output_dir: str, *, max_seq_length: int = 128,
                          doc_stride: int = 64, splits: Sequence[str] = ("train", "dev"),
                          labels: Optional[Sequence[str]] = None, labels_file: Optional[str] = None,
                          label_column: int = -1, word_column: int = 0, tagset: Optional[str] = None,
                          label_all_pieces: bool = False, uncased: bool = False, keep_accents: bool = False,
                          eval_batch_size: int = 32, seed: int = 0, log: Optional[Callable[[str], None]] = None
                          ) -> Dict[str, Any]:
    """Build `<output_dir>/<split>.tfrecord` (+ guids) for every split, and `manifest.json` (module docstring).

    Args:
      data_dir: folder of `<split>.txt` CoNLL files.
      labels / labels_file: the label list (default: the sorted labels of `train.txt`).
      label_column, word_column: CoNLL columns (negative from the end).
      tagset: a name for the label set recorded in the manifest and checked by readers (e.g. "universal").
      label_all_pieces: label every piece of a word, not only its first.
      eval_batch_size: non-train splits are padded with dummy windows to a multiple of it (0 = no padding).
      seed: the train split's window order.
    Raises DataError naming the file and line on bad input (before anything is written), and when `output_dir`
    holds records built with other parameters (naming the parameter).
    """
    t0 = time.time()
    if not splits:
        raise ValueError("no splits given")
    if len(set(splits)) != len(splits):
        raise ValueError(f"duplicate splits: {list(splits)}")
    tok = tokenization.XLNetTokenizer(spiece_model, uncased=uncased, keep_accents=keep_accents)
    build = tagging_build(data_dir, spiece_model, max_seq_length=max_seq_length, doc_stride=doc_stride,
                          labels=labels, labels_file=labels_file, label_column=label_column, word_column=word_column,
                          tagset=tagset, label_all_pieces=label_all_pieces, uncased=uncased, keep_accents=keep_accents)
    label_list = list(build.label_list)
    index = {lab: i for i, lab in enumerate(label_list)}
    # read and check every split (labels included) before writing anything
    sentences = {s: read_split(data_dir, s, label_column, word_column) for s in splits}
    label_counts = {}
    for s in splits:
        ids = [conll.label_ids(x, index) for x in sentences[s]]
        if all(i is not None for i in ids):
            label_counts[s] = np.bincount(np.concatenate(ids), minlength=len(label_list))
    L = max_seq_length
    header = {
        "kind": TAGGING_KIND,
        "format_version": manifest_lib.FORMAT_VERSION,
        "task": "tagging",
        "num_labels": len(label_list),
        "ignore_label": IGNORE_LABEL,
        "spiece_model": records_lib.spiece_entry(spiece_model, tok),
        "data_dir": os.path.abspath(data_dir),
        "seed": int(seed),
        "schema": {
            "input_ids": f"int64[{L}] pieces <sep> <cls>, left-padded with 0",
            "segment_ids": f"int64[{L}] 0 pieces and <sep>, 2 CLS, 4 pad",
            "attention_mask": f"int64[{L}] 1 real token, 0 padding",
            "label_ids": f"int64[{L}] index in label_list on the {'pieces' if label_all_pieces else 'first piece'} "
                         f"of each word, {IGNORE_LABEL} elsewhere (and everywhere for unlabeled splits)",
            "word_ids": f"int64[{L}] index of the piece's word in its sentence, -1 at <sep> <cls> padding",
            "is_max_context": f"int64[{L}] 1 at the first piece of each word predicted from this window (one "
                              "position per word over the sentence's windows)",
            "example_index": "int64[1] the sentence (guids file line); -1 padding",
            "window_index": "int64[1] the window's index among its sentence's windows",
            "is_real_example": "int64[1] 0 for padding windows",
        },
        "packing": "each word tokenized alone; pieces <sep> <cls>, left padding; windows of max_seq_length - 2 "
                   "pieces doc_stride apart; max-context rule of SQuAD (xlnet_tf/text/tagging.py)",
    }
    dummy = dummy_window(max_seq_length)
    # a build the records already there conflict with is refused here, before anything is converted
    with records_lib.StagedFiles(output_dir, TAGGING_KIND, header, build) as staged:
        entries = {}
        for s in splits:
            sents = sentences[s]
            windows: List[Dict[str, np.ndarray]] = []
            stats = {"pieces": 0}
            for start in range(0, len(sents), records_lib.CONVERT_CHUNK):
                windows += convert_sentences(tok, sents[start:start + records_lib.CONVERT_CHUNK], label_list,
                                             max_seq_length, doc_stride, label_all_pieces, first_index=start,
                                             stats=stats)
            n = len(windows)
            per_sentence = np.bincount([int(w["example_index"]) for w in windows], minlength=len(sents))
            n_pad = 0 if s == TRAIN_SPLIT else records_lib.pad_count(n, eval_batch_size)
            order = (np.random.default_rng([seed, 7919]).permutation(n) if s == TRAIN_SPLIT else np.arange(n))
            records = (windows[i] for i in order)
            padded = (dummy for _ in range(n_pad))
            entry = records_lib.write_split_records(staged, s, _chain(records, padded), (),
                                                    [sentence_guid(x) for x in sents])
            path = split_file(data_dir, s)
            entry.update({
                "num_examples": len(sents), "num_windows": n, "num_padding": n_pad,
                "num_words": int(sum(len(x) for x in sents)),
                "num_pieces": stats["pieces"],
                "num_multi_window": int((per_sentence > 1).sum()), "max_windows": int(per_sentence.max()),
                "has_labels": s in label_counts, "shuffled": s == TRAIN_SPLIT,
                "pad_to_multiple": 0 if s == TRAIN_SPLIT else int(eval_batch_size),
                "inputs": record_inputs.input_digests([path]), "sources": [os.path.abspath(path)],
            })
            if s in label_counts:
                entry["label_counts"] = {lab: int(c) for lab, c in zip(label_list, label_counts[s])}
            entries[s] = entry
            if log:
                log(f"{s}: {len(sents)} sentences, {entry['num_words']} words -> {n} windows (+{n_pad} padding), "
                    f"{entry['num_multi_window']} sentences in several windows -> "
                    f"{os.path.join(output_dir, entry['file'])}")
        manifest = staged.commit(entries)
    if log:
        log(f"manifest.json written ({time.time() - t0:.1f} s)")
    return manifest


def _chain(*iterables):
    for it in iterables:
        yield from it


# ---- reader --------------------------------------------------------------------------------------------------

def parse_tagging_batch(serialized, max_seq_length: int):
    """Batch of serialized records [B] -> the reader's dict (see `tagging_dataset`)."""
    import tensorflow as tf

    spec = {k: tf.io.FixedLenFeature([max_seq_length], tf.int64) for k in FEATURE_NAMES}
    spec.update({k: tf.io.FixedLenFeature([1], tf.int64) for k in ("example_index", "window_index",
                                                                    "is_real_example")})
    f = tf.io.parse_example(serialized, spec)
    out = {k: tf.cast(f[k], tf.int32) for k in FEATURE_NAMES}
    out["attention_mask"] = tf.cast(f["attention_mask"], tf.float32)
    out["example_index"] = tf.cast(f["example_index"][:, 0], tf.int32)
    out["window_index"] = tf.cast(f["window_index"][:, 0], tf.int32)
    out["is_real_example"] = tf.cast(f["is_real_example"][:, 0], tf.float32)
    return out


def read_tagging_manifest(record_dir: str) -> Dict[str, Any]:
    return manifest_lib.read_manifest(record_dir, kind=TAGGING_KIND)


def read_guids(record_dir: str, split: str) -> List[str]:
    """`<file name>:<line>` of each sentence of `split`, indexed by `example_index`."""
    return records_lib.read_split_guids(record_dir, split, TAGGING_KIND)


def tagging_dataset(record_dir: str, batch_size: int, is_training: bool, max_seq_length: int,
                    spiece_model: Optional[str] = None, *, split: Optional[str] = None, seed: Optional[int] = 0,
                    drop_remainder: bool = True, repeat: Optional[bool] = None, shuffle_buffer: int = 2048,
                    spiece_sha256: Optional[str] = None, uncased: Optional[bool] = None,
                    doc_stride: Optional[int] = None, label_all_pieces: Optional[bool] = None,
                    tagset: Optional[str] = None, label_list: Optional[Sequence[str]] = None, input_context=None):
    """tf.data pipeline over a tagging record directory (one element = one window).

    Args:
      record_dir: output of `build_tagging_records`.
      batch_size: windows per batch (per input pipeline with `input_context`).
      is_training: shuffle + repeat (padding windows dropped); else file order, padded with dummy windows to whole
        batches (`is_real_example` 0) so that every real window is read once.
      max_seq_length, spiece_model / spiece_sha256, uncased, doc_stride, label_all_pieces, tagset, label_list:
        checked against the manifest (ManifestError naming the field); None = not checked.
      split: default "train" when training, else "dev". repeat: None = repeat when training only.
    Yields dicts (static shapes when `drop_remainder`):
      `input_ids` int32 [B, L]; `segment_ids` int32 [B, L] (0 pieces and <sep>, 2 CLS, 4 pad);
      `attention_mask` float32 [B, L] (1 = real token, 0 = padding); `label_ids` int32 [B, L] (label index,
      `IGNORE_LABEL` -100 where no loss or metric reads); `word_ids` int32 [B, L] (word of the piece in its
      sentence, -1 at <sep>/<cls>/padding); `is_max_context` int32 [B, L] (1 = this window's prediction is the
      word's); `example_index` int32 [B] (sentence = guids line, -1 = padding); `window_index` int32 [B];
      `is_real_example` float32 [B].
    """
    m = read_tagging_manifest(record_dir)
    records_lib.check_reader(m, TaggingBuild, max_seq_length=max_seq_length, spiece_model=spiece_model,
                             spiece_sha256=spiece_sha256, uncased=uncased, doc_stride=doc_stride,
                             label_all_pieces=label_all_pieces, tagset=tagset, label_list=label_list)
    split = split or ("train" if is_training else "dev")
    path = records_lib.split_record_file(m, split)
    e = m["splits"][split]
    dummy = records_lib.serialize_features(dummy_window(max_seq_length))
    return records_lib.records_dataset(
        path, e["num_records"], e["num_padding"] > 0, lambda s: parse_tagging_batch(s, max_seq_length), dummy,
        batch_size, is_training, seed=seed, drop_remainder=drop_remainder, repeat=repeat,
        shuffle_buffer=shuffle_buffer, input_context=input_context)


def make_tagging_dataset_fn(record_dir: str, global_batch_size: int, is_training: bool, max_seq_length: int,
                            **kwargs) -> Callable:
    """`dataset_fn(input_context)` for `strategy.distribute_datasets_from_function` (keyword arguments as
    `tagging_dataset`)."""

    def dataset_fn(input_context):
        per_replica = input_context.get_per_replica_batch_size(global_batch_size)
        return tagging_dataset(record_dir, per_replica, is_training, max_seq_length, input_context=input_context,
                               **kwargs)

    return dataset_fn


# ---- predictions ---------------------------------------------------------------------------------------------

def split_sentences(record_dir: str, split: str) -> List[conll.Sentence]:
    """The sentences `split` was built from, read again from its CoNLL file; DataError when the file changed
    since the records were built (its SHA-256 is in the manifest)."""
    m = read_tagging_manifest(record_dir)
    if split not in m.get("splits", {}):
        raise manifest_lib.ManifestError(f"{m['_path']}: no split {split!r} in the records")
    path = split_file(m["data_dir"], split)
    built = m["splits"][split].get("inputs", {})
    if not os.path.isfile(path) or record_inputs.input_digests([path]) != built:
        raise DataError(f"{path}: missing or changed since the records in {record_dir} were built; rebuild them")
    return conll.read_conll(path, label_column=m["label_column"], word_column=m["word_column"])


def predicted_tags(record_dir: str, split: str, example_index, word_ids, is_max_context, predicted_ids,
                   sentences: Optional[Sequence[conll.Sentence]] = None) -> List[List[str]]:
    """Per-window predicted label ids (`predicted_ids` int [N, L], with the windows' `example_index` [N],
    `word_ids`, `is_max_context` [N, L] as the reader gives them, padding windows included or not) -> one tag
    string per word of every sentence of `split`, in file order (`tagging.stitch_examples`). `sentences`: the
    split's sentences when the caller already read them (`split_sentences`)."""
    m = read_tagging_manifest(record_dir)
    labels = m["label_list"]
    sentences = split_sentences(record_dir, split) if sentences is None else sentences
    example_index = np.asarray(example_index).reshape([-1])
    keep = example_index >= 0
    stitched = tagging.stitch_examples(example_index[keep], np.asarray(word_ids)[keep],
                                       np.asarray(is_max_context)[keep], np.asarray(predicted_ids)[keep],
                                       [len(s) for s in sentences])
    return [[labels[int(i)] for i in ids] for ids in stitched]


def write_split_predictions(record_dir: str, split: str, tags: Sequence[Sequence[str]], output_path: str) -> int:
    """Write `split`'s CoNLL file with the predicted tags (`predicted_tags`) as one more column; returns the
    number of token lines."""
    return conll.write_conll(output_path, split_sentences(record_dir, split), tags)
