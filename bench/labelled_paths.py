"""`LABEL=PATH` list flags of the benchmarks (`--sets`, `--models`, `--domain_shift`, `--screen_reports`, ...): one
parser, so every such flag refuses the same mistakes with the same one-line error naming the flag (a `UserError`:
bench/cli.py reports it in one line)."""

from __future__ import annotations

import os
from typing import Callable, Dict, Iterable, Optional

from xlnet_tf.errors import UserError


def parse(flag: str, entries: Iterable[str], exists: Optional[Callable[[str], bool]] = os.path.exists,
          keep: Iterable[str] = (), form: str = "LABEL=PATH", error=UserError) -> Dict[str, str]:
    """`{label: path}` of `entries` (each `LABEL=PATH`), in order, paths as given.

    Refused, with `error(f"--{flag}: ...")`: an entry without `=`, an empty label or path, a label given twice, and
    a path for which `exists` is false (None: paths not checked here). `keep`: bare words taken as their own label
    and path (feature_probe's `random`). `form`: what an entry should look like, for the error."""
    keep = set(keep)
    out: Dict[str, str] = {}
    for entry in entries:
        if entry in keep:
            label, path = entry, entry
        else:
            label, sep, path = entry.partition("=")
            if not sep or not label or not path:
                raise error(f"--{flag}: {entry!r} is not {form}")
            if exists is not None and not exists(path):
                raise error(f"--{flag}: {label}={path} does not exist")
        if label in out:
            raise error(f"--{flag}: the label {label!r} is given twice")
        out[label] = path
    return out
