"""The transfer table's tagging baselines: the most-frequent-tag tagger, scored as the runner scores."""

import os
import shutil

from seqeval.metrics import f1_score

from bench.studies.transfer import transfer
from tfrecords.readers import conll

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
NER = os.path.join(REPO, "data", "finetune", "wnut16")


def test_the_entity_baseline_is_seqevals_f1_of_each_words_most_frequent_tag(tmp_path):
    for split, source in (("train", "train"), ("dev", "dev"), ("test", "train")):
        shutil.copy(os.path.join(NER, f"{source}.txt"), tmp_path / f"{split}.txt")
    scores = transfer.most_frequent_tag(str(tmp_path), kind="entities")
    train = conll.read_conll(os.path.join(NER, "train.txt"))
    dev = conll.read_conll(os.path.join(NER, "dev.txt"))
    tags = {}
    for s in train:  # every word of the slice's train split has one most frequent tag, or O (checked below)
        for w, t in zip(s.words, s.labels):
            tags.setdefault(w, []).append(t)
    best = {w: max(set(ts), key=lambda t: (ts.count(t), -ts.index(t))) for w, ts in tags.items()}
    guess = [[best.get(w, "O") for w in s.words] for s in dev]
    assert abs(scores["f1"] - 100 * f1_score([list(s.labels) for s in dev], guess)) < 1e-9
    assert 0 < scores["f1"] < 100
    # on the words it learned from, the lookup is right except where one word carries several tags
    assert scores["test_f1"] > scores["f1"]


def test_the_ner_task_reads_its_own_folder_and_scores_entity_f1():
    task = transfer.tasks("labeled", ner_dir="/data/wnut16")["ner_wnut16"]
    assert task.data_args == ["--data_dir=/data/wnut16"] and task.primary == "f1" and task.test_split == "test"
    flags = transfer.read_flagfile(task.flagfile)
    assert flags["metrics"] == "entities" and flags["tagset"] == "wnut16"
