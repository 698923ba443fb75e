"""The pretraining runner and training loop: loss falls on real text, kill-and-resume continues exactly,
memories flow, the step compiles with XLA, flags and manifests are checked."""

import glob
import json
import os
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf
from absl import flags

from tests import data_fixtures
from tfrecords.pretrain import writer as pretrain_data
from tfrecords.manifest import ManifestError

REPO = data_fixtures.REPO_ROOT
DATA = dict(seq_len=32, reuse_len=16, num_predict=6, perm_size=8, global_batch_size=4)
MODEL_FLAGS = ["--n_layer=2", "--d_model=32", "--n_head=2", "--d_head=16", "--d_inner=64",
               f"--n_token={data_fixtures.TINY_VOCAB}", "--mem_len=16", "--seq_len=32", "--reuse_len=16",
               "--num_predict=6", "--perm_size=8", "--train_batch_size=4", "--bi_data=true",
               "--learning_rate=3e-3", "--warmup_steps=5", "--adam_epsilon=1e-6"]


def _build(name, corpus_file, num_replicas=1):
    out = os.path.join(data_fixtures.tmp_root(), f"pretrain_{name}_{num_replicas}")
    if not os.path.exists(os.path.join(out, "manifest.json")):
        cfg = pretrain_data.PretrainConfig(**DATA, num_replicas=num_replicas, bi_data=True, seed=3,
                                           split=name)
        pretrain_data.build_pretrain_records(os.path.join(data_fixtures.CORPUS_DIR, corpus_file),
                                             data_fixtures.tiny_spm(), out, cfg, log=None)
    return out


@pytest.fixture(scope="module")
def records():
    return {"train": _build("train", "austen_moby_slice.txt"), "heldout": _build("heldout", "sotu_slice.txt")}


def _run(args):
    from run import pretrain

    return data_fixtures.run_with_flags(pretrain, args)


def _args(records, model_dir, *extra):
    return MODEL_FLAGS + [f"--record_dir={records['train']}", f"--model_dir={model_dir}",
                          f"--spiece_model={data_fixtures.tiny_spm()}", *extra]


def test_training_reduces_heldout_loss(records, tmp_path):
    result = _run(_args(records, tmp_path / "m", f"--eval_records_dir={records['heldout']}",
                        "--train_steps=60", "--steps_per_loop=20", "--save_steps=60", "--dropout=0.0",
                        "--dropatt=0.0", "--eval_batches=10", "--jit_compile=true"))
    before, after = result["eval"][0], result["eval"][-1]
    assert before["step"] == 0 and after["step"] == 60
    assert after["loss"] < before["loss"] - 1.0, (before, after)
    baseline = result["unigram_baseline"]
    assert 0 < baseline["loss"] < before["loss"] and baseline["num_tokens"] > 0
    recorded = json.load(open(tmp_path / "m" / "eval_results.json"))
    assert recorded["task"] == "pretrain" and recorded["last"]["heldout"]["loss"] == after["loss"]
    assert [e["step"] for e in recorded["evaluations"]] == [0, 60] and recorded["best"]["heldout"]["step"] == 60
    assert os.path.exists(result["final_checkpoint"] + ".index")
    assert glob.glob(str(tmp_path / "m" / "train" / "events.out.tfevents.*"))


def test_kill_and_resume_gives_the_same_loss_curve(records, tmp_path):
    common = ["--train_steps=8", "--steps_per_loop=2", "--save_steps=2", "--dropout=0.1", "--dropatt=0.1"]
    straight = _run(_args(records, tmp_path / "a", *common, "--keep_checkpoints=1",
                          "--keep_checkpoint_steps=4"))["history"]
    # the straight run keeps only its latest checkpoint, plus every 4th step under kept/
    assert sorted(os.path.basename(p) for p in glob.glob(str(tmp_path / "a" / "ckpt-*.index"))) == [
        "ckpt-8.index"]
    for step in (4, 8):
        reader = tf.train.load_checkpoint(str(tmp_path / "a" / "kept" / f"ckpt-{step}"))
        assert reader.get_tensor("global_step/.ATTRIBUTES/VARIABLE_VALUE") == step
    assert not glob.glob(str(tmp_path / "a" / "kept" / "ckpt-[26].index"))

    with data_fixtures.killed_after(4), pytest.raises(data_fixtures.Killed):
        _run(_args(records, tmp_path / "b", *common))
    resumed = _run(_args(records, tmp_path / "b", *common))["history"]
    assert [r["step"] for r in resumed] == [6, 8]
    # train_history.json was appended loop by loop: the killed run's loops, then the resumed run's
    logged = [json.loads(line) for line in open(tmp_path / "b" / "train_history.json")]
    assert [r["step"] for r in logged] == [2, 4, 6, 8]
    for a, b in zip(straight[2:], resumed):
        assert a["step"] == b["step"]
        assert abs(a["loss"] - b["loss"]) < 1e-5, (a, b)
        assert abs(a["grad_norm"] - b["grad_norm"]) < 1e-4 * max(1.0, a["grad_norm"])


def test_mems_flow(records):
    """Held-out loss with memories carried differs from the loss with memories reset every batch,
    and a training step leaves non-zero memories behind."""
    import keras

    from xlnet_tf.training import distribute, optimization, loop as training
    from xlnet_tf.config import XLNetConfig
    from xlnet_tf.models import XLNetPretrainer

    keras.utils.set_random_seed(0)
    config = XLNetConfig(n_token=data_fixtures.TINY_VOCAB, n_layer=2, d_model=32, n_head=2, d_head=16,
                         d_inner=64, mem_len=16, reuse_len=16, bi_data=True, dropout=0.0, dropatt=0.0,
                         initializer_range=0.3)
    model = XLNetPretrainer(config)
    batches = list(pretrain_data.pretrain_dataset(records["heldout"], **DATA, num_replicas=1).take(4))
    zeros = [tf.zeros([4, 16, 32]) for _ in range(config.n_layer)]
    carried, zeroed, mems = [], [], zeros
    for features in batches:
        out = model(features, mems=mems)
        carried.append(float(model.task_loss(features, out)))
        mems = out["new_mems"]
        zeroed.append(float(model.task_loss(features, model(features, mems=zeros))))
    assert carried[0] == zeroed[0]
    assert all(abs(a - b) > 1e-3 * abs(b) for a, b in zip(carried[1:], zeroed[1:])), (carried, zeroed)

    strategy = distribute.get_strategy("default")
    optimizer = optimization.create_optimizer(model, learning_rate=1e-3, train_steps=4)
    loop = training.TrainLoopConfig(model_dir=data_fixtures.tmp_root() + "/mems_flow", train_steps=2,
                                    steps_per_loop=2, save_steps=2)
    trainer = training.Trainer(strategy, model, optimizer, training.plm_loss_fn,
                               lambda ctx, start: pretrain_data.pretrain_dataset(
                                   records["train"], **DATA, input_context=ctx, repeat=True),
                               loop, mem_len=16, per_replica_batch=4, log=lambda line: None)
    assert float(tf.reduce_max(tf.abs(trainer.mems.local))) == 0.0
    trainer.train()
    assert float(tf.reduce_max(tf.abs(trainer.mems.local))) > 0.0
    assert float(tf.reduce_max(tf.abs(trainer.mems.saved))) > 0.0  # checkpointed


def test_dataset_is_static_and_step_compiles_with_xla(records):
    import keras

    from xlnet_tf.config import XLNetConfig
    from xlnet_tf.models import XLNetPretrainer

    ds = pretrain_data.pretrain_dataset(records["train"], **DATA, num_replicas=1, repeat=True)
    for name, spec in ds.element_spec.items():
        assert spec.shape.is_fully_defined(), name
    keras.utils.set_random_seed(0)
    config = XLNetConfig(n_token=data_fixtures.TINY_VOCAB, n_layer=1, d_model=16, n_head=2, d_head=8,
                         d_inner=32, mem_len=16, reuse_len=16, bi_data=True)
    model = XLNetPretrainer(config)

    @tf.function(jit_compile=True)
    def step(features, mems):
        with tf.GradientTape() as tape:
            out = model(features, mems=mems, training=True)
            loss = model.task_loss(features, out)
        return loss, tape.gradient(loss, model.trainable_variables), out["new_mems"]

    features = next(iter(ds))
    mems = [tf.zeros([4, 16, 16]) for _ in range(config.n_layer)]
    loss, grads, new_mems = step(features, mems)
    assert np.isfinite(float(loss)) and all(g is not None for g in grads)
    compiled = step.experimental_get_compiler_ir(features, mems)(stage="hlo")
    assert "HloModule" in compiled


def test_manifest_mismatch_is_caught_before_building(records, tmp_path):
    with pytest.raises(ManifestError, match="seq_len"):
        _run(_args(records, tmp_path / "m", "--seq_len=64"))
    with pytest.raises(ManifestError, match="global_batch_size"):
        _run(_args(records, tmp_path / "m", "--train_batch_size=8"))
    assert not os.path.exists(tmp_path / "m" / "xlnet_config.json")


def test_unknown_flag_and_flagfiles(tmp_path):
    from run import pretrain

    from xlnet_tf.errors import UserError

    with pytest.raises(UserError, match="--record_dir"):
        _run(MODEL_FLAGS + [f"--model_dir={tmp_path}"])

    from run import common_flags

    def parse(*argv):
        return common_flags.parse(pretrain.FLAGS, pretrain.define_flags, ["pretrain.py", *argv])

    try:
        with pytest.raises(flags.UnrecognizedFlagError):
            parse("--record_dir=x", "--model_dir=y", "--learning_rat=1")
        for name in ("demo_pretrain", "pretrain_base", "pretrain_large", "pretrain_cpu", "pretrain_gpu"):
            fv = parse(f"--flagfile={REPO}/run/flags/{name}.flags", "--record_dir=x", "--model_dir=y")
            assert fv.seq_len > 0 and fv.train_steps > 0
        fv = parse(f"--flagfile={REPO}/run/flags/pretrain_large.flags", "--record_dir=x", "--model_dir=y")
        assert (fv.seq_len, fv.reuse_len, fv.mem_len, fv.perm_size, fv.num_predict, fv.n_layer, fv.d_model) == (
            512, 256, 384, 256, 85, 24, 1024)
    finally:
        pretrain.FLAGS.unparse_flags()


@pytest.mark.slow  # the default run has tests/training/test_distributed.py::test_mirrored_two_replicas_equal_one_device
def test_mirrored_two_replicas_in_a_subprocess(tmp_path):
    """MirroredStrategy over 2 logical CPUs (one strategy per process, hence the subprocess)."""
    train = _build("train", "austen_moby_slice.txt", num_replicas=2)
    cmd = [sys.executable, os.path.join(REPO, "run", "pretrain.py"), *MODEL_FLAGS,
           f"--record_dir={train}", f"--model_dir={tmp_path / 'm'}", "--strategy=mirrored",
           "--num_cpu_replicas=2", "--train_steps=4", "--steps_per_loop=2", "--save_steps=2", "--warmup_steps=2"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "step 4/4" in proc.stdout
    reader = tf.train.load_checkpoint(str(tmp_path / "m" / "ckpt-4"))
    assert reader.get_tensor("mems/.ATTRIBUTES/VARIABLE_VALUE").shape == (2, 2, 2, 16, 32)
