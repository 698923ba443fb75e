"""The estimator-style loop: a trainer process only trains, a sidecar evaluator process (`--mode=continuous_eval`)
evaluates each checkpoint as it appears and exports every new best as the next TF Serving version."""

import glob
import json
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

from tests import data_fixtures, fresh_serving

REPO = data_fixtures.REPO_ROOT
TOPIC = os.path.join(REPO, "data", "finetune", "topic")


def test_the_watcher_yields_each_new_checkpoint_once_and_stops_at_the_final_step(tmp_path):
    from xlnet_tf.training import sidecar

    appearing = [["ckpt-2"], ["ckpt-2"], ["ckpt-2", "ckpt-4", "ckpt-6"], ["ckpt-4", "ckpt-6", "ckpt-8"]]
    calls = {"n": 0}

    def listing(_):
        return list(appearing[min(calls["n"], len(appearing) - 1)])

    def sleep(_):
        calls["n"] += 1

    step = lambda p: int(p.split("-")[1])  # noqa: E731
    got = list(sidecar.watch_checkpoints(str(tmp_path), listing, step, evaluated=[4], final_step=8, poll_seconds=0,
                                         timeout_seconds=100, log=lambda _: None, sleep=sleep, clock=lambda: 0.0))
    assert got == ["ckpt-2", "ckpt-6", "ckpt-8"]  # 4 was evaluated before a restart; 8 is the final step
    clock = iter(range(0, 1000, 10))
    got = list(sidecar.watch_checkpoints(str(tmp_path), lambda _: [], step, evaluated=[], final_step=8,
                                         poll_seconds=0, timeout_seconds=30, log=lambda _: None, sleep=lambda _: None,
                                         clock=lambda: next(clock)))
    assert got == []  # nothing new for longer than the timeout: stops
    sidecar.write_training_done(str(tmp_path), 4)  # the trainer finished early (fewer steps than --train_steps)
    got = list(sidecar.watch_checkpoints(str(tmp_path), lambda _: ["ckpt-2", "ckpt-4"], step, evaluated=[2],
                                         final_step=8, poll_seconds=0, timeout_seconds=30, log=lambda _: None,
                                         sleep=lambda _: None, clock=lambda: 0.0))
    assert got == ["ckpt-4"]


def _runner(flags, log):
    return subprocess.Popen([sys.executable, os.path.join(REPO, "run", "run_classifier.py"), *flags], cwd=REPO,
                            stdout=log, stderr=subprocess.STDOUT, text=True)


@pytest.mark.slow  # three processes compile and export (about a minute and a half on two cores)
def test_trainer_and_sidecar_evaluator_serve_the_best_checkpoint(tmp_path):
    from tfrecords import classifier_data
    from tfrecords.readers import processors
    from xlnet_tf.training import finetuning, sidecar
    from xlnet_tf.models import XLNetClassifier

    spm = data_fixtures.tiny_spm()
    records = str(tmp_path / "records")  # built first: the trainer and the evaluator only read them
    classifier_data.build_classifier_records(processors.get_processor("tsv"), TOPIC, spm, records, max_seq_length=32,
                                             splits=("train", "dev"), eval_batch_size=16)
    model = str(tmp_path / "model")
    common = ["--n_layer=1", "--d_model=32", "--n_head=2", "--d_head=16", "--d_inner=64",
              f"--n_token={data_fixtures.TINY_VOCAB}", f"--spiece_model_file={spm}", "--max_seq_length=32",
              "--task=tsv", f"--record_dir={records}", f"--model_dir={model}", "--train_steps=24",
              "--eval_batch_size=16"]
    trainer_flags = common + ["--do_train", "--train_batch_size=16", "--steps_per_loop=4", "--save_steps=4",
                              "--keep_checkpoints=10", "--learning_rate=2e-2", "--warmup_steps=2"]
    evaluator_flags = common + ["--mode=continuous_eval", f"--export_dir={tmp_path}/export", "--exports_to_keep=3",
                                "--eval_poll_seconds=0.5", "--eval_timeout_seconds=240"]
    with open(tmp_path / "trainer.log", "w") as tlog, open(tmp_path / "evaluator.log", "w") as elog:
        trainer = _runner(trainer_flags, tlog)
        evaluator = _runner(evaluator_flags, elog)
        results = os.path.join(model, "eval_results.json")
        deadline = time.time() + 300
        while time.time() < deadline and not (os.path.exists(results) and json.load(open(results))["evaluations"]):
            time.sleep(0.5)
        evaluator.send_signal(signal.SIGKILL)  # killed after its first evaluation
        evaluator.wait()
        evaluator = _runner(evaluator_flags, elog)
        assert trainer.wait(timeout=600) == 0, open(tmp_path / "trainer.log").read()[-3000:]
        assert evaluator.wait(timeout=600) == 0, open(tmp_path / "evaluator.log").read()[-3000:]

    history = json.load(open(results))
    steps = [e["step"] for e in history["evaluations"] if e["split"] == "dev"]
    assert steps == [4, 8, 12, 16, 20, 24], steps  # every checkpoint once, none repeated across the restart
    assert sidecar.training_done_step(model) == 24
    assert glob.glob(os.path.join(model, "eval", "events.out.tfevents.*"))  # TensorBoard: eval/ beside train/

    exported = sidecar.exported_steps(str(tmp_path / "export"))
    assert 1 <= len(exported) <= 3  # --exports_to_keep
    accuracy = {e["step"]: e["accuracy"] for e in history["evaluations"]}
    ordered = [exported[v] for v in sorted(exported)]
    assert all(accuracy[a] < accuracy[b] for a, b in zip(ordered, ordered[1:]))  # each version improves
    top = max(exported)
    assert exported[top] == history["best"]["dev"]["step"]  # the highest version is the best checkpoint
    for version in exported:  # complete versions only
        path = os.path.join(tmp_path, "export", str(version))
        for part in ("saved_model.pb", "variables", "assets.extra/tf_serving_warmup_requests",
                     f"assets.extra/{sidecar.PROVENANCE}"):
            assert os.path.exists(os.path.join(path, part)), (version, part)
    # a fresh process serving the highest version computes what the best checkpoint computes
    texts = ["The battle of the river was fought in the spring.", "Cells divide by mitosis."]
    out, errors = fresh_serving.serve(os.path.join(tmp_path, "export", str(top)),
                                      {"dev": {"signature": "serving_default", "args": {"text": texts}}},
                                      tmp_path / "serve")
    assert not errors
    best = XLNetClassifier.from_checkpoint(model, require_heads=True)
    finetuning.restore_weights(best, sidecar.PROVENANCE_FILE.read(os.path.join(
        tmp_path, "export", str(top), "assets.extra", sidecar.PROVENANCE))["checkpoint"])
    expected = best.predict(texts)["logits"]
    np.testing.assert_allclose(out["dev/logits"], np.asarray(expected), atol=1e-4)


def test_a_pretraining_sidecar_scores_each_checkpoint_once(tmp_path, capsys):
    """The trainer pretrains without held-out records; the evaluator (`--mode=continuous_eval`) then gives the
    held-out loss of each checkpoint once, and a second evaluator over the same run adds nothing."""
    from run import pretrain
    from tests.run.test_bad_inputs_pretraining import PRETRAIN, _records
    from xlnet_tf.artifacts import results
    from xlnet_tf.training import sidecar

    records, model = _records("plm"), str(tmp_path / "m")
    trainer = PRETRAIN + [f"--record_dir={records}", f"--model_dir={model}", f"--spiece_model={data_fixtures.tiny_spm()}",
                          "--train_steps=4", "--save_steps=2", "--steps_per_loop=2"]
    data_fixtures.run_with_flags(pretrain, trainer)
    assert sidecar.training_done_step(model) == 4
    evaluator = [a for a in trainer if not a.startswith("--record_dir")] + [
        "--mode=continuous_eval", f"--eval_records_dir={records}", "--eval_poll_seconds=0", "--eval_timeout_seconds=0"]
    data_fixtures.run_with_flags(pretrain, evaluator)
    history = results.load(model)
    assert [e["step"] for e in history.evaluations if e["split"] == "heldout"] == [2, 4]
    assert all(np.isfinite(e["loss"]) for e in history.evaluations)
    data_fixtures.run_with_flags(pretrain, evaluator)  # restarted: nothing is evaluated twice
    assert [e["step"] for e in results.load(model).evaluations] == [2, 4]
    assert glob.glob(os.path.join(model, "eval", "events.out.tfevents.*"))
