"""bench.studies.transfer.transfer_steps: the transfer gain against pretraining steps, composed from transfer
reports."""

import json
import math
import os
import subprocess
import sys

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


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


def run(tmp_path, adapted=None, screens=None, **reports):
    """Runs the composer on these reports (the rest absent); `adapted` / `screens`: {label: report}."""
    paths = {}
    for name in ("indomain", "indomain_steps", "indomain_steps_3x", "ood", "ood_steps", "ood_steps_3x"):
        paths[name] = str(tmp_path / f"{name}.json")
        if name in reports:
            with open(paths[name], "w") as f:
                json.dump(reports[name], f)
    labelled = {}
    for flag, given in (("adapted_reports", adapted or {}), ("screen_reports", screens or {})):
        entries = []
        for label, content in given.items():
            path = tmp_path / f"{flag}_{label}.json"
            if content is not None:
                path.write_text(json.dumps(content))
            entries.append(f"{label}={path}")
        labelled[flag] = ",".join(entries)  # empty: none (the defaults name the committed reports)
    prefix = str(tmp_path / "out")
    proc = subprocess.run([sys.executable, "-m", "bench.studies.transfer.transfer_steps",
                           *(f"--{k}_report={v}" for k, v in paths.items()),
                           *(f"--{k}={v}" for k, v in labelled.items()), f"--output_prefix={prefix}"],
                          cwd=REPO, capture_output=True, text=True)
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
    assert [os.path.basename(p) for p in out["missing"]] == ["indomain_steps_3x.json", "ood_steps_3x.json"]
    md = open(prefix + ".md").read()
    assert "| tweets | out-of-domain | test_accuracy |" in md and "+4.0 ± " in md
    assert os.path.getsize(prefix + ".png") > 0


def test_the_3x_recipe_is_a_point_of_its_own_against_its_tables_scratch(tmp_path):
    ood = report([row("spam", "test_accuracy", scratch=[96, 97, 98], plm=[95, 96, 97])], [(3000, 4.7)])
    ood_3x = report([row("spam", "test_accuracy", scratch=[95, 96, 97], plm_at_9000=[98])],
                    [(0, 9.0), (3000, 4.9), (9000, 4.5)])
    proc, prefix = run(tmp_path, ood=ood, ood_steps_3x=ood_3x)
    assert proc.returncode == 0, proc.stderr
    out = json.load(open(prefix + ".json"))
    spam = next(r for r in out["rows"] if r["task"] == "spam")
    assert [(p["run"], p["step"]) for p in spam["points"]] == [
        ("1x recipe (annealed)", 3000), ("3x recipe (annealed at 9,000)", 9000)]
    assert spam["points"][1]["gain"] == {"gain": pytest.approx(98 - 96), "se": None}  # seed-0 screen: no spread
    assert spam["points"][1]["heldout_loss"] == pytest.approx(4.5)
    assert [r["step"] for r in out["heldout"]["3x"]] == [0, 3000, 9000] and out["heldout"]["10x"] == []
    assert "| spam | out-of-domain | test_accuracy | 97.0 ± 1.0 (n=3, lr 1e-4) | 3x recipe (annealed at 9,000) | " \
           "9,000 | 4.500 | 98.0 (n=1, lr 1e-4) | +2.0 |" in open(prefix + ".md").read()


def test_a_screens_one_seed_scratch_gives_way_to_the_base_tables_three(tmp_path):
    """A 3x screen that ran one rate restored only that rate's seed-0 scratch run; its PLM seeds are compared with
    the base table's scratch cell (three seeds at its own dev-chosen rate) instead."""
    ood = report([row("tweets", "test_accuracy", scratch=[84, 85, 86], plm=[84, 85, 85])], [(3000, 4.7)])
    ood_3x = report([row("tweets", "test_accuracy", scratch=[83], plm_at_9000=[86, 87, 88])], [(9000, 4.2)])
    proc, prefix = run(tmp_path, ood=ood, ood_steps_3x=ood_3x)
    assert proc.returncode == 0, proc.stderr
    point = json.load(open(prefix + ".json"))["rows"][1]["points"][1]
    assert point["run"].startswith("3x") and point["gain"]["gain"] == pytest.approx(87 - 85)
    assert point["gain"]["se"] == pytest.approx(math.sqrt(1 / 3 + 1 / 3))


def test_missing_steps_reports_are_named_and_their_points_left_out(tmp_path):
    ood = report([row("spam", "test_accuracy", scratch=[96, 97], plm=[95, 96])], [(3000, 4.7)])
    proc, prefix = run(tmp_path, ood=ood)
    assert proc.returncode == 0, proc.stderr
    out = json.load(open(prefix + ".json"))
    assert len(out["missing"]) == 5
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
    assert "ood.json: not a report of bench.studies.transfer.transfer" in proc.stderr


def shift_report(bits):
    return {"checkpoint": "ckpt", "rows": [{"set": name, "tokens": 100, "without_memories_bits_per_character": b,
                                            "without_memories_perplexity": 2 ** b} for name, b in bits.items()]}


def test_domain_shift_reports_add_each_sets_lm_loss_by_step(tmp_path):
    ood = report([row("tweets", "test_accuracy", scratch=[80, 82], plm=[81, 82])], [(3000, 4.7)])
    paths = []
    for label, bits in (("adapted-tweets", {"heldout": 1.9, "tweets": 2.9}), ("6000", {"heldout": 1.7, "tweets": 3.6}),
                        ("3x", {"heldout": 1.6, "tweets": 3.4}), ("1x", {"heldout": 1.8, "tweets": 3.5})):
        path = tmp_path / f"shift_{label}.json"
        path.write_text(json.dumps(shift_report(bits)))
        paths.append(f"{label}={path}")
    proc, prefix = run(tmp_path, ood=ood)
    assert proc.returncode == 0, proc.stderr
    proc = subprocess.run([sys.executable, "-m", "bench.studies.transfer.transfer_steps",
                           f"--ood_report={tmp_path / 'ood.json'}",
                           f"--indomain_report={tmp_path / 'none.json'}", "--domain_shift=" + ",".join(paths),
                           "--adapted_reports=", "--screen_reports=",
                           f"--output_prefix={prefix}"], cwd=REPO, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    out = json.load(open(prefix + ".json"))
    got = {(p["run"], p["step"], p["set"]): p["bits_per_character"] for p in out["domain_shift"]}
    assert got == {("1x recipe (annealed)", 3000, "heldout"): 1.8, ("1x recipe (annealed)", 3000, "tweets"): 3.5,
                   ("10x recipe", 6000, "heldout"): 1.7, ("10x recipe", 6000, "tweets"): 3.6,
                   ("3x recipe (annealed at 9,000)", 9000, "heldout"): 1.6,
                   ("3x recipe (annealed at 9,000)", 9000, "tweets"): 3.4,
                   ("1x recipe + task-adaptive on tweets", 3000, "heldout"): 1.9,
                   ("1x recipe + task-adaptive on tweets", 3000, "tweets"): 2.9}
    md = open(prefix + ".md").read()
    assert ("| set | 1x recipe, step 3,000 | 3x recipe, step 9,000 | 10x run, step 6,000 | 1x recipe + task-adaptive "
            "pretraining on tweets |" in md)
    assert "| tweets | 3.500 | 3.400 | 3.600 | 2.900 |" in md


@pytest.mark.parametrize("entry, message", [("6000", "is not LABEL=PATH"), ("late=x.json", "is not LABEL=PATH"),
                                            ("6000=/nonexistent.json", "does not exist")])
def test_a_bad_domain_shift_entry_is_named(tmp_path, entry, message):
    ood = report([row("tweets", "test_accuracy", scratch=[80, 82], plm=[81, 82])], [(3000, 4.7)])
    (tmp_path / "ood.json").write_text(json.dumps(ood))
    proc = subprocess.run([sys.executable, "-m", "bench.studies.transfer.transfer_steps",
                           f"--ood_report={tmp_path / 'ood.json'}",
                           f"--domain_shift={entry}", f"--output_prefix={tmp_path / 'out'}"],
                          cwd=REPO, capture_output=True, text=True)
    assert proc.returncode != 0 and message in proc.stderr
    assert not os.path.exists(tmp_path / "out.json")


def with_grid(r, init, grid, best):
    r[f"{init}_grid"], r[f"{init}_best_lr"] = grid, best
    return r


def test_task_adaptive_tables_add_a_point_against_the_ood_tables_scratch(tmp_path):
    ood = report([row("tweets", "test_accuracy", scratch=[80, 82, 84], plm=[78, 79, 80])], [(3000, 4.7)])
    tapt = report([row("tweets", "test_accuracy", plm=[84, 85, 86])], [(0, 4.7), (1000, 4.95)])
    tapt["pretrain_recipe"] = {"train_steps": "1000"}
    proc, prefix = run(tmp_path, ood=ood, adapted={"tweets": tapt, "spam": None})
    assert proc.returncode == 0, proc.stderr
    out = json.load(open(prefix + ".json"))
    tweets = next(r for r in out["rows"] if r["task"] == "tweets")
    point = tweets["points"][-1]
    assert (point["run"], point["step"]) == ("1x recipe + task-adaptive", 4000)
    assert point["gain"]["gain"] == pytest.approx(85 - 82)
    assert point["heldout_loss"] == pytest.approx(4.95)
    assert any(p.endswith("adapted_reports_spam.json") for p in out["missing"])


def test_the_diagnosis_table_lists_every_variants_grid_and_names_a_screens_own_flags(tmp_path):
    dev = row("spam", "accuracy", scratch=[97.0], plm=[96.0], mlm=[95.0])
    for init, grid in (("scratch", {"1e-4": 97.0, "3e-4": 96.5}), ("plm", {"1e-4": 96.0, "3e-4": 95.5}),
                       ("mlm", {"1e-4": 95.0, "3e-4": 94.0})):
        with_grid(dev, init, grid, "1e-4")
    ood = report([dev, row("spam", "test_accuracy", scratch=[96, 97, 98], plm=[95, 96, 97])], [(3000, 4.7)])
    ood["finetune_settings"] = {"extra_finetune_flags": ["--dropout=0.1"]}
    screen = report([with_grid(row("spam", "accuracy", plm=[97.5]), "plm", {"1e-4": 96.5, "3e-4": 97.5}, "3e-4")],
                    [(3000, 4.7)])
    screen["finetune_settings"] = {"extra_finetune_flags": ["--dropout=0.1", "--summary_type=mean"]}
    mlm = report([with_grid(row("spam", "accuracy", mlm=[96.0]), "mlm", {"1e-4": 96.0, "3e-4": 95.0}, "1e-4")],
                 [(3000, 4.7)])
    mlm["finetune_settings"] = {"extra_finetune_flags": ["--dropout=0.1"]}
    longer = report([with_grid(row("spam", "accuracy", plm_at_9000=[96.5, 97.5, 97.0]), "plm@9000",
                               {"1e-4": 96.0, "3e-4": 96.5}, "3e-4"),
                     dict(row("spam", "test_accuracy", plm_at_9000=[98, 97, 98]), **{"plm@9000_best_lr": "3e-4"})],
                    [(9000, 4.2)])
    proc, prefix = run(tmp_path, ood=ood, ood_steps_3x=longer, screens={"mean": screen, "mlm": mlm})
    assert proc.returncode == 0, proc.stderr
    out = json.load(open(prefix + ".json"))
    variants = [(d["task"], d["variant"], d["best_lr"]) for d in out["diagnosis"]]
    assert variants == [("spam", "scratch", "1e-4"), ("spam", "PLM", "1e-4"), ("spam", "MLM", "1e-4"),
                        ("spam", "PLM, --summary_type=mean", "3e-4"), ("spam", "MLM", "1e-4"),
                        ("spam", "PLM, 3x recipe (annealed at 9,000), step 9,000", "3e-4")]
    assert out["diagnosis"][1]["test"]["mean"] == pytest.approx(96.0)
    assert out["diagnosis"][3]["test"] is None
    assert out["diagnosis"][5]["dev"]["mean"] == pytest.approx(97.0)
    assert out["diagnosis"][5]["test"]["mean"] == pytest.approx(97 + 2 / 3)
    md = open(prefix + ".md").read()
    assert "| spam | PLM, --summary_type=mean | 96.5 | **97.5** | - | - |" in md  # a screen: seed 0 only
    assert ("| spam | PLM, 3x recipe (annealed at 9,000), step 9,000 | 96.0 | **96.5** | 97.0 ± 0.5 (n=3, lr 3e-4) | "
            "97.7 ± 0.6 (n=3, lr 3e-4) |") in md


def test_a_task_adaptive_table_without_its_pretraining_steps_is_named(tmp_path):
    ood = report([row("tweets", "test_accuracy", scratch=[80, 82], plm=[78, 79])], [(3000, 4.7)])
    tapt = report([row("tweets", "test_accuracy", plm=[84, 85])], [(1000, 4.95)])
    proc, prefix = run(tmp_path, ood=ood, adapted={"tweets": tapt})
    assert proc.returncode != 0
    assert "adapted_reports_tweets.json: its pretrain_recipe has no train_steps" in proc.stderr
    assert not os.path.exists(prefix + ".json")


def test_a_labelled_entry_without_a_path_is_named(tmp_path):
    ood = report([row("tweets", "test_accuracy", scratch=[80, 82], plm=[81, 82])], [(3000, 4.7)])
    (tmp_path / "ood.json").write_text(json.dumps(ood))
    proc = subprocess.run([sys.executable, "-m", "bench.studies.transfer.transfer_steps",
                           f"--ood_report={tmp_path / 'ood.json'}",
                           "--screen_reports=mean", f"--output_prefix={tmp_path / 'out'}"],
                          cwd=REPO, capture_output=True, text=True)
    assert proc.returncode != 0 and "--screen_reports: 'mean' is not LABEL=PATH" in proc.stderr
