"""tfrecords/spm.py: SentencePiece training with XLNet's special-id layout (+ CLI)."""

import os
import subprocess
import sys

import pytest
import sentencepiece as spm

from tests import data_fixtures
from tfrecords.readers import corpus
from tfrecords import spm as spm_lib
from xlnet_tf.text import tokenization as T


def test_trained_model_has_released_id_layout():
    sp = spm.SentencePieceProcessor(model_file=data_fixtures.tiny_spm())
    assert [sp.IdToPiece(i) for i in range(9)] == [
        "<unk>", "<s>", "</s>", "<cls>", "<sep>", "<pad>", "<mask>", "<eod>", "<eop>"]
    assert [sp.IdToPiece(i) for i in range(9, 17)] == list(spm_lib.USER_DEFINED_SYMBOLS[1:])
    assert sp.GetPieceSize() == data_fixtures.TINY_VOCAB
    # control symbols never come out of text; <eop> (user-defined) does
    ids = sp.encode("a <sep> b <eop>")
    assert T.SEP_ID not in ids and T.EOP_ID in ids


def test_training_is_deterministic_and_uncased_lowercases(tmp_path):
    files = corpus.expand_globs(data_fixtures.CORPUS_GLOB)
    a = spm_lib.train_spm(files, str(tmp_path / "a"), vocab_size=400)
    b = spm_lib.train_spm(files, str(tmp_path / "b"), vocab_size=400)
    assert T.file_sha256(a) == T.file_sha256(b)
    u = spm_lib.train_spm(files, str(tmp_path / "u"), vocab_size=400, uncased=True)
    sp = spm.SentencePieceProcessor(model_file=u)
    pieces = [sp.IdToPiece(i) for i in range(17, sp.GetPieceSize())]
    assert not any(p != p.lower() for p in pieces)


def test_empty_corpus_and_bad_utf8(tmp_path):
    empty = tmp_path / "empty.txt"
    empty.write_text("\n\n   \n", encoding="utf-8")
    with pytest.raises(ValueError, match="empty corpus"):
        spm_lib.train_spm([str(empty)], str(tmp_path / "m"), vocab_size=100)
    bad = tmp_path / "bad.txt"
    bad.write_bytes(b"good line\nbad \xff line\n")
    with pytest.raises(ValueError, match=r"bad\.txt: invalid UTF-8 at byte offset 14"):
        spm_lib.train_spm([str(bad)], str(tmp_path / "m"), vocab_size=100)
    with pytest.raises(ValueError, match="matches no files"):
        corpus.expand_globs(str(tmp_path / "nothing*.txt"))


def _run(args, **kw):
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    return subprocess.run([sys.executable] + args, cwd=data_fixtures.REPO_ROOT, env=env,
                          capture_output=True, text=True, timeout=120, **kw)


def test_cli(tmp_path):
    prefix = str(tmp_path / "cli" / "sp")
    r = _run(["tfrecords/spm.py", f"--input_glob={data_fixtures.CORPUS_GLOB}",
              f"--model_prefix={prefix}", "--vocab_size=300"])
    assert r.returncode == 0, r.stderr
    assert os.path.isfile(prefix + ".model") and "sha256" in r.stdout
    r = _run(["-m", "tfrecords.spm", f"--input_glob={data_fixtures.CORPUS_GLOB}",
              f"--model_prefix={prefix}", "--vocab_size=300", "--no_such_flag=1"])
    assert r.returncode != 0 and "no_such_flag" in r.stderr
