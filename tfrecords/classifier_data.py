"""Sequence classification / regression data: task processors, packing, records, reader.

Packing (the original `classifier_utils.convert_single_example`), for `L = max_seq_length`:

    position        0 .. p-1 | A_1 .. A_n  <sep> | B_1 .. B_m  <sep> | <cls>
    input_ids       0 .. 0   | ids of A    4     | ids of B    4     | 3
    segment_ids     4 .. 4   | 0 .. 0      0     | 1 .. 1      1     | 2
    attention_mask  0 .. 0   | 1 ...                                  1      (1 = real token)

LEFT padding with id 0 (`<unk>`, as the original) and segment id 4 (`SEG_ID_PAD`); `<cls>` is
always the last position (the "last" summary reads it). Without B (`text_b` None, or B
tokenizing to nothing, as the original's `if tokens_b:`) the `B <sep>` part is absent. Too
long inputs: a pair is cut by `truncate_seq_pair(a, b, L - 3)` (pop from the end of the
longer side, B on ties), a single text keeps its first `L - 2` ids.

Tasks (`get_processor`): the GLUE layouts `cola sst-2 mrpc sts-b qqp mnli_matched
mnli_mismatched qnli rte wnli` (official TSV files, test sets without labels), `imdb`
(aclImdb `{train,test}/{neg,pos}/*.txt`; dev = test/, as the original), `yelp2`/`yelp5`
(headerless CSV `"label","text"`; dev = test.csv, as the original), and `tsv`/`csv`: any
headed file `<data_dir>/<split>.tsv|csv` with configurable columns (auto: `text`, or
`sentence1`+`sentence2`, ...), labels given or collected from train, regression when asked
or when the train labels are non-integer numbers.

Records (`build_classifier_records`): `<output_dir>/<split>.tfrecord` (written to a temporary
name, then renamed), `<split>.guids.txt` (line k = the id of example_index k) and
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

import csv
import dataclasses
import math
import os
import time
from typing import Any, Callable, Dict, Iterable, Iterator, List, Optional, Sequence, Tuple

import numpy as np

from tfrecords import manifest as manifest_lib
from tfrecords import record_inputs
from xlnet_tf import tokenization
from xlnet_tf.errors import UserError
from xlnet_tf.tokenization import CLS_ID, SEG_ID_A, SEG_ID_B, SEG_ID_CLS, SEG_ID_PAD, SEP_ID

CLASSIFIER_KIND = "xlnet_classifier"
PAD_TOKEN_ID = 0  # the original left-pads with id 0, not <pad>
OUTPUT_NAMES = ("input_ids", "segment_ids", "attention_mask", "label", "is_real_example",
                "example_index")


class DataError(UserError):
    """Bad task input; the message names the file (and line) at fault."""


# ---- packing --------------------------------------------------------------------------------

def truncate_seq_pair(tokens_a: List[int], tokens_b: List[int], max_length: int) -> None:
    """In place: pop from the end of the longer list (B on ties) until both fit
    `max_length` (the original `_truncate_seq_pair`)."""
    while len(tokens_a) + len(tokens_b) > max_length:
        if len(tokens_a) > len(tokens_b):
            tokens_a.pop()
        else:
            tokens_b.pop()


def left_pad(tokens: List[int], segs: List[int], max_seq_length: int
             ) -> Dict[str, np.ndarray]:
    """Left-pad one packed sequence to `max_seq_length`: ids 0, segment 4, mask 0."""
    n = len(tokens)
    if n > max_seq_length:
        raise ValueError(f"packed sequence of {n} tokens exceeds max_seq_length "
                         f"{max_seq_length}")
    pad = max_seq_length - n
    ids = np.full([max_seq_length], PAD_TOKEN_ID, np.int32)
    seg = np.full([max_seq_length], SEG_ID_PAD, np.int32)
    mask = np.zeros([max_seq_length], np.float32)
    ids[pad:] = tokens
    seg[pad:] = segs
    mask[pad:] = 1.0
    return {"input_ids": ids, "segment_ids": seg, "attention_mask": mask}


def _check_length(max_seq_length: int, minimum: int = 3) -> None:
    if not isinstance(max_seq_length, (int, np.integer)) or max_seq_length < minimum:
        raise ValueError(f"max_seq_length must be an integer >= {minimum}, got "
                         f"{max_seq_length!r}")


def _pack(ids_a: Sequence[int], ids_b: Optional[Sequence[int]], max_seq_length: int
          ) -> Tuple[Dict[str, np.ndarray], bool]:
    """`pack_ids` plus whether anything was cut (`max_seq_length` = S * L for documents)."""
    tokens_a = list(ids_a)
    tokens_b = list(ids_b) if ids_b is not None and len(ids_b) else None  # `if tokens_b:`
    n_in = len(tokens_a) + (len(tokens_b) if tokens_b else 0)
    if tokens_b:
        truncate_seq_pair(tokens_a, tokens_b, max_seq_length - 3)
    elif len(tokens_a) > max_seq_length - 2:
        tokens_a = tokens_a[:max_seq_length - 2]
    truncated = len(tokens_a) + (len(tokens_b) if tokens_b else 0) < n_in
    tokens = tokens_a + [SEP_ID]
    segs = [SEG_ID_A] * len(tokens)
    if tokens_b:
        tokens += tokens_b + [SEP_ID]
        segs += [SEG_ID_B] * (len(tokens_b) + 1)
    tokens.append(CLS_ID)
    segs.append(SEG_ID_CLS)
    return left_pad(tokens, segs, max_seq_length), truncated


def pack_ids(ids_a: Sequence[int], ids_b: Optional[Sequence[int]], max_seq_length: int
             ) -> Dict[str, np.ndarray]:
    """Pack token ids as `A <sep> (B <sep>) <cls>`, left-padded (see the module docstring).

    Returns `input_ids` int32 [L], `segment_ids` int32 [L] (0 A, 1 B, 2 CLS, 4 pad),
    `attention_mask` float32 [L] (1 = real token, 0 = padding).
    """
    _check_length(max_seq_length)
    return _pack(ids_a, ids_b, max_seq_length)[0]


def pack_example(tokenizer: tokenization.XLNetTokenizer, text_a: str,
                 text_b: Optional[str], max_seq_length: int) -> Dict[str, np.ndarray]:
    """Tokenize (normalized as the tokenizer's `uncased`/`keep_accents`) and `pack_ids`."""
    ids_b = tokenizer.encode(text_b) if text_b else None
    return pack_ids(tokenizer.encode(text_a), ids_b, max_seq_length)


# ---- examples and file reading -------------------------------------------------------------

@dataclasses.dataclass
class InputExample:
    """One raw example. `label` is the raw label string (None = unlabeled, e.g. GLUE test);
    `source` is `path:line` (for error messages)."""

    guid: str
    text_a: str
    text_b: Optional[str] = None
    label: Optional[str] = None
    source: str = ""


def decode_lines(path: str) -> Iterator[str]:
    """Lines of a UTF-8 file (BOM dropped); DataError naming file and line otherwise."""
    if not os.path.isfile(path):
        raise DataError(f"{path}: file not found")
    with open(path, "rb") as f:
        for n, raw in enumerate(f, 1):
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as e:
                raise DataError(f"{path}:{n}: invalid UTF-8 at byte {e.start} of the line "
                                f"({e.reason})") from None
            if n == 1 and line.startswith("\ufeff"):
                line = line[1:]
            yield line


@dataclasses.dataclass
class Table:
    """A delimited file: `header` (None if headerless) and `rows` as (line, fields)."""

    path: str
    header: Optional[List[str]]
    rows: List[Tuple[int, List[str]]]

    def column(self, name_or_index) -> int:
        """Index of a column given by header name or position; DataError if absent."""
        if isinstance(name_or_index, int):
            return name_or_index
        if self.header is None:
            raise DataError(f"{self.path}: headerless file, column {name_or_index!r} must "
                            "be given by position")
        if name_or_index not in self.header:
            raise DataError(f"{self.path}:1: no column {name_or_index!r} in the header "
                            f"{self.header}")
        return self.header.index(name_or_index)

    def has_column(self, name_or_index) -> bool:
        if isinstance(name_or_index, int):
            return True
        return self.header is not None and name_or_index in self.header

    def field(self, line: int, fields: List[str], index: int, name) -> str:
        if not -len(fields) <= index < len(fields):
            raise DataError(f"{self.path}:{line}: {len(fields)} field(s), no column {name!r} "
                            f"(index {index})")
        return fields[index]


def read_table(path: str, delimiter: str = "\t", quoting: int = csv.QUOTE_NONE,
               has_header: bool = True, strict_columns: bool = False) -> Table:
    """Read a TSV (default: no quoting, as GLUE and shared/data) or CSV file.

    Blank lines are skipped. DataError for a missing file, invalid UTF-8, a CSV syntax error, a file
    without data rows, and (`strict_columns`: your own tsv/csv tasks) a row with more fields than the header,
    naming the file and line. GLUE files keep the original's reading (STS-B rows with stray columns, the label
    read at column -1).
    """
    csv.field_size_limit(2 ** 31 - 1)
    lines = decode_lines(path)
    reader = csv.reader(lines, delimiter=delimiter, quoting=quoting)
    header, rows, prev = None, [], 0
    try:
        for fields in reader:
            start, prev = prev + 1, reader.line_num
            if not fields or (len(fields) == 1 and not fields[0].strip()):
                continue
            fields = [f.rstrip("\r") for f in fields]
            if has_header and header is None:
                header = [f.strip() for f in fields]
                continue
            if strict_columns and header is not None and len(fields) > len(header):
                raise DataError(f"{path}:{start}: {len(fields)} fields but the header has {len(header)} (a "
                                f"{'tab' if delimiter == chr(9) else 'delimiter'} inside a text?): the extra "
                                "field would be dropped; fix the row (or use a quoted csv)")
            rows.append((start, fields))
    except csv.Error as e:
        raise DataError(f"{path}:{reader.line_num}: {e}") from None
    if not rows:
        what = "only a header" if header is not None else "empty file"
        raise DataError(f"{path}: {what}, no data rows")
    return Table(path, header, rows)


def _is_float(s: str) -> bool:
    try:
        return math.isfinite(float(s))
    except ValueError:
        return False


def _is_int(s: str) -> bool:
    try:
        int(s)
        return True
    except ValueError:
        return False


def _sorted_labels(values) -> List[str]:
    values = set(values)
    if all(_is_int(v) for v in values):
        return sorted(values, key=lambda v: (int(v), v))
    return sorted(values)


# ---- processors -----------------------------------------------------------------------------

class Processor:
    """Reads one task's raw files into `InputExample`s.

    Attributes: `name`; `split_names` (the splits it knows; the generic task takes any).
    `get_labels(data_dir)`: the label list (index = label id), None for regression.
    `is_regression(data_dir)`. `get_examples(data_dir, split)`. `config()`: JSON-able
    description written into the manifest.
    """

    name = ""
    split_names: Tuple[str, ...] = ("train", "dev", "test")

    def get_labels(self, data_dir: str) -> Optional[List[str]]:
        raise NotImplementedError

    def is_regression(self, data_dir: str) -> bool:
        return self.get_labels(data_dir) is None

    def get_examples(self, data_dir: str, split: str) -> List[InputExample]:
        raise NotImplementedError

    def config(self) -> Dict[str, Any]:
        return {"name": self.name}

    def note_skipped(self, split: str, n: int) -> None:
        if not hasattr(self, "_skipped"):
            self._skipped: Dict[str, int] = {}
        self._skipped[split] = n

    def num_skipped(self, split: str) -> int:
        """Rows of `split` skipped by the last `get_examples` (QQP's short rows only)."""
        return getattr(self, "_skipped", {}).get(split, 0)

    def _check_split(self, split: str) -> None:
        if split not in self.split_names:
            raise DataError(f"task {self.name!r} has no split {split!r} (splits: "
                            f"{', '.join(self.split_names)})")


def _is_unlabeled_split(split: str) -> bool:
    return split.startswith("test")


def _label_index(table: Table, label_column, split: str) -> Optional[int]:
    """The label column's index; None for a test split without it; DataError otherwise."""
    if label_column is None:
        return None
    if _is_unlabeled_split(split) and not table.has_column(label_column):
        return None
    return table.column(label_column)


def _table_examples(table: Table, split: str, text_a, text_b, label, id_column=None,
                    label_last: bool = False, skip_short: bool = False
                    ) -> Tuple[List[InputExample], int]:
    """Examples of a table and the number of rows skipped (`skip_short`: rows missing a
    needed field, as BERT's QQP reader; otherwise such a row is a DataError).
    `label_last`: the label is the row's last field (the original's column -1)."""
    ia = table.column(text_a)
    ib = table.column(text_b) if text_b is not None else None
    il = _label_index(table, label, split)
    if il is not None and label_last:
        il = -1
    iid = table.column(id_column) if id_column is not None and table.has_column(id_column) \
        else None
    need = max(i for i in (ia, ib, il, iid, 0) if i is not None)
    out, skipped = [], 0
    for k, (line, fields) in enumerate(table.rows):
        if skip_short and len(fields) <= need:
            skipped += 1
            continue
        get = lambda i, name: table.field(line, fields, i, name)  # noqa: E731
        out.append(InputExample(
            guid=get(iid, id_column).strip() if iid is not None else f"{split}-{k}",
            text_a=get(ia, text_a),
            text_b=get(ib, text_b) if ib is not None else None,
            label=get(il, label).strip() if il is not None else None,
            source=f"{table.path}:{line}"))
    if not out:
        raise DataError(f"{table.path}: no usable rows ({skipped} skipped as too short)")
    return out, skipped


@dataclasses.dataclass(frozen=True)
class GlueSpec:
    """An official GLUE TSV layout: file per split, columns by header name (CoLA's headerless
    train/dev by position: `headerless=(text index, label index)`)."""

    files: Tuple[Tuple[str, str], ...]
    text_a: str
    text_b: Optional[str]
    label: str
    labels: Optional[Tuple[str, ...]]  # None: regression (float labels)
    id_column: Optional[str] = "index"
    headerless: Optional[Tuple[int, int]] = None
    label_last: bool = False  # the original reads MNLI / STS-B labels at column -1
    skip_short: bool = False  # BERT's QQP reader skips rows with missing fields


_STD_FILES = (("train", "train.tsv"), ("dev", "dev.tsv"), ("test", "test.tsv"))
_BINARY = ("0", "1")
_ENTAIL2 = ("entailment", "not_entailment")
_MNLI_LABELS = ("contradiction", "entailment", "neutral")

GLUE_TASKS: Dict[str, GlueSpec] = {
    # CoLA train/dev: source, label, original mark, sentence (no header); test: index, sentence
    "cola": GlueSpec(_STD_FILES, "sentence", None, "label", _BINARY, headerless=(3, 1)),
    # SST-2: sentence, label; test: index, sentence
    "sst-2": GlueSpec(_STD_FILES, "sentence", None, "label", _BINARY),
    # MRPC: Quality, #1 ID, #2 ID, #1 String, #2 String; test: index instead of Quality
    "mrpc": GlueSpec(_STD_FILES, "#1 String", "#2 String", "Quality", _BINARY),
    # STS-B: index genre filename year old_index source1 source2 sentence1 sentence2 score
    "sts-b": GlueSpec(_STD_FILES, "sentence1", "sentence2", "score", None, label_last=True),
    # QQP: id qid1 qid2 question1 question2 is_duplicate; test: id question1 question2
    "qqp": GlueSpec(_STD_FILES, "question1", "question2", "is_duplicate", _BINARY,
                    id_column="id", skip_short=True),
    # MNLI: index promptID pairID genre ... sentence1 sentence2 label1 [label2..5] gold_label
    "mnli_matched": GlueSpec((("train", "train.tsv"), ("dev", "dev_matched.tsv"),
                              ("test", "test_matched.tsv")),
                             "sentence1", "sentence2", "gold_label", _MNLI_LABELS,
                             label_last=True),
    "mnli_mismatched": GlueSpec((("train", "train.tsv"), ("dev", "dev_mismatched.tsv"),
                                 ("test", "test_mismatched.tsv")),
                                "sentence1", "sentence2", "gold_label", _MNLI_LABELS,
                                label_last=True),
    # QNLI: index question sentence label
    "qnli": GlueSpec(_STD_FILES, "question", "sentence", "label", _ENTAIL2),
    # RTE / WNLI: index sentence1 sentence2 label
    "rte": GlueSpec(_STD_FILES, "sentence1", "sentence2", "label", _ENTAIL2),
    "wnli": GlueSpec(_STD_FILES, "sentence1", "sentence2", "label", _BINARY),
}
_ALIASES = {"sst2": "sst-2", "stsb": "sts-b", "mnli": "mnli_matched", "mnli-m": "mnli_matched",
            "mnli-mm": "mnli_mismatched", "imdb": "imdb", "yelp-2": "yelp2", "yelp-5": "yelp5"}


class GlueProcessor(Processor):
    """A GLUE task in its official layout (`data_dir` = the task folder, e.g. glue_data/MRPC)."""

    def __init__(self, name: str):
        self.name = name
        self.spec = GLUE_TASKS[name]
        self.files = dict(self.spec.files)
        self.split_names = tuple(self.files)

    def get_labels(self, data_dir: str = "") -> Optional[List[str]]:
        return None if self.spec.labels is None else list(self.spec.labels)

    def get_examples(self, data_dir: str, split: str) -> List[InputExample]:
        self._check_split(split)
        path = os.path.join(data_dir, self.files[split])
        s = self.spec
        if s.headerless is not None and not _is_unlabeled_split(split):
            table = read_table(path, has_header=False)
            out, skipped = _table_examples(table, split, s.headerless[0], None,
                                           s.headerless[1])
        else:
            out, skipped = _table_examples(read_table(path), split, s.text_a, s.text_b, s.label,
                                           s.id_column, s.label_last, s.skip_short)
        self.note_skipped(split, skipped)
        return out

    def config(self) -> Dict[str, Any]:
        return {"name": self.name, "files": self.files}


class ImdbProcessor(Processor):
    """aclImdb: `<data_dir>/{train,test}/{neg,pos}/*.txt` (data_dir = aclImdb or its parent);
    labels `["neg", "pos"]`; dev and test read `test/` (the original evaluates on it);
    `<br />` becomes a space."""

    name = "imdb"
    split_names = ("train", "dev", "test")
    _DIRS = {"train": "train", "dev": "test", "test": "test"}

    def get_labels(self, data_dir: str = "") -> List[str]:
        return ["neg", "pos"]

    def get_examples(self, data_dir: str, split: str) -> List[InputExample]:
        self._check_split(split)
        if os.path.isdir(os.path.join(data_dir, "aclImdb")):
            data_dir = os.path.join(data_dir, "aclImdb")
        base = os.path.join(data_dir, self._DIRS[split])
        out = []
        for label in self.get_labels():
            d = os.path.join(base, label)
            if not os.path.isdir(d):
                raise DataError(f"{d}: directory not found (IMDB layout: "
                                "aclImdb/{train,test}/{neg,pos}/*.txt)")
            for fn in sorted(os.listdir(d)):
                path = os.path.join(d, fn)
                if not fn.endswith(".txt") or not os.path.isfile(path):
                    continue
                text = "".join(decode_lines(path))
                out.append(InputExample(guid=f"{label}/{fn}",
                                        text_a=text.strip().replace("<br />", " "),
                                        label=label, source=f"{path}:1"))
        if not out:
            raise DataError(f"{base}: no .txt files under neg/ and pos/")
        return out

    def config(self) -> Dict[str, Any]:
        return {"name": self.name, "dirs": self._DIRS}


class YelpProcessor(Processor):
    """Yelp review polarity / full: headerless CSV `"label","text"`; dev reads test.csv (as
    the original). Text: `""` and `\\"` become `"` (the original's clean-up)."""

    split_names = ("train", "dev", "test")
    _FILES = {"train": "train.csv", "dev": "test.csv", "test": "test.csv"}

    def __init__(self, num_classes: int):
        self.name = f"yelp{num_classes}"
        self.labels = [str(i) for i in range(1, num_classes + 1)]

    def get_labels(self, data_dir: str = "") -> List[str]:
        return list(self.labels)

    def get_examples(self, data_dir: str, split: str) -> List[InputExample]:
        self._check_split(split)
        table = read_table(os.path.join(data_dir, self._FILES[split]), delimiter=",",
                           quoting=csv.QUOTE_MINIMAL, has_header=False)
        out = []
        for k, (line, fields) in enumerate(table.rows):
            label = table.field(line, fields, 0, "label").strip()
            text = table.field(line, fields, 1, "text")
            out.append(InputExample(guid=f"{split}-{k}",
                                    text_a=text.replace('""', '"').replace('\\"', '"'),
                                    label=label, source=f"{table.path}:{line}"))
        return out

    def config(self) -> Dict[str, Any]:
        return {"name": self.name, "files": self._FILES}


_AUTO_TEXT = (("text", None), ("text_a", "text_b"), ("sentence1", "sentence2"),
              ("question1", "question2"), ("sentence", None), ("question", None))


class DelimitedProcessor(Processor):
    """Generic `tsv`/`csv` task: `<data_dir>/<split>.<ext>` for any split name.

    Args:
      name: "tsv" (tab, no quoting) or "csv" (comma, standard quoting).
      label_column: header name (or 0-based position when `has_header=False`).
      text_column / text_b_column: header names; `text_column=None` = auto from the header:
        `text`, `text_a`+`text_b`, `sentence1`+`sentence2`, `question1`+`question2`,
        `sentence`, `question` (the pair's B unless `text_b_column` is given; `""` = none).
      labels: the label list (index = id); or `labels_file` (one label a line); else collected
        from the train split (sorted, numerically if all are integers).
      regression: True/False, or None = regression iff every train label is a number and
        some are not integers.
    Test splits (`test*`) may lack the label column (unlabeled); other splits may not.
    """

    def __init__(self, name: str = "tsv", label_column: str = "label",
                 text_column: Optional[str] = None, text_b_column: Optional[str] = None,
                 labels: Optional[Sequence[str]] = None, labels_file: Optional[str] = None,
                 regression: Optional[bool] = None, has_header: bool = True):
        if name not in ("tsv", "csv"):
            raise ValueError(f"generic task must be 'tsv' or 'csv', got {name!r}")
        if labels is not None and labels_file is not None:
            raise ValueError("give labels or labels_file, not both")
        self.name = name
        self.ext = name
        self.delimiter = "\t" if name == "tsv" else ","
        self.quoting = csv.QUOTE_NONE if name == "tsv" else csv.QUOTE_MINIMAL
        self.has_header = has_header

        def col(c):
            if c is None or c == "" or has_header:
                return c
            if not str(c).isdigit():
                raise ValueError(f"has_header=False: columns must be positions, got {c!r}")
            return int(c)

        self.label_column = col(label_column)
        self.text_column = col(text_column)
        self.text_b_column = col(text_b_column)
        if not has_header and self.text_column is None:
            raise ValueError("has_header=False needs text_column (a position)")
        self.labels_file = labels_file
        if labels_file is not None:
            labels = [ln.strip() for ln in decode_lines(labels_file) if ln.strip()]
            if not labels:
                raise DataError(f"{labels_file}: no labels")
        if labels is not None:
            labels = [str(x).strip() for x in labels]
            if len(set(labels)) != len(labels) or not labels:
                raise ValueError(f"labels must be distinct and non-empty: {labels}")
        self._labels = labels
        self._regression = regression
        if regression and labels is not None:
            raise ValueError("regression takes no label list")
        self._resolved: Optional[Tuple[bool, Optional[List[str]]]] = None
        self._columns: Dict[str, Any] = {}

    def path(self, data_dir: str, split: str) -> str:
        return os.path.join(data_dir, f"{split}.{self.ext}")

    def _table(self, data_dir: str, split: str) -> Table:
        return read_table(self.path(data_dir, split), self.delimiter, self.quoting, self.has_header,
                          strict_columns=True)

    def _text_columns(self, table: Table):
        a, b = self.text_column, self.text_b_column
        if a is None:
            for ca, cb in _AUTO_TEXT:
                if table.has_column(ca):
                    a = ca
                    if b is None:
                        b = cb if cb is not None and table.has_column(cb) else ""
                    break
            else:
                raise DataError(f"{table.path}:1: no text column found in the header "
                                f"{table.header}; give text_column")
        b = b or None
        self._columns = {"text_a": a, "text_b": b}
        return a, b

    def _resolve(self, data_dir: str) -> Tuple[bool, Optional[List[str]]]:
        if self._resolved is None:
            if self._labels is not None:
                self._resolved = (False, list(self._labels))
            elif self._regression:
                self._resolved = (True, None)
            else:
                self._resolved = self._labels_from_train(data_dir)
        return self._resolved

    def _labels_from_train(self, data_dir: str) -> Tuple[bool, Optional[List[str]]]:
        path = self.path(data_dir, "train")
        if not os.path.isfile(path):
            raise DataError(f"{path}: not found; the labels are collected from the train "
                            "split: give labels, labels_file or regression")
        table = self._table(data_dir, "train")
        il = table.column(self.label_column)
        values = [table.field(line, f, il, self.label_column).strip() for line, f in table.rows]
        if self._regression is None and all(_is_float(v) for v in values) and \
                not all(_is_int(v) for v in values):
            return True, None
        return False, _sorted_labels(values)

    def get_labels(self, data_dir: str) -> Optional[List[str]]:
        return self._resolve(data_dir)[1]

    def is_regression(self, data_dir: str) -> bool:
        return self._resolve(data_dir)[0]

    def get_examples(self, data_dir: str, split: str) -> List[InputExample]:
        if not split or os.sep in split or split.startswith("."):
            raise DataError(f"bad split name {split!r}")
        table = self._table(data_dir, split)
        a, b = self._text_columns(table)
        out, _ = _table_examples(table, split, a, b, self.label_column,
                                 "id" if self.has_header else None)
        return out

    def config(self) -> Dict[str, Any]:
        return {"name": self.name, "delimiter": self.delimiter, "has_header": self.has_header,
                "label_column": self.label_column, "text_column": self.text_column,
                "text_b_column": self.text_b_column, "labels_file": self.labels_file,
                "columns_used": dict(self._columns)}


TASK_NAMES = tuple(GLUE_TASKS) + ("imdb", "yelp2", "yelp5", "tsv", "csv")


def get_processor(task: str, **options) -> Processor:
    """The processor of `task` (see `TASK_NAMES`; aliases: sst2, stsb, mnli, ...).

    `options` (label_column, text_column, text_b_column, labels, labels_file, regression,
    has_header) apply to the generic `tsv`/`csv` tasks only; None values are ignored.
    """
    name = task.lower()
    name = _ALIASES.get(name, name)
    options = {k: v for k, v in options.items() if v is not None}
    if name in ("tsv", "csv"):
        return DelimitedProcessor(name, **options)
    if options:
        raise ValueError(f"{sorted(options)} apply to the tsv/csv tasks only, not {task!r} "
                         "(its layout is fixed)")
    if name in GLUE_TASKS:
        return GlueProcessor(name)
    if name == "imdb":
        return ImdbProcessor()
    if name in ("yelp2", "yelp5"):
        return YelpProcessor(int(name[-1]))
    raise ValueError(f"unknown task {task!r}; tasks: {', '.join(TASK_NAMES)}")


# ---- examples -> features -------------------------------------------------------------------

def label_ids(examples: Sequence[InputExample], label_list: Optional[Sequence[str]],
              is_regression: bool) -> np.ndarray:
    """int64 [N] ids (or float32 [N] values for regression); unlabeled examples get 0.

    DataError naming the example's file and line for an unknown label or a non-number.
    """
    if is_regression:
        out = np.zeros([len(examples)], np.float32)
        for k, ex in enumerate(examples):
            if ex.label is None:
                continue
            if not _is_float(ex.label):
                raise DataError(f"{ex.source}: label {ex.label!r} is not a number "
                                "(regression task)")
            out[k] = float(ex.label)
        return out
    index = {lab: i for i, lab in enumerate(label_list)}
    out = np.zeros([len(examples)], np.int64)
    for k, ex in enumerate(examples):
        if ex.label is None:
            continue
        if ex.label not in index:
            shown = ", ".join(map(repr, label_list[:20])) + (" ..." if len(label_list) > 20
                                                              else "")
            raise DataError(f"{ex.source}: unknown label {ex.label!r} (labels: {shown})")
        out[k] = index[ex.label]
    return out


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
        feats, out["truncated"][k] = _pack(ids_a[k], ids_b[k], L)
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


# ---- records --------------------------------------------------------------------------------

def serialize_features(f: Dict[str, np.ndarray], float_keys: Sequence[str] = ()) -> bytes:
    """One example (arrays without a batch axis) as a `tf.train.Example`; `float_keys`
    are float features, everything else int64 (`attention_mask` included)."""
    import tensorflow as tf

    feats = {}
    for k, v in f.items():
        v = np.asarray(v).reshape([-1])
        if k in float_keys:
            feats[k] = tf.train.Feature(float_list=tf.train.FloatList(value=v.tolist()))
        else:
            feats[k] = tf.train.Feature(
                int64_list=tf.train.Int64List(value=v.astype(np.int64).tolist()))
    return tf.train.Example(features=tf.train.Features(feature=feats)).SerializeToString(
        deterministic=True)


def unstack(features: Dict[str, np.ndarray]) -> Iterator[Dict[str, np.ndarray]]:
    """Stacked arrays (leading axis = example) -> one dict per example."""
    n = len(next(iter(features.values())))
    for k in range(n):
        yield {key: v[k] for key, v in features.items()}


class StagedFiles:
    """The files of one build, written under temporary names beside their final ones and swapped in only by
    `commit`, after every check has passed: a refused or failed build leaves every file as it was.

    Use as a context manager: leaving the block by an exception (or without `commit`) removes the temporary
    files. `path(name)` is where to write `<output_dir>/<name>`. `commit(kind, manifest, build_keys)` checks
    the manifest against the one already there (`merged_manifest`), then first writes the old manifest
    without the splits being replaced (a build killed while swapping leaves them absent, so they are rebuilt,
    never read with another build's manifest), swaps every file in, and writes the merged manifest.
    """

    def __init__(self, output_dir: str):
        self.output_dir = output_dir
        self.pending: Dict[str, str] = {}  # final path -> temporary path

    def path(self, name: str) -> str:
        import glob

        final = os.path.join(self.output_dir, name)
        for stale in glob.glob(glob.escape(final) + ".tmp-*"):  # left by a killed build
            os.remove(stale)
        tmp = f"{final}.tmp-{os.getpid()}"
        self.pending[final] = tmp
        return tmp

    def commit(self, kind: str, manifest: Dict[str, Any], build_keys: Sequence[str]) -> Dict[str, Any]:
        merged = merged_manifest(self.output_dir, kind, manifest, build_keys)  # refuses before any swap
        path = os.path.join(self.output_dir, manifest_lib.MANIFEST_NAME)
        if os.path.isfile(path):
            old = manifest_lib.read_manifest(self.output_dir, kind=kind)
            kept = {k: v for k, v in old.get("splits", {}).items() if k not in manifest["splits"]}
            manifest_lib.write_manifest(self.output_dir, {**old, "splits": kept})
        for final, tmp in self.pending.items():
            os.replace(tmp, final)
        self.pending = {}
        manifest_lib.write_manifest(self.output_dir, merged)
        return merged

    def discard(self) -> None:
        for tmp in self.pending.values():
            if os.path.exists(tmp):
                os.remove(tmp)
        self.pending = {}

    def __enter__(self) -> "StagedFiles":
        return self

    def __exit__(self, *exc) -> None:
        self.discard()


def write_split_records(staged: StagedFiles, split: str, records: Iterable[Dict[str, np.ndarray]],
                        float_keys: Sequence[str], guids: Sequence[str]) -> Dict[str, Any]:
    """Write `<split>.tfrecord` and `<split>.guids.txt` under `staged`'s temporary names (swapped in by its
    `commit`).

    `records`: one feature dict per record (arrays without a batch axis). Returns the
    manifest entry (`file`, `num_records`, `num_bytes`, `guids_file`).
    """
    import tensorflow as tf

    tmp = staged.path(f"{split}.tfrecord")
    n = 0
    with tf.io.TFRecordWriter(tmp) as w:
        for rec in records:
            w.write(serialize_features(rec, float_keys))
            n += 1
    size = os.path.getsize(tmp)
    with open(staged.path(f"{split}.guids.txt"), "w", encoding="utf-8") as f:
        for ln in guids:
            f.write(ln.replace("\n", " ").replace("\r", " ") + "\n")
    return {"file": f"{split}.tfrecord", "num_records": n, "num_bytes": size,
            "guids_file": f"{split}.guids.txt"}


def split_sources(examples: Sequence[InputExample]) -> List[str]:
    """The files a split's examples were read from (their `source` is `path:line`)."""
    return sorted({ex.source.rsplit(":", 1)[0] for ex in examples})


def merged_manifest(output_dir: str, kind: str, manifest: Dict[str, Any],
                    build_keys: Sequence[str]) -> Dict[str, Any]:
    """`manifest` with the splits of the manifest already in `output_dir` that it does not rebuild, when that
    one was built with the same `build_keys` values; DataError naming the first differing key otherwise.
    Writes nothing (`StagedFiles.commit` writes)."""
    path = os.path.join(output_dir, manifest_lib.MANIFEST_NAME)
    if not os.path.isfile(path):
        return manifest
    try:
        old = manifest_lib.read_manifest(output_dir, kind=kind)
    except manifest_lib.ManifestError as e:
        raise DataError(f"{e}; use a new output_dir") from None
    for key in build_keys:
        if old.get(key) != manifest.get(key):
            raise DataError(f"{path}: the records there were built with {key}="
                            f"{old.get(key)!r}, this build uses {manifest.get(key)!r}; "
                            "use a new output_dir")
    splits = {**old.get("splits", {}), **manifest["splits"]}
    return {**manifest, "splits": dict(sorted(splits.items()))}


def spiece_entry(spiece_model: str, tok: tokenization.XLNetTokenizer) -> Dict[str, Any]:
    return {"path": os.path.abspath(spiece_model), "sha256": tok.sha256,
            "vocab_size": tok.vocab_size}


CONVERT_CHUNK = 4096  # examples tokenized and packed at a time while writing


def pad_count(n: int, multiple: int) -> int:
    return (-n) % multiple if multiple and multiple > 0 else 0


CLASSIFIER_BUILD_KEYS = ("task", "max_seq_length", "max_segments", "uncased", "keep_accents",
                         "is_regression", "label_list", "spiece_model_sha256", "processor")


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
    _check_length(max_seq_length)
    _check_segments(max_segments)
    if not splits:
        raise ValueError("no splits given")
    if len(set(splits)) != len(splits):
        raise ValueError(f"duplicate splits: {list(splits)}")
    tok = tokenization.XLNetTokenizer(spiece_model, uncased=uncased, keep_accents=keep_accents)
    is_regression = processor.is_regression(data_dir)
    label_list = None if is_regression else processor.get_labels(data_dir)
    if not is_regression and (not label_list or len(label_list) < 2):
        raise DataError(f"task {processor.name!r} has fewer than 2 labels: {label_list}")
    # read and check every split (labels included) before writing anything
    examples = {sp: processor.get_examples(data_dir, sp) for sp in splits}
    labels = {sp: label_ids(examples[sp], label_list, is_regression) for sp in splits}
    width = max_seq_length * max_segments
    doc = (f" (a document of up to {max_segments} segments, left-padded as a whole, read as "
           f"[{max_segments}, {max_seq_length}])" if max_segments > 1 else "")
    header = {
        "kind": CLASSIFIER_KIND,
        "format_version": manifest_lib.FORMAT_VERSION,
        "task": processor.name,
        "max_seq_length": int(max_seq_length),
        **({"max_segments": int(max_segments)} if max_segments > 1 else {}),
        "uncased": bool(uncased),
        "keep_accents": bool(keep_accents),
        "is_regression": bool(is_regression),
        "label_list": label_list,
        "num_labels": 1 if is_regression else len(label_list),
        "spiece_model": spiece_entry(spiece_model, tok),
        "spiece_model_sha256": tok.sha256,
        "processor": processor.config(),
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
    # refuse a build the records already there conflict with before converting anything
    merged_manifest(output_dir, CLASSIFIER_KIND, {**header, "splits": {}}, CLASSIFIER_BUILD_KEYS)
    os.makedirs(output_dir, exist_ok=True)
    dummy = padding_features(pack_ids([], None, max_seq_length * max_segments), 1, is_regression)
    float_keys = ("label",) if is_regression else ()
    with StagedFiles(output_dir) as staged:
        split_entries = {}
        for s in splits:
            exs = examples[s]
            n = len(exs)
            n_pad = 0 if s == "train" else pad_count(n, eval_batch_size)
            order = (np.random.default_rng([seed, 7919]).permutation(n) if s == "train"
                     else np.arange(n))
            stats = {"truncated": 0, "segments": 0}

            def records():
                for start in range(0, n, CONVERT_CHUNK):
                    idx = order[start:start + CONVERT_CHUNK]
                    f = convert_examples(tok, [exs[i] for i in idx], label_list, is_regression,
                                         max_seq_length, max_segments)
                    f["example_index"] = idx.astype(np.int32)
                    stats["truncated"] += int(f.pop("truncated").sum())
                    stats["segments"] += int(f.pop("num_segments").sum())
                    yield from unstack(f)
                for _ in range(n_pad):
                    yield {k: v[0] for k, v in dummy.items()}

            sources = split_sources(exs)
            if not n:
                raise DataError(f"{processor.name} {s}: no examples in {data_dir} "
                                f"({', '.join(sources) or 'no rows read'}); check the split's file")
            entry = write_split_records(staged, s, records(), float_keys,
                                        [ex.guid for ex in exs])
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
        manifest = staged.commit(CLASSIFIER_KIND, {**header, "splits": split_entries}, CLASSIFIER_BUILD_KEYS)
    if log:
        log(f"manifest.json written ({time.time() - t0:.1f} s)")
    return manifest


# ---- reader ---------------------------------------------------------------------------------

def _mismatch(m: Dict[str, Any], field: str, recorded, wanted, hint: str = "") -> None:
    raise manifest_lib.ManifestError(
        f"{m.get('_path', manifest_lib.MANIFEST_NAME)}: '{field}' is {recorded!r} in the "
        f"records but the reader was given {wanted!r}{hint}")


def validate_manifest(m: Dict[str, Any], *, max_seq_length: int,
                      spiece_model: Optional[str] = None, spiece_sha256: Optional[str] = None,
                      extra: Optional[Dict[str, Any]] = None, max_segments: int = 1) -> None:
    """Check a record manifest against the reader's values (None = not checked); raises
    ManifestError naming the field."""
    if m.get("max_seq_length") != max_seq_length:
        _mismatch(m, "max_seq_length", m.get("max_seq_length"), max_seq_length,
                  " (rebuild the records with this max_seq_length)")
    if m.get("max_segments", 1) != max_segments:
        _mismatch(m, "max_segments", m.get("max_segments", 1), max_segments,
                  " (rebuild the records with this --max_segments, in another directory)")
    for field, wanted in (extra or {}).items():
        if wanted is not None and m.get(field) != wanted:
            _mismatch(m, field, m.get(field), wanted)
    sha = m["spiece_model"]["sha256"]
    if spiece_model is not None:
        if not os.path.isfile(spiece_model):
            raise manifest_lib.ManifestError(f"SentencePiece model not found: {spiece_model}")
        spiece_sha256 = tokenization.file_sha256(spiece_model)
    if spiece_sha256 is not None and spiece_sha256 != sha:
        _mismatch(m, "spiece_model.sha256", sha, spiece_sha256,
                  " (records were tokenized with a different SentencePiece model)")


def split_record_file(m: Dict[str, Any], split: str) -> str:
    """Path of `split`'s record file (existence and size checked against the manifest)."""
    splits = m.get("splits") or {}
    if split not in splits:
        raise manifest_lib.ManifestError(
            f"{m['_path']}: no split {split!r} in the records (splits: "
            f"{', '.join(sorted(splits)) or 'none'})")
    e = splits[split]
    return manifest_lib.check_record_files(
        {"files": [{"name": e["file"], "num_examples": e["num_records"],
                    "num_bytes": e["num_bytes"]}], "_path": m["_path"]}, m["_dir"])[0]


def records_dataset(path: str, num_records: int, has_padding: bool, parse_fn: Callable,
                    dummy_record: bytes, batch_size: int, is_training: bool, *,
                    seed: Optional[int], drop_remainder: bool, repeat: Optional[bool],
                    shuffle_buffer: int, input_context=None):
    """Shared tf.data plumbing of the fine-tuning readers.

    Training: padding examples dropped, shuffled (`shuffle_buffer`, `seed`), repeated unless
    `repeat=False`, batched with `drop_remainder`. Eval/predict: file order, never
    repeated unless `repeat=True`; with `drop_remainder` the stream is padded with
    `dummy_record` up to a whole number of batches, so no real example is dropped.
    `input_context`: this input pipeline reads every `num_input_pipelines`-th record.
    """
    import tensorflow as tf

    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    ds = tf.data.TFRecordDataset([path], buffer_size=8 << 20)
    count = num_records
    if input_context is not None and input_context.num_input_pipelines > 1:
        n, i = input_context.num_input_pipelines, input_context.input_pipeline_id
        ds = ds.shard(n, i)
        count = len(range(i, num_records, n))
    if is_training:
        if has_padding:
            spec = {"is_real_example": tf.io.FixedLenFeature([1], tf.int64)}
            ds = ds.filter(lambda s: tf.io.parse_single_example(s, spec)["is_real_example"][0]
                           > 0)
        if shuffle_buffer and shuffle_buffer > 1:
            ds = ds.shuffle(shuffle_buffer, seed=seed, reshuffle_each_iteration=True)
        if repeat is None or repeat:
            ds = ds.repeat()
    else:
        extra = pad_count(count, batch_size) if drop_remainder else 0
        if extra:
            ds = ds.concatenate(tf.data.Dataset.from_tensors(tf.constant(dummy_record))
                                .repeat(extra))
        if repeat:
            ds = ds.repeat()
    ds = ds.batch(batch_size, drop_remainder=drop_remainder)
    ds = ds.map(parse_fn, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
    return ds.prefetch(tf.data.AUTOTUNE)


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


def read_guids(record_dir: str, split: str, kind: str = CLASSIFIER_KIND) -> List[str]:
    """Example ids of `split` (GLUE `index`/`id` column, file name, or `<split>-<row>`),
    indexed by `example_index`."""
    m = manifest_lib.read_manifest(record_dir, kind=kind)
    if split not in m.get("splits", {}):
        raise manifest_lib.ManifestError(f"{m['_path']}: no split {split!r} in the records")
    with open(os.path.join(record_dir, m["splits"][split]["guids_file"]),
              encoding="utf-8") as f:
        return [ln.rstrip("\n") for ln in f]


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
    validate_manifest(m, max_seq_length=max_seq_length, spiece_model=spiece_model,
                      spiece_sha256=spiece_sha256, extra={"task": task, "uncased": uncased},
                      max_segments=max_segments)
    split = split or ("train" if is_training else "dev")
    path = split_record_file(m, split)
    e = m["splits"][split]
    reg = bool(m["is_regression"])
    dummy = padding_features(pack_ids([], None, max_seq_length * max_segments), 1, reg)
    dummy = serialize_features({k: v[0] for k, v in dummy.items()},
                               ("label",) if reg else ())
    return records_dataset(
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

