"""The dtype policy of a layer's LayerNormalization: float32 variables whatever the layer's policy.

Keras's LayerNormalization computes in float32 for half-precision inputs, reading its `gamma` and `beta` as float32:
under a mixed policy (`mixed_bfloat16`, float32 variables) they are the trained values, under a pure half policy
(`bfloat16`, half-precision variables) they would be rounded to 8 significant bits first. With this policy a pure
`bfloat16` model computes exactly what the `mixed_bfloat16` model with the same (rounded once) other weights computes:
every other weight is cast to the compute dtype where it is read either way. `serving.half_weights` exports
mixed-precision models that way.
"""

from __future__ import annotations

import keras

# a pure half-precision policy -> the mixed policy of the same compute dtype (float32 variables)
_MIXED = {"bfloat16": "mixed_bfloat16", "float16": "mixed_float16"}


def layer_norm_policy(policy):
    """The policy for a LayerNormalization inside a layer of `policy` (a `keras.DTypePolicy` or its name): the
    mixed policy of a pure half-precision one, otherwise `policy` itself."""
    name = policy.name if isinstance(policy, keras.DTypePolicy) else policy
    return _MIXED.get(name, policy)
