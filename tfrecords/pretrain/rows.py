"""Corpus text -> the rows pretraining examples are cut from, all randomness seeded.

A pass's documents are shuffled globally and split into `num_shards` shards of about equal bytes
(`plan_pass`); a shard (`ShardTask`) reads and tokenizes its documents into one token stream, documents
joined by `<eod>`, each line flipping the sentence id (`shard_stream`, `tokenize_documents`, as the original
`_create_data`); the stream is cut into `global_batch_size` rows, halves time-reversed with `bi_data`
(`make_rows`, the original `batchify`); and each step's A/B pair is split off a row at sentence boundaries
(`split_a_and_b_labeled`, the original `_split_a_and_b`, with its next-sentence label).
"""

from __future__ import annotations

import dataclasses
import os
from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np

from tfrecords.readers import corpus as corpus_lib
from tfrecords.pretrain.config import BuildError, PretrainConfig, record_file_name
from xlnet_tf.text import tokenization
from xlnet_tf.text.layout import shrink_pair
from xlnet_tf.text.tokenization import EOD_ID

_PLAN_TAG = 0x504C414E  # seed-sequence tag of the document plan


def plan_pass(doc_bytes: np.ndarray, num_shards: int, seed: int, pass_id: int
              ) -> List[np.ndarray]:
    """Document ids of every shard for one pass: a seeded global shuffle, then contiguous
    slices of about equal bytes. Independent of the number of processes or tasks."""
    n = doc_bytes.shape[0]
    if num_shards > n:
        raise BuildError(f"num_shards={num_shards} > number of documents ({n})")
    rng = np.random.default_rng(np.random.SeedSequence([seed, pass_id, _PLAN_TAG]))
    order = rng.permutation(n)
    cum = np.cumsum(doc_bytes[order])
    total = cum[-1]
    cuts = [0]
    for s in range(1, num_shards):
        c = int(np.searchsorted(cum, total * s / num_shards, side="left")) + 1
        c = min(max(c, cuts[-1] + 1), n - (num_shards - s))
        cuts.append(c)
    cuts.append(n)
    return [order[cuts[s]:cuts[s + 1]] for s in range(num_shards)]


@dataclasses.dataclass
class ShardTask:
    """One (pass, shard) of a build: its documents as byte ranges of `files`, where its record file goes."""

    cfg: PretrainConfig
    pass_id: int
    shard: int
    files: List[str]
    file_idx: np.ndarray
    start: np.ndarray
    end: np.ndarray
    spiece_model: str
    output_dir: str
    fingerprint: str
    log_every_s: float = 30.0

    @property
    def name(self) -> str:
        return record_file_name(self.cfg.split, self.pass_id, self.shard, self.cfg.num_shards)


_TOKENIZER_CACHE: Dict[Tuple[str, bool, bool], tokenization.XLNetTokenizer] = {}


def cached_tokenizer(path: str, uncased: bool, keep_accents: bool) -> tokenization.XLNetTokenizer:
    """One tokenizer per (model, uncased, keep_accents) in this process (shards built one after another, or a
    worker's tasks, share it)."""
    key = (path, uncased, keep_accents)
    if key not in _TOKENIZER_CACHE:
        _TOKENIZER_CACHE[key] = tokenization.XLNetTokenizer(path, uncased=uncased,
                                                            keep_accents=keep_accents)
    return _TOKENIZER_CACHE[key]


def shard_task(cfg, pass_id, shard, index, docs, spiece_model, output_dir="",
               fingerprint="", log_every_s=30.0) -> ShardTask:
    """The task of shard `shard` of pass `pass_id`: its documents `docs` (indices into `index`) by file and
    byte range."""
    return ShardTask(cfg, pass_id, shard, index.files, index.file_idx[docs], index.start[docs],
                     index.end[docs], spiece_model, output_dir, fingerprint, log_every_s)


def shard_stream(task: ShardTask) -> Tuple[np.ndarray, np.ndarray, Dict[str, int]]:
    """Read and tokenize a shard's documents: `(ids, sent_ids, stats)`."""
    cfg = task.cfg
    tok = cached_tokenizer(task.spiece_model, cfg.uncased, cfg.keep_accents)
    handles: Dict[int, Any] = {}
    docs, invalid = [], 0
    try:
        for f, s, e in zip(task.file_idx, task.start, task.end):
            f = int(f)
            if f not in handles:
                handles[f] = open(task.files[f], "rb")
            lines, bad = corpus_lib.read_document_lines(task.files[f], int(s), int(e),
                                                        cfg.skip_invalid_utf8, handles[f])
            invalid += bad
            if lines:
                docs.append(lines)
    finally:
        for h in handles.values():
            h.close()
    ids, sids = tokenize_documents(tok, docs, use_eod=cfg.use_eod)
    stats = {"num_docs": len(docs), "num_lines": sum(len(d) for d in docs),
             "num_tokens": int(ids.shape[0]), "num_invalid_lines": invalid}
    return ids, sids, stats


def tokenize_documents(tokenizer: tokenization.XLNetTokenizer, lines_per_doc: Sequence[
        Sequence[str]], use_eod: bool = True) -> Tuple[np.ndarray, np.ndarray]:
    """One token stream for a list of documents (each a list of sentence lines).

    Returns `(ids int32 [N], sent_ids bool [N])`, as the original `_create_data`: every line flips the
    sentence id, also a line that encodes to nothing (so the sentences around it share an id and read
    as one sentence to the A/B split); `<eod>` closes every document with the id of the document's last
    line. A document whose lines all encode to nothing still contributes its `<eod>`.
    """
    flat = [ln for doc in lines_per_doc for ln in doc]
    enc = tokenizer.encode_batch(flat)
    pieces: List[np.ndarray] = []
    flags: List[np.ndarray] = []
    k = 0
    for doc in lines_per_doc:
        for _ in doc:
            ids = enc[k]
            if ids:
                pieces.append(np.asarray(ids, np.int32))
                flags.append(np.full(len(ids), k % 2 == 0))
            k += 1
        if use_eod and doc:
            pieces.append(np.asarray([EOD_ID], np.int32))
            flags.append(np.asarray([(k - 1) % 2 == 0]))  # the id of the document's last line
    if not pieces:
        return np.zeros(0, np.int32), np.zeros(0, bool)
    return np.concatenate(pieces), np.concatenate(flags)


def make_rows(ids: np.ndarray, sent_ids: np.ndarray, global_batch_size: int,
              num_replicas: int, bi_data: bool) -> Tuple[np.ndarray, np.ndarray]:
    """Cut a stream into `[global_batch_size, T]` rows (the original `batchify` layout).

    Without bi_data row r is contiguous chunk r. With bi_data the stream is cut into
    `B/2` chunks, and replica k's rows are its `Bc/2` forward chunks followed by the same
    chunks time-reversed.
    """
    n_rows = global_batch_size // 2 if bi_data else global_batch_size
    T = ids.shape[0] // n_rows
    data = ids[:n_rows * T].reshape(n_rows, T)
    sids = sent_ids[:n_rows * T].reshape(n_rows, T)
    if bi_data:
        bc = global_batch_size // num_replicas
        fwd = data.reshape(num_replicas, 1, bc // 2, T)
        fsid = sids.reshape(num_replicas, 1, bc // 2, T)
        data = np.concatenate([fwd, fwd[..., ::-1]], 1).reshape(global_batch_size, T)
        sids = np.concatenate([fsid, fsid[..., ::-1]], 1).reshape(global_batch_size, T)
    return np.ascontiguousarray(data), np.ascontiguousarray(sids)


def load_shard_rows(input_glob: str, spiece_model: str, cfg: PretrainConfig, pass_id: int,
                    shard: int) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Rebuild the token stream of shard `shard` of pass `pass_id` (for inspection and
    tests). Returns `(rows, row_sent_ids, stream)`: `rows` [global_batch_size, T] is
    what the records are cut from (record (step t, row r) has the reuse part
    `rows[r, t*reuse_len:(t+1)*reuse_len]`); `stream` [N] is the shard's token stream."""
    index = corpus_lib.index_documents(corpus_lib.expand_globs(input_glob),
                                       skip_invalid_utf8=cfg.skip_invalid_utf8)
    docs = plan_pass(index.doc_bytes, cfg.num_shards, cfg.seed, pass_id)[shard]
    ids, sids, _ = shard_stream(shard_task(cfg, pass_id, shard, index, docs,
                                           os.path.abspath(spiece_model)))
    rows, row_sids = make_rows(ids, sids, cfg.global_batch_size, cfg.num_replicas, cfg.bi_data)
    return rows, row_sids, ids


def sentence_bounds(sids: np.ndarray) -> np.ndarray:
    """Positions k (1 <= k < T) where a new sentence starts."""
    return np.flatnonzero(sids[1:] != sids[:-1]) + 1


def split_a_and_b_labeled(sids: np.ndarray, bounds: np.ndarray, begin: int, tot_len: int,
                          rng: np.random.Generator) -> Optional[Tuple[Tuple[int, int, int, int], int]]:
    """The original `_split_a_and_b` on one row, as index ranges.

    A starts at `begin` and ends at a sentence boundary; with probability 1/2 (or when no
    boundary lies within `tot_len`) B is a random sentence-aligned span of the same row
    ("not next"), otherwise the continuation of A. The longer piece is trimmed so that
    `len(A) + len(B) == tot_len`. Returns `(a_begin, a_end, b_begin, b_end)` or None near
    the end of the row; here with the next-sentence label: `((a_begin, a_end, b_begin, b_end), is_next)`,
    `is_next` 1 when B continues A, 0 for a random B.
    """
    n = sids.shape[0]
    if begin + tot_len >= n:
        return None
    lo = int(np.searchsorted(bounds, begin + 1))
    hi = int(np.searchsorted(bounds, begin + tot_len))
    cuts = bounds[lo:hi]
    end = int(bounds[hi]) if hi < bounds.shape[0] else n
    is_next = 1
    if cuts.size == 0 or rng.random() < 0.5:
        is_next = 0
        a_end = end if cuts.size == 0 else int(cuts[rng.integers(cuts.size)])
        b_len = max(1, tot_len - (a_end - begin))
        b_begin = int(rng.integers(0, n - b_len))  # randint(0, n - 1 - b_len)
        b_end = b_begin + b_len
        j = int(np.searchsorted(bounds, b_begin, side="right")) - 1  # sentence start
        b_begin = int(bounds[j]) if j >= 0 else 0
        if b_end < n - 1:
            j = int(np.searchsorted(bounds, b_end, side="left"))
            b_end = min(int(bounds[j]) if j < bounds.shape[0] else n - 1, n - 1)
    else:
        a_end = int(cuts[rng.integers(cuts.size)])
        b_begin, b_end = a_end, end
    la, lb = shrink_pair(a_end - begin, b_end - b_begin, tot_len)
    a_end, b_end = begin + la, b_begin + lb
    if a_end >= n or b_end >= n:
        return None
    return (begin, a_end, b_begin, b_end), is_next


def split_a_and_b(sids: np.ndarray, bounds: np.ndarray, begin: int, tot_len: int,
                  rng: np.random.Generator) -> Optional[Tuple[int, int, int, int]]:
    """The original `_split_a_and_b` on one row, as index ranges (see `split_a_and_b_labeled`)."""
    out = split_a_and_b_labeled(sids, bounds, begin, tot_len, rng)
    return None if out is None else out[0]
