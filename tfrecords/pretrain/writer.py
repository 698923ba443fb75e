"""XLNet pretraining records: the offline builder (its reader is `pretrain_reader.py`).

Builder (all randomness offline, seeded by `seed`, pass and shard):
  corpus -> documents (globally shuffled per pass, split into `num_shards` shards of about
  equal bytes) -> per shard: one token stream (documents joined by `<eod>`) ->
  `global_batch_size` rows (halves reversed with `bi_data`) -> steps of `reuse_len` new
  tokens -> per row and step one example `reuse | A <sep> B <sep> <cls>` (A/B as the
  original `_split_a_and_b`; no NSP label) -> whole-word span masks -> factorization
  order -> compact record (DESIGN §4, `tfrecords.pretrain.permutation`).

Records are written in stream order: step-major, row-minor; row r of step t+1 continues
row r of step t. With `bi_data` the rows of replica k, `[k*Bc, (k+1)*Bc)` with
`Bc = global_batch_size / num_replicas`, are `Bc/2` forward rows then the same rows
time-reversed. Files: `<output_dir>/<split>-<pass>-<shard>-of-<num_shards>.tfrecord`
(+ a `.json` stats sidecar per file) and `manifest.json`.

Modules: `pretrain_config` (the parameters, `BuildError`, file names), `pretrain_rows` (corpus -> shards
-> token stream -> rows -> A/B split), `pretrain_examples` (one example: span masks, factorization order or
MLM corruption, its record), `pretrain_reader` (`pretrain_dataset` / `make_pretrain_dataset_fn` decode to
the model's inputs); this module writes a shard's record file (`build_shard`) and the whole build
(`build_pretrain_records`, resumable, split over tasks and processes, `manifest.json`). Names of the other
modules that callers import from here are re-exported (`__all__`).
"""

from __future__ import annotations

import dataclasses
import glob
import hashlib
import json
import multiprocessing
import os
import sys
import time
from typing import Any, Callable, Dict, List, Optional, Sequence

import numpy as np

from tfrecords.readers import corpus as corpus_lib
from tfrecords import manifest as manifest_lib
from tfrecords import record_inputs
from tfrecords.pretrain.config import BuildError, PretrainConfig, record_file_name
from tfrecords.pretrain.examples import RECORD_FEATURES, iter_steps, serialize_example
from tfrecords.pretrain.reader import parse_and_decode, parse_compact, pretrain_dataset, unigram_baseline
from tfrecords.pretrain.rows import (
    ShardTask,
    cached_tokenizer,
    make_rows,
    plan_pass,
    sentence_bounds,
    shard_stream,
    shard_task,
    split_a_and_b,
    split_a_and_b_labeled,
)
from xlnet_tf.text import tokenization

__all__ = [  # this module's builder, and the names callers import from here that live in the modules above
    "build_pretrain_records", "build_shard", "check_same_build", "input_digests", "make_manifest",
    "BuildError", "PretrainConfig", "record_file_name", "RECORD_FEATURES",
    "parse_and_decode", "parse_compact", "pretrain_dataset", "unigram_baseline",
    "sentence_bounds", "split_a_and_b", "split_a_and_b_labeled"]

_SHARD_TAG = 0x53484152  # seed-sequence tag of a shard's content


# ---- one shard -------------------------------------------------------------------------------

def build_shard(task: ShardTask) -> Dict[str, Any]:
    """Build one record file (temporary name, then rename) and its stats sidecar."""
    import tensorflow as tf

    t0 = time.time()
    cfg = task.cfg
    ids, sids, stats = shard_stream(task)
    need = cfg.num_rows * cfg.seq_len
    if ids.shape[0] < need:
        raise BuildError(
            f"shard {task.name}: {ids.shape[0]} tokens from {stats['num_docs']} documents, "
            f"fewer than one step needs ({cfg.num_rows} rows x seq_len {cfg.seq_len} = "
            f"{need}); use fewer shards, a smaller global_batch_size or more text")
    data, row_sids = make_rows(ids, sids, cfg.global_batch_size, cfg.num_replicas, cfg.bi_data)
    tok = cached_tokenizer(task.spiece_model, cfg.uncased, cfg.keep_accents)
    word_start = tok.word_start_table()
    rng = np.random.default_rng(np.random.SeedSequence(
        [cfg.seed, task.pass_id, task.shard, _SHARD_TAG]))
    final = os.path.join(task.output_dir, task.name)
    for stale in glob.glob(glob.escape(final) + ".tmp-*"):  # left by a killed build
        os.remove(stale)
    tmp = f"{final}.tmp-{os.getpid()}"
    n_steps = n_examples = n_padded = 0
    last_log = time.time()
    try:
        with tf.io.TFRecordWriter(tmp) as writer:
            for step in iter_steps(data, row_sids, cfg, word_start, rng):
                for ex in step:
                    writer.write(serialize_example(ex))
                    n_padded += int((ex.target_index < 0).sum())
                n_steps += 1
                n_examples += len(step)
                if task.log_every_s and time.time() - last_log > task.log_every_s:
                    last_log = time.time()
                    el = last_log - t0
                    print(f"  [{task.name}] step {n_steps}, {n_examples} examples "
                          f"({n_examples / el:.0f} ex/s)", file=sys.stderr, flush=True)
        if n_steps == 0:
            raise BuildError(f"shard {task.name}: no complete step could be built "
                             f"(rows of {data.shape[1]} tokens); use fewer shards or more text")
        stats.update({
            "name": task.name, "pass": task.pass_id, "shard": task.shard,
            "num_steps": n_steps, "num_examples": n_examples,
            "num_bytes": os.path.getsize(tmp), "num_padded_slots": n_padded,
            "num_tokens_used": int(data.shape[0] * data.shape[1] // (2 if cfg.bi_data else 1)),
            "seconds": round(time.time() - t0, 3), "fingerprint": task.fingerprint,
        })
        manifest_lib.write_json_atomic(final + ".json", stats)
        os.replace(tmp, final)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)
    return stats


def _finished_stats(output_dir: str, name: str, fingerprint: str) -> Optional[Dict[str, Any]]:
    """Stats of a finished shard, None if it must be (re)built; raises on a foreign one."""
    final = os.path.join(output_dir, name)
    side = final + ".json"
    if not (os.path.isfile(final) and os.path.isfile(side)):
        return None
    try:
        with open(side, encoding="utf-8") as f:
            stats = json.load(f)
    except (OSError, ValueError):
        return None
    if stats.get("fingerprint") != fingerprint:
        raise BuildError(f"{output_dir} holds {name} built with different parameters or "
                         "inputs; use a new output_dir")
    if stats.get("num_bytes") != os.path.getsize(final):
        return None
    return stats


# ---- the whole build -------------------------------------------------------------------------

def _fingerprint(cfg: PretrainConfig, spiece_sha: str, files: Sequence[str],
                 digests: Sequence[str]) -> str:
    """One fingerprint of a build: its parameters, the SentencePiece model and the SHA-256 of every input
    file's content (`input_digests`; file names only by basename, so a moved corpus keeps it)."""
    blob = json.dumps({"cfg": cfg.fingerprint_params(), "spiece": spiece_sha,
                       "format_version": manifest_lib.PRETRAIN_FORMAT_VERSION,
                       "inputs": [[os.path.basename(f), d] for f, d in zip(files, digests)]},
                      sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def input_digests(files: Sequence[str]) -> List[str]:
    """SHA-256 of each input file's bytes, in `files` order."""
    return [record_inputs.file_digest(f) for f in files]


def check_same_build(output_dir: str, manifest: Dict[str, Any], fingerprint: str, files: Sequence[str],
                     digests: Sequence[str]) -> None:
    """BuildError unless the finished build in `output_dir` (its manifest) has this build's fingerprint;
    names the input files whose content differs when that is the cause."""
    if manifest.get("fingerprint") == fingerprint:
        return
    built = {os.path.basename(e["path"]): e.get("sha256") for e in manifest.get("inputs", {}).get("files", [])}
    now = {os.path.basename(f): d for f, d in zip(files, digests)}
    changed = sorted(n for n in set(built) | set(now) if built.get(n) != now.get(n))
    what = (f"other input content ({', '.join(changed[:3])}{' ...' if len(changed) > 3 else ''} differ)"
            if changed else "other parameters")
    raise BuildError(f"{output_dir} already holds records built from {what}; build into a new --output_dir "
                     "(records are never mixed or silently reused)")


def _worker_init():
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


def build_pretrain_records(input_glob: str, spiece_model: str, output_dir: str,
                           cfg: PretrainConfig, task_id: int = 0, num_tasks: int = 1,
                           num_processes: int = 1, log: Optional[Callable[[str], None]] = print,
                           log_every_s: float = 30.0) -> Optional[Dict[str, Any]]:
    """Build (or resume) the records of `cfg` from `input_glob`.

    This call builds the shards `g` (over all passes, `g = pass * num_shards + shard`) with
    `g % num_tasks == task_id`, with `num_processes` worker processes; finished shards are
    skipped. The output does not depend on `num_tasks` or `num_processes`. When every
    shard of every pass exists, `manifest.json` is written and returned (else None).
    """
    log = log or (lambda s: None)
    cfg.validate()
    if not 0 <= task_id < num_tasks:
        raise BuildError(f"task_id={task_id} must be in [0, num_tasks={num_tasks})")
    if num_processes < 1:
        raise BuildError("num_processes must be >= 1")
    if not os.path.isfile(spiece_model):
        raise BuildError(f"SentencePiece model not found: {spiece_model}")
    spiece_model = os.path.abspath(spiece_model)
    tok = tokenization.XLNetTokenizer(spiece_model, uncased=cfg.uncased,
                                      keep_accents=cfg.keep_accents)
    files = corpus_lib.expand_globs(input_glob)
    t0 = time.time()
    index = corpus_lib.index_documents(files, skip_invalid_utf8=cfg.skip_invalid_utf8)
    log(f"indexed {index.num_docs} documents in {len(files)} file(s) "
        f"({sum(index.file_sizes) / 1e6:.1f} MB) in {time.time() - t0:.1f}s"
        + (f"; {index.num_invalid_lines} invalid UTF-8 lines skipped"
           if index.num_invalid_lines else ""))
    digests = input_digests(files)
    fingerprint = _fingerprint(cfg, tok.sha256, files, digests)
    os.makedirs(output_dir, exist_ok=True)
    old = os.path.join(output_dir, manifest_lib.MANIFEST_NAME)
    if os.path.isfile(old):
        with open(old, encoding="utf-8") as f:
            check_same_build(output_dir, json.load(f), fingerprint, files, digests)

    all_names, tasks = [], []
    for p in range(cfg.num_passes):
        plan = plan_pass(index.doc_bytes, cfg.num_shards, cfg.seed, p)
        for s, docs in enumerate(plan):
            name = record_file_name(cfg.split, p, s, cfg.num_shards)
            all_names.append(name)
            if (p * cfg.num_shards + s) % num_tasks != task_id:
                continue
            if _finished_stats(output_dir, name, fingerprint) is not None:
                log(f"skip finished {name}")
                continue
            tasks.append(shard_task(cfg, p, s, index, docs, spiece_model, output_dir,
                                     fingerprint, log_every_s))

    totals = {"num_docs": 0, "num_tokens": 0, "num_examples": 0, "num_bytes": 0}
    t_build = time.time()

    def report(st):
        for k in totals:
            totals[k] += st[k]
        el = max(time.time() - t_build, 1e-9)
        log(f"wrote {st['name']}: {st['num_examples']} examples, {st['num_steps']} steps | "
            f"total docs {totals['num_docs']} ({totals['num_docs'] / el:.0f}/s), tokens "
            f"{totals['num_tokens']} ({totals['num_tokens'] / el:.0f}/s), examples "
            f"{totals['num_examples']} ({totals['num_examples'] / el:.1f}/s), "
            f"{totals['num_bytes'] / el / 1e6:.2f} MB/s")

    if tasks:
        log(f"building {len(tasks)} shard(s) with {min(num_processes, len(tasks))} process(es)")
        if num_processes == 1 or len(tasks) == 1:
            for t in tasks:
                report(build_shard(t))
        else:
            ctx = multiprocessing.get_context("spawn")
            with ctx.Pool(min(num_processes, len(tasks)), initializer=_worker_init) as pool:
                for st in pool.imap_unordered(build_shard, tasks):
                    report(st)

    stats = [_finished_stats(output_dir, n, fingerprint) for n in all_names]
    if any(s is None for s in stats):
        missing = sum(s is None for s in stats)
        log(f"{missing} of {len(all_names)} shard(s) are built by other tasks; the last task "
            "to finish writes manifest.json (or rerun any task once all are done)")
        return None
    manifest = make_manifest(cfg, input_glob, files, index, spiece_model, tok, fingerprint,
                             stats, digests)
    manifest_lib.write_manifest(output_dir, manifest)
    tot = manifest["totals"]
    log(f"manifest.json: {tot['num_examples']} examples ({tot['num_steps']} steps of "
        f"{cfg.global_batch_size}) in {len(stats)} file(s), {tot['num_bytes'] / 1e6:.1f} MB, "
        f"{tot['num_bytes'] / tot['num_examples']:.0f} bytes/example")
    return manifest


def make_manifest(cfg, input_glob, files, index, spiece_model, tok, fingerprint, stats, digests):
    keys = ("num_examples", "num_steps", "num_bytes", "num_docs", "num_tokens",
            "num_padded_slots", "num_invalid_lines")
    totals = {k: int(sum(s[k] for s in stats)) for k in keys}
    bc = cfg.per_replica_batch_size
    rows = (f"replica k gets rows [k*{bc}, (k+1)*{bc}): {bc // 2} forward rows then the same "
            f"rows time-reversed" if cfg.bi_data else
            f"replica k gets rows [k*{bc}, (k+1)*{bc}), all forward")
    return {
        "kind": manifest_lib.PRETRAIN_KIND,
        "format_version": manifest_lib.PRETRAIN_FORMAT_VERSION,
        "params": dataclasses.asdict(cfg),
        "spiece_model": {"path": spiece_model, "sha256": tok.sha256,
                         "vocab_size": tok.vocab_size},
        "inputs": {"input_glob": input_glob,
                   "files": [{"path": f, "bytes": s, "sha256": d}
                             for f, s, d in zip(files, index.file_sizes, digests)],
                   "num_docs": index.num_docs,
                   "num_invalid_lines": index.num_invalid_lines},
        "stream_layout": {
            "global_batch_size": cfg.global_batch_size,
            "num_replicas": cfg.num_replicas,
            "per_replica_batch_size": bc,
            "bi_data": cfg.bi_data,
            "rows": rows,
            "record_order": "files in the order listed; in a file step-major, row-minor; row r "
                            "of step t+1 continues row r of step t",
            "steps": totals["num_steps"],
        },
        "schema": {
            "input_ids": (f"int64[{cfg.seq_len}]" if cfg.objective == "plm" else
                          f"int64[{cfg.seq_len}] corrupted at the targets (<mask> / random / kept)"),
            "segment_ids": f"int64[{cfg.seq_len}] (0 A, 1 B, 2 CLS)",
            "perm_rank": (f"int64[{cfg.seq_len}] rank within its part + 1, 0 plain context"
                          if cfg.objective == "plm" else
                          f"int64[{cfg.seq_len}] all 0 (MLM: no factorization order)"),
            "target_index": f"int64[{cfg.num_predict}] positions, -1 padded",
            "target_ids": f"int64[{cfg.num_predict}] 0 padded",
            **({"is_next": "int64[1] 1 = B continues A, 0 = random B"} if cfg.nsp else {}),
        },
        "files": [{k: s[k] for k in ("name", "pass", "shard") + keys + ("num_lines",)}
                  for s in stats],
        "totals": totals,
        "fingerprint": fingerprint,
    }
