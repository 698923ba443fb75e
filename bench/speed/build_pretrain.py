"""Benchmark the pretraining record builder and reader on the shared demo corpus.

  python -m bench.speed.build_pretrain [--corpus_glob='../shared/data/corpus/train/*.txt']
      [--work_dir=/tmp/xlnet_bench] [--processes=1,2] [--out=bench_build_pretrain.json]

Measures, at seq_len=512 (reuse 256, num_predict 85, perm_size 256, bi_data, batch 16):
  - builder examples/s, input MB/s and output MB/s with 1 and 2 processes (wall time of the
    whole build: document index, tokenization, masking, ordering, serialization, writing;
    worker start-up included),
  - record bytes per example,
  - reader examples/s decoding to the dense model inputs (`pretrain_dataset`).
A SentencePiece model is trained once into `--work_dir` (reused when present).
"""

from __future__ import annotations

import json
import os
import shutil
import time

from absl import flags

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))  # the repository root
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from bench import cli, host  # noqa: E402
from tfrecords.readers import corpus  # noqa: E402
from tfrecords.pretrain import writer as pretrain_data  # noqa: E402
from tfrecords import spm  # noqa: E402

FLAGS = flags.FlagValues()  # defined by define_flags when the script runs, never at import


def define_flags(fv: flags.FlagValues = FLAGS):
    d = cli.Definer(fv)
    d.string("corpus_glob", os.path.join(REPO, "..", "shared", "data", "corpus", "train", "*.txt"), "The corpus.")
    d.string("work_dir", "/tmp/xlnet_bench", "The SentencePiece model (kept) and the records (rebuilt).")
    d.integer("vocab_size", 32000, "SentencePiece vocabulary.")
    d.list("processes", ["1", "2"], "Builder processes, one build each.")
    d.integer("num_shards", 8, "Record shards.")
    d.integer("seq_len", 512, "Sequence length (reuse, targets and permutation size follow it).")
    d.integer("global_batch_size", 16, "Batch size.")
    d.integer("reader_steps", 200, "Batches the reader is timed on (after 10 of warm-up).")
    d.string("out", "", "Where the results go as JSON (none: printed only).")


def main():
    files = corpus.expand_globs(FLAGS.corpus_glob)
    in_bytes = sum(os.path.getsize(f) for f in files)
    os.makedirs(FLAGS.work_dir, exist_ok=True)
    prefix = os.path.join(FLAGS.work_dir, f"spm{FLAGS.vocab_size}", "spiece")
    if not os.path.isfile(prefix + ".model"):
        t = time.time()
        spm.train_spm(files, prefix, vocab_size=FLAGS.vocab_size, num_threads=os.cpu_count())
        print(f"trained SentencePiece ({FLAGS.vocab_size}) in {time.time() - t:.1f}s", flush=True)
    model = prefix + ".model"
    L = FLAGS.seq_len
    cfg = pretrain_data.PretrainConfig(
        seq_len=L, reuse_len=L // 2, num_predict=85 * L // 512, perm_size=L // 2,
        global_batch_size=FLAGS.global_batch_size, num_replicas=1, bi_data=True,
        num_shards=FLAGS.num_shards, num_passes=1, seed=0)
    results = {"corpus_files": [os.path.relpath(f, REPO) for f in files],
               "corpus_mb": round(in_bytes / 1e6, 2), "config": pretrain_data.dataclasses.asdict(cfg),
               "machine": host.platform_description(),
               "builder": {}}
    out_dir = None
    for n in [int(x) for x in FLAGS.processes]:
        out_dir = os.path.join(FLAGS.work_dir, f"records_p{n}")
        shutil.rmtree(out_dir, ignore_errors=True)
        t = time.time()
        m = pretrain_data.build_pretrain_records(",".join(files), model, out_dir, cfg,
                                                 num_processes=n, log=None)
        dt = time.time() - t
        tot = m["totals"]
        results["builder"][f"{n}_process"] = r = {
            "seconds": round(dt, 2), "examples": tot["num_examples"],
            "examples_per_s": round(tot["num_examples"] / dt, 1),
            "input_mb_per_s": round(in_bytes / 1e6 / dt, 2),
            "output_mb_per_s": round(tot["num_bytes"] / 1e6 / dt, 2),
            "tokens_per_s": round(tot["num_tokens"] / dt)}
        results["record_bytes_per_example"] = round(tot["num_bytes"] / tot["num_examples"], 1)
        print(f"builder, {n} process(es): {json.dumps(r)}", flush=True)

    import tensorflow as tf  # noqa: F401

    ds = pretrain_data.pretrain_dataset(out_dir, seq_len=L, reuse_len=L // 2,
                                        num_predict=85 * L // 512,
                                        global_batch_size=FLAGS.global_batch_size,
                                        repeat=True)
    it = iter(ds)
    for _ in range(10):  # warm-up
        next(it)
    t = time.time()
    for _ in range(FLAGS.reader_steps):
        x = next(it)
    x["perm_mask"].numpy()
    dt = time.time() - t
    results["reader"] = {
        "examples_per_s": round(FLAGS.reader_steps * FLAGS.global_batch_size / dt, 1),
        "steps_per_s": round(FLAGS.reader_steps / dt, 1),
        "dense_mb_per_example": round(sum(v.numpy().nbytes for v in x.values())
                                      / FLAGS.global_batch_size / 1e6, 3)}
    print(f"reader: {json.dumps(results['reader'])}", flush=True)
    if FLAGS.out:
        with open(FLAGS.out, "w") as f:
            json.dump(results, f, indent=2)
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    cli.run(FLAGS, define_flags, main)
