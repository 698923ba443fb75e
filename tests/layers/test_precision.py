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
    given = keras.DTypePolicy(policy)
    got = precision.layer_norm_policy(given)
    assert got == norm if policy != norm else got is given  # a policy object: mapped by its name, else itself


@pytest.mark.parametrize("make", [lambda: RelativeAttention(64, 2, 32, dtype="bfloat16"),
                                  lambda: PositionwiseFeedForward(64, 128, dtype="bfloat16")])
def test_a_pure_bfloat16_layer_keeps_its_layer_norm_in_float32(make):
    layer = make()
    layer.build()
    norms = [w for w in layer.weights if "LayerNorm" in w.path]
    assert {w.dtype for w in norms} == {"float32"}
    assert {w.dtype for w in layer.weights if "LayerNorm" not in w.path} == {"bfloat16"}
    assert layer.layer_norm.compute_dtype == "bfloat16"  # its output still in the layer's dtype


def _casts_of_weights(fn, *specs):
    """The number of float32 -> bfloat16 casts in `fn`'s graph whose input is a variable read."""
    import tensorflow as tf

    graph = tf.function(fn).get_concrete_function(*specs).graph
    return sum(1 for op in graph.get_operations() if op.type == "Cast" and op.outputs[0].dtype == tf.bfloat16
               and op.inputs[0].op.type == "ReadVariableOp")


def test_two_streams_through_one_layer_cast_each_weight_once():
    """XLNetLayer applies the attention and the feed-forward to the content and the query stream: each weight is
    cast to bfloat16 once per call (precision.CastOnce), not once per stream; outside `casting_once` once per read."""
    import tensorflow as tf

    from xlnet_tf.layers.block import XLNetLayer
    from xlnet_tf.layers.position import RelativePositionalEncoding

    layer = XLNetLayer(64, 2, 32, 128, dtype="mixed_bfloat16")
    layer.build()
    n_weights = sum(1 for w in layer.weights if "LayerNorm" not in w.path)
    positions = RelativePositionalEncoding(64, dtype="mixed_bfloat16")

    def two_streams(content, query):
        pos_emb = positions(qlen=8, klen=8)
        return layer(content, query, pos_emb=pos_emb, query_pos=tf.zeros([2, 3], tf.int32))

    spec = lambda n: tf.TensorSpec([2, n, 64], tf.bfloat16)  # noqa: E731
    # every weight but seg_embed (no segments given), once: q, o and the biases serve both streams
    assert _casts_of_weights(two_streams, spec(8), spec(3)) == n_weights - 1

    def feed_forward_twice(a, b):
        return layer.ff(a), layer.ff(b)

    assert _casts_of_weights(feed_forward_twice, spec(8), spec(3)) == 2 * 4  # two kernels, two biases, each read


def test_the_cast_memo_belongs_to_the_calling_thread():
    """A replica traced in another thread (MirroredStrategy) gets casts of its own, never the memo another thread
    holds open."""
    import threading

    import tensorflow as tf

    layer = PositionwiseFeedForward(64, 128, dtype="mixed_bfloat16")
    layer.build()
    kernel = layer.layer_1.kernel
    inside, release = threading.Event(), threading.Event()
    seen = {}

    def hold_open():
        with layer.casting_once():
            seen["holder"] = layer._w(kernel)
            assert layer._w(kernel) is seen["holder"]  # one cast inside the context
            inside.set()
            release.wait(10)

    holder = threading.Thread(target=hold_open)
    holder.start()
    inside.wait(10)
    try:
        mine = layer._w(kernel)  # this thread is outside any casting_once
        assert mine is not seen["holder"] and mine.dtype == tf.bfloat16
        with layer.casting_once():
            assert layer._w(kernel) is not seen["holder"]
    finally:
        release.set()
        holder.join()
