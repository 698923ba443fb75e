"""A bfloat16 export's predictions against the float32 export's of the same model (issue 65's accuracy check).

Both SavedModels (run/export_savedmodel.py, `--export_dtype=float32|bfloat16`) answer `serving_default` on each
TSV's texts (a `label<TAB>text` classifier file, as data/finetune/topic/dev.tsv); per file the report gives the rows
whose labels differ, how many of those are near-ties (float32's top two logits nearer than twice the largest logit
difference between the exports, so that rounding may order them either way), the largest logit difference, and
each export's accuracy against the file's labels (and, `rows_beyond_near_tie`, how many rows the rule decides).

    python -m bench.speed.bf16_export_compare --float32=WORK/export_float32/1 --bfloat16=WORK/export_bfloat16/1 \\
        --tsv=data/finetune/topic/dev.tsv --output=WORK/compare
"""

from __future__ import annotations

import csv
import json

import numpy as np
from absl import flags

from bench import cli

FLAGS = flags.FlagValues()  # defined by define_flags when the script runs, never at import


def define_flags(fv: flags.FlagValues = FLAGS):
    d = cli.Definer(fv)
    d.string("float32", None, "The float32 export's version directory.")
    d.string("bfloat16", None, "The bfloat16 export's version directory.")
    d.list("tsv", [], "Classifier TSV files (header, then label<TAB>text).")
    d.integer("batch", 32, "Texts per request.")
    d.string("output", None, "Write <output>.md and <output>.json.")


def read_tsv(path: str):
    """`(labels, texts)` of a `label<TAB>text` file with a header row."""
    with open(path, encoding="utf-8", newline="") as f:
        rows = list(csv.reader(f, delimiter="\t", quoting=csv.QUOTE_NONE))[1:]
    return [r[0] for r in rows], [r[1] for r in rows]


def predict(signature, texts, batch: int):
    """`(logits [N, C] float32, labels [N] str)` of `serving_default` over `texts` in requests of `batch`."""
    import tensorflow as tf

    logits, labels = [], []
    for start in range(0, len(texts), batch):
        out = signature(text=tf.constant(texts[start:start + batch]))
        logits.append(out["logits"].numpy())
        labels += [x.decode() for x in out["label"].numpy()]
    return np.concatenate(logits), labels


def compare(f32_logits, b16_logits, f32_labels, b16_labels, gold) -> dict:
    """The counts of the module docstring for one file."""
    diff = float(np.abs(f32_logits - b16_logits).max())
    top2 = np.sort(f32_logits, -1)[:, -2:]
    margin = top2[:, 1] - top2[:, 0]
    differ = [i for i, (a, b) in enumerate(zip(f32_labels, b16_labels)) if a != b]
    near = [i for i in differ if margin[i] <= 2 * diff]
    return {"rows": len(gold), "rows_beyond_near_tie": int((margin > 2 * diff).sum()),
            "labels_differ": len(differ), "differ_at_near_ties": len(near),
            "differ_elsewhere": len(differ) - len(near), "max_logit_difference": round(diff, 5),
            "differing_rows_float32_margin": [round(float(margin[i]), 5) for i in differ],
            "accuracy_float32": round(float(np.mean([a == g for a, g in zip(f32_labels, gold)])), 4),
            "accuracy_bfloat16": round(float(np.mean([b == g for b, g in zip(b16_labels, gold)])), 4)}


def main():
    import tensorflow as tf
    import tensorflow_text  # noqa: F401 (the exports' SentencePiece ops)

    from bench import host

    exports = {k: tf.saved_model.load(getattr(FLAGS, k)).signatures["serving_default"] for k in ("float32", "bfloat16")}
    report = {"host": host.describe(), "command": cli.invocation("bench.speed.bf16_export_compare"), "files": {}}
    for path in FLAGS.tsv:
        gold, texts = read_tsv(path)
        (f32, f32_labels), (b16, b16_labels) = (predict(exports[k], texts, FLAGS.batch) for k in ("float32", "bfloat16"))
        report["files"][path] = compare(f32, b16, f32_labels, b16_labels, gold)
    h = report["host"]
    lines = [f"# bfloat16 export vs float32 export ({h['cpu']}; {h['vector_extensions']})", "",
             f"Command: `{report['command']}`", "",
             "| file | rows | labels differ | of which near-ties | max logit difference | accuracy float32 | "
             "accuracy bfloat16 |", "|---|---|---|---|---|---|---|"]
    for path, r in report["files"].items():
        lines.append(f"| {path} | {r['rows']} | {r['labels_differ']} | {r['differ_at_near_ties']} | "
                     f"{r['max_logit_difference']} | {r['accuracy_float32']} | {r['accuracy_bfloat16']} |")
    text = "\n".join(lines) + "\n"
    print(text)
    if FLAGS.output:
        with open(FLAGS.output + ".json", "w", encoding="utf-8") as f:
            json.dump(report, f, indent=1)
        with open(FLAGS.output + ".md", "w", encoding="utf-8") as f:
            f.write(text)


if __name__ == "__main__":
    cli.run(FLAGS, define_flags, main)
