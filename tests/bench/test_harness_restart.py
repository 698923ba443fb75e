"""harness.py --bfloat16_fusible restarts its process with the fusible TF_XLA_FLAGS: the same command line, only
when they are missing, and never when the harness is not the process's main module (it would replace its
caller)."""

import os
import sys
import types

import pytest

from bench.speed import harness
from xlnet_tf.errors import UserError
from xlnet_tf.training import xla_clustering


@pytest.fixture
def execs(monkeypatch):
    calls = []
    monkeypatch.setattr(os, "execv", lambda path, argv: calls.append((path, list(argv))))
    monkeypatch.setattr(sys, "orig_argv", ["python", "-X", "utf8", "-m", "bench.speed.harness", "--bfloat16_fusible"])
    monkeypatch.setitem(sys.modules, "__main__", types.SimpleNamespace(__spec__=types.SimpleNamespace(
        name="bench.speed.harness")))
    return calls


def test_it_restarts_with_the_flags_and_the_same_command_line(execs, monkeypatch):
    monkeypatch.setenv("TF_XLA_FLAGS", "--tf_xla_min_cluster_size=4")
    harness.restart_with_fusible_clustering()
    assert execs == [(sys.executable, ["python", "-X", "utf8", "-m", "bench.speed.harness", "--bfloat16_fusible"])]
    assert xla_clustering.flags_present(os.environ["TF_XLA_FLAGS"])
    assert os.environ["TF_XLA_FLAGS"].startswith("--tf_xla_min_cluster_size=4 ")
    assert harness.REPO in os.environ["PYTHONPATH"].split(os.pathsep)


def test_it_does_not_restart_when_the_flags_are_set(execs, monkeypatch):
    monkeypatch.setenv("TF_XLA_FLAGS", " ".join(xla_clustering.FUSIBLE_FLAGS))
    harness.restart_with_fusible_clustering()
    assert execs == []


def test_it_refuses_to_replace_a_process_that_imported_it(execs, monkeypatch):
    monkeypatch.delenv("TF_XLA_FLAGS", raising=False)
    monkeypatch.setitem(sys.modules, "__main__", types.SimpleNamespace(__spec__=None))
    with pytest.raises(UserError, match="run the harness as its own process"):
        harness.restart_with_fusible_clustering()
    assert execs == []
