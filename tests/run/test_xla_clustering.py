"""`--xla_clustering=fusible` reaches TensorFlow: set in the runner's process before TensorFlow loads.

The refusals (with --jit_compile, or once TensorFlow is loaded in the process) are rows of test_refusals.py."""

import os
import subprocess
import sys

from tests import data_fixtures

REPO = data_fixtures.REPO_ROOT
TINY = ["--n_layer=1", "--d_model=32", "--n_head=2", "--d_head=16", "--d_inner=64",
        f"--n_token={data_fixtures.TINY_VOCAB}", "--max_seq_length=32", "--task=tsv", "--train_batch_size=8",
        "--train_steps=2", "--steps_per_loop=1", "--save_steps=2", "--do_train", "--nojit_compile"]
COMPILED = "Compiled cluster using XLA"  # TensorFlow's log line when it compiles a cluster (once a process)


def _train(tmp_path, name, extra):
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="0")
    env.pop("TF_XLA_FLAGS", None)
    args = [sys.executable, "run/run_classifier.py", *TINY, f"--spiece_model_file={data_fixtures.tiny_spm()}",
            f"--data_dir={os.path.join(REPO, 'data', 'finetune', 'topic')}", f"--record_dir={tmp_path}/records",
            f"--model_dir={tmp_path}/{name}", *extra]
    out = subprocess.run(args, cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    assert os.path.exists(os.path.join(tmp_path, name, "training_done.json"))
    return out.stderr


def test_fusible_clustering_compiles_clusters_only_when_asked(tmp_path):
    assert COMPILED in _train(tmp_path, "fusible", ["--xla_clustering=fusible"])
    assert COMPILED not in _train(tmp_path, "plain", [])
