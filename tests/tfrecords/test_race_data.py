"""RACE-format multiple choice: reading, per-choice packing (aliasing bug #204 fixed),
records + manifest, reader, CLI."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from tests import data_fixtures as F
from tfrecords import manifest as manifest_lib
from tfrecords import race_data as rd
from xlnet_tf.text.tokenization import CLS_ID, SEP_ID

MC = os.path.join(F.DATA_DIR, "mc_wordnet")


def _env():
    return dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", CUDA_VISIBLE_DEVICES="-1")


def original_convert_buggy(tokens_context, qa_ids_list, max_seq_length, max_qa_length):
    """Transcription of the original run_race.py `convert_single_example`, WITH its aliasing
    bug (#204): when the context is not truncated, `tokens` IS `tokens_context`."""
    input_ids, input_mask, all_seg_ids = [], [], []
    for tokens_qa in qa_ids_list:
        tokens_qa = list(tokens_qa)
        if len(tokens_qa) > max_qa_length:
            tokens_qa = tokens_qa[-max_qa_length:]
        if len(tokens_context) + len(tokens_qa) > max_seq_length - 3:
            tokens = tokens_context[:max_seq_length - 3 - len(tokens_qa)]
        else:
            tokens = tokens_context
        segment_ids = [0] * len(tokens)
        tokens.append(SEP_ID)
        segment_ids.append(0)
        tokens.extend(tokens_qa)
        segment_ids.extend([1] * len(tokens_qa))
        tokens.append(SEP_ID)
        segment_ids.append(1)
        tokens.append(CLS_ID)
        segment_ids.append(2)
        cur_input_ids, cur_input_mask = tokens, [0] * len(tokens)
        if len(tokens) < max_seq_length:
            delta = max_seq_length - len(tokens)
            cur_input_ids = [0] * delta + cur_input_ids
            cur_input_mask = [1] * delta + cur_input_mask
            segment_ids = [4] * delta + segment_ids
        input_ids.append(cur_input_ids[:max_seq_length])
        input_mask.append(cur_input_mask[:max_seq_length])
        all_seg_ids.append(segment_ids[:max_seq_length])
    return np.array(input_ids), np.array(input_mask), np.array(all_seg_ids)


# ---- packing ----------------------------------------------------------------------------------

def test_pack_choice_exact_layout():
    f = rd.pack_choice([11, 12, 13, 14, 15, 16], [21, 22], 12, 5)
    np.testing.assert_array_equal(f["input_ids"], [0, 11, 12, 13, 14, 15, 16, SEP_ID, 21, 22,
                                                   SEP_ID, CLS_ID])
    np.testing.assert_array_equal(f["segment_ids"], [4, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 2])
    np.testing.assert_array_equal(f["attention_mask"], [0] + [1] * 11)
    assert f["attention_mask"].dtype == np.float32 and f["input_ids"].dtype == np.int32


def test_qa_tail_truncation_by_default_head_as_option_and_context_cut():
    qa = [21, 22, 23, 24, 25]
    tail = rd.pack_choice([11, 12], qa, 10, 3)
    np.testing.assert_array_equal(tail["input_ids"], [0, 0, 11, 12, SEP_ID, 23, 24, 25, SEP_ID,
                                                      CLS_ID])
    head = rd.pack_choice([11, 12], qa, 10, 3, qa_truncation="head")
    np.testing.assert_array_equal(head["input_ids"][5:8], [21, 22, 23])
    cut = rd.pack_choice(list(range(100, 120)), [21, 22], 12, 5)  # context: first 12-3-2 = 7
    np.testing.assert_array_equal(cut["input_ids"], list(range(100, 107)) + [SEP_ID, 21, 22,
                                                                              SEP_ID, CLS_ID])
    assert cut["attention_mask"].all()
    with pytest.raises(ValueError, match="max_qa_length"):
        rd.pack_choice([1], [2], 8, 6)
    with pytest.raises(ValueError, match="qa_truncation"):
        rd.pack_choice([1], [2], 8, 2, qa_truncation="middle")


def test_make_qa_cloze_and_question():
    assert rd.make_qa("The _ is red.", "apple") == "The apple is red."
    assert rd.make_qa("Which word means: a fruit?", "apple") == "Which word means: a fruit? apple"


def test_choices_are_independent_aliasing_bug_204_fixed(rng):
    """Each option's features depend only on the article and that option."""
    ctx = [11, 12, 13]  # short: the original would alias and grow it
    qas = [[21, 22], [31], [41, 42, 43], [51, 52, 53, 54, 55, 56]]
    L, Q = 16, 4
    got = rd.pack_choices(ctx, qas, L, Q)
    assert ctx == [11, 12, 13] and qas[0] == [21, 22]  # inputs not mutated
    for j, qa in enumerate(qas):
        alone = rd.pack_choice(ctx, qa, L, Q)
        for k in alone:
            np.testing.assert_array_equal(got[k][j], alone[k])
    for perm in ([3, 2, 1, 0], [1, 3, 0, 2]):  # order of the other options does not matter
        other = rd.pack_choices(ctx, [qas[p] for p in perm], L, Q)
        for pos, p in enumerate(perm):
            np.testing.assert_array_equal(other["input_ids"][pos], got["input_ids"][p])
    # the original code agrees on option 0 only: options 1-3 see the earlier options
    ids, mask, seg = original_convert_buggy(list(ctx), qas, L, Q)
    np.testing.assert_array_equal(ids[0], got["input_ids"][0])
    np.testing.assert_array_equal(1 - mask[0], got["attention_mask"][0])
    np.testing.assert_array_equal(seg[0], got["segment_ids"][0])
    assert not np.array_equal(ids[1], got["input_ids"][1])
    # with the aliasing removed the transcription equals ours everywhere (random cases)
    for _ in range(200):
        L = int(rng.randint(6, 30))
        Q = int(rng.randint(1, L - 2))
        ctx = rng.randint(10, 900, size=rng.randint(0, 40)).tolist()
        qas = [rng.randint(10, 900, size=rng.randint(0, 12)).tolist() for _ in range(4)]
        ours = rd.pack_choices(ctx, qas, L, Q)
        for j in range(4):
            ids, mask, seg = original_convert_buggy(list(ctx), [qas[j]], L, Q)
            np.testing.assert_array_equal(ours["input_ids"][j], ids[0])
            np.testing.assert_array_equal(ours["segment_ids"][j], seg[0])
            np.testing.assert_array_equal(ours["attention_mask"][j], 1 - mask[0])


def test_pack_race_example_and_batch_conversion_agree():
    tok = F.tiny_tokenizer()
    exs = rd.read_race_split(MC, "dev")[:6]
    conv = rd.convert_race_examples(tok, exs, 40, 12)
    for k, ex in enumerate(exs):
        one = rd.pack_race_example(tok, ex.context, ex.qa_list, 40, 12)
        for name in one:
            np.testing.assert_array_equal(conv[name][k], one[name])
        assert conv["label"][k] == ex.label
    assert conv["input_ids"].shape == (6, 4, 40)
    assert (conv["input_ids"][:, :, -1] == CLS_ID).all()
    assert (conv["segment_ids"][:, :, -1] == 2).all()


# ---- reading ----------------------------------------------------------------------------------

def _article(questions=("Which word means: a fruit?", "The _ is loud."),
             options=(["apple", "stone", "cloud", "river"], ["drum", "feather", "snow", "moss"]),
             answers=("A", "A"), article="An apple fell. The drum was loud."):
    return {"article": article, "questions": list(questions),
            "options": [list(o) for o in options], "answers": list(answers), "id": "x"}


def _put(path, obj=None, raw=None):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(raw if raw is not None else json.dumps(obj).encode("utf-8"))
    return str(path)


def test_race_layout_with_levels(tmp_path):
    _put(tmp_path / "train" / "middle" / "1.txt", _article())
    _put(tmp_path / "train" / "high" / "7.txt", _article(answers=("C", "D")))
    _put(tmp_path / "train" / "high" / "notes.md", raw=b"not an article")  # ignored
    exs = rd.read_race_split(str(tmp_path), "train")
    assert [(e.guid, e.level, e.label) for e in exs] == [
        ("middle/1.txt#0", 0, 0), ("middle/1.txt#1", 0, 0), ("high/7.txt#0", 1, 2),
        ("high/7.txt#1", 1, 3)]
    assert exs[1].qa_list == ["The drum is loud.", "The feather is loud.", "The snow is loud.",
                              "The moss is loud."]
    assert exs[0].qa_list[0] == "Which word means: a fruit? apple"
    assert [e.level for e in rd.read_race_split(str(tmp_path), "train", ["high"])] == [1, 1]


def test_mc_wordnet_flat_layout():
    train = rd.read_race_split(MC, "train")
    dev = rd.read_race_split(MC, "dev")
    assert (len(train), len(dev)) == (100, 50)
    assert all(e.level == rd.FLAT_LEVEL for e in train + dev)
    with open(os.path.join(MC, "dev", "wordnet_dev_00001.txt"), encoding="utf-8") as f:
        art = json.load(f)
    first = dev[:len(art["questions"])]
    assert [e.label for e in first] == [ord(a) - 65 for a in art["answers"]]
    assert first[0].qa_list == [f"{art['questions'][0]} {o}" for o in art["options"][0]]
    assert first[0].context == art["article"] and first[0].guid == "wordnet_dev_00001.txt#0"
    with pytest.raises(rd.DataError, match="no middle/high folders"):
        rd.read_race_split(MC, "dev", ["high"])


def test_bad_race_input_names_the_file(tmp_path):
    cases = {
        "json": (b'{"article": "x",\n "questions": [}', r"json\.txt:2: invalid JSON"),
        "utf8": (b'{"article": "caf\xe9",\n}', r"utf8\.txt:1: invalid UTF-8"),
        "empty": (b"", r"empty\.txt: empty file"),
        "key": (json.dumps({k: v for k, v in _article().items() if k != "options"}).encode(),
                r"key\.txt: missing key 'options'"),
        "three": (json.dumps(_article(options=(["a", "b", "c"], ["d", "e", "f", "g"]))).encode(),
                  r"three\.txt: question 0: options must be 4 strings"),
        "letter": (json.dumps(_article(answers=("A", "E"))).encode(),
                   r"letter\.txt: question 1: answer 'E' is not one of A, B, C, D"),
        "count": (json.dumps(_article(answers=("A",))).encode(),
                  r"count\.txt: 'answers' must be a list with one letter per question"),
    }
    for name, (raw, pattern) in cases.items():
        d = tmp_path / name
        _put(d / "dev" / f"{name}.txt", raw=raw)
        with pytest.raises(rd.DataError, match=pattern):
            rd.read_race_split(str(d), "dev")
    with pytest.raises(rd.DataError, match="directory not found"):
        rd.read_race_split(str(tmp_path), "train")
    (tmp_path / "hollow" / "dev").mkdir(parents=True)
    with pytest.raises(rd.DataError, match="no article files"):
        rd.read_race_split(str(tmp_path / "hollow"), "dev")
    unl = {k: v for k, v in _article().items() if k != "answers"}
    _put(tmp_path / "unl" / "test" / "a.txt", unl)  # test splits may be unlabeled
    assert [e.label for e in rd.read_race_split(str(tmp_path / "unl"), "test")] == [None, None]


# ---- records and reader -----------------------------------------------------------------------

@pytest.fixture(scope="module")
def mc_records(tmp_path_factory):
    out = str(tmp_path_factory.mktemp("mc_records"))
    m = rd.build_race_records(MC, F.tiny_spm(), out, max_seq_length=48, max_qa_length=16,
                              eval_batch_size=8, seed=5, task="mc_wordnet")
    return out, m


def _read_all(ds):
    batches = [{k: v.numpy() for k, v in b.items()} for b in ds]
    return batches, {k: np.concatenate([b[k] for b in batches]) for k in batches[0]}


def test_race_records_round_trip_and_eval_padding(mc_records):
    out, m = mc_records
    dev = m["splits"]["dev"]
    assert (dev["num_examples"], dev["num_padding"], dev["layout"]) == (50, 6, "flat")
    assert m["max_qa_length"] == 16 and m["qa_truncation"] == "tail" and m["num_choices"] == 4
    want = rd.convert_race_examples(F.tiny_tokenizer(), rd.read_race_split(MC, "dev"), 48, 16)
    ds = rd.race_dataset(out, 8, False, 48, F.tiny_spm(), max_qa_length=16)
    assert ds.element_spec["input_ids"].shape.as_list() == [8, 4, 48]
    assert ds.element_spec["attention_mask"].dtype.name == "float32"
    batches, got = _read_all(ds)
    assert len(batches) == 7
    real = got["is_real_example"] == 1
    assert real.sum() == 50 and (got["example_index"][~real] == -1).all()
    np.testing.assert_array_equal(got["example_index"][real], np.arange(50))
    for k in ("input_ids", "segment_ids", "attention_mask", "label", "level"):
        np.testing.assert_array_equal(got[k][real], want[k])
    np.testing.assert_array_equal(got["input_ids"][~real][:, :, -3:],
                                  np.tile([SEP_ID, SEP_ID, CLS_ID], (6, 4, 1)))
    assert rd.read_race_guids(out, "dev")[0] == "wordnet_dev_00001.txt#0"
    # train: shuffled records, mapped back by example_index
    want = rd.convert_race_examples(F.tiny_tokenizer(), rd.read_race_split(MC, "train"), 48, 16)
    _, got = _read_all(rd.race_dataset(out, 10, False, 48, split="train"))
    idx = got["example_index"]
    assert sorted(idx.tolist()) == list(range(100)) and idx.tolist() != list(range(100))
    np.testing.assert_array_equal(got["input_ids"], want["input_ids"][idx])
    np.testing.assert_array_equal(got["label"], want["label"][idx])
    b = next(iter(rd.race_dataset(out, 4, True, 48)))
    assert b["input_ids"].shape == (4, 4, 48) and b["label"].dtype.name == "int32"


def test_race_manifest_mismatches(mc_records, tmp_path):
    out, _ = mc_records
    with pytest.raises(manifest_lib.ManifestError, match="max_seq_length: 48 in the records, 64 given"):
        rd.race_dataset(out, 8, False, 64)
    with pytest.raises(manifest_lib.ManifestError, match="max_qa_length: 16 in the records, 32 given"):
        rd.race_dataset(out, 8, False, 48, max_qa_length=32)
    fake = tmp_path / "x.model"
    fake.write_bytes(b"other")
    with pytest.raises(manifest_lib.ManifestError, match="text.spiece_sha256: '[0-9a-f]+' in the records"):
        rd.race_dataset(out, 8, False, 48, str(fake))
    with pytest.raises(manifest_lib.ManifestError, match="kind is 'xlnet_race'"):
        from tfrecords import classifier_data
        classifier_data.classifier_dataset(out, 8, False, 48)


def test_race_cli(tmp_path):
    out = str(tmp_path / "mc")
    args = [sys.executable, "tfrecords/build_race.py", f"--data_dir={MC}",
            f"--spiece_model={F.tiny_spm()}", f"--output_dir={out}", "--max_seq_length=32",
            "--max_qa_length=12", "--splits=dev", "--task=mc_wordnet"]
    r = subprocess.run(args, cwd=F.REPO_ROOT, env=_env(), capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    m = manifest_lib.read_manifest(out, kind=rd.RACE_KIND)
    assert m["task"] == "mc_wordnet" and m["splits"]["dev"]["num_padding"] == 14
    r = subprocess.run(args + ["--high_only"], cwd=F.REPO_ROOT, env=_env(),
                       capture_output=True, text=True, timeout=60)
    assert r.returncode != 0 and "high_only" in r.stderr
    r = subprocess.run(args[:-1] + ["--levels=high"], cwd=F.REPO_ROOT, env=_env(),
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and "build_race.py: error:" in r.stderr
    assert "no middle/high folders" in r.stderr and "Traceback" not in r.stderr
