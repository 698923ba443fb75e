"""Fine-tune XLNet for sequence classification or regression (GLUE, IMDB, Yelp, your own tsv/csv).

  python tfrecords/build_classifier.py --task=mrpc --data_dir=glue/MRPC --spiece_model=spiece.model \
      --output_dir=records/mrpc --max_seq_length=128 --splits=train,dev,test
  python run/run_classifier.py --flagfile=run/flags/mrpc.flags --record_dir=records/mrpc \
      --spiece_model_file=spiece.model --model_config_path=xlnet_config.json \
      --init_checkpoint=converted/ --model_dir=out/mrpc --do_train --do_eval --do_predict

Long documents: `--max_segments=S` (> 1) builds and reads documents of up to S segments of
`--max_seq_length` tokens and reads them segment by segment inside the compiled step, with Transformer-XL
memories of `--mem_len` positions (no gradient through them), classifying from the last segment
(run/flags/brown_genre_long.flags). `--max_segments=1` (default) is the usual one-segment run.

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

    def __init__(self, settings):
        super().__init__(settings)
        self._task_name = None
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
        return "regression" if self.manifest["is_regression"] else "classifier"

    @property
    def output_keys(self):
        return ("score",) if self.manifest["is_regression"] else ("logits",)

    def task_name(self) -> str:
        return (self.settings.task or self.manifest.get("task") or "").lower()

    def prepare_records(self, log):
        from tfrecords import classifier_data, processors, record_inputs

        s = self.settings
        if s.data_dir:
            common_flags.require(s, "task", "spiece_model_file")
            processor = processors.get_processor(s.task)
            current = {split: record_inputs.input_digests(classifier_data.split_sources(
                processor.get_examples(s.data_dir, split))) for split in self.needed_splits()}
            record_inputs.refresh(s.record_dir, classifier_data.CLASSIFIER_KIND, current, lambda splits: (
                classifier_data.build_classifier_records(
                    processor, s.data_dir, s.spiece_model_file, s.record_dir, max_seq_length=s.max_seq_length,
                    splits=splits, uncased=s.uncased, eval_batch_size=s.eval_batch_size, seed=s.seed, log=log,
                    max_segments=s.max_segments)),
                log)
        manifest = classifier_data.read_classifier_manifest(s.record_dir)
        if manifest["is_regression"]:
            self.metric_key = "pearson"
        elif "mcc" in TASK_METRICS.get((s.task or manifest.get("task") or "").lower(), ()):
            self.metric_key = "mcc"
        return manifest

    def dataset(self, split, batch_size, training, input_context=None):
        from tfrecords import classifier_data

        s = self.settings
        return classifier_data.classifier_dataset(
            s.record_dir, batch_size, training, split=split, max_seq_length=s.max_seq_length,
            spiece_model=s.spiece_model_file, uncased=s.uncased, max_segments=s.max_segments,
            **(dict(seed=s.seed, shuffle_buffer=s.shuffle_buffer, input_context=input_context) if training else {}))

    def text_pair(self) -> bool:
        """Whether the model reads text pairs, as the builder recorded it for the splits this run reads (records
        built before the manifest said so: whether a B segment shows in their first 16 batches)."""
        import numpy as np

        s, entries = self.settings, self.manifest["splits"]
        split = "train" if s.do_train else self.eval_split()
        if "text_pair" in entries.get(split, {}):
            return bool(entries[split]["text_pair"])
        return any(bool(np.any(b["segment_ids"].numpy() == 1)) for b in self.dataset(split, 8, False).take(16))

    def export_info(self):
        s, m = self.settings, self.manifest
        return dict(task=self.name, labels=m.get("label_list"), num_labels=m.get("num_labels"),
                    text_pair=self.text_pair(), max_seq_length=s.max_seq_length, uncased=s.uncased,
                    keep_accents=bool(m.get("keep_accents", False)),
                    spiece_model_file=s.spiece_model_file, summary_type=s.summary_type,
                    use_summ_proj=s.use_summ_proj, task_name=self.task_name(),
                    **(dict(max_segments=s.max_segments, mem_len=self.mem_len,
                            document_summary=s.document_summary) if self.mem_len else {}))

    def build_model(self, config, dtype):
        from xlnet_tf.models import XLNetClassifier

        s, m = self.settings, self.manifest
        return XLNetClassifier(config, num_labels=m.get("num_labels") or 2, regression=m["is_regression"],
                               task_name=self.task_name(), summary_type=s.summary_type,
                               use_proj=s.use_summ_proj, mem_len=self.mem_len,
                               bptt_segments=s.bptt_segments if self.mem_len else 0,
                               document_summary=s.document_summary if self.mem_len else "last_segment",
                               dtype=dtype)

    def metrics(self, split, outputs, model_dir):
        from xlnet_tf import metrics

        m = self.manifest
        labels, weights = outputs["label"], outputs["is_real_example"]
        if m["is_regression"]:
            return metrics.regression_metrics(labels, outputs["score"], weights)
        extra = TASK_METRICS.get(self.task_name(), ())
        if m["num_labels"] == 2 and "f1" not in extra:
            extra = extra + ("f1",)
        if m["num_labels"] > 2:
            extra = extra + ("macro_f1",)
        return metrics.classification_metrics(labels, outputs["logits"].argmax(-1), weights, extra)

    def write_predictions(self, split, outputs, model_dir, log):
        import numpy as np

        from tfrecords import classifier_data
        from xlnet_tf import finetuning

        labels = self.manifest.get("label_list")
        path = os.path.join(model_dir, f"predict_{split}.tsv")
        value = ((lambda k: f"{float(outputs['score'][k]):.6f}") if self.manifest["is_regression"]
                 else (lambda k: labels[int(np.argmax(outputs["logits"][k]))]))
        count = finetuning.write_predictions_tsv(
            path, ("index", "prediction"), outputs, classifier_data.read_guids(self.settings.record_dir, split), value)
        log(f"Wrote {count} predictions to {path}")
        return None


def run():
    return lifecycle.run(ClassifierJob(FLAGS), common_flags.model_config_from_flags(FLAGS))


if __name__ == "__main__":
    common_flags.run_main(FLAGS, define_flags, run)
