"""The cloze task (tfrecords/sets/cloze.py): questions, splits by document, the shipped slice, baselines, CLI."""

import json
import os
import random
import subprocess
import sys

import pytest

from bench.studies.cloze import cloze_baselines as cb
from tests import data_fixtures as F
from tfrecords.sets import cloze
from tfrecords import race_data as rd

SLICE = os.path.join(F.REPO_ROOT, "data", "finetune", "cloze")
POS_SLICE = os.path.join(F.REPO_ROOT, "data", "finetune", "brown_pos")
LEXICON = {"dog": "nn", "cat": "nn", "horse": "nn", "bird": "nn", "fish": "nn", "dogs": "nns", "ran": "vbd",
           "walked": "vbd", "red": "jj"}
PASSAGE = ["the dog saw a cat near the horse.", "a bird and a fish were there.", "the dogs ran and walked."]


def _settings(**kw):
    return cloze.ClozeSettings(**dict(dict(min_passage_sentences=2, max_passage_words=40), **kw))


def test_question_blanks_a_passage_word_among_candidates_of_its_tag():
    doc = PASSAGE + ["then the cat sat on a red mat."]
    qs = cloze.document_questions(doc, "t-0", LEXICON, _settings(), random.Random(0))
    assert len(qs) == 1  # sentence 2 has no eligible word (no passage word of 4 same-tag candidates), 3 has "cat"
    q = qs[0]
    assert q["id"] == "t-0-s003" and q["questions"] == ["then the _ sat on a red mat."]
    assert q["article"] == " ".join(PASSAGE) and q["tags"] == ["nn"]
    options = q["options"][0]
    assert len(set(options)) == 4 and all(LEXICON[o] == "nn" for o in options)
    assert options["ABCD".index(q["answers"][0])] == "cat"
    assert all(o in q["article"].split() or o + "." in q["article"] for o in options)


def test_punctuation_kept_and_case_and_repeats_excluded():
    lead, word, trail = cloze.split_token('("cat,"')
    assert (lead, word, trail) == ('("', "cat", ',"')
    doc = PASSAGE + ["The Cat saw the cat."]  # "Cat" is not lowercase, "cat" fills the blank with its period kept
    q = cloze.document_questions(doc, "t-0", LEXICON, _settings(), random.Random(0))[0]
    assert q["questions"] == ["The Cat saw the _."]
    doc = PASSAGE + ["the cat saw the cat."]  # a word twice in the query is never blanked
    assert cloze.document_questions(doc, "t-0", LEXICON, _settings(), random.Random(0)) == []


def test_passage_limits():
    doc = PASSAGE + ["then the cat sat."]
    assert cloze.document_questions(doc, "t", LEXICON, _settings(max_passage_words=10), random.Random(0)) == []
    assert cloze.document_questions(doc, "t", LEXICON, _settings(max_query_words=3), random.Random(0)) == []
    assert cloze.document_questions(doc, "t", LEXICON, _settings(min_passage_sentences=4), random.Random(0)) == []
    with pytest.raises(cloze.ClozeError, match="min_share"):
        cloze.ClozeSettings(min_share=0.4).validate()
    with pytest.raises(cloze.ClozeError, match="min_passage_sentences=5 is above --max_passage_sentences=4"):
        cloze.ClozeSettings(min_passage_sentences=5, max_passage_sentences=4).validate()


def test_lexicon_from_brown_tags():
    assert [cloze.base_tag(t) for t in ("nn-tl", "NNS-HL", "vbd", "nn$", "pps+bez", "fw-nn", "do*")] == [
        "nn", "nns", "vbd", None, None, None, None]
    lexicon = cloze.build_lexicon([os.path.join(POS_SLICE, "train.txt")])
    assert lexicon and set(lexicon.values()) <= set(cloze.CONTENT_TAGS)
    assert lexicon.get("years") == "nns" and "the" not in lexicon
    with pytest.raises(cloze.ClozeError, match="lexicon_conll: .*nothing.txt not found"):
        cloze.build_lexicon([os.path.join(POS_SLICE, "nothing.txt")])


def test_heldout_documents_split_whole_and_balanced():
    per_doc = {k: ("wiki" if k % 3 else "brown", 1 + k % 5) for k in range(40)}
    split = cloze.assign_heldout(per_doc, seed=0)
    assert set(split) == set(per_doc) and set(split.values()) == {"dev", "test"}
    for source in ("wiki", "brown"):
        have = {s: sum(n for k, (src, n) in per_doc.items() if src == source and split[k] == s)
                for s in ("dev", "test")}
        assert abs(have["dev"] - have["test"]) <= 5
    assert cloze.assign_heldout(per_doc, seed=0) == split


def _corpus(tmp_path):
    docs = [PASSAGE + ["then the cat sat on a red mat.", "the horse ran."] for _ in range(4)]
    text = "\n\n".join("\n".join(d) for d in docs) + "\n"
    (tmp_path / "train.txt").write_text(text)
    (tmp_path / "heldout.txt").write_text(text)
    (tmp_path / "docs.tsv").write_text("source\tdocument\n" + "".join(f"toy\td{k}\n" for k in range(4)))
    return dict(train_corpus={"toy": str(tmp_path / "train.txt")}, heldout_corpus=str(tmp_path / "heldout.txt"),
                heldout_docs=str(tmp_path / "docs.tsv"))


def test_build_and_write_refuses_existing_and_leaves_nothing_on_failure(tmp_path):
    paths = _corpus(tmp_path)
    qs = cloze.build(lexicon=LEXICON, settings=_settings(), sources=["toy"], **paths)
    assert len(qs["train"]) == 8 and len(qs["dev"]) == 4 and len(qs["test"]) == 4  # 2 a document
    assert {q["id"].split("-")[1] for q in qs["dev"]}.isdisjoint({q["id"].split("-")[1] for q in qs["test"]})
    out = tmp_path / "out"
    cloze.write(qs, str(out), {"note": 1})
    info = json.loads((out / cloze.CLOZE_INFO).read_text())
    assert info["version"] == cloze.CLOZE_INFO_VERSION and info["questions"] == {"train": 8, "dev": 4, "test": 4}
    assert [q["id"] for q in cloze.read_questions(str(out / "dev"))] == sorted(q["id"] for q in qs["dev"])
    with pytest.raises(cloze.ClozeError, match="exists and is not empty"):
        cloze.write(qs, str(out), {})
    broken = dict(qs, dev=[{"id": "x"}])  # no tags: fails after the folders are half written
    with pytest.raises(KeyError):
        cloze.write(broken, str(tmp_path / "out2"), {})
    assert not (tmp_path / "out2").exists()
    assert not [p for p in os.listdir(tmp_path) if p.startswith(".")]  # no folder left aside
    with pytest.raises(cloze.ClozeError, match="--train_corpus has no file for source"):
        cloze.build(lexicon=LEXICON, settings=_settings(), sources=["toy", "wiki"], **paths)
    (tmp_path / "docs.tsv").write_text("source\tdocument\ntoy\td0\n")
    with pytest.raises(cloze.ClozeError, match="heldout_docs=.*expected 4 rows"):
        cloze.build(lexicon=LEXICON, settings=_settings(), sources=["toy"], **paths)


def test_shipped_slice_is_valid_race_and_consistent():
    info = json.loads(open(os.path.join(SLICE, cloze.CLOZE_INFO)).read())
    for split in cloze.SPLITS:
        questions = cloze.read_questions(os.path.join(SLICE, split))
        assert len(questions) == info["questions"][split] == 150
        assert {q["id"].split("-")[0] for q in questions} <= {"austen", "brown", "moby_dick", "sotu"}
        for q in questions:
            (query,), (options,), (answer,) = q["questions"], q["options"], q["answers"]
            assert answer in "ABCD"
            assert query.count("_") == 1 and len(set(options)) == 4 and q["tags"][0] in cloze.CONTENT_TAGS
            passage_words = {cloze.split_token(t)[1] for t in q["article"].split()}
            assert set(options) <= passage_words
        examples = rd.read_race_split(SLICE, split)
        assert len(examples) == 150 and all(e.level == rd.FLAT_LEVEL for e in examples)
        first = questions[0]
        assert examples[0].qa_list == [first["questions"][0].replace("_", o) for o in first["options"][0]]
    dev_docs = {q["id"].rsplit("-", 1)[0] for q in cloze.read_questions(os.path.join(SLICE, "dev"))}
    test_docs = {q["id"].rsplit("-", 1)[0] for q in cloze.read_questions(os.path.join(SLICE, "test"))}
    assert dev_docs.isdisjoint(test_docs) and all("heldout" in d for d in dev_docs | test_docs)


def test_baselines_share_tie_credit_and_score_the_slice(tmp_path):
    assert cb._credit([2, 2, 1, 0], 0) == 0.5 and cb._credit([2, 2, 1, 0], 2) == 0.0
    assert cb._credit([0, 1, 3, 2], 2) == 1.0
    corpus = tmp_path / "c.txt"
    corpus.write_text("the old man sat by the fire.\nthe fire was warm.\n\nhe sat by the door.\n")
    model = cb.BigramModel(cb.corpus_sentences([str(corpus)]))
    assert model.bigram("the", "fire") > model.bigram("the", "door") > model.bigram("by", "warm")
    assert cb._context("He sat by the _.") == ("the", "</s>") and cb._context("_ was warm") == ("<s>", "was")
    scores = cb.baselines(SLICE, [str(corpus)])
    for split in ("dev", "test"):
        assert set(scores[split]) == {"frequency", "unigram", "bigram"}
        assert all(0 <= v <= 100 for v in scores[split].values())


def test_cli_names_missing_flag_and_bad_corpus_item(tmp_path):
    env = dict(os.environ, CUDA_VISIBLE_DEVICES="-1")
    base = [sys.executable, "-m", "tfrecords.sets.cloze", f"--output_dir={tmp_path}/o",
            f"--lexicon_conll={POS_SLICE}/train.txt", f"--heldout_corpus={tmp_path}/h.txt",
            f"--heldout_docs={tmp_path}/d.tsv"]
    for extra, pattern in (([], "--train_corpus is required"),
                           (["--train_corpus=austen"], "--train_corpus: 'austen' is not name=path")):
        done = subprocess.run(base + extra, cwd=F.REPO_ROOT, env=env, capture_output=True, text=True)
        assert done.returncode != 0 and pattern in done.stderr, done.stderr
        assert not (tmp_path / "o").exists()


def test_agreement_of_predictions_with_the_answer_and_each_baseline(tmp_path):
    """cloze_baselines.py --predictions: a model that picks each baseline's choice agrees with it 100%
    (up to that baseline's ties) and scores that baseline's accuracy; the ids of run_race.py's predictions file
    are read; a question without a prediction is named."""
    corpus = tmp_path / "c.txt"
    corpus.write_text("the old man sat by the fire.\nthe fire was warm.\n\nhe sat by the door.\n")
    model = cb.BigramModel(cb.corpus_sentences([str(corpus)]))
    questions = cloze.read_questions(os.path.join(SLICE, "dev"))
    frequency_choice = {q["id"]: cloze.LETTERS[max(range(4), key=lambda k: cb.option_scores(q, model)["frequency"][k])]
                        for q in questions}
    path = tmp_path / "predict_dev.tsv"
    path.write_text("id\tanswer\n" + "".join(f"{qid}.json#0\t{letter}\n" for qid, letter in frequency_choice.items()))
    predicted = cb.read_predictions(str(path))
    assert predicted == frequency_choice
    row = cb.agreement(questions, predicted, model)
    ties = sum(1 - cb._credit(cb.option_scores(q, model)["frequency"], cloze.LETTERS.index(frequency_choice[q["id"]]))
               for q in questions)
    assert row["frequency"] == pytest.approx(100.0 * (1 - ties / len(questions)))
    answers = {q["id"]: q["answers"][0] for q in questions}
    assert cb.agreement(questions, answers, model)["answer"] == 100.0
    assert cb.agreement(questions, answers, model)["bigram"] == pytest.approx(cb.score(questions, model)["bigram"])
    with pytest.raises(cloze.ClozeError, match="no prediction for 1 question"):
        cb.agreement(questions, dict(list(predicted.items())[1:]), model)
