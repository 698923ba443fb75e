"""Record sets tied to their inputs by content.

Every split of a fine-tuning record set stores, in its manifest entry, `inputs`: the SHA-256 of each input
file it was read from (`{absolute path: sha256}`), next to the build options the manifest already records.
A runner given the raw data (`--data_dir`, `--train_file`, `--predict_file`) hashes the files the split
reads now and rebuilds the split when they differ from what the records were built from (changed content,
other files), when it holds no examples, or when it predates these fingerprints; it never trains or
evaluates on records of other data. (Rebuilding, rather than stopping, because the records are a cache of
the data the user named: the build options, which the user chose, must still match or the build stops
naming the option.) Pretraining records carry one fingerprint over all input files' contents
(tfrecords/pretrain/writer.py); a shard is reused on resume only when it matches.
"""

from __future__ import annotations

import dataclasses
import os
from typing import Any, Dict, Iterable, Mapping, Optional, Sequence

from tfrecords import manifest as manifest_lib
from xlnet_tf import files
from xlnet_tf.artifacts import provenance


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


@dataclasses.dataclass(frozen=True)
class RecordPlan:
    """What a run will read from its --record_dir, decided before anything is written.

    build: the typed build settings of the records (a task module's `*Build`); stale: `{split: why}` for the
    splits to (re)build first; vocab_size: the SentencePiece model's size (checked against the model's)."""

    build: Any
    stale: Mapping[str, str]
    vocab_size: Optional[int]


def plan_records(record_dir: str, kind: str, build_cls: type, needed: Sequence[str], *,
                 wanted: Any = None, current: Optional[Mapping[str, Mapping[str, str]]] = None,
                 vocab_size: Optional[int] = None, reader: Optional[Mapping[str, Any]] = None,
                 source_flag: str = "--data_dir") -> RecordPlan:
    """The records a run will read, checked against what it was given; writes nothing.

    With the raw data (`wanted`: the build settings the run's flags make; `current`: `{split: input_digests}`
    of the needed splits): records already in `record_dir` must have been built with `wanted` (compared whole:
    ManifestError naming every differing field, whether or not a split is rebuilt), and the splits missing,
    empty or built from other content are stale. Without it, the records must exist and hold `needed`, and the
    reader's values (`reader`, as `records.check_reader` takes them) must match them."""
    from tfrecords import records as records_lib

    path = os.path.join(record_dir, manifest_lib.MANIFEST_NAME)
    m = manifest_lib.read_manifest(record_dir, kind=kind) if wanted is None or os.path.isfile(path) else None
    if wanted is not None:
        if m is not None:
            provenance.require_same(records_lib.recorded_build(m, build_cls), wanted, where=m["_path"],
                                    error=manifest_lib.ManifestError, what="the records were built with other settings",
                                    there="in the records", now="from these flags",
                                    remedy="give the flags they were built with, or another --record_dir")
        stale = stale_splits(record_dir, kind, current or {})
        return RecordPlan(wanted, stale, vocab_size if vocab_size is not None else m["spiece_model"]["vocab_size"])
    build = records_lib.check_reader(m, build_cls, **(reader or {}))
    missing = [split for split in needed if split not in m.get("splits", {})]
    if missing:
        raise manifest_lib.ManifestError(f"{m['_path']}: no {missing[0]!r} split in the records (splits: "
                                         f"{', '.join(sorted(m.get('splits', {}))) or 'none'}); give {source_flag} "
                                         "to build it")
    return RecordPlan(build, {}, m["spiece_model"]["vocab_size"])
