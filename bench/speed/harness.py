"""Benchmark harness: our XLNet vs Hugging Face's PyTorch XLNet, side by side in one process.

  python -m bench.speed.harness --suite=all|pretrain_step,finetune_step,tagging_step,train_loop,input_pipeline,serving,\
      builder,memory --output_dir=bench_output [--reference_variants=eager,compile]
  python -m bench.speed.harness --quick --output_dir=bench_quick      # the headline rows in minutes (`QUICK_SKIPS`)

Our training step is the production one: the `training.Trainer` that run/pretrain.py and the fine-tuning
lifecycle (run/lifecycle.py) build, from their CPU recipe flag files (ours.py `production_trainer`), and
the rows time its per-batch step function (`TrainerStep`), host loop excluded: `pretrain_step` run/pretrain.py's,
`finetune_step` a sequence classifier's (run/run_classifier.py, vs HF's XLNetForSequenceClassification),
`tagging_step` a token classifier's (run/run_tagger.py, 12 labels, vs HF's XLNetForTokenClassification); the
`train_loop` row times a real short run of run/pretrain.py on records, host loop and input pipeline included,
against HF's training loop over the same batches.

Every timed row carries the absolute figures of both implementations and `ratio` = reference time / our
time (> 1 = we are faster), measured in the same run at identical shapes (and, but for `train_loop`, weights);
A/B rows also carry `vs_production` = production time / variant time (< 1 = the production choice is faster; with
`--bfloat16_fusible` the row's lead, the bfloat16 fusible step, stands where production stands).
The reference is the strongest HF configuration this machine runs: each row times HF in every
`--reference_variants` variant (eager, and `torch.compile`), all with denormals flushed, and compares with the
fastest. The machine description (with its CPU's vector extensions, and whether bfloat16 is native) and its
measured dense matmul peak (float32 and bfloat16, the best of TensorFlow XLA, TensorFlow oneDNN, PyTorch and
NumPy) head the report; model FLOP utilisation (MFU) = achieved training FLOP/s / that float32 peak. Writes
`report.json` and `report.md`. Timings are medians after warm-up; run on a quiet machine (concurrent load
changes them up to 2x, and far more for PyTorch's thread pool on an oversubscribed CPU).
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import tempfile
import time

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))  # the repository root
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
from absl import flags  # noqa: E402

from bench import cli, host  # noqa: E402
from bench.host import describe  # noqa: E402
from bench.speed.ours import PRODUCTION, TrainerStep, Variant, bench_config, production_trainer  # noqa: E402,F401
from bench.speed.peak_rss import flush_denormals, hf_train_step, inputs, torch_inputs  # noqa: E402 (no TF, torch)
from tfrecords.sets.brown_pos import UNIVERSAL_TAGS  # noqa: E402
from xlnet_tf.errors import UserError  # noqa: E402

FLAGS = flags.FlagValues()  # defined by define_flags when the harness runs, never at import

tf.get_logger().setLevel("ERROR")  # each A/B variant traces its own functions on purpose

SUITES = ("pretrain_step", "finetune_step", "tagging_step", "train_loop", "input_pipeline", "serving", "builder",
          "memory")
STEP_SUITES = {"plm": "pretrain_step", "classifier": "finetune_step", "tagger": "tagging_step"}  # step_rows' kinds
REFERENCE_VARIANTS = ("eager", "compile", "eager_bf16", "compile_bf16")  # how HF runs; a row's reference is the
# fastest that worked and kept HF's own accuracy (`bfloat16_accuracy`)
BF16_SUFFIX = "_bf16"  # torch.autocast("cpu", dtype=torch.bfloat16) around the step: what a PyTorch user on a CPU
# with bfloat16 arithmetic reaches for first (the matmuls at the bfloat16 rate, reductions in float32)
AUTOCAST_NOTE = ("torch.autocast('cpu', dtype=torch.bfloat16) around the whole step (forward, loss and backward; "
                 "the optimizer's update in float32 master weights), eager or under torch.compile as its float32 "
                 "twin; timed only on a CPU with bfloat16 arithmetic (AVX-512 BF16 or AMX)")
BF16_LOSS_TOLERANCE = 0.01  # a bfloat16 variant stands as the reference only if its loss is within 1% of float32's
COMPILE_NOTE = ("torch.compile (inductor) of the whole training step, which dynamo splits at backward() and at "
                "the optimizer's own graph breaks into three compiled graphs: forward and loss (its backward "
                "AOT-compiled), global-norm clipping, and the AdamW update over all parameters; serving compiles "
                "the model. Each row compiles afresh for its static shapes; the warm-up calls, compilation "
                "included, are not timed")


def _ab(name: str, **changes) -> Variant:
    return dataclasses.replace(PRODUCTION, name=f"A/B {name}", **changes)


# the A/B variants every step row times (the same Variant objects in each list)
NO_XLA = _ab("no XLA (jit_compile=False)", jit=False)
UNFUSED_ADAMW = _ab("AdamW outside the XLA cluster (the multi-replica path)", fused_step=False)
BFLOAT16 = _ab("mixed_bfloat16", mixed_precision="bfloat16")
BFLOAT16_ONEDNN = _ab("mixed_bfloat16 without XLA (oneDNN's bfloat16 kernels)", mixed_precision="bfloat16", jit=False)
# --bfloat16_fusible's lead variant (timed against HF in each step row, production then an A/B of it): the
# runners' `--mixed_precision=bfloat16 --nojit_compile --xla_clustering=fusible`
BFLOAT16_FUSIBLE = Variant("mixed_bfloat16, --xla_clustering=fusible (oneDNN's bfloat16 matmuls, XLA clusters of the "
                           "fusible ops, the clipped AdamW update as one XLA program)", jit=False,
                           mixed_precision="bfloat16", xla_clustering="fusible")
PLM_VARIANTS = [
    PRODUCTION,
    NO_XLA,
    _ab("query stream over full length (original formulation)", query_stream="full"),
    _ab("positional projection per example (reference formulation)", attention="positional projection per example"),
    _ab("fused key/value projection matmul", attention="fused key/value projection"),
    _ab("keys and values projected over [mems; content] (reference formulation)",
        attention="keys and values over [mems; content]"),
    UNFUSED_ADAMW,
    BFLOAT16,
    BFLOAT16_ONEDNN,
]
FINETUNE_VARIANTS = [PRODUCTION, NO_XLA,
                     _ab("last layer over every row (reference formulation)", summary_rows_only=False),
                     UNFUSED_ADAMW, BFLOAT16, BFLOAT16_ONEDNN]
TAGGING_VARIANTS = [PRODUCTION, NO_XLA, UNFUSED_ADAMW, BFLOAT16, BFLOAT16_ONEDNN]
# tagging_step: the universal part-of-speech tags (the transfer study's transfer_pos_brown.flags), and the pieces per
# word of its windows (P(1), P(2), P(3) pieces: 1.4 a word, so about 70% of positions carry a label)
TAGGING_LABELS = len(UNIVERSAL_TAGS)  # ours.py's tagger manifest: the same tags
PIECES_PER_WORD = (0.7, 0.2, 0.1)
WORK_DIR = None  # main's scratch folder (the benchmarked Trainers' model_dirs, records), removed at the end


def _scratch(prefix: str) -> str:
    return tempfile.mkdtemp(prefix=prefix, dir=WORK_DIR)


def test_corpus_spiece_model() -> str:
    """A small SentencePiece model of the repository's test corpus (as tests/data_fixtures.tiny_spm), trained into a
    scratch folder; its path."""
    from tfrecords import spm
    from tfrecords.readers import corpus

    return spm.train_spm(corpus.expand_globs(os.path.join(REPO, "tests", "data", "corpus", "*.txt")),
                         os.path.join(_scratch("xlnet_bench_spm_"), "sp"), vocab_size=1000)


def without_emulated_bfloat16(variants, native_bfloat16: bool):
    """`variants` less the mixed_bfloat16 ones where the CPU has no bfloat16 arithmetic (they would time an
    emulation)."""
    return [v for v in variants if native_bfloat16 or v.mixed_precision != "bfloat16"]


def median_ms(fn, repeats: int, warmup: int = 2) -> float:
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return 1000.0 * float(np.median(times))


def _torch():
    """PyTorch with denormals flushed. Imported on first use, not at the top: peak_rss.py's `ours`
    process imports this module and must not load PyTorch. Every use here goes through this, so the flush
    precedes PyTorch's thread pool (see `flush_denormals`)."""
    flush_denormals()
    import torch

    return torch


def machine() -> dict:
    """The report's head: the host (bench/host.py) and both frameworks."""
    torch = _torch()
    import transformers

    return {**host.platform_description(), "tensorflow": tf.__version__, "torch": torch.__version__,
            "transformers": transformers.__version__, "torch_threads": torch.get_num_threads(),
            "gpus": [d.name for d in tf.config.list_physical_devices("GPU")]}


PEAK_BACKENDS = {"float32": ("tf_xla", "tf_onednn", "torch", "numpy"),
                 "bfloat16": ("tf_xla", "tf_onednn", "torch")}  # NumPy has no bfloat16 matmul


def _matmul(backend: str, dtype: str, n: int):
    """A no-argument function multiplying an n x n matrix by itself with `backend`, result materialised (TF's
    copied to NumPy, n^2 against the n^3 of the product)."""
    if backend in ("tf_xla", "tf_onednn"):
        a = tf.cast(tf.random.normal([n, n], dtype=tf.float32), dtype)
        f = tf.function(lambda x: tf.matmul(x, x), jit_compile=backend == "tf_xla")
        return lambda: f(a).numpy()
    if backend == "torch":
        torch = _torch()
        torch.set_num_threads(os.cpu_count())  # all threads, as the training steps
        t = torch.randn(n, n).to(getattr(torch, dtype))
        return lambda: torch.matmul(t, t)
    a = np.random.RandomState(0).randn(n, n).astype(dtype)
    return lambda: np.matmul(a, a)


def matmul_peak(dtype: str, sizes=(1024, 2048, 4096), repeats: int = 5) -> dict:
    """Dense square matmul GFLOP/s per backend (`PEAK_BACKENDS`) and size, under `backends`; `best` (the highest
    of all, from `best_backend` at `best_n`) is the denominator of MFU. A single library's figure understates
    what the machine does (oneDNN beat XLA by up to 2x for bfloat16 on one machine), and an understated peak
    overstates MFU."""
    backends = {}
    for backend in PEAK_BACKENDS[dtype]:
        backends[backend] = {}
        for n in sizes:
            ms = median_ms(_matmul(backend, dtype, n), repeats)
            backends[backend][str(n)] = round(2 * n ** 3 / (ms / 1000) / 1e9, 1)
    best_backend, best_n = max(((b, n) for b in backends for n in backends[b]), key=lambda k: backends[k[0]][k[1]])
    return {"backends": backends, "best": backends[best_backend][best_n], "best_backend": best_backend,
            "best_n": int(best_n)}


def train_flops(config, batch: int, seq_len: int, num_predict: int = 0, mlen: int = 0) -> float:
    """Model FLOPs of one forward+backward (3x forward) step: projections, attention scores and values
    over `mlen + seq_len` keys, feed-forward, positional projection, LM head over the predicted tokens."""
    d, h, dh, di, n = config.d_model, config.n_head, config.d_head, config.d_inner, config.n_layer
    klen, tokens = mlen + seq_len, batch * seq_len
    per_layer = 2 * tokens * d * h * dh * 2 + 2 * batch * klen * d * h * dh * 2 + 2 * tokens * d * di * 2
    per_layer += 2 * (klen + seq_len) * d * h * dh  # positional projection (once per direction)
    per_layer += 2 * 2 * batch * h * seq_len * (klen + seq_len) * dh  # ac + bd
    per_layer += 2 * batch * h * seq_len * klen * dh  # prob @ v
    if num_predict:
        q_tokens = batch * num_predict
        per_layer += 2 * q_tokens * d * h * dh * 2 + 2 * q_tokens * d * di * 2
        per_layer += 3 * 2 * batch * h * num_predict * (klen + seq_len) * dh
    forward = n * per_layer + (2 * batch * num_predict * d * config.n_token if num_predict else 0)
    return 3.0 * forward


def _hf_model(config, kind: str):
    import transformers

    cfg = transformers.XLNetConfig(**config.to_hf_dict())
    cfg.use_mems_train = bool(config.mem_len)
    if kind == "plm":
        return transformers.XLNetLMHeadModel(cfg)
    if kind == "tagger":
        cfg.num_labels = TAGGING_LABELS
        return transformers.XLNetForTokenClassification(cfg)
    cfg.num_labels = 2
    return transformers.XLNetForSequenceClassification(cfg)


def _our_model(config, kind: str, policy: str = "float32"):
    from xlnet_tf.models import XLNetClassifier, XLNetPretrainer

    if kind == "plm":
        return XLNetPretrainer(config, dtype=policy)
    return XLNetClassifier(config, num_labels=2, task_name="hf", dtype=policy)


def _inputs(config, batch, seq_len, num_predict, mlen=0):
    return inputs(config.n_token, config.n_layer, config.d_model, batch, seq_len, num_predict, mlen)


def tagging_inputs(n_token: int, batch: int, seq_len: int, num_labels: int = TAGGING_LABELS, seed: int = 0) -> dict:
    """A batch of tagging windows (NumPy) as the runner's reader yields them (tfrecords/tagging_data.py
    `tagging_dataset`: dtypes, shapes, the layout of xlnet_tf/text/tagging.py `pack_window`): each window full of
    random words of 1, 2 or 3 pieces (`PIECES_PER_WORD`), then `<sep> <cls>`; each word's label (uniform over
    `num_labels`) on its first piece, `IGNORE_LABEL` (-100) on its other pieces and on the specials: about 70%
    of the positions labelled."""
    from xlnet_tf.text import tagging

    rng = np.random.RandomState(seed)
    windows = []
    for _ in range(batch):
        pieces, words, labels = [], [], []
        while len(pieces) < seq_len - 2:
            n = 1 + rng.choice(len(PIECES_PER_WORD), p=PIECES_PER_WORD)
            words += [words[-1] + 1 if words else 0] * n
            pieces += list(rng.randint(0, n_token, n))
            labels += [rng.randint(num_labels)] + [tagging.IGNORE_LABEL] * (n - 1)
        n = seq_len - 2  # the last word may be cut: a window boundary
        windows.append(tagging.pack_window(pieces[:n], words[:n], labels[:n], [1] * n, seq_len))
    data = {k: np.stack([w[k] for w in windows]).astype(np.float32 if k == "attention_mask" else np.int32)
            for k in tagging.FEATURE_NAMES}
    data.update(example_index=np.arange(batch, dtype=np.int32), window_index=np.zeros(batch, np.int32),
                is_real_example=np.ones(batch, np.float32))
    return data


def torch_tagging_inputs(data: dict) -> dict:
    """HF keyword arguments of `tagging_inputs`: labels -100 (PyTorch's ignore index) where ours ignores."""
    torch = _torch()
    return {"input_ids": torch.tensor(data["input_ids"]).long(),
            "token_type_ids": torch.tensor(data["segment_ids"]).long(),
            "attention_mask": torch.tensor(data["attention_mask"]),
            "labels": torch.tensor(data["label_ids"]).long()}


def default_num_predict(seq_len: int) -> int:
    """Targets per sequence when --num_predict is 0: 85/512 of the sequence, the original recipe's ratio (21 at
    128)."""
    return max(1, round(85 * seq_len / 512))


def our_step_features(config, kind: str, batch: int, seq_len: int, num_predict: int, mlen: int):
    """One training batch of `kind` (`STEP_SUITES`) as our step reads it (NumPy), and the memories HF gets
    (None for the taggers' windows)."""
    if kind == "tagger":
        return tagging_inputs(config.n_token, batch, seq_len), None
    return _inputs(config, batch, seq_len, num_predict, mlen)


def step_inputs(config, kind: str, batch: int, seq_len: int, num_predict: int, mlen: int):
    """One training batch of `kind` (`STEP_SUITES`): our features (NumPy) and HF's keyword arguments (PyTorch),
    the same tokens and labels."""
    data, mems = our_step_features(config, kind, batch, seq_len, num_predict, mlen)
    return data, (torch_tagging_inputs(data) if kind == "tagger" else torch_inputs(data, mems, kind))


def _compiled_graphs() -> int:
    """How many graphs torch.compile has compiled in this process so far (0 without PyTorch loaded, or where
    this private counter is gone: warm-up then takes its minimum of calls)."""
    torch = sys.modules.get("torch")
    try:
        return int(torch._dynamo.utils.counters["stats"]["unique_graphs"]) if torch else 0
    except Exception:  # noqa: BLE001 - a private counter, best effort
        return 0


def _warm_up(fn, least: int = 2, most: int = 10) -> float:
    """Calls `fn` until compilation is over (at least `least` times, then on until a call compiles no new
    graph: torch.compile compiles on the first call and recompiles on the second once AdamW has its state);
    returns the seconds spent. For an eager function this is `median_ms`'s usual 2 warm-up calls."""
    start = time.perf_counter()
    for i in range(most):
        before = _compiled_graphs()
        fn()
        if i + 1 >= least and _compiled_graphs() == before:
            break
    return time.perf_counter() - start


def _reason(error: Exception) -> str:
    """One table-safe line saying why a reference variant failed."""
    first = (str(error).strip().splitlines() or [""])[0]
    return f"{type(error).__name__}: {first}".replace("|", "/")[:300]


def interleaved_ms(fns: dict, repeats: int) -> dict:
    """Median ms of each (warmed-up) no-argument function, timed call by call in turns (the order rotating
    each round) so that drifting load on a shared machine falls on all of them alike; a ratio of two of
    these is far steadier than one of two medians taken minutes apart."""
    names = list(fns)
    times = {name: [] for name in names}
    for r in range(repeats):
        for name in names[r % len(names):] + names[:r % len(names)]:
            start = time.perf_counter()
            fns[name]()
            times[name].append(time.perf_counter() - start)
    return {name: 1000.0 * float(np.median(t)) for name, t in times.items()}


def warm_reference(builders: dict):
    """Builds and warms up each reference variant (name -> a function building the callable to time; built
    here, so that a torch.compile failure, which surfaces on the first call, is caught). Returns
    `(fns, failures, compile_s)`: the callables that worked, name -> reason for those that did not (e.g. no
    C++ compiler for inductor), and the warm-up wall time of the compiled ones, compilation included."""
    fns, failures, compile_s = {}, {}, {}
    for name, build in builders.items():
        try:
            fn = build()
            warm = _warm_up(fn)
        except Exception as error:  # noqa: BLE001 - the row keeps the variants that worked
            failures[name] = _reason(error)
            print(f"reference variant {name} failed: {failures[name]}", flush=True)
            _reset_compiled()
            continue
        fns[name] = fn
        if "compile" in name:
            compile_s[name] = round(warm, 1)
    if not fns:
        raise RuntimeError(f"no reference variant ran: {failures}")
    return fns, failures, compile_s


def reference_fields(times: dict, failures: dict, compile_s: dict):
    """The row fields of the reference and the fastest's unrounded ms: `reference_variants_ms` (name ->
    median ms), `reference_ms` and `reference_variant` (the fastest: the peer at its strongest on this
    machine), and when there are any, `reference_failures` and `reference_compile_s`."""
    fastest = min(times, key=times.get)
    fields = {"reference_ms": round(times[fastest], 1), "reference_variant": fastest,
              "reference_variants_ms": {k: round(v, 1) for k, v in times.items()}}
    if failures:
        fields["reference_failures"] = failures
    if compile_s:
        fields["reference_compile_s"] = compile_s
    return fields, times[fastest]


def time_reference(builders: dict, repeats: int, ours=None):
    """Times each reference variant (see `warm_reference`), and with `ours` (a warmed-up callable) that too,
    all interleaved (`interleaved_ms`). Returns the row fields (`reference_fields`), the fastest's unrounded
    ms, and ours' ms (None without `ours`). Raises only if no variant ran."""
    fns, failures, compile_s = warm_reference(builders)
    times = interleaved_ms({**fns, **({"ours": ours} if ours else {})}, repeats)
    ours_ms = times.pop("ours", None)
    fields, fastest_ms = reference_fields(times, failures, compile_s)
    return fields, fastest_ms, ours_ms


def _reset_compiled():
    """Drops torch.compile's caches: each row compiles afresh for its static shapes, and never meets dynamo's
    recompilation limit (past it, dynamo silently runs eager) or its automatic dynamic shapes."""
    torch = sys.modules.get("torch")
    if torch is not None:
        torch._dynamo.reset()


def default_reference_variants(native_bfloat16: bool) -> tuple:
    """Every `REFERENCE_VARIANTS` name where the CPU multiplies bfloat16 natively, else the float32 ones (an
    emulated bfloat16 autocast would time the emulation)."""
    return tuple(n for n in REFERENCE_VARIANTS if native_bfloat16 or not n.endswith(BF16_SUFFIX))


def autocast(fn):
    """`fn` run under `torch.autocast("cpu", dtype=torch.bfloat16)` (`AUTOCAST_NOTE`)."""
    torch = _torch()

    def run(*args):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            return fn(*args)
    return run


def _variant_builders(make, names) -> dict:
    """`hf_<name>` -> builder for each name: `make(compiled)` (the callable, eager or with torch.compile applied
    where the float32 variant applies it), and under bfloat16 autocast for `..._bf16` (the autocast state is
    set around the call, as a user writes it; torch.compile traces under it)."""
    def build(name):
        def builder():
            if name.removesuffix(BF16_SUFFIX) == "compile":
                _reset_compiled()
            fn = make(name.removesuffix(BF16_SUFFIX) == "compile")
            return autocast(fn) if name.endswith(BF16_SUFFIX) else fn
        return builder

    return {f"hf_{n}": build(n) for n in names}


def hf_step_variants(hf, pt, names) -> dict:
    """Builders of HF's training step (peak_rss.py hf_train_step) per `REFERENCE_VARIANTS` name: `eager`,
    `compile`, the whole step under torch.compile (`COMPILE_NOTE`), and both under bfloat16 autocast
    (`AUTOCAST_NOTE`). The variants share the model."""
    torch = _torch()

    def make(compiled):
        step = hf_train_step(hf, pt)
        return torch.compile(step) if compiled else step

    return _variant_builders(make, names)


def float32_and_bfloat16(hf, pt, read):
    """`read(outputs)` of HF's forward on `pt` in float32 and under bfloat16 autocast: eval mode (no dropout draw
    between the two), no gradients, the model's mode restored."""
    torch = _torch()
    training = hf.training
    hf.eval()
    with torch.no_grad():
        full = read(hf(**pt))
        with torch.autocast("cpu", dtype=torch.bfloat16):
            half = read(hf(**pt))
    hf.train(training)
    return full, half


def bfloat16_accuracy(hf, pt, names) -> dict:
    """HF's loss on the row's batch in float32 and under bfloat16 autocast (forward only, no update), and
    `accepted`: whether the bfloat16 variants keep HF's own accuracy (relative loss difference within
    `BF16_LOSS_TOLERANCE`); {} when no bfloat16 variant is timed."""
    if not any(n.endswith(BF16_SUFFIX) for n in names):
        return {}
    full, half = float32_and_bfloat16(hf, pt, lambda out: float(out.loss))
    relative = abs(half - full) / max(abs(full), 1e-12)
    return {"loss_float32": round(full, 5), "loss_bfloat16": round(half, 5), "relative": round(relative, 5),
            "accepted": relative <= BF16_LOSS_TOLERANCE}


def bfloat16_logits(hf, pt, names) -> dict:
    """HF's inference logits under bfloat16 autocast against float32 on the row's batch: the relative L2
    difference and the share of examples whose top class agrees (random weights: no ties); {} when no
    bfloat16 variant is timed. Reported, not used to drop the variant (inference has no loss to hold)."""
    if not any(n.endswith(BF16_SUFFIX) for n in names):
        return {}
    full, half = float32_and_bfloat16(hf, pt, lambda out: out.logits.float().numpy())
    return {"logits_relative_l2": round(float(np.linalg.norm(half - full) / max(np.linalg.norm(full), 1e-12)), 5),
            "top1_agreement": round(float(np.mean(half.argmax(-1) == full.argmax(-1))), 4)}


def accepted_variants(names, accuracy: dict) -> tuple:
    """`names` less the bfloat16 ones when `accuracy` (bfloat16_accuracy) did not accept them."""
    if not accuracy or accuracy["accepted"]:
        return tuple(names)
    return tuple(n for n in names if not n.endswith(BF16_SUFFIX))


def hf_inference_variants(hf, pt, names) -> dict:
    """Builders of HF inference (logits under no_grad, eval mode, returned as float32) per `REFERENCE_VARIANTS`
    name: `eager`, `compile` (the forward under torch.compile) and both under bfloat16 autocast."""
    torch = _torch()
    hf.eval()

    def make(compiled):
        model = torch.compile(hf) if compiled else hf

        def run():
            with torch.no_grad():
                return model(**pt).logits.float().numpy()
        return run

    return _variant_builders(make, names)


def step_rows(kind: str, config, batch: int, seq_len: int, num_predict: int, mlen: int, repeats: int,
              peak: float, variants, breakdown: bool = True, reference_variants=REFERENCE_VARIANTS):
    """Training steps (forward + backward + clipping + AdamW) of ours (each variant: the production Trainer's
    per-batch step, `TrainerStep`) and HF (each of `reference_variants`; the fastest is the reference), same
    shapes and weights (HF reads fixed memories; ours carries the Trainer's own, of the same shape). The first
    variant is the production path, timed interleaved with HF's variants (`interleaved_ms`); with `breakdown`
    its step is split into forward and the rest. Each A/B variant is timed interleaved with the production
    step: its `vs_production` is that pair's ratio, and its `ratio` the production ratio times it."""
    from bench.speed import variants as attention_variants

    torch = _torch()
    torch.set_num_threads(os.cpu_count())
    hf = _hf_model(config, kind)
    data, pt = step_inputs(config, kind, batch, seq_len, num_predict, mlen)
    weights = {k: v.detach().numpy().copy() for k, v in hf.state_dict().items()}
    feats = {k: tf.constant(v) for k, v in data.items()}
    production, *others = variants
    with attention_variants.VARIANTS[production.attention]():
        step, forward = _build_variant(config, kind, production, weights, feats, batch, seq_len)
    accuracy = bfloat16_accuracy(hf, pt, reference_variants)
    names = accepted_variants(reference_variants, accuracy)
    reference, hf_ms, ms = time_reference(hf_step_variants(hf, pt, names), repeats, ours=step)
    if accuracy:
        reference["bfloat16_accuracy"] = accuracy
    _reset_compiled()
    del hf
    flops = train_flops(config, batch, seq_len, num_predict if kind == "plm" else 0, mlen)
    labels = {}
    if kind == "tagger":
        labels = {"num_labels": TAGGING_LABELS, "labelled_fraction": round(float((data["label_ids"] >= 0).mean()), 3)}

    def row(variant, variant_ms, ratio):
        return {"suite": STEP_SUITES[kind], "variant": variant.name,
                "batch": batch, "seq_len": seq_len, "mem_len": mlen,
                "num_predict": num_predict if kind == "plm" else 0, "n_layer": config.n_layer,
                "d_model": config.d_model, **labels, "ours_ms": round(variant_ms, 1), **reference,
                "ratio": round(ratio, 3), "tokens_per_s": round(batch * seq_len / (variant_ms / 1000), 1),
                "mfu_fp32": round(flops / (variant_ms / 1000) / 1e9 / peak, 3)}

    first = row(production, ms, hf_ms / ms)
    if breakdown:
        forward_ms = median_ms(forward, repeats)
        first["breakdown_ms"] = {"forward": round(forward_ms, 1), "backward_and_update": round(ms - forward_ms, 1)}
    rows = [first]
    print(json.dumps(first), flush=True)
    for v in others:
        with attention_variants.VARIANTS[v.attention]():
            variant_step, _ = _build_variant(config, kind, v, weights, feats, batch, seq_len)
        pair = interleaved_ms({"production": step, "variant": variant_step}, repeats)
        del variant_step
        _release()
        vs_production = pair["production"] / pair["variant"]
        rows.append({**row(v, pair["variant"], hf_ms / ms * vs_production), "vs_production": round(vs_production, 3)})
        print(json.dumps(rows[-1]), flush=True)
    _release()
    return rows


def _build_variant(config, kind, variant, weights, feats, batch, seq_len):
    """One variant's production Trainer (ours.py `production_trainer`, HF's `weights`) and its per-batch
    step on `feats` (`TrainerStep`, warmed up: traced and compiled here, inside the caller's attention-variant
    context), and the step's forward pass (traced on its first call, so used only for the production variant,
    whose context is the plain one), as no-argument callables returning NumPy."""
    trainer = production_trainer(kind, config, batch, seq_len, _scratch("xlnet_bench_trainer_"), variant, weights)
    step = TrainerStep(trainer, feats)
    _warm_up(step)
    return step, step.forward


def _release():
    """Frees the models, optimizers and compiled functions of a finished measurement (a full run would
    otherwise accumulate ~20 GB)."""
    import gc

    import keras

    keras.backend.clear_session()
    gc.collect()


def serving_rows(config, batch: int, seq_len: int, repeats: int, spiece_model: str,
                 reference_variants=REFERENCE_VARIANTS, policy: str = "float32"):
    """SavedModel `from_ids` (fresh load) of a model in the Keras dtype `policy` vs HF PyTorch inference (no_grad;
    each of `reference_variants`, the fastest is the reference), batch `batch`."""
    from xlnet_tf import checkpoints, serving

    _torch().set_num_threads(os.cpu_count())
    hf = _hf_model(config, "classifier")
    hf.eval()
    ours = _our_model(config, "classifier", policy)
    checkpoints.load_hf_weights(ours, {k: v.detach().numpy() for k, v in hf.state_dict().items()},
                                require_heads=True)
    data, _ = _inputs(config, batch, seq_len, 1)
    with tempfile.TemporaryDirectory() as tmp:
        path = serving.export(ours, "classifier", spiece_model, tmp, 1, seq_len, text_pair=True)
        fn = tf.saved_model.load(path).signatures["from_ids"]
    args = {k: tf.constant(data[k]) for k in ("input_ids", "segment_ids", "attention_mask")}
    served = lambda: fn(**args)["logits"].numpy()  # noqa: E731
    _warm_up(served)
    pt = torch_inputs(data, None, "classifier")
    pt.pop("labels")
    accuracy = bfloat16_logits(hf, pt, reference_variants)
    reference, hf_ms, ms = time_reference(hf_inference_variants(hf, pt, reference_variants), repeats, ours=served)
    if accuracy:
        reference["bfloat16_accuracy"] = accuracy
    _reset_compiled()
    row = {"suite": "serving", "variant": f"SavedModel from_ids ({policy}) vs HF inference (no_grad)", "batch": batch,
           "seq_len": seq_len, "n_layer": config.n_layer, "d_model": config.d_model, "ours_ms": round(ms, 1),
           **reference, "ratio": round(hf_ms / ms, 3), "examples_per_s": round(batch / (ms / 1000), 1)}
    print(json.dumps(row), flush=True)
    return [row]


def input_pipeline_rows(config, batch: int, seq_len: int, num_predict: int, repeats: int, corpus: str,
                        spiece_model: str, peak: float):
    """The pretraining reader (records -> dense masks) against the rate the production step consumes, and
    the production Trainer's step fed by the reader vs by constant tensors (same shapes, no memories)."""
    from tfrecords.pretrain import writer as pretrain_data

    work = pretrain_records(corpus, spiece_model, seq_len, num_predict, batch)
    kwargs = dict(seq_len=seq_len, reuse_len=seq_len // 2, num_predict=num_predict, global_batch_size=batch,
                  repeat=True)

    def reader_rate(ds, steps=200):
        it = iter(ds)
        for _ in range(10):
            next(it)
        start = time.perf_counter()
        for _ in range(steps):
            x = next(it)
        x["perm_mask"].numpy()
        return steps * batch / (time.perf_counter() - start)

    parallel = reader_rate(pretrain_data.pretrain_dataset(work, **kwargs))
    from tfrecords import manifest as manifest_lib

    files = manifest_lib.check_record_files(manifest_lib.read_manifest(work))
    sequential = tf.data.TFRecordDataset(files).batch(batch, drop_remainder=True).repeat().map(
        lambda s: pretrain_data.parse_and_decode(s, seq_len, seq_len // 2, num_predict))
    serial = reader_rate(sequential)

    iterator = iter(pretrain_data.pretrain_dataset(work, **kwargs))
    feats = {k: tf.identity(v) for k, v in next(iterator).items()}
    trainer = production_trainer("plm", config, batch, seq_len, _scratch("xlnet_bench_trainer_"))
    step = TrainerStep(trainer, feats)
    const_ms = median_ms(step, repeats)
    reader_ms = median_ms(lambda: step.on(iterator), repeats)
    consumed = batch / (const_ms / 1000)
    common = {"suite": "input_pipeline", "batch": batch, "seq_len": seq_len, "n_layer": config.n_layer,
              "d_model": config.d_model}
    rows = [dict(common, variant="reader (parallel decode + prefetch) / examples consumed by the step",
                 reader_examples_per_s=round(parallel, 1), step_examples_per_s=round(consumed, 1),
                 headroom=round(parallel / consumed, 1)),
            dict(common, variant="A/B reader without parallel decode or prefetch",
                 reader_examples_per_s=round(serial, 1), vs_production=round(serial / parallel, 3)),
            dict(common, variant="production step fed by the reader vs by constant tensors",
                 ours_ms=round(reader_ms, 1), constant_input_ms=round(const_ms, 1),
                 input_overhead=round(reader_ms / const_ms - 1, 3),
                 mfu_fp32=round(train_flops(config, batch, seq_len, num_predict) / (reader_ms / 1000) / 1e9 / peak, 3))]
    for row in rows:
        print(json.dumps(row), flush=True)
    return rows


def pretrain_records(corpus: str, spiece_model: str, seq_len: int, num_predict: int, batch: int) -> str:
    """A fresh folder of pretraining records of `corpus` (reuse_len = perm_size = seq_len / 2, one direction,
    global batch `batch`)."""
    from tfrecords.pretrain import writer as pretrain_data

    work = _scratch("xlnet_bench_records_")
    cfg = pretrain_data.PretrainConfig(seq_len=seq_len, reuse_len=seq_len // 2, num_predict=num_predict,
                                       perm_size=seq_len // 2, bi_data=False, global_batch_size=batch)
    pretrain_data.build_pretrain_records(corpus, spiece_model, work, cfg, log=None)
    return work


def hf_loop_step(hf, compiled: bool):
    """HF's training step with Transformer-XL memories carried from batch to batch, `step(batch, mems) ->
    new mems`: forward, backward, global-norm clipping, torch AdamW; under torch.compile with `compiled` (the
    caller, `_variant_builders`, drops torch.compile's caches first)."""
    torch = _torch()
    hf.train()
    opt = torch.optim.AdamW(hf.parameters(), lr=1e-5)

    def step(batch, mems):
        opt.zero_grad(set_to_none=True)
        out = hf(**batch, mems=mems)
        out.loss.backward()
        torch.nn.utils.clip_grad_norm_(hf.parameters(), 1.0)
        opt.step()
        return out.mems

    return torch.compile(step) if compiled else step


def loop_rates(step, batches, steps_per_loop: int, batch_size: int, mems) -> list:
    """Examples/s of each host loop of `steps_per_loop` of `batches` through `step(batch, mems) -> mems` (HF's
    side of the `train_loop` row; the first loop includes compilation)."""
    rates = []
    for start in range(0, len(batches), steps_per_loop):
        chunk = batches[start:start + steps_per_loop]
        began = time.perf_counter()
        for b in chunk:
            mems = step(b, mems)
        rates.append(len(chunk) * batch_size / (time.perf_counter() - began))
    return rates


def steady_rate(rates) -> float:
    """The median examples/s of the loops after the first (which traces and compiles)."""
    if len(rates) < 2:
        raise ValueError(f"need at least 2 host loops (the first compiles), got {len(rates)}")
    return float(np.median(rates[1:]))


def train_loop_row(common: dict, batch: int, ours_rates, reference_rates: dict, failures: dict) -> dict:
    """The `train_loop` row from each side's per-loop examples/s: the steady rates (`steady_rate`), as ms
    per step (`ours_ms`, `reference_ms` of the fastest variant, `reference_fields`) and examples/s, ratio =
    ours / reference examples/s (> 1: ours faster), every loop's rate in the notes."""
    times = {name: 1000.0 * batch / steady_rate(r) for name, r in reference_rates.items()}
    ours = steady_rate(ours_rates)
    fields, fastest_ms = reference_fields(times, failures, {})
    return dict(common, ours_ms=round(1000.0 * batch / ours, 1), **fields,
                ratio=round(ours * fastest_ms / (1000.0 * batch), 3), examples_per_s=round(ours, 1),
                reference_examples_per_s=round(1000.0 * batch / fastest_ms, 1),
                loop_examples_per_s={"ours": [round(r, 1) for r in ours_rates],
                                     **{n: [round(x, 1) for x in r] for n, r in reference_rates.items()}})


def train_loop_rows(n_layer: int, d_model: int, batch: int, seq_len: int, num_predict: int, mem_len: int,
                    corpus: str, spiece_model: str, steps_per_loop: int, loops: int,
                    reference_variants=REFERENCE_VARIANTS):
    """Host loop and input pipeline included: a real short run of run/pretrain.py (`pretrain.run()` with its
    CPU recipe, the benchmark's model size, `loops` host loops of `steps_per_loop` steps) on records of
    `corpus` read by its tf.data reader, against HF's training loop (`hf_loop_step`, each of
    `reference_variants`) over the same batches, pre-decoded into PyTorch tensors in memory (HF's input
    pipeline costs nothing here). Both carry memories from batch to batch; the first loop of each
    (compilation) is not counted."""
    from bench.speed.ours import runner_settings
    from run import common_flags, pretrain
    from tfrecords.pretrain import writer as pretrain_data
    from xlnet_tf.text.tokenization import XLNetTokenizer

    records = pretrain_records(corpus, spiece_model, seq_len, num_predict, batch)
    vocab = XLNetTokenizer(spiece_model).vocab_size
    steps = steps_per_loop * loops
    shape = dict(seq_len=seq_len, reuse_len=seq_len // 2, num_predict=num_predict)
    # the recipe's flags, with the benchmark's records, model size and a run this short (no warm-up: the
    # recipe's is longer than the run; the schedule costs the same)
    overrides = dict(
        record_dir=records, spiece_model=spiece_model, perm_size=seq_len // 2, bi_data="false", mem_len=mem_len,
        n_layer=n_layer, d_model=d_model, n_head=d_model // 64, d_head=64, d_inner=4 * d_model, n_token=vocab,
        dropout=0.0, dropatt=0.0, train_steps=steps, steps_per_loop=steps_per_loop, save_steps=steps,
        keep_checkpoint_steps=0, warmup_steps=0, **shape)
    fv = runner_settings("plm", _scratch("xlnet_bench_pretrain_"), batch,
                         extra=[f"--{k}={v}" for k, v in overrides.items()])
    config = common_flags.model_config_from_flags(fv, mem_len=fv.mem_len, reuse_len=fv.reuse_len,
                                                  bi_data=fv.bi_data)
    result = pretrain.run()
    ours_rates = [h["examples_per_sec"] for h in result["history"]]
    _release()

    torch = _torch()
    torch.set_num_threads(os.cpu_count())
    batches = []
    for features in pretrain_data.pretrain_dataset(records, global_batch_size=batch, repeat=True,
                                                   **shape).take(steps):
        data = {k: v.numpy() for k, v in features.items()}
        pt = torch_inputs(data, None, "plm")
        pt["labels"] = torch.tensor(np.where(data["target_mask"] > 0, data["target_ids"], -100)).long()
        batches.append(pt)
    hf = _hf_model(config, "plm")
    reference_rates, failures = {}, {}
    for name, build in _variant_builders(lambda compiled: hf_loop_step(hf, compiled), reference_variants).items():
        mems = [torch.zeros(mem_len, batch, d_model) for _ in range(n_layer)] if mem_len else None
        try:
            reference_rates[name] = loop_rates(build(), batches, steps_per_loop, batch, mems)
        except Exception as error:  # noqa: BLE001 - the row keeps the variants that worked
            failures[name] = _reason(error)
            print(f"reference variant {name} failed: {failures[name]}", flush=True)
        _reset_compiled()
    if not reference_rates:
        raise RuntimeError(f"no reference variant ran: {failures}")
    common = {"suite": "train_loop", "variant": "run/pretrain.py on records (host loop + tf.data reader) vs HF's "
              "loop over the same batches (in memory)", "batch": batch, "seq_len": seq_len, "mem_len": mem_len,
              "num_predict": num_predict, "n_layer": n_layer, "d_model": d_model, "n_token": vocab,
              "steps_per_loop": steps_per_loop, "loops": loops}
    row = train_loop_row(common, batch, ours_rates, reference_rates, failures)
    print(json.dumps(row), flush=True)
    return [row]


def builder_rows(corpus_glob: str):
    """The record builder and reader (build_pretrain.py, seq_len 512, 32k vocabulary)."""
    out = os.path.join(tempfile.mkdtemp(), "builder.json")
    cmd = [sys.executable, "-m", "bench.speed.build_pretrain", f"--corpus_glob={corpus_glob}", "--processes=1,2",
           f"--out={out}"]
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, cwd=REPO)
    result = json.load(open(out))
    rows = [{"suite": "builder", "variant": f"build_pretrain, {n.replace('_', ' ')}", "seq_len": 512,
             "batch": result["config"]["global_batch_size"], **stats} for n, stats in result["builder"].items()]
    rows.append({"suite": "builder", "variant": "reader (records -> dense masks)", "seq_len": 512,
                 "batch": result["config"]["global_batch_size"], **result["reader"],
                 "record_bytes_per_example": result["record_bytes_per_example"], "corpus_mb": result["corpus_mb"]})
    for row in rows:
        print(json.dumps(row), flush=True)
    return rows


def memory_rows(n_layer: int, d_model: int, batch: int, seq_len: int, num_predict: int, mlen: int):
    """Peak RSS of the pretraining step at `seq_len`, each implementation alone in its own process
    (peak_rss.py imports only TensorFlow or only PyTorch): ours as the runners train by default, ours with
    `--remat` (every layer rematerialized), and HF. Two rows, each against HF; the notes carry each process's
    training growth, XLA's own heap for the step (ours) and the step time (the faster of the last two of three
    calls: a memory run, not a timing one; the remat row's `step_time_vs_production` = its step / the
    production step, measured in the same way)."""
    result = {}
    for name, impl, extra in (("ours", "ours", []), ("ours_remat", "ours", ["--remat"]), ("hf", "hf", [])):
        cmd = [sys.executable, "-m", "bench.speed.peak_rss", f"--impl={impl}", f"--n_layer={n_layer}",
               f"--d_model={d_model}", f"--batch={batch}", f"--seq_len={seq_len}", f"--num_predict={num_predict}",
               f"--mem_len={mlen}", *extra]
        out = subprocess.run(cmd, check=True, capture_output=True, text=True, cwd=REPO).stdout.strip().splitlines()[-1]
        result[name] = json.loads(out)
        print(json.dumps({name: result[name]}), flush=True)
    hf = result["hf"]
    rows = []
    for name, variant in (("ours", "peak RSS of the pretraining step (whole process)"),
                          ("ours_remat", "peak RSS of the pretraining step (whole process), --remat")):
        ours = result[name]
        row = {"suite": "memory", "variant": variant, "batch": batch, "seq_len": seq_len, "mem_len": mlen,
               "n_layer": n_layer, "d_model": d_model, "ours_mb": ours["peak_rss_mb"], "reference_mb": hf["peak_rss_mb"],
               "ratio": round(hf["peak_rss_mb"] / ours["peak_rss_mb"], 3),
               "ours_training_growth_mb": ours["training_growth_mb"],
               "reference_training_growth_mb": hf["training_growth_mb"],
               "ours_xla_heap_mb": ours.get("xla_heap_mb"), "ours_step_s": ours["step_s_after_first"],
               "reference_step_s": hf["step_s_after_first"]}
        if name == "ours_remat":
            row["step_time_vs_production"] = round(ours["step_s_after_first"] / result["ours"]["step_s_after_first"], 3)
        print(json.dumps(row), flush=True)
        rows.append(row)
    return rows


def _fmt(row, *keys):
    for key in keys:
        if key in row:
            return str(row[key])
    return ""


def reference_settings(names, native_bfloat16: bool) -> dict:
    """How HF is run, for the report header. Called first in `main`: flushing denormals must precede
    PyTorch's thread pool."""
    compiled = any(n.removesuffix(BF16_SUFFIX) == "compile" for n in names)
    bf16 = any(n.endswith(BF16_SUFFIX) for n in names)
    return {"variants": [f"hf_{n}" for n in names], "flush_denormal": flush_denormals(),
            "compile": COMPILE_NOTE if compiled else None,
            "autocast_bfloat16": AUTOCAST_NOTE if bf16 else (
                None if native_bfloat16 else "not timed: this CPU has no bfloat16 arithmetic (AVX-512 BF16 or AMX), "
                "so an autocast step would time an emulation")}


def _peak_line(peaks: dict) -> str:
    """The peaks, each with the backend and size that gave it, then every backend's best."""
    parts = []
    for dtype, p in peaks.items():
        each = ", ".join(f"{b} {max(by_n.values()):.1f}" for b, by_n in p["backends"].items())
        parts.append(f"{dtype} {p['best']:.1f} GFLOP/s ({p['best_backend']}, n = {p['best_n']}; best per backend: "
                     f"{each})")
    sizes = "/".join(next(iter(peaks.values()))["backends"]["tf_xla"])
    return (f"Measured dense matmul peak (best of n x n by n x n, n = {sizes}, over TensorFlow XLA (tf_xla), "
            f"TensorFlow oneDNN without XLA (tf_onednn), PyTorch (torch, all threads) and NumPy (numpy, float32 "
            f"only)): {'; '.join(parts)}; every figure in report.json.")


def _reference_line(ref: dict) -> str:
    """How HF ran: its variants, the denormal setting (verified or not) and how torch.compile was applied."""
    flushed = ("flushed (torch.set_flush_denormal(True) before PyTorch's thread pool starts; verified on every "
               "intra-op thread)" if ref["flush_denormal"] else
               "flushing requested but NOT verified on every intra-op thread (HF may be slowed by denormals)")
    compile_note = f" hf_compile: {ref['compile']}." if ref.get("compile") else ""
    if ref.get("autocast_bfloat16"):
        compile_note += f" bfloat16 autocast (hf_*_bf16): {ref['autocast_bfloat16']}."
    return (f"Reference: Hugging Face transformers XLNet (PyTorch), timed in the same process as "
            f"{', '.join(ref['variants'])}, denormals {flushed}; TensorFlow flushes denormals itself. Each row's "
            f"reference is its fastest variant (named in the reference column; all in the notes), and its ratio is "
            f"against that. Ours and every HF variant are timed call by call in turns (medians), and each A/B "
            f"variant in turns with the production step, so drifting load on a shared machine falls on both "
            f"sides alike.{compile_note}")


OURS_LINE = ("Ours: the production training.Trainer, built as run/pretrain.py and the fine-tuning lifecycle "
             "(run/lifecycle.py) build it from their CPU recipes (run/flags/pretrain_cpu.flags; the transfer "
             "study's transfer_topic.flags for run_classifier.py's job, finetune_step; its transfer_pos_brown.flags "
             "for run_tagger.py's job, tagging_step: optimizer, clipping, --jit_compile, loss), at the benchmark's "
             "model size; the step rows time its per-batch step function "
             "(ours.py TrainerStep), host loop excluded. tagging_step: 12 labels (universal POS tags), "
             "windows of random words of 1-3 pieces, each word's label on its first piece (about 70% of positions "
             "labelled; the others ignored: -100 for HF's XLNetForTokenClassification).")
TRAIN_LOOP_LINE = ("train_loop: examples/s of a real short run of run/pretrain.py (its run(): host loops of "
                   "steps_per_loop steps in one tf.function, records read by its tf.data reader) against HF's "
                   "training loop over the same batches, pre-decoded in memory (HF's input pipeline costs nothing), each "
                   "side from its own initial weights; "
                   "the first loop of each (tracing, compilation) is not counted, the rest give the median; ours "
                   "and the HF variants run one after the other, not interleaved.")


def _quick_line(skipped) -> str:
    return ("Quick mode (--quick): the headline rows only; skipped or reduced: " + "; ".join(skipped) +
            ". Run without --quick for the full report.")


def write_report(report: dict, output_dir: str) -> str:
    os.makedirs(output_dir, exist_ok=True)
    with open(os.path.join(output_dir, "report.json"), "w") as f:
        json.dump(report, f, indent=2)
    m = report["machine"]
    lines = ["# xlnet_tf benchmarks", "",
             f"Machine: {m['cpu']} ({m['cpu_kind']}; vector extensions: {m['vector_extensions'] or 'none found'}; "
             f"bfloat16 {'native' if m.get('native_bfloat16') else 'emulated: no AVX-512 BF16 or AMX'}), "
             f"{m['cores']} cores, {m['memory_gib']} GiB; {m['platform']}; Python {m['python']}, "
             f"TensorFlow {m['tensorflow']}, PyTorch {m['torch']} ({m['torch_threads']} threads), "
             f"transformers {m['transformers']}; GPUs: {m['gpus'] or 'none'}.", "",
             f"{_peak_line(report['peak_gflops'])} MFU = model FLOPs (analytical, harness.py train_flops) per "
             f"second / the float32 peak. Wall time {report['wall_s']:.0f} s.", "",
             *([f"Command: `{report['command']}`", ""] if report.get("command") else []),
             OURS_LINE, "",
             _reference_line(report["reference"]), "",
             *([TRAIN_LOOP_LINE, ""] if any(r["suite"] == "train_loop" for r in report["rows"]) else []),
             *([_quick_line(report["quick"]), ""] if report.get("quick") else []),
             "ratio = reference / ours (> 1: ours faster or smaller); " + (
                 "vs prod. = the row's lead (its first variant, timed against the reference: with --bfloat16_fusible "
                 "the bfloat16 fusible step, production then an A/B) / variant (< 1: the lead is faster)."
                 if report.get("args", {}).get("bfloat16_fusible") else
                 "vs prod. = production / variant (< 1: the production choice is faster)."), "",
             "| suite | variant | layers x d | batch | seq (mem) | ours | reference | ratio | vs prod. | "
             "tokens/s or ex/s | MFU fp32 | notes |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in report["rows"]:
        shape = f"{r['n_layer']}x{r['d_model']}" if "n_layer" in r else ""
        seq = f"{r.get('seq_len', '')}" + (f" ({r['mem_len']})" if r.get("mem_len") else "")
        ours = _fmt(r, "ours_ms", "ours_mb")
        ours += " ms" if "ours_ms" in r else (" MB" if "ours_mb" in r else "")
        ref = _fmt(r, "reference_ms", "reference_mb")
        ref += " ms" if "reference_ms" in r else (" MB" if "reference_mb" in r else "")
        ref += f" ({r['reference_variant']})" if "reference_variant" in r else ""
        speed = _fmt(r, "tokens_per_s", "examples_per_s", "reader_examples_per_s")
        notes = {k: v for k, v in r.items() if k in ("breakdown_ms", "headroom", "step_examples_per_s",
                                                      "constant_input_ms", "input_overhead", "seconds",
                                                      "input_mb_per_s", "record_bytes_per_example",
                                                      "ours_training_growth_mb", "reference_training_growth_mb",
                                                      "ours_xla_heap_mb", "ours_step_s", "reference_step_s",
                                                      "step_time_vs_production",
                                                      "dense_mb_per_example", "reference_variants_ms",
                                                      "reference_failures", "reference_compile_s",
                                                      "reference_examples_per_s", "loop_examples_per_s",
                                                      "steps_per_loop", "loops", "n_token", "num_labels",
                                                      "labelled_fraction")}
        lines.append(f"| {r['suite']} | {r['variant']} | {shape} | {r.get('batch', '')} | {seq} | {ours} | {ref} | "
                     f"{r.get('ratio', '')} | {r.get('vs_production', '')} | {speed} | {r.get('mfu_fp32', '')} | "
                     f"{json.dumps(notes)[1:-1] if notes else ''} |")
    text = "\n".join(lines) + "\n"
    with open(os.path.join(output_dir, "report.md"), "w") as f:
        f.write(text)
    return text


# Settings with a full and a quick value (`--quick`); a flag given on the command line wins over either.
FULL = dict(suite="all", seq_lens="128,512", base_config=True, ab=True, breakdown=True, repeats=5,
            peak_sizes="1024,2048,4096", peak_dtypes="float32,bfloat16", loop_steps=10, loops=4)
QUICK = dict(suite="pretrain_step,finetune_step,tagging_step,train_loop", seq_lens="128", base_config=False, ab=False,
             breakdown=False, repeats=3, peak_sizes="1024,2048", peak_dtypes="float32", loop_steps=4, loops=3)
# What quick mode leaves out, per setting, for the report (only where the quick value was used).
QUICK_SKIPS = {
    "suite": "the memory, input_pipeline, serving and builder suites (only pretrain_step, finetune_step, "
             "tagging_step and train_loop)",
    "seq_lens": "the longer sequence length (512): the step rows run at 128 only",
    "base_config": "the 12-layer base-config rows, whose HF torch.compile alone takes about 5 minutes each",
    "ab": "the A/B variants of our step (production only)",
    "breakdown": "the forward / backward-and-update breakdown of our step",
    "peak_dtypes": "the bfloat16 matmul peak (MFU is float32)",
    "repeats": "timed calls: 3 per side, interleaved (full: 5)",
    "peak_sizes": "matmul peak sizes: n = 1024/2048 (full: up to 4096)",
    "loop_steps": "host-loop row: 4 steps per loop (full: 10)",
    "loops": "host-loop row: 3 loops, the first (compilation) not counted (full: 4)",
}


def resolve_settings(args, native_bfloat16: bool) -> list:
    """Fills each `FULL` setting left unset on the command line (None) with its quick (`args.quick`) or full
    value, and returns what quick mode skipped (`QUICK_SKIPS`, plus the emulated mixed_bfloat16 A/B variants
    when `--ab` is asked for on a CPU without bfloat16 arithmetic): [] in a full run."""
    skipped = []
    for key, full in FULL.items():
        if getattr(args, key) is None:
            setattr(args, key, QUICK[key] if args.quick else full)
            if args.quick and QUICK[key] != full:
                skipped.append(QUICK_SKIPS[key])
    if args.quick and args.ab and not native_bfloat16:
        skipped.append("the mixed_bfloat16 A/B variants: this CPU has no AVX-512 BF16 or AMX, so bfloat16 is "
                       "emulated")
    return skipped


def quick_loop_variants(quick: bool, rows, ref_variants, skipped: list):
    """HF's variants for the train_loop row: in quick mode only the one that was fastest in the production
    pretrain_step row at the same model size (noted in `skipped`), else all of `ref_variants`."""
    step = [r for r in rows if r["suite"] == "pretrain_step" and r["variant"] == PRODUCTION.name]
    if not quick or not step:
        return ref_variants
    best = step[0]["reference_variant"].removeprefix("hf_")
    if set(ref_variants) != {best}:
        skipped.append(f"train_loop runs HF only as {step[0]['reference_variant']}, the fastest variant of the "
                       f"pretrain_step row (same layers, width, batch and length)")
    return (best,)


def define_flags(fv: flags.FlagValues = FLAGS):
    d = cli.Definer(fv)
    d.bool("quick", False, "The headline rows (pretraining, fine-tuning and tagging step, host loop, each vs HF's best "
           "variant) in minutes: every setting below left unset takes its quick value (`QUICK`; what that skips is "
           "listed in the report).")
    d.string("suite", None, f"all, or a comma-separated list of {', '.join(SUITES)} (default: all; quick: "
             f"{QUICK['suite']}).")
    d.string("output_dir", "bench_output", "Where report.json and report.md go.")
    d.integer("n_layer", 4, "Layers of the benchmark model.")
    d.integer("d_model", 768, "Width of the benchmark model (n_head = d_model / 64, d_inner = 4 x d_model).")
    d.integer("batch", 8, "Batch size.")
    d.string("seq_lens", None, "Training-step lengths; A/B variants at the first (default 128,512; quick: 128).")
    d.integer("num_predict", 0, "Targets per sequence (0: 85/512 of seq_len).")
    d.integer("mem_len", -1, "Memory length (-1: seq_len / 2).")
    d.bool("base_config", None, "Also time the full base config (12 layers) production step against HF (default: "
           "on; quick: off).")
    d.integer("repeats", None, "Timed calls per side (default 5; quick: 3).")
    d.bool("ab", None, "Also time the A/B variants of our step at the first length (default: on; quick: off, and "
           "with --ab no mixed_bfloat16 variant on a CPU without bfloat16 arithmetic).")
    d.bool("breakdown", None, "Split the production step into forward and the rest (default: on; quick: off).")
    d.string("reference_variants", None, f"How HF runs, comma-separated from {', '.join(REFERENCE_VARIANTS)} "
             "(default: all of them on a CPU with bfloat16 arithmetic, else the float32 ones); each row compares "
             "with the fastest.")
    d.bool("bfloat16_fusible", False, "The process runs with the runners' --xla_clustering=fusible TF_XLA_FLAGS "
           "(it restarts itself with them: TensorFlow reads them when it loads), "
           "each step row times `BFLOAT16_FUSIBLE` against HF (the production step then as its first A/B variant) "
           "and the serving row a mixed_bfloat16 export. For CPUs with bfloat16 arithmetic.")
    d.string("peak_sizes", None, "Matrix sizes n of the matmul peak (default 1024,2048,4096; quick: 1024,2048).")
    d.string("peak_dtypes", None, "Matmul peaks measured (default float32,bfloat16; quick: float32).")
    d.integer("loop_steps", None, "train_loop: steps per host loop (default 10; quick: 4).")
    d.integer("loops", None, "train_loop: host loops, the first not counted (default 4; quick: 3).")
    d.string("corpus_glob", os.path.join(REPO, "..", "shared", "data", "corpus", "train", "*.txt"),
             "The builder suite's corpus.")


def restart_with_fusible_clustering() -> None:
    """Unless this process runs with the runners' --xla_clustering=fusible TF_XLA_FLAGS
    (`xlnet_tf.training.xla_clustering.FUSIBLE_FLAGS`), restarts it with them: TensorFlow, loaded when this module
    is imported, reads them once, when it loads. The same command line (`sys.orig_argv`, interpreter options
    included), the repository on PYTHONPATH; refused unless the harness is this process's main module (a caller
    that imported it would be replaced)."""
    from xlnet_tf.training import xla_clustering

    if xla_clustering.flags_present(os.environ.get("TF_XLA_FLAGS", "")):
        return
    main_module = sys.modules.get("__main__")
    if getattr(getattr(main_module, "__spec__", None), "name", None) != "bench.speed.harness":
        raise UserError("--bfloat16_fusible: run the harness as its own process (python -m bench.speed.harness), or set "
                        f"TF_XLA_FLAGS='{' '.join(xla_clustering.FUSIBLE_FLAGS)}' before TensorFlow loads")
    os.environ["TF_XLA_FLAGS"] = xla_clustering.with_fusible_flags(os.environ.get("TF_XLA_FLAGS", ""))
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (REPO, os.environ.get("PYTHONPATH")) if p)
    print(f"restarting with TF_XLA_FLAGS={os.environ['TF_XLA_FLAGS']!r}", flush=True)
    os.execv(sys.executable, sys.orig_argv)


def main():
    global WORK_DIR
    import atexit
    import shutil

    if FLAGS.loops is not None and FLAGS.loops < 2:
        raise UserError("--loops: at least 2 (the first compiles and is not counted)")
    native = describe()["native_bfloat16"]
    if FLAGS.bfloat16_fusible:
        if not native:
            raise UserError("--bfloat16_fusible: this CPU has no bfloat16 arithmetic (AVX-512 BF16 or AMX), "
                            "and the fusible lead runs in mixed_bfloat16; leave it off")
        restart_with_fusible_clustering()
    quick_skipped = resolve_settings(FLAGS, native)
    seq_lens = [int(s) for s in FLAGS.seq_lens.split(",")]
    ref_variants = (tuple(FLAGS.reference_variants.split(",")) if FLAGS.reference_variants
                    else default_reference_variants(native))
    if not ref_variants or set(ref_variants) - set(REFERENCE_VARIANTS):
        raise UserError(f"--reference_variants: choose from {REFERENCE_VARIANTS}")
    if not native and any(n.endswith(BF16_SUFFIX) for n in ref_variants):
        raise UserError(f"--reference_variants={FLAGS.reference_variants}: this CPU has no bfloat16 arithmetic "
                        "(AVX-512 BF16 or AMX), so a bfloat16 autocast variant would time an emulation; leave them out")
    reference = reference_settings(ref_variants, native)  # first: before anything starts PyTorch's thread pool
    peak_sizes = [int(n) for n in FLAGS.peak_sizes.split(",")]
    if "float32" not in FLAGS.peak_dtypes.split(",") or set(FLAGS.peak_dtypes.split(",")) - set(PEAK_BACKENDS):
        raise UserError(f"--peak_dtypes: float32 (MFU's denominator) and optionally bfloat16, got {FLAGS.peak_dtypes}")
    suites = SUITES if FLAGS.suite == "all" else tuple(FLAGS.suite.split(","))
    unknown = set(suites) - set(SUITES)
    if unknown:
        raise UserError(f"--suite: unknown {sorted(unknown)}; choose from {SUITES} or all")

    def predict(L):
        return FLAGS.num_predict or default_num_predict(L)

    def mem(L):
        return L // 2 if FLAGS.mem_len < 0 else FLAGS.mem_len

    began = time.time()
    WORK_DIR = tempfile.mkdtemp(prefix="xlnet_bench_")
    atexit.register(shutil.rmtree, WORK_DIR, True)  # also when a suite fails
    spiece_model = test_corpus_spiece_model()
    demo_corpus = os.path.join(REPO, "data", "demo", "train.txt")
    report = {"machine": machine(), "command": cli.invocation("bench.speed.harness"),
              "args": {name: value for name, value in FLAGS.flag_values_dict().items() if name != "verbose"},
              "reference": reference, "quick": quick_skipped, "tf_xla_flags": os.environ.get("TF_XLA_FLAGS", ""),
              "peak_gflops": {d: matmul_peak(d, peak_sizes, FLAGS.repeats) for d in FLAGS.peak_dtypes.split(",")},
              "rows": []}
    peak = report["peak_gflops"]["float32"]["best"]
    native_bf16 = report["machine"]["native_bfloat16"]
    plm_variants, finetune_variants, tagging_variants = PLM_VARIANTS, FINETUNE_VARIANTS, TAGGING_VARIANTS
    lead = 1  # variants of each row timed without --ab: the one timed against HF (and the production step with it)
    if FLAGS.bfloat16_fusible:
        plm_variants, finetune_variants, tagging_variants = ([BFLOAT16_FUSIBLE, *v] for v in (
            plm_variants, finetune_variants, tagging_variants))
        lead = 2
    if FLAGS.quick:
        plm_variants = without_emulated_bfloat16(plm_variants, native_bf16)
        finetune_variants = without_emulated_bfloat16(finetune_variants, native_bf16)
        tagging_variants = without_emulated_bfloat16(tagging_variants, native_bf16)
    config = bench_config(FLAGS.n_layer, FLAGS.d_model)
    if "memory" in suites:  # first, while this process is small (each implementation runs in a child)
        report["rows"] += memory_rows(FLAGS.n_layer, FLAGS.d_model, FLAGS.batch, seq_lens[-1], predict(seq_lens[-1]),
                                      mem(seq_lens[-1]))
    for i, L in enumerate(seq_lens):
        first = i == 0
        repeats = FLAGS.repeats if first else max(3, FLAGS.repeats // 2)
        if "pretrain_step" in suites:
            report["rows"] += step_rows("plm", bench_config(FLAGS.n_layer, FLAGS.d_model, mem(L)), FLAGS.batch, L,
                                        predict(L), mem(L), repeats, peak,
                                        plm_variants if first and FLAGS.ab else plm_variants[:lead],
                                        breakdown=FLAGS.breakdown, reference_variants=ref_variants)
        if "finetune_step" in suites:
            report["rows"] += step_rows("classifier", config, FLAGS.batch, L, 0, 0, repeats, peak,
                                        finetune_variants if first and FLAGS.ab else finetune_variants[:lead],
                                        breakdown=FLAGS.breakdown, reference_variants=ref_variants)
        if "tagging_step" in suites:
            report["rows"] += step_rows("tagger", config, FLAGS.batch, L, 0, 0, repeats, peak,
                                        tagging_variants if first and FLAGS.ab else tagging_variants[:lead],
                                        breakdown=FLAGS.breakdown, reference_variants=ref_variants)
    L = seq_lens[0]
    if "train_loop" in suites:
        loop_variants = quick_loop_variants(FLAGS.quick, report["rows"], ref_variants, quick_skipped)
        report["rows"] += train_loop_rows(FLAGS.n_layer, FLAGS.d_model, FLAGS.batch, L, predict(L), mem(L), demo_corpus,
                                          spiece_model, FLAGS.loop_steps, FLAGS.loops, loop_variants)
        _release()
    if "input_pipeline" in suites:
        report["rows"] += input_pipeline_rows(config, FLAGS.batch, L, predict(L), FLAGS.repeats, demo_corpus,
                                              spiece_model, peak)
        _release()
    if "pretrain_step" in suites and FLAGS.base_config:
        report["rows"] += step_rows("plm", bench_config(12, 768, mem(L)), FLAGS.batch, L, predict(L), mem(L),
                                    max(2, FLAGS.repeats // 2), peak, PLM_VARIANTS[:1], breakdown=False,
                                    reference_variants=ref_variants)
    if "finetune_step" in suites and FLAGS.base_config:
        report["rows"] += step_rows("classifier", bench_config(12, 768), FLAGS.batch, L, 0, 0,
                                    max(2, FLAGS.repeats // 2), peak, FINETUNE_VARIANTS[:1], breakdown=False,
                                    reference_variants=ref_variants)
    if "tagging_step" in suites and FLAGS.base_config:
        report["rows"] += step_rows("tagger", bench_config(12, 768), FLAGS.batch, L, 0, 0,
                                    max(2, FLAGS.repeats // 2), peak, TAGGING_VARIANTS[:1], breakdown=False,
                                    reference_variants=ref_variants)
    if "serving" in suites:
        report["rows"] += serving_rows(config, 32, 128, FLAGS.repeats, spiece_model, ref_variants,
                                       "mixed_bfloat16" if FLAGS.bfloat16_fusible else "float32")
    if "builder" in suites:
        if tf.io.gfile.glob(FLAGS.corpus_glob):
            report["rows"] += builder_rows(FLAGS.corpus_glob)
        else:
            print(f"builder suite skipped: no files match --corpus_glob={FLAGS.corpus_glob}", flush=True)
    report["wall_s"] = time.time() - began
    print(write_report(report, FLAGS.output_dir))


if __name__ == "__main__":
    cli.run(FLAGS, define_flags, main)
