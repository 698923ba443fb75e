"""Cached evaluation (Transformer-XL memories) against recomputing the context window, tokens per second.

  python -m bench.speed.lm_eval_speed --contexts=128,256,512 --seg_len=64 --output=bench/speed/results/lm_eval_speed_cpu

The same model reads the same token stream in segments of `--seg_len` with `context` tokens of context per
prediction two ways (xlnet_tf/inference/lm_eval.py): memories of the last `context - seg_len` tokens (each segment is
computed once) and the vanilla sliding window (the whole `context`-token window recomputed for every
segment). Random weights of the CPU pretraining recipe's size (4 x 256) by default: speed does not depend on
the values. Both ways are timed in the same run, alternating, after a warm-up pass that traces every shape;
the report names the CPU and its vector extensions.
"""

from __future__ import annotations

import json
import os
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
from absl import flags  # noqa: E402

from bench import cli  # noqa: E402

FLAGS = flags.FlagValues()  # defined by define_flags when the script runs, never at import


def define_flags(fv: flags.FlagValues = FLAGS):
    d = cli.Definer(fv)
    d.list("contexts", ["128", "256", "512"], "Tokens of context per prediction.")
    d.integer("seg_len", 64, "Segment length.")
    d.integer("tokens", 2048, "Stream length per row.")
    d.integer("batch", 4, "Rows.")
    d.integer("n_layer", 4, "Layers.")
    d.integer("d_model", 256, "Model width.")
    d.integer("repeats", 3, "Timed passes of each way (best kept).")
    d.string("output", None, "Path prefix of the .json/.md report.")


def main():
    import keras

    from bench import host
    from xlnet_tf.inference import lm_eval
    from xlnet_tf.config import XLNetConfig
    from xlnet_tf.models import XLNetPretrainer

    keras.utils.set_random_seed(0)
    rows = np.random.default_rng(0).integers(10, 8000, (FLAGS.batch, FLAGS.tokens)).astype(np.int32)
    results = []
    for context in [int(c) for c in FLAGS.contexts]:
        config = XLNetConfig(n_token=8000, n_layer=FLAGS.n_layer, d_model=FLAGS.d_model, n_head=FLAGS.d_model // 64,
                             d_head=64, d_inner=4 * FLAGS.d_model, dropout=0.0, dropatt=0.0,
                             mem_len=context - FLAGS.seg_len)
        model = XLNetPretrainer(config)
        ways = {"cached": lambda: lm_eval.token_nll(model, rows, FLAGS.seg_len, use_mems=True),
                "recompute": lambda: lm_eval.sliding_window_nll(model, rows, FLAGS.seg_len, context)}
        for run in ways.values():  # warm-up: every trace
            run()
        best = {name: float("inf") for name in ways}
        for _ in range(FLAGS.repeats):
            for name, run in ways.items():
                t0 = time.perf_counter()
                run()
                best[name] = min(best[name], time.perf_counter() - t0)
        tokens = rows.size
        row = {"context": context, "seg_len": FLAGS.seg_len,
               "cached_tokens_per_s": round(tokens / best["cached"], 1),
               "recompute_tokens_per_s": round(tokens / best["recompute"], 1),
               "speedup": round(best["recompute"] / best["cached"], 2)}
        print(json.dumps(row), flush=True)
        results.append(row)
    report = {"machine": host.summary(), "model": f"{FLAGS.n_layer} x {FLAGS.d_model}, random weights",
              "batch": FLAGS.batch, "tokens_per_row": FLAGS.tokens, "repeats": FLAGS.repeats, "rows": results,
              "command": cli.command_line("bench.speed.lm_eval_speed", FLAGS)}
    if FLAGS.output:
        os.makedirs(os.path.dirname(FLAGS.output) or ".", exist_ok=True)
        with open(FLAGS.output + ".json", "w", encoding="utf-8") as f:
            json.dump(report, f, indent=2)
        m = report["machine"]
        lines = [f"# Cached (memories) vs recomputed window: LM evaluation speed ({m['cpu']}, {m['cores']} cores; "
                 f"{m['vector_extensions']})", "", f"Model {report['model']}, batch {FLAGS.batch}, "
                 f"{FLAGS.tokens} tokens per row, best of {FLAGS.repeats}. Command: `{report['command']}`", "",
                 "| context | segment | cached tokens/s | recompute tokens/s | speed-up |", "|---|---|---|---|---|"]
        lines += [f"| {r['context']} | {r['seg_len']} | {r['cached_tokens_per_s']} | {r['recompute_tokens_per_s']} | "
                  f"{r['speedup']}x |" for r in results]
        with open(FLAGS.output + ".md", "w", encoding="utf-8") as f:
            f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    cli.run(FLAGS, define_flags, main)
