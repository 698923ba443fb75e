"""Weights in the compute dtype: LayerNormalization's policy (float32 variables whatever the layer's policy), and
`CastOnce` (one cast per weight per layer call).

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
    """For a Keras layer whose weights are read in its compute dtype: `_w(variable)` is the weight cast to it, and
    inside `with self.casting_once():` one cast per weight however often it is read, e.g. by the two streams of an
    XLNet layer. In a mixed-precision training step each cast is an op over the whole weight, and its gradient
    another (a cast of each stream's weight gradient, then their float32 sum): 4 x 768 pretraining with separate
    casts per stream spent 53 ms of its 545 in casts (bench/speed/README.md, "Since: the gelu in float32"). One cast
    sums the streams' weight gradients in the compute dtype before the one cast back, as PyTorch's autocast does
    with its cached casts. The memo is the calling thread's."""

    def _w(self, variable):
        memo = _memos().get(id(self))
        if memo is None:
            return tf.cast(variable, self.compute_dtype)
        held = memo.get(id(variable))
        if held is None or held[0] is not variable:  # the object kept with its cast: its id cannot be reused
            held = memo[id(variable)] = (variable, tf.cast(variable, self.compute_dtype))
        return held[1]

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
