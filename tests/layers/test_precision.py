"""A layer's LayerNormalization keeps float32 parameters under every policy (layers/precision.py)."""

import keras
import pytest

from xlnet_tf.layers import precision
from xlnet_tf.layers.attention import RelativeAttention
from xlnet_tf.layers.feedforward import PositionwiseFeedForward


@pytest.mark.parametrize("policy,norm", [("bfloat16", "mixed_bfloat16"), ("float16", "mixed_float16"),
                                         ("mixed_bfloat16", "mixed_bfloat16"), ("float32", "float32")])
def test_layer_norm_policy(policy, norm):
    assert precision.layer_norm_policy(policy) == norm
    assert precision.layer_norm_policy(keras.DTypePolicy(policy)) in (norm, keras.DTypePolicy(policy))


@pytest.mark.parametrize("make", [lambda: RelativeAttention(64, 2, 32, dtype="bfloat16"),
                                  lambda: PositionwiseFeedForward(64, 128, dtype="bfloat16")])
def test_a_pure_bfloat16_layer_keeps_its_layer_norm_in_float32(make):
    layer = make()
    layer.build()
    norms = [w for w in layer.weights if "LayerNorm" in w.path]
    assert {w.dtype for w in norms} == {"float32"}
    assert {w.dtype for w in layer.weights if "LayerNorm" not in w.path} == {"bfloat16"}
    assert layer.layer_norm.compute_dtype == "bfloat16"  # its output still in the layer's dtype
