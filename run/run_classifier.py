"""Fine-tune XLNet for sequence classification or regression (GLUE, IMDB, Yelp, your own tsv/csv).

  python tfrecords/build_classifier.py --task=mrpc --data_dir=glue/MRPC --spiece_model=spiece.model \
      --output_dir=records/mrpc --max_seq_length=128 --splits=train,dev,test
  python run/run_classifier.py --flagfile=run/flags/mrpc.flags --record_dir=records/mrpc \
      --spiece_model_file=spiece.model --model_config_path=xlnet_config.json \
      --init_checkpoint=converted/ --model_dir=out/mrpc --do_train --do_eval --do_predict

With `--data_dir` and `--task`, missing records are built into `--record_dir` first. Writes
`eval_results.json` (accuracy; F1 for MRPC/QQP; Matthews correlation for CoLA; Pearson/Spearman for
regression) and `predict_<split>.tsv` (GLUE submission layout `index<TAB>prediction`).
"""

import os


from absl import app, flags

from run import common_flags

# This runner's flags, defined by `define_flags` when it runs (its __main__, common_flags.parse),
# never at import.
FLAGS = flags.FlagValues()

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


def _metrics(manifest, labels, outputs, weights):
    from xlnet_tf import metrics

    if manifest["is_regression"]:
        return metrics.regression_metrics(labels, outputs["score"], weights)
    task = (FLAGS.task or manifest.get("task") or "").lower()
    extra = TASK_METRICS.get(task, ())
    if manifest["num_labels"] == 2 and "f1" not in extra:
        extra = extra + ("f1",)
    if manifest["num_labels"] > 2:
        extra = extra + ("macro_f1",)
    return metrics.classification_metrics(labels, outputs["logits"].argmax(-1), weights, extra)


def run():
    import json

    import keras
    import numpy as np

    from tfrecords import classifier_data
    from tfrecords import manifest as manifest_lib
    from xlnet_tf import checkpoints, distribute, finetuning, model_dir
    from xlnet_tf.models import XLNetClassifier

    common_flags.require(FLAGS, "record_dir", "model_dir")
    if not (FLAGS.do_train or FLAGS.do_eval or FLAGS.do_predict):
        raise flags.IllegalFlagValueError("Nothing to do: give --do_train, --do_eval and/or --do_predict")
    if FLAGS.data_dir and not os.path.exists(os.path.join(FLAGS.record_dir, "manifest.json")):
        common_flags.require(FLAGS, "task", "spiece_model_file")
        splits = [s for s, on in (("train", FLAGS.do_train), (FLAGS.eval_split, FLAGS.do_eval),
                                  (FLAGS.predict_split, FLAGS.do_predict)) if on]
        classifier_data.build_classifier_records(
            classifier_data.get_processor(FLAGS.task), FLAGS.data_dir, FLAGS.spiece_model_file,
            FLAGS.record_dir, max_seq_length=FLAGS.max_seq_length, splits=sorted(set(splits)),
            uncased=FLAGS.uncased, eval_batch_size=FLAGS.eval_batch_size, seed=FLAGS.seed,
            log=lambda line: print(line, flush=True))
    manifest = classifier_data.read_classifier_manifest(FLAGS.record_dir)
    data_args = dict(max_seq_length=FLAGS.max_seq_length, spiece_model=FLAGS.spiece_model_file,
                     uncased=FLAGS.uncased)

    strategy = distribute.get_strategy(FLAGS.strategy, FLAGS.tpu, FLAGS.num_cpu_replicas)
    micro = common_flags.micro_batch_size(FLAGS, strategy.num_replicas_in_sync)
    config = common_flags.model_config_from_flags(FLAGS)
    manifest_lib.check_vocab(manifest, config.n_token)
    split = "train" if FLAGS.do_train else FLAGS.eval_split
    sample = classifier_data.classifier_dataset(FLAGS.record_dir, 8, False, split=split, **data_args).take(16)
    text_pair = any(bool(np.any(b["segment_ids"].numpy() == 1)) for b in sample)
    model_dir.prepare(FLAGS.model_dir, config, model_dir.export_info(
        task="regression" if manifest["is_regression"] else "classifier",
        labels=manifest.get("label_list"), num_labels=manifest.get("num_labels"), text_pair=text_pair,
        max_seq_length=FLAGS.max_seq_length, uncased=FLAGS.uncased, spiece_model_file=FLAGS.spiece_model_file,
        summary_type=FLAGS.summary_type, use_summ_proj=FLAGS.use_summ_proj,
        task_name=(FLAGS.task or manifest["task"]).lower()), log=lambda line: print(line, flush=True))

    keras.utils.set_random_seed(FLAGS.seed)
    with strategy.scope():
        model = XLNetClassifier(config, num_labels=manifest.get("num_labels") or 2,
                                regression=manifest["is_regression"],
                                task_name=(FLAGS.task or manifest["task"]).lower(),
                                summary_type=FLAGS.summary_type, use_proj=FLAGS.use_summ_proj,
                                dtype=common_flags.dtype_policy(FLAGS))
        if FLAGS.init_checkpoint:
            report = checkpoints.load_init_checkpoint(model, FLAGS.init_checkpoint)
            print(f"Initialized {len(report['loaded'])} variables from {FLAGS.init_checkpoint}; "
                  f"fresh: {report['missing_heads']}", flush=True)

    if FLAGS.do_train:
        def train_dataset_fn(ctx, skip_batches):
            ds = classifier_data.classifier_dataset(
                FLAGS.record_dir, ctx.get_per_replica_batch_size(micro), True, split="train",
                seed=FLAGS.seed, shuffle_buffer=FLAGS.shuffle_buffer, input_context=ctx, **data_args)
            return ds.skip(skip_batches)

        trainer = finetuning.build_optimizer_and_trainer(
            strategy, model, FLAGS, train_dataset_fn, examples_per_step=FLAGS.train_batch_size,
            seq_len=FLAGS.max_seq_length, log=lambda line: print(line, flush=True))
        trainer.train()

    def run_split(split, batch_size):
        ds = classifier_data.classifier_dataset(FLAGS.record_dir, batch_size, False, split=split,
                                                **data_args)
        keys = ("score",) if manifest["is_regression"] else ("logits",)
        return finetuning.predict(strategy, model, ds, keys)

    if FLAGS.do_eval:
        def evaluate(step):
            out = run_split(FLAGS.eval_split, FLAGS.eval_batch_size)
            result = _metrics(manifest, out["label"], out, out["is_real_example"])
            print(f"eval {FLAGS.eval_split} step {step}: {json.dumps(result)}", flush=True)
            return result

        task = (FLAGS.task or manifest.get("task") or "").lower()  # as _metrics picks the metrics
        key = "pearson" if manifest["is_regression"] else (
            "mcc" if "mcc" in TASK_METRICS.get(task, ()) else "accuracy")
        report = finetuning.evaluate_checkpoints(
            model, FLAGS.model_dir, evaluate, FLAGS.eval_all_checkpoints, key,
            task="regression" if manifest["is_regression"] else "classifier", split=FLAGS.eval_split)
        print(f"best {key}: {report['best'].get(key)} at step {report['best']['step']}", flush=True)

    if FLAGS.do_predict:
        if not FLAGS.do_train:
            finetuning.restore_latest_weights(model, FLAGS.model_dir)
        out = run_split(FLAGS.predict_split, FLAGS.predict_batch_size)
        labels = manifest.get("label_list")
        path = os.path.join(FLAGS.model_dir, f"predict_{FLAGS.predict_split}.tsv")
        value = ((lambda k: f"{float(out['score'][k]):.6f}") if manifest["is_regression"]
                 else (lambda k: labels[int(np.argmax(out["logits"][k]))]))
        count = finetuning.write_predictions_tsv(
            path, ("index", "prediction"), out, classifier_data.read_guids(FLAGS.record_dir, FLAGS.predict_split),
            value)
        print(f"Wrote {count} predictions to {path}", flush=True)


def main(argv):
    if len(argv) > 1:
        raise app.UsageError(f"Unexpected arguments: {argv[1:]}")
    run()


if __name__ == "__main__":
    common_flags.run_main(FLAGS, define_flags, main)
