"""Tagging metrics (xlnet_tf/metrics/tagging.py): hand-computed values on small examples, conlleval's own figures
on the shipped CoNLL-2000 excerpt (data/finetune/conll2000_excerpt), seqeval's scores in both modes, and the POS
report on the shipped Brown slice."""

import collections
import os

import pytest

from tests.data_fixtures import REPO_ROOT
from tfrecords.readers import conll
from xlnet_tf.metrics import tagging as tm

EXCERPT = os.path.join(REPO_ROOT, "data", "finetune", "conll2000_excerpt", "ground_truth.txt")
BROWN = os.path.join(REPO_ROOT, "data", "finetune", "brown_pos")

GOLD = [["B-PER", "I-PER", "O", "B-LOC"], ["B-ORG", "I-ORG", "O"]]
PRED = [["B-PER", "I-PER", "O", "B-ORG"], ["I-ORG", "I-ORG", "O"]]


def test_entities_by_hand_default_mode():
    """conlleval's reading: `I-ORG` after O opens an ORG entity, so sentence 2's ORG is found. Gold PER, LOC, ORG;
    predicted PER, ORG (wrong place), ORG (right): 2 of 3 correct."""
    r = tm.entity_report(GOLD, PRED)
    assert (r["num_gold"], r["num_predicted"], r["num_correct"]) == (3, 3, 2)
    assert r["precision"] == pytest.approx(2 / 3) and r["recall"] == pytest.approx(2 / 3)
    assert r["f1"] == pytest.approx(2 / 3) and r["token_accuracy"] == pytest.approx(5 / 7)
    assert r["per_label"]["ORG"] == {"precision": 0.5, "recall": 1.0, "f1": pytest.approx(2 / 3), "support": 1,
                                     "predicted": 2, "correct": 1}
    assert r["per_label"]["LOC"] == {"precision": 0.0, "recall": 0.0, "f1": 0.0, "support": 1, "predicted": 0,
                                     "correct": 0}
    assert r["macro_f1"] == pytest.approx((1 + 0 + 2 / 3) / 3) and r["mode"] == "default"


def test_entities_by_hand_strict_mode():
    """Strict IOB2: an entity must open with B-, so the predicted `I-ORG I-ORG` is no entity: 1 of 2 predicted
    correct, 1 of 3 gold found."""
    r = tm.entity_report(GOLD, PRED, scheme="iob2", strict=True)
    assert (r["num_gold"], r["num_predicted"], r["num_correct"]) == (3, 2, 1)
    assert r["precision"] == 0.5 and r["recall"] == pytest.approx(1 / 3) and r["f1"] == pytest.approx(0.4)
    assert r["scheme"] == "IOB2" and r["mode"] == "strict"
    assert r["per_label"]["ORG"]["predicted"] == 1 and r["per_label"]["ORG"]["correct"] == 0
    # IOBES: S- is a one-word entity, a B- without its E- is none
    gold = [["S-PER", "O", "B-LOC", "E-LOC"]]
    pred = [["S-PER", "O", "B-LOC", "I-LOC"]]
    r = tm.entity_report(gold, pred, scheme="IOBES", strict=True)
    assert (r["num_gold"], r["num_predicted"], r["num_correct"]) == (2, 1, 1)
    with pytest.raises(ValueError, match="needs a scheme"):
        tm.entity_report(gold, pred, strict=True)
    with pytest.raises(ValueError, match="scheme must be one of"):
        tm.entity_report(gold, pred, scheme="BIO", strict=True)


def test_tokens_by_hand():
    gold = [["DET", "NOUN", "VERB"], ["PRON", "VERB", "."]]
    pred = [["DET", "NOUN", "NOUN"], ["PRON", "VERB", "."]]
    r = tm.token_report(gold, pred)
    assert r["token_accuracy"] == pytest.approx(5 / 6) and (r["num_tokens"], r["num_sentences"]) == (6, 2)
    assert r["per_label"]["NOUN"] == {"precision": 0.5, "recall": 1.0, "f1": pytest.approx(2 / 3), "support": 1,
                                      "predicted": 2}
    assert r["per_label"]["VERB"] == {"precision": 1.0, "recall": 0.5, "f1": pytest.approx(2 / 3), "support": 2,
                                      "predicted": 1}
    assert r["macro_f1"] == pytest.approx(13 / 15)
    assert tm.token_report(gold, pred, labels=["X"])["per_label"]["X"]["support"] == 0
    with pytest.raises(ValueError, match="sentence 1: 3 gold tags but 2 predicted"):
        tm.token_accuracy(gold, [pred[0], pred[1][:2]])
    with pytest.raises(ValueError, match="2 gold sentences but 1 predicted"):
        tm.token_report(gold, pred[:1])
    results = tm.tagging_results(gold, pred, kind="pos")
    assert results["kind"] == "pos" and results["token_accuracy"] == pytest.approx(5 / 6)
    with pytest.raises(ValueError, match="kind must be one of"):
        tm.tagging_results(gold, pred, kind="ner")


@pytest.fixture(scope="module")
def excerpt():
    gold = conll.read_conll(EXCERPT, label_column=2)
    pred = conll.read_conll(EXCERPT, label_column=3)
    return [list(s.labels) for s in gold], [list(s.labels) for s in pred]


def test_conll2000_excerpt_gives_conllevals_figures(excerpt):
    """conlleval.pl (seqeval 1.2.2's copy) on this file: 961 tokens with 459 phrases; found: 539 phrases; correct:
    371; accuracy 84.08%; precision 68.83%; recall 80.83%; FB1 74.35; per type (precision, recall, FB1, found)
    ADJP 0.00 0.00 0.00 1, ADVP 45.45 62.50 52.63 11, NP 64.98 78.63 71.16 317, PP 83.18 98.89 90.36 107, SBAR
    66.67 33.33 44.44 3, VP 69.00 79.31 73.80 100."""
    gold, pred = excerpt
    r = tm.tagging_results(gold, pred, kind="entities")
    assert (r["num_tokens"], r["num_gold"], r["num_predicted"], r["num_correct"]) == (961, 459, 539, 371)
    pct = lambda x: round(100 * x, 2)  # noqa: E731
    assert [pct(r[k]) for k in ("token_accuracy", "precision", "recall", "f1")] == [84.08, 68.83, 80.83, 74.35]
    want = {"ADJP": (0.0, 0.0, 0.0, 1), "ADVP": (45.45, 62.5, 52.63, 11), "NP": (64.98, 78.63, 71.16, 317),
            "PP": (83.18, 98.89, 90.36, 107), "SBAR": (66.67, 33.33, 44.44, 3), "VP": (69.0, 79.31, 73.8, 100)}
    got = {k: (pct(v["precision"]), pct(v["recall"]), pct(v["f1"]), v["predicted"]) for k, v in r["per_label"].items()}
    assert got == want
    assert sum(v["support"] for v in r["per_label"].values()) == 459
    assert set(r["per_tag"]) == {t for s in gold + pred for t in s}


@pytest.mark.parametrize("strict", [False, True])
def test_scores_are_seqevals(excerpt, strict):
    from seqeval.metrics import classification_report, f1_score, precision_score, recall_score
    from seqeval.scheme import IOB2

    gold, pred = excerpt
    kwargs = dict(mode="strict", scheme=IOB2) if strict else {}
    r = tm.entity_report(gold, pred, scheme="IOB2" if strict else None, strict=strict)
    assert r["precision"] == pytest.approx(precision_score(gold, pred, **kwargs), abs=1e-12)
    assert r["recall"] == pytest.approx(recall_score(gold, pred, **kwargs), abs=1e-12)
    assert r["f1"] == pytest.approx(f1_score(gold, pred, **kwargs), abs=1e-12)
    report = classification_report(gold, pred, output_dict=True, zero_division=0, **kwargs)
    for kind, v in r["per_label"].items():
        if v["support"]:
            assert (v["precision"], v["recall"], v["support"]) == pytest.approx(
                (report[kind]["precision"], report[kind]["recall"], report[kind]["support"]), abs=1e-12)
    if strict:  # strict IOB2 drops the predicted chunks that open with I-
        assert r["num_predicted"] < 539


def test_pos_report_on_the_brown_slice():
    """A most-frequent-tag baseline (from the slice's train text) scored on its dev text: the report's figures are
    the counts themselves."""
    train = conll.read_conll(os.path.join(BROWN, "train.txt"))
    dev = conll.read_conll(os.path.join(BROWN, "dev.txt"))
    seen = collections.defaultdict(collections.Counter)
    for s in train:
        for w, t in zip(s.words, s.labels):
            seen[w.lower()][t] += 1
    gold = [list(s.labels) for s in dev]
    pred = [[seen[w.lower()].most_common(1)[0][0] if w.lower() in seen else "NOUN" for w in s.words] for s in dev]
    r = tm.tagging_results(gold, pred, kind="pos")
    flat = [(g, p) for gs, ps in zip(gold, pred) for g, p in zip(gs, ps)]
    assert r["num_tokens"] == len(flat) == 9290
    assert r["token_accuracy"] == pytest.approx(sum(g == p for g, p in flat) / len(flat))
    assert 0.7 < r["token_accuracy"] < 0.95
    for tag, v in r["per_label"].items():
        tp = sum(g == p == tag for g, p in flat)
        assert v["support"] == sum(g == tag for g, _ in flat) and v["predicted"] == sum(p == tag for _, p in flat)
        assert v["recall"] == pytest.approx(tp / v["support"] if v["support"] else 0.0)
