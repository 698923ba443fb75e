"""Build XLNet pretraining records with baked span masks and factorization orders.

  python tfrecords/build_pretrain.py --input_glob='../shared/data/corpus/train/*.txt' \
      --spiece_model=spiece.model --output_dir=records/ --seq_len=512 --reuse_len=256 \
      --num_predict=85 --perm_size=256 --global_batch_size=16 --num_replicas=1 \
      --num_shards=16 --num_processes=2

Also `python -m tfrecords.build_pretrain`. Many machines: the same command with
`--num_tasks=N --task_id=i` on each; the last one to finish writes manifest.json.
A rerun skips finished shards. See `tfrecords/pretrain/writer.py` for the layout.
"""

from __future__ import annotations

import os

from absl import app, flags

from tfrecords.pretrain import writer as pretrain_data
from tfrecords.pretrain.config import PretrainConfig
from xlnet_tf import cli

FLAGS = flags.FLAGS


def define_flags():
    flags.DEFINE_string("input_glob", None, "Comma-separated globs of corpus text files "
                        "(one sentence per line, blank line between documents).")
    flags.DEFINE_string("spiece_model", None, "SentencePiece model (tfrecords/spm.py).")
    flags.DEFINE_string("output_dir", None, "Directory of the records and manifest.json.")
    flags.DEFINE_string("split", "train", "Split name used in file names.")
    flags.DEFINE_integer("seq_len", 512, "Sequence length L.", lower_bound=2)
    flags.DEFINE_integer("reuse_len", 256, "Tokens of the reuse part (cached as mems).", lower_bound=0)
    flags.DEFINE_integer("num_predict", 85, "Prediction slots per example.", lower_bound=1)
    flags.DEFINE_integer("perm_size", 256, "Block length of the factorization order; must "
                         "divide reuse_len and seq_len - reuse_len.", lower_bound=1)
    flags.DEFINE_float("mask_alpha", 6, "Context tokens per span unit (with mask_beta).", lower_bound=0.0)
    flags.DEFINE_float("mask_beta", 1, "Masked tokens per span unit.", lower_bound=0.0)
    flags.DEFINE_integer("max_gram", 5, "Longest span, in whole words.", lower_bound=1)
    flags.DEFINE_bool("bi_data", True, "Half of each replica's rows are time-reversed.")
    flags.DEFINE_integer("global_batch_size", 16, "Examples per step over all replicas.", lower_bound=1)
    flags.DEFINE_integer("num_replicas", 1, "Replicas of the trainer (bi_data row layout).", lower_bound=1)
    flags.DEFINE_integer("num_passes", 1, "Passes over the corpus, each with new samples.", lower_bound=1)
    flags.DEFINE_integer("seed", 0, "Seed of all randomness.")
    flags.DEFINE_integer("num_shards", 1, "Record files per pass (unit of parallelism).", lower_bound=1)
    flags.DEFINE_integer("task_id", 0, "This machine's task in [0, num_tasks).", lower_bound=0)
    flags.DEFINE_integer("num_tasks", 1, "Machines sharing the build.", lower_bound=1)
    flags.DEFINE_integer("num_processes", 1, "Worker processes on this machine.", lower_bound=1)
    flags.DEFINE_bool("uncased", False, "Lowercase the text.")
    flags.DEFINE_bool("keep_accents", False, "Keep accents (default strips them).")
    flags.DEFINE_bool("use_eod", True, "Close every document with <eod>.")
    flags.DEFINE_bool("skip_invalid_utf8", False, "Skip (and count) lines that are not "
                      "UTF-8 instead of failing.")
    flags.DEFINE_enum("objective", "plm", ["plm", "mlm"], "plm: XLNet's permutation LM (span masks + "
                      "factorization orders). mlm: BERT's masked LM on the same spans and records "
                      "(--mlm_mask_rate of the tokens; <mask> / random / kept), no factorization order.")
    flags.DEFINE_float("mlm_mask_rate", 0.15, "MLM: share of each part's non-functional tokens predicted.",
                       lower_bound=0.0, upper_bound=1.0)
    flags.DEFINE_float("mlm_mask_token_prob", 0.8, "MLM: share of the targets replaced by <mask>.",
                       lower_bound=0.0, upper_bound=1.0)
    flags.DEFINE_float("mlm_random_token_prob", 0.1, "MLM: share of the targets replaced by a random "
                       "token (the rest are kept).", lower_bound=0.0, upper_bound=1.0)
    flags.DEFINE_bool("nsp", False, "Store the next-sentence label of each A/B pair (for --nsp in "
                      "run/pretrain.py; off as XLNet).")
    flags.DEFINE_float("log_every_s", 30, "Seconds between in-shard progress lines.", lower_bound=0.0)
    flags.mark_flags_as_required(["input_glob", "spiece_model", "output_dir"])


def config_from_flags() -> PretrainConfig:
    return PretrainConfig(
        seq_len=FLAGS.seq_len, reuse_len=FLAGS.reuse_len, num_predict=FLAGS.num_predict,
        perm_size=FLAGS.perm_size, mask_alpha=FLAGS.mask_alpha, mask_beta=FLAGS.mask_beta,
        max_gram=FLAGS.max_gram, bi_data=FLAGS.bi_data,
        global_batch_size=FLAGS.global_batch_size, num_replicas=FLAGS.num_replicas,
        num_passes=FLAGS.num_passes, seed=FLAGS.seed, num_shards=FLAGS.num_shards,
        uncased=FLAGS.uncased, keep_accents=FLAGS.keep_accents, use_eod=FLAGS.use_eod,
        split=FLAGS.split, skip_invalid_utf8=FLAGS.skip_invalid_utf8, objective=FLAGS.objective,
        mlm_mask_rate=FLAGS.mlm_mask_rate, mlm_mask_token_prob=FLAGS.mlm_mask_token_prob,
        mlm_random_token_prob=FLAGS.mlm_random_token_prob, nsp=FLAGS.nsp)


def main(argv):
    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments: {argv[1:]}")
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    pretrain_data.build_pretrain_records(
        FLAGS.input_glob, FLAGS.spiece_model, FLAGS.output_dir, config_from_flags(),
        task_id=FLAGS.task_id, num_tasks=FLAGS.num_tasks,
        num_processes=FLAGS.num_processes, log_every_s=FLAGS.log_every_s,
        log=lambda s: print(s, flush=True))
    return 0


if __name__ == "__main__":
    define_flags()
    cli.run(main, errors=(ValueError,))  # BuildError, DataError, CorpusError, bad arguments: one line
