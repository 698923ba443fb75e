"""Task processors: a task's raw files -> `InputExample`s, and its labels -> ids.

Tasks (`get_processor`, `TASK_NAMES`): the GLUE layouts `cola sst-2 mrpc sts-b qqp mnli_matched
mnli_mismatched qnli rte wnli` (official TSV files, test sets without labels), `imdb`
(aclImdb `{train,test}/{neg,pos}/*.txt`; dev = test/, as the original), `yelp2`/`yelp5`
(headerless CSV `"label","text"`; dev = test.csv, as the original), and `tsv`/`csv`: any
headed file `<data_dir>/<split>.tsv|csv` with configurable columns (auto: `text`, or
`sentence1`+`sentence2`, ...), labels given or collected from train, regression when asked
or when the train labels are non-integer numbers. Aliases: sst2, stsb, mnli, mnli-m, mnli-mm, yelp-2, yelp-5.

Files are read by tables.py (DataError naming file and line); `label_ids` maps the examples' label strings
to ids (or float values for regression). Packing and records: classifier_data.py.
"""

from __future__ import annotations

import csv
import dataclasses
import math
import os
from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np

from tfrecords.records import DataError
from tfrecords.readers.tables import Table, decode_lines, read_table


@dataclasses.dataclass
class InputExample:
    """One raw example. `label` is the raw label string (None = unlabeled, e.g. GLUE test);
    `source` is `path:line` (for error messages)."""

    guid: str
    text_a: str
    text_b: Optional[str] = None
    label: Optional[str] = None
    source: str = ""


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


# ---- labels ---------------------------------------------------------------------------------

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
