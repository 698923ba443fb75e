"""One strategy-aware custom training loop for every runner: host loops of `steps_per_loop` steps,
per-replica memories carried across steps and checkpointed, automatic resume, summaries, progress."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import time
from typing import Callable, Dict, List, Optional

import numpy as np
import tensorflow as tf

from xlnet_tf import checkpoints
from xlnet_tf.artifacts import pretrain_info
from xlnet_tf.errors import UserError
from xlnet_tf.layers import precision, xla_context
from xlnet_tf.layers.native import library as native
from xlnet_tf.training import gradient_rows, optimization, xla_clustering


CLIP_MODES = ("global", "per_replica")


@dataclasses.dataclass
class TrainLoopConfig:
    """Loop settings. `save_steps` and `train_steps` must be multiples of `steps_per_loop` (checked)."""

    model_dir: str
    train_steps: int
    steps_per_loop: int = 100
    save_steps: int = 1000
    keep_checkpoints: int = 5
    # Also keep every checkpoint whose step is a multiple of this (0 = none) under model_dir/kept/, beyond
    # the `keep_checkpoints` most recent (intermediate models for "how much pretraining is enough").
    keep_checkpoint_steps: int = 0
    jit_compile: bool = False
    global_batch_size: int = 1  # examples per optimizer step (all micro-batches of all replicas)
    seq_len: int = 0  # for tokens/s in the progress line
    gradient_accumulation_steps: int = 1  # micro-batches per optimizer step
    # "global": clip the global gradient (the same update on any number of replicas); "per_replica": clip
    # each replica's share of it before the cross-replica sum, as the original's CrossShardOptimizer on
    # TPU (the effective threshold then grows with the replica count).
    clip_mode: str = "global"
    # The runners' --xla_clustering (`xla_clustering.MODES`): "fusible" when TensorFlow's auto-clustering of the
    # fusible ops is on in this process (run/common_flags.py sets it before TensorFlow loads): the loss and gradients
    # then run as TensorFlow ops (oneDNN's matmuls, XLA clusters of the rest) and, on one replica without loss
    # scaling, the clipped AdamW update as one XLA program that updates the variables in place (the auto-clusters
    # leave the variables' reads and writes out).
    xla_clustering: str = "off"

    def validate(self):
        if self.clip_mode not in CLIP_MODES:
            raise ValueError(f"--clip_mode must be one of {CLIP_MODES}, got {self.clip_mode!r}")
        xla_clustering.check(self.xla_clustering, self.jit_compile)
        if self.train_steps <= 0 or self.steps_per_loop <= 0:
            raise ValueError("--train_steps and --steps_per_loop must be positive")
        if self.gradient_accumulation_steps < 1:
            raise ValueError("--gradient_accumulation_steps must be >= 1")
        if self.save_steps <= 0 or self.save_steps % self.steps_per_loop:
            raise ValueError(f"--save_steps ({self.save_steps}) must be a positive multiple of "
                             f"--steps_per_loop ({self.steps_per_loop})")
        if self.keep_checkpoint_steps < 0 or self.keep_checkpoint_steps % self.save_steps:
            raise ValueError(f"--keep_checkpoint_steps ({self.keep_checkpoint_steps}) must be 0 or a multiple "
                             f"of --save_steps ({self.save_steps})")


def kept_checkpoint(model_dir: str, step: int) -> str:
    """Prefix of the checkpoint of `step` kept by `TrainLoopConfig.keep_checkpoint_steps`."""
    return os.path.join(model_dir, pretrain_info.KEPT_DIR, f"ckpt-{step}")


class MemoryState:
    """Per-replica Transformer-XL memories `[n_layer, B_replica, mem_len, D]` (float32), kept in
    on-read-synchronized variables so each replica reads and writes its own copy, plus a plain
    `[local replicas, ...]` variable that holds this worker's copies for checkpoints."""

    def __init__(self, strategy, n_layer: int, per_replica_batch: int, mem_len: int, d_model: int):
        self.strategy = strategy
        self.shape = [n_layer, per_replica_batch, mem_len, d_model]
        with strategy.scope():
            self.local = tf.Variable(tf.zeros(self.shape), trainable=False, name="mems",
                                     synchronization=tf.VariableSynchronization.ON_READ,
                                     aggregation=tf.VariableAggregation.ONLY_FIRST_REPLICA)
        with tf.device("/cpu:0"):  # this worker's replicas (a multi-worker run checkpoints per worker)
            self.saved = tf.Variable(tf.zeros([len(self._components())] + self.shape),
                                     trainable=False, name="mems_all_replicas")

    def read(self, dtype) -> List[tf.Tensor]:
        """Inside a replica: that replica's memories as a list of `[B, mem_len, D]` per layer."""
        return [tf.cast(m, dtype) for m in tf.unstack(self.local)]

    def write(self, new_mems):
        self.local.assign(tf.stack([tf.cast(m, tf.float32) for m in new_mems]))

    def _components(self):
        return list(getattr(self.local, "values", [self.local]))

    def stash(self):
        """Copies every replica's memories into the checkpointed variable."""
        self.saved.assign(tf.stack([tf.convert_to_tensor(v) for v in self._components()]))

    def unstash(self):
        for i, v in enumerate(self._components()):
            v.assign(self.saved[i])

    def reset(self):
        for v in self._components():
            v.assign(tf.zeros(self.shape))


def is_chief(strategy) -> bool:
    """True unless this process is a non-chief worker of a multi-worker strategy."""
    resolver = getattr(strategy, "cluster_resolver", None)
    if resolver is None or resolver.task_type is None:
        return True
    if resolver.task_type == "chief":
        return True
    has_chief = "chief" in resolver.cluster_spec().as_dict()
    return resolver.task_type == "worker" and resolver.task_id == 0 and not has_chief


def write_scalar(name: str, value: float, step: int):
    """A TensorBoard scalar written with the core summary op (TF 2.21 no longer ships tensorboard,
    whose `tf.summary.scalar` implementation this replaces; the files are what TensorBoard reads)."""
    from tensorflow.core.framework import summary_pb2

    metadata = summary_pb2.SummaryMetadata()
    metadata.plugin_data.plugin_name = "scalars"
    tf.summary.write(name, tf.constant(value, tf.float32), step=step,
                     metadata=metadata.SerializeToString())


def _format_eta(seconds: float) -> str:
    seconds = int(max(seconds, 0))
    return f"{seconds // 3600}:{seconds % 3600 // 60:02d}:{seconds % 60:02d}"


def apply_clipped_gradients(optimizer, variables, grads, loss_sum, weight, clip_mode: str = "global",
                            squares=None, fused: bool = False, copies=None):
    """The end of every training step (`Trainer` and Keras `fit` through `Task.train_step`), in a replica
    context.

    Args:
      grads: this replica's gradients of its `loss_sum` (multiplied by the loss scale under a
        `keras.optimizers.LossScaleOptimizer`).
      loss_sum, weight: this replica's loss sum and its share of the normalizer (e.g. real target
        tokens), so that the global loss is `sum(loss_sum) / sum(weight)` over the replicas.
      clip_mode: "global" clips the global gradient (all-reduced first: the same update on any number
        of replicas); "per_replica" clips each replica's share of it before the optimizer's
        cross-replica sum, as the original's CrossShardOptimizer.
    The threshold is the optimizer's `global_clipnorm` (the inner one's with loss scaling, applied at
    clip x scale to the still-scaled gradients, so the true gradient is clipped at clip; the wrapper then
    only unscales, and skips the step on a non-finite norm). The gradient is handed over divided by the
    replica count after a global clip, since the optimizer sums across replicas again.

    The division by the weight, the clip (as `tf.clip_by_global_norm`: `clip / max(norm, clip)`, NaN for a
    non-finite norm) and the division by the replica count are one scalar factor on the summed gradients,
    which XLA fuses into the optimizer's update; the norm is one reduction per gradient; and the optimizer's
    own global-norm clip (Keras's, on gradients already clipped here: a second pass over every gradient
    that changes nothing) is switched off while it applies them (`_own_clipping_off`): a faster step (the speed
    harness, bench/speed/), the same update to float32 rounding.
    `squares`: the sum of the gradients' squares, when the caller computed it (one replica only; the Trainer's
    compiled update computes it outside XLA: `squared_norm`).
    `fused`: the update as `optimization.XLNetAdamW.fused` native ops (one replica, `optimization.fusable`), which
    take the dense gradients unscaled with the factor, and write `copies` (a `precision.HalfCopies`) themselves.
    Returns `(global loss, unscaled gradient norm)` (per_replica: the norm of this replica's share).
    """
    loss_scaling = hasattr(optimizer, "inner_optimizer")
    inner = optimizer.inner_optimizer if loss_scaling else optimizer
    clip = inner.global_clipnorm
    ctx = tf.distribute.get_replica_context()
    replicas = ctx.num_replicas_in_sync if ctx is not None else 1
    per_replica = clip_mode == "per_replica" and replicas > 1
    if squares is not None and replicas > 1:
        raise ValueError("apply_clipped_gradients: squares given on several replicas (the norm is of the all-reduced "
                         "gradients)")
    if replicas > 1:
        if per_replica:
            loss_sum, weight = ctx.all_reduce(tf.distribute.ReduceOp.SUM, [loss_sum, weight])
        else:
            grads, loss_sum, weight = ctx.all_reduce(tf.distribute.ReduceOp.SUM, [grads, loss_sum, weight])
    weight = tf.maximum(tf.cast(weight, tf.float32), 1e-9)
    # the norm of the global gradient grads / weight (or of this replica's share of it)
    if squares is None:
        squares = tf.add_n([gradient_rows.sum_of_squares(g) for g in grads])
    norm = tf.sqrt(squares) / weight
    scale = tf.cast(optimizer.dynamic_scale, tf.float32) if loss_scaling else 1.0
    factor = 1.0 / weight
    if clip:
        threshold = clip * scale
        factor *= tf.where(tf.math.is_finite(norm), threshold / tf.maximum(norm, threshold), float("nan"))
    if replicas > 1 and not per_replica:
        factor /= replicas
    # a half-precision gradient (of a HalfCopies copy) in its variable's dtype before the factor touches it; fused, the
    # op scales a dense gradient (in its own dtype) as it reads it
    grads = [g if fused and not isinstance(g, tf.IndexedSlices) else gradient_rows.scaled(tf.cast(g, v.dtype), factor)
             for g, v in zip(grads, variables)]
    with _own_clipping_off(inner), inner.fused(factor, copies) if fused else contextlib.nullcontext():
        optimizer.apply_gradients(zip(grads, variables))
    return loss_sum / weight, norm / scale


# gradients from this size read by the native sum of squares; smaller ones (biases, layer norms) keep the cast and
# `L2Loss`: that cast is what XLA's auto-clustering takes in with a bias gradient's reduction (without it the reduction
# alone is below the cluster minimum and runs as TensorFlow's bfloat16 `Sum`: 13 ms per tagging step)
NATIVE_NORM_MIN = 1 << 16


def squared_norm(grads):
    """The sum of the squares of every gradient (float32), outside XLA, where a compiled update's reduction over the
    55.9 M gradients of the speed benchmark's model took ~47 ms against ~13 (XLA's CPU reductions;
    bench/speed/README.md): one native op per dtype over all the gradients of that dtype of `NATIVE_NORM_MIN` elements
    or more (`native/sum_of_squares.cc`, each bfloat16 gradient read as it is: 4.3 ms against 10.6 for 33 M of them);
    the smaller ones, and all where the ops are not built or inside an XLA program, TensorFlow's cast and `L2Loss` per
    gradient (twice `l2_loss`: exact). The two agree to float32 rounding (the native sum adds float32 blocks of 256
    squares in double); a NaN or inf anywhere, or a square beyond float32's range, makes both non-finite."""
    ops = None if xla_context.in_xla_program() else native.ops()
    terms, by_dtype = [], {}
    for g in grads:
        values = gradient_rows.squared_values(g)
        size = values.shape.num_elements() or 0
        if ops is not None and values.dtype in (tf.bfloat16, tf.float32) and size >= NATIVE_NORM_MIN:
            by_dtype.setdefault(values.dtype, []).append(values)
        else:
            terms.append(2.0 * tf.nn.l2_loss(tf.cast(values, tf.float32)))
    terms += [ops.xlnet_tf_sum_of_squares(values) for values in by_dtype.values()]
    return tf.add_n(terms)


@contextlib.contextmanager
def _own_clipping_off(optimizer):
    """`optimizer.global_clipnorm` None inside (read when its `apply` is traced), restored after: for gradients
    `apply_clipped_gradients` has clipped already."""
    saved = optimizer.global_clipnorm
    optimizer.global_clipnorm = None
    try:
        yield
    finally:
        optimizer.global_clipnorm = saved


class Trainer:
    """Runs `train_steps` optimizer steps of `loss_fn` under `strategy`.

    Args:
      strategy: from `xlnet_tf.training.distribute.get_strategy`.
      model: a built task model (created under `strategy.scope()`), with `.config`.
      optimizer: from `xlnet_tf.training.optimization.create_optimizer` (created under the scope).
      loss_fn: `loss_fn(model, features, mems, training) -> (loss_sum, weight, new_mems or None)`: the
        summed loss of the replica's batch and its weight (number of real targets or examples); the
        optimized loss is the global sum over the global weight.
      dataset_fn: `dataset_fn(input_context, skip_batches) -> tf.data.Dataset` of per-replica
        (micro-)batches, skipping the first `skip_batches` batches of each replica (`global step x
        gradient_accumulation_steps`), so a resumed run sees the batches it would have seen.
      config: `TrainLoopConfig`.
      mem_len: memory length (0 = no memories); memories start at zero and carry across steps.
      log: a callable taking one line (progress).
    """

    def __init__(self, strategy, model, optimizer, loss_fn: Callable, dataset_fn: Callable,
                 config: TrainLoopConfig, mem_len: int = 0, per_replica_batch: int = 0,
                 log: Callable[[str], None] = print):
        config.validate()
        self.strategy = strategy
        self.model = model
        self.optimizer = optimizer
        self.loss_fn = loss_fn
        self.dataset_fn = dataset_fn
        self.config = config
        self.log = log
        self.num_replicas = strategy.num_replicas_in_sync
        with strategy.scope():
            self.optimizer.build(model.trainable_variables)
            self.global_step = tf.Variable(0, dtype=tf.int64, trainable=False, name="global_step",
                                           aggregation=tf.VariableAggregation.ONLY_FIRST_REPLICA)
        c = model.config
        self.mems = (MemoryState(strategy, c.n_layer, per_replica_batch, mem_len, c.d_model)
                     if mem_len else None)
        # Keyed by position, not Keras path: paths carry per-process name counters (`seed_generator_3`),
        # positions are fixed by the model's construction order.
        tracked = {"model": checkpoints.trackable_weights(model),
                   "model_state": {f"{i:05d}": v for i, v in enumerate(model.non_trainable_variables)},
                   "optimizer": {f"{i:05d}": v for i, v in enumerate(self.optimizer.variables)},
                   "global_step": self.global_step}
        if self.mems is not None:
            tracked["mems"] = self.mems.saved
        self.checkpoint = tf.train.Checkpoint(**tracked)
        # Every worker of a multi-worker run must save (the save is collective); only the chief's
        # checkpoints land in model_dir, the others write to a private directory.
        self.chief = is_chief(strategy)
        directory = config.model_dir
        if not self.chief:
            directory = os.path.join(config.model_dir, ".workers", str(strategy.cluster_resolver.task_id))
        self.manager = tf.train.CheckpointManager(self.checkpoint, directory,
                                                  max_to_keep=config.keep_checkpoints,
                                                  checkpoint_name="ckpt")
        self.compute = tf.function(self._compute, jit_compile=config.jit_compile)
        # float16 loss scaling: a LossScaleOptimizer wrapping ours (it unscales; we clip, see
        # apply_clipped_gradients)
        self.loss_scaling = hasattr(self.optimizer, "inner_optimizer")
        # With one replica (no all-reduce, no cross-replica optimizer update) and no loss scaling, the
        # whole step - loss, gradients, clipping and the AdamW update - is one XLA cluster: faster than a
        # gradients-only cluster (the speed harness's "AdamW outside the XLA cluster" variant, bench/speed/).
        # (no all-reduce, no cross-replica update, no loss scale; a MirroredStrategy of one device still synchronizes in
        # the optimizer's update, which an XLA program cannot hold)
        alone = (self.num_replicas == 1 and not self.loss_scaling and not isinstance(
            strategy, (tf.distribute.TPUStrategy, tf.distribute.MirroredStrategy,
                       tf.distribute.MultiWorkerMirroredStrategy)))
        self.fused_step = config.jit_compile and alone
        self._step = (tf.function(self._replica_step, jit_compile=True) if self.fused_step
                      else self._replica_step)
        # --xla_clustering=fusible on one replica: the update (clipping and AdamW) as one XLA program, in place
        # (11% off the bfloat16 fine-tuning step on an AMX Xeon against the auto-clustered update:
        # bench/speed/README.md)
        self.compiled_update = config.xla_clustering == "fusible" and alone
        if config.xla_clustering == "fusible" and not alone:
            log(f"--xla_clustering={config.xla_clustering}: the update stays outside XLA (several replicas, a TPU or "
                "loss scaling); only the auto-clusters apply")
        # where the native ops are built, that update as one native op per weight instead (one pass over a weight and
        # its moments where XLA's CPU code makes three: optimization.XLNetAdamW.fused)
        self.native_update = self.compiled_update and optimization.fusable(optimizer)
        self._update = (tf.function(self._apply_update, jit_compile=True)
                        if self.compiled_update and not self.native_update else self._apply_update)
        # and under a mixed policy, the weights' half-precision copies written by that update (precision.HalfCopies):
        # no cast of a weight in the step, nor of its gradient back
        with strategy.scope():
            self.copies = (precision.HalfCopies(model, model.compute_dtype)
                           if self.compiled_update and precision.stores_half(model) else None)
        self._loop = tf.function(self._train_loop)
        self.writer = (tf.summary.create_file_writer(os.path.join(config.model_dir, "train")) if self.chief
                       else tf.summary.create_noop_writer())

    # --------------------------------------------------------------------------------------- the step
    def _compute(self, features, mems):
        """Summed loss, its weight, gradients of the sum and new memories of one replica's micro-batch
        (the XLA-compiled part). With `self.copies` the copied weights' gradients are bfloat16 (`_gradients`)."""
        # (the gradient inside the copies' scope too: a rematerialized layer reads its weights again there)
        with self.copies.reading() if self.copies is not None else contextlib.nullcontext():
            with tf.GradientTape() as tape:
                loss_sum, weight, new_mems = self.loss_fn(self.model, features, mems, True)
                scaled = self.optimizer.scale_loss(loss_sum) if hasattr(self.optimizer, "scale_loss") else loss_sum
            grads = self._gradients(tape, scaled)
        # a gathered table's gradient stays rows (gradient_rows) where the compiled update takes it: one replica, one
        # micro-batch per step
        rows_ok = self.compiled_update and self.config.gradient_accumulation_steps == 1
        grads = [tf.zeros_like(v) if g is None else g if rows_ok and isinstance(g, tf.IndexedSlices)
                 else tf.convert_to_tensor(g) for g, v in zip(grads, self.model.trainable_variables)]
        return loss_sum, tf.cast(weight, tf.float32), grads, new_mems

    def _gradients(self, tape, scaled):
        """The gradient of each trainable variable. With `self.copies`, a copied weight's is its copy's (bfloat16: the
        list is then of mixed dtypes, which the norm and the update take), cast to float32 where it is summed: with the
        variable's own (a weight also read directly) or over micro-batches."""
        variables = self.model.trainable_variables
        if self.copies is None:
            return tape.gradient(scaled, variables)
        copies = [self.copies.get(v) for v in variables]
        grads = tape.gradient(scaled, variables + [c for c in copies if c is not None])
        of_copies = iter(grads[len(variables):])
        summed = self.config.gradient_accumulation_steps > 1
        out = []
        for own, copy, variable in zip(grads, copies, variables):
            of_copy = next(of_copies) if copy is not None else None
            if of_copy is None:
                out.append(own)
            elif own is None and not summed:
                out.append(of_copy)
            else:
                of_copy = tf.cast(of_copy, variable.dtype)
                out.append(of_copy if own is None else tf.convert_to_tensor(own) + of_copy)
        return out

    def _replica_step(self, micro_batches):
        """One optimizer step over `gradient_accumulation_steps` micro-batches of this replica.

        The loss is the sum over every micro-batch of every replica divided by the total weight (e.g.
        the number of real target tokens), so replicas and accumulation give the same update as one
        device with the whole batch, even when replicas hold different numbers of targets.
        """
        grads, loss_sum, weight = None, 0.0, 0.0
        for features in micro_batches:
            mems = self.mems.read(self.model.compute_dtype) if self.mems is not None else None
            micro_loss, micro_weight, micro_grads, new_mems = self.compute(features, mems)
            if self.mems is not None:
                self.mems.write(new_mems)
            grads = micro_grads if grads is None else [a + b for a, b in zip(grads, micro_grads)]
            loss_sum += micro_loss
            weight += micro_weight
        if self.compiled_update:  # the gradient's norm outside the compiled update (squared_norm)
            return self._update(grads, loss_sum, weight, squared_norm(grads))
        return self._update(grads, loss_sum, weight)

    def _apply_update(self, grads, loss_sum, weight, squares=None):
        result = apply_clipped_gradients(self.optimizer, self.model.trainable_variables, grads, loss_sum, weight,
                                         self.config.clip_mode, squares, fused=self.native_update, copies=self.copies)
        if self.copies is not None and not self.native_update:  # after the update's writes (the function's automatic
            self.copies.refresh()  # control dependencies); the native update writes them itself
        return result

    def _train_loop(self, iterator, steps):
        loss_sum = tf.constant(0.0)
        norm_sum = tf.constant(0.0)
        accumulation = self.config.gradient_accumulation_steps
        for _ in tf.range(steps):
            micro_batches = tuple(next(iterator) for _ in range(accumulation))
            loss, norm = self.strategy.run(self._step, args=(micro_batches,))
            # every replica holds the same global values after its all-reduce
            loss_sum += self.strategy.reduce(tf.distribute.ReduceOp.MEAN, loss, axis=None)
            norm_sum += self.strategy.reduce(tf.distribute.ReduceOp.MEAN, norm, axis=None)
            self.global_step.assign_add(1)
        steps = tf.cast(steps, tf.float32)
        return loss_sum / steps, norm_sum / steps

    # --------------------------------------------------------------------------------------- the loop
    def restore(self) -> int:
        """Restores the latest checkpoint in `model_dir` (if any); returns the global step."""
        latest = self.manager.latest_checkpoint  # a non-chief worker resumes its own memories
        if latest:
            self.checkpoint.read(latest).assert_existing_objects_matched()
            if self.mems is not None:
                self.mems.unstash()
            self.log(f"Resumed from {latest} at step {int(self.global_step.numpy())}")
        return int(self.global_step.numpy())

    def save(self) -> str:
        if self.mems is not None:
            self.mems.stash()
        step = int(self.global_step.numpy())
        path = self.manager.save(checkpoint_number=step)
        every = self.config.keep_checkpoint_steps
        if every and step % every == 0:
            self.checkpoint.write(kept_checkpoint(self.manager.directory, step))
        return path

    def current_lr(self) -> float:
        lr = self.optimizer.learning_rate
        return float(lr.numpy() if hasattr(lr, "numpy") else lr)

    def train(self, on_loop_end: Optional[Callable[[int], None]] = None) -> List[Dict[str, float]]:
        """Trains to `train_steps`, resuming from `model_dir`; returns one record per host loop of this call.

        Each record is also appended to `model_dir/train_history.json` (JSON lines) as soon as its loop ends,
        so the file holds the whole run across resumes (the loops after the last checkpoint of a killed run
        appear twice: the later record is the one the final model went through)."""
        c = self.config
        start = self.restore()
        dataset = self.strategy.distribute_datasets_from_function(
            lambda ctx: self.dataset_fn(ctx, start * c.gradient_accumulation_steps))
        iterator = iter(dataset)
        history = []
        step = start
        began = time.time()
        while step < c.train_steps:
            steps = min(c.steps_per_loop, c.train_steps - step)
            t0 = time.time()
            if self.copies is not None:  # the weights may have changed since the last update (a restore, a caller)
                self.copies.refresh()
            loss, norm = self._loop(iterator, tf.constant(steps))
            loss, norm = float(loss), float(norm)
            elapsed = time.time() - t0
            step = int(self.global_step.numpy())
            if not np.isfinite(loss):
                raise FloatingPointError(f"Loss is {loss} at step {step}; stopping (last checkpoint: "
                                         f"{self.manager.latest_checkpoint})")
            examples = steps * c.global_batch_size / elapsed
            record = {"step": step, "loss": loss, "grad_norm": norm, "learning_rate": self.current_lr(),
                      "examples_per_sec": examples}
            history.append(record)
            if self.chief:  # appended as it happens: a killed run keeps what it measured
                with tf.io.gfile.GFile(os.path.join(c.model_dir, "train_history.json"), "a") as f:
                    f.write(json.dumps(record) + "\n")
            with self.writer.as_default():
                for key, value in record.items():
                    if key != "step":
                        write_scalar(key, value, step)
            eta = (c.train_steps - step) * (time.time() - began) / max(step - start, 1)
            tokens = f" {examples * c.seq_len:.0f} tokens/s" if c.seq_len else ""
            self.log(f"step {step}/{c.train_steps} loss {loss:.4f} lr {record['learning_rate']:.3e} "
                     f"grad_norm {norm:.3f} {examples:.1f} examples/s{tokens} ETA {_format_eta(eta)}")
            if step % c.save_steps == 0 or step == c.train_steps:
                self.save()
            if on_loop_end is not None:
                on_loop_end(step)
        self.writer.flush()
        return history


def plm_loss_fn(model, features, mems, training):
    """`loss_fn` of the pretrainer (either objective): the training loss (`per_slot_loss`: cross-entropy,
    plus NSP when on) summed over the real target slots, and their count."""
    out = model(features, mems=mems, training=training)
    mask = tf.cast(features["target_mask"], tf.float32)
    return tf.reduce_sum(model.per_slot_loss(features, out) * mask), tf.reduce_sum(mask), out["new_mems"]


def evaluate_plm(model, dataset, mem_len: int, max_batches: Optional[int] = None) -> Dict[str, float]:
    """Held-out permutation-LM loss and accuracy, averaged over real target tokens, memories carried
    across the batches in stream order (single device)."""
    total_loss = total_correct = total_count = 0.0
    mems = None

    @tf.function
    def step(features, mems):
        out = model(features, mems=mems, training=False)
        loss, accuracy, count = model.plm_metrics(features, out)
        return loss * count, accuracy * count, count, out["new_mems"]

    for i, features in enumerate(dataset):
        if max_batches is not None and i >= max_batches:
            break
        if mems is None and mem_len:
            batch = features["input_ids"].shape[0]
            mems = [tf.zeros([batch, mem_len, model.config.d_model], model.compute_dtype)
                    for _ in range(model.config.n_layer)]
        loss, correct, count, new_mems = step(features, mems)
        mems = new_mems if mem_len else None
        total_loss += float(loss)
        total_correct += float(correct)
        total_count += float(count)
    if total_count == 0:
        raise ValueError("evaluate_plm: the evaluation dataset yielded no target tokens")
    return {"loss": total_loss / total_count, "accuracy": total_correct / total_count,
            "num_tokens": total_count}


def micro_batch_size(train_batch_size: int, accumulation_steps: int, num_replicas: int) -> int:
    """The global batch of one forward/backward pass (`--train_batch_size / --gradient_accumulation_steps`),
    checked to split evenly over the accumulation steps and the replicas."""
    k = max(1, int(accumulation_steps or 1))
    if train_batch_size % (k * num_replicas):
        raise UserError(f"--train_batch_size={train_batch_size} must be divisible by "
                        f"--gradient_accumulation_steps={k} x {num_replicas} replicas")
    return train_batch_size // k


def dtype_policy(mixed_precision: str) -> str:
    """Keras dtype policy of `--mixed_precision` (float32 | bfloat16 | float16)."""
    return {"float32": "float32", "bfloat16": "mixed_bfloat16", "float16": "mixed_float16"}[mixed_precision]
