"""XLNet pretraining (permutation LM, two streams, memories) on any tf.distribute strategy.

  python run/pretrain.py --flagfile=run/flags/demo_pretrain.flags
  python run/pretrain.py --record_dir=records/ --spiece_model=spiece.model --model_dir=out/ \
      --model_config_path=xlnet_config.json --train_steps=500000 --tpu=my-tpu

The record directory's manifest is validated against these flags (seq_len, reuse_len, num_predict,
batch size, replicas, SentencePiece model) before anything is built. Resumes from --model_dir, whose
`pretrain_run.json` keeps the facts of the run (objective, nsp, record layout, records' fingerprint,
SentencePiece checksum; xlnet_tf/artifacts/pretrain_info.py): a resume that differs in any of them is refused in one line
listing every difference, before anything is written; `--train_steps`, the optimizer and schedule flags and the
record directory's path (same fingerprint) may change. The final weights go to `<model_dir>/final/`
(`xlnet_model.ckpt`, `xlnet_config.json`, and `pretrained_model.json`: the SentencePiece checksum, objective,
nsp and heads that consumers check with `pretrain_info.check_final`).
"""

import os


from absl import flags

from run import common_flags

# This runner's flags, defined by `define_flags` when it runs (its __main__, common_flags.parse),
# never at import.
FLAGS = flags.FlagValues()


def define_flags(fv: flags.FlagValues = FLAGS):
    d = common_flags.Definer(fv)
    common_flags.define_strategy_flags(fv)
    common_flags.define_model_flags(fv)
    common_flags.define_optimizer_flags(fv, learning_rate=1e-4, weight_decay=0.0, adam_epsilon=1e-8)
    common_flags.define_loop_flags(fv, train_steps=1000, steps_per_loop=100, save_steps=1000,
                                   train_batch_size=16)
    d.string("eval_records_dir", None, "Held-out records; evaluated before training, at "
             "every checkpoint and at the end.")
    d.integer("eval_batches", 0, "Held-out batches per evaluation (0 = all).", lower_bound=0)
    d.string("spiece_model", None, "SentencePiece model the records were built with "
             "(checked against the manifest's checksum).")
    d.integer("seq_len", 512, "Sequence length (must match the records).", lower_bound=2)
    d.integer("reuse_len", 256, "Reuse length (must match the records).", lower_bound=0)
    d.integer("num_predict", 85, "Prediction slots (must match the records).", lower_bound=1)
    d.integer("perm_size", None, "Factorization block size (checked if given).", lower_bound=1)
    d.bool("bi_data", True, "Bidirectional data (must match the records).")
    d.integer("mem_len", 384, "Memory length (0 = no memory).", lower_bound=0)
    d.enum("objective", "plm", ["plm", "mlm"], "plm: XLNet's permutation LM (query stream). "
           "mlm: BERT's masked LM from the content stream, full attention within each part. "
           "Must match the records' (tfrecords/build_pretrain.py --objective).")
    d.bool("nsp", False, "Add next-sentence prediction (a 2-way head on <cls>) to the loss; the "
           "records must carry the labels (tfrecords/build_pretrain.py --nsp). Off, as XLNet.")
    common_flags.define_sidecar_flags(fv, export=False)


def run():
    """Everything `main` does, reading FLAGS (tests call this after parsing flags)."""
    import contextlib

    import keras
    import tensorflow as tf

    from tfrecords import manifest as manifest_lib
    from tfrecords.pretrain import writer as pretrain_data
    from xlnet_tf import checkpoints
    from xlnet_tf.training import distribute, loop as training
    from xlnet_tf.artifacts import model_dir, pretrain_info, results
    from xlnet_tf.models import XLNetPretrainer

    if FLAGS.mode == "continuous_eval":
        return continuous_eval()
    common_flags.require(FLAGS, "record_dir", "model_dir")
    optimizer_settings = common_flags.optimizer_settings(FLAGS)  # its flag errors before anything is built
    strategy = distribute.get_strategy(FLAGS.strategy, FLAGS.tpu, FLAGS.num_cpu_replicas)
    replicas = strategy.num_replicas_in_sync
    if FLAGS.train_batch_size % replicas:
        raise ValueError(f"--train_batch_size={FLAGS.train_batch_size} is not divisible by the "
                         f"{replicas} replicas of the strategy")
    per_replica = FLAGS.train_batch_size // replicas
    data_args = dict(seq_len=FLAGS.seq_len, reuse_len=FLAGS.reuse_len, num_predict=FLAGS.num_predict,
                     spiece_model=FLAGS.spiece_model, perm_size=FLAGS.perm_size, bi_data=FLAGS.bi_data,
                     objective=FLAGS.objective, nsp=FLAGS.nsp)
    # Validate the manifest against the flags before building anything.
    manifests = [manifest_lib.read_manifest(FLAGS.record_dir)]
    manifest_lib.validate_pretrain_manifest(manifests[0], global_batch_size=FLAGS.train_batch_size,
                                            num_replicas=replicas, **data_args)
    if FLAGS.eval_records_dir:
        eval_manifest = manifest_lib.read_manifest(FLAGS.eval_records_dir)
        layout = eval_manifest["stream_layout"]
        manifest_lib.validate_pretrain_manifest(eval_manifest, global_batch_size=layout["global_batch_size"],
                                                num_replicas=layout["num_replicas"], **data_args)
        manifests.append(eval_manifest)
    config = common_flags.model_config_from_flags(FLAGS, mem_len=FLAGS.mem_len, reuse_len=FLAGS.reuse_len,
                                                  bi_data=FLAGS.bi_data)
    config.validate(batch_size=per_replica, seq_len=FLAGS.seq_len)
    for m in manifests:
        manifest_lib.check_vocab(m, config.n_token)
    # The facts of this run, compared with the ones a resumed model_dir recorded before anything is built;
    # written (with the config) only once the model and its initial weights are built.
    run_facts = pretrain_info.PretrainRun.from_manifest(
        manifests[0], objective=FLAGS.objective, nsp=FLAGS.nsp, num_replicas=replicas,
        mixed_precision=FLAGS.mixed_precision, eval_manifest=manifests[1] if len(manifests) > 1 else None)
    model_dir.check_pretraining(FLAGS.model_dir, config, run_facts)

    keras.utils.set_random_seed(FLAGS.seed)
    with strategy.scope():
        model = XLNetPretrainer(config, objective=FLAGS.objective, nsp=FLAGS.nsp,
                                dtype=common_flags.dtype_policy(FLAGS))
        model.backbone.remat = FLAGS.remat
        if FLAGS.init_checkpoint:
            checkpoints.load_init_checkpoint(model, FLAGS.init_checkpoint)
        optimizer = optimizer_settings.create(model)
        if FLAGS.mixed_precision == "float16":
            optimizer = keras.optimizers.LossScaleOptimizer(optimizer)
    run_facts = model_dir.prepare_pretraining(FLAGS.model_dir, config, run_facts,
                                              log=lambda line: print(line, flush=True))

    def dataset_fn(ctx, skip_batches):
        ds = pretrain_data.pretrain_dataset(FLAGS.record_dir, input_context=ctx, repeat=True,
                                            global_batch_size=FLAGS.train_batch_size, **data_args)
        local_replicas = replicas // ctx.num_input_pipelines  # one pipeline feeds these, interleaved
        return ds.skip(skip_batches * local_replicas)

    eval_dir = [FLAGS.eval_records_dir]

    def evaluate(step):
        if not eval_dir[0]:
            return
        m = manifest_lib.read_manifest(eval_dir[0])
        layout = m["stream_layout"]
        ds = pretrain_data.pretrain_dataset(
            eval_dir[0], global_batch_size=layout["global_batch_size"],
            num_replicas=layout["num_replicas"], replica_id=0, **data_args)
        result = training.evaluate_plm(model, ds, FLAGS.mem_len, FLAGS.eval_batches or None)
        print(f"eval step {step}: held-out loss {result['loss']:.4f} accuracy {result['accuracy']:.4f} "
              f"over {int(result['num_tokens'])} target tokens", flush=True)
        results.record(FLAGS.model_dir, "pretrain", "loss", step, result, split="heldout",
                       higher_is_better=False)

    loop = common_flags.loop_config(FLAGS, seq_len=FLAGS.seq_len)
    trainer = training.Trainer(strategy, model, optimizer, training.plm_loss_fn, dataset_fn, loop,
                               mem_len=FLAGS.mem_len, per_replica_batch=per_replica,
                               log=lambda line: print(line, flush=True))
    eval_dir[0] = FLAGS.eval_records_dir if trainer.chief else None  # the chief evaluates and writes results
    baseline = None
    if eval_dir[0]:
        baseline = pretrain_data.unigram_baseline(FLAGS.record_dir, eval_dir[0], config.n_token)
        print(f"unigram baseline (train-set token frequencies, no context): held-out loss "
              f"{baseline['loss']:.4f}, accuracy {baseline['accuracy']:.4f}", flush=True)
    if tf.train.latest_checkpoint(FLAGS.model_dir) is None:
        evaluate(0)
    with contextlib.ExitStack() as named:  # a damaged record is reported with its file
        for m in manifests:
            named.enter_context(manifest_lib.naming_corrupt_records(m))
        history = trainer.train(
            on_loop_end=lambda step: evaluate(step) if step % FLAGS.save_steps == 0 else None)
    recorded = results.load(FLAGS.model_dir) if eval_dir[0] else None
    if eval_dir[0] and (recorded is None or recorded.last_step != FLAGS.train_steps):
        evaluate(FLAGS.train_steps)
    # every held-out evaluation of this model_dir, including those of the runs this one resumed
    eval_results = results.load(FLAGS.model_dir).evaluations if eval_dir[0] else []
    if not trainer.chief:
        return {"history": history, "eval": [], "final_checkpoint": None, "unigram_baseline": None}
    from xlnet_tf.training import sidecar

    sidecar.write_training_done(FLAGS.model_dir, int(trainer.global_step.numpy()))  # what a sidecar evaluator waits for
    final_dir = os.path.join(FLAGS.model_dir, "final")
    final = checkpoints.save_original_checkpoint(model, os.path.join(final_dir, "xlnet_model.ckpt"))
    config.to_json_file(os.path.join(final_dir, "xlnet_config.json"))
    # last: the facts describe weights that are there (consumers check them with pretrain_info.check_final)
    pretrain_info.write(os.path.join(final_dir, pretrain_info.MODEL_NAME),
                        run_facts.as_model_facts(config.to_dict(), step=int(trainer.global_step.numpy())))
    print(f"Final weights (usable as --init_checkpoint): {os.path.dirname(final)}", flush=True)
    if len(eval_results) > 1:
        first, last = eval_results[0], eval_results[-1]
        name = {"plm": "permutation-LM", "mlm": "masked-LM"}[FLAGS.objective]
        print(f"Held-out {name} loss: {first['loss']:.4f} (step {first['step']}) -> "
              f"{last['loss']:.4f} (step {last['step']}); accuracy {first['accuracy']:.4f} -> "
              f"{last['accuracy']:.4f}; unigram baseline {baseline['loss']:.4f}", flush=True)
    return {"history": history, "eval": eval_results, "final_checkpoint": final, "unigram_baseline": baseline}


def continuous_eval():
    """The sidecar evaluator of a pretraining run (`--mode=continuous_eval`): the held-out loss of every checkpoint
    the trainer (run without --eval_records_dir) writes into --model_dir, once each as it appears, appended to
    eval_results.json (split `heldout`) and TensorBoard's eval/; stops after --train_steps, the trainer's
    training_done.json, or --eval_timeout_seconds without a new checkpoint. Checked before it reads a checkpoint:
    the held-out records against the flags, the trainer's run (its model config and tokenization) against them."""
    import keras
    import tensorflow as tf

    from run import sidecar_eval
    from tfrecords import manifest as manifest_lib
    from tfrecords.pretrain import writer as pretrain_data
    from xlnet_tf.training import distribute, sidecar, loop as training
    from xlnet_tf.artifacts import model_dir, pretrain_info, results
    from xlnet_tf.artifacts import provenance
    from xlnet_tf.artifacts.text_settings import TextSettings
    from xlnet_tf.models import XLNetPretrainer

    common_flags.require(FLAGS, "model_dir", "eval_records_dir")
    data_args = dict(seq_len=FLAGS.seq_len, reuse_len=FLAGS.reuse_len, num_predict=FLAGS.num_predict,
                     spiece_model=FLAGS.spiece_model, perm_size=FLAGS.perm_size, bi_data=FLAGS.bi_data,
                     objective=FLAGS.objective, nsp=FLAGS.nsp)
    held_out = manifest_lib.read_manifest(FLAGS.eval_records_dir)
    layout = held_out["stream_layout"]
    manifest_lib.validate_pretrain_manifest(held_out, global_batch_size=layout["global_batch_size"],
                                            num_replicas=layout["num_replicas"], **data_args)
    config = common_flags.model_config_from_flags(FLAGS, mem_len=FLAGS.mem_len, reuse_len=FLAGS.reuse_len,
                                                  bi_data=FLAGS.bi_data)
    manifest_lib.check_vocab(held_out, config.n_token)
    sidecar_eval.wait_for(FLAGS.model_dir, (model_dir.CONFIG_NAME, pretrain_info.RUN_NAME), FLAGS.eval_timeout_seconds,
                          FLAGS.eval_poll_seconds, print)
    model_dir.check(FLAGS.model_dir, config)  # the trainer's model is this one
    trained = pretrain_info.read_run(os.path.join(FLAGS.model_dir, pretrain_info.RUN_NAME))
    text = TextSettings(held_out["spiece_model"]["sha256"], bool(held_out["params"].get("uncased")),
                                      bool(held_out["params"].get("keep_accents")))
    provenance.require_same(trained.text, text, where=f"--model_dir={FLAGS.model_dir}", there="trained",
                            now=f"in --eval_records_dir={FLAGS.eval_records_dir}",
                            what="the held-out records were tokenized otherwise than the training records",
                            remedy="build the held-out records with the training records' tokenization")
    if trained.objective != FLAGS.objective:
        raise common_flags.UserError(f"--model_dir={FLAGS.model_dir} trains objective {trained.objective!r}, not "
                                     f"--objective={FLAGS.objective}")
    recorded = results.load(FLAGS.model_dir)
    done = {e["step"] for e in recorded.evaluations if e.get("split") == "heldout"} if recorded else set()

    strategy = distribute.get_strategy(FLAGS.strategy, FLAGS.tpu, FLAGS.num_cpu_replicas)
    keras.utils.set_random_seed(FLAGS.seed)
    with strategy.scope():
        model = XLNetPretrainer(config, objective=FLAGS.objective, nsp=FLAGS.nsp)
    writer = tf.summary.create_file_writer(os.path.join(FLAGS.model_dir, "eval"))
    log = lambda line: print(line, flush=True)  # noqa: E731
    for step, path in sidecar.restored_checkpoints(model, FLAGS.model_dir, done, FLAGS.train_steps,
                                                   FLAGS.eval_poll_seconds, FLAGS.eval_timeout_seconds, log):
        ds = pretrain_data.pretrain_dataset(FLAGS.eval_records_dir, global_batch_size=layout["global_batch_size"],
                                            num_replicas=layout["num_replicas"], replica_id=0, **data_args)
        result = training.evaluate_plm(model, ds, FLAGS.mem_len, FLAGS.eval_batches or None)
        results.record(FLAGS.model_dir, "pretrain", "loss", step, result, split="heldout", checkpoint=path,
                       higher_is_better=False)
        sidecar.write_scalars(writer, "heldout", {k: result[k] for k in ("loss", "accuracy")}, step)
        print(f"eval step {step}: held-out loss {result['loss']:.4f} accuracy {result['accuracy']:.4f}", flush=True)
    final = results.load(FLAGS.model_dir)
    return {"eval": final.evaluations if final else []}


if __name__ == "__main__":
    common_flags.run_main(FLAGS, define_flags, run)
