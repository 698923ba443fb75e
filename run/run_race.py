"""Fine-tune XLNet on RACE-format multiple choice (RACE middle/high, or any directory of RACE JSON files).

  python tfrecords/build_race.py --data_dir=RACE --spiece_model=spiece.model --output_dir=records/race \
      --max_seq_length=512 --max_qa_length=128
  python run/run_race.py --flagfile=run/flags/race_large.flags --record_dir=records/race \
      --spiece_model_file=spiece.model --model_config_path=xlnet_config.json --init_checkpoint=converted/ \
      --model_dir=out/race --do_train --do_eval

With `--data_dir`, missing records are built into `--record_dir` first. Writes `eval_results.json` with
the accuracy on middle, high and all questions, and `predict_<split>.tsv` (question id, answer letter).
"""

import os


from absl import app, flags

from run import common_flags

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
    d.integer("max_qa_length", 128, "Question+option budget (must match the records).")


def race_metrics(labels, logits, levels, weights):
    """Accuracy over all real questions and per level (middle = 0, high = 1) where present."""
    from xlnet_tf import metrics

    predictions = logits.argmax(-1)
    out = {"all": metrics.classification_metrics(labels, predictions, weights)}
    for name, level in (("middle", 0), ("high", 1)):
        mask = (weights > 0) & (levels == level)
        if mask.any():
            out[name] = metrics.classification_metrics(labels, predictions, mask.astype("float32"))
    flat = {"accuracy": out["all"]["accuracy"], "num_examples": out["all"]["num_examples"]}
    for name in ("middle", "high"):
        if name in out:
            flat[f"accuracy_{name}"] = out[name]["accuracy"]
            flat[f"num_examples_{name}"] = out[name]["num_examples"]
    return flat


def run():
    import keras

    from tfrecords import manifest as manifest_lib
    from tfrecords import race_data
    from xlnet_tf import checkpoints, distribute, finetuning, model_dir
    from xlnet_tf.models import XLNetMultipleChoice

    common_flags.require(FLAGS, "record_dir", "model_dir")
    record_dir = FLAGS.record_dir
    if not (FLAGS.do_train or FLAGS.do_eval or FLAGS.do_predict):
        raise flags.IllegalFlagValueError("Nothing to do: give --do_train, --do_eval and/or --do_predict")
    if FLAGS.data_dir and not os.path.exists(os.path.join(record_dir, "manifest.json")):
        common_flags.require(FLAGS, "spiece_model_file")
        splits = [s for s, on in (("train", FLAGS.do_train), (FLAGS.eval_split, FLAGS.do_eval),
                                  (FLAGS.predict_split, FLAGS.do_predict)) if on]
        race_data.build_race_records(FLAGS.data_dir, FLAGS.spiece_model_file, record_dir,
                                     max_seq_length=FLAGS.max_seq_length, max_qa_length=FLAGS.max_qa_length,
                                     splits=sorted(set(splits)), uncased=FLAGS.uncased,
                                     eval_batch_size=FLAGS.eval_batch_size, seed=FLAGS.seed,
                                     log=lambda line: print(line, flush=True))
    data_args = dict(max_seq_length=FLAGS.max_seq_length, spiece_model=FLAGS.spiece_model_file,
                     max_qa_length=FLAGS.max_qa_length, uncased=FLAGS.uncased)

    strategy = distribute.get_strategy(FLAGS.strategy, FLAGS.tpu, FLAGS.num_cpu_replicas)
    micro = common_flags.micro_batch_size(FLAGS, strategy.num_replicas_in_sync)
    config = common_flags.model_config_from_flags(FLAGS)
    manifest_lib.check_vocab(race_data.read_race_manifest(record_dir), config.n_token)
    model_dir.prepare(FLAGS.model_dir, config, model_dir.export_info(
        task="race", max_seq_length=FLAGS.max_seq_length, max_qa_length=FLAGS.max_qa_length,
        uncased=FLAGS.uncased, spiece_model_file=FLAGS.spiece_model_file, summary_type=FLAGS.summary_type,
        use_summ_proj=FLAGS.use_summ_proj), log=lambda line: print(line, flush=True))
    keras.utils.set_random_seed(FLAGS.seed)
    with strategy.scope():
        model = XLNetMultipleChoice(config, summary_type=FLAGS.summary_type, use_proj=FLAGS.use_summ_proj,
                                    dtype=common_flags.dtype_policy(FLAGS))
        if FLAGS.init_checkpoint:
            checkpoints.load_init_checkpoint(model, FLAGS.init_checkpoint)

    if FLAGS.do_train:
        def train_dataset_fn(ctx, skip_batches):
            return race_data.race_dataset(record_dir, ctx.get_per_replica_batch_size(micro), True,
                                          split="train", seed=FLAGS.seed, shuffle_buffer=FLAGS.shuffle_buffer,
                                          input_context=ctx, **data_args).skip(skip_batches)

        trainer = finetuning.build_optimizer_and_trainer(
            strategy, model, FLAGS, train_dataset_fn, examples_per_step=FLAGS.train_batch_size,
            seq_len=FLAGS.max_seq_length * 4, log=lambda line: print(line, flush=True))
        trainer.train()

    def run_split(split, batch_size):
        ds = race_data.race_dataset(record_dir, batch_size, False, split=split, **data_args)
        return finetuning.predict(strategy, model, ds, ("logits",),
                                  passthrough=("example_index", "is_real_example", "label", "level"))

    if FLAGS.do_eval:
        def evaluate(step):
            out = run_split(FLAGS.eval_split, FLAGS.eval_batch_size)
            result = race_metrics(out["label"], out["logits"], out["level"], out["is_real_example"])
            print(f"eval {FLAGS.eval_split} step {step}: {result}", flush=True)
            return result

        finetuning.evaluate_checkpoints(model, FLAGS.model_dir, evaluate, FLAGS.eval_all_checkpoints,
                                        "accuracy", task="race", split=FLAGS.eval_split)

    if FLAGS.do_predict:
        if not FLAGS.do_train:
            finetuning.restore_latest_weights(model, FLAGS.model_dir)
        out = run_split(FLAGS.predict_split, FLAGS.predict_batch_size)
        path = os.path.join(FLAGS.model_dir, f"predict_{FLAGS.predict_split}.tsv")
        count = finetuning.write_predictions_tsv(
            path, ("id", "answer"), out, race_data.read_race_guids(record_dir, FLAGS.predict_split),
            lambda k: "ABCD"[int(out["logits"][k].argmax())])
        print(f"Wrote {count} predictions to {path}", flush=True)


def main(argv):
    if len(argv) > 1:
        raise app.UsageError(f"Unexpected arguments: {argv[1:]}")
    run()


if __name__ == "__main__":
    common_flags.run_main(FLAGS, define_flags, main)
