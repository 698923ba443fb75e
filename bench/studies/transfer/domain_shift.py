"""How unlike the pretraining corpus is a task's text, to the pretrained model itself: its left-to-right
language-model loss on each set's text (xlnet_tf/inference/lm_eval.py, the reading of run/evaluate_lm.py), beside the
tokenizer's pieces per word. A diagnosis for the transfer table's out-of-domain rows: where the
model predicts a text much worse than its held-out corpus text, its features were learned for other text.

  python -m bench.studies.transfer.domain_shift --checkpoint=../shared/models/plm_cpu/final \
      --spiece_model=../shared/models/plm_cpu/spiece.model \
      --sets=heldout=../shared/data/corpus/heldout.txt,topic=../shared/data/labeled/topic/dev.tsv,tweets=OOD/tweets/dev.tsv,spam=OOD/spam/dev.tsv \
      --output=bench/studies/transfer/results/domain_shift_cpu

A `.tsv` set is read as the runners read it (a header row, the text in the `text` column), one document per row;
a `.txt` set as run/evaluate_lm.py reads it (one paragraph per line, a blank line between documents). Each set's
first `--max_tokens` tokens (documents joined by `<eod>`) are scored in segments of `--seg_len`, without memories
(each segment alone: short texts such as tweets give no more context) and with memories of `--seg_len` tokens.
"""

from __future__ import annotations

import collections
import csv
import json
import os
from typing import Dict, List

from absl import flags

from bench import cli, labelled_paths
from xlnet_tf.errors import UserError

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))  # the repository root
FLAGS = flags.FlagValues()  # defined by define_flags when the script runs, never at import


def read_documents(path: str) -> List[List[str]]:
    """A set's documents, each a list of paragraphs (see the module docstring)."""
    if path.endswith(".tsv"):
        with open(path, encoding="utf-8", newline="") as f:
            rows = list(csv.reader(f, delimiter="\t", quoting=csv.QUOTE_NONE))
        if not rows or "text" not in rows[0]:
            raise UserError(f"--sets: {path} has no 'text' column in its header row")
        column = rows[0].index("text")
        return [[row[column]] for row in rows[1:] if len(row) > column and row[column].strip()]
    from tfrecords.readers import corpus

    lines, _ = corpus.read_text_file(path, source="--sets")  # stripped; a blank line ends a document
    documents: List[List[str]] = [[]]
    for line in lines:
        if line:
            documents[-1].append(line)
        elif documents[-1]:
            documents.append([])
    return [doc for doc in documents if doc]


def set_stream(documents: List[List[str]], tokenizer, max_tokens: int) -> Dict:
    """Token ids of the documents joined by `<eod>` (stopping once `max_tokens` are read), pieces per word, the
    share of pieces that are `<unk>` (the tokenizer cannot spell them) and the characters most often behind them."""
    from xlnet_tf.text.tokenization import EOD_ID, UNK_ID

    ids: List[int] = []
    words = pieces = unknown = 0
    unknown_chars: collections.Counter = collections.Counter()
    unspellable: Dict[str, bool] = {}  # character -> its own encoding holds <unk> (each character encoded once)
    for doc in documents:
        for paragraph in doc:
            encoded = tokenizer.encode(paragraph)
            ids.extend(encoded)
            pieces += len(encoded)
            words += len(paragraph.split())
            if UNK_ID in encoded:
                unknown += encoded.count(UNK_ID)
                for c in paragraph:
                    if c not in unspellable:
                        unspellable[c] = not c.isspace() and UNK_ID in tokenizer.encode(c)
                    if unspellable[c]:
                        unknown_chars[c] += 1
        ids.append(EOD_ID)
        if len(ids) >= max_tokens:
            break
    return {"ids": ids[:max_tokens], "pieces_per_word": pieces / max(words, 1),
            "unknown_piece_share": unknown / max(pieces, 1),
            "unknown_characters": "".join(c for c, _ in unknown_chars.most_common(8))}


def markdown_character(c: str) -> str:
    """One character as a code span that a Markdown table cell keeps (`|` escaped, a backtick in double ones)."""
    return "`` ` ``" if c == "`" else "`\\|`" if c == "|" else f"`{c}`"


def markdown(out: Dict) -> str:
    """The report's table (one row a set) from its JSON; a row made before the `<unk>` count shows `-` there."""
    machine = out["machine"]
    lines = [f"# Domain shift: the pretrained model's own LM loss on each set's text ({machine['cpu']}, "
             f"{machine['cores']} cores; {machine['vector_extensions']})", "",
             f"Checkpoint `{out['checkpoint']}`; each set's first {out['max_tokens']} tokens (documents joined by "
             f"<eod>), left to right in segments of {out['seg_len']} (xlnet_tf/inference/lm_eval.py); per token perplexity and "
             "bits per character on the same tokens; `<unk>` pieces: the share of the set's pieces the tokenizer "
             "cannot spell, with the characters most often behind them. Command: `" + out["command"] + "`", "",
             "| set | tokens | pieces / word | `<unk>` pieces | perplexity (no memories) | bits/char (no memories) | "
             "perplexity (memories) | bits/char (memories) |", "|---|---|---|---|---|---|---|---|"]
    for r in out["rows"]:
        unknown = "-"
        if "unknown_piece_share" in r:
            chars = " ".join(markdown_character(c) for c in r["unknown_characters"])
            unknown = f"{100 * r['unknown_piece_share']:.2f}%" + (f" ({chars})" if chars else "")
        lines.append(f"| {r['set']} | {r['tokens']} | {r['pieces_per_word']:.2f} | {unknown} | "
                     f"{r['without_memories_perplexity']:.1f} | {r['without_memories_bits_per_character']:.3f} | "
                     f"{r['with_memories_perplexity']:.1f} | {r['with_memories_bits_per_character']:.3f} |")
    return "\n".join(lines) + "\n"


def define_flags(fv: flags.FlagValues = FLAGS):
    d = cli.Definer(fv)
    d.string("checkpoint", None, "The pretrained model (a pretraining run's final/ or a kept ckpt-N).")
    d.string("spiece_model", None, "Its SentencePiece model.")
    d.string("model_config_path", None, "Its xlnet_config.json (default: beside the checkpoint).")
    d.list("sets", None, "The texts, as NAME=PATH (.tsv or .txt).")
    d.integer("max_tokens", 20000, "Tokens scored per set (its first).")
    d.integer("seg_len", 64, "Segment length.")
    d.integer("batch_size", 8, "Rows per batch.")
    d.string("output", None, "Path prefix of the .json/.md report.")
    for name in ("checkpoint", "spiece_model", "sets"):
        flags.mark_flag_as_required(name, flag_values=fv)


def main():
    sets = labelled_paths.parse("sets", FLAGS.sets, exists=os.path.isfile)

    from bench import host
    from xlnet_tf.inference.pretrained_lm import lm_tokenizer, load_lm
    from xlnet_tf.inference import lm_eval

    tokenizer, _ = lm_tokenizer(FLAGS.checkpoint, FLAGS.spiece_model)
    model = load_lm(FLAGS.checkpoint, FLAGS.model_config_path, tokenizer, FLAGS.spiece_model, FLAGS.seg_len)
    rows = []
    for name, path in sets.items():
        stream = set_stream(read_documents(path), tokenizer, FLAGS.max_tokens)
        needed = lm_eval.rows_needed(FLAGS.seg_len, FLAGS.batch_size)
        if len(stream["ids"]) < needed:
            raise UserError(f"--sets: {name} gives {len(stream['ids'])} tokens, fewer than {needed}")
        report = lm_eval.compare(model, stream["ids"], FLAGS.seg_len, tokenizer, batch_size=FLAGS.batch_size)
        row = {"set": name, "path": os.path.relpath(path, REPO) if path.startswith(REPO) else path,
               "tokens": len(stream["ids"]), "pieces_per_word": round(stream["pieces_per_word"], 3),
               "unknown_piece_share": round(stream["unknown_piece_share"], 4),
               "unknown_characters": stream["unknown_characters"],
               **{f"{k}_{m}": round(report[k][m], 4) for k in ("without_memories", "with_memories")
                  for m in ("perplexity", "bits_per_character")}}
        print(json.dumps(row), flush=True)
        rows.append(row)
    machine = host.describe()
    out = {"machine": machine, "checkpoint": FLAGS.checkpoint, "seg_len": FLAGS.seg_len,
           "max_tokens": FLAGS.max_tokens, "command": cli.command_line("bench.studies.transfer.domain_shift", FLAGS),
           "rows": rows}
    if FLAGS.output:
        from xlnet_tf import files

        files.write_json_atomic(FLAGS.output + ".json", out)
        files.write_text_atomic(FLAGS.output + ".md", markdown(out))


if __name__ == "__main__":
    cli.run(FLAGS, define_flags, main)
