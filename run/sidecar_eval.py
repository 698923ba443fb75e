"""The sidecar evaluator (`--mode=continuous_eval` of every fine-tuning runner): the trainer runs elsewhere (a TPU,
`--do_train` alone) and writes checkpoints into --model_dir; this process, on its own strategy (e.g. CPU),
evaluates each one once as it appears, appends it to eval_results.json and to TensorBoard's `eval/` events beside
the trainer's `train/`, and with --export_dir exports each new best as the next TF Serving version (atomically, with
its warm-up requests and `assets.extra/xlnet_best.json`: checkpoint, step, metric), keeping --exports_to_keep.

Plan first (nothing written): the records against the flags (run/lifecycle.py's plan), the trainer's model_dir
(its config and export info must describe this run: waited for up to --eval_timeout_seconds), --export_dir not a
file. Safe to kill and restart: the steps in eval_results.json are not evaluated again, and a best that was
evaluated but not exported (a kill in between) is exported on restart. A checkpoint the trainer deleted before it
was read (--keep_checkpoints) is skipped with a line saying so.
"""

from __future__ import annotations

import os
import time
from typing import Any, Callable, Dict

from xlnet_tf.errors import UserError


def wait_for(model_dir: str, names, timeout: float, poll: float, log: Callable[[str], None]) -> None:
    """Returns once the trainer's run files `names` are in `model_dir`; UserError after `timeout` seconds."""
    from xlnet_tf import files

    wanted = [os.path.join(model_dir, n) for n in names]
    start = time.monotonic()
    while not all(files.exists(p) for p in wanted):
        if time.monotonic() - start > timeout:
            raise UserError(f"--model_dir={model_dir}: no training run appeared in {timeout:g} s (no "
                            f"{' and '.join(names)}); start the trainer with the same flags")
        log(f"continuous eval: waiting for the trainer's run in {model_dir}")
        time.sleep(poll)


def run(task, plan, config, log: Callable[[str], None]) -> Dict[str, Any]:
    import keras
    import tensorflow as tf

    from run import export_savedmodel
    from tfrecords import manifest as manifest_lib
    from xlnet_tf.training import distribute, finetuning, sidecar, loop as training
    from xlnet_tf.artifacts import model_dir
    from xlnet_tf.artifacts import results as eval_results

    s = task.settings
    records = os.path.join(s.record_dir, manifest_lib.MANIFEST_NAME)
    manifest_lib.check_vocab_size(plan.vocab_size, config.n_token, records)
    if plan.stale:
        raise UserError(f"--record_dir={s.record_dir}: the {', '.join(sorted(plan.stale))} records are missing or "
                        "stale; the evaluator reads records, build them first (the trainer's run with --data_dir, "
                        "or tfrecords/build_*.py)")
    if s.export_dir and tf.io.gfile.exists(s.export_dir) and not tf.io.gfile.isdir(s.export_dir):
        raise UserError(f"--export_dir={s.export_dir} is a file; give a directory (the versions go under it)")
    task.check_plan()
    info = model_dir.export_info(**task.export_info())
    wait_for(s.model_dir, (model_dir.CONFIG_NAME, model_dir.EXPORT_INFO_NAME), s.eval_timeout_seconds,
             s.eval_poll_seconds, log)
    model_dir.check(s.model_dir, config, info)  # the trainer's run is this run
    recorded = eval_results.load_for(s.model_dir, task.name)

    task.manifest = manifest_lib.read_manifest(s.record_dir, kind=task.record_kind)
    strategy = distribute.get_strategy(s.strategy, s.tpu, s.num_cpu_replicas)
    keras.utils.set_random_seed(s.seed)
    with strategy.scope():
        model = task.build_model(config, training.dtype_policy(s.mixed_precision))
    split = task.eval_split()
    writer = tf.summary.create_file_writer(os.path.join(s.model_dir, "eval"))

    def export_best(results):
        best = results.best(split)
        path = best.get("checkpoint")
        if not s.export_dir or path is None or best["step"] in sidecar.exported_steps(s.export_dir).values():
            return
        version = sidecar.next_version(s.export_dir)
        provenance = sidecar.PROVENANCE_FILE.to_json({"checkpoint": path, "step": best["step"], "split": split,
                                                      "metric": task.metric_key, "value": best.get(task.metric_key)})
        try:
            export_savedmodel.export_from_model_dir(s.model_dir, s.export_dir, version, checkpoint=path,
                                                    extra_files={sidecar.PROVENANCE: provenance})
        except (tf.errors.NotFoundError, UserError, ValueError) as e:
            log(f"continuous eval: step {best['step']} is the best but could not be exported ({e}); next time")
            return
        log(f"continuous eval: exported step {best['step']} ({task.metric_key} {best.get(task.metric_key)}) as "
            f"version {version} of {s.export_dir}")
        sidecar.keep_newest(s.export_dir, s.exports_to_keep, log)

    done = {r["step"] for r in recorded.evaluations if r.get("split") == split} if recorded else set()
    if recorded is not None and done:
        export_best(recorded)  # a best evaluated before a kill, not yet exported
    final = s.train_steps if getattr(s, "train_steps", None) else None
    for step, path in sidecar.restored_checkpoints(model, s.model_dir, done, final, s.eval_poll_seconds,
                                                   s.eval_timeout_seconds, log):
        outputs = finetuning.predict(strategy, model, task.dataset(split, s.eval_batch_size, False), task.output_keys,
                                     passthrough=task.passthrough)
        metrics = task.metrics(split, outputs, s.model_dir)
        results = eval_results.record(s.model_dir, task.name, task.metric_key, step, metrics, split=split,
                                      checkpoint=path)
        sidecar.write_scalars(writer, split, metrics, step)
        log(f"eval {split} step {step}: {metrics}")
        export_best(results)
    final_results = eval_results.load(s.model_dir)
    return {"eval": final_results.to_dict() if final_results else None, "predict": None}
