"""Reading the delimited files of the task readers: TSV (GLUE, your own tasks) and CSV (Yelp, your own tasks).

Every file is read as UTF-8 (a leading BOM dropped); anything else is a DataError naming the file and line,
as are a CSV syntax error, a file without data rows, a missing column and, for your own tsv/csv tasks
(`strict_columns`), a row with more fields than the header. `Table` keeps each row's line number so that a
later error (an unknown label, a short row) names it too. The task processors are in processors.py.
"""

from __future__ import annotations

import csv
import dataclasses
import os
import re
from typing import Iterator, List, Optional, Tuple

from tfrecords.records import DataError


# Control characters a text field never holds (tab separates fields; CR and LF end lines).
_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")


def decode_lines(path: str) -> Iterator[str]:
    """Lines of a UTF-8 file (BOM dropped; LF or CRLF line endings); DataError naming file and line for invalid
    UTF-8, a carriage return inside a line (CR-only line endings would make the whole file one line) or a
    control character other than tab."""
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
            if "\r" in line.rstrip("\r\n"):
                raise DataError(f"{path}:{n}: a carriage return inside the line (CR-only line endings?): convert the "
                                "file to LF (or CRLF) line endings")
            bad = _CONTROL.search(line)
            if bad:
                raise DataError(f"{path}:{n}: control character U+{ord(bad.group()):04X} at character "
                                f"{bad.start() + 1}: remove it (only tabs separate fields)")
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
