"""SQuAD evaluation, equal to the official v1.1 and v2.0 scripts (and XLNet's threshold sweep).

- `evaluate_v1(dataset, predictions)` -> `{"exact_match", "f1"}` in percent, as `evaluate-v1.1.py`:
  EM / F1 are maxima over the gold answers after `normalize_answer` (lowercase, drop
  punctuation, drop the articles a/an/the, collapse whitespace); a question without a
  prediction scores 0 and counts.
- `evaluate_v2(dataset, predictions, na_probs=None, na_prob_thresh=1.0)` -> the keys of
  `evaluate-v2.0.py`: `exact`, `f1`, `total`, `HasAns_exact`, `HasAns_f1`, `HasAns_total`,
  `NoAns_exact`, `NoAns_f1`, `NoAns_total` (percent); with `na_probs` (id -> null score,
  higher = more likely unanswerable; XLNet's `null_odds.json`) also the best-threshold sweep
  `best_exact`, `best_exact_thresh`, `best_f1`, `best_f1_thresh` (percent, as the official
  script's `find_all_best_thresh`) and XLNet's `has_ans_exact`, `has_ans_f1` (the raw scores of
  the answerable questions, as FRACTIONS in [0, 1], exactly as `squad_utils.
  find_all_best_thresh_v2`). v2.0 rules: gold answers that normalize to "" are dropped, an
  unanswerable question's only gold answer is "", and F1 is 1 when prediction and gold are
  both empty (0 when only one is). A prediction is predicted-null when `na_prob >
  na_prob_thresh` (default 1.0 with probabilities; pass the threshold in the units of your
  null scores).
- Missing predictions: scored 0 and counted, in v1.1 as the official script; in v2.0 too (the
  official script would stop with a KeyError), and left out of the sweep's candidates. The
  number is reported as `missing` (v2.0 only, when nonzero, so that complete runs match the
  official output key for key).

`dataset` is the SQuAD JSON's `data` list, or the whole JSON object.
"""

from __future__ import annotations

import collections
import re
import string
from typing import Any, Dict, List, Mapping, Optional, Tuple

_PUNCT = frozenset(string.punctuation)
_ARTICLES = re.compile(r"\b(a|an|the)\b", re.UNICODE)


def normalize_answer(s: str) -> str:
    """Lowercase, remove punctuation, articles and extra whitespace (the official order)."""
    s = s.lower()
    s = "".join(ch for ch in s if ch not in _PUNCT)
    s = _ARTICLES.sub(" ", s)
    return " ".join(s.split())


def get_tokens(s: str) -> List[str]:
    return normalize_answer(s).split() if s else []


def _overlap_f1(pred_toks: List[str], gold_toks: List[str]) -> float:
    common = collections.Counter(pred_toks) & collections.Counter(gold_toks)
    num_same = sum(common.values())
    if num_same == 0:
        return 0.0
    precision = num_same / len(pred_toks)
    recall = num_same / len(gold_toks)
    return 2 * precision * recall / (precision + recall)


def compute_exact(a_gold: str, a_pred: str) -> int:
    return int(normalize_answer(a_gold) == normalize_answer(a_pred))


def compute_f1(a_gold: str, a_pred: str) -> float:
    """v2.0 F1: 1 if both normalize to nothing, 0 if only one does, else token overlap F1."""
    gold, pred = get_tokens(a_gold), get_tokens(a_pred)
    if not gold or not pred:
        return float(gold == pred)
    return _overlap_f1(pred, gold)


def f1_v1(prediction: str, ground_truth: str) -> float:
    """v1.1 F1 (0 whenever no token is shared, including two empty strings)."""
    return _overlap_f1(normalize_answer(prediction).split(),
                       normalize_answer(ground_truth).split())


def _articles(dataset) -> List[Dict[str, Any]]:
    return dataset["data"] if isinstance(dataset, Mapping) else dataset


def _questions(dataset):
    for article in _articles(dataset):
        for para in article["paragraphs"]:
            for qa in para["qas"]:
                yield qa


def evaluate_v1(dataset, predictions: Mapping[str, str]) -> Dict[str, float]:
    """The official SQuAD v1.1 evaluation: `{"exact_match": %, "f1": %}`."""
    em = f1 = 0.0
    total = 0
    for qa in _questions(dataset):
        total += 1
        if qa["id"] not in predictions:
            continue
        pred = predictions[qa["id"]]
        golds = [a["text"] for a in qa["answers"]]
        em += max(float(normalize_answer(pred) == normalize_answer(g)) for g in golds)
        f1 += max(f1_v1(pred, g) for g in golds)
    if not total:
        raise ValueError("the dataset has no questions")
    return {"exact_match": 100.0 * em / total, "f1": 100.0 * f1 / total}


def make_qid_to_has_ans(dataset) -> Dict[str, bool]:
    return {qa["id"]: bool(qa["answers"]) for qa in _questions(dataset)}


def get_raw_scores(dataset, predictions: Mapping[str, str]
                   ) -> Tuple[Dict[str, float], Dict[str, float]]:
    """Per question EM and F1 (v2.0 rules), max over the gold answers; questions without a
    prediction are left out (as the official script)."""
    exact, f1 = {}, {}
    for qa in _questions(dataset):
        qid = qa["id"]
        golds = [a["text"] for a in qa["answers"] if normalize_answer(a["text"])] or [""]
        if qid not in predictions:
            continue
        pred = predictions[qid]
        exact[qid] = max(compute_exact(g, pred) for g in golds)
        f1[qid] = max(compute_f1(g, pred) for g in golds)
    return exact, f1


def apply_no_ans_threshold(scores: Mapping[str, float], na_probs: Mapping[str, float],
                           qid_to_has_ans: Mapping[str, bool], na_prob_thresh: float
                           ) -> Dict[str, float]:
    """A question with `na_prob > na_prob_thresh` is predicted null: 1 if unanswerable, else 0."""
    return {qid: (float(not qid_to_has_ans[qid]) if na_probs[qid] > na_prob_thresh else s)
            for qid, s in scores.items()}


def make_eval_dict(exact: Mapping[str, float], f1: Mapping[str, float],
                   qid_list: Optional[List[str]] = None) -> "collections.OrderedDict":
    qids = list(exact) if not qid_list else qid_list
    total = len(qids)
    return collections.OrderedDict([
        ("exact", 100.0 * sum(exact[k] for k in qids) / total),
        ("f1", 100.0 * sum(f1[k] for k in qids) / total),
        ("total", total)])


def find_best_thresh(predictions: Mapping[str, str], scores: Mapping[str, float],
                     na_probs: Mapping[str, float], qid_to_has_ans: Mapping[str, bool]
                     ) -> Tuple[float, float]:
    """Sweep the null threshold over the sorted null scores (the official script): start with
    every question predicted null, then un-null them in increasing score order; returns
    (best score in %, its threshold). Questions in `scores` without a prediction stay wrong."""
    cur = sum(1 for k, has in qid_to_has_ans.items()
              if not has and k in scores and k in predictions)
    best, best_thresh = cur, 0.0
    for qid in sorted(na_probs, key=lambda k: na_probs[k]):
        if qid not in scores or qid not in predictions:
            continue
        if qid_to_has_ans[qid]:
            diff = scores[qid]
        else:
            diff = -1 if predictions[qid] else 0
        cur += diff
        if cur > best:
            best, best_thresh = cur, na_probs[qid]
    return 100.0 * best / len(scores), best_thresh


def find_best_thresh_v2(predictions, scores, na_probs, qid_to_has_ans
                        ) -> Tuple[float, float, float]:
    """`find_best_thresh` plus XLNet's `has_ans` score: the mean raw score (fraction) of the
    answerable questions (those without a prediction count 0)."""
    best, thresh = find_best_thresh(predictions, scores, na_probs, qid_to_has_ans)
    has = [k for k in na_probs if k in qid_to_has_ans and qid_to_has_ans[k]]
    has_score = sum(scores.get(k, 0.0) for k in has)
    return best, thresh, (has_score / len(has) if has else 0.0)


def find_all_best_thresh_v2(main_eval: Dict[str, Any], predictions, exact_raw, f1_raw,
                            na_probs, qid_to_has_ans) -> None:
    """Add `best_exact`, `best_exact_thresh`, `best_f1`, `best_f1_thresh`, `has_ans_exact`,
    `has_ans_f1` to `main_eval` (XLNet's `squad_utils.find_all_best_thresh_v2`)."""
    be, bet, hae = find_best_thresh_v2(predictions, exact_raw, na_probs, qid_to_has_ans)
    bf, bft, haf = find_best_thresh_v2(predictions, f1_raw, na_probs, qid_to_has_ans)
    main_eval.update({"best_exact": be, "best_exact_thresh": bet, "best_f1": bf,
                      "best_f1_thresh": bft, "has_ans_exact": hae, "has_ans_f1": haf})


def evaluate_v2(dataset, predictions: Mapping[str, str],
                na_probs: Optional[Mapping[str, float]] = None,
                na_prob_thresh: float = 1.0) -> Dict[str, Any]:
    """The official SQuAD v2.0 evaluation (+ XLNet's sweep when `na_probs` is given); see the
    module docstring for the keys."""
    qid_to_has_ans = make_qid_to_has_ans(dataset)
    if not qid_to_has_ans:
        raise ValueError("the dataset has no questions")
    exact_raw, f1_raw = get_raw_scores(dataset, predictions)
    missing = [q for q in qid_to_has_ans if q not in predictions]
    for q in missing:  # wrong, whatever the threshold
        exact_raw[q] = f1_raw[q] = 0.0
    sweep = na_probs
    if na_probs is None:
        na_probs = {k: 0.0 for k in predictions}
    lacking = [q for q in qid_to_has_ans if q in predictions and q not in na_probs]
    if lacking:
        raise ValueError(f"na_probs has no value for {len(lacking)} predicted questions, e.g. "
                         f"{lacking[0]!r}")
    probs = {q: (na_probs[q] if q in predictions else -float("inf")) for q in qid_to_has_ans}
    exact_t = apply_no_ans_threshold(exact_raw, probs, qid_to_has_ans, na_prob_thresh)
    f1_t = apply_no_ans_threshold(f1_raw, probs, qid_to_has_ans, na_prob_thresh)
    out = make_eval_dict(exact_t, f1_t)
    has_ans = [k for k, v in qid_to_has_ans.items() if v]
    no_ans = [k for k, v in qid_to_has_ans.items() if not v]
    for prefix, qids in (("HasAns", has_ans), ("NoAns", no_ans)):
        if qids:
            for k, v in make_eval_dict(exact_t, f1_t, qids).items():
                out[f"{prefix}_{k}"] = v
    if sweep is not None:
        sweep = {q: p for q, p in sweep.items() if q in qid_to_has_ans}
        find_all_best_thresh_v2(out, predictions, exact_raw, f1_raw, sweep, qid_to_has_ans)
    if missing:
        out["missing"] = len(missing)
    return dict(out)


def evaluate(dataset, predictions: Mapping[str, str],
             na_probs: Optional[Mapping[str, float]] = None,
             version_2_with_negative: Optional[bool] = None, na_prob_thresh: float = 1.0
             ) -> Dict[str, Any]:
    """`evaluate_v2` for SQuAD 2.0 data, else `evaluate_v1`. `version_2_with_negative=None`:
    2.0 when the JSON's `version` starts with 2 / v2 or any question is unanswerable."""
    if version_2_with_negative is None:
        v = str(dataset.get("version", "")) if isinstance(dataset, Mapping) else ""
        version_2_with_negative = v.lstrip("vV").startswith("2") or any(
            qa.get("is_impossible") or not qa["answers"] for qa in _questions(dataset))
    if version_2_with_negative:
        return evaluate_v2(dataset, predictions, na_probs, na_prob_thresh)
    return evaluate_v1(dataset, predictions)
