"""The transfer study's transfer-against-pretraining-steps curve: `<objective>@<step>` inits fine-tune from the
pretraining run's kept checkpoints, and the report gains their table and plot."""

import os
import subprocess
import sys

import pytest

from bench.studies.transfer import transfer

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.mark.parametrize("init, parsed", [("scratch", ("scratch", None)), ("plm", ("plm", None)),
                                          ("mlm@900", ("mlm", 900)), ("plm@2700", ("plm", 2700))])
def test_inits_name_an_objective_and_optionally_a_kept_step(init, parsed):
    assert transfer.parse_init(init) == parsed


@pytest.mark.parametrize("init", ["bert", "scratch@900", "plm@", "plm@0", "plm@-3", "plm@9x", "plm@900@1"])
def test_other_inits_are_refused_by_name(init):
    with pytest.raises(ValueError, match=f"init '{init}': expected one of"):
        transfer.parse_init(init)


def test_a_stepped_init_starts_from_the_kept_checkpoint():
    assert transfer.init_checkpoint("/w", "scratch") is None
    assert transfer.init_checkpoint("/w", "plm") == "/w/plm_model/final"
    assert transfer.init_checkpoint_prefix("/w", "plm") == "/w/plm_model/final/xlnet_model.ckpt"
    assert transfer.init_checkpoint("/w", "mlm@1800") == "/w/mlm_model/kept/ckpt-1800"
    assert transfer.init_checkpoint_prefix("/w", "mlm@1800") == "/w/mlm_model/kept/ckpt-1800"


@pytest.mark.parametrize("name, factor", [("pretrain_cpu_3x.flags", 3), ("pretrain_cpu_10x.flags", 10)])
def test_the_longer_recipes_are_the_recipe_with_its_steps_changed(name, factor):
    """pretrain_cpu_{3,10}x.flags name pretrain_cpu.flags (`--flagfile=`, read in place) and override the steps:
    the transfer stages read the same model, data layout and optimizer as the shipped recipe's."""
    base = transfer.read_flagfile(os.path.join(REPO, "run", "flags", "pretrain_cpu.flags"))
    longer = transfer.read_flagfile(os.path.join(transfer.FLAGS_DIR, name))
    assert int(longer["train_steps"]) == factor * int(base["train_steps"])
    assert {k: v for k, v in longer.items() if k not in ("train_steps", "keep_checkpoint_steps")} == \
        {k: v for k, v in base.items() if k not in ("train_steps", "keep_checkpoint_steps")}
    assert "flagfile" not in longer


STEPS_CHECK = r'''
import os, sys
from bench.studies.transfer import transfer, transfer_ledger
from xlnet_tf.artifacts import results
transfer.define_flags()
root = sys.argv[1]
work = os.path.join(root, "work")
for rel, text in (("spiece.model", "pieces"), ("plm_model/xlnet_config.json", "{}"),
                  ("plm_model/final/xlnet_model.ckpt.index", "i"), ("plm_model/kept/ckpt-900.index", "k"),
                  ("plm_model/kept/ckpt-900.data-00000-of-00001", "w900")):
    os.makedirs(os.path.dirname(os.path.join(work, rel)), exist_ok=True)
    with open(os.path.join(work, rel), "w") as f:
        f.write(text)
prefix = os.path.join(root, "steps")
transfer.FLAGS(["transfer", "--tasks=topic", "--objectives=plm", f"--work_dir={work}", "--seeds=0,1",
                "--inits=scratch,plm@900,plm", f"--results_prefix={prefix}", "--learning_rates=3e-4"])
settings = transfer.TransferSettings.from_flags(transfer.FLAGS)
task = transfer.tasks("data/finetune")["topic"]
task.baseline = None  # the linear baseline's column: tests/run/test_benchmark_runner.py (here ~40 s of fitting)
def run(init, seed, acc):
    results.record(transfer.run_dir(work, "topic", init, "3e-4", seed), "classifier", "accuracy",
                   transfer.final_step(task, settings),
                   {"accuracy": acc / 100, "macro_f1": acc / 200}, split="dev")
for init, accs in (("scratch", (40, 42)), ("plm@900", (50, 54)), ("plm", (60, 62))):
    for seed, acc in zip("01", accs):
        run(init, seed, acc)
# the stepped init's runs enter the ledger with its kept checkpoint's fingerprint
transfer.sync_ledger(settings, work, {"topic": task})
kept = transfer_ledger.read(prefix + "_runs.json")["runs"]
assert kept["topic/plm@900/lr3e-4-seed0"]["provenance"]["init_checkpoint_sha256"] == \
    transfer_ledger.checkpoint_fingerprint(os.path.join(work, "plm_model/kept/ckpt-900"))
assert kept["topic/plm@900/lr3e-4-seed0"]["provenance"]["init_checkpoint_sha256"] != \
    kept["topic/plm/lr3e-4-seed0"]["provenance"]["init_checkpoint_sha256"]
rows = transfer.collect(settings, work, {"topic": task})
curves = {"plm": [{"step": 0, "loss": 9.0, "accuracy": 0.0}, {"step": 900, "loss": 6.5, "accuracy": 0.1},
                  {"step": 3000, "loss": 4.75, "accuracy": 0.2}]}
assert transfer.steps_points(rows, 3000, settings.inits) == {"plm": [(0, "scratch"), (900, "plm@900"), (3000, "plm")]}
transfer.write_report(settings, work, {"train_steps": "3000"}, rows, curves, {}, [task])
md = open(prefix + ".md").read()
assert "| task | metric | PLM step: 0 | 900 | 3000 |" in md, md
assert "| topic | accuracy | 41.0 ± 1.4 (lr 3e-4, n=2) | 52.0 ± 2.8 (lr 3e-4, n=2) [6.50] | " \
       "61.0 ± 1.4 (lr 3e-4, n=2) [4.75] |" in md, md
assert "| topic | macro_f1 | PLM" not in md and "| topic | accuracy | plm@900 | 50.0 |" in md, md
assert os.path.getsize(prefix + "_steps.png") > 1000
print("ok")
'''


def test_the_report_tables_and_plots_the_score_against_pretraining_steps(tmp_path):
    out = subprocess.run([sys.executable, "-c", STEPS_CHECK, str(tmp_path)], cwd=REPO,
                         capture_output=True, text=True, timeout=300)
    assert out.stdout.strip().endswith("ok"), out.stdout[-2000:] + out.stderr[-3000:]


def test_an_unknown_init_is_a_one_line_usage_error(tmp_path):
    out = subprocess.run([sys.executable, "-m", "bench.studies.transfer.transfer", f"--work_dir={tmp_path}/w",
                          "--inits=plm@first", "--stages=report", "--runs_ledger=none"], cwd=REPO, capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 2 and "--inits: init 'plm@first': expected one of" in out.stderr, out.stderr[-2000:]
    assert len(out.stderr.strip().splitlines()) == 1, out.stderr[-2000:]
    assert not os.path.exists(tmp_path / "w")


def test_the_seed_table_has_a_column_for_every_init_with_runs():
    """Stepped inits (plm@9000) get their seeds and their Welch p against scratch (they were left out: a table of
    scratch and two empty columns); inits without runs get no column."""
    rows = [{"task": "tweets", "metric": "accuracy", "scratch_runs": [87.2, 86.0, 88.7],
             "plm@9000_runs": [89.0, 87.8, 87.5]}]
    lines = transfer.seed_lines(rows, ["scratch", "mlm", "plm", "plm@9000"])
    assert lines[3] == "| task | metric | scratch | plm@9000 | plm@9000 vs scratch p |"
    assert lines[4] == "|---|---|---|---|---|"
    assert lines[5].startswith("| tweets | accuracy | 87.2, 86.0, 88.7 | 89.0, 87.8, 87.5 | 0.")
    full = [{"task": "t", "metric": "m", "scratch_runs": [1.0, 2.0], "mlm_runs": [3.0, 4.0], "plm_runs": [5.0, 6.0]}]
    assert transfer.seed_lines(full, ["scratch", "mlm", "plm"])[3] == (
        "| task | metric | scratch | MLM | PLM | MLM vs scratch p | PLM vs scratch p |")
    assert transfer.seed_lines([], ["scratch", "plm"]) == []
