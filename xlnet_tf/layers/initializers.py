"""Weight initializers.

A Keras 3 initializer instance created without a seed draws its seed once, at construction, and returns
the same values on every call: sharing one instance between weights makes them identical (q = k = v,
every head's bias equal ...), a symmetry that slows training from scratch. Every weight gets a fresh
instance here; seeds still follow `keras.utils.set_random_seed`.
"""

from __future__ import annotations

import keras


def normal(stddev: float) -> keras.initializers.Initializer:
    """A new `RandomNormal(0, stddev)` with its own seed (the original XLNet's `initializer_range`)."""
    return keras.initializers.RandomNormal(stddev=stddev)


def glorot_uniform() -> keras.initializers.Initializer:
    """A new `GlorotUniform` with its own seed: TF1's default for a variable created without an
    initializer (the original's `mask_emb` `[1, 1, d]`: uniform in +-sqrt(6 / (1 + d)))."""
    return keras.initializers.GlorotUniform()
