"""Train a SentencePiece unigram model with XLNet's special symbols.

Ids follow the released `spiece.model` layout: `<unk>`0 `<s>`1 `</s>`2 `<cls>`3 `<sep>`4
`<pad>`5 `<mask>`6 `<eod>`7 `<eop>`8, then the other user-defined symbols of the original
recipe (`. ( ) " - – £ €`). The training text goes through the same normalization as the
builders (`xlnet_tf.text.tokenization.preprocess_text`, lowercased when `uncased`).

CLI:
  python tfrecords/spm.py --input_glob='corpus/*.txt' --model_prefix=out/spiece \
      --vocab_size=32000 [--uncased]
"""

from __future__ import annotations

import io
import os
import re
from typing import Iterator, Sequence

from tfrecords.readers import corpus
from xlnet_tf import cli
from xlnet_tf.text import tokenization
from xlnet_tf.errors import UserError

CONTROL_SYMBOLS = ("<cls>", "<sep>", "<pad>", "<mask>", "<eod>")
USER_DEFINED_SYMBOLS = ("<eop>", ".", "(", ")", '"', "-", "\u2013", "\u00a3", "\u20ac")


def _normalized_lines(files: Sequence[str], uncased: bool, keep_accents: bool,
                      skip_invalid_utf8: bool, counter: list) -> Iterator[str]:
    for line in corpus.iter_lines(files, skip_invalid_utf8=skip_invalid_utf8):
        text = tokenization.preprocess_text(line, lower=uncased, keep_accents=keep_accents)
        if text:
            counter[0] += 1
            yield text


def train_spm(input_files: Sequence[str], model_prefix: str, vocab_size: int = 32000,
              uncased: bool = False, keep_accents: bool = False,
              character_coverage: float = 0.99995, input_sentence_size: int = 10_000_000,
              seed: int = 0, num_threads: int = 1, hard_vocab_limit: bool = True,
              skip_invalid_utf8: bool = False, max_sentence_length: int = 16384,
              log_level: int = 1) -> str:
    """Train a unigram model on `input_files`; writes `<model_prefix>.model/.vocab`.

    Returns the path of the `.model` file. Raises ValueError on an empty corpus or if
    the trained model does not have the special-id layout.
    """
    import sentencepiece as spm

    if vocab_size <= len(tokenization.SPECIAL_SYMBOLS) + len(USER_DEFINED_SYMBOLS):
        raise ValueError(f"vocab_size={vocab_size} is too small")
    files = list(input_files)
    if not files:
        raise ValueError("no input files")
    counter = [0]
    # A full pass first: an empty corpus or bad UTF-8 is a clear error here, not an
    # exception wrapped by sentencepiece mid-training.
    n_lines = sum(1 for _ in _normalized_lines(files, uncased, keep_accents,
                                               skip_invalid_utf8, [0]))
    if n_lines == 0:
        raise ValueError(f"empty corpus: no text lines in {', '.join(files)}")
    out_dir = os.path.dirname(os.path.abspath(model_prefix))
    os.makedirs(out_dir, exist_ok=True)
    spm.set_random_generator_seed(seed)
    writer = io.BytesIO()  # no output path inside the model: the checksum is portable
    try:
        _train(spm, files, writer, uncased, keep_accents, skip_invalid_utf8, counter, vocab_size,
               character_coverage, input_sentence_size, max_sentence_length, hard_vocab_limit, num_threads,
               log_level)
    except RuntimeError as e:
        limit = re.search(r"value <= (\d+)", str(e))
        if "Vocabulary size too high" in str(e) and limit:
            raise UserError(f"--vocab_size={vocab_size} is too large for this corpus ({len(files)} file(s), "
                            f"{n_lines} lines): it supports at most {limit.group(1)} pieces; use "
                            f"--vocab_size={limit.group(1)} or less, more text, or --nohard_vocab_limit") from None
        raise
    proto = writer.getvalue()
    proc = spm.SentencePieceProcessor(model_proto=proto)
    tokenization.check_special_symbols(proc)
    model_file = model_prefix + ".model"
    with open(model_file + ".tmp", "wb") as f:
        f.write(proto)
    os.replace(model_file + ".tmp", model_file)
    with open(model_prefix + ".vocab", "w", encoding="utf-8") as f:
        for i in range(proc.GetPieceSize()):
            f.write(f"{proc.IdToPiece(i)}\t{proc.GetScore(i):g}\n")
    return model_file



def _train(spm, files, writer, uncased, keep_accents, skip_invalid_utf8, counter, vocab_size, character_coverage,
           input_sentence_size, max_sentence_length, hard_vocab_limit, num_threads, log_level):
    spm.SentencePieceTrainer.train(
        sentence_iterator=_normalized_lines(files, uncased, keep_accents,
                                            skip_invalid_utf8, counter),
        model_writer=writer,
        model_type="unigram",
        vocab_size=vocab_size,
        character_coverage=character_coverage,
        control_symbols=list(CONTROL_SYMBOLS),
        user_defined_symbols=list(USER_DEFINED_SYMBOLS),
        unk_id=0, bos_id=1, eos_id=2, pad_id=-1,
        input_sentence_size=input_sentence_size,
        shuffle_input_sentence=True,
        max_sentence_length=max_sentence_length,
        hard_vocab_limit=hard_vocab_limit,
        num_threads=num_threads,
        minloglevel=log_level,
    )


def main(argv):
    from absl import flags

    FLAGS = flags.FLAGS
    if len(argv) > 1:
        raise ValueError(f"unexpected positional arguments: {argv[1:]}")
    files = corpus.expand_globs(FLAGS.input_glob)
    path = _train_from_flags(FLAGS, files)
    print(f"wrote {path} (vocab {FLAGS.vocab_size}, sha256 {tokenization.file_sha256(path)})")


def _train_from_flags(FLAGS, files):
    return train_spm(files, FLAGS.model_prefix, vocab_size=FLAGS.vocab_size,
                     uncased=FLAGS.uncased, keep_accents=FLAGS.keep_accents,
                     character_coverage=FLAGS.character_coverage,
                     input_sentence_size=FLAGS.input_sentence_size, seed=FLAGS.seed,
                     num_threads=FLAGS.num_threads,
                     hard_vocab_limit=FLAGS.hard_vocab_limit,
                     skip_invalid_utf8=FLAGS.skip_invalid_utf8)


def _define_flags():
    from absl import flags

    flags.DEFINE_string("input_glob", None, "Comma-separated globs of corpus text files.")
    flags.DEFINE_string("model_prefix", None, "Output prefix: writes PREFIX.model/.vocab.")
    flags.DEFINE_integer("vocab_size", 32000, "Vocabulary size.", lower_bound=10)
    flags.DEFINE_bool("uncased", False, "Lowercase the text (an uncased model).")
    flags.DEFINE_bool("keep_accents", False, "Keep accents (default strips them, as XLNet).")
    flags.DEFINE_float("character_coverage", 0.99995, "SentencePiece character_coverage.",
                       lower_bound=0.0, upper_bound=1.0)
    flags.DEFINE_integer("input_sentence_size", 10_000_000, "Max sentences sampled.", lower_bound=1)
    flags.DEFINE_integer("seed", 0, "Random seed of the trainer.")
    flags.DEFINE_integer("num_threads", 1, "Trainer threads.", lower_bound=1)
    flags.DEFINE_bool("hard_vocab_limit", True, "Fail if vocab_size cannot be reached.")
    flags.DEFINE_bool("skip_invalid_utf8", False, "Skip lines that are not UTF-8.")
    flags.mark_flags_as_required(["input_glob", "model_prefix"])


if __name__ == "__main__":
    _define_flags()
    cli.run(main, errors=(ValueError,))  # UserError, CorpusError: one line, no traceback
