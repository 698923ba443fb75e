"""RACE-format multiple choice: reading, packing per choice, records, reader.

Input (the original `run_race.py`): `<data_dir>/<split>/{middle,high}/*.txt|*.json`, one JSON
article per file: `{"article": str, "questions": [str], "options": [[4 str]], "answers":
["A".."D"]}` (`answers` may be absent in `test*` splits: unlabeled). A split folder holding
the article files directly, with no middle/high folders (e.g. shared/data/labeled/
mc_wordnet/{train,dev}), is read as one flat level. `level`: 0 middle, 1 high, -1 flat.

Packing, for each of the 4 options of a question (`L = max_seq_length`):
  qa    = question with every "_" replaced by the option if it has one (cloze), else
          question + " " + option;
  qa ids: the LAST `max_qa_length` ids (`qa_truncation="tail"`, the original's behaviour and
          the default) or the first ones (`"head"`);
  context ids: the first `L - 3 - len(qa ids)` article ids when the pair is too long;
  tokens: context <sep> qa <sep> <cls>, LEFT-padded with id 0; segment ids 0 context (+<sep>),
          1 qa (+<sep>), 2 <cls>, 4 padding; attention_mask 1 = real token, 0 = padding.
Every option is packed from a fresh copy of the article ids: the original's aliasing bug
(#204: `tokens = tokens_context` then `append`/`extend`, so that options 2-4 saw the
earlier options when the article was not truncated) is fixed.

Records: `<split>.tfrecord` (+ `<split>.guids.txt`, + `manifest.json` of kind `xlnet_race`),
int64 features `input_ids`, `segment_ids`, `attention_mask` [4*L] (choice-major),
`label`, `level`, `is_real_example`, `example_index` [1]; the train split shuffled (seeded),
other splits padded with dummy questions to a multiple of `eval_batch_size`.
Reader: `race_dataset` (shapes in its docstring). No absl flags here (CLI:
`tfrecords/build_race.py`).
"""

from __future__ import annotations

import dataclasses
import json
import os
import time
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np

from tfrecords import manifest as manifest_lib
from tfrecords import record_inputs
from tfrecords import records as records_lib
from tfrecords.records import DataError
from xlnet_tf.artifacts.text_settings import TextSettings
from xlnet_tf.text import tokenization
from xlnet_tf.text import layout, packing

RACE_KIND = "xlnet_race"
NUM_CHOICES = 4
LEVELS = ("middle", "high")  # level ids 0, 1
FLAT_LEVEL = -1
QA_TRUNCATIONS = ("tail", "head")
OUTPUT_NAMES = ("input_ids", "segment_ids", "attention_mask", "label", "level",
                "is_real_example", "example_index")


@dataclasses.dataclass
class RaceExample:
    """One question: the article, its 4 `qa` strings, `label` 0..3 (None = unlabeled),
    `level` (0 middle, 1 high, -1 flat), `source` `path#question`."""

    guid: str
    context: str
    qa_list: List[str]
    label: Optional[int]
    level: int
    source: str


make_qa = layout.choice_text  # the choice text: a cloze `_` filled by the option, else question + " " + option


# ---- reading --------------------------------------------------------------------------------

def read_article(path: str, labeled: bool = True) -> Dict[str, Any]:
    """Load and check one article file; DataError naming the file (and line) otherwise."""
    with open(path, "rb") as f:
        data = f.read()
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        line = data[:e.start].count(b"\n") + 1
        raise DataError(f"{path}:{line}: invalid UTF-8 ({e.reason})") from None
    if not text.strip():
        raise DataError(f"{path}: empty file")
    try:
        obj = json.loads(text)
    except json.JSONDecodeError as e:
        raise DataError(f"{path}:{e.lineno}: invalid JSON ({e.msg})") from None
    if not isinstance(obj, dict):
        raise DataError(f"{path}: expected a JSON object, found {type(obj).__name__}")
    keys = ("article", "questions", "options") + (("answers",) if labeled else ())
    for key in keys:
        if key not in obj:
            raise DataError(f"{path}: missing key {key!r}")
    if not isinstance(obj["article"], str):
        raise DataError(f"{path}: 'article' must be a string")
    qs, opts = obj["questions"], obj["options"]
    answers = obj.get("answers")
    if not isinstance(qs, list) or not isinstance(opts, list) or len(qs) != len(opts):
        raise DataError(f"{path}: 'questions' and 'options' must be lists of the same length")
    if answers is not None and (not isinstance(answers, list) or len(answers) != len(qs)):
        raise DataError(f"{path}: 'answers' must be a list with one letter per question "
                        f"({len(qs)})")
    for i, (q, o) in enumerate(zip(qs, opts)):
        if not isinstance(q, str):
            raise DataError(f"{path}: question {i} is not a string")
        if not isinstance(o, list) or len(o) != NUM_CHOICES or \
                not all(isinstance(x, str) for x in o):
            raise DataError(f"{path}: question {i}: options must be {NUM_CHOICES} strings, "
                            f"found {o!r}"[:300])
        if answers is not None and answers[i] not in ("A", "B", "C", "D"):
            raise DataError(f"{path}: question {i}: answer {answers[i]!r} is not one of "
                            "A, B, C, D")
    return obj


def _article_files(directory: str) -> List[str]:
    names = sorted(n for n in os.listdir(directory)
                   if not n.startswith(".") and n.endswith((".txt", ".json"))
                   and os.path.isfile(os.path.join(directory, n)))
    if not names:
        raise DataError(f"{directory}: no article files (*.txt or *.json)")
    return names


def split_layout(data_dir: str, split: str, levels: Optional[Sequence[str]] = None
                 ) -> List[Tuple[str, int, str]]:
    """`[(directory, level id, guid prefix)]` of a split: its middle/high folders (those in
    `levels`; None = those present), or the split folder itself when it has neither."""
    split_dir = os.path.join(data_dir, split)
    if not os.path.isdir(split_dir):
        raise DataError(f"{split_dir}: directory not found (RACE layout: "
                        "<data_dir>/<split>/{middle,high}/*.txt, or the article files "
                        "directly in <data_dir>/<split>/)")
    present = [lv for lv in LEVELS if os.path.isdir(os.path.join(split_dir, lv))]
    if not present:
        if levels is not None and list(levels) != list(LEVELS):
            raise DataError(f"{split_dir}: no middle/high folders, cannot select levels "
                            f"{list(levels)}")
        return [(split_dir, FLAT_LEVEL, "")]
    wanted = present if levels is None else list(levels)
    out = []
    for lv in wanted:
        if lv not in LEVELS:
            raise ValueError(f"unknown level {lv!r}; levels: {', '.join(LEVELS)}")
        d = os.path.join(split_dir, lv)
        if not os.path.isdir(d):
            raise DataError(f"{d}: directory not found")
        out.append((d, LEVELS.index(lv), lv + "/"))
    return out


def read_race_split(data_dir: str, split: str, levels: Optional[Sequence[str]] = None
                    ) -> List[RaceExample]:
    """All questions of a split, in (level, file name, question) order."""
    labeled = not split.startswith("test")
    out = []
    for directory, level, prefix in split_layout(data_dir, split, levels):
        for name in _article_files(directory):
            path = os.path.join(directory, name)
            obj = read_article(path, labeled=labeled)
            answers = obj.get("answers")
            for i, q in enumerate(obj["questions"]):
                out.append(RaceExample(
                    guid=f"{prefix}{name}#{i}", context=obj["article"],
                    qa_list=[layout.choice_text(q, o) for o in obj["options"][i]],
                    label=None if answers is None else ord(answers[i]) - ord("A"),
                    level=level, source=f"{path}#question {i}"))
    if not out:
        raise DataError(f"{os.path.join(data_dir, split)}: no questions")
    return out


# ---- packing --------------------------------------------------------------------------------

def _check_lengths(max_seq_length: int, max_qa_length: int, qa_truncation: str) -> None:
    if qa_truncation not in QA_TRUNCATIONS:
        raise ValueError(f"qa_truncation must be one of {QA_TRUNCATIONS}, got "
                         f"{qa_truncation!r}")
    if not isinstance(max_seq_length, (int, np.integer)) or max_seq_length < 4:
        raise ValueError(f"max_seq_length must be an integer >= 4, got {max_seq_length!r}")
    if not 1 <= max_qa_length <= max_seq_length - 3:
        raise ValueError(f"max_qa_length must be in [1, max_seq_length - 3 = "
                         f"{max_seq_length - 3}], got {max_qa_length}")


def pack_choice(context_ids: Sequence[int], qa_ids: Sequence[int], max_seq_length: int,
                max_qa_length: int, qa_truncation: str = "tail") -> Dict[str, np.ndarray]:
    """One choice: `context <sep> qa <sep> <cls>`, left-padded (module docstring).

    Returns `input_ids` int32 [L], `segment_ids` int32 [L] (0 context, 1 qa, 2 CLS, 4 pad),
    `attention_mask` float32 [L] (1 = real token). The inputs are not modified.
    """
    _check_lengths(max_seq_length, max_qa_length, qa_truncation)
    return packing.pack_choice(context_ids, qa_ids, max_seq_length, max_qa_length, qa_truncation)[0]


def pack_choices(context_ids: Sequence[int], qa_ids_list: Sequence[Sequence[int]],
                 max_seq_length: int, max_qa_length: int, qa_truncation: str = "tail"
                 ) -> Dict[str, np.ndarray]:
    """All choices of one question: the `pack_choice` arrays stacked to [C, L]."""
    _check_lengths(max_seq_length, max_qa_length, qa_truncation)
    packed = [packing.pack_choice(context_ids, qa, max_seq_length, max_qa_length, qa_truncation)[0]
              for qa in qa_ids_list]
    return {k: np.stack([p[k] for p in packed]) for k in packed[0]}


def pack_race_example(tokenizer: tokenization.XLNetTokenizer, context: str,
                      qa_list: Sequence[str], max_seq_length: int, max_qa_length: int,
                      qa_truncation: str = "tail") -> Dict[str, np.ndarray]:
    """Tokenize the article and the choice texts, then `pack_choices` ([C, L] arrays)."""
    return pack_choices(tokenizer.encode(context), [tokenizer.encode(q) for q in qa_list],
                        max_seq_length, max_qa_length, qa_truncation)


def convert_race_examples(tokenizer: tokenization.XLNetTokenizer,
                          examples: Sequence[RaceExample], max_seq_length: int,
                          max_qa_length: int, qa_truncation: str = "tail"
                          ) -> Dict[str, np.ndarray]:
    """Examples -> stacked features in example order: `input_ids`, `segment_ids` int32
    [N, 4, L], `attention_mask` float32 [N, 4, L], `label`, `level` int32 [N] (unlabeled: 0),
    `is_real_example` float32 [N], `example_index` int32 [N], `truncated` bool [N]."""
    _check_lengths(max_seq_length, max_qa_length, qa_truncation)
    n, L = len(examples), max_seq_length
    contexts = sorted({ex.context for ex in examples})
    ctx_ids = dict(zip(contexts, tokenizer.encode_batch(contexts)))
    qa_ids = tokenizer.encode_batch([qa for ex in examples for qa in ex.qa_list])
    out = {"input_ids": np.zeros([n, NUM_CHOICES, L], np.int32),
           "segment_ids": np.zeros([n, NUM_CHOICES, L], np.int32),
           "attention_mask": np.zeros([n, NUM_CHOICES, L], np.float32),
           "truncated": np.zeros([n], bool)}
    for k, ex in enumerate(examples):
        ctx = ctx_ids[ex.context]
        for j in range(NUM_CHOICES):
            f, cut = packing.pack_choice(ctx, qa_ids[k * NUM_CHOICES + j], L, max_qa_length,
                                  qa_truncation)
            for name, v in f.items():
                out[name][k, j] = v
            out["truncated"][k] |= cut
    out["label"] = np.array([ex.label or 0 for ex in examples], np.int32).reshape([n])
    out["level"] = np.array([ex.level for ex in examples], np.int32).reshape([n])
    out["is_real_example"] = np.ones([n], np.float32)
    out["example_index"] = np.arange(n, dtype=np.int32)
    return out


def padding_example(max_seq_length: int) -> Dict[str, np.ndarray]:
    """A dummy question (arrays without batch axis): every choice `<sep> <sep> <cls>`,
    `is_real_example` 0, `example_index` -1, label 0, level -1."""
    f = pack_choices([], [[]] * NUM_CHOICES, max_seq_length, 1)
    f.update({"label": np.int32(0), "level": np.int32(FLAT_LEVEL),
              "is_real_example": np.float32(0), "example_index": np.int32(-1)})
    return f


# ---- records --------------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class RaceBuild:
    """What shapes a multiple-choice record set, recorded whole in its manifest and compared whole on reuse.

    text: the tokenization. task: the data set's name (race, mc_wordnet, ...). max_seq_length: tokens per choice;
    max_qa_length, qa_truncation: how question + option are cut. num_choices. levels: the levels read (None =
    every level present)."""

    text: TextSettings
    task: str
    max_seq_length: int
    max_qa_length: int
    qa_truncation: str
    num_choices: int
    levels: Optional[Tuple[str, ...]]


def race_build(spiece_model: str, *, max_seq_length: int = 512, max_qa_length: int = 128,
               qa_truncation: str = "tail", levels: Optional[Sequence[str]] = None, uncased: bool = False,
               keep_accents: bool = False, task: str = "race") -> RaceBuild:
    """The settings a build with these options makes; checks them, writes nothing."""
    _check_lengths(max_seq_length, max_qa_length, qa_truncation)
    return RaceBuild(TextSettings.of_model(spiece_model, uncased, keep_accents), task, int(max_seq_length),
                     int(max_qa_length), qa_truncation, NUM_CHOICES, None if levels is None else tuple(levels))


def build_race_records(data_dir: str, spiece_model: str, output_dir: str, *,
                       max_seq_length: int = 512, max_qa_length: int = 128,
                       qa_truncation: str = "tail", splits: Sequence[str] = ("train", "dev"),
                       levels: Optional[Sequence[str]] = None, uncased: bool = False,
                       keep_accents: bool = False, eval_batch_size: int = 32, seed: int = 0,
                       task: str = "race", log: Optional[Callable[[str], None]] = None
                       ) -> Dict[str, Any]:
    """Build `<output_dir>/<split>.tfrecord` per split plus `manifest.json`.

    `levels`: e.g. ("high",) for the original's `--high_only`; None = every level present.
    The train split is shuffled with `seed`; other splits are padded with dummy questions to
    a multiple of `eval_batch_size` (0 = no padding). DataError (file, line) on bad input.
    """
    t0 = time.time()
    _check_lengths(max_seq_length, max_qa_length, qa_truncation)
    if not splits or len(set(splits)) != len(splits):
        raise ValueError(f"splits must be distinct and non-empty: {list(splits)}")
    tok = tokenization.XLNetTokenizer(spiece_model, uncased=uncased, keep_accents=keep_accents)
    build = race_build(spiece_model, max_seq_length=max_seq_length, max_qa_length=max_qa_length,
                       qa_truncation=qa_truncation, levels=levels, uncased=uncased, keep_accents=keep_accents,
                       task=task)
    examples = {s: read_race_split(data_dir, s, levels) for s in splits}  # check all first
    L = max_seq_length
    header = {
        "kind": RACE_KIND,
        "format_version": manifest_lib.FORMAT_VERSION,
        "spiece_model": records_lib.spiece_entry(spiece_model, tok),
        "data_dir": os.path.abspath(data_dir),
        "seed": int(seed),
        "schema": {
            "input_ids": f"int64[{NUM_CHOICES}*{L}] choice-major; each: context <sep> qa <sep> "
                         "<cls>, left-padded with 0",
            "segment_ids": f"int64[{NUM_CHOICES}*{L}] 0 context (+<sep>), 1 qa (+<sep>), "
                           "2 CLS, 4 pad",
            "attention_mask": f"int64[{NUM_CHOICES}*{L}] 1 real token, 0 padding",
            "label": "int64[1] 0..3 (A..D)",
            "level": "int64[1] 0 middle, 1 high, -1 flat layout / padding",
            "is_real_example": "int64[1] 0 for padding examples",
            "example_index": "int64[1] line of the guids file; -1 padding",
        },
    }
    dummy = padding_example(max_seq_length)
    # a build the records already there conflict with is refused here, before anything is converted
    with records_lib.StagedFiles(output_dir, RACE_KIND, header, build) as staged:
        entries = {}
        for s in splits:
            exs = examples[s]
            n = len(exs)
            n_pad = 0 if s == "train" else records_lib.pad_count(n, eval_batch_size)
            order = (np.random.default_rng([seed, 7919]).permutation(n) if s == "train"
                     else np.arange(n))
            stats = {"truncated": 0}

            def records():
                for start in range(0, n, records_lib.CONVERT_CHUNK // NUM_CHOICES):
                    idx = order[start:start + records_lib.CONVERT_CHUNK // NUM_CHOICES]
                    f = convert_race_examples(tok, [exs[i] for i in idx], max_seq_length,
                                              max_qa_length, qa_truncation)
                    f["example_index"] = idx.astype(np.int32)
                    stats["truncated"] += int(f.pop("truncated").sum())
                    yield from records_lib.unstack(f)
                for _ in range(n_pad):
                    yield dummy

            sources = split_sources(exs)
            if not n:
                raise DataError(f"RACE {s}: no questions under {data_dir} for this split; check its directory")
            entry = records_lib.write_split_records(staged, s, records(), (), [ex.guid for ex in exs])
            lv = np.array([ex.level for ex in exs])
            has_labels = any(ex.label is not None for ex in exs)
            entry.update({
                "num_examples": n, "num_padding": n_pad, "num_truncated": stats["truncated"],
                "has_labels": has_labels, "shuffled": s == "train",
                "pad_to_multiple": 0 if s == "train" else int(eval_batch_size),
                "layout": "flat" if (lv == FLAT_LEVEL).all() else "middle/high",
                "level_counts": {name: int((lv == i).sum()) for i, name in
                                 [(0, "middle"), (1, "high"), (FLAT_LEVEL, "flat")]
                                 if (lv == i).any()},
                "num_articles": len(sources),
                "inputs": record_inputs.input_digests(sources),
            })
            if has_labels:
                counts = np.bincount([ex.label for ex in exs], minlength=NUM_CHOICES)
                entry["label_counts"] = {"ABCD"[i]: int(c) for i, c in enumerate(counts)}
            entries[s] = entry
            if log:
                log(f"{s}: {n} questions (+{n_pad} padding), {stats['truncated']} truncated -> "
                    f"{os.path.join(output_dir, entry['file'])}")
        manifest = staged.commit(entries)
    if log:
        log(f"manifest.json written ({time.time() - t0:.1f} s)")
    return manifest


# ---- reader ---------------------------------------------------------------------------------

def parse_race_batch(serialized, max_seq_length: int):
    """Batch of serialized records [B] -> the reader's dict (see `race_dataset`)."""
    import tensorflow as tf

    n = NUM_CHOICES * max_seq_length
    spec = {k: tf.io.FixedLenFeature([n], tf.int64)
            for k in ("input_ids", "segment_ids", "attention_mask")}
    spec.update({k: tf.io.FixedLenFeature([1], tf.int64)
                 for k in ("label", "level", "is_real_example", "example_index")})
    f = tf.io.parse_example(serialized, spec)
    shape = [-1, NUM_CHOICES, max_seq_length]
    return {
        "input_ids": tf.reshape(tf.cast(f["input_ids"], tf.int32), shape),
        "segment_ids": tf.reshape(tf.cast(f["segment_ids"], tf.int32), shape),
        "attention_mask": tf.reshape(tf.cast(f["attention_mask"], tf.float32), shape),
        "label": tf.cast(f["label"][:, 0], tf.int32),
        "level": tf.cast(f["level"][:, 0], tf.int32),
        "is_real_example": tf.cast(f["is_real_example"][:, 0], tf.float32),
        "example_index": tf.cast(f["example_index"][:, 0], tf.int32),
    }


def split_sources(examples) -> List[str]:
    """The article files a split's questions were read from (their `source` is `path#question i`)."""
    return sorted({ex.source.split("#")[0] for ex in examples})


def read_race_manifest(record_dir: str) -> Dict[str, Any]:
    return manifest_lib.read_manifest(record_dir, kind=RACE_KIND)


def race_dataset(record_dir: str, batch_size: int, is_training: bool, max_seq_length: int,
                 spiece_model: Optional[str] = None, *, split: Optional[str] = None,
                 max_qa_length: Optional[int] = None, qa_truncation: Optional[str] = None,
                 seed: Optional[int] = 0, drop_remainder: bool = True,
                 repeat: Optional[bool] = None, shuffle_buffer: int = 2048,
                 spiece_sha256: Optional[str] = None, uncased: Optional[bool] = None,
                 input_context=None):
    """tf.data pipeline over a RACE record directory (arguments as
    `classifier_data.classifier_dataset`; `max_qa_length`/`qa_truncation` are checked against
    the manifest when given).

    Yields dicts (static shapes when `drop_remainder`), C = 4 choices:
      `input_ids` int32 [B, C, L]; `segment_ids` int32 [B, C, L] (0 context, 1 qa, 2 CLS,
      4 pad); `attention_mask` float32 [B, C, L] (1 = real token, 0 = padding); `label`
      int32 [B] (0..3); `level` int32 [B] (0 middle, 1 high, -1 flat/padding);
      `is_real_example` float32 [B] (0 = padding); `example_index` int32 [B] (-1 = padding).
    """
    m = read_race_manifest(record_dir)
    records_lib.check_reader(m, RaceBuild, max_seq_length=max_seq_length, spiece_model=spiece_model,
                             spiece_sha256=spiece_sha256, max_qa_length=max_qa_length, qa_truncation=qa_truncation,
                             uncased=uncased)
    split = split or ("train" if is_training else "dev")
    path = records_lib.split_record_file(m, split)
    e = m["splits"][split]
    dummy = records_lib.serialize_features(padding_example(max_seq_length))
    return records_lib.records_dataset(
        path, e["num_records"], e["num_padding"] > 0,
        lambda s: parse_race_batch(s, max_seq_length), dummy, batch_size, is_training,
        seed=seed, drop_remainder=drop_remainder, repeat=repeat,
        shuffle_buffer=shuffle_buffer, input_context=input_context)


def read_race_guids(record_dir: str, split: str) -> List[str]:
    """Question ids of `split` (`[level/]file#question`), indexed by `example_index`."""
    return records_lib.read_split_guids(record_dir, split, RACE_KIND)
