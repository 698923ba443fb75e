"""Generation speed: our cached one-position steps (XLA and plain graph) against recomputing the prefix for every
token and against Hugging Face's `generate` (PyTorch, with and without its memories), tokens per second.

  python -m bench.speed.generation_speed --prompt_lens=16,128 --new_tokens=64 \
      --output=bench/speed/results/generation_speed_cpu
  python -m bench.speed.generation_speed --quick

For each prompt length, `--batch` copies of a random prompt are continued greedily by `--new_tokens` tokens
(no stop token) by one model of random weights (speed does not depend on the values; Hugging Face gets the
same architecture):
  ours_xla / ours_graph: xlnet_tf.inference.generation.generate, the whole decode loop one `tf.function`, with and
    without XLA (memory buffer = prompt + new tokens: the whole past, the causal layout);
  ours_bf16: the same model's bfloat16 export twin (`serving.half_weights.rounded_once` of its `mixed_bfloat16`
    form): the prompt pass under XLA, every step the native op (`GenerationSettings.native_step`'s default for a
    bfloat16 model; xlnet_tf/inference/native_step.py);
  recompute: bench.generation_reference.recompute_logits, the whole prefix recomputed for every token (one row; the
    vanilla Transformer path, a `tf.function` per prefix bucket of 16);
  hf_mems / hf_no_mems: `XLNetLMHeadModel.generate` eager (its layout: prompt + dummy token; with memories it
    recomputes the last two tokens and the dummy each step), `torch.set_flush_denormal(True)`;
  hf_compiled (with --torch_compile): the same with `torch.compile`d forward, where it compiles;
  hf_mems_bf16 / hf_compiled_bf16: hf_mems / hf_compiled under `torch.autocast("cpu", dtype=torch.bfloat16)` (the
    matmuls at the bfloat16 rate), only on a CPU with bfloat16 arithmetic (AVX-512 BF16 or AMX).
Tokens/s counts new tokens of all rows; time to first token is a run with one new token. Every way is warmed up
first (traces, compilations: reported as `warmup_s`), then timed `--repeats` times (best kept), alternating.
The report (JSON + markdown) names the CPU and its vector extensions (bench/host.py).
"""

from __future__ import annotations

import json
import os
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
from absl import flags  # noqa: E402

from bench import cli  # noqa: E402
from xlnet_tf.errors import UserError  # noqa: E402

FLAGS = flags.FlagValues()  # defined by define_flags when the script runs, never at import
WAYS = ("ours_xla", "ours_graph", "ours_bf16", "recompute", "hf_mems", "hf_no_mems")
BF16_WAYS = ("hf_mems_bf16", "hf_compiled_bf16")  # Hugging Face under bfloat16 autocast (named in --ways)
HF_WAYS = ("hf_mems", "hf_no_mems", "hf_compiled", *BF16_WAYS)  # Hugging Face's ways: the best one is the reference


def define_flags(fv: flags.FlagValues = FLAGS):
    d = cli.Definer(fv)
    d.list("prompt_lens", ["16", "128"], "Prompt lengths (a row each).")
    d.integer("new_tokens", 64, "New tokens per prompt (greedy, no stop token).")
    d.integer("batch", 1, "Copies of the prompt.")
    d.integer("n_layer", 4, "Layers.")
    d.integer("d_model", 256, "Model width (n_head = d_model / 64, d_inner = 4 x d_model).")
    d.integer("n_token", 8000, "Vocabulary size.")
    d.integer("repeats", 3, "Timed runs of each way (best kept).")
    d.integer("slow_new_tokens", 0, "New tokens of the ways that recompute the prefix (recompute, hf_no_mems; 0: "
              "--new_tokens): their tokens/s at fewer tokens is an upper bound (a shorter prefix on average), so "
              "the ratio against them stays a lower bound.")
    d.integer("threads", 0, "Intra-op threads of both frameworks (0 = the cores; on a loaded machine use 1: "
              "PyTorch's OpenMP threads spin against other work).")
    d.list("ways", list(WAYS), f"The ways timed, of {', '.join(WAYS)}, hf_compiled and {', '.join(BF16_WAYS)}.")
    d.bool("torch_compile", False, "Also time hf_compiled (slow to compile).")
    d.bool("quick", False, "A 2 x 128 model, prompts of 8 and 32, 16 new tokens.")
    d.string("output", None, "Path prefix of the .json/.md report.")


def _ours(model, prompts, new_tokens, jit):
    from xlnet_tf.inference.generation import GenerationSettings, generate

    settings = GenerationSettings(max_new_tokens=new_tokens, stop_ids=(), jit_compile=jit)
    return lambda: generate(model, prompts, settings)


def _bfloat16_twin(model):
    """`model`'s weights in the pure bfloat16 policy, rounded once (what a bfloat16 export serves)."""
    from xlnet_tf.models import XLNetPretrainer
    from xlnet_tf.serving.half_weights import rounded_once

    mixed = XLNetPretrainer.from_config({**model.get_config(), "dtype": "mixed_bfloat16"})
    mixed.set_weights(model.get_weights())
    return rounded_once(mixed)


def _recompute(model, prompt, new_tokens):
    from bench.speed.generation_reference import recompute_logits

    return lambda: recompute_logits(model, prompt, max_new_tokens=new_tokens)


def _hf(hf, prompts, new_tokens, use_mems, bfloat16=False):
    import contextlib

    import torch

    ids = torch.tensor(prompts)

    def run():
        autocast = torch.autocast("cpu", dtype=torch.bfloat16) if bfloat16 else contextlib.nullcontext()
        with torch.no_grad(), autocast:
            return hf.generate(ids, max_new_tokens=new_tokens, min_new_tokens=new_tokens, do_sample=False,
                               use_mems=use_mems, pad_token_id=5, eos_token_id=None)
    return run


SLOW_WAYS = ("recompute", "hf_no_mems")  # every token recomputes the whole prefix


def _time(run, repeats):
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        run()
        best = min(best, time.perf_counter() - t0)
    return best


def main():
    unknown = sorted(set(FLAGS.ways) - set(WAYS) - {"hf_compiled", *BF16_WAYS})
    if unknown:
        raise UserError(f"--ways: unknown way(s) {unknown}; choose from {', '.join(WAYS)}, hf_compiled, "
                        f"{', '.join(BF16_WAYS)}")
    from bench import host

    if set(FLAGS.ways) & set(BF16_WAYS) and not host.describe()["native_bfloat16"]:
        raise UserError(f"--ways: {', '.join(BF16_WAYS)} need a CPU with bfloat16 arithmetic (AVX-512 BF16 or AMX); "
                        "this one would time an emulation")
    if FLAGS.quick:
        FLAGS.prompt_lens, FLAGS.new_tokens, FLAGS.n_layer, FLAGS.d_model, FLAGS.n_token, FLAGS.repeats = (
            ["8", "32"], 16, 2, 128, 1000, 2)

    import keras
    import tensorflow as tf
    import torch
    import transformers

    from xlnet_tf.config import XLNetConfig
    from xlnet_tf.models import XLNetPretrainer

    threads = FLAGS.threads or os.cpu_count() or 1
    tf.config.threading.set_intra_op_parallelism_threads(threads)
    tf.config.threading.set_inter_op_parallelism_threads(threads)
    torch.set_num_threads(threads)
    torch.set_flush_denormal(True)
    keras.utils.set_random_seed(0)
    config = XLNetConfig(n_token=FLAGS.n_token, n_layer=FLAGS.n_layer, d_model=FLAGS.d_model,
                         n_head=FLAGS.d_model // 64, d_head=64, d_inner=4 * FLAGS.d_model, dropout=0.0, dropatt=0.0)
    model = XLNetPretrainer(config)
    hf = transformers.XLNetLMHeadModel(transformers.XLNetConfig(**config.to_hf_dict())).eval()
    ways = list(FLAGS.ways) + (["hf_compiled"] if FLAGS.torch_compile else [])
    compiled = twin = None
    results = []
    for length in [int(n) for n in FLAGS.prompt_lens]:
        prompt = [int(i) for i in np.random.default_rng(length).integers(10, FLAGS.n_token, length)]
        prompts = [prompt] * FLAGS.batch
        row = {"prompt_len": length, "new_tokens": FLAGS.new_tokens, "batch": FLAGS.batch}
        runs = {}
        for way in ways:
            n_all = FLAGS.slow_new_tokens if FLAGS.slow_new_tokens and way in SLOW_WAYS else FLAGS.new_tokens
            row[f"{way}_new_tokens"] = n_all
            for n, key in ((n_all, "all"), (1, "first")):
                if way in ("ours_xla", "ours_graph"):
                    runs[way, key] = _ours(model, prompts, n, way == "ours_xla")
                elif way == "ours_bf16":
                    twin = twin or _bfloat16_twin(model)
                    runs[way, key] = _ours(twin, prompts, n, True)
                elif way == "recompute":
                    runs[way, key] = _recompute(model, prompt, n)
                elif way in ("hf_mems", "hf_no_mems", "hf_mems_bf16"):
                    runs[way, key] = _hf(hf, prompts, n, way != "hf_no_mems", way.endswith("_bf16"))
                elif way in ("hf_compiled", "hf_compiled_bf16"):
                    if compiled is None:
                        compiled = transformers.XLNetLMHeadModel(hf.config).eval()
                        compiled.load_state_dict(hf.state_dict())
                        compiled.forward = torch.compile(compiled.forward, dynamic=True)
                    runs[way, key] = _hf(compiled, prompts, n, True, way.endswith("_bf16"))
        failed = {}
        for (way, key), run in list(runs.items()):  # warm-up: traces and compilations
            t0 = time.perf_counter()
            try:
                run()
            except Exception as e:  # noqa: BLE001  (torch.compile "where it works")
                failed[way] = f"{type(e).__name__}: {' '.join(str(e).split())[:200]}"
                runs = {k: v for k, v in runs.items() if k[0] != way}
                continue
            row[f"{way}_warmup_s"] = round(row.get(f"{way}_warmup_s", 0.0) + time.perf_counter() - t0, 2)
        best = {k: float("inf") for k in runs}
        for _ in range(FLAGS.repeats):
            for k, run in runs.items():
                best[k] = min(best[k], _time(run, 1))
        for way in ways:
            if way in failed:
                row[f"{way}_failed"] = failed[way]
                continue
            tokens = row[f"{way}_new_tokens"] * (1 if way == "recompute" else FLAGS.batch)
            row[f"{way}_tokens_per_s"] = round(tokens / best[way, "all"], 1)
            row[f"{way}_first_token_ms"] = round(1000 * best[way, "first"], 1)
        print(json.dumps(row), flush=True)
        results.append(row)

    machine = host.describe()
    report = {"machine": machine, "model": f"{FLAGS.n_layer} x {FLAGS.d_model}, vocabulary {FLAGS.n_token}, random "
              "weights", "torch": torch.__version__, "transformers": transformers.__version__,
              "threads": threads, "repeats": FLAGS.repeats, "rows": results,
              "command": cli.command_line("bench.speed.generation_speed", FLAGS)}
    if FLAGS.output:
        os.makedirs(os.path.dirname(FLAGS.output) or ".", exist_ok=True)
        with open(FLAGS.output + ".json", "w", encoding="utf-8") as f:
            json.dump(report, f, indent=2)
        lines = [f"# Generation speed ({machine['cpu']}, {machine['cores']} cores; {machine['vector_extensions']})",
                 "", f"Model {report['model']}; greedy, no stop token; best of {FLAGS.repeats}; torch "
                 f"{report['torch']} (denormals flushed), {threads} intra-op thread(s) in both frameworks, transformers "
                 f"{report['transformers']}. Command: `{report['command']}`", "",
                 "| prompt | new | way | tokens/s | first token (ms) | warm-up (s) |", "|---|---|---|---|---|---|"]
        for r in results:
            for way in ways:
                if f"{way}_failed" in r:
                    lines.append(f"| {r['prompt_len']} | {r['new_tokens']} | {way} | failed: {r[f'{way}_failed']} "
                                 "| | |")
                else:
                    lines.append(f"| {r['prompt_len']} | {r.get(f'{way}_new_tokens', r['new_tokens'])} | {way} | "
                                 f"{r[f'{way}_tokens_per_s']} | "
                                 f"{r[f'{way}_first_token_ms']} | {r[f'{way}_warmup_s']} |")
        lines += ["", "Ratios (ours_xla tokens/s over the other's; time to first token of the best Hugging Face way "
                  "over ours; the last column: ours_bf16's tokens/s over the best Hugging Face way's):", "",
                  "| prompt | new | vs best Hugging Face | vs recompute | first token vs HF | ours_bf16 vs best HF |",
                  "|---|---|---|---|---|---|"]
        for r in results:
            lines.append(f"| {r['prompt_len']} | {r['new_tokens']} | " + " | ".join(ratios(r)) + " |")
        with open(FLAGS.output + ".md", "w", encoding="utf-8") as f:
            f.write("\n".join(lines) + "\n")


def ratios(row):
    """`(vs best HF, vs recompute, first-token ratio, ours_bf16 vs best HF)` as text cells ("-" where a way was not
    run)."""
    ours = row.get("ours_xla_tokens_per_s")
    hf = {w: row[f"{w}_tokens_per_s"] for w in HF_WAYS if f"{w}_tokens_per_s" in row}
    if not ours:
        bf16 = row.get("ours_bf16_tokens_per_s")
        return ["-", "-", "-", f"{bf16 / max(hf.values()):.1f}x" if bf16 and hf else "-"]
    cells = []
    if hf:
        best = max(hf, key=hf.get)
        cells.append(f"{ours / hf[best]:.1f}x ({best})")
    else:
        cells.append("-")
    rec = row.get("recompute_tokens_per_s")
    cells.append(f"{ours / rec:.1f}x" if rec else "-")
    if hf:
        first = min(row[f"{w}_first_token_ms"] for w in hf)
        cells.append(f"{first / row['ours_xla_first_token_ms']:.1f}x")
    else:
        cells.append("-")
    bf16 = row.get("ours_bf16_tokens_per_s")
    cells.append(f"{bf16 / max(hf.values()):.1f}x" if bf16 and hf else "-")
    return cells


if __name__ == "__main__":
    cli.run(FLAGS, define_flags, main)
