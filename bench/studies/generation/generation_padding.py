"""Does the padding text help? The original authors advise prepending a long neutral text to short prompts
(`generation.PADDING_TEXT`, `run/generate.py --padding_text`). Held-out likelihood of the same continuation
tokens after a short prompt, with and without `PADDING_TEXT <eod>` before it, through the generation path
(`generation.teacher_force`, causal layout), paired over documents. A third arm puts only `<eod>` before the
prompt (how a document starts in the pretraining stream), to separate the separator from the text.

  python -m bench.studies.generation.generation_padding --num_passages=48 --prompt_tokens=16 --continuation_tokens=32

Writes `<results_prefix>.json` / `.md`.
"""

from __future__ import annotations

import json
import math
import os
import statistics

from absl import flags

from bench import cli

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))  # the repository root
FLAGS = flags.FlagValues()  # defined by define_flags when the script runs, never at import


def define_flags(fv: flags.FlagValues = FLAGS):
    d = cli.Definer(fv)
    d.string("model_dir", os.path.join(os.path.dirname(REPO), "shared", "models", "plm_cpu"),
             "A pretrained model: final/ (weights), final/xlnet_config.json, spiece.model.")
    d.string("heldout", os.path.join(os.path.dirname(REPO), "shared", "data", "corpus", "heldout.txt"),
             "Held-out text (one sentence per line, blank line between documents).")
    d.integer("num_passages", 48, "Documents scored.", lower_bound=2)
    d.integer("prompt_tokens", 16, "Prompt length in tokens (short: where the advice is given).",
              lower_bound=1)
    d.integer("continuation_tokens", 32, "Scored continuation length in tokens.", lower_bound=1)
    d.string("results_prefix",
             os.path.join(REPO, "bench", "studies", "generation", "results", "generation_padding_cpu"),
             "Where the .json / .md go.")


def main():
    import numpy as np

    from bench import host
    from bench.studies.generation.generation_layouts import heldout_passages, load_model
    from xlnet_tf.inference import generation
    from xlnet_tf.text.layout import EOD_ID

    model, tok = load_model(FLAGS.model_dir)
    prefix = tok.encode(generation.PADDING_TEXT) + [EOD_ID]
    passages = heldout_passages(tok, FLAGS.heldout, FLAGS.prompt_tokens + FLAGS.continuation_tokens,
                                FLAGS.num_passages)
    settings = generation.GenerationSettings(layout="causal", stop_ids=())
    nll = {}
    for name, before in (("plain", []), ("eod_only", [EOD_ID]), ("padding_text", prefix)):
        nll[name] = [float(-np.mean(generation.teacher_force(model, before + p[:FLAGS.prompt_tokens],
                                                               p[FLAGS.prompt_tokens:], settings)))
                     for p in passages]
        print(f"{name}: mean nll {statistics.mean(nll[name]):.4f}", flush=True)
    diffs = [a - b for a, b in zip(nll["padding_text"], nll["plain"])]
    se = statistics.stdev(diffs) / math.sqrt(len(diffs))
    d2 = [a - b for a, b in zip(nll["padding_text"], nll["eod_only"])]
    se2 = statistics.stdev(d2) / math.sqrt(len(d2))
    report = {"model_dir": FLAGS.model_dir, "heldout": FLAGS.heldout, "passages": len(passages),
              "prompt_tokens": FLAGS.prompt_tokens, "continuation_tokens": FLAGS.continuation_tokens,
              "padding_tokens": len(prefix), "cpu": host.one_line(),
              "mean_nll": {k: statistics.mean(v) for k, v in nll.items()},
              "perplexity": {k: math.exp(statistics.mean(v)) for k, v in nll.items()},
              "padding_minus_plain": {"mean": statistics.mean(diffs), "standard_error": se,
                                      "passages_better_with_padding": sum(d < 0 for d in diffs)},
              "padding_minus_eod_only": {"mean": statistics.mean(d2), "standard_error": se2,
                                         "passages_better_with_padding": sum(d < 0 for d in d2)}}
    with open(FLAGS.results_prefix + ".json", "w", encoding="utf-8") as f:
        json.dump(report, f, indent=2)
    d = report["padding_minus_plain"]
    lines = [f"# Generation: does the padding text help short prompts? ({report['cpu']})", "",
             f"`python -m bench.studies.generation.generation_padding --num_passages={FLAGS.num_passages} "
             f"--prompt_tokens={FLAGS.prompt_tokens} --continuation_tokens={FLAGS.continuation_tokens}`; model "
             f"{FLAGS.model_dir}; {len(passages)} held-out documents: the first {FLAGS.prompt_tokens} tokens are the "
             f"prompt, the next {FLAGS.continuation_tokens} are scored (causal layout), with and without "
             f"`PADDING_TEXT <eod>` ({len(prefix)} tokens) or only `<eod>` before the prompt.", "",
             "| prompt | mean NLL (nats/token) | perplexity |", "|---|---|---|"]
    for k in nll:
        lines.append(f"| {k} | {report['mean_nll'][k]:.4f} | {report['perplexity'][k]:.1f} |")
    lines += ["", f"padding_text - plain: {d['mean']:+.4f} nats/token (standard error {d['standard_error']:.4f}, "
              f"paired); the padding helped in {d['passages_better_with_padding']} of {len(passages)} passages.",
              "", f"padding_text - eod_only: {report['padding_minus_eod_only']['mean']:+.4f} nats/token (standard error "
              f"{report['padding_minus_eod_only']['standard_error']:.4f}); better in "
              f"{report['padding_minus_eod_only']['passages_better_with_padding']} of {len(passages)}."]
    with open(FLAGS.results_prefix + ".md", "w", encoding="utf-8") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    cli.run(FLAGS, define_flags, main)
