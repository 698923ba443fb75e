"""The transfer study's run ledger (transfer_ledger.py) and transfer.py's use of it: a finished run's scores outlive
the work_dir, and are restored only for a run of the same provenance."""

import json
import os
import re
import subprocess
import sys

import pytest

from bench.studies.transfer import transfer_ledger as ledger

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def provenance(**changes):
    values = dict(runner="run_race.py", flagfile_sha256="f" * 64, data={"data_dir": "d" * 64},
                  spiece_sha256="s" * 64, model_config_sha256="c" * 64, init="plm",
                  init_checkpoint_sha256="w" * 64, learning_rate="3e-4", seed="0", flags=["--dropout=0.1"])
    values.update(changes)
    return ledger.RunProvenance(**values)


def test_ledger_returns_a_run_only_for_the_same_provenance(tmp_path):
    path = str(tmp_path / "results" / "table_runs.json")
    key = ledger.run_key("cloze", "plm", "3e-4", "0")
    assert ledger.read(path)["runs"] == {} and ledger.lookup(ledger.read(path)["runs"], key, provenance()) is None
    scores = {"schema": "xlnet_tf.eval_results", "version": 2, "evaluations": [{"step": 80, "accuracy": 0.4}]}
    assert ledger.save(path, key, provenance(), scores, {"cpu": "x"})
    assert not ledger.save(path, key, provenance(), scores, {"cpu": "x"})  # the same entry: nothing written
    runs = ledger.read(path)["runs"]
    assert ledger.lookup(runs, key, provenance()) == scores
    for other in (dict(seed="1"), dict(init_checkpoint_sha256="v" * 64), dict(data={"data_dir": "e" * 64}),
                  dict(flags=[]), dict(learning_rate="1e-3")):
        assert ledger.lookup(runs, key, provenance(**other)) is None, other
    assert ledger.differs(runs, key, provenance(seed="1", flags=[])) == ["flags", "seed"]
    assert ledger.differs(runs, ledger.run_key("cloze", "plm", "1e-3", "0"), provenance()) == []
    with open(path, encoding="utf-8") as f:
        kept = json.load(f)
    assert kept["schema"] == ledger.SCHEMA and kept["version"] == ledger.VERSION
    assert kept["runs"][key]["provenance"] == provenance().to_dict() and kept["runs"][key]["saved"]
    code = kept["runs"][key]["code"]  # the last commit that changed code (None outside a git checkout)
    assert code is None or re.fullmatch(r"[0-9a-f]{40}(\+changes)?", code), code
    # another provenance replaces the entry; the code a run started from is recorded as given
    assert ledger.save(path, key, provenance(seed="1"), scores, {"cpu": "x"}, code="a" * 40 + " then " + "b" * 40)
    assert ledger.read(path)["runs"][key]["code"] == "a" * 40 + " then " + "b" * 40
    assert ledger.lookup(ledger.read(path)["runs"], key, provenance()) is None


def test_the_table_settings_are_its_flags_read_once():
    """transfer.TransferSettings holds every flag of transfer.define_flags as parsed (lists as tuples), frozen: a
    flag added without its field would not reach the table."""
    import dataclasses

    from absl import flags

    from bench import cli
    from bench.studies.transfer import transfer

    fv = cli.parse(flags.FlagValues(), transfer.define_flags, ["--work_dir=w", "--seeds=0,1",
                                                               "--extra_finetune_flags=--dropout=0.1",
                                                               "--selection=best_checkpoint"])
    settings = transfer.TransferSettings.from_flags(fv)
    assert [f.name for f in dataclasses.fields(settings)] == list(fv.flag_values_dict())
    assert (settings.work_dir, settings.seeds, settings.extra_finetune_flags) == ("w", ("0", "1"), "--dropout=0.1")
    assert settings.inits == ("scratch", "mlm", "plm") and settings.restore_from == ()
    assert transfer.finetune_settings(settings) == {"selection": "best_checkpoint", "extra_finetune_flags": [
        "--dropout=0.1"], "steps_multiplier": 4, "checkpoints_per_run": 8}
    with pytest.raises(dataclasses.FrozenInstanceError):
        settings.seeds = ("0",)


def test_the_committed_ledgers_and_reports_name_todays_task_flag_files():
    """Every run of a committed run ledger, and every report's task_flagfile_sha256, was made with the bytes of the
    task flag file the table runs today: a flag file edited in any way (a comment too) makes those runs another
    table's (trained again instead of restored; carried cells refused), so the task flag files keep their bytes."""
    import glob

    from bench.studies.transfer import transfer

    flagfiles = {name: task.flagfile for name, task in transfer.tasks("labeled").items()}
    checked = 0
    for path in sorted(glob.glob(os.path.join(REPO, "bench", "studies", "*", "results", "*.json"))):
        with open(path, encoding="utf-8") as f:
            values = json.load(f)
        if not isinstance(values, dict):
            continue
        if values.get("schema") == ledger.SCHEMA:
            made = [(key.split("/")[0], entry["provenance"]["flagfile_sha256"])
                    for key, entry in values["runs"].items()]
        else:
            made = list(values.get("task_flagfile_sha256", {}).items())
        for task, sha in made:
            assert sha == ledger.fingerprint(flagfiles[task]), (os.path.relpath(path, REPO), task)
            checked += 1
    assert checked >= 80, checked


def test_a_run_keeps_the_code_each_of_its_processes_started_from(tmp_path, monkeypatch):
    from bench.studies.transfer import transfer

    out = str(tmp_path / "finetune" / "topic" / "plm" / "lr3e-4-seed0")
    assert transfer.launch_code(out) is None  # a run made before launches were noted
    # the first run of a task and init: its folder finetune/<task>/<init> does not exist yet
    versions = iter(["1" * 40, "1" * 40 + "+changes", "2" * 40])
    monkeypatch.setattr(ledger, "code_version", lambda: next(versions))
    transfer.note_launch_code(out, first=True)  # training
    transfer.note_launch_code(out, first=False)  # its test evaluation, after an edit of the work tree
    assert transfer.launch_code(out) == "1" * 40 + " then " + "1" * 40 + "+changes"
    transfer.note_launch_code(out, first=True)  # the run started again: only its own launch counts
    assert transfer.launch_code(out) == "2" * 40


@pytest.mark.parametrize("text, message", [("{", "not JSON"), ('{"runs": {}}', "not a xlnet_tf.transfer_ledger"),
                                           ('{"schema": "xlnet_tf.transfer_ledger", "version": 9, "runs": {}}',
                                            "version 9")])
def test_ledger_refuses_a_file_it_cannot_read(tmp_path, text, message):
    path = tmp_path / "runs.json"
    path.write_text(text)
    with pytest.raises(ledger.LedgerError, match=message):
        ledger.read(str(path))


def test_fingerprints_change_with_any_file_of_a_folder_or_checkpoint(tmp_path):
    data = tmp_path / "data"
    (data / "dev").mkdir(parents=True)
    (data / "dev" / "a.json").write_text("one")
    first = ledger.fingerprint(str(data))
    (data / "dev" / "a.json").write_text("two")
    second = ledger.fingerprint(str(data))
    (data / "dev" / "b.json").write_text("two")
    assert len({first, second, ledger.fingerprint(str(data))}) == 3
    assert ledger.data_fingerprints([f"--data_dir={data}"]) == {"data_dir": ledger.fingerprint(str(data))}
    ckpt = tmp_path / "final"
    ckpt.mkdir()
    (ckpt / "xlnet_model.ckpt.index").write_bytes(b"index")
    (ckpt / "xlnet_model.ckpt.data-00000-of-00001").write_bytes(b"weights")
    before = ledger.checkpoint_fingerprint(str(ckpt / "xlnet_model.ckpt"))
    (ckpt / "xlnet_model.ckpt.data-00000-of-00001").write_bytes(b"other weights")
    assert ledger.checkpoint_fingerprint(str(ckpt / "xlnet_model.ckpt")) != before
    with pytest.raises(FileNotFoundError, match="no checkpoint"):
        ledger.checkpoint_fingerprint(str(ckpt / "missing.ckpt"))
    with pytest.raises(FileNotFoundError, match="data argument"):
        ledger.fingerprint(str(tmp_path / "nowhere"))


RESTORE_CHECK = r'''
import dataclasses, os, shutil, sys
from bench.studies.transfer import transfer, transfer_ledger
from xlnet_tf.artifacts import results
transfer.define_flags()
root = sys.argv[1]
def work_dir(name):  # a work_dir with what a run's provenance reads: SentencePiece model, config, PLM weights
    work = os.path.join(root, name)
    os.makedirs(os.path.join(work, "plm_model", "final"))
    for rel, text in (("spiece.model", "pieces"), ("plm_model/xlnet_config.json", "{}"),
                      ("plm_model/final/xlnet_model.ckpt.index", "i"),
                      ("plm_model/final/xlnet_model.ckpt.data-00000-of-00001", "w")):
        with open(os.path.join(work, rel), "w") as f:
            f.write(text)
    return work
first, second = work_dir("first"), work_dir("second")
path = os.path.join(root, "table_runs.json")
transfer.FLAGS(["transfer", "--tasks=topic", "--objectives=plm", f"--work_dir={first}", "--seeds=0,1",
                "--inits=scratch,plm", f"--runs_ledger={path}", "--learning_rates=3e-4"])
settings = transfer.TransferSettings.from_flags(transfer.FLAGS)
task = transfer.tasks("data/finetune")["topic"]
task.test_split = "test"
task.metrics = ("accuracy", "test_accuracy")
def read_score(out):  # the score of a finished run of the table
    return transfer.read_score(out, task, transfer.final_step(task, settings))
def run(work, init, lr, seed, acc, test=None):  # a finished run in a work_dir: scored at its final step
    out, step = transfer.run_dir(work, "topic", init, lr, seed), transfer.final_step(task, settings)
    results.record(out, "classifier", "accuracy", step, {"accuracy": acc / 100}, split="dev")
    if test is not None:
        results.record(out, "classifier", "accuracy", step, {"accuracy": test / 100}, split="test")
run(first, "plm", "3e-4", "0", 60.0, 58.0)
run(first, "scratch", "3e-4", "0", 40.0)
run(first, "scratch", "3e-4", "1", 45.0, 44.0)
transfer.sync_ledger(settings, first, {"topic": task})  # keeps the three finished runs
assert sorted(transfer_ledger.read(path)["runs"]) == ["topic/plm/lr3e-4-seed0", "topic/scratch/lr3e-4-seed0",
                                                      "topic/scratch/lr3e-4-seed1"]
# the second work_dir's PLM weights differ: its PLM run is not restored, the scratch runs are
with open(os.path.join(second, "plm_model/final/xlnet_model.ckpt.data-00000-of-00001"), "w") as f:
    f.write("other weights")
transfer.sync_ledger(settings, second, {"topic": task})
assert read_score(transfer.run_dir(second, "topic", "plm", "3e-4", "0")) is None
restored = transfer.run_dir(second, "topic", "scratch", "3e-4", "1")
score = read_score(restored)
assert score == read_score(transfer.run_dir(first, "topic", "scratch", "3e-4", "1")), score
assert score["accuracy"] == 45.0 and abs(score["test_accuracy"] - 44) < 1e-9, score
assert os.path.exists(os.path.join(restored, transfer_ledger.RESTORED_MARKER))
# a work_dir without the PLM model (a report made elsewhere): the ledger's PLM runs, all of one checkpoint, stand
third = work_dir("third")
shutil.rmtree(os.path.join(third, "plm_model", "final"))
transfer.sync_ledger(settings, third, {"topic": task})
assert abs(read_score(transfer.run_dir(third, "topic", "plm", "3e-4", "0"))["test_accuracy"] - 58) < 1e-9
summary = transfer.ledger_summary(settings, third)
assert summary["runs"] == summary["restored"] == 3 and len(summary["machines"]) == 1, summary
assert "3 of them restored" in transfer.ledger_lines(summary)[0]
run(second, "plm", "3e-4", "1", 61.0)  # a run of the second work_dir's other PLM weights enters the ledger
transfer.sync_ledger(settings, second, {"topic": task})
assert len(transfer_ledger.init_checkpoints(transfer_ledger.read(path)["runs"], "plm")) == 2
fourth = work_dir("fourth")
shutil.rmtree(os.path.join(fourth, "plm_model", "final"))
transfer.sync_ledger(settings, fourth, {"topic": task})  # which of the two? not without the model
assert read_score(transfer.run_dir(fourth, "topic", "plm", "3e-4", "0")) is None
assert read_score(transfer.run_dir(fourth, "topic", "scratch", "3e-4", "0"))["accuracy"] == 40.0
# a restored run without its test score is trained again (it has no weights) before its test evaluation
trained, evaluated = [], []
def fake_finetune(settings, work, task, init, lr, seed):
    trained.append((init, lr, seed))
    run(work, init, lr, seed, 40.0)
transfer.finetune = fake_finetune
transfer.run_logged = lambda cmd, log: evaluated.append(cmd)
transfer.evaluate_test(settings, second, task, "scratch", "3e-4", "0")
assert trained == [("scratch", "3e-4", "0")] and len(evaluated) == 1, (trained, evaluated)
assert not os.path.exists(os.path.join(transfer.run_dir(second, "topic", "scratch", "3e-4", "0"),
                                       transfer_ledger.RESTORED_MARKER))
transfer.evaluate_test(settings, second, task, "scratch", "3e-4", "1")  # it has its test score: nothing to do
assert len(trained) == 1 and len(evaluated) == 1
# 'none': no ledger
settings = dataclasses.replace(settings, runs_ledger="none")
shutil.rmtree(os.path.join(second, "finetune"))
transfer.sync_ledger(settings, second, {"topic": task})
assert not os.path.exists(os.path.join(second, "finetune"))
# the test evaluation runs the run's own command with training off: with extra flags (dropout) the runner would
# refuse any other (the model_dir's settings differ)
settings = dataclasses.replace(settings, extra_finetune_flags="--dropout=0.1 --dropatt=0.1")
commands = []
transfer.run_logged = lambda cmd, log: commands.append(cmd)
run(second, "plm", "1e-3", "0", 50.0)
transfer.evaluate_test(settings, second, task, "plm", "1e-3", "0")
trained = transfer.run_command(settings, second, task, "plm", "1e-3", "0")
assert "--dropout=0.1" in trained and any(a.startswith("--init_checkpoint=") for a in trained), trained
assert len(commands) == 1 and commands[0][:len(trained)] == trained, commands
assert commands[0][len(trained):] == ["--do_train=false", "--do_eval=true", "--eval_split=test",
                                      f"--eval_checkpoint_steps={transfer.final_step(task, settings)}"], commands
# best of 8 checkpoints on dev: the test evaluation scores the dev-chosen one (180), not the last
task.selection = "best_checkpoint"
out = transfer.run_dir(second, "topic", "plm", "3e-4", "1")
for step in range(60, 481, 60):
    results.record(out, "classifier", "accuracy", step, {"accuracy": 0.9 if step == 180 else 0.5}, split="dev")
commands.clear()
transfer.evaluate_test(settings, second, task, "plm", "3e-4", "1")
assert commands[0][-1] == "--eval_checkpoint_steps=180", commands
task.selection = "last"
# a run restored for a table of other flags is not this table's
settings = dataclasses.replace(settings, extra_finetune_flags="--dropout=0.1 --dropatt=0.1 --lr_layer_decay_rate=0.75")
try:
    transfer.run_score(settings, third, task, "plm", "3e-4", "0")
    raise SystemExit("a run restored for other flags was taken")
except Exception as e:  # UserError
    assert "restored from the ledger for a table with other flags" in str(e), e
settings = dataclasses.replace(settings, extra_finetune_flags="")
assert transfer.run_score(settings, third, task, "plm", "3e-4", "0") is not None
# another table (its own ledger) restores from this one's, read only, and keeps the runs as they were made
other_ledger = os.path.join(root, "other_runs.json")
settings = dataclasses.replace(settings, runs_ledger=other_ledger, restore_from=(path,))
before = open(path).read()
fifth = work_dir("fifth")
transfer.sync_ledger(settings, fifth, {"topic": task})
theirs, ours = transfer_ledger.read(path)["runs"], transfer_ledger.read(other_ledger)["runs"]
assert "topic/scratch/lr3e-4-seed1" in ours and all(ours[k] == theirs[k] for k in ours), sorted(ours)
assert open(path).read() == before  # read only
restored = transfer.run_dir(fifth, "topic", "scratch", "3e-4", "1")
assert read_score(restored)["accuracy"] == 45.0
import json
assert json.load(open(os.path.join(restored, transfer_ledger.RESTORED_MARKER)))["ledger"] == path
transfer.sync_ledger(settings, fifth, {"topic": task})  # again: nothing changes
assert transfer_ledger.read(other_ledger)["runs"] == ours
print("ok")
'''


def test_transfer_keeps_runs_in_the_ledger_and_restores_those_of_the_same_provenance(tmp_path):
    out = subprocess.run([sys.executable, "-c", RESTORE_CHECK, str(tmp_path)], cwd=REPO,
                         capture_output=True, text=True, timeout=300)
    assert out.stdout.strip().endswith("ok"), out.stdout[-2000:] + out.stderr[-3000:]


RESUME_CHECK = r'''
import dataclasses, os, shutil, sys
from bench.studies.transfer import transfer, transfer_ledger
from xlnet_tf.artifacts import results
transfer.define_flags()
root = sys.argv[1]
work = os.path.join(root, "work")
os.makedirs(os.path.join(work, "plm_model"))
for rel, text in (("spiece.model", "pieces"), ("plm_model/xlnet_config.json", "{}")):
    with open(os.path.join(work, rel), "w") as f:
        f.write(text)
ledger_file = os.path.join(root, "runs.json")
transfer.FLAGS(["transfer", "--tasks=topic", f"--work_dir={work}", "--inits=scratch", f"--runs_ledger={ledger_file}",
                "--learning_rates=3e-4"])
settings = transfer.TransferSettings.from_flags(transfer.FLAGS)
task = transfer.tasks("data/finetune")["topic"]
code = {"runner": "a" * 40}
transfer_ledger.code_version = lambda commit="HEAD", paths=transfer_ledger.CODE_PATHS, untracked=False: (
    code["runner"] if paths == transfer_ledger.RUNNER_CODE_PATHS else "f" * 40)
launches = []  # (seed, whether the run's first checkpoint was there when the runner started)
def runner(killed):  # the runner: a checkpoint, then its checkpoints scored in order; killed after the first
    def run_logged(cmd, log):
        with open(log, "a") as f:  # as bench/transfer.run_logged: the command heads its output
            f.write(f"\n$ {' '.join(cmd)}\n")
        out = next(a for a in cmd if a.startswith("--model_dir=")).split("=", 1)[1]
        seed = next(a for a in cmd if a.startswith("--seed="))
        launches.append((seed, os.path.exists(os.path.join(out, "ckpt-60.index"))))
        os.makedirs(out, exist_ok=True)
        open(os.path.join(out, "ckpt-60.index"), "w").close()
        results.record(out, "classifier", "accuracy", 60, {"accuracy": 0.9}, split="dev")
        if killed:
            raise RuntimeError("killed")
        results.record(out, "classifier", "accuracy", transfer.final_step(task, settings), {"accuracy": 0.5},
                       split="dev")
    return run_logged
def attempt(seed, killed):
    transfer.run_logged = runner(killed)
    try:
        return transfer.finetune(settings, work, task, "scratch", "3e-4", seed)
    except RuntimeError as e:
        assert str(e) == "killed", e
out = transfer.run_dir(work, "topic", "scratch", "3e-4", "0")
attempt("0", killed=True)
# a partial scoring is not a result: no score, nothing kept in the ledger (by the run or by a later sync)
assert transfer.read_score(out, task, transfer.final_step(task, settings)) is None
transfer.sync_ledger(settings, work, {"topic": task})
assert not os.path.exists(ledger_file) or not transfer_ledger.read(ledger_file)["runs"]
# the same command and runner code: resumed in place (its checkpoint kept), then finished and kept
assert attempt("0", killed=False) == {"accuracy": 50.0, "step": transfer.final_step(task, settings)}
assert launches == [("--seed=0", False), ("--seed=0", True)], launches
assert transfer.launch_code(out) == "f" * 40  # both launches from one code version
assert list(transfer_ledger.read(ledger_file)["runs"]) == ["topic/scratch/lr3e-4-seed0"]
# anything that shapes the run changed since it was killed: started again from nothing
fingerprint = transfer_ledger.fingerprint
for change in ("flags", "flag file", "runner code", "uncommitted runner code"):
    launches.clear()
    attempt("1", killed=True)
    if change == "flags":
        settings = dataclasses.replace(settings, extra_finetune_flags="--dropout=0.1 --dropatt=0.1")
    elif change == "flag file":  # the command names the task's flag file; its content changed
        transfer_ledger.fingerprint = lambda p: "0" * 64 if p == task.flagfile else fingerprint(p)
    else:
        code["runner"] = "b" * 40 if change == "runner code" else "b" * 40 + "+changes"
    attempt("1", killed=True)
    assert launches == [("--seed=1", False), ("--seed=1", False)], (change, launches)
    settings = dataclasses.replace(settings, extra_finetune_flags="")
    code["runner"], transfer_ledger.fingerprint = "a" * 40, fingerprint
    shutil.rmtree(transfer.run_dir(work, "topic", "scratch", "3e-4", "1"))
# a table with other fine-tuning flags in the same work_dir: the finished run there is not its run
settings = dataclasses.replace(settings, extra_finetune_flags="--lr_layer_decay_rate=0.75")
for read in (lambda: transfer.finetune(settings, work, task, "scratch", "3e-4", "0"),
             lambda: transfer.collect(settings, work, {"topic": task}),
             lambda: transfer.sync_ledger(settings, work, {"topic": task})):
    try:
        read()
        raise SystemExit("a run of another command was taken as this table's")
    except Exception as e:  # UserError
        assert "made by another command" in str(e) and "--lr_layer_decay_rate=0.75" in str(e), e
settings = dataclasses.replace(settings, extra_finetune_flags="")
assert transfer.run_score(settings, work, task, "scratch", "3e-4", "0")["accuracy"] == 50.0
# ... nor is a run made with its task flag file as it was before an edit
fingerprint = transfer_ledger.fingerprint
transfer_ledger.fingerprint = lambda p: "0" * 64 if p == task.flagfile else fingerprint(p)
try:
    transfer.run_score(settings, work, task, "scratch", "3e-4", "0")
    raise SystemExit("a run of an edited flag file was taken")
except Exception as e:  # UserError
    assert "made with another" in str(e) and "transfer_topic.flags" in str(e), e
transfer_ledger.fingerprint = fingerprint
# --extra_finetune_flags as the script reads them
for extra, message in (("--train_steps 500", "'500' is not a --name=value flag"),
                       ("--flagfile=more.flags", "no --flagfile")):
    try:
        transfer.check_extra_flags(extra)
        raise SystemExit(f"accepted {extra}")
    except Exception as e:  # UserError
        assert message in str(e), e
transfer.check_extra_flags("--dropout=0.1 --nouse_summ_proj --train_steps=500")
# a ledger entry without its final dev evaluation (kept by older code) is not restored as a finished run
ledger = transfer_ledger.read(ledger_file)
entry = ledger["runs"]["topic/scratch/lr3e-4-seed0"]
entry["eval_results"]["evaluations"] = [e for e in entry["eval_results"]["evaluations"] if e["step"] == 60]
transfer_ledger.save(ledger_file, "topic/scratch/lr3e-4-seed0",
                     transfer.run_provenance(settings, work, task, "scratch", "3e-4", "0"), entry["eval_results"],
                     entry["machine"])
shutil.rmtree(transfer.run_dir(work, "topic", "scratch", "3e-4", "0"))
transfer.sync_ledger(settings, work, {"topic": task})
assert not os.path.exists(transfer.run_dir(work, "topic", "scratch", "3e-4", "0"))
print("ok")
'''


def test_a_killed_fine_tuning_run_is_resumed_only_when_nothing_that_shapes_it_changed(tmp_path):
    """The transfer study's chain is killed with its session: a run killed while training or while scoring its
    checkpoints is no result (its best so far is not its best); the next launch resumes it when its command and
    the runner's code are the same (the training loop resumes exactly: tests/run/test_finetune_runners.py), and starts
    it again otherwise. A finished run is this table's only when this table's command made it."""
    out = subprocess.run([sys.executable, "-c", RESUME_CHECK, str(tmp_path)], cwd=REPO,
                         capture_output=True, text=True, timeout=300)
    assert out.stdout.strip().endswith("ok"), out.stdout[-2000:] + out.stderr[-3000:]


def test_runner_code_version_counts_uncommitted_and_new_files_but_not_flag_files(tmp_path, monkeypatch):
    """What a killed run's resumption compares (bench/transfer.launch_record): the last commit of the code its
    process runs, '+changes' with an edit or a new untracked module there; a new flag file or prose is no change."""
    def git(*args):
        subprocess.run(["git", *args], cwd=tmp_path, check=True, capture_output=True)

    git("init", "-q")
    git("config", "user.email", "t@t")
    git("config", "user.name", "t")
    for rel in ("xlnet_tf/model.py", "run/run_classifier.py", "run/flags/a.flags", "bench/transfer.py"):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text("x = 1\n")
    git("add", ".")
    git("commit", "-qm", "code")
    monkeypatch.setattr(ledger, "REPO", str(tmp_path))
    first = ledger.code_version(paths=ledger.RUNNER_CODE_PATHS, untracked=True)
    assert first and len(first) == 40
    (tmp_path / "run" / "flags" / "b.flags").write_text("--seed=1\n")  # a new flag file, even committed
    (tmp_path / "bench" / "transfer.py").write_text("x = 2\n")  # the orchestration
    (tmp_path / "xlnet_tf" / "NOTES.md").write_text("prose\n")
    git("add", ".")
    git("commit", "-qm", "flags, bench and prose")
    assert ledger.code_version(paths=ledger.RUNNER_CODE_PATHS, untracked=True) == first
    (tmp_path / "xlnet_tf" / "new_module.py").write_text("y = 1\n")  # untracked, imported by the runner
    assert ledger.code_version(paths=ledger.RUNNER_CODE_PATHS, untracked=True) == first + "+changes"
    assert ledger.code_version(paths=ledger.RUNNER_CODE_PATHS) == first  # tracked files only
    (tmp_path / "xlnet_tf" / "new_module.py").unlink()
    (tmp_path / "run" / "run_classifier.py").write_text("x = 3\n")
    assert ledger.code_version(paths=ledger.RUNNER_CODE_PATHS, untracked=True) == first + "+changes"
