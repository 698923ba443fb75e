"""Shared, cached fixtures for the tfrecords/tokenization tests (not a conftest).

A tiny SentencePiece model (vocab 1000) is trained once per test process on the corpus
slice in tests/data/corpus/; small record sets are built once per parameter set.
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import os
import shutil
import sys
import tempfile

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if REPO_ROOT not in sys.path:
    sys.path.insert(0, REPO_ROOT)
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

DATA_DIR = os.path.join(REPO_ROOT, "tests", "data")
CORPUS_DIR = os.path.join(DATA_DIR, "corpus")
CORPUS_GLOB = os.path.join(CORPUS_DIR, "*.txt")
TINY_VOCAB = 1000

_TMP = tempfile.mkdtemp(prefix="xlnet_tfrecords_tests_")
atexit.register(shutil.rmtree, _TMP, ignore_errors=True)


def tmp_root() -> str:
    return _TMP


@functools.lru_cache(maxsize=None)
def tiny_spm(uncased: bool = False) -> str:
    """Path of a SentencePiece model trained on the test corpus (cached)."""
    from tfrecords.readers import corpus
    from tfrecords import spm

    prefix = os.path.join(_TMP, f"spm_{'uncased' if uncased else 'cased'}", "sp")
    return spm.train_spm(corpus.expand_globs(CORPUS_GLOB), prefix, vocab_size=TINY_VOCAB,
                         uncased=uncased)


@functools.lru_cache(maxsize=None)
def tiny_tokenizer():
    from xlnet_tf.text.tokenization import XLNetTokenizer

    return XLNetTokenizer(tiny_spm())


SMALL = dict(seq_len=64, reuse_len=32, num_predict=10, perm_size=16, global_batch_size=8,
             num_replicas=2, num_shards=3, num_passes=2, bi_data=True, seed=7)


def small_config(**overrides):
    from tfrecords.pretrain.writer import PretrainConfig

    return PretrainConfig(**{**SMALL, **overrides})


@functools.lru_cache(maxsize=None)
def _built(items: tuple, num_processes: int) -> str:
    from tfrecords.pretrain import writer as pretrain_data

    cfg = small_config(**dict(items))
    out = tempfile.mkdtemp(prefix="records_", dir=_TMP)
    pretrain_data.build_pretrain_records(CORPUS_GLOB, tiny_spm(), out, cfg,
                                         num_processes=num_processes, log=None)
    return out


def built_records(num_processes: int = 1, **overrides) -> str:
    """Directory of a record set built with `small_config(**overrides)` (cached; treat as
    read-only)."""
    return _built(tuple(sorted(overrides.items())), num_processes)


def run_with_flags(module, args):
    """Parse `args` as the command line of runner `module` into its own flags (reset to the defaults
    afterwards) and return `module.run()`."""
    from run import common_flags

    fv = common_flags.parse(module.FLAGS, module.define_flags, [module.__name__] + list(args))
    try:
        return common_flags.start(fv, module.run)
    finally:
        fv.unparse_flags()


def snapshot(directory) -> dict:
    """{relative path: bytes} of every file under `directory` (what "nothing changed on disk" compares)."""
    out = {}
    for root, _, files in os.walk(directory):
        for name in files:
            path = os.path.join(root, name)
            with open(path, "rb") as f:
                out[os.path.relpath(path, directory)] = f.read()
    return out


class Killed(Exception):
    """Raised by `killed_after`: the process "dies" at the end of a host loop."""


@contextlib.contextmanager
def killed_after(step: int):
    """Inside, every `training.Trainer.train` raises `Killed` at the end of the host loop that reaches `step` (after
    that loop's checkpoint is saved), as a run killed there would stop; the Trainer is restored on leaving."""
    from xlnet_tf.training import loop as training

    original_train = training.Trainer.train

    def train_then_die(self, on_loop_end=None):
        def die(reached):
            if reached == step:
                raise Killed()
        return original_train(self, on_loop_end=die)

    training.Trainer.train = train_then_die
    try:
        yield
    finally:
        training.Trainer.train = original_train
