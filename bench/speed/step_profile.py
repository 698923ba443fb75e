"""Where the production training step's time goes, per XLA operation.

Builds the runners' own `training.Trainer` step (ours.py `TrainerStep`, the step harness.py times) at a
benchmark size, compiles it with XLA dumping its optimized HLO, then records `--steps` steps with the TensorFlow
profiler. XLA's CPU runtime runs the program as thunks (one per dot, fusion, reduce-window, ...) on the intra-op
threads, and the profiler names each one, so the report gives per step:

- the time of each kind of thunk (dots, fusions, reduce-windows, ...), summed over the threads (thunks with no
  dependency between them run at once, so the sum can exceed the step's wall time, and a thunk's time includes
  sharing the threads with the thunks beside it: time a suspect operation alone before blaming its kernel);
- the dots' FLOPs and the rate they ran at, and the dots slowest per FLOP;
- the thunks that took longest, with their HLO shapes.

    python -m bench.speed.step_profile --output=bench/speed/results/step_profile_cpu

Timings on a busy machine are shares, not speeds: say so in the report (`--note`).
"""

from __future__ import annotations

import collections
import glob
import json
import os
import re
import shutil
import tempfile
import time
from typing import Dict, List

from absl import flags

from bench import cli

FLAGS = flags.FlagValues()  # defined by define_flags when the script runs, never at import

# The runtime's own bookkeeping events on the intra-op threads (not operations of the program).
BOOKKEEPING = ("ThunkExecutor::Execute", "SlinkyThreadPool::Await")
_DOT = re.compile(r"%([\w.\-]+) = (\w+\[[\d,]*\])\S* dot\(%([\w.\-]+), %([\w.\-]+)\)(.*)")
_SHAPE = re.compile(r"%([\w.\-]+) = (\w+\[[\d,]*\])")
_INSTRUCTION = re.compile(r"%([\w.\-]+) = (\S+) ([\w\-]+)\(")


def _dims(shape: str) -> List[int]:
    """`f32[160,768]` -> [160, 768]."""
    inside = shape[shape.index("[") + 1:shape.index("]")]
    return [int(d) for d in inside.split(",") if d]


def kind_of(name: str, opcodes: Dict[str, str]) -> str:
    """A thunk's kind: the HLO opcode of the instruction it runs (`dot`, `fusion`, ...), with XLA's wrapped
    single-operation fusions (`wrapped_reduce-window.3`) named by their operation."""
    if name.startswith("wrapped_"):
        return re.sub(r"[.\d]+$", "", name[len("wrapped_"):])
    return opcodes.get(name, re.sub(r"[.\d]+$", "", name))


def dot_flops(hlo_text: str) -> Dict[str, int]:
    """{dot instruction: 2 x output elements x contracted size} for every dot of the optimized HLO module."""
    shapes = dict(_SHAPE.findall(hlo_text))
    out = {}
    for name, shape, lhs, _, rest in _DOT.findall(hlo_text):
        contracting = re.search(r"lhs_contracting_dims=\{([\d,]*)\}", rest)
        lhs_dims = _dims(shapes[lhs])
        k = 1
        for d in (contracting.group(1).split(",") if contracting and contracting.group(1) else []):
            k *= lhs_dims[int(d)]
        elements = 1
        for d in _dims(shape):
            elements *= d
        out[name] = 2 * elements * k
    return out


def summarize(thunk_ms: Dict[str, float], hlo_text: str, top: int = 25) -> dict:
    """Per-step thunk times (`thunk_ms`: name -> ms per step) against the optimized HLO -> the report's numbers:
    `total_ms`, `by_kind` (ms), `dots` (GFLOP, ms, GFLOP/s), `slowest_dots` (by rate, those over 1 ms), `top`
    (the longest thunks with their HLO line)."""
    opcodes = {name: opcode for name, _, opcode in _INSTRUCTION.findall(hlo_text)}
    lines = {m.group(1): m.group(0) for m in re.finditer(r"%([\w.\-]+) = [^\n]*", hlo_text)}
    by_kind = collections.Counter()
    for name, ms in thunk_ms.items():
        by_kind[kind_of(name, opcodes)] += ms
    flops = dot_flops(hlo_text)
    timed = {n: ms for n, ms in thunk_ms.items() if n in flops and ms > 0}
    dot_ms = sum(timed.values())
    dot_gflop = sum(flops[n] for n in timed) / 1e9
    rates = sorted((flops[n] / ms / 1e6, ms, n) for n, ms in timed.items() if ms >= 1.0)
    longest = sorted(thunk_ms.items(), key=lambda kv: -kv[1])[:top]
    return {
        "total_ms": sum(thunk_ms.values()),
        "by_kind": dict(by_kind.most_common()),
        "dots": {"gflop": dot_gflop, "ms": dot_ms, "gflop_per_s": dot_gflop / (dot_ms / 1e3) if dot_ms else 0.0},
        "slowest_dots": [{"name": n, "gflop_per_s": r, "ms": ms, "hlo": lines.get(n, "")[:200]}
                         for r, ms, n in rates[:10]],
        "top": [{"name": n, "ms": ms, "kind": kind_of(n, opcodes), "hlo": lines.get(n, "")[:200]}
                for n, ms in longest],
    }


def xplane_events(xplane_path: str):
    """`(thread, event name, ms)` of every event in a profiler XSpace."""
    try:
        from tsl.profiler.protobuf import xplane_pb2
    except ImportError:
        from tensorflow.tsl.profiler.protobuf import xplane_pb2

    space = xplane_pb2.XSpace()
    with open(xplane_path, "rb") as f:
        space.ParseFromString(f.read())
    for plane in space.planes:
        names = {k: v.name for k, v in plane.event_metadata.items()}
        for line in plane.lines:
            for event in line.events:
                yield line.name, names.get(event.metadata_id, "?"), event.duration_ps / 1e9


def thunk_times(xplane_path: str, steps: int) -> Dict[str, float]:
    """{thunk name: ms per step} from a profiler XSpace: the events on the intra-op (Eigen) threads, less the
    runtime's bookkeeping."""
    out = collections.Counter()
    for thread, name, ms in xplane_events(xplane_path):
        if "Eigen" in thread and name not in BOOKKEEPING and not name.startswith("end: "):
            out[name] += ms / steps
    return dict(out)


def markdown(report: dict) -> str:
    s, h = report["summary"], report["host"]
    lines = [f"# Where the production training step's time goes ({h['cpu']}, {h['cores']} cores; "
             f"{h['vector_extensions']})", "",
             f"Command: `{report['command']}`. {report['note']}", "",
             f"Step wall time: {' / '.join(f'{t:.2f}' for t in report['step_s'])} s (the profiled steps). Thunk time "
             f"per step, summed over the intra-op threads: {s['total_ms']:.0f} ms.", "",
             "| kind | ms per step | share |", "|---|---|---|"]
    for kind, ms in s["by_kind"].items():
        if ms >= 1:
            lines.append(f"| {kind} | {ms:.0f} | {ms / s['total_ms']:.1%} |")
    d = s["dots"]
    lines += ["", f"Dots: {d['gflop']:.1f} GFLOP per step in {d['ms']:.0f} ms = {d['gflop_per_s']:.1f} GFLOP/s.", "",
              "Dots slowest per FLOP (over 1 ms):", "", "| dot | GFLOP/s | ms | HLO |", "|---|---|---|---|"]
    lines += [f"| {r['name']} | {r['gflop_per_s']:.1f} | {r['ms']:.1f} | `{r['hlo'][:120]}` |" for r in s["slowest_dots"]]
    lines += ["", "Longest thunks:", "", "| thunk | kind | ms | HLO |", "|---|---|---|---|"]
    lines += [f"| {r['name']} | {r['kind']} | {r['ms']:.1f} | `{r['hlo'][:120]}` |" for r in s["top"]]
    return "\n".join(lines) + "\n"


def define_step_flags(fv: flags.FlagValues):
    """The size of the benchmarked Trainer step (harness.py's production row by default); also
    step_ab.py's."""
    d = cli.Definer(fv)
    d.integer("n_layer", 4, "Layers (the production benchmark row: 4 x 768).")
    d.integer("d_model", 768, "Model width.")
    d.integer("n_token", 32000, "Vocabulary.")
    d.integer("batch", 8, "Batch size.")
    d.integer("seq_len", 128, "Sequence length.")
    d.integer("mem_len", 64, "Memory length (pretraining).")
    d.integer("num_predict", 0, "Predicted tokens per sequence (0: harness.py's default_num_predict, "
                         "21 at 128).")


def define_flags(fv: flags.FlagValues = FLAGS):
    define_step_flags(fv)
    cli.Definer(fv).integer("steps", 3, "Profiled steps (after two warm-up steps).")
    define_report_flags(fv)


def define_report_flags(fv: flags.FlagValues):
    """The flags every thunk profile's report takes (also generation_profile.py's)."""
    d = cli.Definer(fv)
    d.string("output", None, "Write <output>.md and <output>.json.")
    d.string("note", "", "A sentence for the report (e.g. what else ran on the machine).")
    d.integer("top", 25, "Longest thunks listed.")


def dump_optimized_hlo(work: str) -> str:
    """Make XLA dump every module's HLO as text under `<work>/xla_dump` (set before TensorFlow compiles anything)
    and return that folder."""
    dump = os.path.join(work, "xla_dump")
    os.environ["XLA_FLAGS"] = f"{os.environ.get('XLA_FLAGS', '')} --xla_dump_to={dump} --xla_dump_hlo_as_text".strip()
    return dump


def record_calls(work: str, run, calls: int):
    """`run()` `calls` times under the TensorFlow profiler (trace under `<work>/profile`) -> `(the trace's XSpace
    path, wall seconds of each call)`."""
    import tensorflow as tf

    times = []
    tf.profiler.experimental.start(os.path.join(work, "profile"))
    for _ in range(calls):
        start = time.perf_counter()
        run()
        times.append(time.perf_counter() - start)
    tf.profiler.experimental.stop()
    return sorted(glob.glob(os.path.join(work, "profile", "plugins", "profile", "*", "*.xplane.pb")))[-1], times


def profile_calls(work: str, run, calls: int):
    """`record_calls`, its trace summed per thunk -> `(thunk ms per call (thunk_times), wall seconds of each
    call)`."""
    xplane, times = record_calls(work, run, calls)
    return thunk_times(xplane, calls), times


# the runners' steps a profile or an A/B can build (`variant_named`)
VARIANTS = ("production", "bfloat16_fusible")


def variant_named(name: str):
    """One of `VARIANTS` as an ours.py Variant; UserError for bfloat16_fusible in a process without the fusible
    TF_XLA_FLAGS (its clustering would silently be off)."""
    from bench.speed import harness, ours
    from xlnet_tf.errors import UserError
    from xlnet_tf.training import xla_clustering

    if name == "production":
        return ours.PRODUCTION
    if not xla_clustering.flags_present(os.environ.get("TF_XLA_FLAGS", "")):
        raise UserError("--variant=bfloat16_fusible: start the process with TF_XLA_FLAGS="
                        f"\"{xla_clustering.with_fusible_flags('')}\" (TensorFlow reads them when it loads)")
    return harness.BFLOAT16_FUSIBLE


def write_report(report: dict, text: str, output: str = None) -> None:
    """Print the markdown `text`; with `output` (the --output of `define_report_flags`), write it and `report` as
    <output>.md and <output>.json."""
    print(text)
    if output:
        with open(output + ".json", "w", encoding="utf-8") as f:
            json.dump(report, f, indent=1)
        with open(output + ".md", "w", encoding="utf-8") as f:
            f.write(text)


def num_predict_of_flags(fv: flags.FlagValues) -> int:
    """`define_step_flags`' --num_predict, or the harness's default at --seq_len."""
    from bench.speed import harness

    return fv.num_predict or harness.default_num_predict(fv.seq_len)


def step_of_flags(fv: flags.FlagValues, kind: str, model_dir: str, variant=None):
    """The runners' `kind` step (ours.py `TrainerStep` of `production_trainer`, in `variant`, production when None)
    at `define_step_flags`' size, on one batch of harness.py's features, called twice (traced, compiled, warm).
    Memories only for "plm"."""
    import tensorflow as tf

    from bench.speed import harness, ours

    variant = variant or ours.PRODUCTION

    mem_len = fv.mem_len if kind == "plm" else 0
    config = ours.bench_config(fv.n_layer, fv.d_model, mem_len=mem_len, n_token=fv.n_token)
    data, _ = harness.our_step_features(config, kind, fv.batch, fv.seq_len, num_predict_of_flags(fv), mem_len)
    trainer = ours.production_trainer(kind, config, fv.batch, fv.seq_len, model_dir, variant=variant)
    step = ours.TrainerStep(trainer, {k: tf.constant(v) for k, v in data.items()})
    step()
    step()
    return step


def main():
    from bench import host

    work = tempfile.mkdtemp(prefix="step_profile_")
    dump = dump_optimized_hlo(work)
    step = step_of_flags(FLAGS, "plm", os.path.join(work, "model"))
    thunk_ms, times = profile_calls(work, step, FLAGS.steps)
    hlo_files = glob.glob(os.path.join(dump, "*replica_step*cpu_after_optimizations.txt"))
    if len(hlo_files) != 1:
        raise RuntimeError(f"expected one optimized HLO module of the step under {dump}, found {len(hlo_files)}")
    with open(hlo_files[0], encoding="utf-8") as f:
        hlo_text = f.read()
    report = {"host": host.describe(), "command": cli.invocation("bench.speed.step_profile"), "note": FLAGS.note,
              "step_s": times, "summary": summarize(thunk_ms, hlo_text, FLAGS.top),
              "config": {**{k: FLAGS[k].value for k in ("n_layer", "d_model", "n_token", "batch", "seq_len", "mem_len",
                                                         "steps")}, "num_predict": num_predict_of_flags(FLAGS)}}
    write_report(report, markdown(report), FLAGS.output)
    shutil.rmtree(work)  # the dump holds a file per fused kernel (over a thousand)


if __name__ == "__main__":
    cli.run(FLAGS, define_flags, main)
