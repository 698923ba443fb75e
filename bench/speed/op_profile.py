"""Where a training step's time goes per TensorFlow op, for a step that runs as TensorFlow ops.

step_profile.py names the thunks of the production step, which XLA compiles whole. The bfloat16 fusible variant
(`--mixed_precision=bfloat16 --nojit_compile --xla_clustering=fusible`) runs as TensorFlow ops instead: oneDNN's
matmuls, XLA's auto-clusters (`_XlaRun`, their thunks on the intra-op threads), TensorFlow's own kernels and the
native ops (`xlnet_tf/layers/native/`). This builds the runners' step (step_profile.py's `step_of_flags`, in
`--variant`), records `--steps` steps with the TensorFlow profiler, and sums the events on TensorFlow's threads
(the executor's `tf_Compute` threads and the intra-op pool) per step: by op type (`_MklMatMul`, `_XlaRun`,
`XlnetTfAdamW`, `Sum`, ...) and by op name. Events nest (the executor's `Process` holds the ops it ran, an `_XlaRun`
its cluster's thunks), so types overlap and their sum is not the step: read a type's row against the step's wall
time x threads. It found, for example, a reduction that had left XLA's clusters and ran as TensorFlow's bfloat16
`Sum` (bench/speed/README.md, "Since: the gradient norm's sum of squares as one native op").

    TF_XLA_FLAGS="--tf_xla_auto_jit=2 --tf_xla_cpu_global_jit --tf_xla_ops_to_cluster=FUSIBLE" \\
        python -m bench.speed.op_profile --kind=tagger --variant=bfloat16_fusible --output=bench/speed/results/X

Timings on a busy machine are shares, not speeds: say so in the report (`--note`).
"""

from __future__ import annotations

import collections
import os
import shutil
import tempfile
import time
from typing import Dict, Iterable, Tuple

from absl import flags

from bench import cli
from bench.speed import step_profile

FLAGS = flags.FlagValues()  # defined by define_flags when the script runs, never at import

# the threads TensorFlow runs ops on: the executor's (inter-op) and the intra-op pool's
THREADS = ("tf_Compute", "Eigen")


def define_flags(fv: flags.FlagValues = FLAGS):
    step_profile.define_step_flags(fv)
    d = cli.Definer(fv)
    d.enum("kind", "tagger", ["plm", "classifier", "tagger"], "Whose step: run/pretrain.py's (plm), the fine-tuning "
           "classifier's or the tagger's.")
    d.enum("variant", "bfloat16_fusible", list(step_profile.VARIANTS), "The runners' step: production "
           "(float32, XLA: one `_XlaRun`; step_profile.py names its thunks) or bfloat16_fusible (start the process "
           "with the fusible TF_XLA_FLAGS).")
    d.integer("steps", 3, "Profiled steps (after five timed ones).")
    step_profile.define_report_flags(fv)


def op_type(event_name: str) -> str:
    """A profiler event's op type: `scope/name:Type` -> `Type`; a thunk or the runtime's own event as it is."""
    return event_name.rsplit(":", 1)[1] if ":" in event_name else event_name


def summarize(events: Iterable[Tuple[str, str, float]], steps: int, top: int = 30) -> dict:
    """`events`: `(thread, event name, milliseconds)` of `steps` profiled steps -> per step: `by_type` and `by_thread`
    (ms, largest first, events on `THREADS` only) and `top` (the longest op names with their type)."""
    by_type, by_name, by_thread = collections.Counter(), collections.Counter(), collections.Counter()
    for thread, name, ms in events:
        if not any(t in thread for t in THREADS):
            continue
        by_type[op_type(name)] += ms / steps
        by_name[name] += ms / steps
        by_thread[thread] += ms / steps
    return {"by_type": dict(by_type.most_common()), "by_thread": dict(by_thread.most_common()),
            "top": [{"name": n, "type": op_type(n), "ms": ms} for n, ms in by_name.most_common(top)]}


def markdown(report: dict) -> str:
    s, h = report["summary"], report["host"]
    wall = report["step_ms"]
    c = report["config"]
    lines = [f"# Where the {c['kind']} step's time goes per TensorFlow op ({c['variant']}; {h['cpu']}, "
             f"{h['cores']} cores; {h['vector_extensions']})", "",
             f"Command: `{report['command']}`. {report['note']}", "",
             f"Step wall time (five timed steps before the profile): {' / '.join(f'{t:.1f}' for t in wall)} ms. Per "
             "profiled step, summed over TensorFlow's threads; events nest (the executor's Process holds its ops, "
             "an _XlaRun its cluster's thunks), so the rows overlap.", "",
             "| op type | ms per step |", "|---|---|"]
    lines += [f"| {t} | {ms:.1f} |" for t, ms in s["by_type"].items() if ms >= 0.5]
    lines += ["", "| thread | ms per step |", "|---|---|"]
    lines += [f"| {t} | {ms:.1f} |" for t, ms in s["by_thread"].items()]
    lines += ["", "Longest ops:", "", "| op | type | ms |", "|---|---|---|"]
    lines += [f"| `{r['name'][-110:]}` | {r['type']} | {r['ms']:.2f} |" for r in s["top"]]
    return "\n".join(lines) + "\n"


def main():
    from bench import host

    variant = step_profile.variant_named(FLAGS.variant)
    work = tempfile.mkdtemp(prefix="op_profile_")
    step = step_profile.step_of_flags(FLAGS, FLAGS.kind, os.path.join(work, "model"), variant)
    wall = []
    for _ in range(5):
        start = time.perf_counter()
        step()
        wall.append((time.perf_counter() - start) * 1e3)
    xplane, _ = step_profile.record_calls(work, step, FLAGS.steps)
    report = {"host": host.describe(), "command": cli.invocation("bench.speed.op_profile"), "note": FLAGS.note,
              "step_ms": wall, "summary": summarize(step_profile.xplane_events(xplane), FLAGS.steps, FLAGS.top),
              "config": {**{k: FLAGS[k].value for k in ("n_layer", "d_model", "n_token", "batch", "seq_len", "mem_len",
                                                         "steps", "kind", "variant")},
                         "num_predict": step_profile.num_predict_of_flags(FLAGS)}}
    step_profile.write_report(report, markdown(report), FLAGS.output)
    shutil.rmtree(work)


if __name__ == "__main__":
    cli.run(FLAGS, define_flags, main)
