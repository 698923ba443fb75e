"""Optimizer and schedules: AdamW (original-compatible), warmup + polynomial/cosine decay, per-layer
learning-rate decay and global-norm clipping.

Three Adam variants (`ADAM_VARIANTS`; `"original"` in `create_optimizer` picks the original release's):
  standard            m_hat / (sqrt(v_hat) + eps), bias-corrected (Keras / PyTorch AdamW; the default).
  no_bias_correction  m / (sqrt(v) + eps): the original's `AdamWeightDecayOptimizer` (BERT's), which the
                      original uses whenever `weight_decay > 0`.
  tf1                 lr * sqrt(1 - b2^t) / (1 - b1^t) * m / (sqrt(v) + eps): TF1's `AdamOptimizer`, the
                      original's choice when `weight_decay == 0` (epsilon added before bias correction,
                      i.e. an effective epsilon of eps / sqrt(1 - b2^t)).
Decoupled weight decay adds `wd * w` to the update (times the learning rate, not the TF1 bias factor).

Two per-layer decay modes (`LAYER_DECAY_MODES`) for `lr_layer_decay_rate`:
  learning_rate  multiplies the learning rate of `layer_i` by `rate^(n_layer-1-i)` and of the embeddings by
                 `rate^n_layer` (a true per-layer step size; the default).
  gradient       the original: multiplies the *clipped gradients* of variables under
                 `model/transformer/layer_i/` by `rate^(n_layer-1-i)`; everything else (embeddings,
                 `mask_emb`, the stacked `r_*_bias` / `seg_embed`, heads) keeps factor 1. Under Adam this
                 acts mostly through epsilon.
"""

from __future__ import annotations

import contextlib
import dataclasses

import math
import re
from typing import Dict, Iterable, Optional

import keras
import tensorflow as tf

from xlnet_tf import checkpoints
from xlnet_tf.layers import xla_context
from xlnet_tf.layers.native import library as native
from xlnet_tf.training import gradient_rows

_LAYER = re.compile(r"^model/transformer/layer_(\d+)/")
# Per-layer names we give to slices of variables the original stores stacked `[n_layer, ...]` directly
# under model/transformer/ (checkpoints.py): not under layer_i in the original.
_STACKED = re.compile(r"^model/transformer/layer_\d+/rel_attn/(r_w_bias|r_r_bias|r_s_bias|seg_embed)$")
ADAM_VARIANTS = ("standard", "no_bias_correction", "tf1")
_VARIANT_CODES = {"standard": 0, "tf1": 1, "no_bias_correction": 2}  # layers/native/adamw.cc: adam_variant
LAYER_DECAY_MODES = ("learning_rate", "gradient")
_EMBEDDING = re.compile(r"^model/transformer/(word_embedding|mask_emb)/")
# The original's AdamWeightDecayOptimizer: include list checked first, then the exclusions.
_DECAY_INCLUDE = ("r_s_bias", "r_r_bias", "r_w_bias")
_DECAY_EXCLUDE = ("LayerNorm", "layer_norm", "bias")


@keras.saving.register_keras_serializable(package="xlnet_tf")
class WarmupDecaySchedule(keras.optimizers.schedules.LearningRateSchedule):
    """The original `get_train_op` schedule.

    `lr(step) = lr * step / warmup_steps` for `step < warmup_steps` (0 at step 0), then `poly`:
    polynomial decay (power `power`) from `lr` to `lr * min_lr_ratio` at `train_steps`, or `cos`: cosine
    decay to `lr * min_lr_ratio`; constant after `train_steps`.
    """

    def __init__(self, learning_rate: float, train_steps: int, warmup_steps: int = 0,
                 min_lr_ratio: float = 0.0, decay: str = "poly", power: float = 1.0):
        if decay not in ("poly", "cos"):
            raise ValueError(f"decay must be 'poly' or 'cos', got {decay!r}")
        if train_steps <= 0 or warmup_steps < 0 or warmup_steps > train_steps:
            raise ValueError(f"Need 0 <= warmup_steps ({warmup_steps}) <= train_steps ({train_steps}), "
                             f"train_steps > 0")
        self.learning_rate = float(learning_rate)
        self.train_steps = int(train_steps)
        self.warmup_steps = int(warmup_steps)
        self.min_lr_ratio = float(min_lr_ratio)
        self.decay = decay
        self.power = float(power)

    def __call__(self, step):
        step = tf.cast(step, tf.float32)
        lr = self.learning_rate
        decay_steps = float(max(self.train_steps - self.warmup_steps, 1))
        progress = tf.clip_by_value((step - self.warmup_steps) / decay_steps, 0.0, 1.0)
        end = lr * self.min_lr_ratio
        if self.decay == "poly":
            decayed = end + (lr - end) * tf.pow(1.0 - progress, self.power)
        else:
            decayed = lr * ((1.0 - self.min_lr_ratio) * 0.5 * (1.0 + tf.cos(math.pi * progress))
                            + self.min_lr_ratio)
        if self.warmup_steps == 0:
            return decayed
        return tf.where(step < self.warmup_steps, lr * step / self.warmup_steps, decayed)

    def get_config(self):
        return dict(learning_rate=self.learning_rate, train_steps=self.train_steps,
                    warmup_steps=self.warmup_steps, min_lr_ratio=self.min_lr_ratio, decay=self.decay,
                    power=self.power)


def uses_weight_decay(name: str) -> bool:
    """The original's rule: r_*_bias decay; LayerNorm parameters and other biases do not."""
    if any(key in name for key in _DECAY_INCLUDE):
        return True
    return not any(key in name for key in _DECAY_EXCLUDE)


def layer_lr_multiplier(name: str, n_layer: int, rate: float) -> float:
    """`rate ** (n_layer - 1 - i)` for `layer_i`, `rate ** n_layer` for the embeddings (below layer 0),
    1 for everything else (heads, shared biases)."""
    if rate == 1.0:
        return 1.0
    m = _LAYER.match(name)
    if m:
        return rate ** (n_layer - 1 - int(m.group(1)))
    if _EMBEDDING.match(name):
        return rate ** n_layer
    return 1.0


def layer_gradient_multiplier(name: str, n_layer: int, rate: float) -> float:
    """The original's factor on the clipped gradient: `rate ** (n_layer - 1 - i)` for variables under
    `model/transformer/layer_i/` in the original layout, 1 for everything else."""
    if rate == 1.0 or _STACKED.match(name):
        return 1.0
    m = _LAYER.match(name)
    return rate ** (n_layer - 1 - int(m.group(1))) if m else 1.0


def variable_names(model) -> Dict[str, str]:
    """Keras `variable.path` -> original-layout name (falls back to the path for unmapped variables)."""
    names = {v.path: v.path for v in model.trainable_variables}
    for name, variable in checkpoints.model_variables(model).items():
        names[variable.path] = name
    return names


@keras.saving.register_keras_serializable(package="xlnet_tf")
class XLNetAdamW(keras.optimizers.Optimizer):
    """Adam with decoupled weight decay, in the variants of the module docstring.

    Args:
      learning_rate: float or schedule.
      weight_decay_rate: decay coefficient, applied to the variables in `decay_paths`.
      adam_variant: `"standard"`, `"no_bias_correction"` (the original's `AdamWeightDecayOptimizer`) or
        `"tf1"` (TF1 `AdamOptimizer`).
      lr_multipliers: `{variable.path: multiplier}` on the learning rate (per-layer decay, mode
        `learning_rate`); default 1.
      grad_multipliers: `{variable.path: multiplier}` on the (already clipped) gradient before the moments
        (per-layer decay, mode `gradient`, as the original); default 1.
      decay_paths: paths of the variables that get weight decay (None = all).
      global_clipnorm etc.: as `keras.optimizers.Optimizer` (clipping happens before the update).
    """

    def __init__(self, learning_rate=1e-4, weight_decay_rate: float = 0.0, beta_1: float = 0.9,
                 beta_2: float = 0.999, epsilon: float = 1e-6, adam_variant: str = "standard",
                 lr_multipliers: Optional[Dict[str, float]] = None,
                 grad_multipliers: Optional[Dict[str, float]] = None,
                 decay_paths: Optional[Iterable[str]] = None, name: str = "xlnet_adamw", **kwargs):
        super().__init__(learning_rate=learning_rate, name=name, **kwargs)
        if adam_variant not in ADAM_VARIANTS:
            raise ValueError(f"adam_variant must be one of {ADAM_VARIANTS}, got {adam_variant!r}")
        self.weight_decay_rate = float(weight_decay_rate)
        self.beta_1 = beta_1
        self.beta_2 = beta_2
        self.epsilon = epsilon
        self.adam_variant = adam_variant
        self.lr_multipliers = dict(lr_multipliers or {})
        self.grad_multipliers = dict(grad_multipliers or {})
        self.decay_paths = None if decay_paths is None else sorted(decay_paths)

    def build(self, var_list):
        if self.built:
            return
        super().build(var_list)
        self._m, self._v = self.add_optimizer_variables(var_list, ["m", "v"])
        decay = None if self.decay_paths is None else set(self.decay_paths)
        self._multiplier = [float(self.lr_multipliers.get(v.path, 1.0)) for v in var_list]
        self._grad_multiplier = [float(self.grad_multipliers.get(v.path, 1.0)) for v in var_list]
        self._decays = [self.weight_decay_rate > 0 and (decay is None or v.path in decay) for v in var_list]

    @contextlib.contextmanager
    def fused(self, factor, copies=None):
        """Inside (while `apply_gradients` is traced): each weight's update is one native op over its elements
        (`layers/native/adamw.cc`: the numbers of `update_step`'s TensorFlow ops, in one pass instead of XLA's three),
        which multiplies the dense gradients by `factor` itself (hand them over unscaled; a gathered table's
        `IndexedSlices` already scaled) and writes each weight's bfloat16 copy (`copies.get(variable)`, a
        `precision.HalfCopies`) after it. Only where `native.ops()` is available, outside an XLA program."""
        saved = getattr(self, "_fused", None)
        self._fused = (factor, copies)
        try:
            yield
        finally:
            self._fused = saved

    def update_step(self, gradient, variable, learning_rate):
        index = self._get_variable_index(variable)
        if getattr(self, "_fused", None) is not None:
            return self._fused_step(gradient, variable, learning_rate, index)
        dtype = variable.dtype
        lr = tf.cast(learning_rate, dtype) * self._multiplier[index]
        m, v = self._m[index], self._v[index]
        if isinstance(gradient, tf.IndexedSlices):  # rows of a gathered table: m and v decayed densely, the rows'
            indices, rows = gradient_rows.summed_rows(gradient)  # terms added where they are (gradient_rows)
            rows = tf.cast(rows, dtype)
            if self._grad_multiplier[index] != 1.0:
                rows = rows * self._grad_multiplier[index]
            self.assign(m, self.beta_1 * m)
            self.assign_add(m, tf.IndexedSlices((1.0 - self.beta_1) * rows, indices))
            self.assign(v, self.beta_2 * v)
            self.assign_add(v, tf.IndexedSlices((1.0 - self.beta_2) * tf.square(rows), indices))
        else:
            gradient = tf.cast(gradient, dtype)
            if self._grad_multiplier[index] != 1.0:
                gradient = gradient * self._grad_multiplier[index]
            self.assign(m, self.beta_1 * m + (1.0 - self.beta_1) * gradient)
            self.assign(v, self.beta_2 * v + (1.0 - self.beta_2) * tf.square(gradient))
        m_t, v_t = tf.convert_to_tensor(m), tf.convert_to_tensor(v)
        step = tf.cast(self.iterations + 1, dtype)
        correction_1 = 1.0 - tf.pow(tf.cast(self.beta_1, dtype), step)
        correction_2 = 1.0 - tf.pow(tf.cast(self.beta_2, dtype), step)
        if self.adam_variant == "standard":
            update = (m_t / correction_1) / (tf.sqrt(v_t / correction_2) + self.epsilon)
        elif self.adam_variant == "tf1":
            update = (tf.sqrt(correction_2) / correction_1) * m_t / (tf.sqrt(v_t) + self.epsilon)
        else:
            update = m_t / (tf.sqrt(v_t) + self.epsilon)
        if self._decays[index]:
            update += self.weight_decay_rate * tf.convert_to_tensor(variable)
        self.assign_sub(variable, lr * update)

    def _fused_step(self, gradient, variable, learning_rate, index):
        """`update_step` as one native op (`fused`), its scalars computed by the same TensorFlow ops."""
        if xla_context.in_xla_program():  # no XLA kernel; and the plain update would take the gradients unscaled
            raise RuntimeError("XLNetAdamW.fused: inside an XLA program (jit_compile); apply the gradients without it")
        factor, copies = self._fused
        lr = tf.cast(learning_rate, tf.float32) * self._multiplier[index]
        step = tf.cast(self.iterations + 1, tf.float32)
        correction_1 = 1.0 - tf.pow(tf.cast(self.beta_1, tf.float32), step)
        correction_2 = 1.0 - tf.pow(tf.cast(self.beta_2, tf.float32), step)
        # (the variable as built: apply_gradients may hand update_step another object for it)
        copy = copies.get(self._trainable_variables[index]) if copies is not None else None
        attrs = dict(beta_1=self.beta_1, one_minus_beta_1=1.0 - self.beta_1, beta_2=self.beta_2,
                     one_minus_beta_2=1.0 - self.beta_2, epsilon=self.epsilon,
                     weight_decay=self.weight_decay_rate if self._decays[index] else 0.0,
                     grad_multiplier=self._grad_multiplier[index], adam_variant=_VARIANT_CODES[self.adam_variant])
        handles = [_handle(variable), _handle(self._m[index]), _handle(self._v[index])]
        scalars = [lr, correction_1, correction_2]
        copy_handles = [] if copy is None else [copy.handle]
        ops = native.ops()
        if isinstance(gradient, tf.IndexedSlices):  # scaled already: sum, then the op (factor 1)
            indices, rows = gradient_rows.summed_rows(gradient)
            return ops.xlnet_tf_adam_w_rows(*handles, indices, tf.cast(rows, tf.float32), 1.0, *scalars,
                                            copy=copy_handles, **attrs)
        return ops.xlnet_tf_adam_w(*handles, gradient, tf.cast(factor, tf.float32), *scalars, copy=copy_handles,
                                   **attrs)

    def get_config(self):
        config = super().get_config()
        config.update(weight_decay_rate=self.weight_decay_rate, beta_1=self.beta_1, beta_2=self.beta_2,
                      epsilon=self.epsilon, adam_variant=self.adam_variant,
                      lr_multipliers=self.lr_multipliers, grad_multipliers=self.grad_multipliers,
                      decay_paths=self.decay_paths)
        return config


def _handle(variable):
    """The resource handle of a Keras (or TensorFlow) variable."""
    return variable.value.handle if hasattr(variable, "value") and hasattr(variable.value, "handle") else variable.handle


def fusable(optimizer) -> bool:
    """Whether `optimizer` can take `XLNetAdamW.fused` in this process (the native ops built and loaded), and none of
    Keras's own gradient treatments is set (`clipnorm`, `clipvalue`, EMA, Keras's gradient accumulation,
    `loss_scale_factor`): they would
    act on the gradients `fused` takes before their clip factor."""
    if not isinstance(optimizer, XLNetAdamW):
        return False
    if (optimizer.clipnorm is not None or optimizer.clipvalue is not None or optimizer.use_ema
            or getattr(optimizer, "gradient_accumulation_steps", None)
            or getattr(optimizer, "loss_scale_factor", None) is not None):
        return False
    return native.ops() is not None


def resolve_adam_variant(adam_variant: str, weight_decay: float) -> str:
    """`"original"` -> the original release's choice: `no_bias_correction` (its AdamWeightDecayOptimizer)
    when `weight_decay > 0`, else `tf1` (TF1 AdamOptimizer); other names pass through (validated)."""
    if adam_variant == "original":
        return "no_bias_correction" if weight_decay > 0 else "tf1"
    if adam_variant not in ADAM_VARIANTS:
        raise ValueError(f"adam_variant must be 'original' or one of {ADAM_VARIANTS}, got {adam_variant!r}")
    return adam_variant


@dataclasses.dataclass(frozen=True)
class OptimizerSettings:
    """The optimizer of a run, as `create_optimizer` takes it (the runners build it from their optimizer flags,
    run/common_flags.optimizer_settings): peak `learning_rate`, `train_steps` of the schedule, linear warm-up
    from 0 over `warmup_steps`, then `decay` ("poly" | "cos") to `min_lr_ratio` of the peak; decoupled
    `weight_decay`; `adam_epsilon`; global-norm `clip` (0 / None = off); per-layer decay `lr_layer_decay_rate`
    in mode `lr_layer_decay_mode`; `adam_variant` (`ADAM_VARIANTS` or "original")."""

    learning_rate: float
    train_steps: int
    warmup_steps: int = 0
    min_lr_ratio: float = 0.0
    decay: str = "poly"
    weight_decay: float = 0.0
    adam_epsilon: float = 1e-8
    clip: Optional[float] = 1.0
    lr_layer_decay_rate: float = 1.0
    lr_layer_decay_mode: str = "learning_rate"
    adam_variant: str = "standard"

    def create(self, model) -> "XLNetAdamW":
        """`create_optimizer(model, ...)` with these settings."""
        return create_optimizer(model, **dataclasses.asdict(self))


def create_optimizer(model, *, learning_rate: float, train_steps: int, warmup_steps: int = 0,
                     min_lr_ratio: float = 0.0, decay: str = "poly", weight_decay: float = 0.0,
                     adam_epsilon: float = 1e-8, clip: Optional[float] = 1.0,
                     lr_layer_decay_rate: float = 1.0, lr_layer_decay_mode: str = "learning_rate",
                     adam_variant: str = "standard") -> XLNetAdamW:
    """The optimizer of every runner, configured from the model's variable names.

    Per-layer decay (`lr_layer_decay_rate`, mode `lr_layer_decay_mode`, see the module docstring):
    `learning_rate` scales the learning rate of `layer_i` and the embeddings; `gradient` reproduces the
    original (clipped gradients of `layer_i` only). `adam_variant`: a name of `ADAM_VARIANTS` or
    `"original"` (see `resolve_adam_variant`). Weight decay follows the original's name rules
    (`uses_weight_decay`). Gradients are clipped by global norm `clip` (the `Trainer` clips globally or
    per replica, see `training.CLIP_MODES`).
    """
    if lr_layer_decay_mode not in LAYER_DECAY_MODES:
        raise ValueError(f"lr_layer_decay_mode must be one of {LAYER_DECAY_MODES}, got {lr_layer_decay_mode!r}")
    adam_variant = resolve_adam_variant(adam_variant, weight_decay)
    model_vars = model.trainable_variables
    if not model_vars:
        raise ValueError("create_optimizer: the model has no trainable variables (build it first)")
    names = variable_names(model)
    n_layer = model.config.n_layer
    lr_mult, grad_mult = {}, {}
    for v in model_vars:
        if lr_layer_decay_mode == "learning_rate":
            lr_mult[v.path] = layer_lr_multiplier(names[v.path], n_layer, lr_layer_decay_rate)
        else:
            grad_mult[v.path] = layer_gradient_multiplier(names[v.path], n_layer, lr_layer_decay_rate)
    decay_paths = [v.path for v in model_vars if uses_weight_decay(names[v.path])]
    schedule = WarmupDecaySchedule(learning_rate, train_steps, warmup_steps, min_lr_ratio, decay)
    return XLNetAdamW(schedule, weight_decay_rate=weight_decay, epsilon=adam_epsilon,
                      adam_variant=adam_variant, lr_multipliers=lr_mult, grad_multipliers=grad_mult,
                      decay_paths=decay_paths, global_clipnorm=clip if clip and clip > 0 else None)
