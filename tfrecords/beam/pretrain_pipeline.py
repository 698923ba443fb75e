"""The pretraining record builder (`tfrecords.pretrain.writer`) as an Apache Beam pipeline.

Same records, byte for byte, as `pretrain_data.build_pretrain_records` for the same
parameters, because every step calls the local builder's own functions and the unit of
parallelism is the local builder's: one (pass, shard) task.

    files ──Reshuffle──> IndexFile (corpus.index_documents, one file per call)
          ──ToList──> DocumentIndex (files in sorted order, as corpus.index_documents)
          ──FlatMap──> ShardTasks (pretrain_rows.plan_pass + shard_task, per pass)
          ──Reshuffle──> BuildShard (pretrain_data.build_shard: read + tokenize the shard's
                          documents into ONE stream, make_rows, iter_steps, serialize, write
                          `<split>-<pass>-<shard>-of-<n>.tfrecord` + `.json` under a
                          temporary name, then rename; a finished shard is skipped)
          ──ToList──> WriteManifest (pretrain_data.make_manifest -> manifest.json, only
                          once every (pass, shard) reported; otherwise the pipeline fails)

A shard's token stream is formed inside one `BuildShard` call, so the stream layout
(DESIGN §4: step-major, row-minor, row r of step t+1 continues row r of step t, bi_data
halves per replica) is exactly the local builder's, whatever the runner does with
bundles, retries or worker counts. Parallelism: the per-file index scan and the
`num_passes * num_shards` shard tasks (use at least a few shards per worker).

Paths. Local paths are passed to the shared functions as they are (DirectRunner, or a
filesystem mounted at the same path on every worker): `build_shard` reads its documents
by byte range, as in the local builder. Inputs on `gs://`, `s3://`, `hdfs://` ... are
not read by random access (every shard would touch every file): `Distribute` reads each
file once, in order, and sends every document, for every pass, to its (pass, shard) with
its position in the shard's plan; `CoGroupByKey` joins them with the shard's task, and
`BuildShard` writes them back to back in plan order into a worker-local file and runs
`build_shard` on it (same bytes, same order: same records; a missing document is an
error). Remote outputs are written locally, then uploaded under a temporary name and
renamed (`tfrecords.beam.fs`).

Entry points: `build_pretrain_records_beam` (library), `python -m
tfrecords.beam.build_pretrain` (CLI, the flags of `tfrecords/build_pretrain.py` plus
`--runner` and Beam pipeline options after `--`).
"""

from __future__ import annotations

import dataclasses
import logging
import os
import shutil
import tempfile
import time
from typing import Any, Callable, Dict, Iterable, List, Optional, Sequence, Tuple, Union

import numpy as np

import apache_beam as beam
from apache_beam.options.pipeline_options import (DirectOptions, PipelineOptions,
                                                  StandardOptions, WorkerOptions)

from tfrecords.readers import corpus as corpus_lib
from tfrecords import manifest as manifest_lib
from tfrecords.pretrain import writer as PD
from tfrecords.pretrain.config import BuildError, PretrainConfig, record_file_name
from tfrecords.pretrain.rows import ShardTask, plan_pass, shard_task
from tfrecords import record_inputs
from tfrecords.beam import fs
from xlnet_tf.text import tokenization

_LOG = logging.getLogger(__name__)
_METRICS = "xlnet_pretrain"
DIRECT_RUNNERS = ("directrunner", "direct")


@dataclasses.dataclass(frozen=True)
class BuildSpec:
    """What the launcher resolved once and every worker needs (small, picklable)."""

    cfg: PretrainConfig
    input_glob: str
    files: Tuple[str, ...]
    file_sizes: Tuple[int, ...]
    file_digests: Tuple[str, ...]  # SHA-256 of each input file's bytes (the fingerprint covers them)
    spiece_model: str  # as recorded in the manifest (absolute local path, or a URI)
    spiece_sha256: str
    vocab_size: int
    output_dir: str
    fingerprint: str
    log_every_s: float = 30.0
    stage_io: bool = False  # stage local paths too, as if they were remote (tests)

    @property
    def stage_inputs(self) -> bool:
        return self.stage_io or not all(fs.is_local(f) for f in self.files)

    @property
    def stage_outputs(self) -> bool:
        return self.stage_io or not fs.is_local(self.output_dir)

    def shard_names(self) -> List[str]:
        c = self.cfg
        return [record_file_name(c.split, p, s, c.num_shards)
                for p in range(c.num_passes) for s in range(c.num_shards)]


# ---- index -----------------------------------------------------------------------------------

class IndexFileFn(beam.DoFn):
    """File number k -> `(k, start, end, num_invalid_lines, size)` of its documents
    (`corpus.index_documents` on that one file)."""

    def __init__(self, spec: BuildSpec):
        self._spec = spec

    def setup(self):
        self._tmp = tempfile.mkdtemp(prefix="xlnet_beam_index_")
        # index_documents refuses a list of files without any document; a one-document
        # sentinel after the real file keeps a blank file legal here (as in a multi-file
        # corpus), and its document is dropped below.
        self._sentinel = os.path.join(self._tmp, "sentinel.txt")
        with open(self._sentinel, "wb") as f:
            f.write(b"x\n")

    def teardown(self):
        shutil.rmtree(getattr(self, "_tmp", ""), ignore_errors=True)

    def process(self, k: int):
        path = self._spec.files[k]
        local = path
        if self._spec.stage_inputs:
            local = os.path.join(self._tmp, f"input-{k}")
            fs.download(path, local)
        try:
            idx = corpus_lib.index_documents(
                [local, self._sentinel], skip_invalid_utf8=self._spec.cfg.skip_invalid_utf8)
        except corpus_lib.CorpusError as e:
            if local == path:
                raise
            raise corpus_lib.CorpusError(str(e).replace(local, path)) from None
        finally:
            if local != path and os.path.exists(local):
                os.remove(local)
        keep = idx.file_idx == 0
        beam.metrics.Metrics.counter(_METRICS, "indexed_files").inc()
        beam.metrics.Metrics.counter(_METRICS, "indexed_documents").inc(int(keep.sum()))
        yield k, idx.start[keep], idx.end[keep], int(idx.num_invalid_lines), \
            int(idx.file_sizes[0])


def assemble_index(parts: Iterable[Tuple], spec: BuildSpec) -> corpus_lib.DocumentIndex:
    """The per-file results -> the `DocumentIndex` `corpus.index_documents(files)` gives."""
    parts = sorted(parts, key=lambda t: t[0])
    if [t[0] for t in parts] != list(range(len(spec.files))):
        raise BuildError(f"indexed {len(parts)} of {len(spec.files)} input files")
    for k, _, _, _, size in parts:
        if size != spec.file_sizes[k]:
            raise BuildError(f"{spec.files[k]} changed during the build ({size} bytes "
                                f"now, {spec.file_sizes[k]} when the build started)")
    file_idx = np.concatenate([np.full(len(t[1]), t[0], np.int64) for t in parts])
    if not file_idx.shape[0]:
        files = list(spec.files)
        raise corpus_lib.CorpusError(
            f"no documents with text in {len(files)} file(s): " + ", ".join(files[:5])
            + (" ..." if len(files) > 5 else ""))
    return corpus_lib.DocumentIndex(
        list(spec.files), file_idx,
        np.concatenate([np.asarray(t[1], np.int64) for t in parts]),
        np.concatenate([np.asarray(t[2], np.int64) for t in parts]),
        int(sum(t[3] for t in parts)), [int(t[4]) for t in parts])


def plan_tasks(index: corpus_lib.DocumentIndex, spec: BuildSpec) -> Iterable[ShardTask]:
    """Every (pass, shard) task, as the local builder plans them (`files` left out: the
    workers have them in `spec`)."""
    cfg = spec.cfg
    for p in range(cfg.num_passes):
        for s, docs in enumerate(plan_pass(index.doc_bytes, cfg.num_shards, cfg.seed, p)):
            task = shard_task(cfg, p, s, index, docs, spec.spiece_model, spec.output_dir,
                              spec.fingerprint, spec.log_every_s)
            yield dataclasses.replace(task, files=[])


def assign_documents(index: corpus_lib.DocumentIndex, spec: BuildSpec
                     ) -> List[Tuple[np.ndarray, np.ndarray]]:
    """Per pass: `(shard_of int32 [num_docs], position int64 [num_docs])`, the shard of
    every document and its position in that shard's document list (`plan_pass`)."""
    cfg = spec.cfg
    out = []
    for p in range(cfg.num_passes):
        shard_of = np.full(index.num_docs, -1, np.int32)
        position = np.full(index.num_docs, -1, np.int64)
        for s, docs in enumerate(plan_pass(index.doc_bytes, cfg.num_shards, cfg.seed, p)):
            shard_of[docs] = s
            position[docs] = np.arange(docs.shape[0])
        out.append((shard_of, position))
    return out


class DistributeFn(beam.DoFn):
    """File number k -> `((pass, shard), (position, document bytes))` for every document
    of the file and every pass; the file is read once, front to back."""

    def __init__(self, spec: BuildSpec):
        self._spec = spec

    def process(self, k: int, index: corpus_lib.DocumentIndex,
                assignment: List[Tuple[np.ndarray, np.ndarray]]):
        lo, hi = np.searchsorted(index.file_idx, [k, k + 1])
        path = self._spec.files[k]
        with fs.open_read(path) as f:
            for d in range(int(lo), int(hi)):
                start, n = int(index.start[d]), int(index.end[d] - index.start[d])
                f.seek(start)
                data = f.read(n)
                if len(data) != n:
                    raise BuildError(f"{path}: short read at byte {start} ({len(data)} "
                                        f"of {n} bytes); was the file changed?")
                for p, (shard_of, position) in enumerate(assignment):
                    yield (p, int(shard_of[d])), (int(position[d]), data)
        beam.metrics.Metrics.counter(_METRICS, "distributed_documents").inc(int(hi - lo))


# ---- shards ----------------------------------------------------------------------------------

def finished_stats(output_dir: str, name: str, fingerprint: str) -> Optional[Dict[str, Any]]:
    """`pretrain_data._finished_stats` for any path (local: that very function)."""
    if fs.is_local(output_dir):
        return PD._finished_stats(output_dir, name, fingerprint)
    final, side = fs.join(output_dir, name), fs.join(output_dir, name + ".json")
    if not (fs.exists(final) and fs.exists(side)):
        return None
    try:
        stats = fs.read_json(side)
    except (OSError, ValueError):
        return None
    if stats.get("fingerprint") != fingerprint:
        raise BuildError(f"{output_dir} holds {name} built with different parameters or "
                            "inputs; use a new output_dir")
    if stats.get("num_bytes") != fs.size(final):
        return None
    return stats


class BuildShardFn(beam.DoFn):
    """One (pass, shard) task -> its record file + sidecar (`pretrain_data.build_shard`)
    -> the shard's stats. A finished shard (same fingerprint) is not rebuilt."""

    def __init__(self, spec: BuildSpec):
        self._spec = spec

    def setup(self):
        self._tmp = tempfile.mkdtemp(prefix="xlnet_beam_shard_")
        spm = self._spec.spiece_model
        if fs.is_local(spm) and not self._spec.stage_io:
            self._spm = spm
        else:
            self._spm = os.path.join(self._tmp, "spiece.model")
            fs.download(spm, self._spm)
            sha = tokenization.file_sha256(self._spm)
            if sha != self._spec.spiece_sha256:
                raise BuildError(f"{spm} changed during the build (sha256 {sha})")

    def teardown(self):
        shutil.rmtree(getattr(self, "_tmp", ""), ignore_errors=True)

    def process(self, element):
        """`element`: a ShardTask (local inputs), or `((pass, shard), {"task": [task],
        "docs": [(position, bytes), ...]})` from the CoGroupByKey (remote inputs)."""
        spec = self._spec
        docs = None
        if not isinstance(element, ShardTask):
            key, grouped = element
            tasks = list(grouped["task"])
            if len(tasks) != 1:
                raise BuildError(f"shard {key}: {len(tasks)} tasks (documents of a shard "
                                    "that was not planned?)")
            element, docs = tasks[0], grouped["docs"]
        task = dataclasses.replace(element, files=list(spec.files), spiece_model=self._spm)
        stats = finished_stats(spec.output_dir, task.name, spec.fingerprint)
        if stats is not None:
            _LOG.info("skip finished %s", task.name)
            beam.metrics.Metrics.counter(_METRICS, "shards_skipped").inc()
        elif docs is None and not spec.stage_outputs:
            stats = PD.build_shard(task)
        else:
            stats = self._build_staged(task, docs)
        for key in ("num_docs", "num_tokens", "num_examples", "num_steps", "num_bytes"):
            beam.metrics.Metrics.counter(_METRICS, key).inc(int(stats[key]))
        beam.metrics.Metrics.counter(_METRICS, "shards").inc()
        _LOG.info("%s: %d examples, %d steps", task.name, stats["num_examples"],
                  stats["num_steps"])
        yield stats

    def _build_staged(self, task: ShardTask, docs) -> Dict[str, Any]:
        spec = self._spec
        work = tempfile.mkdtemp(prefix=f"{task.name}-", dir=self._tmp)
        try:
            if docs is not None:  # the shard's documents, back to back, in plan order
                path = os.path.join(work, "documents.txt")
                n = task.start.shape[0]
                start = np.full(n, -1, np.int64)
                end = np.full(n, -1, np.int64)
                pos = 0
                with open(path, "wb") as f:
                    for i, data in docs:
                        if start[i] >= 0:
                            raise BuildError(f"shard {task.name}: document {i} twice")
                        f.write(data)
                        start[i], end[i] = pos, pos + len(data)
                        pos += len(data)
                if (start < 0).any():
                    raise BuildError(f"shard {task.name}: {int((start < 0).sum())} of {n} "
                                        "documents did not arrive")
                if not np.array_equal(end - start, task.end - task.start):
                    raise BuildError(f"shard {task.name}: documents changed size")
                task = dataclasses.replace(task, files=[path], start=start, end=end,
                                           file_idx=np.zeros_like(task.file_idx))
            out = spec.output_dir if not spec.stage_outputs else work
            stats = PD.build_shard(dataclasses.replace(task, output_dir=out))
            if spec.stage_outputs:  # sidecar first, then the records (as build_shard)
                fs.publish(os.path.join(work, task.name + ".json"),
                           fs.join(spec.output_dir, task.name + ".json"))
                fs.publish(os.path.join(work, task.name), fs.join(spec.output_dir, task.name))
            return stats
        finally:
            shutil.rmtree(work, ignore_errors=True)


# ---- manifest --------------------------------------------------------------------------------

def write_manifest(stats: Iterable[Dict[str, Any]], index: corpus_lib.DocumentIndex,
                   spec: BuildSpec) -> Dict[str, Any]:
    """`pretrain_data.make_manifest` over every shard's stats -> manifest.json. Raises
    unless exactly the planned (pass, shard) set reported (never a shorter dataset)."""
    by_name: Dict[str, Dict[str, Any]] = {}
    for st in stats:
        old = by_name.setdefault(st["name"], st)
        if _content(old) != _content(st):  # a duplicate (a retry) must describe the same file
            raise BuildError(f"two different results for shard {st['name']}")
    names = spec.shard_names()
    missing = [n for n in names if n not in by_name]
    extra = sorted(set(by_name) - set(names))
    if missing or extra:
        raise BuildError(
            f"{len(missing)} of {len(names)} shard(s) missing ({', '.join(missing[:5])})"
            + (f"; unexpected: {extra}" if extra else "") + "; manifest.json not written")
    tok = _TokenizerInfo(spec.spiece_sha256, spec.vocab_size)
    manifest = PD.make_manifest(spec.cfg, spec.input_glob, list(spec.files), index,
                                spec.spiece_model, tok, spec.fingerprint,
                                [by_name[n] for n in names], list(spec.file_digests))
    fs.write_json(fs.join(spec.output_dir, manifest_lib.MANIFEST_NAME), manifest)
    return manifest


def _content(stats: Dict[str, Any]) -> Dict[str, Any]:
    return {k: v for k, v in stats.items() if k != "seconds"}


@dataclasses.dataclass(frozen=True)
class _TokenizerInfo:  # what make_manifest reads from the tokenizer
    sha256: str
    vocab_size: int


class BuildPretrainRecords(beam.PTransform):
    """Pipeline root -> PCollection of one element: the manifest written."""

    def __init__(self, spec: BuildSpec):
        super().__init__()
        self._spec = spec

    def expand(self, pbegin):
        spec = self._spec
        files = pbegin | "Files" >> beam.Create(list(range(len(spec.files))))
        index = (files
                 | "SpreadFiles" >> beam.Reshuffle()
                 | "IndexFile" >> beam.ParDo(IndexFileFn(spec))
                 | "AllFiles" >> beam.combiners.ToList()
                 | "Index" >> beam.Map(assemble_index, spec))
        tasks = index | "Plan" >> beam.FlatMap(plan_tasks, spec)
        if not spec.stage_inputs:  # build_shard reads its documents by byte range
            shards = tasks | "SpreadShards" >> beam.Reshuffle()
        else:  # each file read once; documents shuffled to their (pass, shard)
            assignment = index | "Assign" >> beam.Map(assign_documents, spec)
            docs = (files
                    | "SpreadFilesAgain" >> beam.Reshuffle()
                    | "Distribute" >> beam.ParDo(DistributeFn(spec),
                                                 beam.pvalue.AsSingleton(index),
                                                 beam.pvalue.AsSingleton(assignment)))
            keyed = tasks | "KeyTasks" >> beam.Map(lambda t: ((t.pass_id, t.shard), t))
            shards = {"task": keyed, "docs": docs} | "GroupShards" >> beam.CoGroupByKey()
        return (shards
                | "BuildShard" >> beam.ParDo(BuildShardFn(spec))
                | "AllShards" >> beam.combiners.ToList()
                | "WriteManifest" >> beam.Map(write_manifest, beam.pvalue.AsSingleton(index),
                                              spec))


# ---- launcher --------------------------------------------------------------------------------

def make_spec(input_glob: str, spiece_model: str, output_dir: str, cfg: PretrainConfig,
              log_every_s: float = 30.0, stage_io: bool = False) -> BuildSpec:
    """Validate the parameters and resolve the inputs (as `build_pretrain_records` does
    before building): files and sizes, SentencePiece checksum, fingerprint, and the
    check that `output_dir` holds no records of another build."""
    cfg.validate()
    if fs.is_local(spiece_model):
        if not os.path.isfile(spiece_model):
            raise BuildError(f"SentencePiece model not found: {spiece_model}")
        spiece_model = os.path.abspath(spiece_model)
        tok = tokenization.XLNetTokenizer(spiece_model, uncased=cfg.uncased,
                                          keep_accents=cfg.keep_accents)
    else:
        if not fs.exists(spiece_model):
            raise BuildError(f"SentencePiece model not found: {spiece_model}")
        tok = tokenization.XLNetTokenizer(model_proto=fs.read_bytes(spiece_model),
                                          uncased=cfg.uncased, keep_accents=cfg.keep_accents)
    files, sizes = fs.expand_globs(input_glob)
    digests = []
    for f in files:  # the driver reads every input once: the fingerprint is of content, not names and sizes
        with fs.open_read(f) as handle:
            digests.append(record_inputs.stream_digest(handle))
    fingerprint = PD._fingerprint(cfg, tok.sha256, files, digests)
    if fs.is_local(output_dir):
        output_dir = os.path.abspath(output_dir)  # workers may run in another directory
        os.makedirs(output_dir, exist_ok=True)
    old = fs.join(output_dir, manifest_lib.MANIFEST_NAME)
    if fs.exists(old):
        PD.check_same_build(output_dir, fs.read_json(old), fingerprint, files, digests)
    return BuildSpec(cfg, input_glob, tuple(files), tuple(int(s) for s in sizes), tuple(digests),
                     spiece_model, tok.sha256, int(tok.vocab_size), output_dir, fingerprint,
                     float(log_every_s), bool(stage_io))


def pipeline_options(runner: str = "DirectRunner", beam_args: Sequence[str] = (),
                     num_processes: int = 1) -> PipelineOptions:
    """Beam options from pass-through arguments; `num_processes > 1` with the DirectRunner
    means `--direct_num_workers=N --direct_running_mode=multi_processing` unless given."""
    opts = PipelineOptions(list(beam_args))
    opts.view_as(StandardOptions).runner = runner
    direct = opts.view_as(DirectOptions)
    if runner.lower() in DIRECT_RUNNERS and num_processes > 1 and not any(
            a.startswith("--direct_num_workers") for a in beam_args):
        direct.direct_num_workers = num_processes
        direct.direct_running_mode = "multi_processing"
    if direct.direct_running_mode == "multi_processing" and not any(
            a.startswith("--default_sdk_harness_log_level") for a in beam_args):
        opts.view_as(WorkerOptions).default_sdk_harness_log_level = "WARNING"
    return opts


def make_runner(runner: str, options: PipelineOptions):
    """The runner object. "DirectRunner" is Beam's FnApiRunner (what the DirectRunner
    falls back to): Beam's DirectRunner first tries the Prism runner, a Go binary it
    downloads from the internet at run time, and reruns the pipeline on FnApiRunner when
    that fails. Ask for `--runner=PrismRunner` explicitly to use Prism."""
    if runner.lower() not in DIRECT_RUNNERS:
        return runner
    export_repo_path()
    from apache_beam.portability.api import beam_provision_api_pb2
    from apache_beam.runners.portability.fn_api_runner import fn_runner
    from apache_beam.runners.portability.portable_runner import JobServiceHandle

    encoded = JobServiceHandle.encode_pipeline_options(options.get_all_options())
    return fn_runner.FnApiRunner(provision_info=fn_runner.ExtendedProvisionInfo(
        beam_provision_api_pb2.ProvisionInfo(pipeline_options=encoded)))


def export_repo_path() -> None:
    """Local worker processes (DirectRunner `multi_processing`) import `tfrecords` from
    wherever they start: put this checkout on the PYTHONPATH they inherit."""
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    paths = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    if root not in paths:
        os.environ["PYTHONPATH"] = os.pathsep.join([root] + paths)


def build_pretrain_records_beam(input_glob: str, spiece_model: str, output_dir: str,
                                cfg: PretrainConfig, *, runner: str = "DirectRunner",
                                beam_args: Sequence[str] = (),
                                options: Optional[PipelineOptions] = None,
                                num_processes: int = 1,
                                log: Optional[Callable[[str], None]] = print,
                                log_every_s: float = 30.0, stage_io: bool = False,
                                wait: bool = True) -> Union[Dict[str, Any], Any]:
    """Build (or resume) the records of `cfg` on a Beam runner; same files as
    `pretrain_data.build_pretrain_records` (byte for byte: records and manifest.json).

    `beam_args`: pipeline options (`--project=... --region=...`), or pass `options`.
    Returns the manifest (read back once the pipeline is done), or with `wait=False`
    the `PipelineResult` right after submission. A failing task fails the pipeline
    (after the runner's retries) and no manifest.json is written.
    """
    log = log or (lambda s: None)
    spec = make_spec(input_glob, spiece_model, output_dir, cfg, log_every_s, stage_io)
    options = options or pipeline_options(runner, beam_args, num_processes)
    runner = options.view_as(StandardOptions).runner or runner
    log(f"{len(spec.files)} input file(s), {sum(spec.file_sizes) / 1e6:.1f} MB; "
        f"{cfg.num_passes * cfg.num_shards} shard task(s) on {runner} -> {spec.output_dir}")
    t0 = time.time()
    p = beam.Pipeline(runner=make_runner(runner, options), options=options)
    _ = p | "BuildPretrainRecords" >> BuildPretrainRecords(spec)
    result = p.run()
    if not wait:
        return result
    state = result.wait_until_finish()
    if state is not None and str(state).upper().rsplit(".", 1)[-1] not in ("DONE",):
        raise BuildError(f"pipeline ended in state {state}")
    manifest = fs.read_json(fs.join(spec.output_dir, manifest_lib.MANIFEST_NAME))
    tot = manifest["totals"]
    el = max(time.time() - t0, 1e-9)
    log(f"manifest.json: {tot['num_examples']} examples ({tot['num_steps']} steps of "
        f"{cfg.global_batch_size}) in {len(manifest['files'])} file(s), "
        f"{tot['num_bytes'] / 1e6:.1f} MB, {tot['num_bytes'] / tot['num_examples']:.0f} "
        f"bytes/example; {el:.1f}s, {tot['num_examples'] / el:.1f} examples/s")
    return manifest
