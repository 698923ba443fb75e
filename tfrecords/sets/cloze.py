r"""A cloze multiple-choice task in the style of the Children's Book Test, built from corpus text as RACE JSON.

Each question: a passage (the sentences just before a query sentence in the same document), the query sentence
with one content word replaced by `_`, and 4 candidate words of the same part of speech, all of them words of the
passage (one of them the removed word). Choosing needs what a language model knows: which word fits the
sentence and the story. RACE's cloze packing (`xlnet_tf/text/layout.py` `choice_text`) fills `_` with each
candidate, so `run/run_race.py` trains and scores it unchanged.

  python tfrecords/sets/cloze.py --output_dir=/work/cloze \
      --lexicon_conll=/work/brown_pos/train.txt,/work/brown_pos/dev.txt,/work/brown_pos/test.txt \
      --train_corpus=austen=../shared/data/corpus/train/austen.txt,brown=...,moby_dick=...,wiki=...,sotu=... \
      --heldout_corpus=../shared/data/corpus/heldout.txt --heldout_docs=../shared/data/corpus/heldout_docs.tsv

(the transfer table's set, 443 dev and 415 test questions, as data/finetune/cloze/SOURCE.md; a lexicon of
train.txt alone tags fewer words and gives another set, 432 and 405.)

Splits are by document: train questions come from the train corpus files, dev and test from the held-out
documents (`heldout.txt`, which the pretraining corpus does not contain: its documents are in no train file),
each held-out document wholly in dev or in test (`assign_heldout`: per source, seeded, balancing the two). So no dev/test passage was
seen in pretraining. `--sources` picks the sources (`heldout_docs.tsv`'s first column and the `--train_corpus`
names).

Parts of speech come from a lexicon, not a tagger: each lowercase word's Brown tag over the Brown POS CoNLL
files (`tfrecords/sets/brown_pos.py`, column 2), modifiers (`-tl`, `-hl`, `-nc`) dropped, kept when the word occurs
`min_count` times and one tag has `min_share` of them. Only the content tags `CONTENT_TAGS` (common nouns
singular/plural, verb forms, adjectives) make questions, and the candidates share the answer's fine tag (a plural
noun against plural nouns, a past tense against past tenses), so inflection never gives the answer away.

A word of a sentence is a whitespace token with its edge punctuation stripped (`split_token`); only all-lowercase
words of 3+ letters take part (no sentence-initial or proper-noun forms). A query sentence qualifies when it has
at most `max_query_words` tokens, no `_`, and a content word that occurs once in it, also occurs in the passage,
and has 3 other passage words of its tag. The passage is the longest run of preceding sentences within
`max_passage_words` words (at least `min_passage_sentences`, at most `max_passage_sentences`): ~120 words keep
passage + query within a 256-piece window (about 1.5 pieces per word), since RACE packing cuts the article's end.
After a question the next `question_stride - 1` sentences are skipped. A held-out document gives all its
questions (the held-out text is small: 224 documents, about 1,000 questions with the defaults); a train document
at most `max_questions_per_document`, from documents in a seeded order until `max_train_questions`.

`--slice_dir` also writes a small slice (`select_slice`, `--slice_questions` per split of `--slice_sources`; the
repository's `data/finetune/cloze`, without Wikipedia's CC BY-SA text).

Output: `<output_dir>/{train,dev,test}/<id>.json`, one RACE article per question (`article`, `questions`,
`options`, `answers`, `id`, and `tags`: the answer's fine tag), and `cloze_info.json` (schema
`CLOZE_INFO_VERSION`: settings, sources, the lexicon's size and SHA-256, counts). Written into a temporary folder
and moved into place: a failed run leaves nothing. Also `python -m tfrecords.sets.cloze`. No TensorFlow.
"""

from __future__ import annotations

import collections
import dataclasses
import hashlib
import json
import os
import random
import re
from typing import Dict, List, Mapping, Optional, Sequence, Tuple

from tfrecords.readers import conll
from xlnet_tf import cli, files
from xlnet_tf.errors import UserError

CLOZE_INFO_VERSION = 1
CLOZE_INFO = "cloze_info.json"
SPLITS = ("train", "dev", "test")
SOURCES = ("austen", "brown", "moby_dick", "sotu", "wiki")
CONTENT_TAGS = ("nn", "nns", "vb", "vbd", "vbg", "vbn", "vbz", "jj")
LETTERS = "ABCD"
_WORD = re.compile(r"^[a-z]{3,}$")
_LEADING = "\"'“‘([{*"
_TRAILING = "\"'”’)]}.,;:!?*"


class ClozeError(UserError):
    """Bad cloze input: a missing file, a bad setting, an existing output folder."""


@dataclasses.dataclass(frozen=True)
class ClozeSettings:
    max_passage_words: int = 120
    min_passage_sentences: int = 2
    max_passage_sentences: int = 20
    max_query_words: int = 35
    question_stride: int = 1
    max_questions_per_document: int = 20
    max_train_questions: int = 6000
    min_count: int = 2
    min_share: float = 0.8
    seed: int = 0

    def validate(self) -> "ClozeSettings":
        for name in ("max_passage_words", "min_passage_sentences", "max_passage_sentences", "max_query_words",
                     "question_stride", "max_questions_per_document", "max_train_questions", "min_count"):
            if int(getattr(self, name)) < 1:
                raise ClozeError(f"--{name}={getattr(self, name)}: must be at least 1")
        if self.min_passage_sentences > self.max_passage_sentences:
            raise ClozeError(f"--min_passage_sentences={self.min_passage_sentences} is above "
                             f"--max_passage_sentences={self.max_passage_sentences}")
        if not 0.5 < self.min_share <= 1.0:
            raise ClozeError(f"--min_share={self.min_share}: must be in (0.5, 1]")
        return self


# ------------------------------------------------------------------------------------------ the lexicon
def base_tag(brown_tag: str) -> Optional[str]:
    """A Brown tag without its `-tl`/`-hl`/`-nc` modifiers; None for forms that are not one plain word class
    (contractions `a+b`, possessives `$`, foreign words `fw-`, negations `*`)."""
    tag = brown_tag.lower()
    if tag.startswith("fw-") or any(c in tag for c in "+$*"):
        return None
    return tag.split("-")[0] or None


def build_lexicon(conll_paths: Sequence[str], min_count: int = 3, min_share: float = 0.9) -> Dict[str, str]:
    """`{lowercase word: Brown fine tag}` for the words of CONTENT_TAGS whose tag is unambiguous enough (see the
    module docstring), from Brown POS CoNLL files (word in column 1, Brown tag in column 2)."""
    counts: Dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    for path in conll_paths:
        if not os.path.isfile(path):
            raise ClozeError(f"--lexicon_conll: {path} not found (build it with python tfrecords/sets/brown_pos.py)")
        for sentence in conll.read_conll(path, label_column=1):
            for word, tag in zip(sentence.words, sentence.labels):
                tag = base_tag(tag)
                if tag is not None and _WORD.match(word.lower()):
                    counts[word.lower()][tag] += 1
    lexicon = {}
    for word, tags in counts.items():
        tag, n = tags.most_common(1)[0]
        total = sum(tags.values())
        if tag in CONTENT_TAGS and total >= min_count and n >= min_share * total:
            lexicon[word] = tag
    if not lexicon:
        raise ClozeError(f"--lexicon_conll={','.join(conll_paths)}: no content word passes the lexicon's filters")
    return lexicon


def lexicon_digest(lexicon: Mapping[str, str]) -> str:
    return hashlib.sha256("\n".join(f"{w}\t{t}" for w, t in sorted(lexicon.items())).encode()).hexdigest()


# ------------------------------------------------------------------------------------------ the text
def read_documents(path: str) -> List[List[str]]:
    """The documents of a corpus file in the original XLNet format (a sentence a line, blank lines between
    documents), as lists of sentences."""
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except FileNotFoundError:
        raise ClozeError(f"{path}: not found") from None
    except UnicodeDecodeError as e:
        raise ClozeError(f"{path}: invalid UTF-8 at byte {e.start}") from None
    docs = [[s.strip() for s in block.split("\n") if s.strip()] for block in re.split(r"\n\s*\n", text)]
    return [d for d in docs if d]


def split_token(token: str) -> Tuple[str, str, str]:
    """`(leading punctuation, word, trailing punctuation)` of a whitespace token."""
    core = token.lstrip(_LEADING)
    lead = token[:len(token) - len(core)]
    word = core.rstrip(_TRAILING)
    return lead, word, core[len(word):]


def _words(sentence: str) -> List[str]:
    """The sentence's all-lowercase words (others as "")."""
    out = []
    for token in sentence.split():
        word = split_token(token)[1]
        out.append(word if _WORD.match(word) else "")
    return out


def document_questions(sentences: Sequence[str], doc_id: str, lexicon: Mapping[str, str], settings: ClozeSettings,
                       rng: random.Random, limit: Optional[int] = None) -> List[Dict]:
    """The questions of one document (RACE article dicts, one question each), in sentence order, at most `limit`."""
    s = settings
    words = [_words(x) for x in sentences]
    lengths = [len(x.split()) for x in sentences]
    out: List[Dict] = []
    i = s.min_passage_sentences
    while i < len(sentences) and (limit is None or len(out) < limit):
        query = sentences[i]
        start, total = i, 0
        while start > 0 and i - start < s.max_passage_sentences and total + lengths[start - 1] <= s.max_passage_words:
            start -= 1
            total += lengths[start]
        question = None
        if i - start >= s.min_passage_sentences and lengths[i] <= s.max_query_words and "_" not in query:
            question = _question(sentences[start:i], query, words[start:i], words[i], lexicon, rng)
        if question is None:
            i += 1
            continue
        question["id"] = f"{doc_id}-s{i:03d}"
        out.append(question)
        i += s.question_stride
    return out


def _question(passage: Sequence[str], query: str, passage_words: Sequence[Sequence[str]], query_words: Sequence[str],
              lexicon: Mapping[str, str], rng: random.Random) -> Optional[Dict]:
    by_tag: Dict[str, set] = collections.defaultdict(set)
    for w in (w for ws in passage_words for w in ws if w in lexicon):
        by_tag[lexicon[w]].add(w)
    counts = collections.Counter(query_words)
    eligible = [k for k, w in enumerate(query_words)
                if w and counts[w] == 1 and w in lexicon and w in by_tag[lexicon[w]] and len(by_tag[lexicon[w]]) >= 4]
    if not eligible:
        return None
    k = rng.choice(eligible)
    answer, tag = query_words[k], lexicon[query_words[k]]
    options = [answer] + rng.sample(sorted(by_tag[tag] - {answer}), 3)
    rng.shuffle(options)
    tokens = query.split()
    lead, word, trail = split_token(tokens[k])
    tokens[k] = lead + "_" + trail
    return {"article": " ".join(passage), "questions": [" ".join(tokens)], "options": [options],
            "answers": [LETTERS[options.index(answer)]], "tags": [tag]}


def heldout_sources(docs_tsv: str, n_docs: int) -> List[str]:
    """The source of each document of heldout.txt, from heldout_docs.tsv (`source<TAB>document`, a header)."""
    try:
        with open(docs_tsv, encoding="utf-8") as f:
            rows = [line.rstrip("\n").split("\t") for line in f][1:]
    except FileNotFoundError:
        raise ClozeError(f"--heldout_docs={docs_tsv}: not found") from None
    if len(rows) != n_docs or any(len(r) != 2 for r in rows):
        raise ClozeError(f"--heldout_docs={docs_tsv}: expected {n_docs} rows `source<TAB>document` after the "
                         f"header (one per document of --heldout_corpus), found {len(rows)}")
    return [r[0] for r in rows]


def assign_heldout(per_doc: Mapping[int, Tuple[str, int]], seed: int) -> Dict[int, str]:
    """`{document index: "dev" | "test"}`: per source, documents in a seeded order, each to the split that has
    fewer of that source's questions so far (dev on a tie), so both splits get every source in like measure.
    `per_doc`: `{document index: (source, its number of questions)}`."""
    out: Dict[int, str] = {}
    for source in sorted({src for src, _ in per_doc.values()}):
        indices = sorted(k for k, (src, _) in per_doc.items() if src == source)
        random.Random(f"{seed}-{source}").shuffle(indices)
        have = {"dev": 0, "test": 0}
        for k in indices:
            split = "dev" if have["dev"] <= have["test"] else "test"
            out[k] = split
            have[split] += per_doc[k][1]
    return out


def build(train_corpus: Mapping[str, str], heldout_corpus: str, heldout_docs: str, lexicon: Mapping[str, str],
          settings: ClozeSettings = ClozeSettings(), sources: Sequence[str] = SOURCES) -> Dict[str, List[Dict]]:
    """`{split: [question dicts]}` (see the module docstring)."""
    s = settings.validate()
    missing = [src for src in sources if src not in train_corpus]
    if missing:
        raise ClozeError(f"--train_corpus has no file for source(s) {missing} (give name=path for each of --sources)")
    out: Dict[str, List[Dict]] = {split: [] for split in SPLITS}
    rng = random.Random(s.seed)
    train_docs = [(src, k, doc) for src in sources for k, doc in enumerate(read_documents(train_corpus[src]))]
    random.Random(s.seed).shuffle(train_docs)
    for src, k, doc in train_docs:
        if len(out["train"]) >= s.max_train_questions:
            break
        out["train"] += document_questions(doc, f"{src}-{k:05d}", lexicon, s, rng, s.max_questions_per_document)
    out["train"] = out["train"][:s.max_train_questions]
    docs = read_documents(heldout_corpus)
    per_doc = {k: document_questions(doc, f"{src}-heldout{k:03d}", lexicon, s, rng)
               for k, (doc, src) in enumerate(zip(docs, heldout_sources(heldout_docs, len(docs)))) if src in sources}
    split_of = assign_heldout({k: (q[0]["id"].split("-")[0], len(q)) for k, q in per_doc.items() if q}, s.seed)
    for k in sorted(split_of):
        out[split_of[k]] += per_doc[k]
    for split, questions in out.items():
        if not questions:
            raise ClozeError(f"no {split} questions: the corpus or the lexicon is too small for these settings")
    return out


def select_slice(questions: Mapping[str, Sequence[Dict]], sources: Sequence[str], per_split: int, seed: int = 0
                 ) -> Dict[str, List[Dict]]:
    """A small slice: up to `per_split` questions of each split from `sources` (seeded sample, id order)."""
    out = {}
    for split, items in questions.items():
        pool = [q for q in items if q["id"].split("-")[0] in sources]
        out[split] = sorted(random.Random(f"{seed}-{split}").sample(pool, min(per_split, len(pool))),
                            key=lambda q: q["id"])
    return out


def write(questions: Mapping[str, Sequence[Dict]], output_dir: str, info: Dict) -> None:
    """Write the RACE folders and cloze_info.json; refuses an existing non-empty `output_dir`, writes nothing
    unless everything is written (temporary folder, then one rename)."""
    if os.path.isdir(output_dir) and os.listdir(output_dir):
        raise ClozeError(f"--output_dir={output_dir} exists and is not empty; give a new folder")
    with files.directory_written_aside(output_dir) as tmp:
        for split, items in questions.items():
            os.makedirs(os.path.join(tmp, split))
            for q in items:
                with open(os.path.join(tmp, split, q["id"] + ".json"), "w", encoding="utf-8") as f:
                    json.dump(q, f, ensure_ascii=False)
        counts = {split: len(items) for split, items in questions.items()}
        tags = {split: dict(sorted(collections.Counter(q["tags"][0] for q in items).items()))
                for split, items in questions.items()}
        files.write_json_atomic(os.path.join(tmp, CLOZE_INFO), dict(info, version=CLOZE_INFO_VERSION,
                                                                   questions=counts, answer_tags=tags))


def read_questions(split_dir: str) -> List[Dict]:
    """The questions of one written split, in file-name order."""
    names = sorted(n for n in os.listdir(split_dir) if n.endswith(".json"))
    out = []
    for name in names:
        with open(os.path.join(split_dir, name), encoding="utf-8") as f:
            out.append(json.load(f))
    return out


# ------------------------------------------------------------------------------------------ command line
def define_flags() -> None:
    from absl import flags

    d = ClozeSettings()
    flags.DEFINE_string("output_dir", None, "New folder of {train,dev,test}/*.json and cloze_info.json.")
    flags.DEFINE_list("lexicon_conll", None, "Brown POS CoNLL file(s) with the Brown tag in column 2 "
                      "(python tfrecords/sets/brown_pos.py --output_dir=DIR: DIR/train.txt).")
    flags.DEFINE_list("train_corpus", None, "name=path of each source's train text (corpus format).")
    flags.DEFINE_string("heldout_corpus", None, "The held-out documents (shared/data corpus/heldout.txt).")
    flags.DEFINE_string("heldout_docs", None, "source<TAB>document of each held-out document (heldout_docs.tsv).")
    flags.DEFINE_list("sources", list(SOURCES), "Sources to draw questions from.")
    flags.DEFINE_string("slice_dir", None, "Also write a small slice (the repository's data/finetune/cloze) here.")
    flags.DEFINE_list("slice_sources", ["austen", "brown", "moby_dick", "sotu"], "Sources of the slice (the "
                      "default leaves out Wikipedia's CC BY-SA text).")
    flags.DEFINE_integer("slice_questions", 150, "Slice: questions per split.", lower_bound=1)
    for field in dataclasses.fields(ClozeSettings):
        value = getattr(d, field.name)
        define = flags.DEFINE_float if isinstance(value, float) else flags.DEFINE_integer
        define(field.name, value, f"ClozeSettings.{field.name} (module docstring).")


def main(argv: Sequence[str]) -> int:
    from absl import app, flags

    FLAGS = flags.FLAGS
    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments: {list(argv[1:])}")
    try:
        for name in ("output_dir", "lexicon_conll", "train_corpus", "heldout_corpus", "heldout_docs"):
            if not getattr(FLAGS, name):
                raise ClozeError(f"--{name} is required")
        train = {}
        for item in FLAGS.train_corpus:
            name, sep, path = item.partition("=")
            if not sep or not name or not path:
                raise ClozeError(f"--train_corpus: {item!r} is not name=path")
            train[name] = path
        settings = ClozeSettings(**{f.name: getattr(FLAGS, f.name) for f in dataclasses.fields(ClozeSettings)})
        lexicon = build_lexicon(FLAGS.lexicon_conll, settings.min_count, settings.min_share)
        questions = build(train, FLAGS.heldout_corpus, FLAGS.heldout_docs, lexicon, settings, FLAGS.sources)
        info = dict(settings=dataclasses.asdict(settings), sources=list(FLAGS.sources),
                    lexicon=dict(files=[os.path.basename(p) for p in FLAGS.lexicon_conll], words=len(lexicon),
                                 sha256=lexicon_digest(lexicon)),
                    train_corpus={k: os.path.basename(v) for k, v in train.items()},
                    heldout_corpus=os.path.basename(FLAGS.heldout_corpus))
        write(questions, FLAGS.output_dir, info)
        print(f"wrote {FLAGS.output_dir}: " + ", ".join(f"{k} {len(v)}" for k, v in questions.items())
              + f" questions; lexicon {len(lexicon)} words", flush=True)
        if FLAGS.slice_dir:
            part = select_slice(questions, FLAGS.slice_sources, FLAGS.slice_questions, settings.seed)
            write(part, FLAGS.slice_dir, dict(info, slice_of=os.path.basename(os.path.abspath(FLAGS.output_dir)),
                                              sources=list(FLAGS.slice_sources)))
            print(f"wrote slice {FLAGS.slice_dir}: " + ", ".join(f"{k} {len(v)}" for k, v in part.items()), flush=True)
    except (ClozeError, OSError) as e:
        cli.report_user_error(e)
    return 0


if __name__ == "__main__":
    define_flags()
    cli.run(main)
