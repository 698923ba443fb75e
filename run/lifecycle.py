"""The fine-tuning lifecycle, once, for every task: records -> model_dir -> model -> train -> evaluate ->
predict.

A runner (run/run_classifier.py, run_race.py, run_squad.py) is a `FineTuningJob` (what is specific to
its task: records, model, metrics, prediction file, export info) plus its flags; `run(task, settings,
config)` does the rest the same way for all of them:

1. `task.prepare_records()`: build the splits this run needs that are missing, empty, or whose input files
   changed (content fingerprints, see tfrecords/record_inputs.py), then read the manifest.
2. The strategy; the records' vocabulary checked against the model (`n_token`).
3. `model_dir.check`: an existing `xlnet_config.json`/`export_info.json` must match this run (else one
   error naming every differing field, nothing written); evaluating or predicting without training needs a
   checkpoint in the model_dir or `--init_checkpoint` (never random weights).
4. The model (seeded), initialized from `--init_checkpoint`; only then `model_dir.prepare` writes the config
   and export info (a run refused or failed before this point leaves the model_dir as it was) and removes
   stale `ckpt-*_temp`.
5. `--do_train`: the Trainer (resumes from the model_dir's latest checkpoint; appends train_history.json).
6. `--do_eval`: the latest (or every) checkpoint on `eval_split`, each evaluation appended to
   eval_results.json as it is measured (xlnet_tf.results).
7. `--do_predict`: the predictions file of `predict_split` from the fine-tuned weights (the latest
   checkpoint when not training; an error, not random weights, when there is none and no init checkpoint).

`settings` is any object with the runner flags as attributes (an absl `FlagValues`, a namespace): the
strategy, loop, optimizer and fine-tuning flags of run/common_flags.py.
"""

from __future__ import annotations

import os
from typing import Any, Callable, Dict, Optional, Sequence, Tuple

from xlnet_tf.config import XLNetConfig
from xlnet_tf.errors import UserError

Outputs = Dict[str, Any]  # numpy arrays from finetuning.predict: the model's outputs + passthrough features


class FineTuningJob:
    """One fine-tuning task's definition for the run lifecycle (records -> model_dir -> train -> eval ->
    predict): which records, which Keras task model, which metrics. Subclasses set the class attributes and
    implement the methods. (The Keras task model itself is `xlnet_tf.task.Task`; the manifest's `task` is the
    record set's processor, e.g. `mrpc`; export_info's `task` names the task model family.)

    Attributes:
      name: the task kind in export_info.json and eval_results.json ("classifier", "race", "squad").
      metric_key: the metric that picks the best evaluation (higher is better).
      output_keys: model outputs `predict` collects.
      passthrough: features `predict` passes through (padding flags, example order, labels).
      tokens_per_example: tokens one training example feeds the model (throughput in the log).
    """

    name: str = ""
    metric_key: str = "accuracy"
    output_keys: Sequence[str] = ()
    passthrough: Sequence[str] = ("example_index", "is_real_example", "label")

    def __init__(self, settings):
        self.settings = settings
        self.manifest: Dict[str, Any] = {}

    @property
    def tokens_per_example(self) -> int:
        return int(self.settings.max_seq_length)

    # -- the splits this run reads -------------------------------------------------------------------
    def eval_split(self) -> str:
        return self.settings.eval_split

    def predict_split(self) -> str:
        return self.settings.predict_split

    def needed_splits(self) -> Tuple[str, ...]:
        s = self.settings
        wanted = [("train", s.do_train), (self.eval_split(), s.do_eval), (self.predict_split(), s.do_predict)]
        return tuple(sorted({split for split, on in wanted if on}))

    # -- what each task implements ---------------------------------------------------------------------
    def prepare_records(self, log: Callable[[str], None]) -> Dict[str, Any]:
        """Builds what `needed_splits` lacks (or what changed) and returns the records' manifest."""
        raise NotImplementedError

    def export_info(self) -> Dict[str, Any]:
        """Keyword arguments of `model_dir.export_info` (task settings serving needs)."""
        raise NotImplementedError

    def build_model(self, config: XLNetConfig, dtype: str):
        raise NotImplementedError

    def dataset(self, split: str, batch_size: int, training: bool, input_context=None):
        """Batches of `split` (static shapes); training: shuffled with the seed, repeated, sharded."""
        raise NotImplementedError

    def metrics(self, split: str, outputs: Outputs, model_dir: str) -> Dict[str, Any]:
        """The evaluation of `outputs` of `split` (a flat metric -> value mapping)."""
        raise NotImplementedError

    def write_predictions(self, split: str, outputs: Outputs, model_dir: str, log: Callable[[str], None]
                          ) -> Optional[Dict[str, Any]]:
        """Writes the prediction file(s) of `split` into `model_dir`; returns metrics when the split's
        answers are known and scoring comes with predicting (SQuAD), else None."""
        raise NotImplementedError


def _log(line: str) -> None:
    print(line, flush=True)


def run(task: FineTuningJob, config: XLNetConfig, log: Callable[[str], None] = _log) -> Dict[str, Any]:
    """Runs the lifecycle of `task` with the model `config`; returns {"eval": eval_results content or None,
    "predict": metrics of predicting or None}."""
    from tfrecords import manifest as manifest_lib

    s = task.settings
    if not (s.do_train or s.do_eval or s.do_predict):
        raise UserError("nothing to do: give --do_train, --do_eval and/or --do_predict")
    for name in ("record_dir", "model_dir"):
        if not getattr(s, name):
            raise UserError(f"--{name} is required")
    if s.do_train:
        from run import common_flags

        common_flags.optimizer_settings(s)  # its flag errors before any record or model_dir is written

    task.manifest = task.prepare_records(log)
    with manifest_lib.naming_corrupt_records(task.manifest):  # a damaged record names its file
        return _run_on_records(task, config, log)


def _run_on_records(task: FineTuningJob, config: XLNetConfig, log: Callable[[str], None]) -> Dict[str, Any]:
    import keras

    from tfrecords import manifest as manifest_lib
    from xlnet_tf import checkpoints, distribute, finetuning, model_dir, pretrain_info, training
    from xlnet_tf import results as eval_results

    s = task.settings
    strategy = distribute.get_strategy(s.strategy, s.tpu, s.num_cpu_replicas)
    micro = training.micro_batch_size(s.train_batch_size, s.gradient_accumulation_steps,
                                      strategy.num_replicas_in_sync)
    manifest_lib.check_vocab(task.manifest, config.n_token)
    info = model_dir.export_info(**task.export_info())
    if tf_exists(os.path.join(s.model_dir, pretrain_info.RUN_NAME)):
        raise UserError(f"--model_dir={s.model_dir} holds a pretraining run ({pretrain_info.RUN_NAME}); fine-tune into "
                        f"another --model_dir, with --init_checkpoint={os.path.join(s.model_dir, 'final')}")
    model_dir.check(s.model_dir, config, info)
    if s.init_checkpoint:
        check_pretrained_weights(s.init_checkpoint, task.manifest, config)
    if s.eval_checkpoint_steps:  # checked before the model_dir is touched
        if not s.do_eval:
            raise UserError("--eval_checkpoint_steps without --do_eval: nothing would evaluate them")
        if s.do_train:  # which steps a run will keep is known only once it has trained
            raise UserError("--eval_checkpoint_steps scores kept checkpoints of a trained run: give it with "
                            "--do_train=false (or use --eval_all_checkpoints while training)")
        finetuning.checkpoints_of_steps(s.model_dir, s.eval_checkpoint_steps)
    if not s.do_train and not s.init_checkpoint and not finetuning.list_checkpoints(s.model_dir):
        wanted = " and ".join(f for f, on in (("--do_eval", s.do_eval), ("--do_predict", s.do_predict)) if on)
        raise UserError(f"{wanted} without --do_train: no checkpoint in --model_dir={s.model_dir} and no "
                        "--init_checkpoint (that would score random weights); train first or point --model_dir at "
                        "a trained run")

    keras.utils.set_random_seed(s.seed)
    with strategy.scope():
        model = task.build_model(config, training.dtype_policy(s.mixed_precision))
        model.backbone.remat = bool(getattr(s, "remat", False))
        if s.init_checkpoint:
            report = checkpoints.load_init_checkpoint(model, s.init_checkpoint)
            log(f"Initialized {len(report['loaded'])} variables from {s.init_checkpoint}; "
                f"fresh: {report['missing_heads']}")
    # the run is known to proceed: only now is anything written into the model_dir
    model_dir.prepare(s.model_dir, config, info, log=log)

    if s.do_train:
        def train_dataset_fn(ctx, skip_batches):
            return task.dataset("train", ctx.get_per_replica_batch_size(micro), True,
                                input_context=ctx).skip(skip_batches)

        from run import common_flags

        trainer = finetuning.build_optimizer_and_trainer(
            strategy, model, common_flags.optimizer_settings(s),
            common_flags.loop_config(s, seq_len=task.tokens_per_example), s.mixed_precision, train_dataset_fn,
            log=log)
        log(f"Training: the step ({task.tokens_per_example} tokens per example) is traced and compiled first; "
            f"the first progress line follows its first loop of {s.steps_per_loop} step(s)")
        trainer.train()

    def outputs_of(split: str, batch_size: int) -> Outputs:
        return finetuning.predict(strategy, model, task.dataset(split, batch_size, False), task.output_keys,
                                  passthrough=task.passthrough)

    done: Dict[str, Any] = {"eval": None, "predict": None}
    if s.do_eval:
        split = task.eval_split()

        def evaluate(step: int) -> Dict[str, Any]:
            result = task.metrics(split, outputs_of(split, s.eval_batch_size), s.model_dir)
            log(f"eval {split} step {step}: {result}")
            return result

        done["eval"] = finetuning.evaluate_checkpoints(model, s.model_dir, evaluate, s.eval_all_checkpoints,
                                                       task.metric_key, task=task.name, split=split,
                                                       steps=s.eval_checkpoint_steps)
        best = done["eval"]["best"][split]
        log(f"best {task.metric_key} on {split}: {best.get(task.metric_key)} at step {best['step']}")

    if s.do_predict:
        split = task.predict_split()
        checkpoint = None
        if not s.do_train:  # the original predicted with the pretrained weights here (#56)
            checkpoint = finetuning.restore_latest_weights(model, s.model_dir)  # or --init_checkpoint's (checked)
        latest = finetuning.list_checkpoints(s.model_dir)
        checkpoint = latest[-1] if latest else s.init_checkpoint
        scored = task.write_predictions(split, outputs_of(split, s.predict_batch_size), s.model_dir, log)
        if scored is not None and not (s.do_eval and split == task.eval_split()):
            step = finetuning.checkpoint_step(latest[-1]) if latest else 0
            eval_results.record(s.model_dir, task.name, task.metric_key, step, scored, split=split,
                                checkpoint=checkpoint)
        done["predict"] = scored
    return done


def tf_exists(path: str) -> bool:
    import tensorflow as tf

    return tf.io.gfile.exists(path)


def check_pretrained_weights(init_checkpoint: str, manifest: Dict[str, Any], config: XLNetConfig) -> None:
    """`--init_checkpoint`'s recorded facts (a pretraining run's `final/` or model_dir, `pretrain_info`) against
    the records this run reads: the same SentencePiece model, casing and accents, and the model's architecture.
    Weights that record no facts (the original release, Hugging Face) are taken as they are."""
    from xlnet_tf import pretrain_info

    where = f"the records' SentencePiece model ({manifest.get('_path', 'manifest.json')})"
    facts = pretrain_info.check_final(init_checkpoint, spiece_sha256=manifest.get("spiece_model_sha256"),
                                      spiece_flag=where, config=config.to_dict(), config_flag="this run's model config")
    if facts is None:
        return
    for field in ("uncased", "keep_accents"):
        if field in manifest and bool(manifest[field]) != bool(getattr(facts, field)):
            raise UserError(f"--init_checkpoint={init_checkpoint} was pretrained with {field}="
                            f"{getattr(facts, field)} but the records ({manifest.get('_path', 'manifest.json')}) were "
                            f"built with {field}={manifest[field]}: rebuild the records with the pretraining's "
                            "tokenization")
