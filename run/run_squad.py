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
    common_flags.define_optimizer_flags(fv, learning_rate=3e-5, weight_decay=0.0, adam_epsilon=1e-6)
    common_flags.define_loop_flags(fv, train_steps=8000, steps_per_loop=100, save_steps=1000,
                                   train_batch_size=48)
    common_flags.define_finetune_flags(fv, max_seq_length=512)
    d.string("train_file", None, "SQuAD JSON to train on.")
    d.string("predict_file", None, "SQuAD JSON to predict (and evaluate when it has answers).")
    d.bool("version_2_with_negative", None, "SQuAD 2.0 (answer class, null odds); default: "
           "detected from the files.")
    d.integer("doc_stride", 128, "Sliding-window stride (must match the records).")
    d.integer("max_query_length", 64, "Question budget (must match the records).")
    d.integer("max_answer_length", 64, "Longest answer, in tokens.")
    d.integer("n_best_size", 5, "Candidates kept per question.")
    d.integer("start_n_top", 5, "Beam size over starts.")
    d.integer("end_n_top", 5, "Beam size over ends per start.")
    d.float("null_score_threshold", None, "SQuAD 2.0: also write predictions_thresholded.json "
            "answering '' where null odds exceed this (a fixed, not dev-tuned, threshold).")


def run():
    import json

    import keras

    from tfrecords import manifest as manifest_lib
    from tfrecords import squad_data
    from xlnet_tf import (checkpoints, distribute, finetuning, model_dir, squad_metrics,
                          squad_postprocess)
    from xlnet_tf import results as eval_results
    from xlnet_tf.models import XLNetForSquad

    common_flags.require(FLAGS, "record_dir", "model_dir")
    if not (FLAGS.do_train or FLAGS.do_predict):
        raise flags.IllegalFlagValueError("Nothing to do: give --do_train and/or --do_predict")
    record_dir = FLAGS.record_dir
    manifest_path = os.path.join(record_dir, "manifest.json")
    have = squad_data.read_squad_manifest(record_dir)["splits"] if os.path.exists(manifest_path) else {}
    need_train = FLAGS.do_train and "train" not in have
    need_eval = FLAGS.do_predict and FLAGS.eval_split not in have
    if need_train or need_eval:
        common_flags.require(FLAGS, "spiece_model_file", *(["train_file"] if need_train else []),
                             *(["predict_file"] if need_eval else []))
        squad_data.build_squad_records(
            FLAGS.spiece_model_file, record_dir, train_file=FLAGS.train_file if need_train else None,
            predict_file=FLAGS.predict_file if need_eval else None, eval_split=FLAGS.eval_split,
            max_seq_length=FLAGS.max_seq_length, doc_stride=FLAGS.doc_stride,
            max_query_length=FLAGS.max_query_length, version_2_with_negative=FLAGS.version_2_with_negative,
            uncased=FLAGS.uncased, seed=FLAGS.seed, log=lambda line: print(line, flush=True))
    manifest = squad_data.read_squad_manifest(record_dir)
    v2 = bool(manifest["version_2_with_negative"])
    data_args = dict(max_seq_length=FLAGS.max_seq_length, spiece_model=FLAGS.spiece_model_file,
                     doc_stride=FLAGS.doc_stride, max_query_length=FLAGS.max_query_length, uncased=FLAGS.uncased)

    strategy = distribute.get_strategy(FLAGS.strategy, FLAGS.tpu, FLAGS.num_cpu_replicas)
    micro = common_flags.micro_batch_size(FLAGS, strategy.num_replicas_in_sync)
    config = common_flags.model_config_from_flags(FLAGS)
    manifest_lib.check_vocab(manifest, config.n_token)
    model_dir.prepare(FLAGS.model_dir, config, model_dir.export_info(
        task="squad", max_seq_length=FLAGS.max_seq_length, max_query_length=FLAGS.max_query_length,
        max_answer_length=FLAGS.max_answer_length, start_n_top=FLAGS.start_n_top, end_n_top=FLAGS.end_n_top,
        version_2_with_negative=v2, uncased=FLAGS.uncased, spiece_model_file=FLAGS.spiece_model_file),
        log=lambda line: print(line, flush=True))
    keras.utils.set_random_seed(FLAGS.seed)
    with strategy.scope():
        # SQuAD 1.1 has no unanswerable questions: no answer-class head (windows without the answer are
        # still labelled at <cls>, so the span loss learns "not here").
        model = XLNetForSquad(config, start_n_top=FLAGS.start_n_top, end_n_top=FLAGS.end_n_top,
                              use_answer_class=v2, dtype=common_flags.dtype_policy(FLAGS))
        if FLAGS.init_checkpoint:
            checkpoints.load_init_checkpoint(model, FLAGS.init_checkpoint)

    if FLAGS.do_train:
        def train_dataset_fn(ctx, skip_batches):
            return squad_data.squad_dataset(record_dir, ctx.get_per_replica_batch_size(micro), True,
                                            split="train", seed=FLAGS.seed, shuffle_buffer=FLAGS.shuffle_buffer,
                                            input_context=ctx, **data_args).skip(skip_batches)

        trainer = finetuning.build_optimizer_and_trainer(
            strategy, model, FLAGS, train_dataset_fn, examples_per_step=FLAGS.train_batch_size,
            seq_len=FLAGS.max_seq_length, log=lambda line: print(line, flush=True))
        trainer.train()

    if FLAGS.do_predict:
        if not FLAGS.do_train:  # the original ignored the fine-tuned weights here and predicted at random (#56)
            if not finetuning.restore_latest_weights(model, FLAGS.model_dir) and not FLAGS.init_checkpoint:
                raise ValueError(f"--do_predict without training: no checkpoint in {FLAGS.model_dir} and no "
                                 f"--init_checkpoint")
        eval_data = squad_postprocess.load_eval_data(record_dir, FLAGS.eval_split)
        ds = squad_data.squad_dataset(record_dir, FLAGS.predict_batch_size, False, split=FLAGS.eval_split,
                                      **data_args)
        keys = ["start_top_log_probs", "start_top_index", "end_top_log_probs", "end_top_index"]
        keys += ["cls_logits"] if v2 else []
        results = finetuning.predict(strategy, model, ds, keys, passthrough=("unique_id", "is_real_example"))
        if not v2:  # a v1.1 model has no answer class: null odds are irrelevant
            results["cls_logits"] = results["start_top_log_probs"][:, 0] * 0 - 1e9
        preds = squad_postprocess.compute_predictions(
            eval_data, results, n_best_size=FLAGS.n_best_size, max_answer_length=FLAGS.max_answer_length,
            version_2_with_negative=v2)
        squad_postprocess.write_predictions(FLAGS.model_dir, preds, v2)
        source = manifest["splits"][FLAGS.eval_split].get("source_file") or FLAGS.predict_file
        report = {"num_predictions": len(preds.predictions)}
        if source and os.path.exists(source):
            dataset = squad_data.load_squad_json(source)
            report.update(squad_metrics.evaluate(dataset, preds.predictions, preds.null_odds if v2 else None,
                                                 version_2_with_negative=v2))
            if v2 and FLAGS.null_score_threshold is not None:
                fixed = squad_postprocess.apply_threshold(preds.predictions, preds.null_odds,
                                                          FLAGS.null_score_threshold)
                with open(os.path.join(FLAGS.model_dir, "predictions_thresholded.json"), "w") as f:
                    json.dump(fixed, f, indent=2)
                report["fixed_threshold"] = {"threshold": FLAGS.null_score_threshold,
                                             **squad_metrics.evaluate(dataset, fixed, None, version_2_with_negative=True)}
        latest = finetuning.list_checkpoints(FLAGS.model_dir)
        step = finetuning.checkpoint_step(latest[-1]) if latest else 0
        eval_results.record(FLAGS.model_dir, "squad", "f1", step, report, split=FLAGS.eval_split,
                            checkpoint=latest[-1] if latest else FLAGS.init_checkpoint)
        print(f"SQuAD {manifest['version']} {FLAGS.eval_split}: {json.dumps(report)}", flush=True)
        return report
    return None


def main(argv):
    if len(argv) > 1:
        raise app.UsageError(f"Unexpected arguments: {argv[1:]}")
    run()


if __name__ == "__main__":
    common_flags.run_main(FLAGS, define_flags, main)
