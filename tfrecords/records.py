"""Record I/O of the fine-tuning builders (classifier, RACE, SQuAD): serialize, write, manifests, read.

A fine-tuning record set is one directory:

    <split>.tfrecord   one `tf.train.Example` per record (`serialize_features`: int64 features, float
                       only where the builder names them), in the split's record order
    <split>.guids.txt  line k = the id of the example whose `example_index` is k (classifier, RACE)
    manifest.json      `kind` (xlnet_classifier, xlnet_race, xlnet_squad, xlnet_tagging), `format_version`,
                       the build's typed settings (the task module's frozen `*Build` dataclass, every field
                       at the top level, `text` = xlnet_tf.artifacts.TextSettings), `spiece_model`
                       (`spiece_entry`), and per split `file`, `num_records`, `num_bytes`, `num_examples`
                       (tfrecords/manifest.py checks the schema)

Writing: every file of a build goes through `StagedFiles` (temporary names, swapped in by `commit` after
the manifest check), a split's records through `write_split_records` (or `write_records` for a record file
alone). A build into a directory that holds records of other build settings is refused
(`merged_manifest`: the recorded settings object compared whole with the build's, DataError naming every
differing field); one with the same settings adds or replaces its splits.
Non-train splits are padded to whole eval batches (`pad_count`).

Reading: `recorded_build` (the typed settings a manifest records), `check_reader` (a reader's values against
them, compared whole: ManifestError naming every differing field),
`split_record_file` (the split's file, its size checked), `records_dataset` (the tf.data plumbing every
fine-tuning reader shares), `read_split_guids`. The task modules (classifier_data.py, race_data.py,
squad_data.py) own their examples, features, schema and parse functions.
"""

from __future__ import annotations

import dataclasses
import os
from typing import TYPE_CHECKING, Any, Callable, Dict, Iterable, Iterator, List, Optional, Sequence, Tuple

import numpy as np

from tfrecords import manifest as manifest_lib
from xlnet_tf import files
from xlnet_tf.artifacts import provenance
from xlnet_tf.errors import UserError

if TYPE_CHECKING:
    from xlnet_tf.text.tokenization import XLNetTokenizer

CONVERT_CHUNK = 4096  # examples tokenized and packed at a time while writing


class DataError(UserError):
    """Bad task input; the message names the file (and line) at fault."""


# ---- serialization --------------------------------------------------------------------------

def serialize_features(f: Dict[str, np.ndarray], float_keys: Sequence[str] = ()) -> bytes:
    """One example (arrays without a batch axis) as a `tf.train.Example`; `float_keys`
    are float features, everything else int64 (`attention_mask` included)."""
    import tensorflow as tf

    feats = {}
    for k, v in f.items():
        v = np.asarray(v).reshape([-1])
        if k in float_keys:
            feats[k] = tf.train.Feature(float_list=tf.train.FloatList(value=v.tolist()))
        else:
            feats[k] = tf.train.Feature(
                int64_list=tf.train.Int64List(value=v.astype(np.int64).tolist()))
    return tf.train.Example(features=tf.train.Features(feature=feats)).SerializeToString(
        deterministic=True)


def unstack(features: Dict[str, np.ndarray]) -> Iterator[Dict[str, np.ndarray]]:
    """Stacked arrays (leading axis = example) -> one dict per example."""
    n = len(next(iter(features.values())))
    for k in range(n):
        yield {key: v[k] for key, v in features.items()}


# ---- staged writing -------------------------------------------------------------------------

class StagedFiles:
    """The files of one build, written under temporary names beside their final ones and swapped in only by
    `commit`, after every check has passed: a refused or failed build leaves every file as it was.

    `header` is the build's manifest without its splits (the fields of `build`, its typed settings, at the top
    level), `kind` and `build` as `merged_manifest` takes them: the records already in `output_dir` are checked against it when the build starts (a conflicting build
    is refused before anything is converted), then `output_dir` is created. Use as a context manager: leaving
    the block by an exception (or without `commit`) removes the temporary files. `path(name)` is where to write
    `<output_dir>/<name>`. `commit(splits)` checks the manifest again (`merged_manifest`), then first writes the
    old manifest without the splits being replaced (a build killed while swapping leaves them absent, so they are
    rebuilt, never read with another build's manifest), swaps every file in, and writes the merged manifest.
    """

    def __init__(self, output_dir: str, kind: str, header: Dict[str, Any], build: Any):
        self.output_dir, self.kind, self.build = output_dir, kind, build
        self.header = {**header, **provenance.to_json(build)}
        merged_manifest(output_dir, kind, {**self.header, "splits": {}}, build)
        os.makedirs(output_dir, exist_ok=True)
        self.pending: Dict[str, str] = {}  # final path -> temporary path

    def path(self, name: str) -> str:
        import glob

        final = os.path.join(self.output_dir, name)
        for stale in glob.glob(glob.escape(final) + ".tmp-*"):  # left by a killed build
            os.remove(stale)
        tmp = f"{final}.tmp-{os.getpid()}"
        self.pending[final] = tmp
        return tmp

    def commit(self, splits: Dict[str, Any]) -> Dict[str, Any]:
        """Swaps the build's files in and writes its manifest (`header` with `splits`); returns the merged one."""
        manifest = {**self.header, "splits": splits}
        merged = merged_manifest(self.output_dir, self.kind, manifest, self.build)  # refuses before any swap
        path = os.path.join(self.output_dir, manifest_lib.MANIFEST_NAME)
        if os.path.isfile(path):
            old = manifest_lib.read_manifest(self.output_dir, kind=self.kind)
            kept = {k: v for k, v in old.get("splits", {}).items() if k not in manifest["splits"]}
            manifest_lib.write_manifest(self.output_dir, {**old, "splits": kept})
        for final, tmp in self.pending.items():
            files.replace(tmp, final)
        self.pending = {}
        manifest_lib.write_manifest(self.output_dir, merged)
        return merged

    def discard(self) -> None:
        for tmp in self.pending.values():
            if os.path.exists(tmp):
                os.remove(tmp)
        self.pending = {}

    def __enter__(self) -> "StagedFiles":
        return self

    def __exit__(self, *exc) -> None:
        self.discard()


def write_records(path: str, records: Iterable[Dict[str, np.ndarray]], float_keys: Sequence[str] = ()
                  ) -> Tuple[int, int]:
    """Write `records` (one feature dict per record, see `serialize_features`) to the record file `path` (a
    `StagedFiles` temporary name); returns (count, bytes)."""
    import tensorflow as tf

    n = 0
    with tf.io.TFRecordWriter(path) as w:
        for rec in records:
            w.write(serialize_features(rec, float_keys))
            n += 1
    return n, os.path.getsize(path)


def write_split_records(staged: StagedFiles, split: str, records: Iterable[Dict[str, np.ndarray]],
                        float_keys: Sequence[str], guids: Sequence[str]) -> Dict[str, Any]:
    """Write `<split>.tfrecord` and `<split>.guids.txt` under `staged`'s temporary names (swapped in by its
    `commit`).

    `records`: one feature dict per record (arrays without a batch axis). Returns the
    manifest entry (`file`, `num_records`, `num_bytes`, `guids_file`).
    """
    n, size = write_records(staged.path(f"{split}.tfrecord"), records, float_keys)
    with open(staged.path(f"{split}.guids.txt"), "w", encoding="utf-8") as f:
        for ln in guids:
            f.write(ln.replace("\n", " ").replace("\r", " ") + "\n")
    return {"file": f"{split}.tfrecord", "num_records": n, "num_bytes": size,
            "guids_file": f"{split}.guids.txt"}


# ---- manifests ------------------------------------------------------------------------------

def merged_manifest(output_dir: str, kind: str, manifest: Dict[str, Any], build: Any) -> Dict[str, Any]:
    """`manifest` with the splits of the manifest already in `output_dir` that it does not rebuild, when that
    one records the same build settings as `build` (compared whole); DataError naming every differing field
    otherwise. Writes nothing (`StagedFiles.commit` writes)."""
    path = os.path.join(output_dir, manifest_lib.MANIFEST_NAME)
    if not os.path.isfile(path):
        return manifest
    try:
        old = manifest_lib.read_manifest(output_dir, kind=kind)
    except manifest_lib.ManifestError as e:
        raise DataError(f"{e}; use a new output_dir") from None
    provenance.require_same(recorded_build(old, type(build)), build, where=path, error=DataError,
                            what="the records there were built with other settings",
                            remedy="use a new output_dir (or build with the settings they were built with)")
    splits = {**old.get("splits", {}), **manifest["splits"]}
    return {**manifest, "splits": dict(sorted(splits.items()))}


def spiece_entry(spiece_model: str, tok: XLNetTokenizer) -> Dict[str, Any]:
    """The manifest's `spiece_model`: the model's absolute path, sha256 and vocabulary size."""
    return {"path": os.path.abspath(spiece_model), "sha256": tok.sha256,
            "vocab_size": tok.vocab_size}


def pad_count(n: int, multiple: int) -> int:
    """Padding records that make `n` a multiple of `multiple` (0 when `multiple` is 0 or less)."""
    return (-n) % multiple if multiple and multiple > 0 else 0


# ---- reading --------------------------------------------------------------------------------

def recorded_build(m: Dict[str, Any], build_cls: type) -> Any:
    """The typed build settings (`build_cls`, a task module's `*Build`) that the manifest `m` records;
    ManifestError naming the field when one is missing or malformed."""
    names = [f.name for f in dataclasses.fields(build_cls)]
    where = m.get("_path", manifest_lib.MANIFEST_NAME)
    return provenance.from_json(build_cls, {k: m[k] for k in names if k in m}, where, manifest_lib.ManifestError)


def check_reader(m: Dict[str, Any], build_cls: type, *, spiece_model: Optional[str] = None,
                 spiece_sha256: Optional[str] = None, uncased: Optional[bool] = None, **given: Any) -> Any:
    """The records' build settings (`recorded_build`), after checking them against what a reader was given:
    its values (`given`: build fields; `spiece_model` or `spiece_sha256` and `uncased` for the text settings;
    None = not given) replace the recorded ones and the result is compared whole with the record, so a reader
    gives what it knows and every difference is named at once (ManifestError)."""
    recorded = recorded_build(m, build_cls)
    if spiece_model is not None:
        if not os.path.isfile(spiece_model):
            raise manifest_lib.ManifestError(f"SentencePiece model not found: {spiece_model}")
        spiece_sha256 = files.file_sha256(spiece_model)
    text = {k: v for k, v in (("spiece_sha256", spiece_sha256), ("uncased", uncased)) if v is not None}
    values = {k: tuple(v) if isinstance(v, list) else v for k, v in given.items() if v is not None}
    wanted = dataclasses.replace(recorded, text=dataclasses.replace(recorded.text, **text), **values)
    provenance.require_same(recorded, wanted, where=m.get("_path", manifest_lib.MANIFEST_NAME),
                            error=manifest_lib.ManifestError, what="the records were built with other settings",
                            there="in the records", now="given",
                            remedy="rebuild the records with these settings (in another directory) or give the "
                                   "records' values")
    return recorded


def split_record_file(m: Dict[str, Any], split: str) -> str:
    """Path of `split`'s record file (existence and size checked against the manifest)."""
    splits = m.get("splits") or {}
    if split not in splits:
        raise manifest_lib.ManifestError(
            f"{m['_path']}: no split {split!r} in the records (splits: "
            f"{', '.join(sorted(splits)) or 'none'})")
    e = splits[split]
    return manifest_lib.check_record_files(
        {"files": [{"name": e["file"], "num_examples": e["num_records"],
                    "num_bytes": e["num_bytes"]}], "_path": m["_path"]}, m["_dir"])[0]


def read_split_guids(record_dir: str, split: str, kind: str) -> List[str]:
    """Example ids of `split` of the `kind` records in `record_dir` (`<split>.guids.txt`), indexed by
    `example_index`."""
    m = manifest_lib.read_manifest(record_dir, kind=kind)
    if split not in m.get("splits", {}):
        raise manifest_lib.ManifestError(f"{m['_path']}: no split {split!r} in the records")
    with open(os.path.join(record_dir, m["splits"][split]["guids_file"]),
              encoding="utf-8") as f:
        return [ln.rstrip("\n") for ln in f]


def records_dataset(path: str, num_records: int, has_padding: bool, parse_fn: Callable,
                    dummy_record: bytes, batch_size: int, is_training: bool, *,
                    seed: Optional[int], drop_remainder: bool, repeat: Optional[bool],
                    shuffle_buffer: int, input_context=None):
    """Shared tf.data plumbing of the fine-tuning readers.

    Training: padding examples dropped, shuffled (`shuffle_buffer`, `seed`), repeated unless
    `repeat=False`, batched with `drop_remainder`. Eval/predict: file order, never
    repeated unless `repeat=True`; with `drop_remainder` the stream is padded with
    `dummy_record` up to a whole number of batches, so no real example is dropped.
    `input_context`: this input pipeline reads every `num_input_pipelines`-th record.
    """
    import tensorflow as tf

    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    ds = tf.data.TFRecordDataset([path], buffer_size=8 << 20)
    count = num_records
    if input_context is not None and input_context.num_input_pipelines > 1:
        n, i = input_context.num_input_pipelines, input_context.input_pipeline_id
        ds = ds.shard(n, i)
        count = len(range(i, num_records, n))
    if is_training:
        if has_padding:
            spec = {"is_real_example": tf.io.FixedLenFeature([1], tf.int64)}
            ds = ds.filter(lambda s: tf.io.parse_single_example(s, spec)["is_real_example"][0]
                           > 0)
        if shuffle_buffer and shuffle_buffer > 1:
            ds = ds.shuffle(shuffle_buffer, seed=seed, reshuffle_each_iteration=True)
        if repeat is None or repeat:
            ds = ds.repeat()
    else:
        extra = pad_count(count, batch_size) if drop_remainder else 0
        if extra:
            ds = ds.concatenate(tf.data.Dataset.from_tensors(tf.constant(dummy_record))
                                .repeat(extra))
        if repeat:
            ds = ds.repeat()
    ds = ds.batch(batch_size, drop_remainder=drop_remainder)
    ds = ds.map(parse_fn, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
    return ds.prefetch(tf.data.AUTOTUNE)
