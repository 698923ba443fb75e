"""SQuAD v1.1 / v2.0 JSON -> examples: reading the file, one `SquadExample` per usable question, and the
per-split counts of what was skipped or warned about (`SplitStats`).

Bad input (a question whose `answer_start` does not match its text, empty contexts, missing or duplicate
ids, lone surrogates, ...) is counted by reason (`SKIP_REASONS`, `WARNINGS`; the featurizer in
`squad_data.py` adds its own reasons to the same counts) and skipped, never a crash mid-run. Training keeps
the first answer of an answerable question; eval keeps every question (gold answers are only used by the
evaluation).
"""

from __future__ import annotations

import collections
import dataclasses
import json
import os
from typing import Any, Dict, List, Optional, Tuple

from tfrecords.records import DataError

# skip reasons (the example is dropped) and warnings (kept), counted per split
SKIP_REASONS = (
    "invalid_structure",      # a paragraph / question / answer that is not a JSON object
    "context_not_string", "empty_context", "empty_paragraph_tokens",
    "missing_id", "duplicate_id", "question_not_string", "empty_question",
    "invalid_unicode",        # lone surrogates (not encodable as UTF-8)
    "normalization_mismatch", "tokenization_error",
    "impossible_in_v1",       # is_impossible questions in a v1.1 build
    "no_answer",              # training: an answerable question without an answer
    "answer_mismatch",        # training: context[answer_start:+len(text)] != text
    "empty_answer", "answer_not_aligned",
)
WARNINGS = (
    "query_truncated",          # more than max_query_length question tokens (first kept)
    "eval_answer_mismatch",     # eval: a gold answer's answer_start does not match its text
    "answer_subword_boundary",  # the answer starts/ends inside a token (token span is wider)
    "missing_is_impossible",    # v2 question without is_impossible: taken as `not answers`
    "eval_answer_not_aligned",  # eval: the first gold answer covers no visible token (CLS labels)
)


@dataclasses.dataclass
class SquadExample:
    """One question. `answers`: the gold answers as in the JSON (`text`, `answer_start`);
    `answer_span`: `[start, end)` characters of the first answer in `context` (None when
    impossible, or when the gold answer does not match the context at eval time)."""

    qas_id: str
    question: str
    context: str
    answers: List[Dict[str, Any]]
    is_impossible: bool
    answer_span: Optional[Tuple[int, int]] = None
    title: str = ""
    paragraph_index: int = 0  # examples of one paragraph share its tokens


class SplitStats:
    """Counts of one split: `counts` (num_questions_read, num_examples, num_features, ...),
    `skipped[reason]` (dropped questions; an article or paragraph that is not a JSON object
    counts once), `warnings[reason]` (kept questions), and `samples[reason]` (the first few
    question ids, for the manifest)."""

    def __init__(self):
        self.skipped: collections.Counter = collections.Counter()
        self.warnings: collections.Counter = collections.Counter()
        self.samples: Dict[str, List[str]] = collections.defaultdict(list)
        self.counts: collections.Counter = collections.Counter()

    def skip(self, reason: str, what: str = "") -> None:
        self.skipped[reason] += 1
        if len(self.samples[reason]) < 5:
            self.samples[reason].append(what)

    def warn(self, reason: str, what: str = "") -> None:
        self.warnings[reason] += 1
        if len(self.samples[reason]) < 5:
            self.samples[reason].append(what)

    def to_dict(self) -> Dict[str, Any]:
        return {**{k: int(v) for k, v in sorted(self.counts.items())},
                "skipped": {k: int(v) for k, v in sorted(self.skipped.items())},
                "num_skipped": int(sum(self.skipped.values())),
                "warnings": {k: int(v) for k, v in sorted(self.warnings.items())},
                "samples": {k: v for k, v in sorted(self.samples.items())}}


def _utf8_ok(s: str) -> bool:
    try:
        s.encode("utf-8")
        return True
    except UnicodeEncodeError:
        return False


def load_squad_json(path: str) -> Dict[str, Any]:
    """Read a SQuAD JSON file; DataError (naming the file) if it is missing, not JSON, or has
    no `data` list."""
    if not os.path.isfile(path):
        raise DataError(f"{path}: file not found")
    try:
        with open(path, "rb") as f:
            obj = json.loads(f.read().decode("utf-8-sig"))
    except (UnicodeDecodeError, ValueError) as e:
        raise DataError(f"{path}: not a UTF-8 JSON file ({e})") from None
    if not isinstance(obj, dict) or not isinstance(obj.get("data"), list):
        raise DataError(f"{path}: not a SQuAD file (expected an object with a 'data' list)")
    return obj


def detect_version_2(dataset: Dict[str, Any]) -> bool:
    """True for a SQuAD 2.0 file: `version` "v2.0"/"2.0", or any question with
    `is_impossible`."""
    v = str(dataset.get("version", "")).lstrip("vV")
    if v.startswith("2"):
        return True
    for article in dataset["data"]:
        for para in (article.get("paragraphs") or []) if isinstance(article, dict) else []:
            for qa in (para.get("qas") or []) if isinstance(para, dict) else []:
                if isinstance(qa, dict) and "is_impossible" in qa:
                    return True
    return False


def read_squad_examples(dataset: Dict[str, Any], is_training: bool,
                        version_2_with_negative: bool, stats: Optional[SplitStats] = None
                        ) -> List[SquadExample]:
    """SQuAD JSON (as loaded) -> examples, in file order; bad questions are skipped and counted
    in `stats` (see SKIP_REASONS), never raised.

    Training keeps the first answer of an answerable question and requires it to match the
    context at `answer_start`. Eval keeps every question that can be featurized (gold answers
    are only used by the evaluation). A v1.1 build drops `is_impossible` questions.
    """
    stats = stats if stats is not None else SplitStats()
    out: List[SquadExample] = []
    seen = set()
    para_index = -1
    for article in dataset["data"]:
        if not isinstance(article, dict) or not isinstance(article.get("paragraphs", []), list):
            stats.skip("invalid_structure", "article")
            continue
        title = article.get("title", "")
        title = title if isinstance(title, str) else str(title)
        for para in article.get("paragraphs", []):
            if not isinstance(para, dict) or not isinstance(para.get("qas", []), list):
                stats.skip("invalid_structure", f"paragraph in {title!r}")
                continue
            para_index += 1
            context = para.get("context")
            qas = para.get("qas", [])
            for qa in qas:
                stats.counts["num_questions_read"] += 1
                if not isinstance(qa, dict):
                    stats.skip("invalid_structure", f"question in {title!r}")
                    continue
                ex = _read_question(qa, context, title, para_index, is_training,
                                    version_2_with_negative, stats, seen)
                if ex is not None:
                    out.append(ex)
    stats.counts["num_examples"] = len(out)
    stats.counts["num_impossible"] = sum(ex.is_impossible for ex in out)
    return out


def _read_question(qa, context, title, para_index, is_training, v2, stats, seen
                   ) -> Optional[SquadExample]:
    qid = qa.get("id")
    if qid is None or (isinstance(qid, str) and not qid.strip()):
        stats.skip("missing_id", f"question {qa.get('question')!r:.60}")
        return None
    qid = str(qid)
    if qid in seen:
        stats.skip("duplicate_id", qid)
        return None
    seen.add(qid)
    if not isinstance(context, str):
        stats.skip("context_not_string", qid)
        return None
    if not context.strip():
        stats.skip("empty_context", qid)
        return None
    question = qa.get("question")
    if not isinstance(question, str):
        stats.skip("question_not_string", qid)
        return None
    if not question.strip():
        stats.skip("empty_question", qid)
        return None
    answers = qa.get("answers") or []
    if not isinstance(answers, list) or not all(
            isinstance(a, dict) and isinstance(a.get("text"), str) for a in answers):
        stats.skip("invalid_structure", qid)
        return None
    if not all(_utf8_ok(s) for s in [context, question] + [a["text"] for a in answers]):
        stats.skip("invalid_unicode", qid)
        return None
    if "is_impossible" in qa:
        impossible = bool(qa["is_impossible"])
    else:
        impossible = v2 and not answers
        if v2:
            stats.warn("missing_is_impossible", qid)
    if impossible and not v2:
        stats.skip("impossible_in_v1", qid)
        return None
    ex = SquadExample(qid, question, context, [dict(a) for a in answers], impossible,
                      title=title, paragraph_index=para_index)
    if impossible:
        return ex
    if not answers:
        if is_training or not v2:
            stats.skip("no_answer", qid)
            return None
        return ex
    spans = []
    for a in answers:
        s = a.get("answer_start")
        text = a["text"]
        ok = (isinstance(s, int) and not isinstance(s, bool) and 0 <= s
              and context[s:s + len(text)] == text and text.strip())
        spans.append((s, s + len(text)) if ok else None)
    first = answers[0]
    if is_training:
        if not first["text"].strip():
            stats.skip("empty_answer", qid)
            return None
        if spans[0] is None:
            stats.skip("answer_mismatch", qid)
            return None
    elif any(sp is None for sp in spans):
        stats.warn("eval_answer_mismatch", qid)
    ex.answer_span = spans[0]
    return ex
