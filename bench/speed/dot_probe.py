"""How fast XLA's CPU dots (and, for comparison, its elementwise code) run on this machine at the shapes our hot
loops use.

Three probes, each a handful of XLA-compiled programs timed in interleaved rounds (median), so that a new host's
kernels are known before a step is blamed:

- `attention`: the batched products of the pretraining step's attention core (batch 8, 12 heads, 128 queries,
  192 keys, 64-deep heads at the default sizes), in the three operand orientations its forward and backward
  passes produce: `NN` (probabilities x values), `NT` (queries x keys: both operands contracted on their last
  axis) and `TN` (the keys' and values' gradients: both contracted on their first, non-batch axis), and `TN`
  with the transpose written out first; then one 2-D product of the step's feed-forward shape, the rate the
  step's large dots run at. Compare each row's GFLOP/s with the last.
- `weights`: the generation loop's regime, a chain of two-row products over 16 weight matrices of 1 MB
  (float32) repeated in a `tf.while_loop`, with the weights stored in float32 and in bfloat16 (converted
  products: what a bfloat16 table would do to a step that streams its weights). GB/s of weights read.
- `elementwise`: the feed-forward's activation at the training step's shape (`[1024, 3072]`), `tf.nn.gelu` on a
  bfloat16 tensor (XLA rounds after each of its ops), the same in float32 rounded once (layers/activations.py's
  forward), in float32 throughout, and a single multiply in each dtype: ns per element.

    python -m bench.speed.dot_probe --output=bench/speed/results/dot_probe_cpu

The report names the CPU and its vector extensions (bench/host.py): a rate holds on the kind it was measured on.
"""

from __future__ import annotations

import json
import os

from absl import flags

from bench import cli
from xlnet_tf.errors import UserError

FLAGS = flags.FlagValues()  # defined by define_flags when the script runs, never at import
PROBES = ("attention", "weights", "elementwise")


def define_flags(fv: flags.FlagValues = FLAGS):
    d = cli.Definer(fv)
    d.list("probes", list(PROBES), f"Probes to run, of {', '.join(PROBES)}.")
    d.integer("rounds", 15, "Interleaved timed calls per program (attention probe).")
    d.bool("tiny", False, "Small shapes (a test of the tool, not a measurement).")
    d.string("output", None, "Path prefix of the .json/.md report.")


def _median_ms(programs, rounds):
    """{name: median ms} of `rounds` calls of each `(function, args)` in turns (harness.py `interleaved_ms`),
    after one untimed call each; each call waits for its result on the host."""
    from bench.speed import harness

    calls = {name: (lambda fn=fn, args=args: fn(*args).numpy()) for name, (fn, args) in programs.items()}
    for call in calls.values():
        call()
    return harness.interleaved_ms(calls, rounds)


def attention_rows(batch=8, heads=12, queries=128, keys=192, depth=64, d_model=768, d_inner=3072, rounds=15):
    """Rows `{name, ms, gflops}` of the attention core's batched products and one feed-forward product."""
    import numpy as np
    import tensorflow as tf
    rng = np.random.default_rng(0)

    def tensor(*shape):
        return tf.constant(rng.standard_normal(shape).astype(np.float32))

    q, k = tensor(batch, heads, queries, depth), tensor(batch, heads, keys, depth)
    p = tensor(batch, heads, queries, keys)
    x, w = tensor(batch * queries, d_model), tensor(d_model, d_inner)
    flops = 2 * batch * heads * queries * keys * depth
    jit = lambda f: tf.function(f, jit_compile=True)  # noqa: E731
    programs = {
        "NN: probabilities x values (bhij,bhjd->bhid)": (jit(lambda p, k: tf.einsum("bhij,bhjd->bhid", p, k)), (p, k)),
        "NT: queries x keys (bhid,bhjd->bhij)": (jit(lambda q, k: tf.einsum("bhid,bhjd->bhij", q, k)), (q, k)),
        "TN: the values' gradient (bhij,bhid->bhjd)": (jit(lambda p, q: tf.einsum("bhij,bhid->bhjd", p, q)), (p, q)),
        "TN written as a transpose, then NN": (jit(lambda p, q: tf.matmul(
            tf.reshape(tf.transpose(p, [0, 1, 3, 2]), [batch * heads, keys, queries]),
            tf.reshape(q, [batch * heads, queries, depth]))), (p, q)),
        f"2-D feed-forward product {batch * queries}x{d_model}x{d_inner}": (jit(lambda x, w: tf.matmul(x, w)), (x, w)),
    }
    ms = _median_ms(programs, rounds)
    rows = []
    for name, t in ms.items():
        f = 2 * batch * queries * d_model * d_inner if name.startswith("2-D") else flops
        rows.append({"name": name, "ms": round(t, 3), "gflops": round(f / t / 1e6, 1)})
    return rows


def weights_rows(rows_per_product=2, matrices=16, d_model=256, d_inner=1024, iterations=200, rounds=5):
    """Rows `{name, ms_per_iteration, bytes_per_iteration, gb_per_s}` of the weight-streaming chain, float32 and
    bfloat16 weights (the products in float32 either way)."""
    import numpy as np
    import tensorflow as tf
    rng = np.random.default_rng(0)
    x = tf.constant(rng.standard_normal((rows_per_product, d_model)).astype(np.float32))

    def chain(dtype):
        ups = [tf.constant(0.03 * rng.standard_normal((d_model, d_inner)), dtype) for _ in range(matrices // 2)]
        downs = [tf.constant(0.03 * rng.standard_normal((d_inner, d_model)), dtype) for _ in range(matrices // 2)]

        def product(a, w):
            return tf.cast(tf.matmul(tf.cast(a, dtype), w), tf.float32)

        def body(i, h):
            for up, down in zip(ups, downs):
                h = h + 0.01 * product(tf.nn.relu(product(h, up)), down)
            return i + 1, h
        return tf.function(lambda h: tf.while_loop(lambda i, h: i < iterations, body, (0, h))[1], jit_compile=True)

    programs = {"float32 weights": (chain(tf.float32), (x,)), "bfloat16 weights": (chain(tf.bfloat16), (x,))}
    ms = _median_ms(programs, rounds)
    rows = []
    for name, t in ms.items():
        nbytes = matrices * d_model * d_inner * (4 if name.startswith("float32") else 2)
        per = t / iterations
        rows.append({"name": name, "ms_per_iteration": round(per, 4), "bytes_per_iteration": nbytes,
                     "gb_per_s": round(nbytes / 1e6 / per, 1)})
    return rows


def elementwise_rows(rows=1024, columns=3072, rounds=15):
    """Rows `{name, ms, ns_per_element}` of XLA-compiled elementwise programs on a `[rows, columns]` tensor."""
    import numpy as np
    import tensorflow as tf

    x32 = tf.constant(np.random.default_rng(0).standard_normal((rows, columns)).astype(np.float32))
    x16 = tf.cast(x32, tf.bfloat16)
    gelu = lambda x: tf.nn.gelu(x, approximate=True)  # noqa: E731
    compiled = lambda fn: tf.function(fn, jit_compile=True)  # noqa: E731
    programs = {
        "gelu, bfloat16 ops (tf.nn.gelu on bfloat16)": (compiled(gelu), (x16,)),
        "gelu in float32, rounded once to bfloat16": (compiled(lambda x: tf.cast(gelu(tf.cast(x, tf.float32)),
                                                                                 x.dtype)), (x16,)),
        "gelu, float32 in and out": (compiled(gelu), (x32,)),
        "one multiply, bfloat16": (compiled(lambda x: x * tf.constant(2, x.dtype)), (x16,)),
        "one multiply, float32": (compiled(lambda x: x * tf.constant(2, x.dtype)), (x32,)),
    }
    times = _median_ms(programs, rounds)
    return [{"name": name, "ms": round(t, 3), "ns_per_element": round(t * 1e6 / (rows * columns), 3)}
            for name, t in times.items()]


def report_lines(report) -> list:
    m = report["machine"]
    lines = [f"# XLA CPU dot probe ({m['cpu']}, {m['cores']} cores; {m['vector_extensions']})", "",
             f"Command: `{report['command']}`. Interleaved rounds, medians; TensorFlow {report['tensorflow']}.", ""]
    if "attention" in report:
        lines += ["Attention core's batched products (per call; the last row is the step's large-dot rate):", "",
                  "| product | ms | GFLOP/s |", "|---|---|---|"]
        lines += [f"| {r['name']} | {r['ms']} | {r['gflops']} |" for r in report["attention"]] + [""]
    if "weights" in report:
        lines += ["Weight-streaming chain (the generation loop's regime):", "",
                  "| weights | ms per iteration | MB of weights | GB/s |", "|---|---|---|---|"]
        lines += [f"| {r['name']} | {r['ms_per_iteration']} | {r['bytes_per_iteration'] / 1e6:.1f} | {r['gb_per_s']} |"
                  for r in report["weights"]] + [""]
    if "elementwise" in report:
        lines += ["Elementwise programs (XLA, one tensor of the feed-forward's activation shape):", "",
                  "| program | ms | ns per element |", "|---|---|---|"]
        lines += [f"| {r['name']} | {r['ms']} | {r['ns_per_element']} |" for r in report["elementwise"]] + [""]
    return lines


def main():
    """Runs the probes of the flags; returns the report."""
    unknown = set(FLAGS.probes) - set(PROBES)
    if unknown:
        raise UserError(f"--probes: unknown probe(s) {sorted(unknown)}; choose from {', '.join(PROBES)}")

    import tensorflow as tf

    from bench import host
    report = {"machine": host.describe(), "tensorflow": tf.__version__,
              "command": cli.command_line("bench.speed.dot_probe", FLAGS)}
    if "attention" in FLAGS.probes:
        sizes = dict(batch=2, heads=2, queries=8, keys=12, depth=4, d_model=16, d_inner=32) if FLAGS.tiny else {}
        report["attention"] = attention_rows(rounds=FLAGS.rounds, **sizes)
    if "weights" in FLAGS.probes:
        sizes = dict(matrices=4, d_model=16, d_inner=32, iterations=3, rounds=2) if FLAGS.tiny else {}
        report["weights"] = weights_rows(**sizes)
    if "elementwise" in FLAGS.probes:
        sizes = dict(rows=4, columns=8, rounds=1) if FLAGS.tiny else dict(rounds=FLAGS.rounds)
        report["elementwise"] = elementwise_rows(**sizes)
    lines = report_lines(report)
    print("\n".join(lines))
    if FLAGS.output:
        os.makedirs(os.path.dirname(FLAGS.output) or ".", exist_ok=True)
        with open(FLAGS.output + ".json", "w", encoding="utf-8") as f:
            json.dump(report, f, indent=2)
        with open(FLAGS.output + ".md", "w", encoding="utf-8") as f:
            f.write("\n".join(lines) + "\n")
    return report


if __name__ == "__main__":
    cli.run(FLAGS, define_flags, main)
