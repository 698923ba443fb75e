"""The fine-tuning lifecycle, once, for every task: records -> model_dir -> model -> train -> evaluate ->
predict.

A runner (run/run_classifier.py, run_race.py, run_squad.py, run_tagger.py) is a `FineTuningJob` (what is specific
to its task: records, model, metrics, prediction file, export info) plus its flags; `run(task, settings,
config)` does the rest the same way for all of them:

Plan (nothing is written):
1. `task.plan_records()`: the records this run reads, as typed build settings (xlnet_tf.artifacts): from the raw
   data and the flags when they are given (records already in --record_dir must record the same settings, compared
   whole: every differing field named), else from the records, checked against the flags; and the splits to
   (re)build (missing, empty, or built from other input content: tfrecords/record_inputs.py).
2. The strategy; the records' vocabulary against the model (`n_token`).
3. `model_dir.check`: an existing `xlnet_config.json`/`export_info.json` must match this run (one error naming
   every differing field); `--init_checkpoint`'s recorded tokenization and architecture against the records';
   evaluating or predicting without training needs a checkpoint in the model_dir or `--init_checkpoint` (never
   random weights); an existing eval_results.json must be readable and of this task; `task.check_plan()`: the
   task's own checks (labels against the metric's scheme, ...).
4. The model (seeded), initialized from `--init_checkpoint`.
Write (only now, every check passed):
5. The stale splits are built (staged: a failed build leaves the records as they were), then `model_dir.prepare`
   writes the config and export info and removes stale `ckpt-*_temp`.
6. `--do_train`: the Trainer (resumes from the model_dir's latest checkpoint; appends train_history.json).
7. `--do_eval`: the latest (or every) checkpoint on `eval_split`, each evaluation appended to
   eval_results.json as it is measured (xlnet_tf.artifacts.results).
8. `--do_predict`: the predictions file of `predict_split` from the fine-tuned weights (the latest
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
    implement the methods. (The Keras task model itself is `xlnet_tf.models.task.Task`; the manifest's `task` is the
    record set's processor, e.g. `mrpc`; export_info's `task` names the task model family.)

    Attributes:
      name: the task kind in export_info.json and eval_results.json ("classifier", "race", "squad").
      record_kind: the kind of its record sets (tfrecords manifests' `kind`).
      metric_key: the metric that picks the best evaluation (higher is better).
      output_keys: model outputs `predict` collects.
      passthrough: features `predict` passes through (padding flags, example order, labels).
      tokens_per_example: tokens one training example feeds the model (throughput in the log).
    """

    name: str = ""
    record_kind: str = ""
    metric_key: str = "accuracy"
    output_keys: Sequence[str] = ()
    passthrough: Sequence[str] = ("example_index", "is_real_example", "label")

    def __init__(self, settings):
        self.settings = settings
        self.build: Any = None  # the records' typed build settings, from `plan_records`
        self.manifest: Dict[str, Any] = {}  # the records' manifest, read once they are written

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
        if getattr(s, "mode", "default") == "continuous_eval":
            return (self.eval_split(),)
        wanted = [("train", s.do_train), (self.eval_split(), s.do_eval), (self.predict_split(), s.do_predict)]
        return tuple(sorted({split for split, on in wanted if on}))

    # -- what each task implements ---------------------------------------------------------------------
    def plan_records(self):
        """The records this run reads (`record_inputs.RecordPlan`: typed build settings, stale splits), checked
        against the flags; writes nothing."""
        raise NotImplementedError

    def write_records(self, splits: Sequence[str], log: Callable[[str], None]) -> None:
        """Builds `splits` (the plan's stale ones) into --record_dir with the plan's settings."""
        raise NotImplementedError

    def check_plan(self) -> None:
        """The task's own checks of its flags against `self.build`, before anything is written."""

    def export_info(self) -> Dict[str, Any]:
        """Keyword arguments of `model_dir.export_info` (task settings serving needs), from the flags and
        `self.build`."""
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
    s = task.settings
    if getattr(s, "mode", "default") == "continuous_eval":
        if s.do_train or s.do_predict:
            raise UserError("--mode=continuous_eval evaluates checkpoints another process trains: leave out "
                            "--do_train and --do_predict (run the trainer with --do_train alone)")
    elif not (s.do_train or s.do_eval or s.do_predict):
        raise UserError("nothing to do: give --do_train, --do_eval and/or --do_predict")
    for name in ("record_dir", "model_dir"):
        if not getattr(s, name):
            raise UserError(f"--{name} is required")
    if s.do_train:
        from run import common_flags

        common_flags.optimizer_settings(s)  # its flag errors before any record or model_dir is written

    plan = task.plan_records()
    task.build = plan.build
    if getattr(s, "mode", "default") == "continuous_eval":
        from run import sidecar_eval

        return sidecar_eval.run(task, plan, config, log)
    return _run_planned(task, plan, config, log)


def _run_planned(task: FineTuningJob, plan, config: XLNetConfig, log: Callable[[str], None]) -> Dict[str, Any]:
    import keras

    from tfrecords import manifest as manifest_lib
    from tfrecords import records as records_lib
    from xlnet_tf import checkpoints
    from xlnet_tf.training import distribute, finetuning, loop as training
    from xlnet_tf.artifacts import model_dir, pretrain_info
    from xlnet_tf.artifacts import results as eval_results

    s = task.settings
    strategy = distribute.get_strategy(s.strategy, s.tpu, s.num_cpu_replicas)
    micro = training.micro_batch_size(s.train_batch_size, s.gradient_accumulation_steps,
                                      strategy.num_replicas_in_sync)
    records = os.path.join(s.record_dir, manifest_lib.MANIFEST_NAME)
    manifest_lib.check_vocab_size(plan.vocab_size, config.n_token, records)
    info = model_dir.export_info(**task.export_info())
    if tf_exists(os.path.join(s.model_dir, pretrain_info.RUN_NAME)):
        raise UserError(f"--model_dir={s.model_dir} holds a pretraining run ({pretrain_info.RUN_NAME}); fine-tune into "
                        f"another --model_dir, with --init_checkpoint={os.path.join(s.model_dir, 'final')}")
    model_dir.check(s.model_dir, config, info)
    if s.init_checkpoint:
        check_pretrained_weights(s.init_checkpoint, plan.build.text, config, records)
    if s.eval_checkpoint_steps:  # checked before the model_dir is touched
        if not s.do_eval:
            raise UserError("--eval_checkpoint_steps without --do_eval: nothing would evaluate them")
        if s.do_train:  # which steps a run will keep is known only once it has trained
            raise UserError("--eval_checkpoint_steps scores kept checkpoints of a trained run: give it with "
                            "--do_train=false (or use --eval_all_checkpoints while training)")
        finetuning.checkpoints_of_steps(s.model_dir, s.eval_checkpoint_steps)
    scored = [] if s.do_train else finetuning.list_checkpoints(s.model_dir)  # what an untrained run scores
    if not s.do_train and not s.init_checkpoint and not scored:
        wanted = " and ".join(f for f, on in (("--do_eval", s.do_eval), ("--do_predict", s.do_predict)) if on)
        raise UserError(f"{wanted} without --do_train: no checkpoint in --model_dir={s.model_dir} and no "
                        "--init_checkpoint (that would score random weights); train first or point --model_dir at "
                        "a trained run")
    eval_results.load_for(s.model_dir, task.name)  # evaluations are appended: a file it cannot extend stops the run now
    task.check_plan()

    keras.utils.set_random_seed(s.seed)
    with strategy.scope():
        model = task.build_model(config, training.dtype_policy(s.mixed_precision))
        model.backbone.remat = bool(getattr(s, "remat", False))
        if s.init_checkpoint and scored:  # the fine-tuned weights replace the pretrained ones before anything runs
            log(f"Not loading --init_checkpoint={s.init_checkpoint}: --do_train is off, so the checkpoints of "
                f"--model_dir={s.model_dir} are scored (latest: {os.path.basename(scored[-1])})")
        elif s.init_checkpoint:
            report = checkpoints.load_init_checkpoint(model, s.init_checkpoint)
            log(f"Initialized {len(report['loaded'])} variables from {s.init_checkpoint}; "
                f"fresh: {report['missing_heads']}")
    # every check passed: only now is anything written (the records, then the model_dir)
    for split, reason in sorted(plan.stale.items()):
        log(f"records {s.record_dir} {split}: {reason}; building")
    if plan.stale:
        task.write_records(sorted(plan.stale), log)
    task.manifest = manifest_lib.read_manifest(s.record_dir, kind=task.record_kind)
    if records_lib.recorded_build(task.manifest, type(plan.build)) != plan.build:  # a bug, not a user error
        raise RuntimeError(f"{task.manifest['_path']}: the records written differ from the plan's settings")
    model_dir.prepare(s.model_dir, config, info, log=log)
    with manifest_lib.naming_corrupt_records(task.manifest):  # a damaged record names its file
        return _train_evaluate_predict(task, strategy, model, micro, log)


def _train_evaluate_predict(task: FineTuningJob, strategy, model, micro: int, log: Callable[[str], None]
                            ) -> Dict[str, Any]:
    from xlnet_tf.training import finetuning
    from xlnet_tf.artifacts import results as eval_results

    s = task.settings

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
        latest = finetuning.list_checkpoints(s.model_dir)
        if latest:  # what a sidecar evaluator (--mode=continuous_eval) waits for
            from xlnet_tf.training import sidecar

            sidecar.write_training_done(s.model_dir, finetuning.checkpoint_step(latest[-1]))

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


def check_pretrained_weights(init_checkpoint: str, text, config: XLNetConfig, records: str) -> None:
    """`--init_checkpoint`'s recorded facts (a pretraining run's `final/` or model_dir, `pretrain_info`) against
    the records this run reads (`text`: their TextSettings, read from `records`): the same SentencePiece model,
    casing and accents, and the model's architecture. Weights that record no facts (the original release,
    Hugging Face) are taken as they are."""
    from xlnet_tf.artifacts import pretrain_info

    where = f"the records' SentencePiece model ({records})"
    facts = pretrain_info.check_final(init_checkpoint, spiece_sha256=text.spiece_sha256, spiece_flag=where,
                                      config=config.to_dict(), config_flag="this run's model config")
    if facts is None:
        return
    from xlnet_tf.artifacts import provenance

    provenance.require_same(facts.text, text, where=f"--init_checkpoint={init_checkpoint}", there="pretrained",
                            now=f"in the records ({records})", what="pretrained with other text settings",
                            remedy="rebuild the records with the pretraining's tokenization")
