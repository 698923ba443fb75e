"""A code change's effect on the runners' own training step, in one process: the step built from the working tree
against the same step with some modules as they were at a git revision, timed call by call in turns.

A machine shared with other tenants moves a step's time by a fifth between minutes (README, benchmarks), more than
most changes are worth; two steps timed in turns in one process see the same minutes. Each of `--modules` (files
under xlnet_tf/) is loaded as it was at `--ref` and its functions, decorated functions (`tf.custom_gradient` ones)
and the methods of its classes are put in place of the working tree's while the reference step is built and traced
(callers look them up at call time; a class keeps its identity, only its methods change); then everything is
restored and the working tree's step is built.
Both are `ours.py`'s `TrainerStep` of `production_trainer` (what harness.py times), in the production variant or
(`--variant=bfloat16_fusible`) harness.py's `BFLOAT16_FUSIBLE`, which needs the process started with the fusible
TF_XLA_FLAGS (TensorFlow reads them when it loads).

    python -m bench.speed.step_ab --ref=fc495dc --modules=xlnet_tf/training/loop.py,xlnet_tf/layers/attention.py
    python -m bench.speed.step_ab --ref=fc495dc --modules=xlnet_tf/training/loop.py --kind=classifier
    TF_XLA_FLAGS="--tf_xla_auto_jit=2 --tf_xla_cpu_global_jit --tf_xla_ops_to_cluster=FUSIBLE" \
        python -m bench.speed.step_ab --ref=HEAD --modules=xlnet_tf/layers/attention.py --variant=bfloat16_fusible

Prints each side's median and fastest call and the ratio (reference median / working-tree median: > 1 means
the working tree is faster), and with --output writes <output>.json and .md naming the CPU.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import inspect
import os
import subprocess
import sys
import tempfile
import time
import types
from typing import Dict, Iterator, List

from absl import flags

from bench import cli
from bench.speed import step_profile
from xlnet_tf.errors import UserError

FLAGS = flags.FlagValues()  # defined by define_flags when the script runs, never at import
REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))  # the repository root


def define_flags(fv: flags.FlagValues = FLAGS):
    d = cli.Definer(fv)
    d.string("ref", "HEAD", "The git revision of the reference side.")
    d.list("modules", [], "Files under xlnet_tf/ taken from --ref on the reference side.")
    d.enum("kind", "plm", ["plm", "classifier", "tagger", "serving"], "Whose step: run/pretrain.py's (plm), the "
           "fine-tuning runners' (ours.py RUNNERS), or serving: harness.py's serving row, a classifier's SavedModel "
           "`from_ids` signature (exported and loaded again) in the variant's dtype (give --batch=32 for the row's).")
    step_profile.define_step_flags(fv)
    d.enum("variant", "production", list(step_profile.VARIANTS), "Which of the runners' steps: production "
           "(float32, XLA) or "
           "bfloat16_fusible (--mixed_precision=bfloat16 --nojit_compile --xla_clustering=fusible; start the process "
           "with the fusible TF_XLA_FLAGS).")
    d.integer("calls", 9, "Timed calls per side, in turns (after two warm-up calls each).")
    d.string("output", None, "Write <output>.md and <output>.json.")


def module_name(path: str) -> str:
    """`xlnet_tf/layers/attention.py` -> `xlnet_tf.layers.attention` (only files of the library)."""
    if not (path.startswith("xlnet_tf/") and path.endswith(".py")):
        raise UserError(f"--modules: {path!r} is not a file under xlnet_tf/ (e.g. xlnet_tf/training/loop.py)")
    return path[:-3].replace("/", ".")


def load_at(path: str, ref: str, work: str) -> types.ModuleType:
    """The module `path` as it was at git revision `ref`, loaded from a copy of that version under `work` (so that
    tracing and autograph read its own source)."""
    shown = subprocess.run(["git", "-C", REPO, "show", f"{ref}:{path}"], capture_output=True, text=True)
    if shown.returncode:
        raise UserError(f"--ref/--modules: git has no {path} at {ref!r}: {shown.stderr.strip()}")
    name = "step_ab_ref_" + module_name(path).replace(".", "_")
    file = os.path.join(work, name + ".py")
    with open(file, "w", encoding="utf-8") as f:
        f.write(shown.stdout)
    spec = importlib.util.spec_from_file_location(name, file)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses and pickling look a module up by name
    spec.loader.exec_module(module)
    return module


def _source(function) -> str:
    try:
        return inspect.getsource(function)
    except (OSError, TypeError):
        return ""


def _rebound(function, owner: type):
    """`function` (a method of the reference's class) with its zero-argument `super()` cell pointing at `owner`,
    the working tree's class it is put on."""
    if "__class__" not in function.__code__.co_freevars:
        return function
    cells = tuple(types.CellType(owner) if name == "__class__" else cell
                  for name, cell in zip(function.__code__.co_freevars, function.__closure__))
    rebound = types.FunctionType(function.__code__, function.__globals__, function.__name__, function.__defaults__,
                                 cells)
    rebound.__kwdefaults__ = function.__kwdefaults__
    return rebound


@contextlib.contextmanager
def patched(current: types.ModuleType, reference: types.ModuleType) -> Iterator[List[str]]:
    """Inside: `current`'s functions, and the methods of its classes, whose source differs from `reference`'s of
    the same name (defined in `reference` itself) replaced by those, and its decorated functions (`_made_here`) by
    `reference`'s, also where other project modules hold them under a name of their own (`xlnet_tf.serving.export`
    is `saved_model.export`); yields the names replaced. Restored on exit."""
    saved = []
    names = []
    swapped_in = {}  # id -> each reference object put in place

    def put(owner, name, value, shown=True):
        swapped_in[id(value)] = value
        saved.append((owner, name, owner.__dict__.get(name, _MISSING)))
        setattr(owner, name, value)
        if shown:
            names.append(f"{owner.__name__}.{name}")

    def put_everywhere(name, value):
        """`current.<name>` and every other project module's name for that same object (a package's
        `from .module import name` re-export would otherwise keep calling the working tree's)."""
        here = getattr(current, name)
        put(current, name, value)
        for module, alias, held in _project_names():
            if held is here and module is not current:
                put(module, alias, value, shown=False)

    try:
        for name, value in vars(reference).items():
            here = getattr(current, name, None)
            if isinstance(value, types.FunctionType) and value.__module__ == reference.__name__ and \
                    isinstance(here, types.FunctionType):
                if _source(value) != _source(here):
                    put_everywhere(name, value)
            elif isinstance(value, type) and value.__module__ == reference.__name__ and isinstance(here, type):
                for attr, member in vars(value).items():
                    if isinstance(member, types.FunctionType) and \
                            _source(member) != _source(here.__dict__.get(attr)):
                        put(here, attr, _rebound(member, here))
            elif _made_here(value, reference) and _made_here(here, current):
                put_everywhere(name, value)  # a decorated function: its source says nothing of what it wraps
        yield names
    finally:
        for owner, name, value in reversed(saved):
            if value is _MISSING:
                delattr(owner, name)
            else:
                setattr(owner, name, value)
        # a name bound to a reference object inside the context (a package's lazy export, `xlnet_tf.serving.export`
        # read for the first time by the reference side) would keep it: unbound, it resolves afresh when next read
        for module, alias, held in _project_names():
            if any(held is value for value in swapped_in.values()):  # (not .get(id(held)): None is held too)
                delattr(module, alias)


_MISSING = object()
_PROJECT_PACKAGES = ("xlnet_tf", "tfrecords", "run", "bench")


def _project_names() -> Iterator[tuple]:
    """`(module, name, value)` of every module-level name of the loaded project modules (a snapshot)."""
    for module in list(sys.modules.values()):
        if getattr(module, "__name__", "").startswith(_PROJECT_PACKAGES):
            yield from [(module, name, value) for name, value in list(vars(module).items())]


def _made_here(value, module: types.ModuleType) -> bool:
    """Whether `value` is a callable object made by `module`'s own code that is neither a plain function nor a class
    (a `tf.custom_gradient` or other decorated function): `patched` always swaps those, since the code they run (a
    closure, a wrapped function) is not theirs to compare."""
    return callable(value) and not isinstance(value, (type, types.FunctionType, types.ModuleType)) and \
        getattr(value, "__module__", None) == module.__name__


def check_something_replaced(path: str, ref: str, reference_file: str, current_file: str, names: List[str]):
    """UserError when `path` differs between `ref` and the working tree but `patched` replaced nothing of it: what
    differs is then something step_ab does not swap (module-level constants, objects made by other modules' code),
    and the A/B would time the working tree against itself."""
    if names:
        return
    with open(reference_file, encoding="utf-8") as a, open(current_file, encoding="utf-8") as b:
        if a.read() == b.read():
            return
    raise UserError(f"--modules: {path} differs from {ref} only in what step_ab does not swap (module-level "
                    "constants, objects made by other modules' code): A/B it through a module whose functions or "
                    "methods differ, or time two processes")


def variant_of_flags():
    """`--variant` as an ours.py Variant (`step_profile.variant_named`)."""
    return step_profile.variant_named(FLAGS.variant)


class ServingCall:
    """A classifier's SavedModel `from_ids` signature as harness.py's serving row calls it: the model (random
    weights, or `like`'s) in `policy`, exported by `serving.export`, loaded again, called on one batch of harness.py's
    inputs; `()` returns the logits (NumPy)."""

    def __init__(self, policy: str, batch: int, seq_len: int, n_layer: int, d_model: int, n_token: int,
                 spiece_model: str, like: "ServingCall" = None):
        import tensorflow as tf

        from bench.speed import harness, ours
        from xlnet_tf.serving import saved_model  # its `export` looked up at call time (what --modules swaps)

        config = ours.bench_config(n_layer, d_model, n_token=n_token)
        self.model = harness._our_model(config, "classifier", policy)
        data, _ = harness._inputs(config, batch, seq_len, 1)
        self.args = {k: tf.constant(data[k]) for k in ("input_ids", "segment_ids", "attention_mask")}
        self.model(dict(self.args))  # builds the weights
        if like is not None:
            self.model.set_weights(like.model.get_weights())
        self.path = saved_model.export(self.model, "classifier", spiece_model,
                                       tempfile.mkdtemp(prefix="step_ab_serving_"), 1, seq_len, text_pair=True)
        self.fn = tf.saved_model.load(self.path).signatures["from_ids"]
        self()
        self()

    def __call__(self):
        return self.fn(**self.args)["logits"].numpy()

    def largest_difference(self, other: "ServingCall") -> float:
        import numpy as np

        return float(np.abs(self().astype(np.float64) - other().astype(np.float64)).max())


def side_of_flags(variant, spiece_model=None, like=None):
    """One side of the A/B: the runners' step of --kind, or (--kind=serving) a `ServingCall` in `variant`'s dtype
    with `spiece_model` (and `like`'s weights when given)."""
    if FLAGS.kind != "serving":
        return step_profile.step_of_flags(FLAGS, FLAGS.kind, tempfile.mkdtemp(prefix="step_ab_"), variant)
    from xlnet_tf.training import loop as training

    return ServingCall(training.dtype_policy(variant.mixed_precision), FLAGS.batch, FLAGS.seq_len, FLAGS.n_layer,
                       FLAGS.d_model, FLAGS.n_token, spiece_model, like)


def main():
    import numpy as np

    from bench import host
    from bench.speed import harness

    variant = variant_of_flags()
    spiece_model = harness.test_corpus_spiece_model() if FLAGS.kind == "serving" else None  # one for both sides
    work = tempfile.mkdtemp(prefix="step_ab_src_")
    pairs = [(p, importlib.import_module(module_name(p)), load_at(p, FLAGS.ref, work)) for p in FLAGS.modules]
    with contextlib.ExitStack() as stack:
        replaced = []
        for path, current, ref in pairs:
            names = stack.enter_context(patched(current, ref))
            check_something_replaced(path, FLAGS.ref, ref.__file__, current.__file__, names)
            replaced += names
        reference = side_of_flags(variant, spiece_model)
    ours_step = side_of_flags(variant, spiece_model, like=reference)
    largest_difference = ours_step.largest_difference(reference) if FLAGS.kind == "serving" else None
    # one untimed call of each in turns first: the side built first is slow on its first call after the other's
    # build (measured: 223 against 3 ms at a tiny size, 2.8 against 1.4 s at 4 x 768), which favoured the working tree
    reference()
    ours_step()
    times: Dict[str, List[float]] = {"reference": [], "working_tree": []}
    for _ in range(FLAGS.calls):
        for side, step in (("reference", reference), ("working_tree", ours_step)):
            start = time.perf_counter()
            step()
            times[side].append(time.perf_counter() - start)
    median = {side: float(np.median(t)) * 1e3 for side, t in times.items()}
    ratio = median["reference"] / median["working_tree"]
    report = {"host": host.describe(), "command": cli.invocation("bench.speed.step_ab"), "ref": FLAGS.ref,
              "modules": FLAGS.modules, "replaced": replaced, "kind": FLAGS.kind,
              "variant": variant.name,
              "config": {k: FLAGS[k].value for k in ("n_layer", "d_model", "n_token", "batch", "seq_len", "mem_len",
                                                      "num_predict")},
              "calls_ms": {side: [round(t * 1e3, 1) for t in ts] for side, ts in times.items()},
              "median_ms": median, "ratio": ratio, "largest_logit_difference": largest_difference}
    text = "\n".join([
        f"# The runners' {FLAGS.kind} step ({FLAGS.variant}): working tree against "
        f"{', '.join(FLAGS.modules) or 'nothing'} at "
        f"{FLAGS.ref} ({report['host']['cpu']}, {report['host']['cores']} cores; {report['host']['vector_extensions']})",
        "",
        f"Command: `{report['command']}`. {FLAGS.calls} calls per side in turns after one untimed round, one process.", "",
        "| side | median ms | fastest ms |", "|---|---|---|",
        *(f"| {side} | {median[side]:.1f} | {min(times[side]) * 1e3:.1f} |" for side in times), "",
        f"Ratio (reference / working tree): **{ratio:.3f}**. Replaced on the reference side: "
        f"{', '.join(replaced) or 'nothing'}." + (
            "" if largest_difference is None else
            f" Largest difference of the two sides' logits (the same weights): {largest_difference:.4g}.")]) + "\n"
    step_profile.write_report(report, text, FLAGS.output)


if __name__ == "__main__":
    cli.run(FLAGS, define_flags, main)
