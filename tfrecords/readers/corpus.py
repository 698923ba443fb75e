"""Reading text corpora in the original XLNet format.

Format: UTF-8 text, one sentence per line, a blank line between documents.
A document is located by `(file index, byte start, byte end)` so that shard workers can
read exactly their documents; invalid UTF-8 is reported with file name and byte offset
(or skipped line by line with `skip_invalid_utf8=True`, counted).
"""

from __future__ import annotations

import glob
import os
from dataclasses import dataclass, field
from typing import Iterator, List, Sequence, Tuple

import numpy as np

from xlnet_tf.errors import UserError


class CorpusError(UserError):
    """Bad corpus input: no files, no documents, invalid UTF-8."""


def expand_globs(input_glob: str) -> List[str]:
    """Sorted, de-duplicated files matching a comma-separated list of globs.

    Raises CorpusError if nothing matches.
    """
    files: List[str] = []
    for pattern in [p.strip() for p in input_glob.split(",") if p.strip()]:
        files.extend(f for f in glob.glob(os.path.expanduser(pattern)) if os.path.isfile(f))
    files = sorted(set(os.path.abspath(f) for f in files))
    if not files:
        raise CorpusError(f"input_glob {input_glob!r} matches no files")
    return files


def decode_line(raw: bytes, path: str, offset: int, skip_invalid_utf8: bool):
    """Decode one line; returns None when skipped. Raises CorpusError with the offset."""
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as e:
        if skip_invalid_utf8:
            return None
        raise CorpusError(
            f"{path}: invalid UTF-8 at byte offset {offset + e.start} ({e.reason}); "
            "fix the file or pass --skip_invalid_utf8 to drop such lines") from None


@dataclass
class DocumentIndex:
    """Where every document of a corpus lives.

    Attributes:
      files: the input files (absolute paths, sorted).
      file_idx, start, end: int64 [num_docs]; document d is bytes [start, end) of
        files[file_idx[d]] (whole lines, no blank lines inside).
      num_invalid_lines: lines skipped for invalid UTF-8 (skip mode only).
    """

    files: List[str]
    file_idx: np.ndarray
    start: np.ndarray
    end: np.ndarray
    num_invalid_lines: int = 0
    file_sizes: List[int] = field(default_factory=list)

    @property
    def num_docs(self) -> int:
        return int(self.file_idx.shape[0])

    @property
    def doc_bytes(self) -> np.ndarray:
        return self.end - self.start


def index_documents(files: Sequence[str], skip_invalid_utf8: bool = False) -> DocumentIndex:
    """Scan `files` once (streaming, line by line): document boundaries and UTF-8 validity.

    Raises CorpusError for invalid UTF-8 (unless skipped) or when no document has text.
    """
    fidx, starts, ends = [], [], []
    invalid = 0
    sizes = []
    for k, path in enumerate(files):
        pos = 0
        doc_start = doc_end = None
        with open(path, "rb", buffering=1 << 20) as f:
            for raw in f:
                line_end = pos + len(raw)
                if raw.isascii():
                    ok = True
                else:
                    try:
                        raw.decode("utf-8")
                        ok = True
                    except UnicodeDecodeError as e:
                        if not skip_invalid_utf8:
                            raise CorpusError(
                                f"{path}: invalid UTF-8 at byte offset {pos + e.start} "
                                f"({e.reason}); fix the file or pass --skip_invalid_utf8 "
                                "to drop such lines") from None
                        invalid += 1
                        ok = False
                if ok and not raw.strip():  # a blank line ends the document
                    if doc_start is not None:
                        fidx.append(k); starts.append(doc_start); ends.append(doc_end)
                        doc_start = None
                elif ok:
                    if doc_start is None:
                        doc_start = pos
                    doc_end = line_end
                # an invalid line is neither text nor a document break
                pos = line_end
        sizes.append(pos)
        if doc_start is not None:
            fidx.append(k); starts.append(doc_start); ends.append(doc_end)
    if not fidx:
        raise CorpusError(f"no documents with text in {len(files)} file(s): "
                          + ", ".join(files[:5]) + (" ..." if len(files) > 5 else ""))
    return DocumentIndex(list(files), np.asarray(fidx, np.int64), np.asarray(starts, np.int64),
                         np.asarray(ends, np.int64), invalid, sizes)


def read_document_lines(path: str, start: int, end: int, skip_invalid_utf8: bool,
                        handle=None) -> Tuple[List[str], int]:
    """Lines (stripped, non-blank) of the document at bytes [start, end) of `path`.

    Returns (lines, number of invalid lines skipped).
    """
    if handle is None:
        with open(path, "rb") as f:
            f.seek(start)
            data = f.read(end - start)
    else:
        handle.seek(start)
        data = handle.read(end - start)
    try:
        text = data.decode("utf-8")
        return [ln for ln in (s.strip() for s in text.split("\n")) if ln], 0
    except UnicodeDecodeError:
        pass
    lines, bad, off = [], 0, start
    for raw in data.split(b"\n"):
        s = decode_line(raw, path, off, skip_invalid_utf8)
        off += len(raw) + 1
        if s is None:
            bad += 1
        elif s.strip():
            lines.append(s.strip())
    return lines, bad


def iter_lines(files: Sequence[str], skip_invalid_utf8: bool = False) -> Iterator[str]:
    """Every non-blank line of `files` (stripped), in order."""
    for path in files:
        off = 0
        with open(path, "rb") as f:
            for raw in f:
                s = decode_line(raw, path, off, skip_invalid_utf8)
                off += len(raw)
                if s is not None and s.strip():
                    yield s.strip()


def read_text_file(path: str, skip_invalid_utf8: bool = False, source: str = "") -> Tuple[List[str], int]:
    """The lines of one text file, stripped (a blank line is `""`), and the number of lines skipped for invalid
    UTF-8 (only with `skip_invalid_utf8`; otherwise the first such line is a CorpusError naming the file and the
    line number). A file without any text (empty, only blank lines, or only skipped lines) is a CorpusError
    naming it; `source` (e.g. "--input_glob=...") says where the file came from in the messages."""
    where = f" (from {source})" if source else ""
    lines: List[str] = []
    skipped = 0
    with open(path, "rb") as f:
        for number, raw in enumerate(f, start=1):
            try:
                lines.append(raw.decode("utf-8").strip())
            except UnicodeDecodeError as e:
                if not skip_invalid_utf8:
                    raise CorpusError(
                        f"{path}, line {number}{where}: invalid UTF-8 ({e.reason} at byte offset {e.start} of the "
                        "line); fix the file or pass --skip_invalid_utf8 to skip such lines (they are counted)") from None
                skipped += 1
    if not any(lines):
        what = ("is empty" if not lines and not skipped else
                f"has no valid UTF-8 text ({skipped} line(s) skipped)" if skipped else "has only blank lines")
        raise CorpusError(f"{path}{where} {what}: give UTF-8 text, one paragraph per line, a blank line between "
                          "documents (or leave the file out)")
    return lines, skipped
