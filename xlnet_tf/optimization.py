"""Optimizer and schedules: AdamW (original-compatible), warmup + polynomial/cosine decay, per-layer
learning-rate decay and global-norm clipping."""

from __future__ import annotations

import math
import re
from typing import Dict, Iterable, Optional

import keras
import tensorflow as tf

from xlnet_tf import checkpoints

_LAYER = re.compile(r"^model/transformer/layer_(\d+)/")
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


def variable_names(model) -> Dict[str, str]:
    """Keras `variable.path` -> original-layout name (falls back to the path for unmapped variables)."""
    names = {v.path: v.path for v in model.trainable_variables}
    for name, variable in checkpoints.model_variables(model).items():
        names[variable.path] = name
    return names


@keras.saving.register_keras_serializable(package="xlnet_tf")
class XLNetAdamW(keras.optimizers.Optimizer):
    """Adam with decoupled weight decay (`u = m / (sqrt(v) + eps) + wd * w; w -= lr * mult * u`).

    Args:
      learning_rate: float or schedule.
      weight_decay_rate: decay coefficient, applied to the variables in `decay_paths`.
      bias_correction: True is standard Adam; False reproduces the original release's
        `AdamWeightDecayOptimizer` (no bias correction).
      lr_multipliers: `{variable.path: multiplier}` (per-layer learning-rate decay); default 1.
      decay_paths: paths of the variables that get weight decay (None = all).
      global_clipnorm etc.: as `keras.optimizers.Optimizer` (clipping happens before the update).
    """

    def __init__(self, learning_rate=1e-4, weight_decay_rate: float = 0.0, beta_1: float = 0.9,
                 beta_2: float = 0.999, epsilon: float = 1e-6, bias_correction: bool = True,
                 lr_multipliers: Optional[Dict[str, float]] = None,
                 decay_paths: Optional[Iterable[str]] = None, name: str = "xlnet_adamw", **kwargs):
        super().__init__(learning_rate=learning_rate, name=name, **kwargs)
        self.weight_decay_rate = float(weight_decay_rate)
        self.beta_1 = beta_1
        self.beta_2 = beta_2
        self.epsilon = epsilon
        self.bias_correction = bias_correction
        self.lr_multipliers = dict(lr_multipliers or {})
        self.decay_paths = None if decay_paths is None else sorted(decay_paths)

    def build(self, var_list):
        if self.built:
            return
        super().build(var_list)
        self._m, self._v = self.add_optimizer_variables(var_list, ["m", "v"])
        decay = None if self.decay_paths is None else set(self.decay_paths)
        self._multiplier = [float(self.lr_multipliers.get(v.path, 1.0)) for v in var_list]
        self._decays = [self.weight_decay_rate > 0 and (decay is None or v.path in decay) for v in var_list]

    def update_step(self, gradient, variable, learning_rate):
        index = self._get_variable_index(variable)
        if isinstance(gradient, tf.IndexedSlices):
            gradient = tf.convert_to_tensor(gradient)
        dtype = variable.dtype
        gradient = tf.cast(gradient, dtype)
        lr = tf.cast(learning_rate, dtype) * self._multiplier[index]
        m, v = self._m[index], self._v[index]
        self.assign(m, self.beta_1 * m + (1.0 - self.beta_1) * gradient)
        self.assign(v, self.beta_2 * v + (1.0 - self.beta_2) * tf.square(gradient))
        m_hat, v_hat = tf.convert_to_tensor(m), tf.convert_to_tensor(v)
        if self.bias_correction:
            step = tf.cast(self.iterations + 1, dtype)
            m_hat = m_hat / (1.0 - tf.pow(tf.cast(self.beta_1, dtype), step))
            v_hat = v_hat / (1.0 - tf.pow(tf.cast(self.beta_2, dtype), step))
        update = m_hat / (tf.sqrt(v_hat) + self.epsilon)
        if self._decays[index]:
            update += self.weight_decay_rate * tf.convert_to_tensor(variable)
        self.assign_sub(variable, lr * update)

    def get_config(self):
        config = super().get_config()
        config.update(weight_decay_rate=self.weight_decay_rate, beta_1=self.beta_1, beta_2=self.beta_2,
                      epsilon=self.epsilon, bias_correction=self.bias_correction,
                      lr_multipliers=self.lr_multipliers, decay_paths=self.decay_paths)
        return config


def create_optimizer(model, *, learning_rate: float, train_steps: int, warmup_steps: int = 0,
                     min_lr_ratio: float = 0.0, decay: str = "poly", weight_decay: float = 0.0,
                     adam_epsilon: float = 1e-8, clip: Optional[float] = 1.0,
                     lr_layer_decay_rate: float = 1.0, bias_correction: bool = True) -> XLNetAdamW:
    """The optimizer of every runner, configured from the model's variable names.

    Per-layer learning-rate decay multiplies the *learning rate* of `layer_i`'s variables by
    `lr_layer_decay_rate ** (n_layer - 1 - i)` and of the embeddings by `rate ** n_layer` (the original
    scaled clipped gradients instead, which Adam's normalization mostly cancels). Weight decay follows
    the original's name rules (`uses_weight_decay`). Gradients are clipped by global norm `clip`.
    """
    model_vars = model.trainable_variables
    if not model_vars:
        raise ValueError("create_optimizer: the model has no trainable variables (build it first)")
    names = variable_names(model)
    n_layer = model.config.n_layer
    multipliers = {v.path: layer_lr_multiplier(names[v.path], n_layer, lr_layer_decay_rate)
                   for v in model_vars}
    decay_paths = [v.path for v in model_vars if uses_weight_decay(names[v.path])]
    schedule = WarmupDecaySchedule(learning_rate, train_steps, warmup_steps, min_lr_ratio, decay)
    return XLNetAdamW(schedule, weight_decay_rate=weight_decay, epsilon=adam_epsilon,
                      bias_correction=bias_correction, lr_multipliers=multipliers, decay_paths=decay_paths,
                      global_clipnorm=clip if clip and clip > 0 else None)
