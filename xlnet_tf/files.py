"""Writing and fingerprinting the files the project writes and reads back: one atomic writer, one hash.

Paths may be local or on any filesystem `tf.io.gfile` knows (`gs://...`); TensorFlow is imported only for the
latter, so record builders and light tools that import this module stay free of it.

- `write_json_atomic(path, values)`: JSON (sorted keys, indent 2, a final newline) under a temporary name in the
  same directory, then renamed over `path`: a reader sees the old file or the new one, never half of one.
- `directory_written_aside(path)`: a local folder filled under a temporary name beside it, then renamed over
  `path` (an existing `path` is replaced); on any failure the temporary folder is removed and `path` is untouched.
- `exists(path)`, `isdir(path)`: the checks a command makes of its paths before it imports TensorFlow (a bad
  flag is refused in a second, not after the ~10 s import), local or remote.
- `file_sha256(path)`: hex SHA-256 of a file's bytes, read in 1 MiB chunks (SentencePiece checksums, input
  fingerprints of record sets).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import tempfile
from typing import Any, BinaryIO, Iterator, Union

PathLike = Union[str, os.PathLike]


def _remote(path: str) -> bool:
    return "://" in path


def open_file(path: PathLike, mode: str = "rb"):
    """`open`, or `tf.io.gfile.GFile` for a `scheme://` path."""
    path = os.fspath(path)
    if _remote(path):
        import tensorflow as tf

        return tf.io.gfile.GFile(path, mode)
    return open(path, mode, **({} if "b" in mode else {"encoding": "utf-8"}))


def exists(path: PathLike) -> bool:
    """`os.path.exists`, or `tf.io.gfile.exists` for a `scheme://` path (TensorFlow imported only then)."""
    path = os.fspath(path)
    if _remote(path):
        import tensorflow as tf

        return tf.io.gfile.exists(path)
    return os.path.exists(path)


def isdir(path: PathLike) -> bool:
    """`os.path.isdir`, or `tf.io.gfile.isdir` for a `scheme://` path (TensorFlow imported only then)."""
    path = os.fspath(path)
    if _remote(path):
        import tensorflow as tf

        return tf.io.gfile.isdir(path)
    return os.path.isdir(path)


def replace(tmp: PathLike, path: PathLike) -> None:
    """Renames `tmp` over `path` (atomic on a local filesystem)."""
    tmp, path = os.fspath(tmp), os.fspath(path)
    if _remote(path):
        import tensorflow as tf

        tf.io.gfile.rename(tmp, path, overwrite=True)
    else:
        os.replace(tmp, path)


def write_text_atomic(path: PathLike, text: str) -> None:
    """`text` to `path` via a temporary name (`<path>.tmp-<pid>`) and a rename."""
    path = os.fspath(path)
    tmp = f"{path}.tmp-{os.getpid()}"
    with open_file(tmp, "w") as f:
        f.write(text)
    replace(tmp, path)


@contextlib.contextmanager
def directory_written_aside(path: PathLike) -> Iterator[str]:
    """Yields a new temporary folder beside the local folder `path`; when the block ends without an error it
    replaces `path` (removed first if it exists), else it is deleted and `path` is left as it was."""
    path = os.path.abspath(os.fspath(path))
    parent = os.path.dirname(path)
    os.makedirs(parent, exist_ok=True)
    tmp = tempfile.mkdtemp(prefix=f".{os.path.basename(path)}-", dir=parent)
    try:
        yield tmp
        if os.path.isdir(path):
            shutil.rmtree(path)
        os.replace(tmp, path)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def json_text(values: Any) -> str:
    """The bytes every JSON file of the project has: sorted keys, indent 2, a final newline."""
    return json.dumps(values, indent=2, sort_keys=True) + "\n"


def write_json_atomic(path: PathLike, values: Any) -> None:
    """`values` as JSON (`json_text`) to `path`, atomically (`write_text_atomic`)."""
    write_text_atomic(path, json_text(values))


def stream_sha256(f: BinaryIO) -> str:
    """Hex SHA-256 of what a binary file object reads to its end."""
    h = hashlib.sha256()
    for chunk in iter(lambda: f.read(1 << 20), b""):
        h.update(chunk)
    return h.hexdigest()


def file_sha256(path: PathLike) -> str:
    """Hex SHA-256 of a file's bytes (local, or any filesystem tf.io.gfile knows)."""
    with open_file(path, "rb") as f:
        return stream_sha256(f)
