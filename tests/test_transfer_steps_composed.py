"""bench/transfer_steps.py: the transfer gain against pretraining steps, composed from transfer reports."""

import json
import math
import os
import subprocess
import sys

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def report(rows, heldout):
    return {"rows": rows, "pretrain_heldout": {"plm": [{"step": s, "loss": l} for s, l in heldout]}}


def row(task, metric, **cells):
    out = {"task": task, "metric": metric, "primary": not metric.startswith("test_"), "baseline": 80.0}
    for init, runs in cells.items():
        init = init.replace("_at_", "@")
        out[init] = sum(runs) / len(runs)
        out[f"{init}_std"] = (math.sqrt(sum((r - out[init]) ** 2 for r in runs) / (len(runs) - 1))
                              if len(runs) > 1 else None)
        out[f"{init}_seeds"], out[f"{init}_runs"], out[f"{init}_best_lr"] = len(runs), runs, "1e-4"
    return out


def run(tmp_path, **reports):
    paths = {}
    for name in ("indomain", "indomain_steps", "ood", "ood_steps"):
        paths[name] = str(tmp_path / f"{name}.json")
        if name in reports:
            with open(paths[name], "w") as f:
                json.dump(reports[name], f)
    prefix = str(tmp_path / "out")
    proc = subprocess.run([sys.executable, "bench/transfer_steps.py", *(f"--{k}_report={v}" for k, v in paths.items()),
                           f"--output_prefix={prefix}"], cwd=REPO, capture_output=True, text=True)
    return proc, prefix


def test_gains_are_taken_against_the_same_tables_scratch(tmp_path):
    ood = report([row("tweets", "accuracy", scratch=[80, 82, 84], plm=[81, 82, 83]),
                  row("tweets", "test_accuracy", scratch=[80, 82, 84], plm=[78, 79, 80])], [(0, 9.0), (3000, 4.7)])
    ood_steps = report([row("tweets", "test_accuracy", scratch=[80, 82, 84], plm_at_30000=[85, 86, 87],
                            plm_at_9000=[82, 83, 84])], [(0, 9.0), (9000, 4.3), (30000, 4.0)])
    indomain = report([row("topic", "accuracy", scratch=[60, 62], plm=[70, 72])], [(3000, 4.7)])
    indomain_steps = report([row("topic", "accuracy", scratch=[50, 52], plm_at_9000=[75, 77])], [(9000, 4.3)])
    proc, prefix = run(tmp_path, ood=ood, ood_steps=ood_steps, indomain=indomain, indomain_steps=indomain_steps)
    assert proc.returncode == 0, proc.stderr
    out = json.load(open(prefix + ".json"))
    rows = {r["task"]: r for r in out["rows"]}
    tweets = rows["tweets"]
    assert [(p["run"], p["step"]) for p in tweets["points"]] == [
        ("1x recipe (annealed)", 3000), ("10x recipe", 9000), ("10x recipe", 30000)]
    assert tweets["points"][0]["gain"]["gain"] == pytest.approx(79 - 82)
    assert tweets["points"][0]["gain"]["se"] == pytest.approx(math.sqrt(1 / 3 + 4 / 3))
    assert tweets["points"][2]["gain"]["gain"] == pytest.approx(86 - 82)
    assert tweets["points"][1]["heldout_loss"] == pytest.approx(4.3)
    topic = rows["topic"]  # the steps table's own scratch (50, 52) for its points, the base table's for 1x
    assert topic["points"][0]["gain"]["gain"] == pytest.approx(71 - 61)
    assert topic["points"][1]["gain"]["gain"] == pytest.approx(76 - 51)
    assert rows["spam"]["points"] == []
    assert out["missing"] == []
    md = open(prefix + ".md").read()
    assert "| tweets | out-of-domain | test_accuracy |" in md and "+4.0 ± " in md
    assert os.path.getsize(prefix + ".png") > 0


def test_missing_steps_reports_are_named_and_their_points_left_out(tmp_path):
    ood = report([row("spam", "test_accuracy", scratch=[96, 97], plm=[95, 96])], [(3000, 4.7)])
    proc, prefix = run(tmp_path, ood=ood)
    assert proc.returncode == 0, proc.stderr
    out = json.load(open(prefix + ".json"))
    assert len(out["missing"]) == 3
    assert [p["step"] for r in out["rows"] for p in r["points"]] == [3000]
    assert "Not yet made" in open(prefix + ".md").read()


def test_without_either_base_report_it_is_a_one_line_usage_error(tmp_path):
    proc, prefix = run(tmp_path)
    assert proc.returncode != 0
    assert "neither --indomain_report=" in proc.stderr
    assert not os.path.exists(prefix + ".json")


def test_a_file_that_is_not_a_report_is_named(tmp_path):
    proc, _ = run(tmp_path, ood={"runs": {}})
    assert proc.returncode != 0
    assert "ood.json: not a bench/transfer.py report" in proc.stderr


def shift_report(bits):
    return {"checkpoint": "ckpt", "rows": [{"set": name, "tokens": 100, "without_memories_bits_per_character": b,
                                            "without_memories_perplexity": 2 ** b} for name, b in bits.items()]}


def test_domain_shift_reports_add_each_sets_lm_loss_by_step(tmp_path):
    ood = report([row("tweets", "test_accuracy", scratch=[80, 82], plm=[81, 82])], [(3000, 4.7)])
    paths = []
    for label, bits in (("1x", {"heldout": 1.8, "tweets": 3.5}), ("6000", {"heldout": 1.7, "tweets": 3.6})):
        path = tmp_path / f"shift_{label}.json"
        path.write_text(json.dumps(shift_report(bits)))
        paths.append(f"{label}={path}")
    proc, prefix = run(tmp_path, ood=ood)
    assert proc.returncode == 0, proc.stderr
    proc = subprocess.run([sys.executable, "bench/transfer_steps.py", f"--ood_report={tmp_path / 'ood.json'}",
                           f"--indomain_report={tmp_path / 'none.json'}", "--domain_shift=" + ",".join(paths),
                           f"--output_prefix={prefix}"], cwd=REPO, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    out = json.load(open(prefix + ".json"))
    got = {(p["run"], p["step"], p["set"]): p["bits_per_character"] for p in out["domain_shift"]}
    assert got == {("1x recipe (annealed)", 3000, "heldout"): 1.8, ("1x recipe (annealed)", 3000, "tweets"): 3.5,
                   ("10x recipe", 6000, "heldout"): 1.7, ("10x recipe", 6000, "tweets"): 3.6}
    assert "| tweets | 3.500 | 3.600 |" in open(prefix + ".md").read()


@pytest.mark.parametrize("entry, message", [("6000", "is not LABEL=PATH"), ("late=x.json", "is not LABEL=PATH"),
                                            ("6000=/nonexistent.json", "does not exist")])
def test_a_bad_domain_shift_entry_is_named(tmp_path, entry, message):
    ood = report([row("tweets", "test_accuracy", scratch=[80, 82], plm=[81, 82])], [(3000, 4.7)])
    (tmp_path / "ood.json").write_text(json.dumps(ood))
    proc = subprocess.run([sys.executable, "bench/transfer_steps.py", f"--ood_report={tmp_path / 'ood.json'}",
                           f"--domain_shift={entry}", f"--output_prefix={tmp_path / 'out'}"],
                          cwd=REPO, capture_output=True, text=True)
    assert proc.returncode != 0 and message in proc.stderr
    assert not os.path.exists(tmp_path / "out.json")
