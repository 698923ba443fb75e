"""Fine-tune XLNet for token classification: part of speech, named entities, chunks (CoNLL-style files).

  python tfrecords/build_tagging.py --data_dir=data/finetune/brown_pos --spiece_model=spiece.model \
      --output_dir=records/brown_pos --max_seq_length=128 --doc_stride=64
  python run/run_tagger.py --record_dir=records/brown_pos --spiece_model_file=spiece.model \
      --model_config_path=xlnet_config.json --init_checkpoint=converted/ --model_dir=out/pos \
      --do_train --do_eval --do_predict --metrics=pos

With `--data_dir`, missing records are built into `--record_dir` first (`<data_dir>/<split>.txt`, one token per
line, the label in `--label_column`, blank lines between sentences). Each word is predicted once, from the window
where it has the most context, and scored at the word level: `--metrics=pos` token accuracy (with per-tag
precision / recall / F1), `--metrics=entities` seqeval's entity-level precision / recall / F1 for the
`--scheme` (strict with `--strict`). Writes `eval_results.json` (each evaluation with its per-tag report,
`per_label`) and `predict_<split>.txt` (the input's CoNLL lines with a predicted column).
"""

import os

from absl import flags

from run import common_flags
from run import lifecycle

# This runner's flags, defined by `define_flags` when it runs (its __main__, common_flags.parse), never at import.
FLAGS = flags.FlagValues()


def define_flags(fv: flags.FlagValues = FLAGS):
    from xlnet_tf.metrics import tagging as tagging_metrics

    d = common_flags.Definer(fv)
    common_flags.define_strategy_flags(fv)
    common_flags.define_model_flags(fv)
    common_flags.define_optimizer_flags(fv, learning_rate=5e-5, weight_decay=0.0, adam_epsilon=1e-6)
    common_flags.define_loop_flags(fv, train_steps=1000, steps_per_loop=100, save_steps=1000, train_batch_size=32)
    common_flags.define_finetune_flags(fv, max_seq_length=128)
    d.integer("doc_stride", 64, "Pieces between the starts of two windows of a sentence longer than a window "
              "(must match the records).", lower_bound=1)
    d.integer("label_column", -1, "Building records: the CoNLL column holding the label (negative: from the end).")
    d.integer("word_column", 0, "Building records: the CoNLL column holding the word.")
    d.string("labels_file", None, "Building records: the label list, one per line (default: train.txt's labels).")
    d.string("tagset", None, "Building records: a name for the label set, recorded and checked (e.g. universal).")
    d.bool("label_all_pieces", False, "Building records: label every piece of a word, not only its first.")
    d.enum("metrics", "pos", list(tagging_metrics.KINDS), "pos: token accuracy and per-tag figures; entities: "
           "seqeval's entity-level precision / recall / F1.")
    d.enum("scheme", None, list(tagging_metrics.SCHEMES), "--metrics=entities: the tagging scheme (default: "
           "seqeval's lenient reading of B-/I- prefixes).")
    d.bool("strict", False, "--metrics=entities: seqeval's strict mode (needs --scheme).")


class TaggerJob(lifecycle.FineTuningJob):
    """Token classification over tagging records (tfrecords/tagging_data.py)."""

    name = "tagging"
    record_kind = "xlnet_tagging"
    output_keys = ("logits",)
    passthrough = ("example_index", "is_real_example", "word_ids", "is_max_context")

    def __init__(self, settings):
        super().__init__(settings)
        if settings.strict and not settings.scheme:
            from xlnet_tf.errors import UserError

            raise UserError("--strict needs --scheme (seqeval's strict mode reads entities by a named scheme)")

    @property
    def metric_key(self):
        return "token_accuracy" if self.settings.metrics == "pos" else "f1"

    def plan_records(self):
        from tfrecords import record_inputs, tagging_data
        from xlnet_tf.text import tokenization

        s = self.settings
        common = dict(max_seq_length=s.max_seq_length, doc_stride=s.doc_stride, uncased=s.uncased)
        if not s.data_dir:
            return record_inputs.plan_records(
                s.record_dir, tagging_data.TAGGING_KIND, tagging_data.TaggingBuild, self.needed_splits(),
                reader=dict(spiece_model=s.spiece_model_file, **common))
        common_flags.require(s, "spiece_model_file")
        wanted = tagging_data.tagging_build(s.data_dir, s.spiece_model_file, labels_file=s.labels_file,
                                            label_column=s.label_column, word_column=s.word_column, tagset=s.tagset,
                                            label_all_pieces=s.label_all_pieces, **common)
        current = {split: record_inputs.input_digests([tagging_data.split_file(s.data_dir, split)])
                   for split in self.needed_splits()}
        return record_inputs.plan_records(
            s.record_dir, tagging_data.TAGGING_KIND, tagging_data.TaggingBuild, self.needed_splits(), wanted=wanted,
            current=current, vocab_size=tokenization.XLNetTokenizer(s.spiece_model_file).vocab_size)

    def write_records(self, splits, log):
        from tfrecords import tagging_data

        s, b = self.settings, self.build
        tagging_data.build_tagging_records(
            s.data_dir, s.spiece_model_file, s.record_dir, max_seq_length=b.max_seq_length, doc_stride=b.doc_stride,
            splits=splits, labels=b.label_list, label_column=b.label_column, word_column=b.word_column,
            tagset=b.tagset, label_all_pieces=b.label_all_pieces, uncased=b.text.uncased,
            keep_accents=b.text.keep_accents, eval_batch_size=s.eval_batch_size, seed=s.seed, log=log)

    def check_plan(self):
        from xlnet_tf.metrics import tagging as tagging_metrics

        s = self.settings
        if (s.do_eval or s.mode == "continuous_eval") and s.metrics == "entities":
            tagging_metrics.check_entity_labels(self.build.label_list, s.scheme,
                                                f"--metrics=entities on the labels of --record_dir={s.record_dir}")

    def dataset(self, split, batch_size, training, input_context=None):
        from tfrecords import tagging_data

        s = self.settings
        return tagging_data.tagging_dataset(
            s.record_dir, batch_size, training, s.max_seq_length, spiece_model=s.spiece_model_file, split=split,
            uncased=s.uncased, doc_stride=s.doc_stride,
            **(dict(seed=s.seed, shuffle_buffer=s.shuffle_buffer, input_context=input_context) if training else {}))

    def export_info(self):
        s, b = self.settings, self.build
        return dict(task="tagging", labels=list(b.label_list), num_labels=len(b.label_list),
                    max_seq_length=b.max_seq_length, doc_stride=b.doc_stride, uncased=b.text.uncased,
                    keep_accents=b.text.keep_accents, spiece_model_file=s.spiece_model_file)

    def build_model(self, config, dtype):
        from xlnet_tf.models import XLNetTagger

        labels = list(self.build.label_list)
        return XLNetTagger(config, num_labels=len(labels), labels=labels, dtype=dtype)

    def _tags(self, split, outputs, sentences=None):
        from tfrecords import tagging_data

        return tagging_data.predicted_tags(self.settings.record_dir, split, outputs["example_index"],
                                           outputs["word_ids"], outputs["is_max_context"],
                                           outputs["logits"].argmax(-1), sentences)

    def metrics(self, split, outputs, model_dir):
        from tfrecords import tagging_data
        from xlnet_tf.metrics import tagging as tagging_metrics

        s = self.settings
        sentences = tagging_data.split_sentences(s.record_dir, split)  # read and checked once
        gold = [sentence.labels for sentence in sentences]
        return tagging_metrics.tagging_results(gold, self._tags(split, outputs, sentences), kind=s.metrics,
                                               scheme=s.scheme, strict=s.strict, labels=list(self.build.label_list))

    def write_predictions(self, split, outputs, model_dir, log):
        from tfrecords import tagging_data

        path = os.path.join(model_dir, f"predict_{split}.txt")
        count = tagging_data.write_split_predictions(self.settings.record_dir, split, self._tags(split, outputs), path)
        log(f"Wrote {count} tagged tokens to {path}")
        return None


def run():
    return lifecycle.run(TaggerJob(FLAGS), common_flags.model_config_from_flags(FLAGS))


if __name__ == "__main__":
    common_flags.run_main(FLAGS, define_flags, run)
