"""bench/run.py end to end at a tiny size: every row of the report is produced and well formed.

Speed itself is never asserted (see bench/); this only keeps the harness runnable.
"""

import json
import os
import subprocess
import sys

from tests import data_fixtures
from bench import variants


def test_harness_writes_report(tmp_path):
    cmd = [sys.executable, os.path.join(data_fixtures.REPO_ROOT, "bench", "run.py"),
           "--suite=pretrain_step,memory", "--n_layer=1", "--d_model=64", "--batch=2",
           "--seq_lens=16", "--repeats=1", "--no-base_config", f"--output_dir={tmp_path}"]
    subprocess.run(cmd, check=True, capture_output=True, text=True, timeout=600)
    report = json.load(open(tmp_path / "report.json"))
    rows = report["rows"]
    assert report["peak_gflops"]["float32"]["best"] > 0 and report["machine"]["cores"] >= 1
    plm = [r for r in rows if r["suite"] == "pretrain_step"]
    assert len(plm) == 7 and plm[0]["variant"].startswith("production")
    assert set(plm[0]["breakdown_ms"]) == {"forward", "backward_and_update"}
    assert all(r["ratio"] > 0 and r["reference_ms"] > 0 and r["mem_len"] == 8 for r in plm)
    assert all("vs_production" in r for r in plm[1:])
    names = " ".join(r["variant"] for r in plm)
    assert all(v in names for v in variants.VARIANTS if v != "production")
    pipeline = [r for r in rows if r["suite"] == "input_pipeline"]
    assert len(pipeline) == 3 and pipeline[0]["headroom"] > 0
    memory = [r for r in rows if r["suite"] == "memory"]
    assert len(memory) == 1 and memory[0]["ours_mb"] > 0 and memory[0]["reference_mb"] > 0
    md = open(tmp_path / "report.md").read()
    assert md.count("\n| ") == len(rows) + 1 and "Measured dense matmul peak" in md
