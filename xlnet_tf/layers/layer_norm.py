"""LayerNorm: Keras's `LayerNormalization` (the same weights, config and numbers) whose training call runs one C++ op
for the forward pass and one for its gradient (`native/layer_norm.cc`) where it can.

The speed benchmark's bfloat16 steps spent 2.7 ms per layer norm (forward and backward, `[1024, 768]`) in XLA's
auto-clusters, 1.3 ms as the ops: the tagging step 1.050x, pretraining 1.031x, fine-tuning 1.073x
(bench/speed/README.md, "Since: the layer norm and the update as native ops"). The op computes what
`keras.ops.layer_normalization` computes (float32 statistics as `tf.nn.moments`: the mean, then the mean of squared
differences; the output in the input's dtype), summing in another order: equal to float32 rounding, the output to one
unit of its dtype's last place.

The op runs only in a training call (`training=True`: a graph that stays in the process) outside an XLA program, over
the last axis, with `gamma` and `beta`, on a float32 or bfloat16 input, and when `native.library.ops()` is available;
everywhere else (inference, export, a `jit_compile` step, float16) the Keras form.
"""

from __future__ import annotations

import keras
import tensorflow as tf
from tensorflow.python.framework import ops as framework_ops  # RegisterGradient: no public API for an op's gradient

from xlnet_tf.layers.native import library
from xlnet_tf.layers.xla_context import in_xla_program

_DTYPES = ("float32", "bfloat16")


@framework_ops.RegisterGradient("XlnetTfLayerNorm")
def _layer_norm_gradient(op, dy, unused_dmean, unused_drstd):
    """dx, dgamma, dbeta from the forward's mean and 1/sqrt(var + eps) (its other outputs have no gradient)."""
    return library.ops().xlnet_tf_layer_norm_grad(dy, op.inputs[0], op.inputs[1], op.outputs[1], op.outputs[2])


@framework_ops.RegisterGradient("XlnetTfLayerNormGrad")
def _no_second_derivative(op, *unused):
    raise NotImplementedError("xlnet_tf LayerNorm: the native op's gradient has no gradient of its own (a second "
                              f"derivative); run with {library.SWITCH}=0 for TensorFlow's form")


@keras.saving.register_keras_serializable(package="xlnet_tf")
class LayerNorm(keras.layers.LayerNormalization):
    """`keras.layers.LayerNormalization` over the last axis (inputs `[..., D]`, output the same shape in the compute
    dtype), whose training call runs the native op where it can (module docstring)."""

    def call(self, inputs, training=None):
        if self._takes_native_op(inputs, training):
            # from the input in its own dtype, as Keras's form (the layer does not autocast its input), the output
            # cast to the compute dtype after
            gamma, beta = (tf.cast(w, tf.float32) for w in (self.gamma, self.beta))
            y = library.ops().xlnet_tf_layer_norm(inputs, gamma, beta, epsilon=float(self.epsilon))[0]
            return tf.cast(y, self.compute_dtype)
        return super().call(inputs)

    def _takes_native_op(self, inputs, training) -> bool:
        rank = len(inputs.shape)
        axis = self.axis if isinstance(self.axis, (list, tuple)) else [self.axis]
        return (training is True and self.center and self.scale and not self.rms_scaling
                and [a % rank for a in axis] == [rank - 1] and inputs.dtype.name in _DTYPES
                and not in_xla_program() and library.ops() is not None)
