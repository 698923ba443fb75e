"""Our side of the benchmarks: the model sizes, the ways of running our training step (`Variant`, the first of
a list is production), and the production `training.Trainer`, built as the runners build it, whose per-batch
step function the benchmarks time (`TrainerStep`): never a copy of it. TensorFlow only: peak_rss.py's
`ours` process imports this and must not load PyTorch; harness.py imports it too.
"""

from __future__ import annotations

import dataclasses
import os
from typing import Callable, Optional

import tensorflow as tf

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))  # the repository root
# The recipes whose optimizer, clipping, loop and --jit_compile settings the benchmarked Trainers take: the CPU
# pretraining recipe (run/pretrain.py) and the CPU fine-tuning recipes of the transfer table (run_classifier.py's
# topic task, run_tagger.py's Brown part-of-speech task).
PRETRAIN_RECIPE = os.path.join(REPO, "run", "flags", "pretrain_cpu.flags")
FINETUNE_RECIPE = os.path.join(REPO, "bench", "studies", "transfer", "flags", "transfer_topic.flags")
TAGGING_RECIPE = os.path.join(REPO, "bench", "studies", "transfer", "flags", "transfer_pos_brown.flags")
# kind -> (the runner module under run/, its recipe): "plm" pretraining, "classifier" sequence classification
# (a 2-label ClassifierJob), "tagger" token classification (a TaggerJob over the 12 universal tags)
RUNNERS = {"plm": ("pretrain", PRETRAIN_RECIPE), "classifier": ("run_classifier", FINETUNE_RECIPE),
           "tagger": ("run_tagger", TAGGING_RECIPE)}


@dataclasses.dataclass(frozen=True)
class Variant:
    """One way of running our training step; the first of a list is the production path. `jit` and
    `mixed_precision` are the runners' --jit_compile and --mixed_precision; `fused_step=False` is the step the
    Trainer takes on several replicas (AdamW outside the XLA cluster of loss and gradients)."""

    name: str
    jit: bool = True
    mixed_precision: str = "float32"
    query_stream: str = "targets"
    attention: str = "production"  # a key of bench.variants.VARIANTS
    fused_step: bool = True
    summary_rows_only: bool = True  # classifier: the last layer computes only the summarized row
    # the runners' --xla_clustering; "fusible" needs the process started with its TF_XLA_FLAGS (harness.py's
    # --bfloat16_fusible restarts itself with them)
    xla_clustering: str = "off"


# What training.Trainer runs with --jit_compile on one replica: loss, gradients, clipping and AdamW in one
# XLA cluster.
PRODUCTION = Variant("production: the runners' Trainer step (XLA incl. AdamW), float32, query stream at targets "
                     "(classifier: last layer at the summarized row), positions projected once")


def bench_config(n_layer: int, d_model: int, mem_len: int = 0, n_token: int = 32000):
    from xlnet_tf.config import XLNetConfig

    return XLNetConfig(n_token=n_token, n_layer=n_layer, d_model=d_model, n_head=d_model // 64, d_head=64,
                       d_inner=4 * d_model, dropout=0.0, dropatt=0.0, mem_len=mem_len or None)


def runner_settings(kind: str, model_dir: str, batch: int, variant: Variant = PRODUCTION,
                    recipe: Optional[str] = None, extra=()):
    """The parsed flags of the runner of `kind` (`RUNNERS`: "plm" run/pretrain.py, "classifier"
    run/run_classifier.py, "tagger" run/run_tagger.py) from its recipe flag file (unless `recipe`), with the
    benchmark's batch, model_dir, `variant`'s --jit_compile, --mixed_precision and --xla_clustering, and `extra`
    flags last."""
    import importlib

    from run import common_flags

    module, default_recipe = RUNNERS[kind]
    runner = importlib.import_module(f"run.{module}")
    recipe = recipe or default_recipe
    argv = ["bench", f"--flagfile={recipe}", f"--model_dir={model_dir}", f"--train_batch_size={batch}",
            f"--jit_compile={str(variant.jit).lower()}", f"--mixed_precision={variant.mixed_precision}",
            f"--xla_clustering={variant.xla_clustering}", *extra]
    return common_flags.parse(runner.FLAGS, runner.define_flags, argv)


def production_trainer(kind: str, config, batch: int, seq_len: int, model_dir: str, variant: Variant = PRODUCTION,
                       weights=None, dataset_fn: Optional[Callable] = None, recipe: Optional[str] = None,
                       log: Callable[[str], None] = lambda line: None):
    """The `training.Trainer` of run/pretrain.py (kind "plm") or of the fine-tuning lifecycle (run/lifecycle.py)
    for a 2-label classifier built by run_classifier.ClassifierJob ("classifier") or a tagger over the 12
    universal part-of-speech tags built by run_tagger.TaggerJob ("tagger"), built with the same library calls
    from the runner's flags (`runner_settings`): strategy, seeded model, optimizer settings (AdamW, schedule,
    clipping), loop config (--jit_compile, clip mode), loss function. `config` is the model (the benchmark's
    size, shared with Hugging Face); `weights` an HF state dict (name -> array) to load; `variant` changes only
    what it names."""
    import keras

    from run import common_flags
    from xlnet_tf import checkpoints
    from xlnet_tf.training import distribute, finetuning, loop as training
    from xlnet_tf.models import XLNetPretrainer

    # --task names the classifier's head variables only: "hf" is the name Hugging Face's head loads into
    s = runner_settings(kind, model_dir, batch, variant, recipe, extra=("--task=hf",) if kind == "classifier" else ())
    strategy = distribute.get_strategy(s.strategy, s.tpu, s.num_cpu_replicas)
    dtype = training.dtype_policy(s.mixed_precision)
    keras.utils.set_random_seed(s.seed)
    with strategy.scope():
        if kind == "plm":
            model = XLNetPretrainer(config, objective=s.objective, nsp=s.nsp, dtype=dtype)
        else:
            job = finetuning_job(kind, s)
            model = job.build_model(config, dtype)
        if weights is not None:
            checkpoints.load_hf_weights(model, weights, require_heads=True)
    if kind == "plm":
        model.backbone.query_stream = variant.query_stream
    elif kind == "classifier":
        model.summary_rows_only = variant.summary_rows_only
    loop = common_flags.loop_config(s, seq_len=seq_len)
    dataset_fn = dataset_fn or _no_dataset
    if kind == "plm":  # run/pretrain.py's three calls
        with strategy.scope():
            optimizer = common_flags.optimizer_settings(s).create(model)
            if s.mixed_precision == "float16":
                optimizer = keras.optimizers.LossScaleOptimizer(optimizer)
        trainer = training.Trainer(strategy, model, optimizer, training.plm_loss_fn, dataset_fn, loop,
                                   mem_len=config.mem_len or 0,
                                   per_replica_batch=batch // strategy.num_replicas_in_sync, log=log)
    else:  # run/lifecycle.py's
        trainer = finetuning.build_optimizer_and_trainer(strategy, model, common_flags.optimizer_settings(s), loop,
                                                         s.mixed_precision, dataset_fn, log=log)
    if not variant.fused_step:
        # The Trainer's step on several replicas (or with loss scaling): the compiled loss and gradients
        # (`Trainer.compute`), then clipping and AdamW outside that XLA cluster.
        trainer.fused_step = False
        trainer._step = trainer._replica_step
    return trainer


def finetuning_job(kind: str, settings):
    """The fine-tuning runner's job of `kind` on `settings`, with the build settings its records would record:
    "classifier" a 2-label `run_classifier.ClassifierJob`, "tagger" a `run_tagger.TaggerJob` over the 12
    universal part-of-speech tags (the transfer table's Brown task, `TAGGING_RECIPE`). No records are read: the
    text settings name no SentencePiece model."""
    from xlnet_tf.artifacts.text_settings import TextSettings

    text = TextSettings(spiece_sha256="", uncased=bool(getattr(settings, "uncased", False)))
    if kind == "classifier":
        from run import run_classifier
        from tfrecords.classifier_data import ClassifierBuild

        job = run_classifier.ClassifierJob(settings)
        job.build = ClassifierBuild(text, "tsv", {}, int(settings.max_seq_length), 1, False, ("0", "1"))
    elif kind == "tagger":
        from run import run_tagger
        from tfrecords.sets.brown_pos import UNIVERSAL_TAGS
        from tfrecords.tagging_data import TaggingBuild

        job = run_tagger.TaggerJob(settings)
        job.build = TaggingBuild(text, int(settings.max_seq_length), int(settings.doc_stride), tuple(UNIVERSAL_TAGS),
                                 "universal")
    else:
        raise ValueError(f"no fine-tuning job of kind {kind!r}: classifier or tagger")
    return job


def _no_dataset(ctx, skip_batches):
    raise RuntimeError("this Trainer was built without a dataset_fn: time its step (TrainerStep), or pass one")


class TrainerStep:
    """What the training loop runs per batch: `trainer._step` (one optimizer step: with --jit_compile on one
    replica a single XLA cluster of loss, gradients, clipping and AdamW) under `strategy.run`, as
    `Trainer._train_loop` calls it; the host loop and the input pipeline are left out. `function` IS the
    Trainer's step function, so a change to the training loop's step changes what is timed. Memories are the
    Trainer's own, carried from step to step as in training.

    Call it for one step on `features` (returns the loss as NumPy, so the step has finished); `on(iterator)`
    is the same step on the iterator's next batch; `forward()` the forward pass and loss alone."""

    def __init__(self, trainer, features):
        self.trainer = trainer
        self.function = trainer._step
        self.features = features
        micro = trainer.config.gradient_accumulation_steps

        def one_step(batch):
            loss, _ = trainer.strategy.run(self.function, args=((batch,) * micro,))
            return trainer.strategy.reduce(tf.distribute.ReduceOp.MEAN, loss, axis=None)

        self._step = tf.function(one_step)
        self._from_iterator = tf.function(lambda it: one_step(next(it)))
        self._forward = None

    def __call__(self):
        return self._step(self.features).numpy()

    def on(self, iterator):
        return self._from_iterator(iterator).numpy()

    def forward(self):
        if self._forward is None:
            t = self.trainer

            def loss():
                mems = t.mems.read(t.model.compute_dtype) if t.mems is not None else None
                loss_sum, weight, _ = t.loss_fn(t.model, self.features, mems, True)
                return loss_sum / tf.cast(weight, loss_sum.dtype)

            self._forward = tf.function(loss, jit_compile=t.config.jit_compile)
        return self._forward().numpy()
