"""Weights in the compute dtype: LayerNormalization's policy (float32 variables whatever the layer's policy),
`CastOnce` (one cast per weight per layer call) and `HalfCopies` (half-precision copies of float32 weights that the
training step's update keeps, read instead of a cast).

Keras's LayerNormalization computes in float32 for half-precision inputs, reading its `gamma` and `beta` as float32:
under a mixed policy (`mixed_bfloat16`, float32 variables) they are the trained values, under a pure half policy
(`bfloat16`, half-precision variables) they would be rounded to 8 significant bits first. With this policy a pure
`bfloat16` model computes exactly what the `mixed_bfloat16` model with the same (rounded once) other weights computes:
every other weight is cast to the compute dtype where it is read either way. `serving.half_weights` exports
mixed-precision models that way.
"""

from __future__ import annotations

import contextlib
import threading

import keras
import tensorflow as tf

# a pure half-precision policy -> the mixed policy of the same compute dtype (float32 variables)
_MIXED = {"bfloat16": "mixed_bfloat16", "float16": "mixed_float16"}


def stores_half(model) -> bool:
    """Whether `model`'s (or a layer's) policy computes in a half-precision dtype from float32 variables (a mixed
    policy)."""
    policy = model.dtype_policy
    return policy.compute_dtype in _MIXED and policy.variable_dtype == "float32"


def layer_norm_policy(policy):
    """The policy for a LayerNormalization inside a layer of `policy` (a `keras.DTypePolicy` or its name): the
    mixed policy of a pure half-precision one, otherwise `policy` itself."""
    name = policy.name if isinstance(policy, keras.DTypePolicy) else policy
    return _MIXED.get(name, policy)


# per thread, the memo of each layer inside `casting_once` (id(layer) -> {id(variable): (variable, cast)}): a
# `tf.distribute.MirroredStrategy` traces its replicas in threads of their own, each on its own gradient tape, and a
# replica must never read another replica's cast
_THREAD = threading.local()


def _memos() -> dict:
    if not hasattr(_THREAD, "memos"):
        _THREAD.memos = {}
    return _THREAD.memos


class CastOnce:
    """For a Keras layer whose weights are read in its compute dtype: `_w(variable)` is the weight cast to it (or,
    inside `HalfCopies.reading`, the copy of a weight the layer owns), and
    inside `with self.casting_once():` one cast per weight however often it is read, e.g. by the two streams of an
    XLNet layer. In a mixed-precision training step each cast is an op over the whole weight, and its gradient
    another (a cast of each stream's weight gradient, then their float32 sum): 4 x 768 pretraining with separate
    casts per stream spent 53 ms of its 545 in casts (bench/speed/README.md, "Since: the gelu in float32"). One cast
    sums the streams' weight gradients in the compute dtype before the one cast back, as PyTorch's autocast does
    with its cached casts. The memo is the calling thread's."""

    def _w(self, variable):
        memo = _memos().get(id(self))
        if memo is None:
            return self._compute_dtype_weight(variable)
        held = memo.get(id(variable))
        if held is None or held[0] is not variable:  # the object kept with its cast: its id cannot be reused
            held = memo[id(variable)] = (variable, self._compute_dtype_weight(variable))
        return held[1]

    def _compute_dtype_weight(self, variable):
        """`variable` in the compute dtype: its `HalfCopies` copy where one is being read (`HalfCopies.reading`) and
        this layer owns it, else its cast."""
        copies = getattr(_THREAD, "copies", None)
        copy = copies.get(variable, self) if copies is not None else None
        return copy.value() if copy is not None else tf.cast(variable, self.compute_dtype)

    @contextlib.contextmanager
    def casting_once(self):
        """Inside (in this thread): `_w` casts each weight once (nested uses share the outer memo)."""
        memos = _memos()
        if id(self) in memos:
            yield
            return
        memos[id(self)] = {}
        try:
            yield
        finally:
            del memos[id(self)]


class HalfCopies:
    """Half-precision copies of float32 weights, for a mixed-precision training step whose update writes them.

    Under a mixed policy (`mixed_bfloat16`: float32 variables, bfloat16 compute) every weight a `CastOnce` layer reads
    is cast to bfloat16 in every step, and its gradient, computed in bfloat16, cast back to float32 before the norm
    and the update. `HalfCopies(model, dtype)` holds a `dtype` `tf.Variable` per weight of each `CastOnce` layer of
    `model` computing in `dtype` (the layer's own weights and its dense sublayers', not its LayerNormalization's,
    which reads its own in float32), created here from the weights' values. Inside `with copies.reading():` (this
    thread) `CastOnce._w` reads the copy of a weight its layer owns instead of casting it; the caller differentiates
    with respect to the copies (`get`: `trainable` variables, so a gradient tape watches them) and gets the bfloat16
    gradients the casts' gradients would have received, and its update, having changed the weights, calls `refresh`
    to write their casts. A weight read by layers that do not own it (`untie_r=False`'s attention biases, shared by
    every layer) is cast where it is read, as before: a copy read by several layers would sum their gradients in
    bfloat16, where the casts' gradients are summed in float32.

    The numbers are those of casting in the step: the same bfloat16 weights (the cast of the same float32 values),
    the same gradients (a bfloat16 -> float32 cast is exact); what moves is where the casts run: the forward pass's
    casts are gone, the gradients' become the norm's (`loop.squared_norm`) and the update reads half the bytes; the
    update then writes the copies (XLA's CPU code runs that as a pass of its own). Measured on the runners' bfloat16
    steps in bench/speed/README.md ("Since: the weights' bfloat16 copies"). Memory: two bytes per copied weight.
    The copies are no checkpoint's state: whoever changes the weights other than through the update calls `refresh`
    (the Trainer does at the start of every host loop).
    """

    def __init__(self, model, dtype):
        self.dtype = tf.as_dtype(dtype)
        self._held = {}  # id(variable) -> (variable, copy, owning layer); objects kept: their ids cannot be reused
        for layer in model._flatten_layers(include_self=True):  # Keras's walk over every nested layer
            if not isinstance(layer, CastOnce) or tf.as_dtype(layer.compute_dtype) != self.dtype:
                continue
            norms = {id(w) for sub in layer._flatten_layers(include_self=False)
                     if isinstance(sub, keras.layers.LayerNormalization) for w in sub.weights}
            for variable in layer.weights:
                if id(variable) not in norms:
                    copy = tf.Variable(tf.cast(variable, self.dtype), trainable=True,
                                       name=variable.path.replace("/", "_") + "_half")
                    self._held[id(variable)] = (variable, copy, layer)

    def get(self, variable, layer=None):
        """The copy of `variable`, or None when it has none (with `layer`: when `layer` does not own it)."""
        held = self._held.get(id(variable))
        if held is None or held[0] is not variable or (layer is not None and held[2] is not layer):
            return None
        return held[1]

    def pairs(self):
        """`(variable, copy)` for every copy."""
        return [(variable, copy) for variable, copy, _ in self._held.values()]

    def __len__(self):
        return len(self._held)

    def refresh(self):
        """Writes every copy from its variable (in a `tf.function` too)."""
        for variable, copy in self.pairs():
            copy.assign(tf.cast(variable, self.dtype))

    @contextlib.contextmanager
    def reading(self):
        """Inside (in this thread): `CastOnce._w` reads these copies."""
        saved = getattr(_THREAD, "copies", None)
        _THREAD.copies = self
        try:
            yield self
        finally:
            _THREAD.copies = saved
