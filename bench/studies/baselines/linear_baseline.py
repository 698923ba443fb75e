"""What a pretrained model must beat on a classification set: the majority class and a linear model of n-grams.

  python -m bench.studies.baselines.linear_baseline --data_dir=../shared/data/labeled/topic  # label, text[, text_b]

- `majority`: the most frequent train label, always;
- `tfidf_logreg`: scikit-learn `TfidfVectorizer` over word 1-2-grams (lowercased, sublinear tf, min_df 2) and
  `LogisticRegression` (lbfgs, multinomial), its C chosen on dev from `C_GRID`, then scored on dev and test at
  that C. A pair task (text_b present) gets `[tfidf(a), tfidf(b), tfidf(a) * tfidf(b)]`: the element-wise
  product is what lets a linear model see the n-grams the two texts share.
Examples are read with the runners' own reader (`tfrecords/readers/processors.py`), so the baseline sees exactly the
rows the fine-tuning runs see. Scores are percentages: accuracy, macro F1, and F1 of label "1" for 2-label sets
whose labels are "0"/"1" (the paraphrase task's f1).
"""

from __future__ import annotations

import collections
from typing import Dict, List, Optional, Sequence, Tuple

from absl import flags

from bench import cli

FLAGS = flags.FlagValues()  # defined by define_flags when the script runs, never at import
C_GRID = (0.03, 0.1, 0.3, 1.0, 3.0, 10.0, 30.0, 100.0, 300.0, 1000.0)


def read_split(data_dir: str, split: str, task: str = "tsv") -> Tuple[List[str], Optional[List[str]], List[str]]:
    """`(texts, texts_b or None, labels)` of one split, read by the classifier runner's processor."""
    from tfrecords.readers import processors

    examples = processors.get_processor(task).get_examples(data_dir, split)
    texts_b = [e.text_b or "" for e in examples] if any(e.text_b for e in examples) else None
    return [e.text_a for e in examples], texts_b, [e.label for e in examples]


def scores(gold: Sequence[str], predicted: Sequence[str]) -> Dict[str, float]:
    from sklearn import metrics

    out = {"accuracy": 100.0 * metrics.accuracy_score(gold, predicted),
           "macro_f1": 100.0 * metrics.f1_score(gold, predicted, average="macro", zero_division=0)}
    if set(gold) <= {"0", "1"}:
        out["f1"] = 100.0 * metrics.f1_score(gold, predicted, pos_label="1", average="binary", zero_division=0)
    return out


def _features(vectorizer, texts, texts_b, fit: bool):
    """TF-IDF rows; a pair's `[a, b, a * b]` over one vocabulary (fitted on both sides' train texts)."""
    from scipy import sparse

    if fit:
        vectorizer.fit(list(texts) + list(texts_b or []))
    if texts_b is None:
        return vectorizer.transform(texts)
    a, b = vectorizer.transform(texts), vectorizer.transform(texts_b)
    return sparse.hstack([a, b, a.multiply(b)]).tocsr()


def baselines(data_dir: str, task: str = "tsv", splits: Sequence[str] = ("dev", "test")) -> Dict:
    """`{"majority": {split: scores}, "tfidf_logreg": {split: scores}, "C": chosen C}`."""
    from sklearn.feature_extraction.text import TfidfVectorizer
    from sklearn.linear_model import LogisticRegression

    train_a, train_b, train_y = read_split(data_dir, "train", task)
    evals = {s: read_split(data_dir, s, task) for s in splits}
    majority = collections.Counter(train_y).most_common(1)[0][0]
    vectorizer = TfidfVectorizer(ngram_range=(1, 2), lowercase=True, sublinear_tf=True, min_df=2)
    x_train = _features(vectorizer, train_a, train_b, fit=True)
    x_eval = {s: _features(vectorizer, a, b, fit=False) for s, (a, b, _) in evals.items()}
    choose = splits[0]
    best = None
    for c in C_GRID:
        model = LogisticRegression(C=c, max_iter=2000).fit(x_train, train_y)
        dev = scores(evals[choose][2], model.predict(x_eval[choose]))
        if best is None or dev["accuracy"] > best[0]:
            best = (dev["accuracy"], c, model)
    _, c, model = best
    return {"majority": {s: scores(y, [majority] * len(y)) for s, (_, _, y) in evals.items()},
            "tfidf_logreg": {s: scores(evals[s][2], model.predict(x_eval[s])) for s in splits}, "C": c}


def define_flags(fv: flags.FlagValues = FLAGS):
    d = cli.Definer(fv)
    d.string("data_dir", None, "Folder of train/dev/test.tsv.")
    d.string("task", "tsv", "The classifier runner's --task.")
    d.list("splits", ["dev", "test"], "Splits scored; the first chooses C.")
    flags.mark_flag_as_required("data_dir", flag_values=fv)


def main():
    out = baselines(FLAGS.data_dir, FLAGS.task, FLAGS.splits)
    for name in ("majority", "tfidf_logreg"):
        for split, row in out[name].items():
            print(f"{name} {split} " + " ".join(f"{k} {v:.1f}" for k, v in row.items()), flush=True)
    print(f"C {out['C']}")


if __name__ == "__main__":
    cli.run(FLAGS, define_flags, main)
