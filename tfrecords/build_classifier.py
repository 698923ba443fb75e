r"""Build classification / regression fine-tuning records (see tfrecords/classifier_data.py).

  python tfrecords/build_classifier.py --task=tsv \
      --data_dir=../shared/data/labeled/topic --spiece_model=spiece.model \
      --output_dir=records/topic --max_seq_length=128 --splits=train,dev,test
  python tfrecords/build_classifier.py --task=mnli_matched --data_dir=glue_data/MNLI ...

Tasks: cola sst-2 mrpc sts-b qqp mnli_matched mnli_mismatched qnli rte wnli imdb yelp2 yelp5,
and the generic tsv / csv (`<data_dir>/<split>.tsv|csv` with a header; --label_column,
--text_column, --text_b_column, --labels / --labels_file, --regression).
Also `python -m tfrecords.build_classifier`. Bad input stops with a one-line error naming the
file and line.
"""

from __future__ import annotations

import os

from absl import app, flags

from tfrecords import classifier_data
from tfrecords.readers import processors
from xlnet_tf import cli

FLAGS = flags.FLAGS


def define_flags():
    flags.DEFINE_string("task", None, "Task: " + ", ".join(processors.TASK_NAMES) + ".")
    flags.DEFINE_string("data_dir", None, "Folder of the task's raw files.")
    flags.DEFINE_string("spiece_model", None, "SentencePiece model (tfrecords/spm.py).")
    flags.DEFINE_string("output_dir", None, "Folder of the records and manifest.json.")
    flags.DEFINE_integer("max_seq_length", 128, "Sequence length L.", lower_bound=3)
    flags.DEFINE_list("splits", ["train", "dev"], "Splits to build (e.g. train,dev,test).")
    flags.DEFINE_bool("uncased", False, "Lowercase the text.")
    flags.DEFINE_bool("keep_accents", False, "Keep accents (default strips them).")
    flags.DEFINE_integer("eval_batch_size", 32, "Pad every non-train split with dummy "
                         "examples (is_real_example=0) to a multiple of this; 0 = no padding.", lower_bound=0)
    flags.DEFINE_integer("seed", 0, "Seed of the train split's record order.")
    # generic tsv / csv tasks only
    flags.DEFINE_string("label_column", None, "tsv/csv: label column name (default 'label').")
    flags.DEFINE_string("text_column", None, "tsv/csv: text column (default: auto: text, "
                        "sentence1 + sentence2, ...).")
    flags.DEFINE_string("text_b_column", None, "tsv/csv: second text column ('' = none).")
    flags.DEFINE_list("labels", None, "tsv/csv: label list (index = id); default: collected "
                      "from train.")
    flags.DEFINE_string("labels_file", None, "tsv/csv: file with one label a line.")
    flags.DEFINE_bool("regression", None, "tsv/csv: regression (float labels); default: auto "
                      "(non-integer numeric train labels).")
    flags.DEFINE_bool("has_header", None, "tsv/csv: the files have a header row (default "
                      "true); without one, columns are 0-based positions.")
    flags.mark_flags_as_required(["task", "data_dir", "spiece_model", "output_dir"])


def main(argv):
    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments: {argv[1:]}")
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    processor = processors.get_processor(
        FLAGS.task, label_column=FLAGS.label_column, text_column=FLAGS.text_column,
        text_b_column=FLAGS.text_b_column, labels=FLAGS.labels,
        labels_file=FLAGS.labels_file, regression=FLAGS.regression,
        has_header=FLAGS.has_header)
    manifest = classifier_data.build_classifier_records(
        processor, FLAGS.data_dir, FLAGS.spiece_model, FLAGS.output_dir,
        max_seq_length=FLAGS.max_seq_length, splits=FLAGS.splits, uncased=FLAGS.uncased,
        keep_accents=FLAGS.keep_accents, eval_batch_size=FLAGS.eval_batch_size,
        seed=FLAGS.seed, log=lambda s: print(s, flush=True))
    labels = ("regression" if manifest["is_regression"]
              else f"{manifest['num_labels']} labels")
    print(f"task {manifest['task']}: {labels}, max_seq_length {manifest['max_seq_length']}, "
          f"splits {', '.join(manifest['splits'])} in {FLAGS.output_dir}")
    return 0


if __name__ == "__main__":
    define_flags()
    cli.run(main, errors=(ValueError,))  # BuildError, DataError, CorpusError, bad arguments: one line
