"""bench/studies/transfer/transfer.py --corpus_task: a classification task's train texts (labels dropped) as the
pretraining corpus of task-adaptive pretraining (the transfer study's pretrain_cpu_tapt.flags)."""

import os
import subprocess
import sys

import pytest

from bench.studies.transfer import transfer
from xlnet_tf.errors import UserError

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def classification_set(tmp_path, rows):
    data = tmp_path / "data"
    data.mkdir()
    (data / "train.tsv").write_text("label\ttext\n" + "".join(f"{label}\t{text}\n" for label, text in rows))
    return transfer.TransferSet("tweets", "run_classifier.py", [f"--data_dir={data}"], ("accuracy",), "accuracy")


def test_the_train_texts_become_one_document_each_without_labels(tmp_path):
    task = classification_set(tmp_path, [("positive", "So  lucky."), ("negative", "Ugh.\tno"), ("positive", "  ")])
    work = tmp_path / "work"
    corpus = transfer.stage_task_corpus(str(work), task)
    text = open(os.path.join(corpus, "tweets_train.txt"), encoding="utf-8").read()
    assert text == "So lucky.\n\nUgh.\n"  # a tab ends the text column (no quoting); the blank text is dropped
    assert "positive" not in text
    # a second call keeps the file (the stage is resumable) and still refuses nothing
    assert transfer.stage_task_corpus(str(work), task) == corpus


def test_a_corpus_folder_holding_other_text_is_refused(tmp_path):
    task = classification_set(tmp_path, [("positive", "So lucky.")])
    work = tmp_path / "work"
    (work / "corpus").mkdir(parents=True)
    (work / "corpus" / "wiki.txt").write_text("other text\n")
    with pytest.raises(UserError, match=r"--corpus_task=tweets: .* also holds \['wiki.txt'\]"):
        transfer.stage_task_corpus(str(work), task)
    assert sorted(os.listdir(work / "corpus")) == ["wiki.txt"]


def test_only_a_classification_task_can_be_a_corpus(tmp_path):
    task = transfer.TransferSet("squad_v1", "run_squad.py", ["--train_file=x.json"], ("f1",), "f1")
    with pytest.raises(UserError, match="only a classification task's train.tsv"):
        transfer.stage_task_corpus(str(tmp_path), task)


def test_an_unknown_corpus_task_is_a_one_line_usage_error(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "bench.studies.transfer.transfer", f"--work_dir={tmp_path / 'w'}",
                           "--corpus_task=nope", "--stages=corpus"], cwd=REPO, capture_output=True, text=True)
    assert proc.returncode != 0
    assert "--corpus_task=nope: unknown task" in proc.stderr
    assert not os.path.exists(tmp_path / "w")


def test_the_task_only_control_is_the_adapted_recipe_without_the_corpus_model():
    """The transfer study's pretrain_cpu_task_only.flags: as many steps on the task's text as the adapted model gets,
    from random weights at the recipe's own rate (the recipe's model is what task-adaptive pretraining starts from)."""
    recipe = transfer.read_flagfile(os.path.join(REPO, "run", "flags", "pretrain_cpu.flags"))
    adapted = transfer.read_flagfile(os.path.join(transfer.FLAGS_DIR, "pretrain_cpu_tapt.flags"))
    control = transfer.read_flagfile(os.path.join(transfer.FLAGS_DIR, "pretrain_cpu_task_only.flags"))
    assert adapted["init_checkpoint"].endswith("plm_cpu/final") and "init_checkpoint" not in control
    assert control["train_steps"] == adapted["train_steps"] == "1000"
    assert (control["learning_rate"], control["warmup_steps"]) == (recipe["learning_rate"], recipe["warmup_steps"])
    model = ("n_layer", "d_model", "n_head", "d_inner", "n_token", "seq_len", "train_batch_size")
    assert [control[k] for k in model] == [adapted[k] for k in model] == [recipe[k] for k in model]
