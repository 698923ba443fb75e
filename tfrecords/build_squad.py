"""Build SQuAD v1.1 / v2.0 records (see tfrecords/squad_data.py).

  python tfrecords/build_squad.py --spiece_model=spiece.model \
      --train_file=../shared/data/labeled/squad_wordnet/train-v2.0.json \
      --predict_file=../shared/data/labeled/squad_wordnet/dev-v2.0.json \
      --output_dir=records/squad_wordnet_v2 --max_seq_length=512 --doc_stride=128 \
      --max_query_length=64

Writes `train.tfrecord`, `dev.tfrecord` (+ `dev.features.npz`, `dev.examples.json` for
post-processing) and `manifest.json` (parameters, SentencePiece sha256, counts, skipped
questions by reason). The version is detected from the files unless
--[no]version_2_with_negative is given. Also `python -m tfrecords.build_squad`. A missing or
non-SQuAD file stops with a one-line error; bad questions are counted and skipped.
"""

from __future__ import annotations

import os

from absl import app, flags

from tfrecords import squad_data
from xlnet_tf import cli

FLAGS = flags.FLAGS


def define_flags():
    flags.DEFINE_string("spiece_model", None, "SentencePiece model (tfrecords/spm.py).")
    flags.DEFINE_string("output_dir", None, "Folder of the records and manifest.json.")
    flags.DEFINE_string("train_file", None, "SQuAD JSON of the train split (optional).")
    flags.DEFINE_string("predict_file", None, "SQuAD JSON of the eval split (optional).")
    flags.DEFINE_string("eval_split", "dev", "Name of the eval split's files.")
    flags.DEFINE_integer("max_seq_length", 512, "Sequence length L.", lower_bound=3)
    flags.DEFINE_integer("doc_stride", 128, "Stride of the paragraph windows, in tokens.", lower_bound=1)
    flags.DEFINE_integer("max_query_length", 64, "Question tokens kept (the first ones).", lower_bound=1)
    flags.DEFINE_bool("version_2_with_negative", None, "SQuAD 2.0 (unanswerable questions); "
                      "default: detected from the files.")
    flags.DEFINE_bool("uncased", False, "Lowercase the text.")
    flags.DEFINE_bool("keep_accents", False, "Keep accents (default strips them).")
    flags.DEFINE_bool("split_unknown", True, "Split a multi-character <unk> piece into one "
                      "<unk> per character (answers inside it stay reachable).")
    flags.DEFINE_integer("seed", 0, "Seed of the train split's example order.")
    flags.mark_flags_as_required(["spiece_model", "output_dir"])


def main(argv):
    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments: {argv[1:]}")
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    manifest = squad_data.build_squad_records(
        FLAGS.spiece_model, FLAGS.output_dir, train_file=FLAGS.train_file,
        predict_file=FLAGS.predict_file, eval_split=FLAGS.eval_split,
        max_seq_length=FLAGS.max_seq_length, doc_stride=FLAGS.doc_stride,
        max_query_length=FLAGS.max_query_length,
        version_2_with_negative=FLAGS.version_2_with_negative, uncased=FLAGS.uncased,
        keep_accents=FLAGS.keep_accents, split_unknown=FLAGS.split_unknown,
        seed=FLAGS.seed, log=lambda s: print(s, flush=True))
    print(f"SQuAD {manifest['version']}: max_seq_length {manifest['max_seq_length']}, "
          f"doc_stride {manifest['doc_stride']}, splits {', '.join(manifest['splits'])} in "
          f"{FLAGS.output_dir}")
    return 0


if __name__ == "__main__":
    define_flags()
    cli.run(main, errors=(ValueError,))  # BuildError, DataError, CorpusError, bad arguments: one line
