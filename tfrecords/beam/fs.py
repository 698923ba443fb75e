"""Paths for the Beam builders: local paths, or any scheme Beam's `FileSystems` knows
(`gs://`, `s3://`, `hdfs://`, ...).

The shared builder functions (`tfrecords.pretrain.writer`, `tfrecords.readers.corpus`) read and write
local files. Local paths are handed to them unchanged (the DirectRunner, or a filesystem
mounted at the same path on every worker); other paths go through a worker-local temporary
directory: inputs are read with `open_read` (downloaded for the index scan, read once in
order to distribute documents), outputs are written locally, uploaded to a temporary name,
then renamed (`publish`).
"""

from __future__ import annotations

import json
import os
import shutil
import uuid
from typing import Any, List, Tuple

_CHUNK = 8 << 20


def _filesystems():
    from apache_beam.io.filesystems import FileSystems

    return FileSystems


def is_local(path: str) -> bool:
    """True for a plain local path (no `scheme://`)."""
    return "://" not in path


def join(base: str, *parts: str) -> str:
    if is_local(base):
        return os.path.join(base, *parts)
    return _filesystems().join(base, *parts)


def exists(path: str) -> bool:
    return os.path.exists(path) if is_local(path) else _filesystems().exists(path)


def expand_globs(input_glob: str) -> Tuple[List[str], List[int]]:
    """Sorted, de-duplicated files of a comma-separated list of globs, with their sizes.

    All-local globs give exactly `corpus.expand_globs` (absolute paths); others are matched
    with `FileSystems.match`. Raises `corpus.CorpusError` if nothing matches.
    """
    from tfrecords.readers import corpus as corpus_lib

    patterns = [p.strip() for p in input_glob.split(",") if p.strip()]
    if all(is_local(p) for p in patterns):
        files = corpus_lib.expand_globs(input_glob)
        return files, [os.path.getsize(f) for f in files]
    found = {}
    for p in patterns:
        if is_local(p):
            for f in corpus_lib.expand_globs(p):
                found[f] = os.path.getsize(f)
            continue
        for res in _filesystems().match([p]):
            for m in res.metadata_list:
                found[m.path] = int(m.size_in_bytes)
    if not found:
        raise corpus_lib.CorpusError(f"input_glob {input_glob!r} matches no files")
    files = sorted(found)
    return files, [found[f] for f in files]


def open_read(path: str):
    """A binary, seekable read handle (no decompression)."""
    if is_local(path):
        return open(path, "rb")
    from apache_beam.io.filesystem import CompressionTypes

    return _filesystems().open(path, compression_type=CompressionTypes.UNCOMPRESSED)


def _open_write(path: str):
    if is_local(path):
        return open(path, "wb")
    from apache_beam.io.filesystem import CompressionTypes

    return _filesystems().create(path, compression_type=CompressionTypes.UNCOMPRESSED)


def read_bytes(path: str) -> bytes:
    with open_read(path) as f:
        return f.read()


def download(src: str, dst: str) -> None:
    """Copy `src` (any path) to the local file `dst`."""
    with open_read(src) as f, open(dst, "wb") as g:
        shutil.copyfileobj(f, g, _CHUNK)


def publish(local: str, dst: str) -> None:
    """Upload the local file `local` to `dst` under a temporary name, then rename."""
    tmp = f"{dst}.tmp-{uuid.uuid4().hex[:12]}"
    try:
        with open(local, "rb") as f, _open_write(tmp) as g:
            shutil.copyfileobj(f, g, _CHUNK)
        if is_local(dst):
            os.replace(tmp, dst)
        else:
            fs = _filesystems()
            if fs.exists(dst):
                fs.delete([dst])
            fs.rename([tmp], [dst])
    finally:
        if exists(tmp):
            if is_local(tmp):
                os.remove(tmp)
            else:
                _filesystems().delete([tmp])


def size(path: str) -> int:
    if is_local(path):
        return os.path.getsize(path)
    return int(_filesystems().match([path])[0].metadata_list[0].size_in_bytes)


def read_json(path: str) -> Any:
    return json.loads(read_bytes(path).decode("utf-8"))


def dumps_json(obj: Any) -> bytes:
    """The bytes `manifest.write_json_atomic` writes."""
    return (json.dumps(obj, indent=2, sort_keys=True) + "\n").encode("utf-8")


def write_json(path: str, obj: Any) -> None:
    """JSON at `path` via a temporary name + rename (`manifest.write_json_atomic` locally)."""
    from tfrecords import manifest as manifest_lib

    if is_local(path):
        manifest_lib.write_json_atomic(path, obj)
        return
    tmp_local = os.path.join(_local_tmp_dir(), f"json-{uuid.uuid4().hex}")
    try:
        with open(tmp_local, "wb") as f:
            f.write(dumps_json(obj))
        publish(tmp_local, path)
    finally:
        if os.path.exists(tmp_local):
            os.remove(tmp_local)


def _local_tmp_dir() -> str:
    import tempfile

    return tempfile.gettempdir()
