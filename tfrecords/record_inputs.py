"""Record sets tied to their inputs by content.

Every split of a fine-tuning record set stores, in its manifest entry, `inputs`: the SHA-256 of each input
file it was read from (`{absolute path: sha256}`), next to the build options the manifest already records.
A runner given the raw data (`--data_dir`, `--train_file`, `--predict_file`) hashes the files the split
reads now and rebuilds the split when they differ from what the records were built from (changed content,
other files), when it holds no examples, or when it predates these fingerprints; it never trains or
evaluates on records of other data. (Rebuilding, rather than stopping, because the records are a cache of
the data the user named: the build options, which the user chose, must still match or the build stops
naming the option.) Pretraining records carry one fingerprint over all input files' contents
(tfrecords/pretrain_data.py); a shard is reused on resume only when it matches.
"""

from __future__ import annotations

import os
from typing import Callable, Dict, Iterable, List, Mapping, Optional

from tfrecords import manifest as manifest_lib
from xlnet_tf import files


stream_digest = files.stream_sha256
file_digest = files.file_sha256  # local, or any filesystem tf.io.gfile knows (xlnet_tf/files.py)


def input_digests(paths: Iterable[str]) -> Dict[str, str]:
    """`{absolute path: sha256}` of the files a split is read from."""
    out = {}
    for p in sorted(set(paths)):
        key = p if "://" in p else os.path.abspath(p)
        out[key] = file_digest(p)
    return out


def _why_stale(entry: Optional[Mapping], current: Mapping[str, str]) -> Optional[str]:
    if entry is None:
        return "not built yet"
    if not entry.get("num_examples"):
        return "holds no examples"
    built = entry.get("inputs")
    if built is None:
        return "built without input fingerprints (an older version); rebuilding to tie it to the data"
    if built == dict(current):
        return None
    changed = sorted(p for p in set(built) & set(current) if built[p] != current[p])
    if changed:
        more = f" and {len(changed) - 1} more" if len(changed) > 1 else ""
        return f"{changed[0]}{more} changed since the records were built"
    gone, new = sorted(set(built) - set(current)), sorted(set(current) - set(built))
    parts = ([f"{len(new)} new file(s) (e.g. {new[0]})"] if new else []) + (
        [f"{len(gone)} file(s) no longer read (e.g. {gone[0]})"] if gone else [])
    return "the input files differ: " + ", ".join(parts)


def stale_splits(record_dir: str, kind: str, current: Mapping[str, Mapping[str, str]]) -> Dict[str, str]:
    """`{split: reason}` for every split of `current` (`{split: input_digests(...)}`) whose records in
    `record_dir` are missing, empty, or were built from other input content."""
    entries = {}
    if os.path.isfile(os.path.join(record_dir, manifest_lib.MANIFEST_NAME)):
        entries = manifest_lib.read_manifest(record_dir, kind=kind).get("splits", {})
    out = {}
    for split, digests in current.items():
        reason = _why_stale(entries.get(split), digests)
        if reason:
            out[split] = reason
    return out


def refresh(record_dir: str, kind: str, current: Mapping[str, Mapping[str, str]],
            build: Callable[[List[str]], object], log: Callable[[str], None]) -> List[str]:
    """Calls `build(splits)` with the stale splits of `current` (each logged with its reason); returns them."""
    stale = stale_splits(record_dir, kind, current)
    for split, reason in sorted(stale.items()):
        log(f"records {record_dir} {split}: {reason}; building")
    if stale:
        build(sorted(stale))
    return sorted(stale)
