r"""Build token-classification (tagging) records from CoNLL files (see tfrecords/tagging_data.py).

  python tfrecords/build_tagging.py --data_dir=data/finetune/brown_pos --spiece_model=spiece.model \
      --output_dir=records/brown_pos --max_seq_length=128 --doc_stride=64 --splits=train,dev \
      --labels_file=data/finetune/brown_pos/labels.txt --tagset=universal
  python tfrecords/build_tagging.py --data_dir=conll2003 --splits=train,dev,test ...   # NER, label last

`<data_dir>/<split>.txt` per split: one token a line, a blank line between sentences, `-DOCSTART-` lines skipped,
the label in --label_column (default -1, the last; e.g. --label_column=1 for the Brown tags of brown_pos files).
Labels: --labels, --labels_file, or the sorted labels of train.txt. Also `python -m tfrecords.build_tagging`. Bad
input stops with a one-line error naming the file and line.
"""

from __future__ import annotations

import os

from absl import app, flags

from tfrecords import tagging_data
from xlnet_tf import cli

FLAGS = flags.FLAGS


def define_flags():
    flags.DEFINE_string("data_dir", None, "Folder of the <split>.txt CoNLL files.")
    flags.DEFINE_string("spiece_model", None, "SentencePiece model (tfrecords/spm.py).")
    flags.DEFINE_string("output_dir", None, "Folder of the records and manifest.json.")
    flags.DEFINE_integer("max_seq_length", 128, "Window length L (pieces + <sep> <cls>).", lower_bound=3)
    flags.DEFINE_integer("doc_stride", 64, "Pieces between the starts of the windows of a long sentence.",
                         lower_bound=1)
    flags.DEFINE_list("splits", ["train", "dev"], "Splits to build (e.g. train,dev,test).")
    flags.DEFINE_integer("label_column", -1, "Column of the label (negative: from the end).")
    flags.DEFINE_integer("word_column", 0, "Column of the word.")
    flags.DEFINE_list("labels", None, "Label list (index = id); default: --labels_file, else the sorted labels of "
                      "train.txt.")
    flags.DEFINE_string("labels_file", None, "File with one label a line, in id order.")
    flags.DEFINE_string("tagset", None, "A name for the label set (e.g. universal, brown, conll2003), recorded in the "
                        "manifest and checked by readers.")
    flags.DEFINE_bool("label_all_pieces", False, "Put each word's label on all its pieces (default: the first; "
                      "the others are ignored by loss and metrics).")
    flags.DEFINE_bool("uncased", False, "Lowercase the text.")
    flags.DEFINE_bool("keep_accents", False, "Keep accents (default strips them).")
    flags.DEFINE_integer("eval_batch_size", 32, "Pad every non-train split with dummy windows (is_real_example=0) "
                         "to a multiple of this; 0 = no padding.", lower_bound=0)
    flags.DEFINE_integer("seed", 0, "Seed of the train split's window order.")
    flags.mark_flags_as_required(["data_dir", "spiece_model", "output_dir"])


def main(argv):
    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments: {argv[1:]}")
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    manifest = tagging_data.build_tagging_records(
        FLAGS.data_dir, FLAGS.spiece_model, FLAGS.output_dir, max_seq_length=FLAGS.max_seq_length,
        doc_stride=FLAGS.doc_stride, splits=FLAGS.splits, labels=FLAGS.labels, labels_file=FLAGS.labels_file,
        label_column=FLAGS.label_column, word_column=FLAGS.word_column, tagset=FLAGS.tagset,
        label_all_pieces=FLAGS.label_all_pieces, uncased=FLAGS.uncased, keep_accents=FLAGS.keep_accents,
        eval_batch_size=FLAGS.eval_batch_size, seed=FLAGS.seed, log=lambda s: print(s, flush=True))
    print(f"tagging: {manifest['num_labels']} labels, max_seq_length {manifest['max_seq_length']}, doc_stride "
          f"{manifest['doc_stride']}, splits {', '.join(manifest['splits'])} in {FLAGS.output_dir}")
    return 0


if __name__ == "__main__":
    define_flags()
    cli.run(main, errors=(ValueError,))  # DataError, bad arguments: one line
