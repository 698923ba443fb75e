"""xlnet_tf: XLNet (two-stream relative attention, Transformer-XL memories) on TensorFlow 2 + Keras 3."""

from xlnet_tf.config import XLNetConfig

__all__ = ["XLNetConfig"]
__version__ = "0.1.0"
