"""bench/speed/dot_probe.py at tiny sizes: every probe runs, and the report names the CPU and every program."""

import json

import pytest

from bench import cli
from bench.speed import dot_probe
from xlnet_tf.errors import UserError


def run(*args):
    cli.parse(dot_probe.FLAGS, dot_probe.define_flags, args)
    return dot_probe.main()


def test_dot_probe_reports_every_program(tmp_path):
    out = str(tmp_path / "probe")
    report = run("--tiny", "--rounds=1", f"--output={out}")
    names = [r["name"] for r in report["attention"]]
    assert len(names) == 5 and names[0].startswith("NN") and names[-1].startswith("2-D")
    assert all(r["ms"] > 0 for r in report["attention"])
    assert [r["name"] for r in report["weights"]] == ["float32 weights", "bfloat16 weights"]
    # bfloat16 weights are half the bytes of the same matrices in float32
    f32, bf16 = report["weights"]
    assert bf16["bytes_per_iteration"] * 2 == f32["bytes_per_iteration"] == 4 * 4 * 16 * 32
    elementwise = [r["name"] for r in report["elementwise"]]
    assert len(elementwise) == 5 and all(r["ns_per_element"] > 0 for r in report["elementwise"])
    saved = json.load(open(out + ".json"))
    assert saved["machine"]["vector_extensions"] == report["machine"]["vector_extensions"]
    text = open(out + ".md").read()
    assert report["machine"]["cpu"] in text and "TN written as a transpose" in text
    assert "gelu in float32, rounded once to bfloat16" in text


def test_dot_probe_refuses_an_unknown_probe():
    with pytest.raises(UserError, match="--probes: unknown probe"):
        run("--probes=attention,gemm")
