"""XLNet pretraining records: the offline builder and the tf.data reader.

Builder (all randomness offline, seeded by `seed`, pass and shard):
  corpus -> documents (globally shuffled per pass, split into `num_shards` shards of about
  equal bytes) -> per shard: one token stream (documents joined by `<eod>`) ->
  `global_batch_size` rows (halves reversed with `bi_data`) -> steps of `reuse_len` new
  tokens -> per row and step one example `reuse | A <sep> B <sep> <cls>` (A/B as the
  original `_split_a_and_b`; no NSP label) -> whole-word span masks -> factorization
  order -> compact record (DESIGN §4, `tfrecords.permutation`).

Records are written in stream order: step-major, row-minor; row r of step t+1 continues
row r of step t. With `bi_data` the rows of replica k, `[k*Bc, (k+1)*Bc)` with
`Bc = global_batch_size / num_replicas`, are `Bc/2` forward rows then the same rows
time-reversed. Files: `<output_dir>/<split>-<pass>-<shard>-of-<num_shards>.tfrecord`
(+ a `.json` stats sidecar per file) and `manifest.json`.

Reader: `pretrain_dataset` / `make_pretrain_dataset_fn` decode to the model's inputs.
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
from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence, Tuple

import numpy as np

from xlnet_tf.text import tokenization
from xlnet_tf.text.layout import shrink_pair
from xlnet_tf.text.tokenization import CLS_ID, EOD_ID, MASK_ID, SEP_ID, SEG_ID_A, SEG_ID_B, SEG_ID_CLS
from tfrecords import corpus as corpus_lib
from tfrecords import manifest as manifest_lib
from tfrecords import permutation
from tfrecords import record_inputs
from xlnet_tf.errors import UserError

RECORD_FEATURES = ("input_ids", "segment_ids", "perm_rank", "target_index", "target_ids")
OUTPUT_NAMES = ("input_ids", "segment_ids", "perm_mask", "target_mapping", "target_mask",
                "target_ids", "input_q", "attention_mask")

_PLAN_TAG = 0x504C414E  # seed-sequence tags: document plan / shard content
_SHARD_TAG = 0x53484152


class BuildError(UserError):
    """Bad builder input or parameters."""


@dataclasses.dataclass(frozen=True)
class PretrainConfig:
    """Every parameter that determines the records' content."""

    seq_len: int = 512
    reuse_len: int = 256
    num_predict: int = 85
    perm_size: int = 256
    mask_alpha: float = 6.0
    mask_beta: float = 1.0
    max_gram: int = 5
    bi_data: bool = True
    global_batch_size: int = 16
    num_replicas: int = 1
    num_passes: int = 1
    seed: int = 0
    num_shards: int = 1
    uncased: bool = False
    keep_accents: bool = False
    use_eod: bool = True
    split: str = "train"
    skip_invalid_utf8: bool = False
    # "plm": XLNet's permutation LM. "mlm": BERT's masked LM on the same pipeline: the same whole-word
    # spans pick `mlm_mask_rate` of the non-functional tokens of each part; of those, `mlm_mask_token_prob`
    # become <mask>, `mlm_random_token_prob` a random non-special token, the rest stay; no factorization
    # order (perm_rank all plain context), predicted from the content stream.
    objective: str = "plm"
    mlm_mask_rate: float = 0.15
    mlm_mask_token_prob: float = 0.8
    mlm_random_token_prob: float = 0.1
    # Store the next-sentence label of the A/B split (B is A's continuation with probability 1/2, else a
    # random span, as the original builder always did) for an optional NSP loss; off by default, as XLNet.
    nsp: bool = False

    @property
    def num_rows(self) -> int:
        """Independent text streams per shard (half the batch with bi_data)."""
        return self.global_batch_size // 2 if self.bi_data else self.global_batch_size

    @property
    def per_replica_batch_size(self) -> int:
        return self.global_batch_size // self.num_replicas

    def validate(self) -> None:
        """Raise BuildError naming the first bad parameter."""
        L, R, P = self.seq_len, self.reuse_len, self.perm_size
        if L <= 0:
            raise BuildError(f"seq_len must be > 0, got {L}")
        if not 0 < R <= L - 5:
            raise BuildError(f"reuse_len must be in (0, seq_len - 5] so that A and B get at "
                             f"least one token each, got reuse_len={R}, seq_len={L}")
        if P <= 0 or R % P or (L - R) % P:
            raise BuildError(f"perm_size={P} must divide both halves: reuse_len={R} and "
                             f"seq_len - reuse_len={L - R}")
        if self.num_predict <= 0:
            raise BuildError(f"num_predict must be > 0, got {self.num_predict}")
        k0, k1 = permutation.split_num_predict(self.num_predict, L, R)
        if k0 > R or k1 > L - R - 1:
            raise BuildError(f"num_predict={self.num_predict} too large for seq_len={L}")
        if self.mask_alpha <= 0 or self.mask_beta <= 0 or self.max_gram < 1:
            raise BuildError("mask_alpha, mask_beta and max_gram must be positive")
        B, C = self.global_batch_size, self.num_replicas
        if B <= 0 or C <= 0 or B % C:
            raise BuildError(f"global_batch_size={B} must be a positive multiple of "
                             f"num_replicas={C}")
        if self.bi_data and B % (2 * C):
            raise BuildError(f"bi_data needs an even per-replica batch: global_batch_size="
                             f"{B} is not divisible by 2 * num_replicas={2 * C}")
        if self.num_passes < 1 or self.num_shards < 1:
            raise BuildError("num_passes and num_shards must be >= 1")
        if self.seed < 0:
            raise BuildError("seed must be >= 0")
        if not self.split or "-" in self.split or os.sep in self.split:
            raise BuildError(f"bad split name {self.split!r}")
        if self.objective not in OBJECTIVES:
            raise BuildError(f"objective must be one of {OBJECTIVES}, got {self.objective!r}")
        if self.objective == "mlm":
            if not 0 < self.mlm_mask_rate < 1:
                raise BuildError(f"mlm_mask_rate must be in (0, 1), got {self.mlm_mask_rate}")
            pm, pr = self.mlm_mask_token_prob, self.mlm_random_token_prob
            if pm < 0 or pr < 0 or pm + pr > 1:
                raise BuildError(f"mlm_mask_token_prob={pm} and mlm_random_token_prob={pr} must be >= 0 "
                                 "with a sum <= 1")
            k0, k1 = mlm_goals(self)
            if k0 + k1 > self.num_predict:
                raise BuildError(f"mlm_mask_rate={self.mlm_mask_rate} masks {k0 + k1} tokens of "
                                 f"seq_len={L}, more than num_predict={self.num_predict} slots")

    def fingerprint_params(self) -> Dict[str, Any]:
        """The parameters a build's fingerprint covers; the MLM knobs only for MLM builds and `nsp` only
        when on, so permutation-LM records built before these options existed keep their fingerprint."""
        params = dataclasses.asdict(self)
        if not self.nsp:
            params.pop("nsp")
        if self.objective == "plm":
            for k in ("objective", "mlm_mask_rate", "mlm_mask_token_prob", "mlm_random_token_prob"):
                params.pop(k)
        return params


OBJECTIVES = ("plm", "mlm")
NUM_FUNCTIONAL_IN_NEW_PART = 3  # <sep> after A, <sep> after B, <cls>


def mlm_goals(cfg: PretrainConfig) -> Tuple[int, int]:
    """Tokens MLM masks in the (reuse, new) parts: `round(mlm_mask_rate * n)` of each part's n
    non-functional tokens (19 = 10 + 9 of 128 at reuse_len 64)."""
    n0 = cfg.reuse_len
    n1 = cfg.seq_len - cfg.reuse_len - NUM_FUNCTIONAL_IN_NEW_PART
    return int(round(cfg.mlm_mask_rate * n0)), int(round(cfg.mlm_mask_rate * n1))


def mlm_corrupt(ids: np.ndarray, is_target: np.ndarray, cfg: PretrainConfig, vocab_size: int,
                rng: np.random.Generator) -> np.ndarray:
    """BERT's input corruption at the targets: `<mask>` with `mlm_mask_token_prob`, a uniformly random
    non-special id (`[len(SPECIAL_SYMBOLS), vocab_size)`) with `mlm_random_token_prob`, else kept."""
    out = ids.copy()
    pos = np.flatnonzero(is_target)
    u = rng.random(pos.size)
    rand = rng.integers(len(tokenization.SPECIAL_SYMBOLS), vocab_size, pos.size)
    pm, pr = cfg.mlm_mask_token_prob, cfg.mlm_random_token_prob
    out[pos] = np.where(u < pm, MASK_ID, np.where(u < pm + pr, rand, ids[pos]))
    return out


def record_file_name(split: str, pass_id: int, shard: int, num_shards: int) -> str:
    return f"{split}-{pass_id}-{shard:05d}-of-{num_shards:05d}.tfrecord"


# ---- documents -> shards ---------------------------------------------------------------------

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


@dataclasses.dataclass
class Example:
    """One pretraining example before serialization (int64 arrays)."""

    input_ids: np.ndarray  # [L]
    segment_ids: np.ndarray  # [L]
    perm_rank: np.ndarray  # [L]
    target_index: np.ndarray  # [P]
    target_ids: np.ndarray  # [P]
    is_masked: np.ndarray  # [L] bool, not serialized (tests, stats)
    is_next: Optional[np.ndarray] = None  # [1] next-sentence label, serialized only when the build has `nsp`

    def features(self) -> Dict[str, np.ndarray]:
        out = {k: getattr(self, k) for k in RECORD_FEATURES}
        if self.is_next is not None:
            out["is_next"] = self.is_next
        return out


def make_example(row: np.ndarray, ab: Tuple[int, int, int, int], i: int,
                 cfg: PretrainConfig, word_start: np.ndarray, reverse: bool,
                 rng: np.random.Generator, is_next: Optional[int] = None) -> Example:
    """Assemble, span-mask and order one example from step offset `i` of `row` (with `cfg.nsp`, the
    next-sentence label `is_next` is stored)."""
    ex = _make_example(row, ab, i, cfg, word_start, reverse, rng)
    if cfg.nsp:
        if is_next is None:
            raise ValueError("an nsp build needs the next-sentence label")
        ex.is_next = np.asarray([is_next], np.int64)
    return ex


def _make_example(row, ab, i, cfg, word_start, reverse, rng) -> Example:
    R, L = cfg.reuse_len, cfg.seq_len
    a0, a1, b0, b1 = ab
    inp = row[i:i + R]
    new = np.concatenate([row[a0:a1], [SEP_ID], row[b0:b1], [SEP_ID, CLS_ID]]).astype(np.int64)
    ids = np.concatenate([inp.astype(np.int64), new])
    if ids.shape[0] != L:
        raise AssertionError(f"example length {ids.shape[0]} != seq_len {L}")
    la = a1 - a0
    seg = np.full(L, SEG_ID_A, np.int64)
    seg[R + la + 1:L - 1] = SEG_ID_B
    seg[L - 1] = SEG_ID_CLS
    kw = dict(mask_alpha=cfg.mask_alpha, mask_beta=cfg.mask_beta, max_gram=cfg.max_gram,
              reverse=reverse)
    if cfg.objective == "mlm":
        return _make_mlm_example(ids, seg, inp, new, cfg, word_start, rng, kw)
    k0, k1 = permutation.split_num_predict(cfg.num_predict, L, R)
    m0 = permutation.sample_span_mask(word_start[inp], k0, rng, **kw)
    m1 = permutation.sample_span_mask(word_start[new], k1, rng, **kw)
    is_masked = np.concatenate([m0, m1])
    perm_rank, tidx, tids = permutation.encode_order(ids, is_masked, R, cfg.perm_size,
                                                     cfg.num_predict, rng)
    return Example(ids, seg, perm_rank, tidx, tids, is_masked)


def _make_mlm_example(ids, seg, inp, new, cfg, word_start, rng, kw) -> Example:
    """MLM: whole-word spans over each part's non-functional tokens (the new part's A and B read as
    one run of text), BERT's corruption at the targets, every position plain context."""
    k0, k1 = mlm_goals(cfg)
    m0 = permutation.sample_span_mask(word_start[inp], k0, rng, **kw)
    keep = np.flatnonzero(~permutation.functional_mask(new))
    m1 = np.zeros(new.shape[0], bool)
    m1[keep] = permutation.sample_span_mask(word_start[new[keep]], k1, rng, **kw)
    is_masked = np.concatenate([m0, m1])
    # no order: every rank -1, so every position (functional ones too) is plain context
    perm_rank, target_index, target_ids = permutation.encode_ranked(
        ids, is_masked, np.full(ids.shape[0], -1, np.int64), cfg.num_predict)
    corrupted = mlm_corrupt(ids, is_masked, cfg, word_start.shape[0], rng)
    return Example(corrupted, seg, perm_rank, target_index, target_ids, is_masked)


def iter_steps(data: np.ndarray, sids: np.ndarray, cfg: PretrainConfig,
               word_start: np.ndarray, rng: np.random.Generator) -> Iterator[List[Example]]:
    """Yield, step by step, the `global_batch_size` examples (row order) of a shard.

    Stops at the end of the rows, or at the first step where some row cannot fit an A/B
    pair (all rows of that step are dropped, as the original).
    """
    B, T = data.shape
    L, R = cfg.seq_len, cfg.reuse_len
    tot_len = L - R - 3
    half = cfg.per_replica_batch_size // 2
    reverse = [cfg.bi_data and (r // half) % 2 == 1 for r in range(B)]
    bounds = [sentence_bounds(sids[r]) for r in range(B)]
    i = 0
    while i + L <= T:
        step = []
        for r in range(B):
            split = split_a_and_b_labeled(sids[r], bounds[r], i + R, tot_len, rng)
            if split is None:
                return
            ab, is_next = split
            step.append(make_example(data[r], ab, i, cfg, word_start, reverse[r], rng, is_next))
        yield step
        i += R


# `perm_rank` is stored shifted by one (0 = plain context token): a negative int64 costs a 10-byte
# varint, which made -1 for the ~420 context tokens of a 512-token example about 4 KB of its ~6 KB.
STORED_RANK_OFFSET = 1


def serialize_example(ex: Example) -> bytes:
    """A `tf.train.Example` with int64 features `RECORD_FEATURES` (`perm_rank` stored + 1)."""
    import tensorflow as tf

    feats = {k: tf.train.Feature(int64_list=tf.train.Int64List(value=v.tolist()))
             for k, v in ex.features().items()}
    feats["perm_rank"] = tf.train.Feature(int64_list=tf.train.Int64List(
        value=(ex.perm_rank + STORED_RANK_OFFSET).tolist()))
    return tf.train.Example(features=tf.train.Features(feature=feats)).SerializeToString(
        deterministic=True)


# ---- one shard -------------------------------------------------------------------------------

@dataclasses.dataclass
class ShardTask:
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


def _tokenizer(path: str, uncased: bool, keep_accents: bool) -> tokenization.XLNetTokenizer:
    key = (path, uncased, keep_accents)
    if key not in _TOKENIZER_CACHE:
        _TOKENIZER_CACHE[key] = tokenization.XLNetTokenizer(path, uncased=uncased,
                                                            keep_accents=keep_accents)
    return _TOKENIZER_CACHE[key]


def shard_stream(task: ShardTask) -> Tuple[np.ndarray, np.ndarray, Dict[str, int]]:
    """Read and tokenize a shard's documents: `(ids, sent_ids, stats)`."""
    cfg = task.cfg
    tok = _tokenizer(task.spiece_model, cfg.uncased, cfg.keep_accents)
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
    tok = _tokenizer(task.spiece_model, cfg.uncased, cfg.keep_accents)
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


def _shard_task(cfg, pass_id, shard, index, docs, spiece_model, output_dir="",
                fingerprint="", log_every_s=30.0) -> ShardTask:
    return ShardTask(cfg, pass_id, shard, index.files, index.file_idx[docs], index.start[docs],
                     index.end[docs], spiece_model, output_dir, fingerprint, log_every_s)


def load_shard_rows(input_glob: str, spiece_model: str, cfg: PretrainConfig, pass_id: int,
                    shard: int) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Rebuild the token stream of shard `shard` of pass `pass_id` (for inspection and
    tests). Returns `(rows, row_sent_ids, stream)`: `rows` [global_batch_size, T] is
    what the records are cut from (record (step t, row r) has the reuse part
    `rows[r, t*reuse_len:(t+1)*reuse_len]`); `stream` [N] is the shard's token stream."""
    index = corpus_lib.index_documents(corpus_lib.expand_globs(input_glob),
                                       skip_invalid_utf8=cfg.skip_invalid_utf8)
    docs = plan_pass(index.doc_bytes, cfg.num_shards, cfg.seed, pass_id)[shard]
    ids, sids, _ = shard_stream(_shard_task(cfg, pass_id, shard, index, docs,
                                            os.path.abspath(spiece_model)))
    rows, row_sids = make_rows(ids, sids, cfg.global_batch_size, cfg.num_replicas, cfg.bi_data)
    return rows, row_sids, ids


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
            tasks.append(_shard_task(cfg, p, s, index, docs, spiece_model, output_dir,
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


# ---- reader ----------------------------------------------------------------------------------

COMPACT_NAMES = ("input_ids", "segment_ids", "perm_rank", "target_index", "target_ids",
                 "attention_mask")


def parse_compact(serialized, seq_len: int, num_predict: int, nsp: bool = False):
    """Batch of serialized records [b] -> the compact features as int32 (plus
    `attention_mask` float32 [b, L] of ones): `input_ids`, `segment_ids`, `perm_rank`
    [b, L]; `target_index`, `target_ids` [b, P]; with `nsp`, `is_next` [b]."""
    import tensorflow as tf

    spec = {k: tf.io.FixedLenFeature([seq_len], tf.int64)
            for k in ("input_ids", "segment_ids", "perm_rank")}
    spec.update({k: tf.io.FixedLenFeature([num_predict], tf.int64)
                 for k in ("target_index", "target_ids")})
    if nsp:
        spec["is_next"] = tf.io.FixedLenFeature([1], tf.int64)
    f = {k: tf.cast(v, tf.int32) for k, v in tf.io.parse_example(serialized, spec).items()}
    if nsp:
        f["is_next"] = f["is_next"][:, 0]
    f["perm_rank"] -= STORED_RANK_OFFSET  # back to rank, -1 for plain context
    f["attention_mask"] = tf.ones_like(f["input_ids"], tf.float32)
    return f


def decode_compact(features, reuse_len: int):
    """Compact features (`parse_compact`) -> the model's inputs; pure TF ops, so it can
    also run on the accelerator inside the training step.

    Returns a dict: `input_ids` int32 [b, L], `segment_ids` int32 [b, L],
    `perm_mask` float32 [b, L, L] (1 = i may NOT attend to j), `target_mapping` float32
    [b, P, L] (one-hot rows, all-zero = padded slot), `target_mask` float32 [b, P],
    `target_ids` int32 [b, P], `input_q` float32 [b, L] (1 = target position),
    `attention_mask` float32 [b, L] (1 = real token; pretraining has no padding).
    """
    dense = permutation.decode_order(features["input_ids"], features["perm_rank"],
                                     features["target_index"], reuse_len)
    extra = {"is_next": features["is_next"]} if "is_next" in features else {}
    return {
        **extra,
        "input_ids": features["input_ids"],
        "segment_ids": features["segment_ids"],
        "perm_mask": dense["perm_mask"],
        "target_mapping": dense["target_mapping"],
        "target_mask": dense["target_mask"],
        "target_ids": features["target_ids"],
        "input_q": dense["input_q"],
        "attention_mask": features["attention_mask"],
    }


def parse_and_decode(serialized, seq_len: int, reuse_len: int, num_predict: int, nsp: bool = False):
    """Batch of serialized records [b] -> the model's inputs (see `decode_compact`)."""
    return decode_compact(parse_compact(serialized, seq_len, num_predict, nsp), reuse_len)


def pretrain_dataset(data_dir: str, *, seq_len: int, reuse_len: int, num_predict: int,
                     global_batch_size: int, num_replicas: Optional[int] = None,
                     input_context=None, replica_id: Optional[int] = None,
                     spiece_model: Optional[str] = None, spiece_sha256: Optional[str] = None,
                     perm_size: Optional[int] = None, bi_data: Optional[bool] = None,
                     objective: Optional[str] = None, nsp: Optional[bool] = None,
                     repeat: bool = False, uses_mems: bool = True, shuffle_buffer: int = 0,
                     seed: Optional[int] = None, decode: bool = True):
    """tf.data pipeline from a record directory to the model's inputs.

    Elements are per-replica batches (`global_batch_size / num_replicas` examples, static
    shapes, `drop_remainder`), in stream order: step t's batch of replica k holds rows
    `[k*Bc, (k+1)*Bc)` of step t. Which replicas' batches this dataset yields:
      - `replica_id` given: that replica only;
      - `input_context` given (`tf.distribute.InputContext`): the replicas of input
        pipeline `input_pipeline_id`, interleaved step by step (what
        `distribute_datasets_from_function` hands out round-robin to local replicas);
      - else all replicas interleaved (with one replica: plain global batches).
    The manifest is validated against the arguments (ManifestError naming the field).
    Shuffling (`shuffle_buffer` per-replica batches) is refused when `uses_mems`.
    Elements are the dict of `decode_compact` (names `OUTPUT_NAMES`); with `decode=False`
    the O(L) features of `parse_compact` (`COMPACT_NAMES`), to be decoded by
    `decode_compact` on the accelerator.
    """
    import tensorflow as tf

    if input_context is not None:
        if num_replicas is not None and num_replicas != input_context.num_replicas_in_sync:
            raise ValueError(f"num_replicas={num_replicas} but the strategy has "
                             f"{input_context.num_replicas_in_sync} replicas in sync")
        num_replicas = input_context.num_replicas_in_sync
    num_replicas = num_replicas or 1
    m = manifest_lib.read_manifest(data_dir)
    manifest_lib.validate_pretrain_manifest(
        m, seq_len=seq_len, reuse_len=reuse_len, num_predict=num_predict,
        global_batch_size=global_batch_size, num_replicas=num_replicas,
        spiece_model=spiece_model, spiece_sha256=spiece_sha256, perm_size=perm_size,
        bi_data=bi_data, objective=objective, nsp=nsp)
    has_labels = bool(m["params"].get("nsp", False))
    files = manifest_lib.check_record_files(m)
    if shuffle_buffer and uses_mems:
        raise ValueError("shuffling breaks the stream order that mems rely on; use "
                         "shuffle_buffer=0 when mem_len > 0")
    per_replica = global_batch_size // num_replicas
    if input_context is not None and replica_id is None:
        pipes, pid = input_context.num_input_pipelines, input_context.input_pipeline_id
        if num_replicas % pipes:
            raise ValueError(f"{num_replicas} replicas cannot be split over {pipes} "
                             "input pipelines")
        local = num_replicas // pipes
        keep = list(range(pid * local, (pid + 1) * local))
    elif replica_id is not None:
        if not 0 <= replica_id < num_replicas:
            raise ValueError(f"replica_id={replica_id} not in [0, {num_replicas})")
        keep = [replica_id]
    else:
        keep = list(range(num_replicas))

    ds = tf.data.TFRecordDataset(files, buffer_size=8 << 20)  # sequential: stream order
    ds = ds.batch(per_replica, drop_remainder=True)  # element i -> replica i % num_replicas
    if len(keep) == 1 and num_replicas > 1:
        ds = ds.shard(num_replicas, keep[0])
    elif len(keep) < num_replicas:
        lo, hi = keep[0], keep[-1] + 1
        ds = ds.enumerate().filter(
            lambda i, x: tf.logical_and(i % num_replicas >= lo, i % num_replicas < hi)
        ).map(lambda i, x: x)
    if shuffle_buffer:
        ds = ds.shuffle(shuffle_buffer, seed=seed, reshuffle_each_iteration=True)
    if repeat:
        ds = ds.repeat()
    if decode:
        fn = lambda s: parse_and_decode(s, seq_len, reuse_len, num_predict, has_labels)  # noqa: E731
    else:
        fn = lambda s: parse_compact(s, seq_len, num_predict, has_labels)  # noqa: E731
    ds = ds.map(fn, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
    return ds.prefetch(tf.data.AUTOTUNE)


def make_pretrain_dataset_fn(data_dir: str, **kwargs) -> Callable:
    """`dataset_fn(input_context)` for `strategy.distribute_datasets_from_function`
    (keyword arguments as `pretrain_dataset`, without `input_context`)."""

    def dataset_fn(input_context):
        return pretrain_dataset(data_dir, input_context=input_context, **kwargs)

    return dataset_fn


def unigram_baseline(train_dir: str, eval_dir: str, vocab_size: int, max_records: int = 200_000
                     ) -> Dict[str, float]:
    """The held-out loss of a context-free model: cross-entropy (nats) of the eval records' real
    target tokens under the train records' unigram distribution (add-one smoothed), and its accuracy
    (always predicting the most frequent token). A model that learned anything must beat it."""
    import tensorflow as tf

    def compact(directory):
        m = manifest_lib.read_manifest(directory)
        p = m["params"]
        files = manifest_lib.check_record_files(m)
        ds = tf.data.TFRecordDataset(files).take(max_records).batch(256)
        return ds.map(lambda s: parse_compact(s, p["seq_len"], p["num_predict"]))

    counts = np.ones([vocab_size], np.float64)
    for batch in compact(train_dir):  # the original text: inputs off the targets, target ids at them
        ids, tidx = batch["input_ids"].numpy(), batch["target_index"].numpy()
        rows = np.repeat(np.arange(ids.shape[0]), tidx.shape[1]).reshape(tidx.shape)
        off_target = np.ones(ids.shape, bool)
        off_target[rows[tidx >= 0], tidx[tidx >= 0]] = False
        text = np.concatenate([ids[off_target], batch["target_ids"].numpy()[tidx >= 0]])
        counts += np.bincount(text, minlength=vocab_size)[:vocab_size]
    logp = np.log(counts / counts.sum())
    total, nll, hits = 0, 0.0, 0
    top = int(np.argmax(counts))
    for batch in compact(eval_dir):
        targets = batch["target_ids"].numpy()
        real = batch["target_index"].numpy() >= 0
        nll -= float(logp[targets[real]].sum())
        hits += int((targets[real] == top).sum())
        total += int(real.sum())
    if total == 0:
        raise BuildError(f"{eval_dir}: no target tokens")
    return {"loss": nll / total, "accuracy": hits / total, "num_tokens": total}
