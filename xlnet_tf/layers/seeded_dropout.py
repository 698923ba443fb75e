"""Dropout that a recomputed layer can replay: the same mask on the forward pass and on its recomputation.

A Keras `Dropout` draws its mask from a stateful seed generator, so running a layer twice (activation
rematerialization: the forward pass, then again to rebuild the activations for the gradient) would draw two
different masks and silently give the gradient of another network. `apply` keeps the layer's own behaviour when
no seed is given, and with a `seed` (`[2]` int tensor, drawn once per layer call outside the recomputed function)
draws a stateless mask from `(seed, site)`: every dropout site of a layer (`site`, a small int) gets its own mask,
and the recomputation, given the same seed, draws the same ones. Scaling as Keras: kept values / (1 - rate).
"""

from __future__ import annotations

import tensorflow as tf


def apply(layer, x, training, seed=None, site: int = 0):
    """`layer(x, training=training)` for a Keras `Dropout` layer; with `seed`, a stateless mask from (seed, site)."""
    if seed is None or not training or not layer.rate:
        return layer(x, training=training)
    site_seed = tf.random.experimental.stateless_fold_in(tf.cast(seed, tf.int64), site)
    return tf.nn.experimental.stateless_dropout(x, rate=layer.rate, seed=site_seed)
