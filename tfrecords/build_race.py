r"""Build RACE-format multiple-choice records (see tfrecords/race_data.py).

  python tfrecords/build_race.py --data_dir=RACE --spiece_model=spiece.model \
      --output_dir=records/race --max_seq_length=512 --max_qa_length=128
  python tfrecords/build_race.py --data_dir=../shared/data/labeled/mc_wordnet --task=mc_wordnet \
      --spiece_model=spiece.model --output_dir=records/mc_wordnet --max_seq_length=128 \
      --max_qa_length=64

`<data_dir>/<split>/{middle,high}/*.txt` (RACE), or the article files directly in
`<data_dir>/<split>/`. `--levels=high` reproduces the original's --high_only.
Also `python -m tfrecords.build_race`. Bad input stops with a one-line error naming the file.
"""

from __future__ import annotations

import os

from absl import app, flags

from tfrecords import race_data
from xlnet_tf import cli

FLAGS = flags.FLAGS


def define_flags():
    flags.DEFINE_string("data_dir", None, "RACE root: <data_dir>/<split>/{middle,high}/*.txt "
                        "or <data_dir>/<split>/*.txt.")
    flags.DEFINE_string("spiece_model", None, "SentencePiece model (tfrecords/spm.py).")
    flags.DEFINE_string("output_dir", None, "Folder of the records and manifest.json.")
    flags.DEFINE_string("task", "race", "Task name recorded in the manifest.")
    flags.DEFINE_integer("max_seq_length", 512, "Sequence length L of each choice.", lower_bound=3)
    flags.DEFINE_integer("max_qa_length", 128, "Longest question+option, in tokens.", lower_bound=1)
    flags.DEFINE_enum("qa_truncation", "tail", list(race_data.QA_TRUNCATIONS),
                      "Keep the last (tail, the original) or first (head) max_qa_length "
                      "tokens of a question+option.")
    flags.DEFINE_list("splits", ["train", "dev"], "Splits to build (e.g. train,dev,test).")
    flags.DEFINE_list("levels", None, "middle and/or high (default: every level present).")
    flags.DEFINE_bool("uncased", False, "Lowercase the text.")
    flags.DEFINE_bool("keep_accents", False, "Keep accents (default strips them).")
    flags.DEFINE_integer("eval_batch_size", 32, "Pad every non-train split with dummy "
                         "questions (is_real_example=0) to a multiple of this; 0 = none.", lower_bound=0)
    flags.DEFINE_integer("seed", 0, "Seed of the train split's record order.")
    flags.mark_flags_as_required(["data_dir", "spiece_model", "output_dir"])


def main(argv):
    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments: {argv[1:]}")
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    manifest = race_data.build_race_records(
        FLAGS.data_dir, FLAGS.spiece_model, FLAGS.output_dir,
        max_seq_length=FLAGS.max_seq_length, max_qa_length=FLAGS.max_qa_length,
        qa_truncation=FLAGS.qa_truncation, splits=FLAGS.splits, levels=FLAGS.levels,
        uncased=FLAGS.uncased, keep_accents=FLAGS.keep_accents,
        eval_batch_size=FLAGS.eval_batch_size, seed=FLAGS.seed, task=FLAGS.task,
        log=lambda s: print(s, flush=True))
    print(f"task {manifest['task']}: splits {', '.join(manifest['splits'])} in "
          f"{FLAGS.output_dir}")
    return 0


if __name__ == "__main__":
    define_flags()
    cli.run(main, errors=(ValueError,))  # BuildError, DataError, CorpusError, bad arguments: one line
