"""Exact small-matrix tests of rel_shift, masks and positions; get_config round trips."""

import keras
import numpy as np
import pytest
import tensorflow as tf

from xlnet_tf.backbone import XLNetBackbone, causal_mask
from xlnet_tf.config import XLNetConfig
from xlnet_tf.heads import LMHead
from xlnet_tf.layers import xla_context
from xlnet_tf.layers import (PositionwiseFeedForward, RelativeAttention, RelativePositionalEncoding,
                             XLNetLayer, gather_shift, rel_shift)
from xlnet_tf.models import XLNetPretrainer


def test_rel_shift_closed_form():
    """out[i, j] must score the distance (mlen + i) - j, where column p of the input scores klen - p."""
    qlen, mlen = 4, 3
    klen = qlen + mlen
    p = klen + qlen
    distances = klen - np.arange(p)  # what column p encodes
    scores = np.tile(distances, (1, 1, qlen, 1)).astype(np.float32)  # [1, 1, qlen, P]
    out = rel_shift(tf.constant(scores), klen).numpy()[0, 0]
    expected = (mlen + np.arange(qlen))[:, None] - np.arange(klen)[None, :]
    np.testing.assert_array_equal(out, expected)


def test_rel_shift_small_matrix():
    x = tf.reshape(tf.range(2 * 5, dtype=tf.float32), [1, 1, 2, 5])  # qlen 2, P 5, klen 3
    np.testing.assert_array_equal(rel_shift(x, 3).numpy()[0, 0], [[2, 3, 4], [6, 7, 8]])


@pytest.mark.parametrize("mode", ["eager", "graph", "jit_compile"])
def test_rel_shift_gradient_puts_each_score_gradient_back_where_it_was_read(mode, rng):
    """The written-out gradient (outside XLA's auto-clusters) against the rule: the gradient of out[i, j] lands on
    scores[i, Q - i + j], zero on columns no output reads."""
    qlen, mlen = 5, 3
    klen, p = qlen + mlen, 2 * qlen + mlen
    scores = tf.constant(rng.randn(2, 3, qlen, p).astype(np.float32))
    upstream = rng.randn(2, 3, qlen, klen).astype(np.float32)

    def gradient(x):
        with tf.GradientTape() as tape:
            tape.watch(x)
            out = rel_shift(x, tf.constant(klen))
        return tape.gradient(out, x, output_gradients=tf.constant(upstream))

    if mode != "eager":
        gradient = tf.function(gradient, jit_compile=mode == "jit_compile")
    expected = np.zeros(scores.shape, np.float32)
    for i in range(qlen):
        expected[:, :, i, qlen - i:qlen - i + klen] = upstream[:, :, i]
    np.testing.assert_array_equal(gradient(scores).numpy(), expected)


def test_rel_shift_gradient_is_left_out_of_xla_auto_clusters():
    """Its pads carry `_XlaCompile=False` in a graph (TensorFlow's auto-clustering then leaves them to its own
    kernels: bench/speed/README.md); the forward pass's ops do not."""

    def gradient(x):
        with tf.GradientTape() as tape:
            tape.watch(x)
            out = rel_shift(x, 4)
        return tape.gradient(out, x)

    graph = tf.function(gradient).get_concrete_function(tf.TensorSpec([1, 2, 3, 7], tf.float32)).graph
    pads = [op for op in graph.get_operations() if op.type in ("Pad", "PadV2")]
    assert len(pads) == 2
    for op in pads:
        assert op.get_attr("_XlaCompile") is False
    for op in graph.get_operations():
        if op.type == "StridedSlice":
            assert "_XlaCompile" not in op.node_def.attr


def test_gather_shift_equals_rel_shift_rows(rng):
    qlen, mlen = 6, 2
    klen, p = qlen + mlen, 2 * qlen + mlen
    scores = tf.constant(rng.randn(2, 3, qlen, p).astype(np.float32))
    full = rel_shift(scores, klen).numpy()
    pos = np.array([[5, 0, 3], [1, 2, 4]], np.int32)
    rows = tf.gather(scores, pos, axis=2, batch_dims=1)  # [2, 3 heads, 3 rows, P]
    out = gather_shift(rows, tf.constant(pos), qlen, klen).numpy()
    for b in range(2):
        for k in range(3):
            np.testing.assert_array_equal(out[b, :, k], full[b, :, pos[b, k]])


def _gather_shift_reference(scores, pos, qlen, klen):
    """numpy: out[b, :, k, j] = scores[b, :, k, min(qlen - pos[b, k] + j, P - 1)]."""
    idx = np.minimum(qlen - pos[:, :, None] + np.arange(klen)[None, None, :], scores.shape[-1] - 1)
    return np.take_along_axis(scores, np.broadcast_to(idx[:, None], scores.shape[:3] + (klen,)), axis=-1), idx


@pytest.mark.parametrize("p_extra", [None, 1])  # P = klen + qlen (bidirectional), klen + 1 (causal: clipped)
@pytest.mark.parametrize("sizes", ["ints", "ints_not_compiled", "tensors", "jit_compile"])
def test_gather_shift_values_and_gradient_every_way(rng, sizes, p_extra):
    """The compiled gather (asked for, int sizes, outside an XLA program), the plain one (not asked for, or tensor
    sizes) and the one inside an XLA program give the reference values, and the gradient adds each output's gradient
    where it was read."""
    qlen, klen = 6, 8
    p = klen + (qlen if p_extra is None else p_extra)
    scores = rng.randn(2, 3, 4, p).astype(np.float32)
    pos = np.array([[5, 0, 3, 2], [1, 2, 4, 0]], np.int32)
    dy = rng.randn(2, 3, 4, klen).astype(np.float32)
    want, idx = _gather_shift_reference(scores, pos, qlen, klen)
    want_grad = np.zeros_like(scores)
    for b, h, k, j in np.ndindex(dy.shape):
        want_grad[b, h, k, idx[b, k, j]] += dy[b, h, k, j]

    def run(scores, pos):
        with tf.GradientTape() as tape:
            tape.watch(scores)
            if sizes == "tensors":
                out = gather_shift(scores, pos, tf.constant(qlen), tf.constant(klen), compiled=True)
            else:
                out = gather_shift(scores, pos, qlen, klen, compiled=sizes != "ints_not_compiled")
        return out, tape.gradient(out, scores, output_gradients=tf.constant(dy))

    fn = tf.function(run, jit_compile=sizes == "jit_compile")
    out, grad = fn(tf.constant(scores), tf.constant(pos))
    np.testing.assert_array_equal(out.numpy(), want)
    np.testing.assert_allclose(tf.convert_to_tensor(grad).numpy(), want_grad, rtol=1e-6, atol=1e-6)
    calls = [op for op in fn.get_concrete_function(tf.constant(scores), tf.constant(pos)).graph.get_operations()
             if op.type in ("PartitionedCall", "StatefulPartitionedCall") and "_XlaMustCompile" in op.node_def.attr
             and op.get_attr("_XlaMustCompile")]
    # asked for, with int sizes outside an XLA program: the gather and its gradient are XLA programs of their own
    assert len(calls) == (2 if sizes == "ints" else 0)


@pytest.mark.parametrize("training,clustering", [(True, True), (False, True), (True, False)])
def test_only_training_with_auto_clustering_compiles_the_query_streams_gather(rng, monkeypatch, training, clustering):
    """A training step's attention at targets, in a process that asked for XLA's auto-clustering, compiles its
    gather_shift (an XLA program of its own); inference (a generation program run or exported without XLA) and a
    run that asked for no XLA keep TensorFlow's gather."""
    monkeypatch.setattr(xla_context, "auto_clustering", lambda: clustering)
    layer = RelativeAttention(d_model=8, n_head=2, d_head=4, own_biases=True)
    content = tf.constant(rng.randn(2, 5, 8).astype(np.float32))
    query = tf.constant(rng.randn(2, 3, 8).astype(np.float32))
    pos_emb = tf.constant(rng.randn(1, 10, 8).astype(np.float32))
    query_pos = tf.constant([[0, 2, 4], [1, 3, 4]], tf.int32)

    @tf.function
    def run(content, query):
        return layer(content, query, pos_emb=pos_emb, query_pos=query_pos, training=training)

    graph = run.get_concrete_function(content, query).graph
    compiled = [op for op in graph.get_operations() if "_XlaMustCompile" in op.node_def.attr
                and op.get_attr("_XlaMustCompile")]
    assert len(compiled) == (1 if training and clustering else 0)


def test_the_content_streams_rows_keep_tensorflows_gather(rng, monkeypatch):
    """Only the query stream's windows are compiled: the content stream at some rows (a classifier's last layer at
    its summary row) keeps TensorFlow's gather, training with auto-clustering or not."""
    monkeypatch.setattr(xla_context, "auto_clustering", lambda: True)
    layer = RelativeAttention(d_model=8, n_head=2, d_head=4, own_biases=True)
    content = tf.constant(rng.randn(2, 5, 8).astype(np.float32))
    pos_emb = tf.constant(rng.randn(1, 10, 8).astype(np.float32))

    @tf.function
    def run(content):
        return layer(content, pos_emb=pos_emb, content_pos=tf.constant([[4], [4]]), training=True)

    graph = run.get_concrete_function(content).graph
    assert not [op for op in graph.get_operations() if "_XlaMustCompile" in op.node_def.attr
                and op.get_attr("_XlaMustCompile")]


def test_causal_mask_matches_original_create_mask():
    blocked = causal_mask(qlen=3, mlen=2).numpy().astype(int)
    np.testing.assert_array_equal(blocked, [[0, 0, 0, 1, 1], [0, 0, 0, 0, 1], [0, 0, 0, 0, 0]])
    same = causal_mask(qlen=3, mlen=2, same_length=True).numpy().astype(int)
    np.testing.assert_array_equal(same, [[0, 0, 0, 1, 1], [1, 0, 0, 0, 1], [1, 1, 0, 0, 0]])


def test_positional_encoding_values():
    layer = RelativePositionalEncoding(d_model=4, attn_type="bi", clamp_len=2, bi_data=True)
    emb = layer(qlen=2, klen=3).numpy()
    assert emb.shape == (2, 5, 4)
    fwd = np.clip(np.array([3, 2, 1, 0, -1], np.float32), -2, 2)
    inv = 1.0 / 10000 ** (np.arange(0, 4, 2) / 4)
    expected = np.concatenate([np.sin(fwd[:, None] * inv), np.cos(fwd[:, None] * inv)], -1)
    np.testing.assert_allclose(emb[0], expected, atol=1e-6)
    np.testing.assert_allclose(emb[1, :, :2], -expected[:, :2], atol=1e-6)  # sin is odd
    uni = RelativePositionalEncoding(d_model=4, attn_type="uni")(qlen=2, klen=3)
    assert uni.shape == (1, 4, 4)


def test_content_stream_sees_itself():
    """With a perm mask blocking everything, the content stream attends to itself only: a change of
    token i changes position i and nothing else."""
    config = XLNetConfig(n_token=20, n_layer=1, d_model=8, n_head=2, d_head=4, d_inner=8, dropout=0.0,
                         dropatt=0.0)
    backbone = XLNetBackbone(config)
    ids = np.array([[1, 2, 3, 4]])
    perm = np.ones((1, 4, 4), np.float32)
    a = backbone(ids, perm_mask=perm)["content"].numpy()
    b = backbone(np.array([[1, 2, 9, 4]]), perm_mask=perm)["content"].numpy()
    changed = np.abs(a - b).max(-1)[0]
    assert changed[2] > 1e-4 and np.all(changed[[0, 1, 3]] < 1e-7)


def _round_trip(layer):
    config = layer.get_config()
    clone = layer.__class__.from_config(config)
    assert clone.get_config() == config
    return clone


def test_get_config_round_trips():
    _round_trip(RelativePositionalEncoding(8, attn_type="uni", clamp_len=5, bi_data=True))
    _round_trip(RelativeAttention(8, 2, 4, dropout=0.1, dropatt=0.2, own_biases=False))
    _round_trip(PositionwiseFeedForward(8, 16, activation="relu", dropout=0.1))
    _round_trip(XLNetLayer(8, 2, 4, 16, ff_activation="gelu", own_biases=True))
    _round_trip(LMHead(30))
    config = XLNetConfig(n_token=30, n_layer=2, d_model=8, n_head=2, d_head=4, d_inner=16, mem_len=4)
    clone = _round_trip(XLNetBackbone(config, query_stream="full"))
    assert clone.config == config and clone.query_stream == "full"
    model = XLNetPretrainer(config)
    clone = XLNetPretrainer.from_config(model.get_config())
    assert clone.config == config


def test_keras_saving_round_trip(tmp_path):
    config = XLNetConfig(n_token=30, n_layer=1, d_model=8, n_head=2, d_head=4, d_inner=16, dropout=0.0,
                         dropatt=0.0)
    model = XLNetPretrainer(config)
    inputs = {"input_ids": np.array([[1, 2, 3]]), "perm_mask": np.zeros((1, 3, 3), np.float32),
              "target_mapping": np.eye(3, dtype=np.float32)[None, :2]}
    before = model(inputs)["logits"].numpy()
    path = str(tmp_path / "m.keras")
    model.save(path)
    restored = keras.saving.load_model(path)
    np.testing.assert_allclose(restored(inputs)["logits"].numpy(), before, atol=1e-6)


def test_bad_query_stream_mode():
    with pytest.raises(ValueError, match="query_stream"):
        XLNetBackbone(XLNetConfig(n_layer=1), query_stream="sometimes")


def test_random_init_gives_every_weight_its_own_values():
    """Keras 3 initializers without a seed repeat their values: a shared instance made q = k = v = o = r."""
    from xlnet_tf.models import XLNetClassifier, XLNetForSquad

    config = XLNetConfig(n_token=50, n_layer=2, d_model=32, n_head=2, d_head=16, d_inner=64)
    ids = np.ones((2, 6), np.int32)
    models = [XLNetClassifier(config, num_labels=3, summary_type="attn"), XLNetForSquad(config)]
    for model in models:
        model({"input_ids": ids, "segment_ids": ids * 0, "attention_mask": np.ones((2, 6), np.float32),
               "p_mask": np.zeros((2, 6), np.float32), "cls_index": np.full((2,), 5, np.int32)})
    pre = XLNetPretrainer(config)
    pre({"input_ids": ids, "target_mapping": np.eye(6, dtype=np.float32)[None, :2].repeat(2, 0)})
    for model in models + [pre]:
        random = [w for w in model.weights if float(np.std(w.numpy())) > 0]
        firsts = [w.numpy().ravel()[:4].tobytes() for w in random]
        assert len(set(firsts)) == len(firsts), [w.path for w in random]
    keras.utils.set_random_seed(3)
    a = XLNetPretrainer(config)
    a({"input_ids": ids, "target_mapping": np.eye(6, dtype=np.float32)[None, :2].repeat(2, 0)})
    keras.utils.set_random_seed(3)
    b = XLNetPretrainer(config)
    b({"input_ids": ids, "target_mapping": np.eye(6, dtype=np.float32)[None, :2].repeat(2, 0)})
    for x, y in zip(a.get_weights(), b.get_weights()):
        np.testing.assert_array_equal(x, y)


@pytest.mark.parametrize("pieces", [1, 2, 3])
def test_column_pieces_give_the_whole_products(pieces, rng):
    """A decoding loop's column-cut kernels (layers/column_pieces.py) give the stored layers' numbers: the
    feed-forward sub-layer, the attention output projection, the q/k/v projections and the LM head (widths
    that the pieces do not divide included)."""
    from xlnet_tf.layers import column_pieces

    kernel = tf.constant(rng.normal(size=(6, 7)), tf.float32)
    cut = column_pieces.split_columns(kernel, pieces)
    assert [p.shape[1] for p in cut] == [7 * (i + 1) // pieces - 7 * i // pieces for i in range(pieces)]
    x = tf.constant(rng.normal(size=(3, 2, 6)), tf.float32)
    np.testing.assert_allclose(column_pieces.product(x, cut), tf.einsum("bld,de->ble", x, kernel), atol=1e-6)

    ff = PositionwiseFeedForward(d_model=6, d_inner=10, activation="gelu")
    ff.build()
    ff.layer_1.bias.assign(rng.normal(size=10))
    ff.layer_2.bias.assign(rng.normal(size=6))
    np.testing.assert_allclose(ff.apply_kernel_pieces(x, ff.kernel_pieces(pieces)), ff(x), atol=1e-5)

    att = RelativeAttention(d_model=6, n_head=2, d_head=3)
    att.build((None, None, 6))
    kernels = att.decoding_kernels(tf.constant(rng.normal(size=(1, 4, 6)), tf.float32), pieces)
    vec = tf.constant(rng.normal(size=(3, 2, 2, 3)), tf.float32)
    np.testing.assert_allclose(column_pieces.product(tf.reshape(vec, [3, 2, 6]), kernels.output),
                               tf.einsum("bind,hnd->bih", vec, att.o), atol=1e-5)
    qkv = tf.reshape(column_pieces.product(x, kernels.qkv), [3, 2, 3, 2, 3])
    for i, kernel in enumerate((att.q, att.k, att.v)):
        np.testing.assert_allclose(qkv[:, :, i], tf.einsum("bld,dnh->blnh", x, kernel), atol=1e-6)

    head = LMHead(n_token=11)
    head.build((None, None, 6))
    head.bias.assign(rng.normal(size=11))
    embedding = tf.constant(rng.normal(size=(11, 6)), tf.float32)
    np.testing.assert_allclose(
        head.transposed_logits(x[:, 0], column_pieces.split_columns(tf.transpose(embedding), pieces)),
        head(x[:, :1], embedding)[:, 0], atol=1e-5)


@pytest.mark.parametrize("pieces", [1, 2])
def test_a_decoding_step_gives_the_layer_call_on_one_new_position(pieces, rng):
    """`XLNetLayer.decode_step` over a key/value cache (the memory's keys and values, one empty slot) gives what
    `call` gives on `[mems; token]`: the token's content row, the next position's query row (which does not see
    the memory's first position, as a decoding window of M positions), and the token's key and value in its
    slot."""
    batch, mlen, d_model = 2, 5, 8
    layer = XLNetLayer(d_model=d_model, n_head=2, d_head=4, d_inner=12, initializer_range=0.5)
    layer.build()
    for weight in layer.weights:  # random biases and LayerNorm parameters too
        weight.assign(rng.normal(scale=0.5, size=weight.shape))
    mems = tf.constant(rng.normal(size=(batch, mlen, d_model)), tf.float32)
    token = tf.constant(rng.normal(size=(batch, 1, d_model)), tf.float32)
    query = tf.constant(rng.normal(size=(batch, 1, d_model)), tf.float32)
    pos_emb = RelativePositionalEncoding(d_model)(qlen=1, klen=mlen + 1)  # distances M + 1 .. 0
    slots = mlen + 1
    first = np.arange(slots) == 0  # the memory's first position, out of the next position's window
    content, next_query = layer(token, query, pos_emb=pos_emb, mems=mems, seg_diff=tf.zeros([batch, 1, slots], bool),
                                query_mask=tf.constant(np.tile(first, (batch, 1, 1))),
                                query_seg_diff=tf.zeros([batch, 1, slots], bool), query_pos=tf.fill([batch, 1], 1))

    keys, values = layer.rel_attn.project_keys_values(mems)  # [B, M, H, Dh]; slot j holds position j, t = M
    cache = [tf.transpose(tf.concat([x, tf.zeros_like(x[:, :1])], 1), [0, 2, 1, 3]) for x in (keys, values)]
    streams, keys, values = layer.decode_step(
        tf.concat([token, query], 1), *cache, tf.constant(mlen), layer.decoding_kernels(pos_emb, pieces),
        distance_columns=tf.range(slots) + 1,  # distance M - j to slot j, in column M + 1 - (M - j)
        content_blocked=tf.zeros([batch, slots], bool), query_blocked=tf.constant(np.tile(first, (batch, 1))))
    np.testing.assert_allclose(streams[:, 0], content[:, 0], atol=1e-5)
    np.testing.assert_allclose(streams[:, 1], next_query[:, 0], atol=1e-5)
    want_keys, want_values = layer.rel_attn.project_keys_values(token, mems)
    np.testing.assert_allclose(keys, tf.transpose(want_keys, [0, 2, 1, 3]), atol=1e-6)
    np.testing.assert_allclose(values, tf.transpose(want_values, [0, 2, 1, 3]), atol=1e-6)


def _memory_attention_gradients(mems_take_gradient: bool, rng):
    """A small attention layer over [mems; content]: its output and the gradients of a loss of it (weights,
    content, and mems when `mems_take_gradient`), and the dot FLOPs of that compiled gradient."""
    from bench.speed.step_profile import dot_flops

    layer = RelativeAttention(d_model=32, n_head=2, d_head=16)
    content = tf.constant(rng.randn(2, 6, 32), tf.float32)
    mems = tf.constant(rng.randn(2, 4, 32), tf.float32)
    pos_emb = tf.constant(rng.randn(1, 16, 32), tf.float32)  # klen + qlen positions
    layer(content, pos_emb=pos_emb, mems=mems)

    @tf.function(jit_compile=True)
    def gradients(content, mems):
        with tf.GradientTape() as tape:
            tape.watch(content)
            if mems_take_gradient:
                tape.watch(mems)
            out, _ = layer(content, pos_emb=pos_emb, mems=mems)
            loss = tf.reduce_sum(out ** 2)
        sources = layer.trainable_variables + [content] + ([mems] if mems_take_gradient else [])
        return out, tape.gradient(loss, sources)

    hlo = gradients.experimental_get_compiler_ir(content, mems)(stage="optimized_hlo")
    return layer, content, mems, pos_emb, gradients(content, mems), sum(dot_flops(hlo).values())


def test_memory_rows_take_no_input_gradient_they_do_not_need():
    """Keys and values of [mems; content] project the memory rows apart (RelativeAttention._project_keys_values):
    constant memories (training's) cost no input-gradient FLOPs, memories with a gradient (the long-document
    recipe's) get theirs, and both equal projecting the concatenation."""
    rng = np.random.RandomState(0)
    _, _, _, _, _, flops_constant = _memory_attention_gradients(False, rng)
    rng = np.random.RandomState(0)
    layer, content, mems, pos_emb, (out, grads), flops_watched = _memory_attention_gradients(True, rng)
    batch, mlen, d_model, inner = 2, 4, 32, 2 * 16
    # the input gradient of the key and value projections over the memory rows, and nothing else
    assert flops_watched - flops_constant == 2 * (2 * batch * mlen * inner * d_model)

    # the same numbers as one projection of the concatenation (the reference formulation, bench/speed/variants.py's)
    from bench.speed import variants

    with tf.GradientTape() as tape:
        tape.watch([content, mems])
        with variants.keys_values_over_concatenation():
            ref_out, _ = layer(content, pos_emb=pos_emb, mems=mems)
        loss = tf.reduce_sum(ref_out ** 2)
    ref_grads = tape.gradient(loss, layer.trainable_variables + [content, mems])
    np.testing.assert_allclose(out.numpy(), ref_out.numpy(), rtol=1e-5, atol=1e-5)
    for got, want in zip(grads, ref_grads):
        assert (got is None) == (want is None)  # seg_embed: no segments here
        if got is not None:
            np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("flags,on", [("", False), ("--tf_xla_auto_jit=2 --tf_xla_cpu_global_jit", True),
                                      ("--tf_xla_cpu_global_jit --tf_xla_auto_jit=1", True),
                                      ("--tf_xla_auto_jit=2", False),  # no CPU clustering without the global jit
                                      ("--tf_xla_auto_jit=-1 --tf_xla_cpu_global_jit", False),
                                      ("--tf_xla_cpu_global_jit", False)])
def test_auto_clustering_reads_tf_xla_flags(monkeypatch, flags, on):
    monkeypatch.setenv("TF_XLA_FLAGS", flags)
    assert xla_context.auto_clustering() is on
