"""SQuAD post-processing: per-feature top-k model outputs -> answer texts in the ORIGINAL context.

The original `run_squad.write_predictions`, with its quirks fixed (original_xlnet.md §7.22):
  - candidates: for every `(i < start_n_top, j < end_n_top)`, start `start_top_index[f, i]`
    and end `end_top_index[f, i * end_n_top + j]`, scored `start_log_prob + end_log_prob`;
  - a candidate is dropped unless start and end are paragraph positions (`< paragraph_len`;
    the LAST paragraph token can be an end, unlike the original), the start has its maximal
    context in this feature, `end >= start`, and `end - start + 1 <= max_answer_length`;
  - texts are cut from the original context with the token character offsets of
    `<split>.features.npz` (no LCS): `context[tok_start_to_orig[s]:tok_end_to_orig[e]]`;
  - n-best: the best `n_best_size` distinct texts of the example over all its features;
  - null score (SQuAD 2.0): `min` over the example's features of `cls_logits` (the answer-class
    logit, higher = more likely unanswerable), written as `null_odds.json`;
  - `predictions.json` holds the best NON-null text of every question (as the original); use
    `apply_threshold` for fixed-threshold v2 predictions (`""` where `null_odds > threshold`),
    or `squad_metrics.evaluate_v2(..., na_probs=null_odds)` for the best-threshold sweep.

Plain numpy + json: no TensorFlow, no flags.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
from typing import Any, Dict, List, Mapping, Optional, Sequence

import numpy as np

from xlnet_tf import files

RESULT_KEYS = ("unique_id", "start_top_log_probs", "start_top_index", "end_top_log_probs",
               "end_top_index", "cls_logits")
FEATURE_KEYS = ("example_index", "paragraph_len", "tok_start_to_orig", "tok_end_to_orig",
                "token_is_max_context")


@dataclasses.dataclass
class SquadEvalData:
    """What post-processing needs about an eval split.

    `examples`: one dict per example (index = `example_index`) with at least `id` and
    `context` (the original text); `features`: arrays by feature (row = `unique_id`):
    `example_index`, `paragraph_len` int [F]; `tok_start_to_orig`, `tok_end_to_orig`
    int [F, L] (`[start, end)` characters in the context, -1 outside the paragraph);
    `token_is_max_context` bool [F, L].
    """

    examples: List[Dict[str, Any]]
    features: Dict[str, np.ndarray]
    version_2_with_negative: bool = True


@dataclasses.dataclass
class SquadPredictions:
    """`predictions`: id -> best non-null text; `nbest`: id -> list of `{"text",
    "probability", "start_log_prob", "end_log_prob", "start_char", "end_char"}` (best first);
    `null_odds`: id -> null score (min `cls_logits` over the example's features; empty for
    SQuAD 1.1)."""

    predictions: Dict[str, str]
    nbest: Dict[str, List[Dict[str, Any]]]
    null_odds: Dict[str, float]


def load_eval_data(record_dir: str, split: str = "dev") -> SquadEvalData:
    """Read `<split>.examples.json` and `<split>.features.npz` named by the record directory's
    `manifest.json` (written by `tfrecords.squad_data.build_squad_records`)."""
    with open(os.path.join(record_dir, "manifest.json"), encoding="utf-8") as f:
        manifest = json.load(f)
    entry = (manifest.get("splits") or {}).get(split)
    if not entry or "features_file" not in entry:
        raise ValueError(f"{record_dir}/manifest.json: no eval split {split!r} with side files")
    with open(os.path.join(record_dir, entry["examples_file"]), encoding="utf-8") as f:
        examples = json.load(f)["examples"]
    with np.load(os.path.join(record_dir, entry["features_file"])) as z:
        features = {k: z[k] for k in z.files}
    return SquadEvalData(examples, features, bool(manifest["version_2_with_negative"]))


def _softmax(x: Sequence[float]) -> List[float]:
    if not len(x):
        return []
    m = max(x)
    e = [math.exp(v - m) for v in x]
    s = sum(e)
    return [v / s for v in e]


def _results_by_feature(results: Mapping[str, np.ndarray], num_features: int,
                        allow_missing: bool) -> Dict[str, np.ndarray]:
    """Results re-ordered by feature (row = unique_id); padding rows (unique_id < 0) dropped."""
    missing_keys = [k for k in RESULT_KEYS if k not in results]
    if missing_keys:
        raise ValueError(f"results lack {missing_keys}")
    uid = np.asarray(results["unique_id"]).reshape(-1).astype(np.int64)
    keep = uid >= 0
    uid = uid[keep]
    if len(uid) and uid.max() >= num_features:
        raise ValueError(f"unique_id {int(uid.max())} out of range ({num_features} features)")
    if len(np.unique(uid)) != len(uid):
        raise ValueError("results hold a feature twice (was the eval dataset repeated?)")
    have = np.zeros([num_features], bool)
    have[uid] = True
    if not allow_missing and not have.all():
        raise ValueError(f"no result for {int((~have).sum())} of {num_features} features")
    out = {"have": have}
    for k in RESULT_KEYS[1:]:
        v = np.asarray(results[k])[keep]
        full = np.zeros((num_features,) + v.shape[1:], v.dtype)
        full[uid] = v
        out[k] = full
    return out


def compute_predictions(eval_data: SquadEvalData, results: Mapping[str, np.ndarray], *,
                        n_best_size: int = 5, max_answer_length: int = 64,
                        version_2_with_negative: Optional[bool] = None,
                        allow_missing: bool = False) -> SquadPredictions:
    """Model outputs -> n-best texts per question (see the module docstring).

    Args:
      eval_data: `load_eval_data(record_dir, split)`.
      results: numpy arrays over the evaluated features in any order, padding rows included:
        `unique_id` [N] (-1 = padding, dropped), `start_top_log_probs`, `start_top_index`
        [N, start_n_top], `end_top_log_probs`, `end_top_index` [N, start_n_top * end_n_top]
        (start-major: the ends of start i are columns `i*end_n_top .. (i+1)*end_n_top-1`),
        `cls_logits` [N] (higher = more likely unanswerable; ignored for SQuAD 1.1).
      version_2_with_negative: None = from `eval_data`.
      allow_missing: tolerate features without a result (else ValueError); an example none of
        whose features has a result gets no prediction.
    """
    if n_best_size < 1 or max_answer_length < 1:
        raise ValueError("n_best_size and max_answer_length must be >= 1")
    v2 = eval_data.version_2_with_negative if version_2_with_negative is None \
        else version_2_with_negative
    feats = eval_data.features
    num_features = len(feats["example_index"])
    res = _results_by_feature(results, num_features, allow_missing)
    ks = res["start_top_index"].shape[1]
    if res["end_top_index"].shape[1] % ks:
        raise ValueError(f"end_top_index has {res['end_top_index'].shape[1]} columns, not a "
                         f"multiple of start_n_top={ks}")
    ke = res["end_top_index"].shape[1] // ks
    by_example: Dict[int, List[int]] = {}
    for f in range(num_features):
        if res["have"][f]:
            by_example.setdefault(int(feats["example_index"][f]), []).append(f)
    predictions, nbest_all, null_odds = {}, {}, {}
    for e, ex in enumerate(eval_data.examples):
        if e not in by_example:  # allow_missing: no evaluated feature, no prediction
            continue
        qid, context = ex["id"], ex["context"]
        cands = []  # (score, start_lp, end_lp, start_char, end_char)
        null = None
        for f in by_example[e]:
            if null is None or res["cls_logits"][f] < null:
                null = float(res["cls_logits"][f])
            plen = int(feats["paragraph_len"][f])
            tstart, tend = feats["tok_start_to_orig"][f], feats["tok_end_to_orig"][f]
            maxctx = feats["token_is_max_context"][f]
            for i in range(ks):
                s = int(res["start_top_index"][f, i])
                if not (0 <= s < plen) or not maxctx[s]:
                    continue
                slp = float(res["start_top_log_probs"][f, i])
                for j in range(ke):
                    end = int(res["end_top_index"][f, i * ke + j])
                    if not (s <= end < plen) or end - s + 1 > max_answer_length:
                        continue
                    elp = float(res["end_top_log_probs"][f, i * ke + j])
                    a, b = int(tstart[s]), int(tend[end])
                    cands.append((slp + elp, slp, elp, a, max(a, b)))
        cands.sort(key=lambda c: -c[0])  # stable: ties keep feature / beam order
        nbest, seen = [], set()
        for score, slp, elp, a, b in cands:
            text = context[a:b].strip()
            if text in seen:
                continue
            seen.add(text)
            nbest.append({"text": text, "start_log_prob": slp, "end_log_prob": elp,
                          "start_char": a, "end_char": b, "_score": score})
            if len(nbest) >= n_best_size:
                break
        if not nbest:
            nbest.append({"text": "", "start_log_prob": -1e6, "end_log_prob": -1e6,
                          "start_char": -1, "end_char": -1, "_score": -2e6})
        probs = _softmax([c.pop("_score") for c in nbest])
        for c, p in zip(nbest, probs):
            c["probability"] = p
        predictions[qid] = nbest[0]["text"]
        nbest_all[qid] = nbest
        if v2:
            null_odds[qid] = null
    return SquadPredictions(predictions, nbest_all, null_odds)


def _write_json(path: str, obj: Any) -> None:
    files.write_text_atomic(path, json.dumps(obj, indent=2, ensure_ascii=False) + "\n")


def write_predictions(output_dir: str, preds: SquadPredictions,
                      version_2_with_negative: bool) -> Dict[str, str]:
    """Write `predictions.json` (id -> text), `nbest_predictions.json` and, for SQuAD 2.0,
    `null_odds.json` (id -> null score) atomically; returns their paths by name."""
    os.makedirs(output_dir, exist_ok=True)
    paths = {"predictions": os.path.join(output_dir, "predictions.json"),
             "nbest_predictions": os.path.join(output_dir, "nbest_predictions.json")}
    _write_json(paths["predictions"], preds.predictions)
    _write_json(paths["nbest_predictions"], preds.nbest)
    if version_2_with_negative:
        paths["null_odds"] = os.path.join(output_dir, "null_odds.json")
        _write_json(paths["null_odds"], preds.null_odds)
    return paths


def apply_threshold(predictions: Mapping[str, str], null_odds: Mapping[str, float],
                    threshold: float) -> Dict[str, str]:
    """Fixed-threshold SQuAD 2.0 predictions: `""` (no answer) where `null_odds[id] >
    threshold` (the official script's `na_prob > thresh`), else the best non-null text."""
    return {qid: ("" if null_odds[qid] > threshold else text)
            for qid, text in predictions.items()}
