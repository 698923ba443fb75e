"""Baselines of the cloze task (tfrecords/sets/cloze.py) that know no neural network: what a pretrained model must beat.

  python -m bench.studies.cloze.cloze_baselines --cloze_dir=/work/cloze \
      --corpus_glob='../shared/data/corpus/train/*.txt'

- `frequency`: the candidate that occurs most often in the passage (the Children's Book Test's strong
  context-frequency baseline);
- `unigram`: the candidate most frequent in the corpus;
- `bigram`: the candidate that makes the likeliest word bigrams around the blank, `P(w | previous word) *
  P(next word | w)`, a word bigram model of the corpus (lowercased words as tfrecords/sets/cloze.py splits them,
  sentence starts and ends as words; Jelinek-Mercer interpolation with the add-one unigram, lambda 0.7).
- `lm_zero_shot` (with `--lm_checkpoint`): a pretrained XLNet's own probability of each candidate in the blank,
  both sides of it visible (blank_scoring.py), no fine-tuning: what the language model knows, read
  without a multiple-choice head.
With `--predictions=predict_dev.tsv,...` (run_race.py --do_predict --predict_split=dev): how often a fine-tuned
model's choices are the answer and each baseline's choice.
Ties share the credit (k tied candidates including the answer score 1/k), so no tie-break can flatter a baseline.
The corpus should be the pretraining text of the models compared (the transfer table's: shared/data
corpus/train/*.txt; the held-out documents the dev and test questions come from are not in it).
Prints and returns `{split: {baseline: accuracy in %}}`.
"""

from __future__ import annotations

import collections
import glob
import math
import os
from typing import Dict, Iterable, List, Sequence

from absl import flags

from bench import cli
from tfrecords.sets import cloze

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))  # the repository root
FLAGS = flags.FlagValues()  # defined by define_flags when the script runs, never at import

START, END = "<s>", "</s>"
LAMBDA = 0.7


def sentence_words(sentence: str) -> List[str]:
    """Lowercased words of a sentence (edge punctuation stripped; tokens with no letters dropped)."""
    out = []
    for token in sentence.split():
        word = cloze.split_token(token)[1].lower()
        if any(c.isalpha() for c in word):
            out.append(word)
    return out


class BigramModel:
    def __init__(self, sentences: Iterable[str]):
        self.unigrams: collections.Counter = collections.Counter()
        self.bigrams: collections.Counter = collections.Counter()
        for sentence in sentences:
            words = [START] + sentence_words(sentence) + [END]
            self.unigrams.update(words)
            self.bigrams.update(zip(words, words[1:]))
        self.total = sum(self.unigrams.values())
        self.vocab = len(self.unigrams) + 1

    def unigram(self, word: str) -> float:
        return (self.unigrams[word] + 1) / (self.total + self.vocab)

    def bigram(self, previous: str, word: str) -> float:
        seen = self.unigrams[previous]
        ml = self.bigrams[(previous, word)] / seen if seen else 0.0
        return LAMBDA * ml + (1 - LAMBDA) * self.unigram(word)


def _credit(scores: Sequence[float], answer: int) -> float:
    best = max(scores)
    tied = [k for k, s in enumerate(scores) if s == best]
    return 1.0 / len(tied) if answer in tied else 0.0


def _context(question: str):
    """The words before and after the blank (sentence boundaries as START / END)."""
    before, _, after = question.partition("_")
    return ([START] + sentence_words(before))[-1], (sentence_words(after) + [END])[0]


def option_scores(question: Dict, model: BigramModel) -> Dict[str, List[float]]:
    """Each baseline's score of the question's 4 options (higher = the baseline's choice)."""
    options = question["options"][0]
    passage = collections.Counter(sentence_words(question["article"]))
    previous, following = _context(question["questions"][0])
    return {"frequency": [passage[o] for o in options], "unigram": [model.unigrams[o] for o in options],
            "bigram": [math.log(model.bigram(previous, o)) + math.log(model.bigram(o, following)) for o in options]}


def score(questions: Sequence[Dict], model: BigramModel) -> Dict[str, float]:
    credit = collections.Counter()
    for q in questions:
        for name, scores in option_scores(q, model).items():
            credit[name] += _credit(scores, cloze.LETTERS.index(q["answers"][0]))
    return {name: 100.0 * credit[name] / len(questions) for name in ("frequency", "unigram", "bigram")}


def agreement(questions: Sequence[Dict], predicted: Dict[str, str], model: BigramModel) -> Dict[str, float]:
    """How often a model's predicted letters (`{question id: letter}`, a runner's predict_<split>.tsv) are each
    baseline's choice (%, ties sharing the credit as in `score`), and the answer: which shallow cue a fine-tuned
    model's choices follow. Every question must have a prediction."""
    missing = [q["id"] for q in questions if q["id"] not in predicted]
    if missing:
        raise cloze.ClozeError(f"no prediction for {len(missing)} question(s), e.g. {missing[0]!r}")
    credit = collections.Counter()
    for q in questions:
        choice = cloze.LETTERS.index(predicted[q["id"]])
        credit["answer"] += float(q["answers"][0] == predicted[q["id"]])
        for name, scores in option_scores(q, model).items():
            credit[name] += _credit(scores, choice)
    return {name: 100.0 * credit[name] / len(questions) for name in ("answer", "frequency", "unigram", "bigram")}


def read_predictions(path: str) -> Dict[str, str]:
    """run_race.py's predict_<split>.tsv (`id`, `answer`; ids `<question file>#<index>`) -> {question id: letter}."""
    from xlnet_tf.training import finetuning

    return {guid.split("#")[0].removesuffix(".json"): letter
            for guid, letter in finetuning.read_predictions_tsv(path).items()}


def corpus_sentences(paths: Sequence[str]) -> Iterable[str]:
    for path in paths:
        for doc in cloze.read_documents(path):
            yield from doc


def lm_zero_shot(questions: Sequence[Dict], scorer) -> float:
    """Accuracy (%) of the candidate a `blank_scoring.BlankScorer` finds likeliest (ties share the credit)."""
    scores = scorer.score_questions(questions)
    credit = sum(_credit(list(s), cloze.LETTERS.index(q["answers"][0])) for s, q in zip(scores, questions))
    return 100.0 * credit / len(questions)


def load_scorer(checkpoint: str, spiece_model: str, seq_len: int = 256, max_pieces: int = 8):
    """A BlankScorer over the pretrained LM at `checkpoint` (refusals as run/evaluate_lm.py's, except that an MLM
    model is scored as one: the candidate's pieces as masks, read by the content stream)."""
    from xlnet_tf.inference.pretrained_lm import lm_tokenizer, load_lm
    from bench.studies.cloze import blank_scoring

    tokenizer, info = lm_tokenizer(checkpoint, spiece_model, "--lm_spiece_model", objectives=("plm", "mlm"))
    model = load_lm(checkpoint, None, tokenizer, spiece_model, spiece_flag="--lm_spiece_model",
                    objective=info.objective if info else "plm")
    return blank_scoring.BlankScorer(model, tokenizer, seq_len=seq_len, max_pieces=max_pieces)


def baselines(cloze_dir: str, corpus_paths: Sequence[str], splits: Sequence[str] = ("dev", "test"), scorer=None
              ) -> Dict[str, Dict[str, float]]:
    if not corpus_paths:
        raise cloze.ClozeError("--corpus_glob matches no files")
    model = BigramModel(corpus_sentences(corpus_paths))
    out = {}
    for split in splits:
        questions = cloze.read_questions(os.path.join(cloze_dir, split))
        out[split] = score(questions, model)
        if scorer is not None:
            out[split]["lm_zero_shot"] = lm_zero_shot(questions, scorer)
    return out


def define_flags(fv: flags.FlagValues = FLAGS):
    d = cli.Definer(fv)
    d.string("cloze_dir", None, "tfrecords/sets/cloze.py's --output_dir.")
    d.string("corpus_glob", os.path.join(os.path.dirname(REPO), "shared", "data", "corpus", "train", "*.txt"),
             "The corpus of the n-gram models.")
    d.string("lm_checkpoint", None, "A pretrained LM (e.g. ../shared/models/plm_cpu/final): adds the lm_zero_shot "
             "column.")
    d.string("lm_spiece_model", None, "The LM's SentencePiece model.")
    d.list("predictions", [], "run_race.py predict_<split>.tsv files: print how often each one's choices are the "
           "answer and each baseline's choice (which cue a fine-tuned model follows).")
    d.string("split", "dev", "--predictions: the split they predict.")
    flags.mark_flag_as_required("cloze_dir", flag_values=fv)


def main():
    model_scorer = load_scorer(FLAGS.lm_checkpoint, FLAGS.lm_spiece_model) if FLAGS.lm_checkpoint else None
    corpus = sorted(glob.glob(FLAGS.corpus_glob))
    if FLAGS.predictions:
        if not corpus:
            raise cloze.ClozeError("--corpus_glob matches no files")
        questions = cloze.read_questions(os.path.join(FLAGS.cloze_dir, FLAGS.split))
        model = BigramModel(corpus_sentences(corpus))
        for path in FLAGS.predictions:
            row = agreement(questions, read_predictions(path), model)
            print(path, " ".join(f"{k} {v:.1f}" for k, v in row.items()), flush=True)
        return
    results = baselines(FLAGS.cloze_dir, corpus, scorer=model_scorer)
    for split, row in results.items():
        print(split, " ".join(f"{k} {v:.1f}" for k, v in row.items()), flush=True)


if __name__ == "__main__":
    cli.run(FLAGS, define_flags, main)
