"""Sequence classification / regression: examples -> packed features -> records, and their reader.

Packing (the original `classifier_utils.convert_single_example`), for `L = max_seq_length`:

    position        0 .. p-1 | A_1 .. A_n  <sep> | B_1 .. B_m  <sep> | <cls>
    input_ids       0 .. 0   | ids of A    4     | ids of B    4     | 3
    segment_ids     4 .. 4   | 0 .. 0      0     | 1 .. 1      1     | 2
    attention_mask  0 .. 0   | 1 ...                                  1      (1 = real token)

LEFT padding with id 0 (`<unk>`, as the original) and segment id 4 (`SEG_ID_PAD`); `<cls>` is
always the last position (the "last" summary reads it). Without B (`text_b` None, or B
tokenizing to nothing, as the original's `if tokens_b:`) the `B <sep>` part is absent. Too
long inputs: a pair is cut by `shrink_pair(a, b, L - 3)` (pop from the end of the longer side, B on
ties), a single text keeps its first `L - 2` ids. The packer is xlnet_tf/text/packing.py's `pack_pair`, the
one serving and `XLNetPreprocessor` mirror in the graph.

Examples come from a task processor (processors.py: GLUE, IMDB, Yelp, your own tsv/csv; `get_processor`).

Records (`build_classifier_records`, written with records.py): `<output_dir>/<split>.tfrecord` (written
to a temporary name, then renamed), `<split>.guids.txt` (line k = the id of example_index k) and
`manifest.json` (task, labels, max_seq_length, SentencePiece sha256, uncased, counts,
padding). Non-train splits are padded to a multiple of `eval_batch_size` with dummy
examples (`is_real_example` 0, `example_index` -1); the train split is shuffled (seeded).
Record schema (int64 unless said): `input_ids [L]`, `segment_ids [L]`, `attention_mask [L]`,
`label [1]` (float for regression), `is_real_example [1]`, `example_index [1]`.

Long documents (`max_segments` S > 1): the same packing with `S * L` positions (the budget of the
truncation rules above is `S * L`, so a pair's B, at the end, is only cut when it is the longer side),
left-padded as a whole and read as `[S, L]`: every segment before the last is plain text (no `<cls>` or
`<sep>` is inserted at segment boundaries: the memory of the next segment is then a contiguous stream),
all padding sits at the start of the document (leading segments may be padding only), and `<cls>` is the
last position of the last segment, where the "last" summary reads it. Records store `[S * L]`; the
manifest says `max_segments` (absent = 1, today's records, byte for byte).

Reader (`classifier_dataset`): per-batch dicts with static shapes, see its docstring.
No absl flags here; the CLI is `tfrecords/build_classifier.py`.
"""

from __future__ import annotations

import dataclasses
import os
import time
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np

from tfrecords import manifest as manifest_lib
from tfrecords import record_inputs
from tfrecords import records as records_lib
from tfrecords.readers.processors import InputExample, Processor, label_ids
from tfrecords.records import DataError  # raised here; also caught as classifier_data.DataError
from xlnet_tf.artifacts.text_settings import TextSettings
from xlnet_tf.text import tokenization
from xlnet_tf.text import packing

CLASSIFIER_KIND = "xlnet_classifier"
OUTPUT_NAMES = ("input_ids", "segment_ids", "attention_mask", "label", "is_real_example",
                "example_index")


# ---- packing (the layout's one packer: xlnet_tf/text/packing.py) ----------------------------------------------

def _check_length(max_seq_length: int, minimum: int = 3) -> None:
    if not isinstance(max_seq_length, (int, np.integer)) or max_seq_length < minimum:
        raise ValueError(f"max_seq_length must be an integer >= {minimum}, got "
                         f"{max_seq_length!r}")


def pack_ids(ids_a: Sequence[int], ids_b: Optional[Sequence[int]], max_seq_length: int
             ) -> Dict[str, np.ndarray]:
    """Pack token ids as `A <sep> (B <sep>) <cls>`, left-padded (see the module docstring).

    Returns `input_ids` int32 [L], `segment_ids` int32 [L] (0 A, 1 B, 2 CLS, 4 pad),
    `attention_mask` float32 [L] (1 = real token, 0 = padding).
    """
    _check_length(max_seq_length)
    return packing.pack_pair(ids_a, ids_b, max_seq_length)[0]


def pack_example(tokenizer: tokenization.XLNetTokenizer, text_a: str,
                 text_b: Optional[str], max_seq_length: int) -> Dict[str, np.ndarray]:
    """Tokenize (normalized as the tokenizer's `uncased`/`keep_accents`) and `pack_ids`."""
    ids_b = tokenizer.encode(text_b) if text_b else None
    return pack_ids(tokenizer.encode(text_a), ids_b, max_seq_length)


# ---- examples -> features -------------------------------------------------------------------

def convert_examples(tokenizer: tokenization.XLNetTokenizer,
                     examples: Sequence[InputExample], label_list: Optional[Sequence[str]],
                     is_regression: bool, max_seq_length: int, max_segments: int = 1
                     ) -> Dict[str, np.ndarray]:
    """Examples -> stacked features, in example order (`example_index` = position).

    Returns `input_ids`, `segment_ids` int32 [N, S*L], `attention_mask` float32 [N, S*L]
    (S = `max_segments`, see the module docstring), `label` int32 [N] (float32 for regression),
    `is_real_example` float32 [N] (ones), `example_index` int32 [N], `truncated` bool [N] and
    `num_segments` int32 [N] (segments holding real tokens).
    """
    _check_length(max_seq_length)
    _check_segments(max_segments)
    labels = label_ids(examples, label_list, is_regression)  # fail fast, before tokenizing
    ids_a = tokenizer.encode_batch([ex.text_a for ex in examples])
    has_b = [k for k, ex in enumerate(examples) if ex.text_b]
    enc_b = tokenizer.encode_batch([examples[k].text_b for k in has_b])
    ids_b: List[Optional[List[int]]] = [None] * len(examples)
    for k, ids in zip(has_b, enc_b):
        ids_b[k] = ids
    n, L = len(examples), max_seq_length * max_segments
    out = {"input_ids": np.zeros([n, L], np.int32), "segment_ids": np.zeros([n, L], np.int32),
           "attention_mask": np.zeros([n, L], np.float32), "truncated": np.zeros([n], bool)}
    for k in range(n):
        feats, out["truncated"][k] = packing.pack_pair(ids_a[k], ids_b[k], L)
        for name, v in feats.items():
            out[name][k] = v
    real = out["attention_mask"].sum(1).astype(np.int64)
    out["num_segments"] = (-(-real // max_seq_length)).astype(np.int32)
    out["label"] = labels.astype(np.float32 if is_regression else np.int32)
    out["is_real_example"] = np.ones([n], np.float32)
    out["example_index"] = np.arange(n, dtype=np.int32)
    return out


def _check_segments(max_segments: int) -> None:
    if not isinstance(max_segments, (int, np.integer)) or max_segments < 1:
        raise ValueError(f"max_segments must be an integer >= 1, got {max_segments!r}")


def padding_features(single: Dict[str, np.ndarray], count: int, is_regression: bool
                     ) -> Dict[str, np.ndarray]:
    """`count` dummy examples shaped like the packed example `single` (arrays without the
    batch axis): `is_real_example` 0, `example_index` -1, label 0."""
    out = {k: np.repeat(v[None], count, axis=0) for k, v in single.items()}
    out["label"] = np.zeros([count], np.float32 if is_regression else np.int32)
    out["is_real_example"] = np.zeros([count], np.float32)
    out["example_index"] = np.full([count], -1, np.int32)
    return out


def split_sources(examples: Sequence[InputExample]) -> List[str]:
    """The files a split's examples were read from (their `source` is `path:line`)."""
    return sorted({ex.source.rsplit(":", 1)[0] for ex in examples})


# ---- records --------------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class ClassifierBuild:
    """What shapes a classifier record set, recorded whole in its manifest and compared whole on reuse.

    text: the tokenization. task: the processor's name; processor: its configuration (files, columns).
    max_seq_length, max_segments: a document is up to `max_segments` segments of `max_seq_length`.
    is_regression; label_list: the labels in id order (None for regression)."""

    text: TextSettings
    task: str
    processor: Dict[str, Any]
    max_seq_length: int
    max_segments: int
    is_regression: bool
    label_list: Optional[Tuple[str, ...]]


def classifier_build(processor: Processor, data_dir: str, spiece_model: str, *, max_seq_length: int = 128,
                     uncased: bool = False, keep_accents: bool = False, max_segments: int = 1) -> ClassifierBuild:
    """The settings a build of `processor`'s data with these options makes (call it after the processor has
    read the examples: its configuration records the columns it found); checks them, writes nothing."""
    _check_length(max_seq_length)
    _check_segments(max_segments)
    is_regression = processor.is_regression(data_dir)
    label_list = None if is_regression else processor.get_labels(data_dir)
    if not is_regression and (not label_list or len(label_list) < 2):
        raise DataError(f"task {processor.name!r} has fewer than 2 labels: {label_list}")
    return ClassifierBuild(TextSettings.of_model(spiece_model, uncased, keep_accents), processor.name,
                           processor.config(), int(max_seq_length), int(max_segments), bool(is_regression),
                           None if label_list is None else tuple(label_list))


def build_classifier_records(processor: Processor, data_dir: str, spiece_model: str,
                             output_dir: str, *, max_seq_length: int = 128,
                             splits: Sequence[str] = ("train", "dev"), uncased: bool = False,
                             keep_accents: bool = False, eval_batch_size: int = 32,
                             seed: int = 0, log: Optional[Callable[[str], None]] = None,
                             max_segments: int = 1) -> Dict[str, Any]:
    """Build `<output_dir>/<split>.tfrecord` for every split, plus `manifest.json`.

    `max_segments` > 1: documents of up to that many segments of `max_seq_length` (module docstring).
    The train split is shuffled with `seed` (`example_index` keeps the file order); other
    splits keep the file order and are padded to a multiple of `eval_batch_size` (0 = no
    padding) with dummy examples. Raises DataError (file and line) on bad input, and when
    `output_dir` holds records built with other parameters.
    """
    t0 = time.time()
    if not splits:
        raise ValueError("no splits given")
    if len(set(splits)) != len(splits):
        raise ValueError(f"duplicate splits: {list(splits)}")
    tok = tokenization.XLNetTokenizer(spiece_model, uncased=uncased, keep_accents=keep_accents)
    # read and check every split (labels included) before writing anything
    examples = {sp: processor.get_examples(data_dir, sp) for sp in splits}
    build = classifier_build(processor, data_dir, spiece_model, max_seq_length=max_seq_length, uncased=uncased,
                             keep_accents=keep_accents, max_segments=max_segments)  # the processor has read them
    is_regression = build.is_regression
    label_list = None if build.label_list is None else list(build.label_list)
    labels = {sp: label_ids(examples[sp], label_list, is_regression) for sp in splits}
    width = max_seq_length * max_segments
    doc = (f" (a document of up to {max_segments} segments, left-padded as a whole, read as "
           f"[{max_segments}, {max_seq_length}])" if max_segments > 1 else "")
    header = {
        "kind": CLASSIFIER_KIND,
        "format_version": manifest_lib.FORMAT_VERSION,
        "num_labels": 1 if is_regression else len(label_list),
        "spiece_model": records_lib.spiece_entry(spiece_model, tok),
        "data_dir": os.path.abspath(data_dir),
        "seed": int(seed),
        "schema": {
            "input_ids": f"int64[{width}] left-padded with 0, <cls> last{doc}",
            "segment_ids": f"int64[{width}] 0 A (+<sep>), 1 B (+<sep>), 2 CLS, 4 pad",
            "attention_mask": f"int64[{width}] 1 real token, 0 padding",
            "label": "float[1] value" if is_regression else "int64[1] index in label_list",
            "is_real_example": "int64[1] 0 for padding examples",
            "example_index": "int64[1] row of the split's file order (guids file line); -1 "
                             "padding",
        },
        "packing": "A <sep> (B <sep>) <cls>, truncate_seq_pair(L-3) / A[:L-2], left padding",
    }
    dummy = padding_features(pack_ids([], None, max_seq_length * max_segments), 1, is_regression)
    float_keys = ("label",) if is_regression else ()
    # a build the records already there conflict with is refused here, before anything is converted
    with records_lib.StagedFiles(output_dir, CLASSIFIER_KIND, header, build) as staged:
        split_entries = {}
        for s in splits:
            exs = examples[s]
            n = len(exs)
            n_pad = 0 if s == "train" else records_lib.pad_count(n, eval_batch_size)
            order = (np.random.default_rng([seed, 7919]).permutation(n) if s == "train"
                     else np.arange(n))
            stats = {"truncated": 0, "segments": 0}

            def records():
                for start in range(0, n, records_lib.CONVERT_CHUNK):
                    idx = order[start:start + records_lib.CONVERT_CHUNK]
                    f = convert_examples(tok, [exs[i] for i in idx], label_list, is_regression,
                                         max_seq_length, max_segments)
                    f["example_index"] = idx.astype(np.int32)
                    stats["truncated"] += int(f.pop("truncated").sum())
                    stats["segments"] += int(f.pop("num_segments").sum())
                    yield from records_lib.unstack(f)
                for _ in range(n_pad):
                    yield {k: v[0] for k, v in dummy.items()}

            sources = split_sources(exs)
            if not n:
                raise DataError(f"{processor.name} {s}: no examples in {data_dir} "
                                f"({', '.join(sources) or 'no rows read'}); check the split's file")
            entry = records_lib.write_split_records(staged, s, records(), float_keys, [ex.guid for ex in exs])
            has_labels = any(ex.label is not None for ex in exs)
            entry.update({
                "num_examples": n, "num_padding": n_pad, "num_truncated": stats["truncated"],
                **({"mean_segments": round(stats["segments"] / n, 3)} if max_segments > 1 else {}),
                "num_skipped_rows": processor.num_skipped(s),
                "has_labels": has_labels, "text_pair": any(bool(ex.text_b) for ex in exs),
                "shuffled": s == "train",
                "pad_to_multiple": 0 if s == "train" else int(eval_batch_size),
                "num_source_files": len(sources),
                "inputs": record_inputs.input_digests(sources),
                "sources": sources[:10] + (["..."] if len(sources) > 10 else []),
            })
            if has_labels and not is_regression:
                counts = np.bincount(labels[s], minlength=len(label_list))
                entry["label_counts"] = {lab: int(c) for lab, c in zip(label_list, counts)}
            split_entries[s] = entry
            if log:
                skipped = (f", {processor.num_skipped(s)} short rows skipped"
                           if processor.num_skipped(s) else "")
                segs = (f", {stats['segments'] / n:.2f} of {max_segments} segments on average"
                        if max_segments > 1 else "")
                log(f"{s}: {n} examples (+{n_pad} padding), {stats['truncated']} truncated{segs}"
                    f"{skipped} -> "
                    f"{os.path.join(output_dir, entry['file'])}")
        manifest = staged.commit(split_entries)
    if log:
        log(f"manifest.json written ({time.time() - t0:.1f} s)")
    return manifest


# ---- reader ---------------------------------------------------------------------------------

def parse_classifier_batch(serialized, max_seq_length: int, is_regression: bool, max_segments: int = 1):
    """Batch of serialized records [B] -> the reader's dict (see `classifier_dataset`)."""
    import tensorflow as tf

    L = max_seq_length * max_segments
    spec = {k: tf.io.FixedLenFeature([L], tf.int64)
            for k in ("input_ids", "segment_ids", "attention_mask")}
    spec["label"] = tf.io.FixedLenFeature([1], tf.float32 if is_regression else tf.int64)
    spec["is_real_example"] = tf.io.FixedLenFeature([1], tf.int64)
    spec["example_index"] = tf.io.FixedLenFeature([1], tf.int64)
    f = tf.io.parse_example(serialized, spec)
    shaped = ((lambda x: x) if max_segments == 1
              else (lambda x: tf.reshape(x, [-1, max_segments, max_seq_length])))
    return {
        "input_ids": shaped(tf.cast(f["input_ids"], tf.int32)),
        "segment_ids": shaped(tf.cast(f["segment_ids"], tf.int32)),
        "attention_mask": shaped(tf.cast(f["attention_mask"], tf.float32)),
        "label": tf.cast(f["label"][:, 0], tf.float32 if is_regression else tf.int32),
        "is_real_example": tf.cast(f["is_real_example"][:, 0], tf.float32),
        "example_index": tf.cast(f["example_index"][:, 0], tf.int32),
    }


def read_classifier_manifest(record_dir: str) -> Dict[str, Any]:
    return manifest_lib.read_manifest(record_dir, kind=CLASSIFIER_KIND)


def read_guids(record_dir: str, split: str) -> List[str]:
    """Example ids of `split` (GLUE `index`/`id` column, file name, or `<split>-<row>`),
    indexed by `example_index`."""
    return records_lib.read_split_guids(record_dir, split, CLASSIFIER_KIND)


def classifier_dataset(record_dir: str, batch_size: int, is_training: bool,
                       max_seq_length: int, spiece_model: Optional[str] = None, *,
                       split: Optional[str] = None, seed: Optional[int] = 0,
                       drop_remainder: bool = True, repeat: Optional[bool] = None,
                       shuffle_buffer: int = 2048, spiece_sha256: Optional[str] = None,
                       task: Optional[str] = None, uncased: Optional[bool] = None,
                       input_context=None, max_segments: int = 1):
    """tf.data pipeline over a classifier record directory.

    Args:
      record_dir: output of `build_classifier_records`.
      batch_size: examples per batch (per input pipeline with `input_context`).
      is_training: shuffle + repeat (padding examples dropped); else file order, padded with
        dummy examples to whole batches (`is_real_example` 0) so metrics are exact.
      max_seq_length, spiece_model / spiece_sha256, task, uncased: checked against the
        manifest (ManifestError naming the field); None = not checked.
      split: default "train" when training, else "dev".
      repeat: None = repeat when training only.
      max_segments: S, checked against the records; S > 1 gives `[B, S, L]` id tensors.
    Yields dicts (static shapes when `drop_remainder`):
      `input_ids` int32 [B, L]; `segment_ids` int32 [B, L] (0 A, 1 B, 2 CLS, 4 pad);
      `attention_mask` float32 [B, L] (1 = real token, 0 = padding) ([B, S, L] each for
      documents of S > 1 segments); `label` int32 [B]
      (float32 [B] for regression); `is_real_example` float32 [B] (0 = padding example);
      `example_index` int32 [B] (line of `read_guids(record_dir, split)`, -1 = padding).
    """
    m = read_classifier_manifest(record_dir)
    records_lib.check_reader(m, ClassifierBuild, max_seq_length=max_seq_length, spiece_model=spiece_model,
                             spiece_sha256=spiece_sha256, task=task, uncased=uncased, max_segments=max_segments)
    split = split or ("train" if is_training else "dev")
    path = records_lib.split_record_file(m, split)
    e = m["splits"][split]
    reg = bool(m["is_regression"])
    dummy = padding_features(pack_ids([], None, max_seq_length * max_segments), 1, reg)
    dummy = records_lib.serialize_features({k: v[0] for k, v in dummy.items()}, ("label",) if reg else ())
    return records_lib.records_dataset(
        path, e["num_records"], e["num_padding"] > 0,
        lambda s: parse_classifier_batch(s, max_seq_length, reg, max_segments), dummy, batch_size,
        is_training, seed=seed, drop_remainder=drop_remainder, repeat=repeat,
        shuffle_buffer=shuffle_buffer, input_context=input_context)


def make_classifier_dataset_fn(record_dir: str, global_batch_size: int, is_training: bool,
                               max_seq_length: int, **kwargs) -> Callable:
    """`dataset_fn(input_context)` for `strategy.distribute_datasets_from_function`; each
    pipeline yields per-replica batches (keyword arguments as `classifier_dataset`)."""

    def dataset_fn(input_context):
        per_replica = input_context.get_per_replica_batch_size(global_batch_size)
        return classifier_dataset(record_dir, per_replica, is_training, max_seq_length,
                                  input_context=input_context, **kwargs)

    return dataset_fn

