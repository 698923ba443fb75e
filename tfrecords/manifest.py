"""The JSON manifest written next to every record set, and its validation by readers.

`manifest.json` holds every builder parameter, the SentencePiece model checksum, the
record files in reading order with their counts, and the stream layout. Readers call
`read_manifest` + `validate_pretrain_manifest` + `check_record_files`; every mismatch is
a `ManifestError` (a ValueError) that names the field.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import re
from typing import Any, Dict, List, Optional, Tuple

from xlnet_tf import files
from xlnet_tf.errors import UserError

MANIFEST_NAME = "manifest.json"
PRETRAIN_KIND = "xlnet_pretrain"
# The fine-tuning record sets (classifier, RACE, SQuAD, tagging): 2 records the build's typed settings whole
# (tfrecords/records.py); 1 kept a few of them, compared by a list of keys.
FORMAT_VERSION = 2
FINETUNE_KINDS = ("xlnet_classifier", "xlnet_race", "xlnet_squad", "xlnet_tagging")
# Pretraining records: 2 stores `perm_rank` as rank + 1 (0 = plain context token), ~2.3 KB per example at
# seq 512; 1 stored -1 for context tokens (10-byte varints, ~6 KB per example).
PRETRAIN_FORMAT_VERSION = 2
_UPGRADES = {(PRETRAIN_KIND, 1): "format 1 stored perm_rank -1 for context tokens; rebuild the records "
                                 "with tfrecords/build_pretrain.py into a new directory",
             **{(kind, 1): "format 1 did not record its build settings whole; re-run the build into a new "
                           "directory (or remove this one)" for kind in FINETUNE_KINDS}}


def format_version(kind: Optional[str]) -> int:
    """The record format version a reader of `kind` expects."""
    return PRETRAIN_FORMAT_VERSION if kind == PRETRAIN_KIND else FORMAT_VERSION


class ManifestError(UserError):
    """A record directory or its manifest is missing, corrupt, or does not match."""


write_json_atomic = files.write_json_atomic  # the project's one atomic JSON writer (xlnet_tf/files.py)


def write_manifest(directory: str, manifest: Dict[str, Any]) -> str:
    path = os.path.join(directory, MANIFEST_NAME)
    write_json_atomic(path, manifest)
    return path


def read_manifest(directory: str, kind: Optional[str] = PRETRAIN_KIND) -> Dict[str, Any]:
    """Load `<directory>/manifest.json`; clear errors for a missing/empty directory."""
    if not directory:
        raise ManifestError("no record directory given")
    if not os.path.exists(directory):
        raise ManifestError(f"record directory does not exist: {directory}")
    if not os.path.isdir(directory):
        raise ManifestError(f"not a directory: {directory}")
    path = os.path.join(directory, MANIFEST_NAME)
    if not os.path.isfile(path):
        content = sorted(os.listdir(directory))
        what = "is empty" if not content else f"has no {MANIFEST_NAME} (unfinished build?)"
        raise ManifestError(f"record directory {directory} {what}")
    try:
        with open(path, encoding="utf-8") as f:
            manifest = json.load(f)
    except (OSError, ValueError) as e:
        raise ManifestError(f"cannot read {path}: {e}") from None
    if kind is not None and manifest.get("kind") != kind:
        raise ManifestError(f"{path}: kind is {manifest.get('kind')!r}, expected {kind!r}")
    found, wanted = manifest.get("format_version"), format_version(manifest.get("kind"))
    if found != wanted:
        hint = _UPGRADES.get((manifest.get("kind"), found), "rebuild the records with this version")
        raise ManifestError(f"{path}: format_version {found!r} is not supported (expected {wanted}): "
                            f"{hint}")
    RecordManifest.check(manifest, path)
    manifest["_path"] = path
    manifest["_dir"] = directory
    return manifest


# ---- the schema --------------------------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class Field:
    """One required manifest field: its name (a/b = b inside a) and JSON type(s)."""

    name: str
    types: Tuple[type, ...]


_SPIECE = (Field("spiece_model/sha256", (str,)), Field("spiece_model/vocab_size", (int,)))
_FINETUNE = (Field("max_seq_length", (int,)), Field("text/spiece_sha256", (str,)), Field("text/uncased", (bool,)),
             Field("splits", (dict,))) + _SPIECE
_SPLIT = (Field("file", (str,)), Field("num_records", (int,)), Field("num_bytes", (int,)),
          Field("num_examples", (int,)))


@dataclasses.dataclass(frozen=True)
class RecordManifest:
    """The typed header every `manifest.json` has, by kind and format version (the rest is descriptive).

    Pretraining (`xlnet_pretrain`, format 2): `params` (the build's PretrainConfig), `fingerprint` (of the
    parameters, SentencePiece model and input contents), `inputs/files` (path, bytes, sha256 per input file),
    `files` (record files in reading order), `totals`. Fine-tuning (`xlnet_classifier`, `xlnet_race`,
    `xlnet_squad`, `xlnet_tagging`, format 2): `max_seq_length`, `text` (the TextSettings), and per split `file`, `num_records`, `num_bytes`,
    `num_examples` (and `inputs`, `{path: sha256}` of the files it was read from; tfrecords/record_inputs.py).
    Both: `spiece_model/sha256` and `/vocab_size`."""

    kind: str
    format_version: int

    REQUIRED = {
        PRETRAIN_KIND: (Field("params", (dict,)), Field("fingerprint", (str,)), Field("files", (list,)),
                        Field("inputs/files", (list,)), Field("totals", (dict,))) + _SPIECE,
    }

    @classmethod
    def check(cls, manifest: Dict[str, Any], path: str) -> "RecordManifest":
        """ManifestError naming the first missing or mistyped field of `manifest` (read from `path`)."""
        kind = manifest.get("kind")
        for field in cls.REQUIRED.get(kind, _FINETUNE):
            _check_field(manifest, field, path)
        if kind != PRETRAIN_KIND:
            for split, entry in manifest["splits"].items():
                if not isinstance(entry, dict):
                    raise ManifestError(f"{path}: splits/{split} is not an object; rebuild the records")
                for field in _SPLIT:
                    _check_field(entry, field, path, prefix=f"splits/{split}/")
        return cls(kind, manifest["format_version"])


def _check_field(values: Dict[str, Any], field: Field, path: str, prefix: str = "") -> None:
    value: Any = values
    for part in field.name.split("/"):
        value = value.get(part) if isinstance(value, dict) else None
    ok = value is not None and isinstance(value, field.types) and not (
        isinstance(value, bool) and bool not in field.types)
    if not ok:
        what = "missing" if value is None else f"a {type(value).__name__}, not {field.types[0].__name__}"
        raise ManifestError(f"{path}: {prefix}{field.name} is {what}; the manifest is damaged or not written by "
                            "these builders: rebuild the records")


# Why a difference matters, added to the error (the comparison itself is generic: `validate_pretrain_manifest`).
_PRETRAIN_HINTS = {
    "objective": "the records bake their objective's targets in: pass the records' --objective or build records "
                 "with this one",
    "global_batch_size": "streams are laid out per global batch row: rebuild the records",
    "num_replicas": "bi_data rows are [forward; backward] per replica: rebuild the records",
}


def validate_pretrain_manifest(manifest: Dict[str, Any], *, seq_len: int, reuse_len: int,
                               num_predict: int, global_batch_size: int,
                               num_replicas: int = 1, spiece_model: Optional[str] = None,
                               spiece_sha256: Optional[str] = None,
                               perm_size: Optional[int] = None,
                               bi_data: Optional[bool] = None,
                               uncased: Optional[bool] = None,
                               objective: Optional[str] = None,
                               nsp: Optional[bool] = None) -> None:
    """Check the trainer's parameters against the records' manifest.

    The records' `PretrainConfig` (`params`) with the trainer's values put in (`None` arguments are not given)
    is compared whole with the recorded one: every differing field named at once (ManifestError). Beyond that:
    `nsp` asks for next-sentence labels (records without them are refused; records with them serve a trainer
    without NSP); with `bi_data` records the replica count must equal the build's (each replica's rows are
    [forward half; backward half]); otherwise it only has to divide the global batch.
    """
    from tfrecords.pretrain.config import PretrainConfig
    from xlnet_tf.artifacts import provenance

    p = manifest["params"]
    recorded = PretrainConfig(**{f.name: p[f.name] for f in dataclasses.fields(PretrainConfig) if f.name in p})
    given = dict(seq_len=seq_len, reuse_len=reuse_len, num_predict=num_predict, perm_size=perm_size, bi_data=bi_data,
                 uncased=uncased, objective=objective, global_batch_size=global_batch_size,
                 nsp=True if nsp else None, num_replicas=num_replicas if recorded.bi_data else None)
    wanted = dataclasses.replace(recorded, **{k: v for k, v in given.items() if v is not None})
    diffs = provenance.differences(recorded, wanted)
    if diffs:
        hints = "; ".join(_PRETRAIN_HINTS[name] for name, _, _ in diffs if name in _PRETRAIN_HINTS)
        raise ManifestError(f"{manifest.get('_path', MANIFEST_NAME)}: the records were built with other settings: "
                            f"{provenance.describe(diffs, 'in the records', 'given')}"
                            f"{' (' + hints + ')' if hints else ''}; give the records' values or rebuild them")
    if num_replicas < 1 or global_batch_size % num_replicas:
        raise ManifestError(f"global_batch_size={global_batch_size} is not divisible by "
                            f"num_replicas={num_replicas}")
    sha = manifest["spiece_model"]["sha256"]
    if spiece_model is not None:
        if not os.path.isfile(spiece_model):
            raise ManifestError(f"SentencePiece model not found: {spiece_model}")
        spiece_sha256 = files.file_sha256(spiece_model)
    if spiece_sha256 is not None and spiece_sha256 != sha:
        raise ManifestError(f"{manifest.get('_path', MANIFEST_NAME)}: the records were tokenized with the "
                            f"SentencePiece model of sha256 {sha}, not the one given ({spiece_sha256}): give "
                            "the records' model or rebuild them")


def check_record_files(manifest: Dict[str, Any], directory: Optional[str] = None) -> List[str]:
    """Paths of the record files in reading order; checks existence and byte sizes.

    Raises ManifestError for a missing or truncated file or a zero-example record set.
    """
    directory = directory or manifest["_dir"]
    entries = manifest.get("files") or []
    if not entries or sum(e["num_examples"] for e in entries) == 0:
        raise ManifestError(f"{manifest.get('_path', directory)}: the record set has no "
                            "examples")
    paths = []
    for e in entries:
        path = os.path.join(directory, e["name"])
        if not os.path.isfile(path):
            raise ManifestError(f"record file listed in the manifest is missing: {path}")
        size = os.path.getsize(path)
        if size != e["num_bytes"]:
            raise ManifestError(f"record file {path} has {size} bytes, the manifest says "
                                f"{e['num_bytes']} (truncated or corrupt)")
        paths.append(path)
    return paths


def record_file_paths(manifest: Dict[str, Any]) -> List[str]:
    """Every record file a manifest lists (pretraining `files`, or each split's `file`)."""
    directory = manifest["_dir"]
    if manifest.get("kind") == PRETRAIN_KIND:
        return [os.path.join(directory, e["name"]) for e in manifest.get("files", [])]
    return [os.path.join(directory, e["file"]) for e in manifest.get("splits", {}).values()]


@contextlib.contextmanager
def naming_corrupt_records(manifest: Dict[str, Any]):
    """Turns TensorFlow's `DataLossError` ("corrupted record at N", no file name) raised while reading the
    records of `manifest` into a ManifestError naming the damaged file (each file is read through to find
    it: the cost falls on the error path only)."""
    import tensorflow as tf

    try:
        yield
    except tf.errors.DataLossError as e:
        for path in record_file_paths(manifest):
            try:
                for _ in tf.data.TFRecordDataset(path):
                    pass
            except tf.errors.DataLossError as found:
                what = re.search(r"corrupted record at \d+", found.message)
                raise ManifestError(f"{path}: {what.group(0) if what else 'unreadable'} (the file has the right size "
                                    "but damaged content); rebuild the records") from None
        raise e


def check_vocab(manifest: Dict[str, Any], n_token: int) -> None:
    """The model's vocabulary (`n_token`) must be the records' SentencePiece model's size: a smaller one
    cannot embed some ids, a larger or different one reads every id as another piece."""
    check_vocab_size((manifest.get("spiece_model") or {}).get("vocab_size"), n_token,
                     manifest.get("_path", MANIFEST_NAME))


def check_vocab_size(vocab: Optional[int], n_token: int, where: str) -> None:
    """`check_vocab` for records (at `where`) tokenized with a `vocab`-piece model (None = unknown)."""
    if vocab is not None and vocab != n_token:
        raise ManifestError(
            f"{where}: the records were tokenized with a {vocab}-piece SentencePiece "
            f"model but the model has n_token={n_token} (--n_token / --model_config_path): use the model and "
            f"SentencePiece model that belong together, or rebuild the records")
