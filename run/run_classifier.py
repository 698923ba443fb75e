"""Fine-tune XLNet for sequence classification or regression (GLUE, IMDB, Yelp, your own tsv/csv).

  python tfrecords/build_classifier.py --task=mrpc --data_dir=glue/MRPC --spiece_model=spiece.model \
      --output_dir=records/mrpc --max_seq_length=128 --splits=train,dev,test
  python run/run_classifier.py --flagfile=run/flags/mrpc.flags --record_dir=records/mrpc \
      --spiece_model_file=spiece.model --model_config_path=xlnet_config.json \
      --init_checkpoint=converted/ --model_dir=out/mrpc --do_train --do_eval --do_predict

Long documents: `--max_segments=S` (> 1) builds and reads documents of up to S segments of
`--max_seq_length` tokens and reads them segment by segment inside the compiled step, with Transformer-XL
memories of `--mem_len` positions (no gradient through them), classifying from the last segment
(bench/studies/long_documents/flags/brown_genre_long.flags). `--max_segments=1` (default) is the usual
one-segment run.

With `--data_dir` and `--task`, missing records are built into `--record_dir` first. Writes
`eval_results.json` (accuracy; F1 for MRPC/QQP; Matthews correlation for CoLA; Pearson/Spearman for
regression) and `predict_<split>.tsv` (GLUE submission layout `index<TAB>prediction`).
"""

import os

from absl import flags

from run import common_flags
from run import lifecycle
from xlnet_tf.errors import UserError

# This runner's flags, defined by `define_flags` when it runs (its __main__, common_flags.parse),
# never at import.
FLAGS = flags.FlagValues()
MAX_SEGMENTS = 64  # --max_segments' bound (each segment is unrolled in the traced step)

# Extra metrics per task (accuracy always); regression tasks get Pearson/Spearman.
TASK_METRICS = {"mrpc": ("f1",), "qqp": ("f1",), "cola": ("mcc",)}


def define_flags(fv: flags.FlagValues = FLAGS):
    d = common_flags.Definer(fv)
    common_flags.define_strategy_flags(fv)
    common_flags.define_model_flags(fv)
    common_flags.define_optimizer_flags(fv, learning_rate=2e-5, weight_decay=0.0, adam_epsilon=1e-6)
    common_flags.define_loop_flags(fv, train_steps=1000, steps_per_loop=100, save_steps=1000,
                                   train_batch_size=32)
    common_flags.define_finetune_flags(fv, max_seq_length=128)
    d.string("task", None, "Task name (metrics; and building records with --data_dir).")
    d.integer("max_segments", 1, "Long documents: segments of --max_seq_length tokens per example, read "
              "with memories (1 = one segment, the text cut at --max_seq_length). At most "
              f"{MAX_SEGMENTS}: the segments are unrolled in the compiled step, whose compile time grows with "
              "their count.", lower_bound=1, upper_bound=MAX_SEGMENTS)
    d.integer("mem_len", 0, "Long documents: memory length in tokens carried from segment to segment "
              "(0 = --max_seq_length); ignored with --max_segments=1.", lower_bound=0)
    d.integer("bptt_segments", 0, "Long documents: back-propagate through the memories of this many segments "
              "before the last (0 = Transformer-XL's stop-gradient; each one keeps another segment's "
              "activations for the backward pass; at most --max_segments - 1).", lower_bound=0)
    d.enum("document_summary", "last_segment", ["last_segment", "all_segments"],
           "Long documents: the summary reads the last segment (which sees earlier text through the memories) "
           "or every segment (with --summary_type=mean: the mean over all the document's tokens; or attn).")


class ClassifierJob(lifecycle.FineTuningJob):
    """Sequence classification / regression over classifier records (tfrecords/classifier_data.py)."""

    metric_key = "accuracy"
    record_kind = "xlnet_classifier"

    def __init__(self, settings):
        super().__init__(settings)
        self._text_pair = None
        if settings.bptt_segments > max(settings.max_segments - 1, 0):
            raise UserError(f"--bptt_segments={settings.bptt_segments} must be at most --max_segments - 1 = "
                            f"{settings.max_segments - 1} (the segments before the last of a document)")
        if settings.document_summary == "all_segments" and settings.summary_type not in ("mean", "attn"):
            raise UserError(f"--document_summary=all_segments needs --summary_type=mean or attn (a "
                            f"{settings.summary_type!r} summary reads one position)")

    @property
    def mem_len(self):
        """Memory length of a long-document run, None for one segment."""
        s = self.settings
        return (s.mem_len or s.max_seq_length) if s.max_segments > 1 else None

    @property
    def tokens_per_example(self) -> int:
        return int(self.settings.max_seq_length * self.settings.max_segments)

    @property
    def name(self):
        return "regression" if self.build.is_regression else "classifier"

    @property
    def output_keys(self):
        return ("score",) if self.build.is_regression else ("logits",)

    @property
    def num_labels(self) -> int:
        return 1 if self.build.is_regression else len(self.build.label_list)

    def task_name(self) -> str:
        return (self.settings.task or self.build.task or "").lower()

    def plan_records(self):
        from tfrecords import classifier_data, record_inputs
        from tfrecords.readers import processors
        from xlnet_tf.text import tokenization

        s = self.settings
        split = "train" if s.do_train else self.eval_split()  # the split whose layout the model reads
        if s.data_dir:
            common_flags.require(s, "task", "spiece_model_file")
            processor = processors.get_processor(s.task)
            examples = {name: processor.get_examples(s.data_dir, name) for name in self.needed_splits()}
            wanted = classifier_data.classifier_build(processor, s.data_dir, s.spiece_model_file,
                                                      max_seq_length=s.max_seq_length, uncased=s.uncased,
                                                      max_segments=s.max_segments)
            current = {name: record_inputs.input_digests(classifier_data.split_sources(exs))
                       for name, exs in examples.items()}
            plan = record_inputs.plan_records(
                s.record_dir, classifier_data.CLASSIFIER_KIND, classifier_data.ClassifierBuild, self.needed_splits(),
                wanted=wanted, current=current, vocab_size=tokenization.XLNetTokenizer(s.spiece_model_file).vocab_size)
            self._text_pair = any(bool(ex.text_b) for ex in examples[split])
        else:
            plan = record_inputs.plan_records(
                s.record_dir, classifier_data.CLASSIFIER_KIND, classifier_data.ClassifierBuild, self.needed_splits(),
                reader=dict(max_seq_length=s.max_seq_length, spiece_model=s.spiece_model_file, uncased=s.uncased,
                            max_segments=s.max_segments,
                            task=processors.get_processor(s.task).name if s.task else None))
            self._text_pair = bool(classifier_data.read_classifier_manifest(s.record_dir)["splits"][split]["text_pair"])
        if plan.build.is_regression:
            self.metric_key = "pearson"
        elif "mcc" in TASK_METRICS.get((s.task or plan.build.task or "").lower(), ()):
            self.metric_key = "mcc"
        return plan

    def write_records(self, splits, log):
        from tfrecords import classifier_data
        from tfrecords.readers import processors

        s, b = self.settings, self.build
        classifier_data.build_classifier_records(
            processors.get_processor(s.task), s.data_dir, s.spiece_model_file, s.record_dir,
            max_seq_length=b.max_seq_length, splits=splits, uncased=b.text.uncased, keep_accents=b.text.keep_accents,
            eval_batch_size=s.eval_batch_size, seed=s.seed, log=log, max_segments=b.max_segments)

    def dataset(self, split, batch_size, training, input_context=None):
        from tfrecords import classifier_data

        s = self.settings
        return classifier_data.classifier_dataset(
            s.record_dir, batch_size, training, split=split, max_seq_length=s.max_seq_length,
            spiece_model=s.spiece_model_file, uncased=s.uncased, max_segments=s.max_segments,
            **(dict(seed=s.seed, shuffle_buffer=s.shuffle_buffer, input_context=input_context) if training else {}))

    def export_info(self):
        s, b = self.settings, self.build
        return dict(task=self.name, labels=None if b.label_list is None else list(b.label_list),
                    num_labels=self.num_labels, text_pair=self._text_pair, max_seq_length=b.max_seq_length,
                    uncased=b.text.uncased, keep_accents=b.text.keep_accents,
                    spiece_model_file=s.spiece_model_file, summary_type=s.summary_type,
                    use_summ_proj=s.use_summ_proj, task_name=self.task_name(),
                    **(dict(max_segments=s.max_segments, mem_len=self.mem_len,
                            document_summary=s.document_summary) if self.mem_len else {}))

    def build_model(self, config, dtype):
        from xlnet_tf.models import XLNetClassifier

        s = self.settings
        return XLNetClassifier(config, num_labels=self.num_labels, regression=self.build.is_regression,
                               task_name=self.task_name(), summary_type=s.summary_type,
                               use_proj=s.use_summ_proj, mem_len=self.mem_len,
                               bptt_segments=s.bptt_segments if self.mem_len else 0,
                               document_summary=s.document_summary if self.mem_len else "last_segment",
                               dtype=dtype)

    def metrics(self, split, outputs, model_dir):
        from xlnet_tf.metrics import classification as metrics

        labels, weights = outputs["label"], outputs["is_real_example"]
        if self.build.is_regression:
            return metrics.regression_metrics(labels, outputs["score"], weights)
        extra = TASK_METRICS.get(self.task_name(), ())
        if self.num_labels == 2 and "f1" not in extra:
            extra = extra + ("f1",)
        if self.num_labels > 2:
            extra = extra + ("macro_f1",)
        return metrics.classification_metrics(labels, outputs["logits"].argmax(-1), weights, extra)

    def write_predictions(self, split, outputs, model_dir, log):
        import numpy as np

        from tfrecords import classifier_data
        from xlnet_tf.training import finetuning

        labels = self.build.label_list
        path = os.path.join(model_dir, f"predict_{split}.tsv")
        value = ((lambda k: f"{float(outputs['score'][k]):.6f}") if self.build.is_regression
                 else (lambda k: labels[int(np.argmax(outputs["logits"][k]))]))
        count = finetuning.write_predictions_tsv(
            path, ("index", "prediction"), outputs, classifier_data.read_guids(self.settings.record_dir, split), value)
        log(f"Wrote {count} predictions to {path}")
        return None


def run():
    return lifecycle.run(ClassifierJob(FLAGS), common_flags.model_config_from_flags(FLAGS))


if __name__ == "__main__":
    common_flags.run_main(FLAGS, define_flags, run)
