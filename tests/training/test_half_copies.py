"""Half-precision weight copies written by the compiled update (layers/precision.HalfCopies, training/loop.Trainer):
a mixed-precision step with them computes exactly what it computed casting each weight in the step."""

import threading

import keras
import numpy as np
import pytest
import tensorflow as tf

from xlnet_tf.layers import precision
from xlnet_tf.layers.feedforward import PositionwiseFeedForward


def _bits(x):
    return tf.bitcast(tf.convert_to_tensor(x), tf.uint16).numpy()


def test_a_layer_reads_the_copies_only_inside_reading():
    keras.utils.set_random_seed(0)
    layer = PositionwiseFeedForward(16, 32, dtype="mixed_bfloat16")
    layer.build((None, None, 16))
    x = tf.random.normal([2, 3, 16])
    want = layer(x)
    copies = precision.HalfCopies(layer, "bfloat16")
    with copies.reading():
        got = layer(x)
    np.testing.assert_array_equal(got, want)
    weights = [layer.layer_1.kernel, layer.layer_1.bias, layer.layer_2.kernel, layer.layer_2.bias]
    assert len(copies) == len(weights)  # the weights the layer reads in bfloat16; not its float32 LayerNorm's
    for w in weights:
        assert copies.get(w).dtype == tf.bfloat16
        np.testing.assert_array_equal(_bits(copies.get(w)), _bits(tf.cast(w, tf.bfloat16)))
    assert copies.get(layer.layer_norm.gamma) is None

    # a changed weight: the copies are read as they are until refreshed; outside reading, the weight itself
    layer.layer_1.kernel.assign(layer.layer_1.kernel * 2.0)
    changed = layer(x)
    with copies.reading():
        np.testing.assert_array_equal(layer(x), want)
        copies.refresh()
        np.testing.assert_array_equal(layer(x), changed)

    # another thread does not read this thread's copies
    seen = []
    with copies.reading():
        layer.layer_1.kernel.assign(layer.layer_1.kernel * 0.5)
        thread = threading.Thread(target=lambda: seen.append(layer(x)))
        thread.start()
        thread.join()
    np.testing.assert_array_equal(seen[0], want)


def test_copies_only_of_the_layers_computing_in_their_dtype_and_only_read_by_their_owner():
    layer = PositionwiseFeedForward(16, 32, dtype="float32")
    layer.build((None, None, 16))
    assert len(precision.HalfCopies(layer, "bfloat16")) == 0
    mixed = PositionwiseFeedForward(16, 32, dtype="mixed_bfloat16")
    mixed.build((None, None, 16))
    assert len(precision.HalfCopies(mixed, "float16")) == 0
    copies = precision.HalfCopies(mixed, "bfloat16")
    kernel = mixed.layer_1.kernel
    assert copies.get(kernel) is not None and copies.get(kernel, mixed) is copies.get(kernel)
    assert copies.get(kernel, layer) is None  # another layer reading it casts it


def _classifier(dtype, untie_r=True):
    from xlnet_tf.config import XLNetConfig
    from xlnet_tf.models import XLNetClassifier

    keras.utils.set_random_seed(0)
    return XLNetClassifier(XLNetConfig(n_token=50, n_layer=2, d_model=16, n_head=2, d_head=8, d_inner=32,
                                       dropout=0.0, dropatt=0.0, untie_r=untie_r), num_labels=3, dtype=dtype)


def _trainer(tmp_path, name, copies=True, k=1, remat=False, steps=3, dtype="mixed_bfloat16", untie_r=True,
             strategy=None):
    from xlnet_tf.training import distribute, finetuning, loop as training, optimization

    rng = np.random.RandomState(0)
    features = {"input_ids": rng.randint(0, 50, (8, 10)).astype(np.int32),
                "segment_ids": (rng.rand(8, 10) > 0.5).astype(np.int32),
                "attention_mask": np.ones((8, 10), np.float32), "label": rng.randint(0, 3, 8).astype(np.int32)}
    strategy = strategy or distribute.get_strategy("default")
    with strategy.scope():
        model = _classifier(dtype, untie_r)
        model.backbone.remat = remat
        optimizer = optimization.create_optimizer(model, learning_rate=1e-2, train_steps=steps, clip=1.0)
    loop = training.TrainLoopConfig(model_dir=str(tmp_path / name), train_steps=steps, steps_per_loop=1,
                                    save_steps=steps, gradient_accumulation_steps=k, global_batch_size=8,
                                    xla_clustering="fusible")
    dataset_fn = lambda ctx, skip: tf.data.Dataset.from_tensor_slices(features).batch(8 // k).repeat()
    trainer = training.Trainer(strategy, model, optimizer, finetuning.task_loss_fn, dataset_fn, loop,
                               log=lambda line: None)
    if not copies:
        trainer.copies = None
    return trainer


def _same_run(a, b):
    """The same losses (and norms) and weights: to the bit in a process, but the step without copies was once seen
    to differ by a rounding from process to process (one run in eight of the one-micro-batch step, at the commit
    before the copies, on a busy machine), so to far less than one update (learning rate 1e-2)."""
    np.testing.assert_allclose(np.array(a[0], np.float64), np.array(b[0], np.float64), rtol=1e-5)
    for x, y in zip(a[1], b[1]):
        np.testing.assert_allclose(x, y, rtol=0, atol=1e-4)


@pytest.mark.parametrize("k,remat", [(1, False), (2, False), (1, True)])
def test_the_step_with_copies_computes_what_casting_in_the_step_computes(tmp_path, k, remat):
    """Three steps (the copies created by the first, written by every update): the same losses, gradient norms and
    weights (to the bit in one process; see `_same_run`) as the step that casts each weight where it reads it; with
    accumulation (k=2: the micro-batches' gradients summed in float32) and with every layer rematerialized (it reads
    the copies again when the gradient is computed)."""
    runs = {}
    for copies in (True, False):
        trainer = _trainer(tmp_path, f"{copies}_{k}_{remat}", copies=copies, k=k, remat=remat)
        history = trainer.train()
        runs[copies] = ([(h["loss"], h["grad_norm"]) for h in history], trainer.model.get_weights(), trainer)
    _same_run(runs[True][:2], runs[False][:2])
    trainer = runs[True][2]
    # every weight read in bfloat16 has its copy, equal to the weight's cast after the last update
    variables = trainer.model.trainable_variables
    copied = [v for v in variables if trainer.copies.get(v) is not None]
    assert len(copied) == len(trainer.copies) > 0
    assert not any("LayerNorm" in v.path or "word_embedding" in v.path for v in copied)
    for v in copied:
        np.testing.assert_array_equal(_bits(trainer.copies.get(v)), _bits(tf.cast(v, tf.bfloat16)))


def _weight_casts(trainer):
    features = next(iter(trainer.dataset_fn(None, 0)))
    function = trainer.compute.get_concrete_function(features, None)
    casts = [op for op in function.graph.get_operations() if op.type == "Cast"
             and op.outputs[0].dtype == tf.bfloat16 and op.inputs[0].op.type == "ReadVariableOp"]
    return casts, function.structured_outputs[2]


def test_the_traced_step_casts_no_copied_weight(tmp_path):
    """The step reads the copies: of its float32 -> bfloat16 casts of variable reads, one per copied weight is gone
    (those left are the Keras layers' outside the backbone: the summary and the logits), and the copies' gradients
    reach the update in bfloat16 (fails if the layers cast again)."""
    casts, trainers = {}, {}
    for copies in (True, False):
        trainers[copies] = trainer = _trainer(tmp_path, f"traced_{copies}", copies=copies, steps=1)
        trainer.train()
        casts[copies], grads = _weight_casts(trainer)
    with_copies = trainers[True]
    assert len(casts[False]) - len(casts[True]) == len(with_copies.copies) > 0
    assert all("summary" in op.name or "logit" in op.name for op in casts[True]), [op.name for op in casts[True]]
    _, grads = _weight_casts(with_copies)
    dtypes = {True: set(), False: set()}
    for g, v in zip(grads, with_copies.model.trainable_variables):
        dtypes[with_copies.copies.get(v) is not None].add(g.dtype)
    assert dtypes == {True: {tf.bfloat16}, False: {tf.float32}}


def test_weights_changed_between_loops_reach_the_copies(tmp_path):
    """The Trainer writes the copies at the start of every host loop: weights a caller sets between two loops (here
    `on_loop_end` after the second of four one-step loops; a restore likewise) are what the next step reads."""
    runs = {}
    for copies in (True, False):
        trainer = _trainer(tmp_path, f"between_{copies}", copies=copies, steps=4)

        def halve(step, model=trainer.model):
            if step == 2:
                model.set_weights([w * 0.5 for w in model.get_weights()])

        history = trainer.train(on_loop_end=halve)
        runs[copies] = ([h["loss"] for h in history], trainer.model.get_weights())
    _same_run(runs[True], runs[False])


def test_only_a_mixed_policy_with_the_compiled_update_keeps_copies(tmp_path):
    assert _trainer(tmp_path, "mixed").copies is not None
    assert _trainer(tmp_path, "f32", dtype="float32").copies is None


def _one_compute(trainer):
    features = next(iter(trainer.dataset_fn(None, 0)))
    return [None if g is None else tf.cast(tf.convert_to_tensor(g), tf.float32).numpy()
            for g in trainer.compute(features, None)[2]]


@pytest.mark.parametrize("untie_r", [True, False])
def test_one_steps_gradients_equal_to_the_bit(tmp_path, untie_r):
    """Every gradient of one step equal to the bit with copies and without, also with untie_r=False: its attention
    biases, shared by every layer, have no copy (each layer casts them, and their gradients sum in float32)."""
    grads = {}
    for copies in (True, False):
        trainer = _trainer(tmp_path, f"one_{untie_r}_{copies}", copies=copies, untie_r=untie_r)
        grads[copies] = _one_compute(trainer)
        if copies:
            with_copies = trainer
    for a, b in zip(grads[True], grads[False]):
        np.testing.assert_array_equal(a, b)
    shared = [v for v in with_copies.model.trainable_variables if v.path.split("/")[-1] in ("r_w_bias", "r_r_bias")]
    assert shared and all((with_copies.copies.get(v) is None) == (not untie_r) for v in shared)


def test_a_one_device_mirrored_strategy_trains_without_the_compiled_update(tmp_path):
    """A MirroredStrategy of one device synchronizes in the optimizer's update, which an XLA program cannot hold:
    it trains with the plain update, without copies (it failed with "nested `tf.function` contains a synchronization
    point" when it took the compiled update)."""
    trainer = _trainer(tmp_path, "mirrored", strategy=tf.distribute.MirroredStrategy(["/cpu:0"]))
    assert not trainer.compiled_update and trainer.copies is None
    history = trainer.train()
    assert np.isfinite(history[-1]["loss"])
