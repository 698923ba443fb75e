"""Metrics of token classification, over words (one gold and one predicted tag per word: the stitched
predictions of xlnet_tf/text/tagging.py, never pieces; `IGNORE_LABEL` positions never reach here).

- `token_report`: accuracy over words and, per tag, precision / recall / F1 / support (scikit-learn); the POS
  tagging metric.
- `entity_report`: entity-level (chunk-level) precision / recall / F1, micro over all entities and per entity
  type, with the entities found by seqeval. Default mode is conlleval's (CoNLL-2000's `conlleval` script,
  seqeval's default: any I- after O or another type opens an entity, the scheme is not enforced); `strict=True`
  counts only the entities that are well formed in `scheme` (IOB1, IOB2, IOE1, IOE2, IOBES, BILOU; seqeval's
  strict mode). A predicted entity is correct when its type, first and last word match a gold entity of the same
  sentence. Scores with no predicted (gold) entity count as 0 precision (recall), as seqeval's zero_division=0.
- `tagging_results`: the dict a runner writes to eval_results.json for either kind.

Inputs are lists of sentences, each a list of tag strings: `y_true[i]` and `y_pred[i]` of equal length; a
mismatch is a ValueError naming the sentence.
"""

from __future__ import annotations

from typing import Any, Dict, Optional, Sequence, Set, Tuple

import numpy as np

from xlnet_tf import errors
from xlnet_tf.errors import UserError

SCHEMES = ("IOB1", "IOB2", "IOE1", "IOE2", "IOBES", "BILOU")
KINDS = ("pos", "entities")
# The prefixes an entity tag may carry (`<prefix>-<type>`, or `O` outside entities): seqeval's default reading
# knows B, I, E, S; a named scheme its own.
PREFIXES = {None: "BIES", "IOB1": "BI", "IOB2": "BI", "IOE1": "IE", "IOE2": "IE", "IOBES": "BIES", "BILOU": "BILU"}


class LabelSchemeError(UserError):
    """Labels that the chosen metric cannot read (e.g. part-of-speech tags scored as entities)."""


def check_entity_labels(labels: Sequence[str], scheme: Optional[str] = None, where: str = "the labels") -> None:
    """Every label must be `O` or `<prefix>-<type>` with a prefix of `scheme` (seqeval's default reading when
    None), or entity metrics would invent entities (seqeval reads `VERB` as a `V` prefix of type `ERB`).
    LabelSchemeError naming the labels that do not fit."""
    prefixes = PREFIXES[scheme.upper() if scheme and scheme.upper() in PREFIXES else None]
    bad = [lab for lab in labels
           if lab != "O" and not (len(lab) > 2 and lab[0] in prefixes and lab[1] == "-" and lab[2:].strip())]
    if bad:
        raise LabelSchemeError(
            f"{where}: {errors.some(bad)} {'is' if len(bad) == 1 else 'are'} not entity tags (O or "
            f"{'/'.join(p + '-TYPE' for p in prefixes)}{' of ' + scheme.upper() if scheme else ''}); score "
            "these labels with --metrics=pos, or give entity tags")

Tags = Sequence[Sequence[str]]
Span = Tuple[int, str, int, int]  # (sentence, type, first word, last word)


def check_pairs(y_true: Tags, y_pred: Tags) -> None:
    """ValueError unless `y_true` and `y_pred` have the same sentences and words."""
    if len(y_true) != len(y_pred):
        raise ValueError(f"{len(y_true)} gold sentences but {len(y_pred)} predicted")
    for i, (t, p) in enumerate(zip(y_true, y_pred)):
        if len(t) != len(p):
            raise ValueError(f"sentence {i}: {len(t)} gold tags but {len(p)} predicted")


def _f1(p: float, r: float) -> float:
    return 2 * p * r / (p + r) if p + r else 0.0


def _scores(correct: int, predicted: int, gold: int) -> Dict[str, float]:
    p = correct / predicted if predicted else 0.0
    r = correct / gold if gold else 0.0
    return {"precision": p, "recall": r, "f1": _f1(p, r)}


def token_accuracy(y_true: Tags, y_pred: Tags) -> float:
    """Share of words whose predicted tag is the gold tag (0 for no words)."""
    check_pairs(y_true, y_pred)
    total = sum(len(t) for t in y_true)
    right = sum(a == b for t, p in zip(y_true, y_pred) for a, b in zip(t, p))
    return right / total if total else 0.0


def token_report(y_true: Tags, y_pred: Tags, labels: Optional[Sequence[str]] = None) -> Dict[str, Any]:
    """Word-level metrics (POS tagging): `token_accuracy`, `num_tokens`, `num_sentences`, `macro_f1` (mean over
    `labels`, default every tag in gold or predictions) and `per_label` {tag: precision, recall, f1, support
    (gold words), predicted (predicted words)}."""
    from sklearn.metrics import precision_recall_fscore_support

    check_pairs(y_true, y_pred)
    flat_true = [a for t in y_true for a in t]
    flat_pred = [b for p in y_pred for b in p]
    labels = sorted(set(flat_true) | set(flat_pred)) if labels is None else list(labels)
    out: Dict[str, Any] = {"token_accuracy": token_accuracy(y_true, y_pred), "num_tokens": len(flat_true),
                           "num_sentences": len(y_true), "per_label": {}}
    if not flat_true or not labels:
        out["macro_f1"] = 0.0
        return out
    p, r, f, support = precision_recall_fscore_support(flat_true, flat_pred, labels=labels, zero_division=0)
    predicted = dict(zip(*np.unique(np.asarray(flat_pred, dtype=object), return_counts=True)))
    for k, lab in enumerate(labels):
        out["per_label"][lab] = {"precision": float(p[k]), "recall": float(r[k]), "f1": float(f[k]),
                                 "support": int(support[k]), "predicted": int(predicted.get(lab, 0))}
    out["macro_f1"] = float(np.mean(f))
    return out


def _scheme(name: Optional[str]):
    from seqeval import scheme as seqeval_scheme

    if name is None:
        raise ValueError(f"strict entity matching needs a scheme: one of {SCHEMES}")
    if name.upper() not in SCHEMES:
        raise ValueError(f"scheme must be one of {SCHEMES}, got {name!r}")
    return getattr(seqeval_scheme, name.upper())


def entity_spans(y: Tags, scheme: Optional[str] = None, strict: bool = False) -> Set[Span]:
    """The entities of tag sequences `y` as (sentence, type, first word, last word) (seqeval's reading: its
    default, conlleval-compatible mode, or `strict` mode with `scheme`)."""
    y = [list(s) for s in y]
    if strict:
        from seqeval.scheme import Entities

        found = Entities(y, _scheme(scheme), suffix=False).entities
        return {(sent, ent.tag, ent.start, ent.end - 1) for sent, ents in enumerate(found) for ent in ents}
    from seqeval.metrics.sequence_labeling import get_entities

    out: Set[Span] = set()
    for sent, tags in enumerate(y):
        out.update((sent, kind, start, end) for kind, start, end in get_entities(tags))
    return out


def entity_report(y_true: Tags, y_pred: Tags, scheme: Optional[str] = None, strict: bool = False
                  ) -> Dict[str, Any]:
    """Entity-level metrics: micro `precision`, `recall`, `f1`; `num_gold`, `num_predicted`, `num_correct`
    entities; `macro_f1` (mean over the types in gold or predictions); `token_accuracy`; `mode`
    ("default" = conlleval, or "strict"), `scheme`; `per_label` {type: precision, recall, f1, support (gold
    entities), predicted, correct}."""
    check_pairs(y_true, y_pred)
    if scheme is not None:
        _scheme(scheme)
    check_entity_labels(sorted({t for s in y_true for t in s} | {t for s in y_pred for t in s}), scheme,
                        "the gold and predicted tags")
    gold, pred = entity_spans(y_true, scheme, strict), entity_spans(y_pred, scheme, strict)
    correct = gold & pred
    out: Dict[str, Any] = {**_scores(len(correct), len(pred), len(gold)), "num_gold": len(gold),
                           "num_predicted": len(pred), "num_correct": len(correct),
                           "token_accuracy": token_accuracy(y_true, y_pred), "mode": "strict" if strict else "default",
                           "scheme": scheme.upper() if scheme else None, "per_label": {}}
    types = sorted({s[1] for s in gold | pred})
    for kind in types:
        n_gold = sum(s[1] == kind for s in gold)
        n_pred = sum(s[1] == kind for s in pred)
        n_correct = sum(s[1] == kind for s in correct)
        out["per_label"][kind] = {**_scores(n_correct, n_pred, n_gold), "support": n_gold, "predicted": n_pred,
                                  "correct": n_correct}
    out["macro_f1"] = float(np.mean([v["f1"] for v in out["per_label"].values()])) if types else 0.0
    return out


def tagging_results(y_true: Tags, y_pred: Tags, kind: str = "pos", scheme: Optional[str] = None,
                    strict: bool = False, labels: Optional[Sequence[str]] = None) -> Dict[str, Any]:
    """The eval_results.json entries of a tagging evaluation: `kind` "pos" -> `token_report`; "entities" ->
    `entity_report` with the word-level `token_report`'s per-tag figures under `per_tag`."""
    if kind == "pos":
        return {"kind": kind, **token_report(y_true, y_pred, labels)}
    if kind == "entities":
        tokens = token_report(y_true, y_pred, labels)
        return {"kind": kind, **entity_report(y_true, y_pred, scheme, strict), "per_tag": tokens["per_label"],
                "num_tokens": tokens["num_tokens"], "num_sentences": tokens["num_sentences"]}
    raise ValueError(f"kind must be one of {KINDS}, got {kind!r}")

