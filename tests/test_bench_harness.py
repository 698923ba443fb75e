"""bench/run.py end to end at a tiny size: every row of the report is produced and well formed.

Speed itself is never asserted (see bench/); this only keeps the harness runnable. torch.compile takes about a
minute per row on two busy cores even at these sizes, so the default run times HF eager only and the
compiled reference is `test_compiled_reference` (slow); the choice of the fastest is tested on its own.
"""

import json
import os
import platform
import subprocess
import sys

import pytest

from tests import data_fixtures
from bench import variants


def _run(tmp_path, *flags):
    cmd = [sys.executable, os.path.join(data_fixtures.REPO_ROOT, "bench", "run.py"), "--n_layer=1", "--d_model=64",
           "--batch=2", "--seq_lens=16", "--repeats=1", "--no-base_config", "--peak_sizes=64,128",
           f"--output_dir={tmp_path}", *flags]
    subprocess.run(cmd, check=True, capture_output=True, text=True, timeout=1200)
    return json.load(open(tmp_path / "report.json")), open(tmp_path / "report.md").read()


def _check_reference(row, names):
    """The reference is the fastest of the variants HF ran, and the ratio is against it."""
    times = row["reference_variants_ms"]
    assert set(times) | set(row.get("reference_failures", {})) == set(names) and times
    assert row["reference_ms"] == min(times.values()) and times[row["reference_variant"]] == row["reference_ms"]
    if "vs_production" not in row:  # an A/B row's ratio is the production ratio times its paired vs_production
        assert row["ratio"] == pytest.approx(row["reference_ms"] / row["ours_ms"], rel=0.05)


def _check_peak(peak, backends):
    assert set(peak["backends"]) == set(backends)
    assert all(set(by_n) == {"64", "128"} and min(by_n.values()) >= 0 for by_n in peak["backends"].values())
    assert peak["best"] > 0 and peak["best"] == max(g for by_n in peak["backends"].values() for g in by_n.values())
    assert peak["backends"][peak["best_backend"]][str(peak["best_n"])] == peak["best"]


def test_harness_writes_report(tmp_path):
    report, md = _run(tmp_path, "--suite=pretrain_step,input_pipeline,memory", "--reference_variants=eager")
    rows = report["rows"]
    m = report["machine"]
    assert m["cores"] >= 1 and m["cpu_kind"] in ("AMX", "AVX-512", "AVX2", "other")
    assert m["vector_extensions"] == " ".join(sorted(m["vector_extensions"].split()))
    if platform.machine() in ("x86_64", "AMD64"):
        assert "avx" in m["vector_extensions"].split() and m["cpu_kind"] != "other"
        assert report["reference"]["flush_denormal"] is True
    assert report["reference"]["variants"] == ["hf_eager"]
    _check_peak(report["peak_gflops"]["float32"], ("tf_xla", "tf_onednn", "torch", "numpy"))
    _check_peak(report["peak_gflops"]["bfloat16"], ("tf_xla", "tf_onednn", "torch"))
    plm = [r for r in rows if r["suite"] == "pretrain_step"]
    assert len(plm) == 7 and plm[0]["variant"].startswith("production")
    assert set(plm[0]["breakdown_ms"]) == {"forward", "backward_and_update"}
    assert all(r["ratio"] > 0 and r["reference_ms"] > 0 and r["mem_len"] == 8 for r in plm)
    for r in plm:
        _check_reference(r, ["hf_eager"])
    assert all("vs_production" in r for r in plm[1:])
    assert all(r["ratio"] == pytest.approx(plm[0]["ratio"] * r["vs_production"], rel=0.01) for r in plm[1:])
    names = " ".join(r["variant"] for r in plm)
    assert all(v in names for v in variants.VARIANTS if v != "production")
    pipeline = [r for r in rows if r["suite"] == "input_pipeline"]
    assert len(pipeline) == 3 and pipeline[0]["headroom"] > 0
    memory = [r for r in rows if r["suite"] == "memory"]
    assert len(memory) == 1 and memory[0]["ours_mb"] > 0 and memory[0]["reference_mb"] > 0
    assert md.count("\n| ") == len(rows) + 1 and "Measured dense matmul peak" in md
    assert "denormals flushed" in md and f"({m['cpu_kind']}; vector extensions: {m['vector_extensions']}" in md
    assert f"float32 {report['peak_gflops']['float32']['best']:.1f} GFLOP/s " \
           f"({report['peak_gflops']['float32']['best_backend']}, n = " in md


def test_reference_is_the_fastest_variant(monkeypatch):
    """The fastest working variant is the reference; failures are recorded, not fatal. Timed on a virtual
    clock (each callable advances it by its own cost), so the verdict never depends on the machine's load."""
    from bench import run

    clock = [0.0]
    monkeypatch.setattr(run.time, "perf_counter", lambda: clock[0])

    def costs(seconds):
        def call():
            clock[0] += seconds
        return call

    def builder(seconds):
        return lambda: costs(seconds)

    def broken():
        def fail():
            raise RuntimeError("no C++ compiler\nsecond line | with a pipe")
        return fail

    fields, ms, ours_ms = run.time_reference({"hf_eager": builder(0.03), "hf_compile": builder(0.005),
                                              "hf_other_compile": broken}, repeats=3, ours=costs(0.015))
    assert ours_ms == pytest.approx(15) and ms == pytest.approx(5)
    assert fields["reference_variant"] == "hf_compile"
    assert fields["reference_variants_ms"] == {"hf_eager": 30.0, "hf_compile": 5.0}
    assert fields["reference_ms"] == min(fields["reference_variants_ms"].values()) == round(ms, 1)
    assert fields["reference_failures"] == {"hf_other_compile": "RuntimeError: no C++ compiler"}
    # the compiled variant's warm-up: two calls of 5 ms (no torch graphs counted here)
    assert fields["reference_compile_s"] == {"hf_compile": 0.0}
    with pytest.raises(RuntimeError, match="no reference variant ran"):
        run.time_reference({"hf_compile": broken}, repeats=1)


def test_vector_extensions_and_cpu_kind():
    from bench import host as run  # bench/host.py: shared by every report

    cpuinfo = ("processor\t: 0\nflags\t\t: fpu sse2 avx2 fma avx avx512f avx512_bf16 amx_tile fma4 sha_ni\n"
               "processor\t: 1\nflags\t\t: fpu avx2\n")
    assert run.vector_extensions(cpuinfo) == "amx_tile avx avx2 avx512_bf16 avx512f fma fma4"
    assert run.cpu_kind(run.vector_extensions(cpuinfo)) == "AMX"
    assert run.cpu_kind("avx avx2 avx512f fma") == "AVX-512"
    assert run.cpu_kind("avx avx2 fma") == "AVX2" and run.cpu_kind("avx") == "other" and run.cpu_kind("") == "other"
    assert run.vector_extensions("") == ""


@pytest.mark.slow
def test_compiled_reference(tmp_path):
    """HF under torch.compile next to eager: both timed (or compile's failure recorded) and the ratio against
    the faster, in the training-step and the serving rows."""
    report, md = _run(tmp_path, "--suite=finetune_step,serving", "--reference_variants=eager,compile")
    rows = [r for r in report["rows"] if r["suite"] in ("finetune_step", "serving")]
    assert len(rows) == 6 and "hf_compile: torch.compile" in md
    for r in rows:
        _check_reference(r, ["hf_eager", "hf_compile"])
    for r in rows:
        assert "hf_compile" in r.get("reference_failures", {}) or r["reference_compile_s"]["hf_compile"] > 0
