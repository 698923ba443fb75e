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

import argparse
import json
import os
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--contexts", default="128,256,512")
    p.add_argument("--seg_len", type=int, default=64)
    p.add_argument("--tokens", type=int, default=2048, help="stream length per row")
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--n_layer", type=int, default=4)
    p.add_argument("--d_model", type=int, default=256)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--output", default=None, help="path prefix of the .json/.md report")
    args = p.parse_args()

    import keras

    from bench import host
    from xlnet_tf.inference import lm_eval
    from xlnet_tf.config import XLNetConfig
    from xlnet_tf.models import XLNetPretrainer

    keras.utils.set_random_seed(0)
    rows = np.random.default_rng(0).integers(10, 8000, (args.batch, args.tokens)).astype(np.int32)
    results = []
    for context in [int(c) for c in args.contexts.split(",")]:
        config = XLNetConfig(n_token=8000, n_layer=args.n_layer, d_model=args.d_model, n_head=args.d_model // 64,
                             d_head=64, d_inner=4 * args.d_model, dropout=0.0, dropatt=0.0,
                             mem_len=context - args.seg_len)
        model = XLNetPretrainer(config)
        ways = {"cached": lambda: lm_eval.token_nll(model, rows, args.seg_len, use_mems=True),
                "recompute": lambda: lm_eval.sliding_window_nll(model, rows, args.seg_len, context)}
        for run in ways.values():  # warm-up: every trace
            run()
        best = {name: float("inf") for name in ways}
        for _ in range(args.repeats):
            for name, run in ways.items():
                t0 = time.perf_counter()
                run()
                best[name] = min(best[name], time.perf_counter() - t0)
        tokens = rows.size
        row = {"context": context, "seg_len": args.seg_len,
               "cached_tokens_per_s": round(tokens / best["cached"], 1),
               "recompute_tokens_per_s": round(tokens / best["recompute"], 1),
               "speedup": round(best["recompute"] / best["cached"], 2)}
        print(json.dumps(row), flush=True)
        results.append(row)
    report = {"machine": host.summary(), "model": f"{args.n_layer} x {args.d_model}, random weights",
              "batch": args.batch, "tokens_per_row": args.tokens, "repeats": args.repeats, "rows": results,
              "command": host.command_line("bench.speed.lm_eval_speed", args)}
    if args.output:
        os.makedirs(os.path.dirname(args.output) or ".", exist_ok=True)
        with open(args.output + ".json", "w", encoding="utf-8") as f:
            json.dump(report, f, indent=2)
        m = report["machine"]
        lines = [f"# Cached (memories) vs recomputed window: LM evaluation speed ({m['cpu']}, {m['cores']} cores; "
                 f"{m['vector_extensions']})", "", f"Model {report['model']}, batch {args.batch}, "
                 f"{args.tokens} tokens per row, best of {args.repeats}. Command: `{report['command']}`", "",
                 "| context | segment | cached tokens/s | recompute tokens/s | speed-up |", "|---|---|---|---|---|"]
        lines += [f"| {r['context']} | {r['seg_len']} | {r['cached_tokens_per_s']} | {r['recompute_tokens_per_s']} | "
                  f"{r['speedup']}x |" for r in results]
        with open(args.output + ".md", "w", encoding="utf-8") as f:
            f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
