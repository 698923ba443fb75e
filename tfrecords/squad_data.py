"""SQuAD v1.1 / v2.0 span QA: examples -> features -> records, side files, reader.

Examples come from `squad_examples.py` (JSON -> `SquadExample`, skips counted by reason); each paragraph is
tokenized once with character offsets into the ORIGINAL context (`xlnet_tf.text.offsets`: XLNet's
normalization and SentencePiece with every token's source span, so answers map to tokens and back
without shifting).

Features (the original `run_squad.py`, P first then Q), for `L = max_seq_length`:

    position        0 .. n-1        n       n+1 .. n+q   n+q+1   n+q+2   .. L-1
    input_ids       paragraph span  <sep>   query        <sep>   <cls>   0 (right padding)
    segment_ids     0 ...           0       1 ...        1       2       4 (SEG_ID_PAD)
    attention_mask  1 ...                                                 0      (1 = real token)
    p_mask          0 ...           1       1 ...        1       0       1      (1 = cannot be
                                                                                  in the answer)
    cls_index = n + q + 2

The query keeps its first `max_query_length` ids. The paragraph is cut into spans of at most
`L - q - 3` tokens advancing by `min(span length, doc_stride)`; `token_is_max_context` is BERT's
score `min(left, right) + 0.01 * span length`. Labels: `start_positions`/`end_positions` are
absolute positions in the feature (= paragraph-token index - span start); an impossible question,
or an answer not wholly inside the span, gives `start = end = cls_index` and `is_impossible = 1`.
The answer's tokens are the first and last paragraph tokens whose own character span overlaps
`[answer_start, answer_start + len(text))`.

Files in `output_dir` (`build_squad_records`): `train.tfrecord` (features of shuffled examples,
seeded), `<eval split>.tfrecord` (file order), for the eval split `<split>.features.npz` (what
post-processing needs, per feature and position: `tok_start_to_orig`, `tok_end_to_orig`,
`token_is_max_context`, ...) and `<split>.examples.json` (id, question, context, gold answers),
both written atomically, and `manifest.json` (kind `xlnet_squad`: version, lengths, SentencePiece
sha256, uncased, counts, skipped-by-reason). Record schema: int64 `input_ids`, `segment_ids`,
`attention_mask`, `p_mask` [L]; `cls_index`, `start_positions`, `end_positions`, `is_impossible`,
`unique_id` (= feature index = row of the side file), `is_real_example` [1].

Bad input (a question whose `answer_start` does not match its text, empty contexts, missing or
duplicate ids, lone surrogates, ...) is counted by reason (`squad_examples.SKIP_REASONS`, `WARNINGS`)
in the split's stats (and the manifest) and skipped, never a crash mid-run. Reader: `squad_dataset`.
No absl flags here (CLI: `tfrecords/build_squad.py`).
"""

from __future__ import annotations

import collections
import dataclasses
import io
import os
import time
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np

from tfrecords import manifest as manifest_lib
from tfrecords import records as records_lib
from tfrecords.records import DataError
from tfrecords.readers.squad_examples import (
    SplitStats,
    SquadExample,
    detect_version_2,
    load_squad_json,
    read_squad_examples,
)
from xlnet_tf import files as files_lib
from xlnet_tf.artifacts.text_settings import TextSettings
from xlnet_tf.text import packing, tokenization
from xlnet_tf.text.offsets import ParagraphTokens, tokenize_with_offsets

SQUAD_KIND = "xlnet_squad"
RECORD_NAMES = ("input_ids", "segment_ids", "attention_mask", "p_mask", "cls_index",
                "start_positions", "end_positions", "is_impossible", "unique_id",
                "is_real_example")
SEQUENCE_NAMES = ("input_ids", "segment_ids", "attention_mask", "p_mask")
TRAIN_SPLIT = "train"


# ---- features --------------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class SquadConfig:
    """Feature parameters (the original's flags)."""

    max_seq_length: int = 512
    doc_stride: int = 128
    max_query_length: int = 64
    version_2_with_negative: bool = True
    uncased: bool = False
    keep_accents: bool = False
    split_unknown: bool = True

    def validate(self) -> None:
        for name in ("max_seq_length", "doc_stride", "max_query_length"):
            v = getattr(self, name)
            if not isinstance(v, (int, np.integer)) or v < 1:
                raise DataError(f"{name} must be a positive integer, got {v!r}")
        if self.max_seq_length < self.max_query_length + 4:
            raise DataError(f"max_seq_length={self.max_seq_length} leaves no room for the "
                             f"paragraph: it must be >= max_query_length + 4 = "
                             f"{self.max_query_length + 4}")


@dataclasses.dataclass
class SquadFeature:
    """One window of one example. Sequences are [L]; `tok_start_to_orig`, `tok_end_to_orig`
    (int32, exclusive end) and `token_is_max_context` (bool) are [paragraph_len], for the
    feature positions `0 .. paragraph_len-1`."""

    unique_id: int
    example_index: int
    doc_span_index: int
    doc_span_start: int
    paragraph_len: int
    input_ids: np.ndarray
    segment_ids: np.ndarray
    attention_mask: np.ndarray
    p_mask: np.ndarray
    cls_index: int
    start_position: int
    end_position: int
    is_impossible: int
    tok_start_to_orig: np.ndarray
    tok_end_to_orig: np.ndarray
    token_is_max_context: np.ndarray

    def record(self) -> Dict[str, np.ndarray]:
        """The TFRecord features (arrays without a batch axis)."""
        return {"input_ids": self.input_ids, "segment_ids": self.segment_ids,
                "attention_mask": self.attention_mask, "p_mask": self.p_mask,
                "cls_index": np.int64(self.cls_index),
                "start_positions": np.int64(self.start_position),
                "end_positions": np.int64(self.end_position),
                "is_impossible": np.int64(self.is_impossible),
                "unique_id": np.int64(self.unique_id), "is_real_example": np.int64(1)}


def doc_spans(num_tokens: int, max_tokens_for_doc: int, doc_stride: int
              ) -> List[Tuple[int, int]]:
    """`(start, length)` windows over the paragraph tokens (the original's sliding window)."""
    spans = []
    start = 0
    while start < num_tokens:
        length = min(num_tokens - start, max_tokens_for_doc)
        spans.append((start, length))
        if start + length == num_tokens:
            break
        start += min(length, doc_stride)
    return spans


def max_context_span(spans: Sequence[Tuple[int, int]], num_tokens: int) -> np.ndarray:
    """int [num_tokens]: index of the span where each token has the most context (BERT's
    `min(left, right) + 0.01 * length`, the first span on ties)."""
    best = np.full([num_tokens], -1, np.int64)
    best_score = np.full([num_tokens], -np.inf)
    for k, (start, length) in enumerate(spans):
        pos = np.arange(start, start + length)
        score = np.minimum(pos - start, start + length - 1 - pos) + 0.01 * length
        better = score > best_score[pos]
        best[pos[better]] = k
        best_score[pos[better]] = score[better]
    return best


def convert_example(example: SquadExample, example_index: int, para: ParagraphTokens,
                    query_ids: Sequence[int], cfg: SquadConfig, first_unique_id: int,
                    stats: Optional[SplitStats] = None) -> List[SquadFeature]:
    """One example -> its features (one per window). The gold tokens come from
    `example.answer_span` (None: impossible or unknown -> CLS labels)."""
    stats = stats if stats is not None else SplitStats()
    q = list(query_ids)[:cfg.max_query_length]
    spans = doc_spans(len(para), cfg.max_seq_length - len(q) - 3, cfg.doc_stride)
    best = max_context_span(spans, len(para))
    gold = None
    if not example.is_impossible and example.answer_span is not None:
        gold = para.char_span_to_tokens(*example.answer_span)
        if gold is not None:
            a, b = example.answer_span
            if (int(para.char_start[gold[0]]), int(para.char_end[gold[1]])) != (a, b) and \
                    example.context[para.char_start[gold[0]]:para.char_end[gold[1]]].strip() != \
                    example.context[a:b].strip():
                stats.warn("answer_subword_boundary", example.qas_id)
    feats = []
    for k, (start, length) in enumerate(spans):
        packed = packing.pack_squad_window(para.ids[start:start + length], q, cfg.max_seq_length)
        cls_index = packed["cls_index"]
        if gold is not None and start <= gold[0] and gold[1] < start + length:
            sp, ep, imp = gold[0] - start, gold[1] - start, 0
        else:
            sp, ep, imp = cls_index, cls_index, 1
            if gold is not None:
                stats.counts["num_out_of_span_features"] += 1
        feats.append(SquadFeature(
            unique_id=first_unique_id + k, example_index=example_index, doc_span_index=k,
            doc_span_start=start, paragraph_len=length, input_ids=packed["input_ids"],
            segment_ids=packed["segment_ids"], attention_mask=packed["attention_mask"],
            p_mask=packed["p_mask"], cls_index=cls_index, start_position=sp, end_position=ep,
            is_impossible=imp, tok_start_to_orig=para.char_start[start:start + length].copy(),
            tok_end_to_orig=para.char_end[start:start + length].copy(),
            token_is_max_context=best[start:start + length] == k))
    return feats


class _Featurizer:
    """Tokenizes each paragraph once (cached by index, without piece strings) and the
    questions; counts failures."""

    def __init__(self, tokenizer: tokenization.XLNetTokenizer, cfg: SquadConfig,
                 stats: SplitStats):
        self.tok, self.cfg, self.stats = tokenizer, cfg, stats
        self._para: Dict[int, Any] = {}

    def paragraph(self, ex: SquadExample):
        key = ex.paragraph_index
        if key not in self._para:
            try:  # every paragraph is kept (a few int32 per token): train order is shuffled
                para = tokenize_with_offsets(self.tok, ex.context, self.cfg.split_unknown)
                self._para[key] = dataclasses.replace(para, pieces=[])
            except ValueError as e:
                reason = ("normalization_mismatch" if "normalization" in str(e)
                          else "tokenization_error")
                self._para[key] = reason
            except Exception:  # noqa: BLE001 - sentencepiece errors on odd input: count, go on
                self._para[key] = "tokenization_error"
        return self._para[key]

    def features(self, ex: SquadExample, example_index: int, first_unique_id: int,
                 is_training: bool) -> List[SquadFeature]:
        para = self.paragraph(ex)
        if isinstance(para, str):
            self.stats.skip(para, ex.qas_id)
            return []
        if not len(para) or not para.has_own_span.any():
            self.stats.skip("empty_paragraph_tokens", ex.qas_id)
            return []
        try:
            q = self.tok.encode(ex.question)
        except Exception:  # noqa: BLE001
            self.stats.skip("tokenization_error", ex.qas_id)
            return []
        if len(q) > self.cfg.max_query_length:
            self.stats.warn("query_truncated", ex.qas_id)
        if not ex.is_impossible and ex.answer_span is not None and \
                para.char_span_to_tokens(*ex.answer_span) is None:
            if is_training:
                self.stats.skip("answer_not_aligned", ex.qas_id)
                return []
            self.stats.warn("eval_answer_not_aligned", ex.qas_id)
            ex = dataclasses.replace(ex, answer_span=None)
        feats = convert_example(ex, example_index, para, q, self.cfg, first_unique_id,
                                self.stats)
        self.stats.counts["num_features"] += len(feats)
        self.stats.counts["num_multi_span_examples"] += len(feats) > 1
        self.stats.counts["max_features_per_example"] = max(
            self.stats.counts["max_features_per_example"], len(feats))
        return feats


def convert_examples(tokenizer: tokenization.XLNetTokenizer, examples: Sequence[SquadExample],
                     cfg: SquadConfig, is_training: bool, stats: Optional[SplitStats] = None
                     ) -> Tuple[List[SquadExample], List[SquadFeature]]:
    """Examples -> (kept examples, features), in memory (`unique_id` = feature index,
    `example_index` = index in the kept examples). Examples that cannot be featurized are
    skipped and counted."""
    cfg.validate()
    stats = stats if stats is not None else SplitStats()
    fz = _Featurizer(tokenizer, cfg, stats)
    kept: List[SquadExample] = []
    feats: List[SquadFeature] = []
    for ex in examples:
        f = fz.features(ex, len(kept), len(feats), is_training)
        if f:
            kept.append(ex)
            feats.extend(f)
    stats.counts["num_examples"] = len(kept)
    stats.counts["num_impossible"] = sum(ex.is_impossible for ex in kept)
    return kept, feats


def stack_eval_features(features: Sequence[SquadFeature], max_seq_length: int
                        ) -> Dict[str, np.ndarray]:
    """What post-processing needs, stacked by feature (`unique_id` = row):
    `unique_id`, `example_index`, `doc_span_index`, `doc_span_start`, `paragraph_len`,
    `cls_index`, `start_positions`, `end_positions`, `is_impossible` int32 [F];
    `tok_start_to_orig`, `tok_end_to_orig` int32 [F, L] (character span `[start, end)` in the
    example's context of the token at each feature position; -1 outside the paragraph);
    `token_is_max_context` bool [F, L] (False outside the paragraph)."""
    F_, L = len(features), max_seq_length
    out = {k: np.zeros([F_], np.int32) for k in (
        "unique_id", "example_index", "doc_span_index", "doc_span_start", "paragraph_len",
        "cls_index", "start_positions", "end_positions", "is_impossible")}
    out["tok_start_to_orig"] = np.full([F_, L], -1, np.int32)
    out["tok_end_to_orig"] = np.full([F_, L], -1, np.int32)
    out["token_is_max_context"] = np.zeros([F_, L], bool)
    for r, f in enumerate(features):
        if f.unique_id != r:
            raise ValueError(f"feature {r} has unique_id {f.unique_id}; expected its index")
        for k, v in (("unique_id", f.unique_id), ("example_index", f.example_index),
                     ("doc_span_index", f.doc_span_index), ("doc_span_start", f.doc_span_start),
                     ("paragraph_len", f.paragraph_len), ("cls_index", f.cls_index),
                     ("start_positions", f.start_position), ("end_positions", f.end_position),
                     ("is_impossible", f.is_impossible)):
            out[k][r] = v
        n = f.paragraph_len
        out["tok_start_to_orig"][r, :n] = f.tok_start_to_orig
        out["tok_end_to_orig"][r, :n] = f.tok_end_to_orig
        out["token_is_max_context"][r, :n] = f.token_is_max_context
    return out


def example_entries(examples: Sequence[SquadExample]) -> List[Dict[str, Any]]:
    """JSON-able examples for the side file (index = `example_index`)."""
    return [{"id": ex.qas_id, "title": ex.title, "question": ex.question,
             "context": ex.context, "answers": ex.answers, "is_impossible": ex.is_impossible}
            for ex in examples]


# ---- records and side files ------------------------------------------------------------------

def _write_npz(path: str, arrays: Dict[str, np.ndarray]) -> None:
    buf = io.BytesIO()
    np.savez_compressed(buf, **arrays)
    with open(path, "wb") as f:
        f.write(buf.getvalue())


def _write_json(path: str, values: Dict[str, Any]) -> None:
    """As `files.write_json_atomic` writes (same bytes), to `path` (a `StagedFiles` temporary name)."""
    with open(path, "w", encoding="utf-8") as f:
        f.write(files_lib.json_text(values))


def dummy_record(max_seq_length: int) -> Dict[str, np.ndarray]:
    """The padding record of eval batches: `<sep> <sep> <cls>`, `unique_id` -1,
    `is_real_example` 0."""
    p = packing.pack_squad_window([], [], max_seq_length)
    c = p.pop("cls_index")
    return {**p, "cls_index": np.int64(c), "start_positions": np.int64(c),
            "end_positions": np.int64(c), "is_impossible": np.int64(0),
            "unique_id": np.int64(-1), "is_real_example": np.int64(0)}


@dataclasses.dataclass(frozen=True)
class SquadBuild:
    """What shapes a SQuAD record set, recorded whole in its manifest and compared whole on reuse: the
    tokenization (`text`) and the feature parameters of `SquadConfig` other than the text's."""

    text: TextSettings
    max_seq_length: int
    doc_stride: int
    max_query_length: int
    version_2_with_negative: bool
    split_unknown: bool

    @classmethod
    def of(cls, cfg: SquadConfig, spiece_sha256: str) -> "SquadBuild":
        cfg.validate()
        return cls(TextSettings(spiece_sha256, cfg.uncased, cfg.keep_accents), int(cfg.max_seq_length),
                   int(cfg.doc_stride), int(cfg.max_query_length), cfg.version_2_with_negative, cfg.split_unknown)


def files_version_2(data: Dict[str, Dict[str, Any]], files: Dict[str, str]) -> bool:
    """Whether the loaded SQuAD files `data` (`{split: dataset}`, read from `files`) are SQuAD 2.0; DataError
    when they disagree."""
    detected = {s: detect_version_2(d) for s, d in data.items()}
    if len(set(detected.values())) > 1:
        raise DataError("the files are of different SQuAD versions ("
                        + ", ".join(f"{files[s]}: {'2.0' if v else '1.1'}" for s, v in detected.items())
                        + "); set version_2_with_negative")
    return next(iter(detected.values()))


def build_squad_records(spiece_model: str, output_dir: str, *, train_file: Optional[str] = None,
                        predict_file: Optional[str] = None, eval_split: str = "dev",
                        max_seq_length: int = 512, doc_stride: int = 128,
                        max_query_length: int = 64,
                        version_2_with_negative: Optional[bool] = None, uncased: bool = False,
                        keep_accents: bool = False, split_unknown: bool = True, seed: int = 0,
                        log: Optional[Callable[[str], None]] = None) -> Dict[str, Any]:
    """Build `train.tfrecord` from `train_file` and `<eval_split>.tfrecord` + side files from
    `predict_file` (either may be None), plus `manifest.json` (merged with an existing one built
    with the same parameters).

    `version_2_with_negative`: None = detected from the files (`version` 2.x or any
    `is_impossible`). Raises DataError for a missing / non-SQuAD file, files of different
    versions, or an `output_dir` built with other parameters; bad questions are counted.
    """
    t0 = time.time()
    if not train_file and not predict_file:
        raise ValueError("give train_file and/or predict_file")
    if eval_split == TRAIN_SPLIT or not eval_split or os.sep in eval_split:
        raise ValueError(f"bad eval split name {eval_split!r}")
    files = {s: f for s, f in ((TRAIN_SPLIT, train_file), (eval_split, predict_file)) if f}
    data = {s: load_squad_json(f) for s, f in files.items()}
    if version_2_with_negative is None:
        version_2_with_negative = files_version_2(data, files)
    cfg = SquadConfig(max_seq_length, doc_stride, max_query_length,
                      bool(version_2_with_negative), bool(uncased), bool(keep_accents),
                      bool(split_unknown))
    cfg.validate()
    tok = tokenization.XLNetTokenizer(spiece_model, uncased=uncased, keep_accents=keep_accents)
    header = {
        "kind": SQUAD_KIND,
        "format_version": manifest_lib.FORMAT_VERSION,
        "task": "squad",
        "version": "2.0" if cfg.version_2_with_negative else "1.1",
        "spiece_model": records_lib.spiece_entry(spiece_model, tok),
        "seed": int(seed),
        "layout": "P <sep> Q <sep> <cls>, right-padded with id 0; query = first "
                  "max_query_length ids; windows of L - len(Q) - 3 paragraph tokens "
                  "advancing by min(length, doc_stride)",
        "schema": {
            "input_ids": f"int64[{max_seq_length}] right-padded with 0",
            "segment_ids": f"int64[{max_seq_length}] 0 paragraph (+<sep>), 1 query (+<sep>), "
                           "2 <cls>, 4 padding",
            "attention_mask": f"int64[{max_seq_length}] 1 real token, 0 padding",
            "p_mask": f"int64[{max_seq_length}] 1 cannot be in the answer (<sep>, query, "
                      "padding), 0 paragraph and <cls>",
            "cls_index": "int64[1] position of <cls>",
            "start_positions": "int64[1] absolute position of the answer start (cls_index "
                               "when impossible or outside the window)",
            "end_positions": "int64[1] absolute position of the answer end (inclusive)",
            "is_impossible": "int64[1] 1 impossible question or answer outside the window",
            "unique_id": "int64[1] feature index (row of <split>.features.npz); -1 padding",
            "is_real_example": "int64[1] 0 for reader-side padding records",
        },
    }
    # a build the records already there conflict with is refused here, before anything is converted
    with records_lib.StagedFiles(output_dir, SQUAD_KIND, header, SquadBuild.of(cfg, tok.sha256)) as staged:
        entries = {}
        for split, path in files.items():
            t1 = time.time()
            training = split == TRAIN_SPLIT
            stats = SplitStats()
            examples = read_squad_examples(data[split], training, cfg.version_2_with_negative,
                                           stats)
            rec_path = os.path.join(output_dir, f"{split}.tfrecord")  # its final name
            entry: Dict[str, Any] = {"file": os.path.basename(rec_path),
                                     "source_file": os.path.abspath(path),
                                     "source_sha256": files_lib.file_sha256(path),
                                     "source_version": str(data[split].get("version", "")),
                                     "is_training": training}
            if training:
                order = np.random.default_rng([seed, 7919]).permutation(len(examples))
                fz = _Featurizer(tok, cfg, stats)
                tally = collections.Counter()

                def records():
                    for i in order:
                        ex = examples[i]
                        feats = fz.features(ex, tally["examples"], tally["features"], True)
                        tally["examples"] += bool(feats)
                        tally["impossible_examples"] += bool(feats) and ex.is_impossible
                        for f in feats:
                            tally["features"] += 1
                            tally["impossible_features"] += f.is_impossible
                            yield f.record()

                n, size = records_lib.write_records(staged.path(f"{split}.tfrecord"), records())
                stats.counts["num_examples"] = tally["examples"]
                stats.counts["num_impossible"] = tally["impossible_examples"]
                stats.counts["num_impossible_features"] = tally["impossible_features"]
                entry["shuffled"] = True
            else:
                kept_ex, feats = convert_examples(tok, examples, cfg, False, stats)
                n, size = records_lib.write_records(staged.path(f"{split}.tfrecord"),
                                                    (f.record() for f in feats))
                side = stack_eval_features(feats, max_seq_length)
                stats.counts["num_impossible_features"] = int(side["is_impossible"].sum())
                feat_file = f"{split}.features.npz"
                ex_file = f"{split}.examples.json"
                _write_npz(staged.path(feat_file), side)
                _write_json(
                    staged.path(ex_file),
                    {"version_2_with_negative": cfg.version_2_with_negative,
                     "examples": example_entries(kept_ex)})
                entry.update({"shuffled": False, "features_file": feat_file,
                              "examples_file": ex_file})
            if not n:
                read = stats.counts.get("num_questions_read", 0)
                raise DataError(f"{path}: no usable questions for the {split} split ({read} "
                                f"read, skipped: {dict(stats.skipped) or 'none'}); check the file")
            entry.update({"num_records": n, "num_bytes": size, **stats.to_dict(),
                          "inputs": {os.path.abspath(path): entry["source_sha256"]}})
            entries[split] = entry
            if log:
                sk = ", ".join(f"{k} {v}" for k, v in sorted(stats.skipped.items())) or "none"
                log(f"{split}: {stats.counts['num_questions_read']} questions -> "
                    f"{stats.counts['num_examples']} examples -> {n} features "
                    f"({time.time() - t1:.1f} s); skipped: {sk} -> {rec_path}")
        manifest = staged.commit(entries)
    if log:
        log(f"manifest.json written ({time.time() - t0:.1f} s)")
    return manifest


# ---- reader ----------------------------------------------------------------------------------

def parse_squad_batch(serialized, max_seq_length: int):
    """Batch of serialized records [B] -> the reader's dict (see `squad_dataset`)."""
    import tensorflow as tf

    spec = {k: tf.io.FixedLenFeature([max_seq_length], tf.int64) for k in SEQUENCE_NAMES}
    for k in RECORD_NAMES[len(SEQUENCE_NAMES):]:
        spec[k] = tf.io.FixedLenFeature([1], tf.int64)
    f = tf.io.parse_example(serialized, spec)
    out = {}
    for k in RECORD_NAMES:
        v = f[k] if k in SEQUENCE_NAMES else f[k][:, 0]
        floating = k in ("attention_mask", "p_mask", "is_impossible", "is_real_example")
        out[k] = tf.cast(v, tf.float32 if floating else tf.int32)
    return out


def read_squad_manifest(record_dir: str) -> Dict[str, Any]:
    return manifest_lib.read_manifest(record_dir, kind=SQUAD_KIND)


def squad_dataset(record_dir: str, batch_size: int, is_training: bool, max_seq_length: int,
                  spiece_model: Optional[str] = None, *, split: Optional[str] = None,
                  seed: Optional[int] = 0, drop_remainder: bool = True,
                  repeat: Optional[bool] = None, shuffle_buffer: int = 2048,
                  spiece_sha256: Optional[str] = None, doc_stride: Optional[int] = None,
                  max_query_length: Optional[int] = None, uncased: Optional[bool] = None,
                  version_2_with_negative: Optional[bool] = None, input_context=None):
    """tf.data pipeline over a SQuAD record directory (`build_squad_records`).

    Args:
      batch_size: features per batch (per input pipeline with `input_context`).
      is_training: shuffle (`shuffle_buffer`, `seed`) + repeat, `drop_remainder`; else file
        order, the last batch padded with dummy records (`is_real_example` 0, `unique_id` -1)
        so that no feature is dropped and shapes stay static.
      max_seq_length, spiece_model / spiece_sha256, doc_stride, max_query_length, uncased,
        version_2_with_negative: checked against the manifest (ManifestError naming the
        field); None = not checked.
      split: default "train" when training, else "dev".
    Yields dicts (static shapes when `drop_remainder`), `B` = batch_size, `L` = max_seq_length:
      `input_ids` int32 [B, L]; `segment_ids` int32 [B, L] (0 paragraph, 1 query, 2 CLS,
      4 pad); `attention_mask` float32 [B, L] (1 = real token); `p_mask` float32 [B, L]
      (1 = cannot be in the answer); `cls_index` int32 [B]; `start_positions`,
      `end_positions` int32 [B] (absolute positions, = cls_index when impossible);
      `is_impossible` float32 [B] (1 = no answer in this window); `unique_id` int32 [B]
      (feature index, -1 = padding); `is_real_example` float32 [B] (0 = padding).
    """
    m = read_squad_manifest(record_dir)
    records_lib.check_reader(m, SquadBuild, max_seq_length=max_seq_length, spiece_model=spiece_model,
                             spiece_sha256=spiece_sha256, doc_stride=doc_stride, max_query_length=max_query_length,
                             uncased=uncased, version_2_with_negative=version_2_with_negative)
    split = split or (TRAIN_SPLIT if is_training else "dev")
    path = records_lib.split_record_file(m, split)
    dummy = records_lib.serialize_features(dummy_record(max_seq_length))
    return records_lib.records_dataset(
        path, m["splits"][split]["num_records"], False,
        lambda s: parse_squad_batch(s, max_seq_length), dummy, batch_size, is_training,
        seed=seed, drop_remainder=drop_remainder, repeat=repeat, shuffle_buffer=shuffle_buffer,
        input_context=input_context)


def make_squad_dataset_fn(record_dir: str, global_batch_size: int, is_training: bool,
                          max_seq_length: int, **kwargs) -> Callable:
    """`dataset_fn(input_context)` for `strategy.distribute_datasets_from_function` (per-replica
    batches; keyword arguments as `squad_dataset`)."""

    def dataset_fn(input_context):
        per_replica = input_context.get_per_replica_batch_size(global_batch_size)
        return squad_dataset(record_dir, per_replica, is_training, max_seq_length,
                             input_context=input_context, **kwargs)

    return dataset_fn
