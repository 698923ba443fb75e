"""Distribution: 2 mirrored replicas (logical CPUs) and a 2-worker MultiWorkerMirroredStrategy on localhost
update the weights as one device with the same global batch. One strategy per process: subprocesses."""

import json
import os
import socket
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

from tests import data_fixtures
from tfrecords.pretrain import writer as pretrain_data

REPO = data_fixtures.REPO_ROOT
FLAGS = ["--n_layer=2", "--d_model=32", "--n_head=2", "--d_head=16", "--d_inner=64",
         f"--n_token={data_fixtures.TINY_VOCAB}", "--mem_len=16", "--seq_len=32", "--reuse_len=16",
         "--num_predict=6", "--perm_size=8", "--train_batch_size=4", "--bi_data=false", "--dropout=0.0",
         "--dropatt=0.0", "--learning_rate=1e-3", "--warmup_steps=0", "--train_steps=4", "--steps_per_loop=2",
         "--save_steps=2", "--adam_epsilon=1e-6"]


@pytest.fixture(scope="module")
def records():
    out = os.path.join(data_fixtures.tmp_root(), "distributed_records")
    if not os.path.exists(os.path.join(out, "manifest.json")):
        cfg = pretrain_data.PretrainConfig(seq_len=32, reuse_len=16, num_predict=6, perm_size=8,
                                           global_batch_size=4, num_replicas=1, bi_data=False, seed=5)
        pretrain_data.build_pretrain_records(os.path.join(data_fixtures.CORPUS_DIR, "austen_moby_slice.txt"),
                                             data_fixtures.tiny_spm(), out, cfg, log=None)
    return out


def _pretrain(model_dir, records, *extra, env=None):
    cmd = [sys.executable, os.path.join(REPO, "run", "pretrain.py"), *FLAGS, f"--record_dir={records}",
           f"--model_dir={model_dir}", *extra]
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", **(env or {})})


def _finish(proc, timeout=400):
    out, err = proc.communicate(timeout=timeout)
    assert proc.returncode == 0, err[-3000:]
    return out


def _weights(model_dir):
    reader = tf.train.load_checkpoint(os.path.join(model_dir, "final", "xlnet_model.ckpt"))
    return {n: reader.get_tensor(n) for n in reader.get_variable_to_shape_map()}


def _losses(model_dir):
    return [json.loads(line)["loss"] for line in open(os.path.join(model_dir, "train_history.json"))]


def _assert_same_training(a, b):
    wa, wb = _weights(a), _weights(b)
    assert set(wa) == set(wb)
    for name in wa:
        np.testing.assert_allclose(wa[name], wb[name], atol=2e-5, err_msg=name)
    np.testing.assert_allclose(_losses(a), _losses(b), atol=1e-5)


@pytest.fixture(scope="module")
def single_device(records, tmp_path_factory):
    model_dir = str(tmp_path_factory.mktemp("single"))
    _finish(_pretrain(model_dir, records))
    return model_dir


def test_mirrored_two_replicas_equal_one_device(records, single_device, tmp_path):
    _finish(_pretrain(str(tmp_path), records, "--strategy=mirrored", "--num_cpu_replicas=2"))
    _assert_same_training(single_device, str(tmp_path))


def _free_ports(n):
    sockets = [socket.socket() for _ in range(n)]
    for s in sockets:
        s.bind(("localhost", 0))
    ports = [s.getsockname()[1] for s in sockets]
    for s in sockets:
        s.close()
    return ports


@pytest.mark.slow
def test_two_workers_on_localhost_equal_one_device(records, single_device, tmp_path):
    workers = [f"localhost:{p}" for p in _free_ports(2)]
    procs = []
    for index in range(2):
        tf_config = json.dumps({"cluster": {"worker": workers}, "task": {"type": "worker", "index": index}})
        procs.append(_pretrain(str(tmp_path), records, "--strategy=multi_worker", env={"TF_CONFIG": tf_config}))
    for proc in procs:
        _finish(proc)
    _assert_same_training(single_device, str(tmp_path))
    assert os.path.exists(tmp_path / "ckpt-4.index")  # the chief's checkpoints are in model_dir
