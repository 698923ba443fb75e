"""Where a `generate` call's time goes, per XLA operation (one position per new token).

Builds an `XLNetPretrainer` of random weights (speed does not depend on the values), compiles the generation
program for one prompt with XLA dumping its optimized HLO, then records one call with the TensorFlow profiler and
summarizes the thunks on the intra-op threads with step_profile.py's `summarize`. Times are per call; with
`--new_tokens` > 1 most of a call is the loop, so `ms per new token` (the call over the new tokens) says what a
step costs, and `--new_tokens=1` shows the prompt pass and what the program arranges before its loop.

    python -m bench.speed.generation_profile --n_layer=4 --d_model=256 --n_token=8000 --prompt_len=512 --new_tokens=192
    python -m bench.speed.generation_profile --n_layer=12 --d_model=768 --n_token=32000 --prompt_len=128 --new_tokens=1

Timings on a busy machine are shares, not speeds: say so in the report (`--note`).
"""

from __future__ import annotations

import glob
import os
import shutil
import tempfile
import time

from absl import flags

from bench import cli
from bench.speed import step_profile

FLAGS = flags.FlagValues()  # defined by define_flags when the script runs, never at import


def define_flags(fv: flags.FlagValues = FLAGS):
    d = cli.Definer(fv)
    d.integer("n_layer", 4, "Layers.")
    d.integer("d_model", 256, "Model width (n_head = d_model / 64, d_inner = 4 x d_model).")
    d.integer("n_token", 8000, "Vocabulary size.")
    d.integer("prompt_len", 512, "Prompt tokens (one prompt, batch 1).")
    d.integer("new_tokens", 192, "New tokens (greedy, no stop token).")
    d.integer("repeats", 3, "Timed calls before the profiled one (best reported).")
    step_profile.define_report_flags(fv)


def markdown(report: dict) -> str:
    s, h, c = report["summary"], report["host"], report["config"]
    lines = [f"# Where a generate call's time goes ({h['cpu']}, {h['cores']} cores; {h['vector_extensions']})", "",
             f"Command: `{report['command']}`. {report['note']}", "",
             f"Model {c['n_layer']} x {c['d_model']}, vocabulary {c['n_token']}, random weights; prompt "
             f"{c['prompt_len']}, {c['new_tokens']} new token(s). Best call {report['best_s'] * 1e3:.1f} ms "
             f"({report['best_s'] * 1e3 / c['new_tokens']:.2f} ms per new token). Thunk time of the profiled call, "
             f"summed over the intra-op threads: {s['total_ms']:.1f} ms.", "",
             "| kind | ms per call | share |", "|---|---|---|"]
    for kind, ms in s["by_kind"].items():
        if ms >= 0.05 * s["total_ms"] / 100:
            lines.append(f"| {kind} | {ms:.1f} | {ms / s['total_ms']:.1%} |")
    lines += ["", "Longest thunks:", "", "| thunk | kind | ms | HLO |", "|---|---|---|---|"]
    lines += [f"| {r['name']} | {r['kind']} | {r['ms']:.2f} | `{r['hlo'][:120]}` |" for r in s["top"]]
    return "\n".join(lines) + "\n"


def main():
    work = tempfile.mkdtemp(prefix="generation_profile_")
    dump = step_profile.dump_optimized_hlo(work)
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import keras
    import numpy as np

    from bench import host
    from xlnet_tf.config import XLNetConfig
    from xlnet_tf.inference.generation import GenerationSettings, generate
    from xlnet_tf.models import XLNetPretrainer

    keras.utils.set_random_seed(0)
    config = XLNetConfig(n_token=FLAGS.n_token, n_layer=FLAGS.n_layer, d_model=FLAGS.d_model,
                         n_head=FLAGS.d_model // 64, d_head=64, d_inner=4 * FLAGS.d_model, dropout=0.0, dropatt=0.0)
    model = XLNetPretrainer(config)
    prompt = [[int(i) for i in np.random.default_rng(FLAGS.prompt_len).integers(10, FLAGS.n_token,
                                                                                   FLAGS.prompt_len)]]
    settings = GenerationSettings(max_new_tokens=FLAGS.new_tokens, stop_ids=(), jit_compile=True)
    generate(model, prompt, settings)  # compile
    best = float("inf")
    for _ in range(FLAGS.repeats):
        start = time.perf_counter()
        generate(model, prompt, settings)
        best = min(best, time.perf_counter() - start)
    thunk_ms, _ = step_profile.profile_calls(work, lambda: generate(model, prompt, settings), 1)
    hlo_files = [f for f in glob.glob(os.path.join(dump, "*cpu_after_optimizations.txt")) if "lambda" in f]
    if not hlo_files:
        raise RuntimeError(f"no optimized HLO module of the generation program under {dump}")
    with open(max(hlo_files, key=os.path.getsize), encoding="utf-8") as f:
        hlo_text = f.read()
    report = {"host": host.describe(), "command": cli.invocation("bench.speed.generation_profile"), "note": FLAGS.note,
              "best_s": best, "summary": step_profile.summarize(thunk_ms, hlo_text, FLAGS.top),
              "config": {k: FLAGS[k].value for k in ("n_layer", "d_model", "n_token", "prompt_len", "new_tokens")}}
    step_profile.write_report(report, markdown(report), FLAGS.output)
    shutil.rmtree(work)  # the dump holds a file per fused kernel


if __name__ == "__main__":
    cli.run(FLAGS, define_flags, main)
