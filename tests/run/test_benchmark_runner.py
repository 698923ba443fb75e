"""run/benchmark.py: commands per flag file and the results table."""

import json
import os
import sys

import pytest

from run import benchmark


def test_command_and_table(tmp_path):
    flagfile = tmp_path / "mrpc.flags"
    flagfile.write_text("--task=mrpc\n--train_steps=10\n")
    name, model_dir, cmd = benchmark.command_for(str(flagfile), str(tmp_path / "out"), "/glue", "--seed=3")
    assert name == "mrpc" and cmd[0] == sys.executable and cmd[1].endswith("run_classifier.py")
    assert "--data_dir=/glue/MRPC" in cmd and cmd[-1] == "--seed=3" and "--do_eval=false" not in cmd
    _, _, quick = benchmark.command_for(str(flagfile), str(tmp_path / "out"), "/glue", "--train_steps=20", quick=True)
    assert quick[:len(cmd) - 1] == cmd[:-1] and quick[-1] == "--train_steps=20"  # --extra_flags win
    assert set(benchmark.QUICK_FLAGS) <= set(quick) and "--do_eval=false" in quick
    assert benchmark.runner_for("run/flags/race.flags").endswith("run_race.py")
    assert benchmark.runner_for("run/flags/ner_wnut16.flags").endswith("run_tagger.py")
    assert benchmark.runner_for("squad_v2.flags").endswith("run_squad.py")
    os.makedirs(model_dir)
    from xlnet_tf.artifacts import results

    results.record(model_dir, "classifier", "f1", 5, {"f1": 0.8, "accuracy": 0.7}, split="dev")
    results.record(model_dir, "classifier", "f1", 10, {"f1": 0.75, "accuracy": 0.7}, split="dev")
    with open(os.path.join(model_dir, "train_history.json"), "w") as f:
        f.write("".join(json.dumps({"examples_per_sec": r}) + "\n" for r in (1.0, 10.0, 20.0)))
    row = benchmark.summarize(name, model_dir, 12.34, 0)  # the first loop (compilation) is not counted
    assert row["metric"] == "f1" and row["best"] == 0.8 and row["last"] == 0.75 and row["examples_per_sec"] == 15.0
    table = benchmark.write_table([row], str(tmp_path / "out"))
    assert "| mrpc | f1 | 0.8000 | 5 | 0.7500 | 10 | 15.0 | 12.3 | ok |" in table
    assert json.load(open(tmp_path / "out" / "results.json"))[0]["task"] == "mrpc"


def _runner_of(flagfile_name):
    from run import run_classifier, run_race, run_squad, run_tagger

    if "pos_" in flagfile_name or "ner_" in flagfile_name:
        return run_tagger
    if "squad" in flagfile_name:
        return run_squad
    if "race" in flagfile_name or "mc_" in flagfile_name or "cloze" in flagfile_name:
        return run_race
    return run_classifier


def test_flag_files_parse_with_their_runners():
    """The fine-tuning flag files of run/flags/ (the recipes) and of the studies (bench/studies/*/flags/: the
    transfer tasks' budgets, the long-document and multiple-choice recipes) parse with their runners."""
    import glob

    from run import common_flags

    repo = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    paths = [p for p in glob.glob(os.path.join(repo, "run", "flags", "*.flags"))
             + glob.glob(os.path.join(repo, "bench", "studies", "*", "flags", "*.flags"))
             if not os.path.basename(p).startswith(("pretrain", "demo", "transfer_cpu"))]
    names = {os.path.basename(p) for p in paths}
    assert {"mnli.flags", "qqp.flags", "sst2.flags", "cola.flags", "stsb.flags", "mrpc.flags", "rte.flags",
            "race.flags", "squad_v1.flags", "squad_v2.flags", "transfer_topic.flags", "transfer_cloze.flags",
            "transfer_mc_wordnet.flags", "brown_genre_long.flags", "race_mc_wordnet_tiny.flags"} <= names
    for path in paths:
        runner = _runner_of(os.path.basename(path))
        fv = common_flags.parse(runner.FLAGS, runner.define_flags, ["x", f"--flagfile={path}"])
        try:
            assert fv.train_steps > 0 and fv.learning_rate > 0, path
        finally:
            fv.unparse_flags()


def test_runners_keep_their_own_defaults_and_define_nothing_at_import():
    """Importing several runners into one process changes none of their defaults (it used to: the first
    runner imported set every later runner's shared defaults, e.g. SQuAD's --max_seq_length to 128)."""
    import subprocess
    import sys

    repo = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    code = ("from run import run_classifier, run_squad, run_race, pretrain, benchmark, convert_checkpoint; "
            "from absl import flags; "
            "mods = (run_classifier, run_squad, run_race, pretrain, benchmark, convert_checkpoint); "
            "assert not any(list(m.FLAGS) for m in mods), 'defined at import'; "
            "assert 'max_seq_length' not in flags.FLAGS and 'learning_rate' not in flags.FLAGS; print('ok')")
    out = subprocess.run([sys.executable, "-c", code], cwd=repo, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0 and out.stdout.strip().endswith("ok"), out.stderr[-2000:]

    from run import common_flags, pretrain, run_classifier, run_race, run_squad

    expected = {run_classifier: (128, 2e-5, 1000, 32), run_squad: (512, 3e-5, 8000, 48),
                run_race: (512, 2e-5, 12000, 32)}
    for runner in (run_squad, run_race, run_classifier, pretrain):  # any order
        fv = common_flags.parse(runner.FLAGS, runner.define_flags, ["x"])
        fv.unparse_flags()
    for runner, (max_len, lr, steps, batch) in expected.items():
        fv = runner.FLAGS
        assert (fv["max_seq_length"].default, fv["learning_rate"].default, fv["train_steps"].default,
                fv["train_batch_size"].default) == (max_len, lr, steps, batch), runner.__name__
    assert pretrain.FLAGS["learning_rate"].default == 1e-4 and "max_seq_length" not in pretrain.FLAGS


def test_transfer_flag_file_parses_and_names_real_tasks():
    """The transfer study's own flag files (the transfer table's commands) and the task flag files they run."""
    import subprocess
    import sys

    repo = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    # the table; its out-of-domain rows; their diagnosis rows (own work_dir and ledger, the runner's own flags added)
    variants = {"transfer_cpu_ood_layer_decay.flags": "--lr_layer_decay_rate=0.75",
                "transfer_cpu_ood_mean.flags": "--summary_type=mean"}
    for flagfile in ("transfer_cpu.flags", "transfer_cpu_ood.flags", "transfer_cpu_ood_tapt.flags",
                     "transfer_cpu_ood_task_only.flags", "transfer_cpu_ood_mlm.flags", "transfer_cpu_ood_steps.flags",
                     "transfer_cpu_ood_steps_3x.flags", "transfer_cpu_topic_steps.flags",
                     "transfer_cpu_topic_steps_3x.flags", *variants):
        extra = ["--dropout=0.1", "--dropatt=0.1", variants[flagfile]] if flagfile in variants else None
        code = (f"import sys; sys.argv=['transfer', '--flagfile=bench/studies/transfer/flags/{flagfile}']; "
                "from bench import cli; from bench.studies.transfer import transfer; "
                "F = cli.parse(transfer.FLAGS, transfer.define_flags, sys.argv[1:]); "
                "tasks = transfer.tasks('labeled'); "
                "assert set(F.tasks) <= set(tasks) and all(transfer.parse_init(i) for i in F.inits), F.tasks; "
                "assert all(__import__('os').path.exists(tasks[t].flagfile) for t in F.tasks); "
                "r = transfer.read_flagfile(F.pretrain_flagfile); assert int(r['n_token']) == F.vocab_size; "
                f"assert set(F.stages) <= set(transfer.STAGES) and F.extra_finetune_flags.split() in "
                f"([], ['--dropout=0.1', '--dropatt=0.1'], {extra}); "
                f"assert {extra is None} or (F.work_dir, F.results_prefix) != "
                "('bench_out/transfer_ood', 'bench/studies/transfer/results/transfer_ood_cpu'), "
                "(F.work_dir, F.results_prefix); "
                "print(repr(F.extra_finetune_flags.split())); print('ok')")
        out = subprocess.run([sys.executable, "-c", code], cwd=repo, capture_output=True, text=True, timeout=300)
        assert out.stdout.strip().endswith("ok"), (flagfile, out.stderr[-2000:])
        if extra:  # the classifier runner takes the added flags
            from run import common_flags, run_classifier

            fv = common_flags.parse(run_classifier.FLAGS, run_classifier.define_flags,
                                    ["x", f"--flagfile={repo}/bench/studies/transfer/flags/transfer_tweets.flags",
                                     *extra])
            try:
                assert fv.dropout == 0.1 and (fv.lr_layer_decay_rate, fv.summary_type) != (1.0, "last"), flagfile
            finally:
                fv.unparse_flags()


CARRY_CHECK = r'''
import dataclasses, json, os, sys
from bench.studies.transfer import transfer
from xlnet_tf.artifacts import results
transfer.define_flags()
work = os.path.dirname(sys.argv[1])
transfer.FLAGS(["transfer", "--tasks=topic", "--objectives=plm,mlm", f"--work_dir={work}", "--seeds=0,1",
                "--learning_rates=3e-4,1e-3"])
settings = transfer.TransferSettings.from_flags(transfer.FLAGS)
task = transfer.tasks("data/finetune")["topic"]  # the shipped slice: its linear baseline is computed for real
recipe = {"n_token": "8000"}
curve = [{"step": 0, "loss": 9.0, "accuracy": 0.0}, {"step": 300, "loss": 6.1, "accuracy": 0.1}]
def cell(grid):
    return {"": max(grid.values()), "_std": None, "_seeds": 1, "_best_lr": max(grid, key=grid.get), "_grid": grid}
old = {"pretrain_recipe": recipe, "pretrain_heldout": {"plm": curve, "mlm": curve},
       "rows": [{"task": "topic", "metric": m, "primary": m == "accuracy",
                 **{f"{i}{k}": v for i in ("scratch", "plm", "mlm")
                    for k, v in cell({"3e-4": 40.0 + d, "1e-3": 50.0 + d}).items()}}
                for m, d in (("accuracy", 0.0), ("macro_f1", -10.0))]}
json.dump(old, open(sys.argv[1], "w"))
def run(init, lr, seed, acc):  # a finished run in the work_dir
    results.record(transfer.run_dir(work, "topic", init, lr, seed), "classifier", "accuracy",
                   transfer.final_step(task, settings), {"accuracy": acc / 100, "macro_f1": acc / 200})
other_mlm = {"plm": curve, "mlm": curve[:1]}
grids = transfer.carried_grids(settings, sys.argv[1], recipe, other_mlm)
assert grids[("topic", "plm")] == {"3e-4": {"accuracy": 40.0, "macro_f1": 30.0},
                                  "1e-3": {"accuracy": 50.0, "macro_f1": 40.0}}, grids
assert ("topic", "mlm") not in grids and ("topic", "scratch") in grids  # another pretrained model: not carried
run("plm", "1e-3", "1", 60.0)
run("scratch", "3e-4", "0", 70.0)  # run here: this run, not the carried one
rows = {r["metric"]: r for r in transfer.collect(settings, work, {"topic": task}, grids, "earlier.json")}
acc = rows["accuracy"]
assert acc["plm"] == 55.0 and acc["plm_seeds"] == 2 and acc["plm_from"] == "earlier.json", acc  # carried seed 0
assert rows["macro_f1"]["plm"] == 35.0, rows["macro_f1"]
assert acc["scratch_best_lr"] == "3e-4" and acc["scratch_seeds"] == 1 and acc["scratch_from"], acc
assert "mlm" not in acc, acc
assert 9 < acc["majority"] < 30 < acc["baseline"] <= 100, acc  # 11 topics; TF-IDF + logistic regression learns
ran = []
def fake_finetune(settings, work, task, init, lr, seed):  # transfer.finetune without the training
    done = transfer.read_score(transfer.run_dir(work, task.name, init, lr, seed), task,
                               transfer.final_step(task, settings))
    if done is None:
        ran.append((init, lr, seed))
        run(init, lr, seed, 10.0)
transfer.finetune = fake_finetune
settings = dataclasses.replace(settings, max_grid_extensions=0)
transfer.stage_finetune(settings, work, {"topic": task}, grids)
assert sorted(ran) == [("mlm", "1e-3", "0"), ("mlm", "3e-4", "0"), ("mlm", "3e-4", "1"),
                       ("scratch", "3e-4", "1")], ran  # neither the carried runs nor those here again
grids = transfer.carried_grids(settings, sys.argv[1], {**recipe, "keep_checkpoint_steps": "900"}, other_mlm)
assert ("topic", "scratch") in grids  # checkpoint bookkeeping is not the recipe
try:
    transfer.carried_grids(settings, sys.argv[1], {"n_token": "4000"}, other_mlm)
    raise SystemExit("a report of another recipe was carried over")
except Exception as e:  # UserError
    assert "another pretraining recipe" in str(e)
# --selection=best_checkpoint: 4x the flag file's 120 steps, 8 checkpoints scored on dev; the best (the earliest of a
# tie) is the run's score, and its test evaluation is the test score
spam = transfer.tasks("data/finetune")["spam"]
spam.selection = "best_checkpoint"
assert transfer.budget_flags(spam, settings) == ["--train_steps=480", "--warmup_steps=48", "--save_steps=60",
                                                 "--steps_per_loop=20",  # the flag file's 40 ends no loop at 60
                                                 "--keep_checkpoints=8", "--eval_all_checkpoints=true"]
out = os.path.join(work, "best")
def scored(steps, dev, test):
    for step, d, t in zip(steps, dev, test):
        for split, acc in (("dev", d), ("test", t)):
            results.record(out, "classifier", "accuracy", step, {"accuracy": acc, "macro_f1": acc / 2}, split=split)
scored((60, 120, 180, 240), (0.5, 0.7, 0.7, 0.6), (0.9, 0.6, 0.95, 0.99))
assert transfer.final_step(spam, settings) == 480
assert transfer.read_score(out, spam, 480) is None  # killed while scoring its checkpoints: 4 of 8 scored, not a result
scored((300, 360, 420, 480), (0.6, 0.4, 0.5, 0.6), (0.9, 0.9, 0.9, 0.9))
score = transfer.read_score(out, spam, 480)
assert score == {"accuracy": 70.0, "step": 120, "test_accuracy": 60.0}, score  # accuracy only (transfer.tasks)
spam.selection = "last"
assert transfer.budget_flags(spam, settings) == [] and transfer.final_step(spam, settings) == 120
assert transfer.read_score(out, spam, 480)["step"] == 480
# the last --train_steps counts
settings = dataclasses.replace(settings, extra_finetune_flags="--dropout=0.1 --train_steps=240")
assert transfer.final_step(spam, settings) == 240
settings = dataclasses.replace(settings, extra_finetune_flags="")
# zero-shot cells (cloze): a pretrained init's score without fine-tuning, none where there is no model
cloze_task = transfer.tasks("data/finetune")["cloze"]
assert cloze_task.zero_shot(work, "plm") is None  # this work_dir has no pretrained model
cloze_task.zero_shot = lambda work, init: {"accuracy": 44.0, "test_accuracy": 47.0} if init == "plm" else None
cloze_task.baseline = None
settings = dataclasses.replace(settings, tasks=("cloze",))
rows = {r["metric"]: r for r in transfer.collect(settings, work, {"cloze": cloze_task})}
assert rows["accuracy"]["plm_zero_shot"] == 44.0 and rows["test_accuracy"]["plm_zero_shot"] == 47.0, rows
assert "mlm_zero_shot" not in rows["accuracy"] and "scratch_zero_shot" not in rows["accuracy"], rows
print("ok")
'''


@pytest.mark.slow  # the transfer study's bookkeeping (a subprocess over every transfer task); a benchmark tool
def test_transfer_carries_over_only_seed0_runs_of_the_same_pretrained_model(tmp_path):
    import subprocess
    import sys

    repo = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    out = subprocess.run([sys.executable, "-c", CARRY_CHECK, str(tmp_path / "earlier.json")], cwd=repo,
                         capture_output=True, text=True, timeout=300)
    assert out.stdout.strip().endswith("ok"), out.stderr[-2000:]


def test_linear_baseline_reads_the_runners_rows_and_sees_shared_ngrams_of_pairs(tmp_path):
    from bench.studies.baselines import linear_baseline as lb

    rows = ["label\tsentence1\tsentence2"]
    words = ["red apple pie", "blue river boat", "green tree house", "old stone wall", "tall grass field",
             "warm sunny day", "cold dark night", "fast train ride"]
    for k, a in enumerate(words * 6):
        same = (k // len(words)) % 2 == 0  # every text on both sides of both labels: no side alone tells
        b = a if same else words[(words.index(a) + 3) % len(words)]
        rows.append(f"{int(same)}\t{a} today\tsee {b}")
    for split in ("train", "dev"):
        (tmp_path / f"{split}.tsv").write_text("\n".join(rows) + "\n")
    out = lb.baselines(str(tmp_path), splits=("dev",))
    majority = out["majority"]["dev"]
    assert majority["accuracy"] == 50.0 and min(abs(majority["f1"] - v) for v in (0.0, 200 / 3)) < 1e-6
    # no single side tells the label; only the product features [a * b] of the shared n-grams do
    assert out["tfidf_logreg"]["dev"]["accuracy"] == 100.0 and out["C"] in lb.C_GRID
    texts, texts_b, labels = lb.read_split(str(tmp_path), "dev")
    assert texts[0] == "red apple pie today" and texts_b[0] == "see red apple pie" and labels[0] == "1"


def test_mc_diagnosis_variants_keep_each_answer_and_drop_the_article(tmp_path):
    import json

    from bench.studies.diagnostics import mc_diagnosis

    source = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "data", "finetune",
                          "mc_wordnet")
    shuffled = mc_diagnosis.write_variant(source, str(tmp_path / "shuffled"), "shuffled")
    bare = mc_diagnosis.write_variant(source, str(tmp_path / "bare"), "no_article")
    moved = 0
    for name in sorted(os.listdir(os.path.join(source, "dev")))[:20]:
        original = json.load(open(os.path.join(source, "dev", name)))
        new = json.load(open(os.path.join(shuffled, "dev", name)))
        assert json.load(open(os.path.join(bare, "dev", name)))["article"] == ""
        assert new["article"] == original["article"] and new["questions"] == original["questions"]
        for k, options in enumerate(original["options"]):
            answer = options["ABCD".index(original["answers"][k])]
            assert sorted(new["options"][k]) == sorted(options)
            assert new["options"][k]["ABCD".index(new["answers"][k])] == answer  # the answer follows its option
            moved += new["answers"][k] != original["answers"][k]
    assert moved > 20  # most answers changed letter
    assert mc_diagnosis.letters(shuffled, "dev") != mc_diagnosis.letters(source, "dev")
    # the zero-shot readings make one-blank queries from the slice's questions
    question = json.load(open(os.path.join(source, "dev", name)))["questions"][0]
    for reading, (template, _) in mc_diagnosis.ZERO_SHOT_READINGS.items():
        query = template(question)
        assert query.count("_") == 1 and (question in query or question.split(": ", 1)[1].rstrip("?") in query)


CARRY_SETTINGS_CHECK = r'''
import dataclasses, json, os, sys
from bench.studies.transfer import transfer
transfer.define_flags()
root = sys.argv[1]
transfer.FLAGS(["transfer", "--tasks=topic", f"--work_dir={root}", "--objectives=plm", "--inits=scratch,plm"])
settings = transfer.TransferSettings.from_flags(transfer.FLAGS)
recipe, curve = {"n_token": "8000"}, [{"step": 0, "loss": 9.0, "accuracy": 0.0}]
task_map = transfer.tasks("data/finetune")
row = {"task": "topic", "metric": "accuracy", "primary": True, "scratch_grid": {"3e-4": 40.0},
       "plm_grid": {"3e-4": 50.0}}
def report(**recorded):
    path = os.path.join(root, "earlier.json")
    with open(path, "w") as f:
        json.dump({"pretrain_recipe": recipe, "pretrain_heldout": {"plm": curve}, "rows": [row], **recorded}, f)
    return path
def refused(path, *words):
    try:
        transfer.carried_grids(settings, path, recipe, {"plm": curve}, task_map)
    except Exception as e:  # UserError
        assert all(w in str(e) for w in words), e
        return
    raise SystemExit(f"carried over: {words}")
# a report made before settings were recorded: the default protocol, no added flags
assert transfer.carried_grids(settings, report(), recipe, {"plm": curve}, task_map)[("topic", "plm")] == {
    "3e-4": {"accuracy": 50.0}}
# a dev-chosen budget here: the fixed-budget cells do not belong
settings = dataclasses.replace(settings, selection="best_checkpoint")
refused(report(), "other fine-tuning settings", "selection: 'last' there, 'best_checkpoint' here")
settings = dataclasses.replace(settings, selection="last")
same = dict(finetune_settings=transfer.finetune_settings(settings),
            task_flagfile_sha256=transfer.task_flagfile_hashes(list(task_map.values()), settings.tasks))
assert list(same["task_flagfile_sha256"]) == ["topic"]
assert transfer.carried_grids(settings, report(**same), recipe, {"plm": curve}, task_map)[("topic", "scratch")] == {
    "3e-4": {"accuracy": 40.0}}
# e.g. a diagnosis row's table
settings = dataclasses.replace(settings, extra_finetune_flags="--dropout=0.1 --dropatt=0.1")
refused(report(**same), "extra_finetune_flags: [] there, ['--dropout=0.1', '--dropatt=0.1'] here")
settings = dataclasses.replace(settings, extra_finetune_flags="")
refused(report(**{**same, "task_flagfile_sha256": {"topic": "0" * 64}}), "topic runs", "transfer_topic.flags")
print("ok")
'''


def test_carried_cells_must_come_from_the_same_fine_tuning_settings(tmp_path):
    """--carry_over takes an earlier report's seed-0 grids only when its runs were fine-tuned as this table's
    are: the same selection protocol and budget, added runner flags and task flag files (reports made before
    these were recorded were all made with the default protocol)."""
    import subprocess
    import sys

    repo = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    out = subprocess.run([sys.executable, "-c", CARRY_SETTINGS_CHECK, str(tmp_path)], cwd=repo, capture_output=True,
                         text=True, timeout=300)
    assert out.stdout.strip().endswith("ok"), out.stdout[-2000:] + out.stderr[-3000:]
