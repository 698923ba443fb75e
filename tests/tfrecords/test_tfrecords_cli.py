"""The CLIs: build_pretrain.py (incl. a killed build that resumes) and inspect_records.py."""

import filecmp
import os
import signal
import subprocess
import sys
import time

from tests import data_fixtures as F

CFG = dict(num_passes=2, num_shards=6)


def _env():
    return dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", CUDA_VISIBLE_DEVICES="-1")


def _build_args(out, **extra):
    c = F.small_config(**CFG)
    args = [f"--input_glob={F.CORPUS_GLOB}", f"--spiece_model={F.tiny_spm()}",
            f"--output_dir={out}", f"--seq_len={c.seq_len}", f"--reuse_len={c.reuse_len}",
            f"--num_predict={c.num_predict}", f"--perm_size={c.perm_size}",
            f"--global_batch_size={c.global_batch_size}", f"--num_replicas={c.num_replicas}",
            f"--num_shards={c.num_shards}", f"--num_passes={c.num_passes}", f"--seed={c.seed}",
            "--bi_data" if c.bi_data else "--nobi_data"]
    return args + [f"--{k}={v}" for k, v in extra.items()]


def _run(args, timeout=180):
    return subprocess.run([sys.executable] + args, cwd=F.REPO_ROOT, env=_env(),
                          capture_output=True, text=True, timeout=timeout)


def test_killed_build_resumes_to_identical_records(tmp_path):
    out = str(tmp_path / "cli")
    proc = subprocess.Popen([sys.executable, "tfrecords/build_pretrain.py"] + _build_args(out),
                            cwd=F.REPO_ROOT, env=_env(), stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    deadline = time.time() + 600  # a bound on a hang, not a timing: the loop ends at the first shard
    done = []
    try:
        while time.time() < deadline and proc.poll() is None:
            if os.path.isdir(out):
                done = [n for n in os.listdir(out) if n.endswith(".tfrecord")]
                if done:
                    break
            time.sleep(0.02)
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGKILL)
        proc.wait()
    assert done, "the build wrote no shard before the deadline"
    killed_early = not os.path.isfile(os.path.join(out, "manifest.json"))
    r = _run(["-m", "tfrecords.build_pretrain"] + _build_args(out))
    assert r.returncode == 0, r.stderr[-2000:]
    assert "skip finished" in r.stdout and "manifest.json:" in r.stdout
    assert "examples" in r.stdout and "/s" in r.stdout  # progress lines
    ref = F.built_records(**CFG)
    names = sorted(n for n in os.listdir(ref) if n.endswith(".tfrecord") or n == "manifest.json")
    assert names == sorted(n for n in os.listdir(out)
                           if n.endswith(".tfrecord") or n == "manifest.json")
    for n in names:
        assert filecmp.cmp(os.path.join(ref, n), os.path.join(out, n), shallow=False), n
    assert not [n for n in os.listdir(out) if ".tmp" in n]
    assert killed_early  # the kill landed mid-build (else this test proves less)


def test_cli_errors():
    r = _run(["tfrecords/build_pretrain.py", "--no_such_flag=3"] + _build_args("/tmp/x"))
    assert r.returncode != 0 and "no_such_flag" in r.stderr
    r = _run(["tfrecords/build_pretrain.py"] + _build_args("/tmp/never", perm_size=12))
    assert r.returncode == 2
    assert r.stderr.strip().splitlines()[-1].startswith("build_pretrain.py: error: perm_size=12 must divide both halves")
    assert "Traceback" not in r.stderr


def test_inspect_cli():
    d = F.built_records(**CFG)
    r = _run(["tfrecords/inspect_records.py", d, "--index=9", "--max_examples=500"])
    assert r.returncode == 0, r.stderr[-2000:]
    assert "example #9: step 1, row 1 (forward), replica 0" in r.stdout
    assert "factorization order, reuse part" in r.stdout
    assert "summary over 500 examples (all invariants hold)" in r.stdout
    assert "'<cls>' F" in r.stdout  # pieces are shown
    r = _run(["tfrecords/inspect_records.py", "/nonexistent_dir"])
    assert r.returncode == 2 and "does not exist" in r.stderr
