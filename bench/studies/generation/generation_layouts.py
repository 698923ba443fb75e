"""Which attention layout does a pretrained PLM model prefer for generation? Held-out likelihood of continuations
under `causal` and `bidirectional_prompt`, through the generation path itself (`generation.teacher_force`), plus
a greedy and a sampled sample per prompt.

  python -m bench.studies.generation.generation_layouts --model_dir=../shared/models/plm_cpu \
      --heldout=../shared/data/corpus/heldout.txt --num_passages=24 --prompt_tokens=64 --continuation_tokens=64

For each of the first `--num_passages` documents of the held-out text long enough, the prompt is its first
`--prompt_tokens` tokens and the continuation the next `--continuation_tokens`; both layouts score the same
continuation tokens (mean negative log-likelihood in nats, perplexity; the difference per passage with its
standard error). Writes `<results_prefix>.json` / `.md`.
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
    d.integer("num_passages", 24, "Documents scored.", lower_bound=1)
    d.integer("prompt_tokens", 64, "Prompt length in tokens.", lower_bound=1)
    d.integer("continuation_tokens", 64, "Scored continuation length in tokens.", lower_bound=1)
    d.integer("sample_tokens", 48, "Tokens of the printed samples.", lower_bound=1)
    d.string("results_prefix",
             os.path.join(REPO, "bench", "studies", "generation", "results", "generation_layouts_cpu"),
             "Where the .json / .md go.")


def documents(path):
    docs, current = [], []
    for line in open(path, encoding="utf-8"):
        line = line.strip()
        if line:
            current.append(line)
        elif current:
            docs.append(" ".join(current))
            current = []
    if current:
        docs.append(" ".join(current))
    return docs


def load_model(model_dir):
    """`(XLNetPretrainer, tokenizer)` of a pretrained model directory (final/, spiece.model), read left to right."""
    from xlnet_tf.checkpoints import load_init_checkpoint
    from xlnet_tf.config import XLNetConfig
    from xlnet_tf.models import XLNetPretrainer
    from xlnet_tf.text.tokenization import XLNetTokenizer

    final = os.path.join(model_dir, "final")
    config = XLNetConfig.from_json_file(os.path.join(final, "xlnet_config.json"), dropout=0.0, dropatt=0.0,
                                        bi_data=False, same_length=False)
    model = XLNetPretrainer(config)
    load_init_checkpoint(model, final)
    return model, XLNetTokenizer(os.path.join(model_dir, "spiece.model"))


def heldout_passages(tok, heldout, length, limit):
    """The first `length` tokens of each of the first `limit` held-out documents that long."""
    out = []
    for doc in documents(heldout):
        ids = tok.encode(doc)
        if len(ids) >= length:
            out.append(ids[:length])
        if len(out) == limit:
            break
    return out


def main():
    import numpy as np

    from bench import host
    from xlnet_tf.inference import generation

    model, tok = load_model(FLAGS.model_dir)
    passages = heldout_passages(tok, FLAGS.heldout, FLAGS.prompt_tokens + FLAGS.continuation_tokens,
                                FLAGS.num_passages)
    nll = {}
    for layout in generation.LAYOUTS:
        settings = generation.GenerationSettings(layout=layout, stop_ids=())
        nll[layout] = [float(-np.mean(generation.teacher_force(model, p[:FLAGS.prompt_tokens],
                                                               p[FLAGS.prompt_tokens:], settings)))
                       for p in passages]
        print(f"{layout}: mean nll {statistics.mean(nll[layout]):.4f}", flush=True)
    diffs = [b - c for b, c in zip(nll["bidirectional_prompt"], nll["causal"])]
    se = statistics.stdev(diffs) / math.sqrt(len(diffs)) if len(diffs) > 1 else float("nan")
    samples = []
    prompt_text = tok.decode(passages[0][:FLAGS.prompt_tokens])
    for layout in generation.LAYOUTS:
        for name, s in (("greedy", generation.GenerationSettings(layout=layout, max_new_tokens=FLAGS.sample_tokens)),
                        ("sampled (T 0.8, top-p 0.9, seed 1)", generation.GenerationSettings(
                            layout=layout, max_new_tokens=FLAGS.sample_tokens, temperature=0.8, top_p=0.9, seed=1))):
            row = generation.generate_text(model, tok, [prompt_text], s)[0]
            samples.append({"layout": layout, "decoding": name, "text": row["text"]})
    report = {"model_dir": FLAGS.model_dir, "heldout": FLAGS.heldout, "passages": len(passages),
              "prompt_tokens": FLAGS.prompt_tokens, "continuation_tokens": FLAGS.continuation_tokens,
              "cpu": host.one_line(),
              "mean_nll": {k: statistics.mean(v) for k, v in nll.items()},
              "perplexity": {k: math.exp(statistics.mean(v)) for k, v in nll.items()},
              "bidirectional_minus_causal": {"mean": statistics.mean(diffs), "standard_error": se},
              "prompt": prompt_text, "samples": samples}
    with open(FLAGS.results_prefix + ".json", "w", encoding="utf-8") as f:
        json.dump(report, f, indent=2)
    lines = [f"# Generation layouts: held-out likelihood of continuations ({report['cpu']})", "",
             f"`python -m bench.studies.generation.generation_layouts --num_passages={FLAGS.num_passages} "
             f"--prompt_tokens={FLAGS.prompt_tokens} --continuation_tokens={FLAGS.continuation_tokens}`; model "
             f"{FLAGS.model_dir}; {len(passages)} held-out documents, the same {FLAGS.continuation_tokens} "
             "continuation tokens scored under both layouts.", "",
             "| layout | mean NLL (nats/token) | perplexity |", "|---|---|---|"]
    for k in generation.LAYOUTS:
        lines.append(f"| {k} | {report['mean_nll'][k]:.4f} | {report['perplexity'][k]:.1f} |")
    d = report["bidirectional_minus_causal"]
    lines += ["", f"bidirectional_prompt - causal: {d['mean']:+.4f} nats/token (standard error {d['standard_error']:.4f}, "
              "paired over documents).", "", f"Prompt: {prompt_text}", ""]
    for sample in samples:
        lines.append(f"- {sample['layout']}, {sample['decoding']}: {sample['text']}")
    with open(FLAGS.results_prefix + ".md", "w", encoding="utf-8") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    cli.run(FLAGS, define_flags, main)
