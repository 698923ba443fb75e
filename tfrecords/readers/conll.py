"""CoNLL-style token files: the input of the tagging builder (tagging_data.py) and the layout its predictions
are written back in.

A file holds one token a line, its columns separated by tabs (a line with a tab is split at tabs only, so a
word may hold spaces) or else by runs of whitespace; a blank line ends a sentence; a line whose first column
is `-DOCSTART-` starts a document and is no token (whatever follows it on the line). Column 0 is the word
(`word_column`), the label is in `label_column` (default -1, the last; any Python index). Every token line of
a file has the column count of its first token line; a file whose lines have one column is unlabeled (words
only: a file to tag). Read as UTF-8 (a leading BOM dropped, CRLF accepted).

    -DOCSTART- -X- -X- O            <- ignored (starts a document)
                                    <- blank: sentence boundary
    EU      NNP  B-NP  B-ORG        <- word in column 0, label in column -1
    rejects VBZ  B-VP  O

Errors are `DataError`s (tfrecords/records.py, a UserError: one line in the CLIs) naming `file:line`: invalid
UTF-8, a line with another column count, an empty column, a label outside the given label list.

Writing (`write_conll`): every sentence's lines as read (their columns, joined by the separator the sentence's
first line used: a tab or one space) with one predicted column appended, a blank line after each sentence, and
each `-DOCSTART-` line where it was, written to a temporary name and renamed.
"""

from __future__ import annotations

import dataclasses
import os
from typing import Dict, Iterable, List, Optional, Sequence, Tuple

import numpy as np

from tfrecords.records import DataError
from tfrecords.readers.tables import decode_lines
from xlnet_tf import files

DOCSTART = "-DOCSTART-"


@dataclasses.dataclass(frozen=True)
class Sentence:
    """One sentence of a CoNLL file.

    `words` and `labels` (None for an unlabeled file) have one entry per token; `columns` every token line's
    columns as read; `lines` their 1-based line numbers; `doc` the text after the last `-DOCSTART-` before it
    ("" when none); `docstart` the raw `-DOCSTART-` line just before this sentence ("" if there is none between
    it and the previous sentence), so a writer puts it back; `separator` "\\t" or " "."""

    path: str
    words: Tuple[str, ...]
    labels: Optional[Tuple[str, ...]]
    columns: Tuple[Tuple[str, ...], ...]
    lines: Tuple[int, ...]
    doc: str = ""
    docstart: str = ""
    separator: str = "\t"

    @property
    def source(self) -> str:
        """`path:line` of the sentence's first token."""
        return f"{self.path}:{self.lines[0]}"

    def __len__(self) -> int:
        return len(self.words)


def _split(line: str) -> Tuple[List[str], str]:
    if "\t" in line:
        return [field.strip() for field in line.split("\t")], "\t"
    return line.split(), " "


def read_conll(path: str, label_column: int = -1, word_column: int = 0,
               labeled: Optional[bool] = None) -> List[Sentence]:
    """The sentences of the CoNLL file `path` (see the module docstring).

    Args:
      label_column, word_column: column indices (negative counts from the end).
      labeled: None = a file of one column is unlabeled, any other is labeled; True / False to insist.
    Raises DataError naming `path:line` for a missing file, invalid UTF-8, a line whose column count differs from
    the file's first token line, an empty column, a missing word or label column, or a file without tokens.
    """
    sentences: List[Sentence] = []
    width: Optional[int] = None
    first_line = 0
    tokens: List[Tuple[int, Tuple[str, ...]]] = []
    doc, docstart, separator = "", "", "\t"

    def flush():
        nonlocal tokens, docstart
        if not tokens:
            return
        columns = tuple(c for _, c in tokens)
        words = tuple(c[word_column] for c in columns)
        labels = tuple(c[label_column] for c in columns) if is_labeled else None
        sentences.append(Sentence(path, words, labels, columns, tuple(n for n, _ in tokens), doc, docstart,
                                  separator))
        tokens, docstart = [], ""

    is_labeled = False
    for n, raw in enumerate(decode_lines(path), 1):
        line = raw.rstrip("\r\n")
        if not line.strip():
            flush()
            continue
        fields, sep = _split(line)
        if fields[0] == DOCSTART:
            flush()
            doc = " ".join(fields[1:])
            docstart = line
            continue
        if width is None:
            width, first_line = len(fields), n
            is_labeled = width > 1 if labeled is None else labeled
            for name, index in (("word_column", word_column), ("label_column", label_column)):
                if name == "label_column" and not is_labeled:
                    continue
                if not -width <= index < width:
                    raise DataError(f"{path}:{n}: {width} column(s), no {name} {index}")
            if is_labeled and width < 2:
                raise DataError(f"{path}:{n}: 1 column, no label column (a labeled file has the word and a label)")
            if is_labeled and word_column % width == label_column % width:
                raise DataError(f"{path}: label_column {label_column} is the word column {word_column}")
        elif len(fields) != width:
            raise DataError(f"{path}:{n}: {len(fields)} column(s), expected {width} as on line {first_line}")
        for k, field in enumerate(fields):
            if not field:
                raise DataError(f"{path}:{n}: column {k} is empty")
        if not tokens:
            separator = sep
        tokens.append((n, tuple(fields)))
    flush()
    if not sentences:
        raise DataError(f"{path}: no tokens (an empty file, or only blank and {DOCSTART} lines)")
    return sentences


def collect_labels(sentences: Iterable[Sentence]) -> List[str]:
    """The labels the sentences use, sorted (a deterministic label list: id = position)."""
    out = set()
    for s in sentences:
        if s.labels is None:
            raise DataError(f"{s.source}: the file has no label column; the label list comes from a labeled "
                            "file or is given explicitly")
        out.update(s.labels)
    return sorted(out)


def read_labels_file(path: str) -> List[str]:
    """A label list file: one label a line, in id order; blank lines ignored; a duplicate is a DataError."""
    labels: List[str] = []
    for n, line in enumerate(decode_lines(path), 1):
        label = line.strip()
        if not label:
            continue
        if label in labels:
            raise DataError(f"{path}:{n}: label {label!r} listed twice")
        labels.append(label)
    if not labels:
        raise DataError(f"{path}: no labels")
    return labels


def check_label_list(labels: Sequence[str], what: str) -> List[str]:
    """`labels` as a list: at least one, no duplicates or blanks (`what` names where they came from)."""
    labels = [str(lab) for lab in labels]
    if not labels:
        raise DataError(f"{what}: empty label list")
    seen = set()
    for lab in labels:
        if not lab.strip() or lab != lab.strip():
            raise DataError(f"{what}: blank label or label with surrounding spaces: {lab!r}")
        if lab in seen:
            raise DataError(f"{what}: label {lab!r} listed twice")
        seen.add(lab)
    return labels


def label_ids(sentence: Sentence, index: Dict[str, int]) -> Optional[np.ndarray]:
    """int32 [num_words] ids of the sentence's labels in `index` (label -> id); None for an unlabeled sentence.
    DataError naming `file:line` for a label not in `index`."""
    if sentence.labels is None:
        return None
    out = np.empty([len(sentence.labels)], np.int32)
    for k, label in enumerate(sentence.labels):
        got = index.get(label)
        if got is None:
            shown = ", ".join(map(repr, list(index)[:20])) + (" ..." if len(index) > 20 else "")
            raise DataError(f"{sentence.path}:{sentence.lines[k]}: unknown label {label!r} (labels: {shown})")
        out[k] = got
    return out


def write_conll(path: str, sentences: Sequence[Sentence], predictions: Sequence[Sequence[str]]) -> int:
    """Write `sentences` in their input layout with `predictions[i][j]` (the tag of word j of sentence i) as one
    more column; returns the number of token lines. ValueError when a sentence has not exactly one prediction a
    word, or a prediction is blank or holds whitespace (it would not read back as one column)."""
    if len(predictions) != len(sentences):
        raise ValueError(f"{path}: {len(predictions)} prediction lists for {len(sentences)} sentences")
    out: List[str] = []
    for s, tags in zip(sentences, predictions):
        tags = list(tags)
        if len(tags) != len(s.words):
            raise ValueError(f"{s.source}: {len(tags)} predictions for {len(s.words)} words")
        if s.docstart:
            out += [s.docstart, ""]
        for columns, tag in zip(s.columns, tags):
            tag = str(tag)
            if not tag or tag != "".join(tag.split()):
                raise ValueError(f"{s.source}: prediction {tag!r} is blank or holds whitespace")
            out.append(s.separator.join(columns + (tag,)))
        out.append("")
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    files.write_text_atomic(path, "\n".join(out) + "\n" if out else "")
    return sum(len(s.words) for s in sentences)
