"""Keras layers of XLNet (batch-major tensors; boolean masks with True = may NOT attend)."""

from xlnet_tf.layers.attention import RelativeAttention, gather_shift, rel_shift
from xlnet_tf.layers.block import XLNetLayer
from xlnet_tf.layers.feedforward import PositionwiseFeedForward
from xlnet_tf.layers.position import RelativePositionalEncoding

__all__ = ["RelativeAttention", "RelativePositionalEncoding", "PositionwiseFeedForward", "XLNetLayer",
           "rel_shift", "gather_shift"]
