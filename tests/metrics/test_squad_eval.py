"""SQuAD evaluation (xlnet_tf/metrics/squad.py) against the official scripts, and post-processing
(xlnet_tf/metrics/squad_postprocess.py).

The official v1.1 / v2.0 scripts come from tf-models-official (`official/nlp/tools/
squad_evaluate_v1_1.py`, `squad_evaluate_v2_0.py`), a test-only dependency installed without its
dependencies (`pip install --no-deps -r requirements-test-nodeps.txt`; the two modules import only
absl). XLNet's `find_all_best_thresh_v2` (has_ans_exact / has_ans_f1) is checked against the copy
in transformers' `squad_metrics`.
"""

import copy
import json
import os

import numpy as np
import pytest

from tests import data_fixtures as F
from xlnet_tf.metrics import squad as sm
from xlnet_tf.metrics import squad_postprocess as pp

SQUAD_DIR = os.path.join(F.DATA_DIR, "squad")


def _load(name):
    with open(os.path.join(SQUAD_DIR, name), encoding="utf-8") as f:
        return json.load(f)


def _official():
    v1 = pytest.importorskip("official.nlp.tools.squad_evaluate_v1_1",
                             reason="pip install --no-deps -r requirements-test-nodeps.txt")
    v2 = pytest.importorskip("official.nlp.tools.squad_evaluate_v2_0")
    return v1, v2


# ---- prediction sets built from the fixtures -------------------------------------------------

def _dataset(version):
    """train + dev fixtures of one version (80 questions), with extra gold answers on a few
    questions (max over golds; for v2 one that normalizes to "" and is dropped)."""
    data = copy.deepcopy(_load(f"train-{version}.json")["data"] + _load(f"dev-{version}.json")["data"])
    k = 0
    for article in data:
        for para in article["paragraphs"]:
            for qa in para["qas"]:
                if qa["answers"] and k % 4 == 0:
                    gold = qa["answers"][0]["text"]
                    qa["answers"].append({"text": f"the {gold} itself", "answer_start": 0})
                    if version == "v2.0":
                        qa["answers"].append({"text": "The !", "answer_start": 0})
                k += 1
    return data


def _predictions(data, seed):
    """Exact, re-cased / punctuated, partial, wrong, empty and unanswered-as-text predictions,
    and null scores with ties."""
    rng = np.random.RandomState(seed)
    preds, na = {}, {}
    for article in data:
        for para in article["paragraphs"]:
            words = para["context"].split()
            for qa in para["qas"]:
                gold = qa["answers"][0]["text"] if qa["answers"] else None
                kind = rng.randint(8)
                if gold is None:
                    p = "" if kind < 4 else " ".join(rng.choice(words, size=rng.randint(1, 4)))
                elif kind == 0:
                    p = gold
                elif kind == 1:
                    p = f"The {gold.upper()}!"
                elif kind == 2:
                    p = f"{gold} {rng.choice(words)} {rng.choice(words)}"
                elif kind == 3:
                    p = gold[: max(1, len(gold) // 2)] + " " + gold
                elif kind == 4:
                    p = " ".join(rng.choice(words, size=rng.randint(1, 5)))
                elif kind == 5:
                    p = ""
                elif kind == 6:
                    p = f"an {gold}, {gold}"
                else:
                    p = "a an the ..."
                preds[qa["id"]] = p
                na[qa["id"]] = float(np.round(rng.uniform(-3, 3), 1))  # ties on purpose
    return preds, na


SETS = [(v, seed) for v in ("v1.1", "v2.0") for seed in (0, 1, 2)]


@pytest.mark.parametrize("version,seed", SETS)
def test_v2_evaluation_equals_the_official_script(version, seed):
    _, off2 = _official()
    data = _dataset(version)
    preds, na = _predictions(data, seed)
    assert len(preds) == 80
    ours = sm.evaluate_v2(data, preds, na_probs=na)
    ref = off2.evaluate(data, preds, na_probs=na)
    for key in ("exact", "f1", "total", "HasAns_exact", "HasAns_f1", "HasAns_total",
                "NoAns_exact", "NoAns_f1", "NoAns_total"):
        if key in ref:
            assert ours[key] == pytest.approx(ref[key], abs=1e-9), key
        else:
            assert key not in ours, key
    for ours_key, ref_key in (("best_exact", "final_exact"), ("best_exact_thresh", "final_exact_thresh"),
                              ("best_f1", "final_f1"), ("best_f1_thresh", "final_f1_thresh")):
        assert ours[ours_key] == pytest.approx(ref[ref_key], abs=1e-9), ours_key
    # without null scores: the official defaults (all 0.0, threshold 1.0), no sweep keys
    plain = sm.evaluate_v2(data, preds)
    ref0 = off2.evaluate(data, preds)
    assert plain["exact"] == pytest.approx(ref0["exact"]) and plain["f1"] == pytest.approx(ref0["f1"])
    assert "best_f1" not in plain
    # a fixed threshold: apply_threshold's "" predictions == the official na_prob_thresh rule
    fixed = sm.evaluate_v2(data, pp.apply_threshold(preds, na, 0.5))
    ruled = sm.evaluate_v2(data, preds, na_probs=na, na_prob_thresh=0.5)
    ref_fixed = off2.evaluate(data, pp.apply_threshold(preds, na, 0.5))
    for key in ("exact", "f1", "HasAns_exact", "HasAns_f1", "NoAns_exact", "NoAns_f1"):
        if key in ref_fixed:
            assert fixed[key] == pytest.approx(ruled[key]) == pytest.approx(ref_fixed[key]), key
    # sanity: the sets are mixed, not trivially right or wrong
    assert 10 < ours["exact"] < 80 and ours["f1"] > ours["exact"]


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_v1_evaluation_equals_the_official_script(seed):
    off1, _ = _official()
    data = _dataset("v1.1")
    preds, _ = _predictions(data, seed)
    ours = sm.evaluate_v1(data, preds)
    ref = off1.evaluate(data, preds)  # tf-models-official reports fractions
    assert ours["exact_match"] == pytest.approx(100.0 * ref["exact_match"], abs=1e-9)
    assert ours["f1"] == pytest.approx(100.0 * ref["final_f1"], abs=1e-9)
    assert sm.evaluate({"version": "1.1", "data": data}, preds) == ours
    # a missing prediction scores 0 and counts, as the official script
    some = dict(list(preds.items())[5:])
    ref_missing = off1.evaluate(data, some)
    assert sm.evaluate_v1(data, some)["f1"] == pytest.approx(100.0 * ref_missing["final_f1"])


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_xlnet_threshold_sweep_equals_reference(seed):
    hf = pytest.importorskip("transformers.data.metrics.squad_metrics")
    _, off2 = _official()
    data = _dataset("v2.0")
    preds, na = _predictions(data, seed)
    exact_raw, f1_raw = off2._get_raw_scores(data, preds)
    ref = {}
    hf.find_all_best_thresh_v2(ref, preds, exact_raw, f1_raw, na, off2._make_qid_to_has_ans(data))
    ours = sm.evaluate_v2(data, preds, na_probs=na)
    for key in ("best_exact", "best_exact_thresh", "best_f1", "best_f1_thresh", "has_ans_exact",
                "has_ans_f1"):
        assert ours[key] == pytest.approx(ref[key], abs=1e-12), key
    assert 0.0 <= ours["has_ans_f1"] <= 1.0  # XLNet's fractions


def test_metric_rules_by_hand():
    assert sm.normalize_answer("  The Cat's, a  HAT!  ") == "cats hat"
    assert sm.normalize_answer("an") == "" and sm.normalize_answer("theater") == "theater"
    assert sm.compute_f1("", "") == 1.0 and sm.f1_v1("", "") == 0.0  # v2 vs v1 on empty
    assert sm.compute_f1("the cat", "") == 0.0 and sm.compute_exact("A cat.", "cat") == 1
    assert sm.compute_f1("black cat sat", "cat sat down") == pytest.approx(2 / 3)
    data = [{"paragraphs": [{"context": "x", "qas": [
        {"id": "a", "answers": [{"text": "black cat", "answer_start": 0}]},
        {"id": "b", "answers": []},
        {"id": "c", "answers": [{"text": "dog", "answer_start": 0}]}]}]}]
    out = sm.evaluate_v2(data, {"a": "cat", "b": "", "c": "dog"}, na_probs={"a": 0.2, "b": 0.9, "c": 0.1},
                         na_prob_thresh=0.5)
    assert out["exact"] == pytest.approx(200 / 3) and out["f1"] == pytest.approx(100 * (2 / 3 + 2) / 3)
    assert out["HasAns_total"] == 2 and out["NoAns_exact"] == 100.0
    # sweep: best to answer a and c, null for b (already "") -> 2 + 2/3 of 3 for F1
    assert out["best_f1"] == pytest.approx(100 * (2 + 2 / 3) / 3)
    assert out["has_ans_exact"] == 0.5
    missing = sm.evaluate_v2(data, {"a": "black cat"}, na_probs={"a": 0.0})
    assert missing["missing"] == 2 and missing["exact"] == pytest.approx(100 / 3)
    assert missing["best_exact"] == pytest.approx(100 / 3)
    with pytest.raises(ValueError, match="na_probs"):
        sm.evaluate_v2(data, {"a": "x", "b": ""}, na_probs={"a": 0.0})


# ---- post-processing --------------------------------------------------------------------------

CONTEXT = "Alpha beta gamma delta."


def _eval_data(v2=True):
    """Two examples; example 0 has two windows: tokens Alpha|beta|gamma|delta|. (positions 0-4 in
    feature 0; 2-4 as positions 0-2 in feature 1), example 1 one window."""
    spans = [(0, 5), (6, 10), (11, 16), (17, 22), (22, 23)]
    L = 10
    st = np.full([3, L], -1, np.int32)
    en = np.full([3, L], -1, np.int32)
    mc = np.zeros([3, L], bool)
    for t in range(5):
        st[0, t], en[0, t] = spans[t]
        mc[0, t] = t <= 2
    for t in range(3):
        st[1, t], en[1, t] = spans[t + 2]
        mc[1, t] = t >= 1
    for t in range(5):
        st[2, t], en[2, t] = spans[t]
        mc[2, t] = True
    feats = {"example_index": np.array([0, 0, 1]), "paragraph_len": np.array([5, 3, 5]),
             "tok_start_to_orig": st, "tok_end_to_orig": en, "token_is_max_context": mc}
    examples = [{"id": "q0", "context": CONTEXT}, {"id": "q1", "context": CONTEXT}]
    return pp.SquadEvalData(examples, feats, v2)


def _results(rows):
    """rows: per feature (unique_id, [(start, lp)], [(end, lp)] * ks*ke, cls)."""
    out = {k: [] for k in pp.RESULT_KEYS}
    for uid, starts, ends, cls in rows:
        out["unique_id"].append(uid)
        out["start_top_index"].append([s for s, _ in starts])
        out["start_top_log_probs"].append([lp for _, lp in starts])
        out["end_top_index"].append([e for e, _ in ends])
        out["end_top_log_probs"].append([lp for _, lp in ends])
        out["cls_logits"].append(cls)
    return {k: np.asarray(v) for k, v in out.items()}


def test_candidates_filters_nbest_and_null_odds(tmp_path):
    data = _eval_data()
    rows = [
        # feature 0 (example 0): start 3 is not max-context here; start 0 ends at 4 (the last
        # paragraph token: allowed) or 1; start 2 ends at 1 (< start: dropped)
        (0, [(3, -0.1), (0, -0.5)], [(3, -0.1), (4, -0.2), (4, -0.3), (1, -0.4)], 0.7),
        # feature 1 (example 0): start position 1 = "delta" (max-context), ends 1 / 9 (padding)
        (1, [(1, -0.2), (9, -0.1)], [(1, -0.2), (9, -0.1), (1, -0.1), (1, -0.1)], -1.5),
        # padding row of the last batch: dropped
        (-1, [(0, 0.0), (0, 0.0)], [(0, 0.0)] * 4, 9.0),
        # feature 2 (example 1): everything invalid (CLS / query positions) -> empty prediction
        (2, [(7, -0.1), (8, -0.2)], [(7, -0.1)] * 4, 2.5),
    ]
    preds = pp.compute_predictions(data, _results(rows), n_best_size=5, max_answer_length=5)
    nb = preds.nbest["q0"]
    assert [c["text"] for c in nb] == ["delta", "Alpha beta gamma delta.", "Alpha beta"]
    assert [round(c["start_log_prob"] + c["end_log_prob"], 6) for c in nb] == [-0.4, -0.8, -0.9]
    assert sum(c["probability"] for c in nb) == pytest.approx(1.0)
    assert nb[0]["probability"] > nb[1]["probability"] > nb[2]["probability"]
    assert (nb[1]["start_char"], nb[1]["end_char"]) == (0, len(CONTEXT))
    assert preds.predictions == {"q0": "delta", "q1": ""}
    assert preds.null_odds == {"q0": -1.5, "q1": 2.5}
    assert pp.apply_threshold(preds.predictions, preds.null_odds, 0.0) == {"q0": "delta", "q1": ""}
    assert pp.apply_threshold(preds.predictions, preds.null_odds, -2.0) == {"q0": "", "q1": ""}
    short = pp.compute_predictions(data, _results(rows), n_best_size=1, max_answer_length=2)
    assert [c["text"] for c in short.nbest["q0"]] == ["delta"]
    long_only = pp.compute_predictions(data, _results(rows[:1] + rows[2:]), max_answer_length=4,
                                       allow_missing=True)
    assert [c["text"] for c in long_only.nbest["q0"]] == ["Alpha beta"]

    paths = pp.write_predictions(str(tmp_path), preds, version_2_with_negative=True)
    with open(paths["predictions"], encoding="utf-8") as f:
        assert json.load(f) == preds.predictions
    with open(paths["null_odds"], encoding="utf-8") as f:
        assert json.load(f) == preds.null_odds
    with open(paths["nbest_predictions"], encoding="utf-8") as f:
        assert json.load(f)["q0"][0]["text"] == "delta"
    v1 = pp.compute_predictions(_eval_data(v2=False), _results(rows))
    assert v1.null_odds == {}
    assert "null_odds" not in pp.write_predictions(str(tmp_path / "v1"), v1, False)
    assert not os.path.exists(tmp_path / "v1" / "null_odds.json")


def test_results_must_cover_each_feature_once():
    data = _eval_data()
    rows = [(0, [(0, 0.0)], [(0, 0.0)], 0.0), (2, [(0, 0.0)], [(0, 0.0)], 0.0)]
    with pytest.raises(ValueError, match="no result for 1 of 3"):
        pp.compute_predictions(data, _results(rows))
    with pytest.raises(ValueError, match="twice"):
        pp.compute_predictions(data, _results(rows + rows[:1] + [(1, [(0, 0.0)], [(0, 0.0)], 0.0)]))
    part = pp.compute_predictions(data, _results(rows[1:]), allow_missing=True)
    assert list(part.predictions) == ["q1"]  # q0 has no evaluated feature: no prediction
