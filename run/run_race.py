"""Fine-tune XLNet on RACE-format multiple choice (RACE middle/high, or any directory of RACE JSON files).

  python tfrecords/build_race.py --data_dir=RACE --spiece_model=spiece.model --output_dir=records/race \
      --max_seq_length=512 --max_qa_length=128
  python run/run_race.py --flagfile=run/flags/race.flags --record_dir=records/race \
      --spiece_model_file=spiece.model --model_config_path=xlnet_config.json --init_checkpoint=converted/ \
      --model_dir=out/race --do_train --do_eval

With `--data_dir`, missing records are built into `--record_dir` first. Writes `eval_results.json` with
the accuracy on middle, high and all questions, and `predict_<split>.tsv` (question id, answer letter).
"""

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
    common_flags.define_optimizer_flags(fv, learning_rate=2e-5, weight_decay=0.0, adam_epsilon=1e-6)
    common_flags.define_loop_flags(fv, train_steps=12000, steps_per_loop=100, save_steps=1000,
                                   train_batch_size=32)
    common_flags.define_finetune_flags(fv, max_seq_length=512)
    d.integer("max_qa_length", 128, "Question+option budget (must match the records).", lower_bound=1)


class RaceJob(lifecycle.FineTuningJob):
    """Four-way multiple choice over RACE records (tfrecords/race_data.py)."""

    name = "race"
    record_kind = "xlnet_race"
    metric_key = "accuracy"
    output_keys = ("logits",)
    passthrough = ("example_index", "is_real_example", "label", "level")

    @property
    def tokens_per_example(self):
        return self.settings.max_seq_length * 4

    def plan_records(self):
        from tfrecords import race_data, record_inputs
        from xlnet_tf.text import tokenization

        s = self.settings
        common = dict(max_seq_length=s.max_seq_length, max_qa_length=s.max_qa_length, uncased=s.uncased)
        if not s.data_dir:
            return record_inputs.plan_records(s.record_dir, race_data.RACE_KIND, race_data.RaceBuild,
                                              self.needed_splits(),
                                              reader=dict(spiece_model=s.spiece_model_file, **common))
        common_flags.require(s, "spiece_model_file")
        current = {split: record_inputs.input_digests(race_data.split_sources(
            race_data.read_race_split(s.data_dir, split))) for split in self.needed_splits()}
        return record_inputs.plan_records(
            s.record_dir, race_data.RACE_KIND, race_data.RaceBuild, self.needed_splits(),
            wanted=race_data.race_build(s.spiece_model_file, **common), current=current,
            vocab_size=tokenization.XLNetTokenizer(s.spiece_model_file).vocab_size)

    def write_records(self, splits, log):
        from tfrecords import race_data

        s, b = self.settings, self.build
        race_data.build_race_records(
            s.data_dir, s.spiece_model_file, s.record_dir, max_seq_length=b.max_seq_length,
            max_qa_length=b.max_qa_length, qa_truncation=b.qa_truncation, splits=splits, levels=b.levels,
            uncased=b.text.uncased, keep_accents=b.text.keep_accents, eval_batch_size=s.eval_batch_size, seed=s.seed,
            task=b.task, log=log)

    def dataset(self, split, batch_size, training, input_context=None):
        from tfrecords import race_data

        s = self.settings
        return race_data.race_dataset(
            s.record_dir, batch_size, training, split=split, max_seq_length=s.max_seq_length,
            spiece_model=s.spiece_model_file, max_qa_length=s.max_qa_length, uncased=s.uncased,
            **(dict(seed=s.seed, shuffle_buffer=s.shuffle_buffer, input_context=input_context) if training else {}))

    def export_info(self):
        s, b = self.settings, self.build
        return dict(task="race", max_seq_length=b.max_seq_length, max_qa_length=b.max_qa_length,
                    uncased=b.text.uncased, keep_accents=b.text.keep_accents, qa_truncation=b.qa_truncation,
                    spiece_model_file=s.spiece_model_file, summary_type=s.summary_type,
                    use_summ_proj=s.use_summ_proj)

    def build_model(self, config, dtype):
        from xlnet_tf.models import XLNetMultipleChoice

        s = self.settings
        return XLNetMultipleChoice(config, summary_type=s.summary_type, use_proj=s.use_summ_proj, dtype=dtype)

    def metrics(self, split, outputs, model_dir):
        from xlnet_tf.metrics import race

        return race.race_metrics(outputs["label"], outputs["logits"], outputs["level"], outputs["is_real_example"])

    def write_predictions(self, split, outputs, model_dir, log):
        from tfrecords import race_data
        from xlnet_tf.training import finetuning

        path = os.path.join(model_dir, f"predict_{split}.tsv")
        count = finetuning.write_predictions_tsv(
            path, ("id", "answer"), outputs, race_data.read_race_guids(self.settings.record_dir, split),
            lambda k: "ABCD"[int(outputs["logits"][k].argmax())])
        log(f"Wrote {count} predictions to {path}")
        return None


def run():
    return lifecycle.run(RaceJob(FLAGS), common_flags.model_config_from_flags(FLAGS))


if __name__ == "__main__":
    common_flags.run_main(FLAGS, define_flags, run)
