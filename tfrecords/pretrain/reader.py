"""The reader of pretraining records: `pretrain_dataset` / `make_pretrain_dataset_fn` (tf.data, per-replica
batches in stream order, the manifest checked against the reader's values) and `decode_compact`, the compact
record -> the model's inputs (`perm_mask`, `target_mapping`, ... as `OUTPUT_NAMES`); `unigram_baseline`,
the held-out loss a model must beat.
"""

from __future__ import annotations

from typing import Callable, Dict, Optional

import numpy as np

from tfrecords import manifest as manifest_lib
from tfrecords.pretrain import permutation
from tfrecords.pretrain.config import BuildError
from tfrecords.pretrain.examples import STORED_RANK_OFFSET

OUTPUT_NAMES = ("input_ids", "segment_ids", "perm_mask", "target_mapping", "target_mask",
                "target_ids", "input_q", "attention_mask")
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
