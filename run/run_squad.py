"""Fine-tune XLNet on SQuAD 1.1 / 2.0 with XLNet's beam-search span head and answer class.

  python run/run_squad.py --flagfile=run/flags/squad_v2.flags --train_file=train-v2.0.json \
      --predict_file=dev-v2.0.json --spiece_model_file=spiece.model --model_config_path=xlnet_config.json \
      --init_checkpoint=converted/ --model_dir=out/squad --record_dir=out/squad/records \
      --do_train --do_predict

Records are built into `--record_dir` from `--train_file`/`--predict_file` when missing. Predict writes the
official `predictions.json` (id -> text), `nbest_predictions.json` and, for 2.0, `null_odds.json`, and
evaluates them as the official scripts (EM, F1, HasAns/NoAns, best thresholds) into `eval_results.json`
when the predict file has answers.
"""

import json
import os

from absl import flags

from run import common_flags
from run import lifecycle

# This runner's flags, defined by `define_flags` when it runs (its __main__, common_flags.parse),
# never at import.
FLAGS = flags.FlagValues()


def define_flags(fv: flags.FlagValues = FLAGS):
    d = common_flags.Definer(fv)
    common_flags.define_strategy_flags(fv)
    common_flags.define_model_flags(fv)
    common_flags.define_optimizer_flags(fv, learning_rate=3e-5, weight_decay=0.0, adam_epsilon=1e-6)
    common_flags.define_loop_flags(fv, train_steps=8000, steps_per_loop=100, save_steps=1000,
                                   train_batch_size=48)
    common_flags.define_finetune_flags(fv, max_seq_length=512)
    d.string("train_file", None, "SQuAD JSON to train on.")
    d.string("predict_file", None, "SQuAD JSON to predict (and evaluate when it has answers).")
    d.bool("version_2_with_negative", None, "SQuAD 2.0 (answer class, null odds); default: "
           "detected from the files.")
    d.integer("doc_stride", 128, "Sliding-window stride (must match the records).", lower_bound=1)
    d.integer("max_query_length", 64, "Question budget (must match the records).", lower_bound=1)
    d.integer("max_answer_length", 64, "Longest answer, in tokens.", lower_bound=1)
    d.integer("n_best_size", 5, "Candidates kept per question.", lower_bound=1)
    d.integer("start_n_top", 5, "Beam size over starts.", lower_bound=1)
    d.integer("end_n_top", 5, "Beam size over ends per start.", lower_bound=1)
    d.float("null_score_threshold", None, "SQuAD 2.0: also write predictions_thresholded.json "
            "answering '' where null odds exceed this (a fixed, not dev-tuned, threshold).")


class SquadJob(lifecycle.FineTuningJob):
    """SQuAD 1.1/2.0 span extraction (tfrecords/squad_data.py). Evaluating and predicting both read the
    `--predict_file` split (`--eval_split`): predictions.json etc. are written, and scored as the official
    scripts do when the file has answers."""

    name = "squad"
    record_kind = "xlnet_squad"
    metric_key = "f1"
    passthrough = ("unique_id", "is_real_example")
    evaluation_writes_predictions = True

    @property
    def v2(self) -> bool:
        return bool(self.build.version_2_with_negative)

    @property
    def output_keys(self):
        keys = ("start_top_log_probs", "start_top_index", "end_top_log_probs", "end_top_index")
        return keys + (("cls_logits",) if self.v2 else ())

    def predict_split(self):
        return self.settings.eval_split

    def plan_records(self):
        from tfrecords import record_inputs, squad_data
        from xlnet_tf.text import tokenization

        s = self.settings
        files = {"train": s.train_file, self.eval_split(): s.predict_file}
        given = {split: files[split] for split in self.needed_splits() if files[split]}
        have = (squad_data.read_squad_manifest(s.record_dir)["splits"]
                if os.path.exists(os.path.join(s.record_dir, "manifest.json")) else {})
        missing = [split for split in self.needed_splits() if split not in have and split not in given]
        if missing:
            flag = {"train": "--train_file"}.get(missing[0], "--predict_file")
            raise common_flags.UserError(f"no {missing[0]} records in --record_dir={s.record_dir}: give {flag}")
        reader = dict(max_seq_length=s.max_seq_length, doc_stride=s.doc_stride, max_query_length=s.max_query_length,
                      uncased=s.uncased, version_2_with_negative=s.version_2_with_negative)
        if not given:
            return record_inputs.plan_records(s.record_dir, squad_data.SQUAD_KIND, squad_data.SquadBuild,
                                              self.needed_splits(),
                                              reader=dict(spiece_model=s.spiece_model_file, **reader),
                                              source_flag="--train_file / --predict_file")
        common_flags.require(s, "spiece_model_file")
        v2 = s.version_2_with_negative
        if v2 is None:
            v2 = squad_data.files_version_2({k: squad_data.load_squad_json(f) for k, f in given.items()}, given)
        cfg = squad_data.SquadConfig(**{**reader, "version_2_with_negative": bool(v2), "uncased": bool(s.uncased)})
        tok = tokenization.XLNetTokenizer(s.spiece_model_file)
        return record_inputs.plan_records(
            s.record_dir, squad_data.SQUAD_KIND, squad_data.SquadBuild, self.needed_splits(),
            wanted=squad_data.SquadBuild.of(cfg, tok.sha256),
            current={split: record_inputs.input_digests([f]) for split, f in given.items()}, vocab_size=tok.vocab_size)

    def write_records(self, splits, log):
        from tfrecords import squad_data

        s, b = self.settings, self.build
        squad_data.build_squad_records(
            s.spiece_model_file, s.record_dir, train_file=s.train_file if "train" in splits else None,
            predict_file=s.predict_file if self.eval_split() in splits else None, eval_split=self.eval_split(),
            max_seq_length=b.max_seq_length, doc_stride=b.doc_stride, max_query_length=b.max_query_length,
            version_2_with_negative=b.version_2_with_negative, uncased=b.text.uncased,
            keep_accents=b.text.keep_accents, split_unknown=b.split_unknown, seed=s.seed, log=log)

    def dataset(self, split, batch_size, training, input_context=None):
        from tfrecords import squad_data

        s = self.settings
        return squad_data.squad_dataset(
            s.record_dir, batch_size, training, split=split, max_seq_length=s.max_seq_length,
            spiece_model=s.spiece_model_file, doc_stride=s.doc_stride, max_query_length=s.max_query_length,
            uncased=s.uncased,
            **(dict(seed=s.seed, shuffle_buffer=s.shuffle_buffer, input_context=input_context) if training else {}))

    def export_info(self):
        s = self.settings
        return dict(task="squad", max_seq_length=s.max_seq_length, max_query_length=s.max_query_length,
                    max_answer_length=s.max_answer_length, start_n_top=s.start_n_top, end_n_top=s.end_n_top,
                    version_2_with_negative=self.v2, uncased=self.build.text.uncased,
                    keep_accents=self.build.text.keep_accents, split_unknown=self.build.split_unknown,
                    spiece_model_file=s.spiece_model_file)

    def build_model(self, config, dtype):
        from xlnet_tf.models import XLNetForSquad

        s = self.settings
        # SQuAD 1.1 has no unanswerable questions: no answer-class head (windows without the answer are
        # still labelled at <cls>, so the span loss learns "not here").
        return XLNetForSquad(config, start_n_top=s.start_n_top, end_n_top=s.end_n_top, use_answer_class=self.v2,
                             dtype=dtype)

    def _source(self, split):
        """The split's SQuAD JSON if it is still the file the records were built from, else None."""
        from tfrecords import record_inputs

        entry = self.manifest["splits"][split]
        source = entry.get("source_file")
        if not source or not os.path.exists(source):
            return None
        if record_inputs.file_digest(source) != entry.get("source_sha256"):
            raise common_flags.UserError(
                f"{source} changed since the {split} records were built from it: scoring against it would be "
                f"wrong; pass --predict_file={source} to rebuild the records")
        return source

    def metrics(self, split, outputs, model_dir):
        from tfrecords import manifest as manifest_lib
        from tfrecords import squad_data
        from xlnet_tf.metrics import squad as squad_metrics, squad_postprocess

        s, v2 = self.settings, self.v2
        if not v2:  # a v1.1 model has no answer class: null odds are irrelevant
            outputs = {**outputs, "cls_logits": outputs["start_top_log_probs"][:, 0] * 0 - 1e9}
        preds = squad_postprocess.compute_predictions(
            squad_postprocess.load_eval_data(s.record_dir, split), outputs, n_best_size=s.n_best_size,
            max_answer_length=s.max_answer_length, version_2_with_negative=v2)
        squad_postprocess.write_predictions(model_dir, preds, v2)
        report = {"num_predictions": len(preds.predictions)}
        source = self._source(split)
        if source:
            dataset = squad_data.load_squad_json(source)
            report.update(squad_metrics.evaluate(dataset, preds.predictions, preds.null_odds if v2 else None,
                                                 version_2_with_negative=v2))
            if v2 and s.null_score_threshold is not None:
                fixed = squad_postprocess.apply_threshold(preds.predictions, preds.null_odds, s.null_score_threshold)
                manifest_lib.write_json_atomic(os.path.join(model_dir, "predictions_thresholded.json"), fixed)
                report["fixed_threshold"] = {"threshold": s.null_score_threshold,
                                             **squad_metrics.evaluate(dataset, fixed, None, version_2_with_negative=True)}
        return report

    def write_predictions(self, split, outputs, model_dir, log):
        report = self.metrics(split, outputs, model_dir)
        log(f"SQuAD {'2.0' if self.v2 else '1.1'} {split}: {json.dumps(report)}")
        return report if "f1" in report else None


def run():
    return lifecycle.run(SquadJob(FLAGS), common_flags.model_config_from_flags(FLAGS))


if __name__ == "__main__":
    common_flags.run_main(FLAGS, define_flags, run)
