"""The speed harness (bench/speed/harness.py) end to end at a tiny size: every row of the report is produced and
well formed; the step it times is the production Trainer's; quick mode's settings and report.

Speed itself is never asserted (see bench/); this only keeps the harness runnable. torch.compile takes about a
minute per row on two busy cores even at these sizes, so the default run times HF eager only and the
compiled reference is `test_compiled_reference` (slow); the choice of the fastest is tested on its own, on a
virtual clock.
"""

import json
import os
import platform
import subprocess
import sys

import numpy as np
import pytest

from tests import data_fixtures
from bench.speed import variants


def _run(tmp_path, *flags):
    cmd = [sys.executable, "-m", "bench.speed.harness", "--n_layer=1", "--d_model=64",
           "--batch=2", "--seq_lens=16", "--repeats=1", "--nobase_config", "--peak_sizes=64,128",
           f"--output_dir={tmp_path}", *flags]
    subprocess.run(cmd, check=True, capture_output=True, text=True, timeout=1200, cwd=data_fixtures.REPO_ROOT)
    return json.load(open(tmp_path / "report.json")), open(tmp_path / "report.md").read()


def _check_reference(row, names):
    """The reference is the fastest of the variants HF ran, and the ratio is against it."""
    times = row["reference_variants_ms"]
    assert set(times) | set(row.get("reference_failures", {})) == set(names) and times
    assert row["reference_ms"] == min(times.values()) and times[row["reference_variant"]] == row["reference_ms"]
    if "vs_production" not in row:  # an A/B row's ratio is the production ratio times its paired vs_production
        assert row["ratio"] == pytest.approx(row["reference_ms"] / row["ours_ms"], rel=0.05)


def _check_peak(peak, backends):
    assert set(peak["backends"]) == set(backends)
    assert all(set(by_n) == {"64", "128"} and min(by_n.values()) >= 0 for by_n in peak["backends"].values())
    assert peak["best"] > 0 and peak["best"] == max(g for by_n in peak["backends"].values() for g in by_n.values())
    assert peak["backends"][peak["best_backend"]][str(peak["best_n"])] == peak["best"]


@pytest.mark.slow  # every suite and A/B variant (minutes); CI runs the --quick end to end below
def test_harness_writes_report(tmp_path):
    report, md = _run(tmp_path, "--suite=pretrain_step,train_loop,input_pipeline,memory",
                      "--reference_variants=eager", "--loops=2", "--loop_steps=1")
    rows = report["rows"]
    m = report["machine"]
    assert m["cores"] >= 1 and m["cpu_kind"] in ("AMX", "AVX-512", "AVX2", "other")
    assert m["vector_extensions"] == " ".join(sorted(m["vector_extensions"].split()))
    assert m["native_bfloat16"] == bool({"avx512_bf16", "amx_bf16"} & set(m["vector_extensions"].split()))
    if platform.machine() in ("x86_64", "AMD64"):
        assert "avx" in m["vector_extensions"].split() and m["cpu_kind"] != "other"
        assert report["reference"]["flush_denormal"] is True
    assert report["reference"]["variants"] == ["hf_eager"]
    _check_peak(report["peak_gflops"]["float32"], ("tf_xla", "tf_onednn", "torch", "numpy"))
    _check_peak(report["peak_gflops"]["bfloat16"], ("tf_xla", "tf_onednn", "torch"))
    plm = [r for r in rows if r["suite"] == "pretrain_step"]
    from bench.speed import harness

    assert len(plm) == len(harness.PLM_VARIANTS) and plm[0]["variant"].startswith("production")
    assert set(plm[0]["breakdown_ms"]) == {"forward", "backward_and_update"}
    assert all(r["ratio"] > 0 and r["reference_ms"] > 0 and r["mem_len"] == 8 for r in plm)
    for r in plm:
        _check_reference(r, ["hf_eager"])
    assert all("vs_production" in r for r in plm[1:])
    assert all(r["ratio"] == pytest.approx(plm[0]["ratio"] * r["vs_production"], rel=0.01) for r in plm[1:])
    assert [r["variant"] for r in plm] == [v.name for v in harness.PLM_VARIANTS]
    assert {v.attention for v in harness.PLM_VARIANTS} == set(variants.VARIANTS)  # every attention variant timed
    pipeline = [r for r in rows if r["suite"] == "input_pipeline"]
    assert len(pipeline) == 3 and pipeline[0]["headroom"] > 0
    loop = [r for r in rows if r["suite"] == "train_loop"]
    assert len(loop) == 1 and loop[0]["examples_per_s"] > 0 and loop[0]["reference_examples_per_s"] > 0
    _check_reference(loop[0], ["hf_eager"])
    assert [len(v) for v in loop[0]["loop_examples_per_s"].values()] == [loop[0]["loops"]] * 2
    assert report["quick"] == [] and "Quick mode" not in md and "train_loop: examples/s of a real short run" in md
    memory = [r for r in rows if r["suite"] == "memory"]
    assert len(memory) == 2 and all(r["ours_mb"] > 0 and r["reference_mb"] > 0 for r in memory)
    assert memory[1]["variant"].endswith("--remat") and memory[1]["step_time_vs_production"] > 0
    assert memory[0]["reference_mb"] == memory[1]["reference_mb"] and memory[0]["ours_xla_heap_mb"] > 0
    assert md.count("\n| ") == len(rows) + 1 and "Measured dense matmul peak" in md
    assert "denormals flushed" in md and f"({m['cpu_kind']}; vector extensions: {m['vector_extensions']}" in md
    assert f"float32 {report['peak_gflops']['float32']['best']:.1f} GFLOP/s " \
           f"({report['peak_gflops']['float32']['best_backend']}, n = " in md


def test_reference_is_the_fastest_variant(monkeypatch):
    """The fastest working variant is the reference; failures are recorded, not fatal. Timed on a virtual
    clock (each callable advances it by its own cost), so the verdict never depends on the machine's load."""
    from bench.speed import harness as run

    clock = [0.0]
    monkeypatch.setattr(run.time, "perf_counter", lambda: clock[0])

    def costs(seconds):
        def call():
            clock[0] += seconds
        return call

    def builder(seconds):
        return lambda: costs(seconds)

    def broken():
        def fail():
            raise RuntimeError("no C++ compiler\nsecond line | with a pipe")
        return fail

    fields, ms, ours_ms = run.time_reference({"hf_eager": builder(0.03), "hf_compile": builder(0.005),
                                              "hf_other_compile": broken}, repeats=3, ours=costs(0.015))
    assert ours_ms == pytest.approx(15) and ms == pytest.approx(5)
    assert fields["reference_variant"] == "hf_compile"
    assert fields["reference_variants_ms"] == {"hf_eager": 30.0, "hf_compile": 5.0}
    assert fields["reference_ms"] == min(fields["reference_variants_ms"].values()) == round(ms, 1)
    assert fields["reference_failures"] == {"hf_other_compile": "RuntimeError: no C++ compiler"}
    # the compiled variant's warm-up: two calls of 5 ms (no torch graphs counted here)
    assert fields["reference_compile_s"] == {"hf_compile": 0.0}
    with pytest.raises(RuntimeError, match="no reference variant ran"):
        run.time_reference({"hf_compile": broken}, repeats=1)


def _tiny_trainer(tmp_path, kind="plm", **variant):
    from bench.speed import ours
    from bench.speed.peak_rss import inputs

    import tensorflow as tf

    config = ours.bench_config(1, 64, mem_len=4 if kind == "plm" else 0, n_token=50)
    data, _ = inputs(50, 1, 64, 2, 8, 2, 0)
    trainer = ours.production_trainer(kind, config, 2, 8, str(tmp_path / f"{kind}_{len(os.listdir(tmp_path))}"),
                                      ours.Variant("test", **variant) if variant else ours.PRODUCTION)
    return trainer, ours.TrainerStep(trainer, {k: tf.constant(v) for k, v in data.items()})


def test_benchmark_times_the_trainers_own_step(tmp_path, monkeypatch):
    """The step the benchmark times IS the production Trainer's step function (built as run/pretrain.py and
    the fine-tuning lifecycle build it), so a change to the training loop's step moves what is timed: here
    `training.apply_clipped_gradients`, the end of every step, patched to report another loss."""
    from xlnet_tf.training import finetuning, loop as training

    original = training.apply_clipped_gradients
    traced = []

    def changed(*args, **kwargs):
        traced.append(True)
        loss, norm = original(*args, **kwargs)
        return loss * 0.0 + 123.0, norm

    # one compile: the patched step (the unpatched production step runs in the tagging row's test)
    monkeypatch.setattr(training, "apply_clipped_gradients", changed)
    trainer, step = _tiny_trainer(tmp_path)
    assert step.function is trainer._step and trainer.fused_step and trainer.config.jit_compile
    assert trainer.loss_fn is training.plm_loss_fn and trainer.mems is not None
    assert trainer.optimizer.global_clipnorm == 1.0 and trainer.config.clip_mode == "global"  # the CPU recipe's
    assert step() == 123.0 and traced
    monkeypatch.undo()

    classifier, fine_step = _tiny_trainer(tmp_path, "classifier", fused_step=False)  # not run: no compile
    assert classifier.loss_fn is finetuning.task_loss_fn and not classifier.fused_step
    assert fine_step.function == classifier._replica_step  # the multi-replica path: AdamW outside XLA


def test_tagging_row_times_the_taggers_own_step(tmp_path, monkeypatch):
    """The tagging_step row times the production Trainer's own step (the fine-tuning lifecycle's, from the
    tagging recipe, --jit_compile) around run_tagger.TaggerJob's model (XLNetTagger, 12 labels) and its loss
    (`finetuning.task_loss_fn` -> `XLNetTagger.loss_sum_and_weight`, traced into the timed step), against
    HF's XLNetForTokenClassification on the same tokens, labels (-100 where ours ignores) and weights: the two
    losses agree before either trains."""
    import tensorflow as tf
    import torch
    import transformers

    from bench.speed import harness as run, ours
    from xlnet_tf.training import finetuning
    from xlnet_tf.models import XLNetTagger

    monkeypatch.setattr(run, "WORK_DIR", str(tmp_path))
    trainers, steps, timed, hf_side, traced = [], [], [], [], []

    def trainer_spy(*args, **kwargs):
        trainers.append(ours.production_trainer(*args, **kwargs))
        return trainers[-1]

    class StepSpy(ours.TrainerStep):
        def __init__(self, trainer, features):
            super().__init__(trainer, features)
            self.losses = []
            steps.append(self)

        def __call__(self):
            self.losses.append(float(super().__call__()))  # the first: the loss at HF's weights, before any update
            return self.losses[-1]

    def variants_spy(hf, pt, names):
        with torch.no_grad():
            hf_side.append((hf, pt, float(hf(**pt).loss)))
        return original_variants(hf, pt, names)

    def interleaved_spy(fns, repeats):
        timed.append(dict(fns))
        return original_interleaved(fns, repeats)

    def loss_spy(self, features, outputs):
        traced.append(True)
        return original_loss(self, features, outputs)

    original_variants, original_interleaved = run.hf_step_variants, run.interleaved_ms
    original_loss = XLNetTagger.loss_sum_and_weight
    monkeypatch.setattr(run, "production_trainer", trainer_spy)
    monkeypatch.setattr(run, "TrainerStep", StepSpy)
    monkeypatch.setattr(run, "hf_step_variants", variants_spy)
    monkeypatch.setattr(run, "interleaved_ms", interleaved_spy)
    monkeypatch.setattr(XLNetTagger, "loss_sum_and_weight", loss_spy)

    config = ours.bench_config(1, 64, n_token=50)
    rows = run.step_rows("tagger", config, 2, 16, 0, 0, 1, 1.0, run.TAGGING_VARIANTS[:1], breakdown=False,
                         reference_variants=("eager",))
    (row,) = rows
    (trainer,), (step,), ((hf, pt, hf_loss),) = trainers, steps, hf_side
    # the row timed the Trainer's own step function
    assert len(timed) == 1 and timed[0]["ours"] is step and step.function is trainer._step
    assert isinstance(trainer.model, XLNetTagger) and trainer.model.num_labels == run.TAGGING_LABELS == 12
    assert trainer.loss_fn is finetuning.task_loss_fn and traced  # the tagger's loss, traced into the step
    assert trainer.fused_step and trainer.config.jit_compile and trainer.optimizer.global_clipnorm == 1.0
    assert isinstance(hf, transformers.XLNetForTokenClassification) and hf.config.num_labels == 12
    labels = step.features["label_ids"].numpy()
    assert np.array_equal(pt["labels"].numpy(), labels) and set(labels[labels < 0]) == {-100}
    assert step.losses[0] == pytest.approx(hf_loss, rel=1e-4)  # same weights, same loss
    assert row["suite"] == "tagging_step" and row["variant"] == run.PRODUCTION.name
    assert (row["batch"], row["seq_len"], row["n_layer"], row["d_model"], row["num_labels"]) == (2, 16, 1, 64, 12)
    assert 0.5 <= row["labelled_fraction"] == round(float((labels >= 0).mean()), 3) <= 0.9
    _check_reference(row, ["hf_eager"])
    assert row["ours_ms"] > 0 and np.isfinite(step())

    data = run.tagging_inputs(50, 64, 128)  # the full-size mix: ~70% of positions labelled
    assert 0.65 < (data["label_ids"] >= 0).mean() < 0.75
    assert (data["label_ids"][:, -2:] == -100).all() and (data["segment_ids"][:, -1] == 2).all()
    assert set(np.unique(data["label_ids"][data["label_ids"] >= 0])) == set(range(12))
    assert {k: tf.constant(v).dtype for k, v in data.items()} == {
        "input_ids": tf.int32, "segment_ids": tf.int32, "attention_mask": tf.float32, "label_ids": tf.int32,
        "word_ids": tf.int32, "is_max_context": tf.int32, "example_index": tf.int32, "window_index": tf.int32,
        "is_real_example": tf.float32}


def test_runner_settings_are_the_recipes(tmp_path):
    from bench.speed import ours
    from run import common_flags

    for kind, lr, wd, eps in (("plm", 5e-4, 0.01, 1e-6), ("classifier", 2e-5, 0.01, 1e-6),
                              ("tagger", 5e-5, 0.01, 1e-6)):
        fv = ours.runner_settings(kind, str(tmp_path), 4)
        opt, loop = common_flags.optimizer_settings(fv), common_flags.loop_config(fv, seq_len=16)
        assert (opt.learning_rate, opt.weight_decay, opt.adam_epsilon, opt.clip) == (lr, wd, eps, 1.0), kind
        assert loop.jit_compile and loop.global_batch_size == 4 and fv.mixed_precision == "float32", kind


def test_host_loop_row_on_a_virtual_clock(monkeypatch):
    """HF's side of the train_loop row (examples/s per loop, memories carried) and the row: steady rates
    exclude the first loop, the fastest variant is the reference, ratio = ours / reference examples/s."""
    from bench.speed import harness as run

    clock = [0.0]
    monkeypatch.setattr(run.time, "perf_counter", lambda: clock[0])
    seen = []

    def step(batch, mems):
        seen.append((batch, mems))
        clock[0] += 1.0 if batch == 0 else 0.25  # the first call compiles
        return mems + 1

    rates = run.loop_rates(step, list(range(6)), 3, 4, 0)
    assert rates == [4 * 3 / 1.5, 4 * 3 / 0.75] and [m for _, m in seen] == list(range(6))
    assert run.steady_rate([1.0, 10.0, 30.0]) == 20.0
    with pytest.raises(ValueError, match="at least 2"):
        run.steady_rate([5.0])
    row = run.train_loop_row({"suite": "train_loop"}, 4, [1.0, 40.0, 40.0],
                             {"hf_eager": [1.0, 10.0, 10.0], "hf_compile": [0.1, 20.0, 20.0]},
                             {"hf_other": "RuntimeError: no"})
    assert row["reference_variant"] == "hf_compile" and row["reference_examples_per_s"] == 20.0
    assert row["ratio"] == 2.0 and row["examples_per_s"] == 40.0 and row["ours_ms"] == 100.0
    assert row["reference_ms"] == 200.0 and row["reference_failures"] == {"hf_other": "RuntimeError: no"}


def test_quick_mode_settings():
    """--quick fills every setting left unset with its quick value and lists what that skips; a flag given
    wins; the emulated mixed_bfloat16 A/B variants stay out on a CPU without bfloat16 arithmetic."""
    from bench import cli
    from bench.speed import harness as run

    def parse(*argv):
        return cli.parse(run.FLAGS, run.define_flags, argv)

    args = parse("--quick")
    skipped = run.resolve_settings(args, native_bfloat16=False)
    assert {k: getattr(args, k) for k in run.QUICK} == run.QUICK
    assert skipped == [run.QUICK_SKIPS[k] for k in run.FULL if run.QUICK[k] != run.FULL[k]]
    assert args.suite == "pretrain_step,finetune_step,tagging_step,train_loop" and not args.ab
    assert not args.base_config

    args = parse("--quick", "--ab", "--repeats=7", "--suite=finetune_step")
    skipped = run.resolve_settings(args, native_bfloat16=False)
    assert args.ab and args.repeats == 7 and args.suite == "finetune_step" and args.seq_lens == "128"
    assert run.QUICK_SKIPS["ab"] not in skipped and run.QUICK_SKIPS["repeats"] not in skipped
    assert any("mixed_bfloat16" in s for s in skipped)
    assert not any("mixed_bfloat16" in s for s in run.resolve_settings(parse("--quick", "--ab"), native_bfloat16=True))

    rows = [{"suite": "finetune_step", "variant": run.PRODUCTION.name, "reference_variant": "hf_eager"},
            {"suite": "pretrain_step", "variant": run.PRODUCTION.name, "reference_variant": "hf_compile"}]
    noted = []
    assert run.quick_loop_variants(True, rows, ("eager", "compile"), noted) == ("compile",) and len(noted) == 1
    assert run.quick_loop_variants(True, rows[:1], ("eager", "compile"), noted) == ("eager", "compile")
    assert run.quick_loop_variants(False, rows, ("eager", "compile"), noted) == ("eager", "compile")
    assert len(noted) == 1

    args = parse()
    assert run.resolve_settings(args, native_bfloat16=False) == [] and args.repeats == 5 and args.ab
    names = [v.name for v in run.without_emulated_bfloat16(run.PLM_VARIANTS, False)]
    float32 = [v for v in run.PLM_VARIANTS if v.mixed_precision != "bfloat16"]
    assert len(names) == len(float32) < len(run.PLM_VARIANTS) and not any("bfloat16" in n for n in names)
    assert run.without_emulated_bfloat16(run.FINETUNE_VARIANTS, True) == run.FINETUNE_VARIANTS


def test_quick_report_names_what_it_skipped_and_the_cpu(tmp_path):
    from bench.speed import harness as run

    machine = {"cpu": "AMD EPYC", "cpu_kind": "AVX2", "vector_extensions": "avx avx2 fma", "native_bfloat16": False,
               "cores": 2, "memory_gib": 8.0, "platform": "Linux", "python": "3.11", "tensorflow": "2.21",
               "torch": "2.13", "torch_threads": 2, "transformers": "4.57", "gpus": []}
    peak = {"float32": {"backends": {"tf_xla": {"1024": 90.0}, "numpy": {"1024": 100.0}}, "best": 100.0,
                        "best_backend": "numpy", "best_n": 1024}}
    skipped = [run.QUICK_SKIPS["ab"], run.QUICK_SKIPS["base_config"]]
    row = run.train_loop_row({"suite": "train_loop", "variant": "loop", "batch": 4, "seq_len": 16, "n_layer": 1,
                              "d_model": 64}, 4, [1.0, 40.0], {"hf_eager": [1.0, 10.0]}, {})
    report = {"machine": machine, "reference": {"variants": ["hf_eager"], "flush_denormal": True, "compile": None},
              "quick": skipped, "peak_gflops": peak, "rows": [row], "wall_s": 60.0,
              "command": "python -m bench.speed.harness --quick --noab"}
    md = run.write_report(report, str(tmp_path))
    assert "(AVX2; vector extensions: avx avx2 fma; bfloat16 emulated" in md
    assert "Command: `python -m bench.speed.harness --quick --noab`" in md
    assert "Quick mode (--quick)" in md and all(s in md for s in skipped)
    assert "train_loop: examples/s of a real short run" in md and md.count("\n| train_loop |") == 1
    assert json.load(open(tmp_path / "report.json"))["quick"] == skipped


def test_vector_extensions_and_cpu_kind():
    from bench import host as run  # bench/host.py: shared by every report

    cpuinfo = ("processor\t: 0\nflags\t\t: fpu sse2 avx2 fma avx avx512f avx512_bf16 amx_tile fma4 sha_ni\n"
               "processor\t: 1\nflags\t\t: fpu avx2\n")
    assert run.vector_extensions(cpuinfo) == "amx_tile avx avx2 avx512_bf16 avx512f fma fma4"
    assert run.cpu_kind(run.vector_extensions(cpuinfo)) == "AMX"
    assert run.cpu_kind("avx avx2 avx512f fma") == "AVX-512"
    assert run.cpu_kind("avx avx2 fma") == "AVX2" and run.cpu_kind("avx") == "other" and run.cpu_kind("") == "other"
    assert run.vector_extensions("") == ""
    assert run.native_bfloat16("avx avx2 avx512_bf16 avx512f") and run.native_bfloat16("amx_bf16 amx_tile")
    assert not run.native_bfloat16("avx avx2 fma") and not run.native_bfloat16("")


def test_report_command_runs_again(monkeypatch):
    """A report's command parses back to the same flag values (bench/cli.py): every flag of the script, a list
    joined by commas, a true boolean as its bare flag, a false one as --noname only where it was given (a
    tri-state flag's False is not its default None), values with spaces quoted; `invocation` is the command as
    typed."""
    import shlex

    from absl import flags

    from bench import cli

    def define(fv):
        d = cli.Definer(fv)
        d.bool("torch_compile", False, "")
        d.bool("quick", False, "")
        d.bool("ab", None, "")
        d.list("ways", ["ours_xla", "hf_mems"], "")
        d.string("output", None, "")
        d.string("label", "a b", "")
        d.integer("repeats", 3, "")

    fv = cli.parse(flags.FlagValues(), define, ["--torch_compile", "--ways=ours_xla", "--noab"])
    line = cli.command_line("bench.speed.generation_speed", fv)
    assert line == ("python -m bench.speed.generation_speed --torch_compile --noab --ways=ours_xla '--label=a b' "
                    "--repeats=3")
    again = cli.parse(flags.FlagValues(), define, shlex.split(line)[3:])
    assert again.flag_values_dict() == fv.flag_values_dict()
    monkeypatch.setattr(sys, "argv", ["harness.py", "--quick", "--noab", "--output_dir=out dir"])
    typed = "python -m bench.speed.harness --quick --noab '--output_dir=out dir'"
    assert cli.invocation("bench.speed.harness") == typed


@pytest.mark.slow  # the benchmark CLI; the default run keeps test_benchmark_times_the_trainers_own_step
def test_quick_mode_end_to_end(tmp_path):
    """--quick at a tiny size: the headline rows (pretraining step, fine-tuning and tagging steps, host loop)
    and a report that says what quick mode skipped."""
    cmd = [sys.executable, "-m", "bench.speed.harness", "--quick", "--n_layer=1",
           "--d_model=64", "--batch=2", "--seq_lens=16", "--peak_sizes=64,128", "--reference_variants=eager",
           f"--output_dir={tmp_path}"]
    subprocess.run(cmd, check=True, capture_output=True, text=True, timeout=1200, cwd=data_fixtures.REPO_ROOT)
    report, md = json.load(open(tmp_path / "report.json")), open(tmp_path / "report.md").read()
    assert [r["suite"] for r in report["rows"]] == ["pretrain_step", "finetune_step", "tagging_step", "train_loop"]
    for r in report["rows"]:
        _check_reference(r, ["hf_eager"])
    assert set(report["peak_gflops"]) == {"float32"} and report["quick"] and "Quick mode (--quick)" in md
    assert "breakdown_ms" not in report["rows"][0] and report["args"]["repeats"] == 3


@pytest.mark.slow
def test_compiled_reference(tmp_path):
    """HF under torch.compile next to eager: both timed (or compile's failure recorded) and the ratio against
    the faster, in the training-step and the serving rows."""
    report, md = _run(tmp_path, "--suite=finetune_step,serving", "--reference_variants=eager,compile")
    rows = [r for r in report["rows"] if r["suite"] in ("finetune_step", "serving")]
    from bench.speed import harness

    assert len(rows) == len(harness.FINETUNE_VARIANTS) + 1 and "hf_compile: torch.compile" in md
    for r in rows:
        _check_reference(r, ["hf_eager", "hf_compile"])
    for r in rows:
        assert "hf_compile" in r.get("reference_failures", {}) or r["reference_compile_s"]["hf_compile"] > 0


STEP_HLO = """
ENTRY %main {
  %arg0.1 = f32[160,32000]{1,0} parameter(0)
  %arg1.1 = f32[32000,768]{1,0} parameter(1)
  %dot.55 = f32[160,768]{1,0} dot(%arg0.1, %arg1.1), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  %dot.11 = f32[12,1024,320]{2,1,0} dot(%q.1, %k.1), lhs_batch_dims={0}, lhs_contracting_dims={2}, rhs_batch_dims={0}, rhs_contracting_dims={1}
  %q.1 = f32[12,1024,64]{2,1,0} parameter(2)
  %k.1 = f32[12,64,320]{2,1,0} parameter(3)
  %add_fusion.3 = f32[160,768]{1,0} fusion(%dot.55), kind=kLoop, calls=%fused_add
}
"""


def test_step_profile_sums_thunks_by_kind_and_rates_dots():
    """bench/speed/step_profile.py's arithmetic: thunk kinds from the HLO opcodes (wrapped single-op fusions by their
    operation), dot FLOPs from shapes and contracting dims (batch dims counted once), rates per dot."""
    from bench.speed import step_profile

    flops = step_profile.dot_flops(STEP_HLO)
    assert flops == {"dot.55": 2 * 160 * 768 * 32000, "dot.11": 2 * 12 * 1024 * 320 * 64}
    thunks = {"dot.55": 100.0, "dot.11": 5.0, "add_fusion.3": 20.0, "wrapped_reduce-window.2": 7.5}
    s = step_profile.summarize(thunks, STEP_HLO, top=2)
    assert s["by_kind"] == {"dot": 105.0, "fusion": 20.0, "reduce-window": 7.5} and s["total_ms"] == 132.5
    assert abs(s["dots"]["gflop"] - (flops["dot.55"] + flops["dot.11"]) / 1e9) < 1e-9
    assert [d["name"] for d in s["slowest_dots"]] == ["dot.55", "dot.11"]  # 78.6 and 100.7 GFLOP/s
    assert abs(s["slowest_dots"][0]["gflop_per_s"] - flops["dot.55"] / 0.1 / 1e9) < 1e-6
    assert [t["name"] for t in s["top"]] == ["dot.55", "add_fusion.3"] and "lhs_contracting_dims={1}" in s["top"][0]["hlo"]


def test_generation_profile_reports_a_real_calls_thunks(tmp_path):
    """bench/speed/generation_profile.py end to end on a tiny model: the profiled call's thunks are found on the
    intra-op threads and matched to the optimized HLO of the generation program (its while loop's dots)."""
    out = str(tmp_path / "profile")
    cmd = [sys.executable, "-m", "bench.speed.generation_profile", "--n_layer=1",
           "--d_model=64", "--n_token=100", "--prompt_len=8", "--new_tokens=4", "--repeats=1", "--top=5",
           f"--output={out}"]
    subprocess.run(cmd, check=True, capture_output=True, text=True, timeout=600, cwd=data_fixtures.REPO_ROOT)
    with open(out + ".json", encoding="utf-8") as f:
        report = json.load(f)
    s = report["summary"]
    assert s["total_ms"] > 0 and s["by_kind"].get("dot", 0) > 0, s["by_kind"]
    assert len(s["top"]) == 5 and all(t["hlo"] for t in s["top"])  # every listed thunk named in the HLO
    assert report["config"]["new_tokens"] == 4 and report["best_s"] > 0
    assert "ms per new token" in open(out + ".md", encoding="utf-8").read()


def test_step_ab_puts_the_reference_methods_in_place_and_restores_them(tmp_path):
    """bench/speed/step_ab.py's patcher: functions and methods whose source differs take the reference's (a method's
    zero-argument super() still works on the working tree's class), identical ones stay, and all is restored."""
    import importlib.util
    import sys
    import types

    from bench.speed import step_ab

    def load(name, text):
        path = tmp_path / f"{name}.py"
        path.write_text(text)
        spec = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
        return module

    base = "import functools\n\n\nclass Base:\n    def f(self):\n        return 10\n\n\n"
    decorated = "\n\ndef _make(v):\n    @functools.lru_cache\n    def k():\n        return v\n    return k\n\n\nk = _make({!r})\n"
    current = load("step_ab_current", base + "class A(Base):\n    def f(self):\n        return super().f() + 1\n\n"
                   "    def g(self):\n        return 'same'\n\n\ndef h():\n    return 'new'\n" + decorated.format("new"))
    reference = load("step_ab_reference", base + "class A(Base):\n    def f(self):\n        return super().f() + 2\n\n"
                     "    def g(self):\n        return 'same'\n\n\ndef h():\n    return 'old'\n" + decorated.format("old"))
    g = current.A.g
    alias = types.ModuleType("xlnet_tf._step_ab_test_alias")  # a package re-exporting h, as xlnet_tf.serving
    alias.exported_h = current.h
    alias.unset = None  # a module-level None (a lazily set cache) is left as it is
    sys.modules[alias.__name__] = alias
    try:
        with step_ab.patched(current, reference) as names:  # k: made by a closure, as activations.gelu_tanh
            assert sorted(names) == ["A.f", "step_ab_current.h", "step_ab_current.k"]
            assert current.A().f() == 12 and current.h() == "old" and current.A.g is g and current.k() == "old"
            assert alias.exported_h() == "old"
            alias.lazily_exported_h = current.h  # a lazy export first read inside: the reference's
        assert current.A().f() == 11 and current.h() == "new" and current.k() == "new"
        assert alias.exported_h() == "new"
        assert not hasattr(alias, "lazily_exported_h")  # unbound on exit, to be resolved afresh
        assert alias.unset is None
    finally:
        del sys.modules[alias.__name__]
    with pytest.raises(ValueError, match="not a file under xlnet_tf/"):
        step_ab.module_name("bench/speed/harness.py")
    assert step_ab.module_name("xlnet_tf/layers/attention.py") == "xlnet_tf.layers.attention"


def test_step_ab_refuses_a_module_that_differs_in_nothing_it_swaps(tmp_path):
    """A module whose only change is something `patched` does not swap (here a constant) would be timed against
    itself: refused, naming the file; a module equal to the reference, or one with a replaced function, passes."""
    from bench.speed import step_ab
    from xlnet_tf.errors import UserError

    def write(name, text):
        path = tmp_path / name
        path.write_text(text)
        return str(path)

    constant = "SCALE = {}\n\n\ndef g(x):\n    return x * SCALE\n"
    ref, same, changed = write("ref.py", constant.format(1)), write("same.py", constant.format(1)), \
        write("changed.py", constant.format(2))
    step_ab.check_something_replaced("xlnet_tf/m.py", "HEAD", ref, same, [])
    step_ab.check_something_replaced("xlnet_tf/m.py", "HEAD", ref, changed, ["m.h"])
    with pytest.raises(UserError, match="xlnet_tf/m.py differs from HEAD only in what step_ab does not swap"):
        step_ab.check_something_replaced("xlnet_tf/m.py", "HEAD", ref, changed, [])


def test_step_ab_times_the_bfloat16_fusible_step_only_with_its_xla_flags(monkeypatch):
    """step_ab --variant=bfloat16_fusible is harness.py's BFLOAT16_FUSIBLE, refused in a process without the fusible
    TF_XLA_FLAGS (its clustering would silently be off and the A/B would time another step)."""
    from absl import flags

    from bench.speed import harness, ours, step_ab
    from xlnet_tf.errors import UserError
    from xlnet_tf.training import xla_clustering

    fv = flags.FlagValues()
    step_ab.define_flags(fv)
    fv(["step_ab"])
    monkeypatch.setattr(step_ab, "FLAGS", fv)
    assert step_ab.variant_of_flags() is ours.PRODUCTION
    fv.variant = "bfloat16_fusible"
    monkeypatch.setenv("TF_XLA_FLAGS", "--tf_xla_auto_jit=2")
    with pytest.raises(UserError, match="--variant=bfloat16_fusible: start the process with TF_XLA_FLAGS"):
        step_ab.variant_of_flags()
    monkeypatch.setenv("TF_XLA_FLAGS", xla_clustering.with_fusible_flags(""))
    assert step_ab.variant_of_flags() is harness.BFLOAT16_FUSIBLE


def test_step_ab_serving_side_is_the_loaded_export_with_the_reference_weights():
    """step_ab --kind=serving: each side a classifier's SavedModel `from_ids` signature, loaded again; the working
    tree's side takes the reference side's weights, so with the same code the two give the same logits, and with
    other weights they differ (the comparison can fail)."""
    import numpy as np

    from bench.speed import step_ab
    from tests import data_fixtures

    sizes = dict(batch=2, seq_len=16, n_layer=1, d_model=64, n_token=data_fixtures.TINY_VOCAB,
                 spiece_model=data_fixtures.tiny_spm())
    reference = step_ab.ServingCall("float32", **sizes)
    assert reference().shape == (2, 2)
    same = step_ab.ServingCall("float32", like=reference, **sizes)
    assert same.largest_difference(reference) == 0.0
    other = step_ab.ServingCall("float32", **sizes)  # its own random weights
    assert other.largest_difference(reference) > 0.0
    assert np.isfinite(other()).all()


def test_bfloat16_autocast_joins_the_reference_only_where_the_cpu_has_bfloat16():
    from bench.speed import harness

    assert harness.default_reference_variants(True) == ("eager", "compile", "eager_bf16", "compile_bf16")
    assert harness.default_reference_variants(False) == ("eager", "compile")
    settings = harness.reference_settings(("eager", "eager_bf16"), True)
    assert settings["autocast_bfloat16"] == harness.AUTOCAST_NOTE and settings["compile"] is None
    assert "not timed" in harness.reference_settings(("eager",), False)["autocast_bfloat16"]
    assert harness.reference_settings(("eager",), True)["autocast_bfloat16"] is None


def test_a_bfloat16_variant_runs_under_autocast_and_stands_only_if_it_keeps_the_loss():
    import torch
    import transformers

    from bench.speed import harness

    builders = harness._variant_builders(lambda compiled: lambda: torch.is_autocast_enabled("cpu"),
                                         ("eager", "eager_bf16"))
    assert {name: build()() for name, build in builders.items()} == {"hf_eager": False, "hf_eager_bf16": True}
    assert not torch.is_autocast_enabled("cpu")  # the state is set around the call only

    torch.manual_seed(0)
    hf = transformers.XLNetForSequenceClassification(transformers.XLNetConfig(
        vocab_size=50, d_model=32, n_layer=1, n_head=2, d_inner=64, num_labels=3))
    pt = {"input_ids": torch.randint(0, 50, (2, 8)), "labels": torch.tensor([0, 2])}
    assert harness.bfloat16_accuracy(hf, pt, ("eager",)) == {}
    accuracy = harness.bfloat16_accuracy(hf, pt, ("eager", "eager_bf16"))
    assert accuracy["loss_float32"] > 0 and accuracy["relative"] <= harness.BF16_LOSS_TOLERANCE and accuracy["accepted"]
    names = ("eager", "compile", "eager_bf16", "compile_bf16")
    assert harness.accepted_variants(names, accuracy) == names
    assert harness.accepted_variants(names, {**accuracy, "accepted": False}) == ("eager", "compile")
    logits = harness.bfloat16_logits(hf, {"input_ids": pt["input_ids"]}, names)
    assert 0 <= logits["logits_relative_l2"] < 0.05 and 0 <= logits["top1_agreement"] <= 1


@pytest.mark.slow
def test_bfloat16_reference_end_to_end(tmp_path):
    """Where the CPU has bfloat16 arithmetic: HF eager under bfloat16 autocast timed beside float32 in a step row
    and the serving row, its accuracy check in the row; elsewhere the harness refuses the variant in one line."""
    from bench.host import describe

    if not describe()["native_bfloat16"]:
        cmd = [sys.executable, "-m", "bench.speed.harness", "--suite=finetune_step", "--reference_variants=eager_bf16",
               f"--output_dir={tmp_path}"]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600, cwd=data_fixtures.REPO_ROOT)
        assert proc.returncode == 2 and "no bfloat16 arithmetic" in proc.stderr.strip().splitlines()[-1]
        return
    report, md = _run(tmp_path, "--suite=finetune_step,serving", "--noab", "--reference_variants=eager,eager_bf16")
    for r in report["rows"]:
        _check_reference(r, ["hf_eager", "hf_eager_bf16"])
    step = next(r for r in report["rows"] if r["suite"] == "finetune_step")
    assert step["bfloat16_accuracy"]["accepted"]
    serving = next(r for r in report["rows"] if r["suite"] == "serving")
    assert "logits_relative_l2" in serving["bfloat16_accuracy"] and "bfloat16 autocast" in md


def test_op_profile_sums_events_per_step_by_type_name_and_thread():
    """bench/speed/op_profile.py's arithmetic: an event's type after the last colon (a thunk or runtime event as it is),
    per-step sums on TensorFlow's threads only, the longest names first."""
    from bench.speed import op_profile

    events = [("tf_Compute/1", "model/ff/MatMul:_MklMatMul", 30.0), ("tf_Compute/2", "model/ff/MatMul:_MklMatMul", 10.0),
              ("tf_Compute/1", "cluster_3_1/xla_run:_XlaRun", 6.0), ("tf_numa_-1_Eigen/7", "convert_fusion", 3.0),
              ("tf_Compute/2", "a/b:c/Sum:Sum", 2.0), ("python", "Trace", 100.0)]
    s = op_profile.summarize(events, steps=2, top=2)
    assert s["by_type"] == {"_MklMatMul": 20.0, "_XlaRun": 3.0, "convert_fusion": 1.5, "Sum": 1.0}
    assert s["by_thread"] == {"tf_Compute/1": 18.0, "tf_Compute/2": 6.0, "tf_numa_-1_Eigen/7": 1.5}
    assert s["top"] == [{"name": "model/ff/MatMul:_MklMatMul", "type": "_MklMatMul", "ms": 20.0},
                        {"name": "cluster_3_1/xla_run:_XlaRun", "type": "_XlaRun", "ms": 3.0}]
