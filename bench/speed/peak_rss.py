"""Peak resident memory of one pretraining step, one implementation per process.

  python -m bench.speed.peak_rss --impl=ours|hf --n_layer=4 --d_model=768 --batch=8 --seq_len=512 \
      --num_predict=85 --mem_len=256

Imports only the framework it measures (TensorFlow for `ours`, PyTorch for `hf`), builds the model (`--remat`:
ours with each layer rematerialized), records the resident set size, takes 3 training steps (forward, backward,
AdamW; ours: the step of the Trainer run/pretrain.py builds) and prints one JSON line: the process's peak RSS and the
peak growth during training. harness.py's `memory` suite runs it twice.
PyTorch runs with denormals flushed (`flush_denormals`), as wherever the benchmarks run HF.
"""

import json
import os
import resource
import time

import numpy as np
from absl import flags

from bench import cli  # absl and the flag conventions only: no TensorFlow or PyTorch
from xlnet_tf.errors import UserError

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
FLAGS = flags.FlagValues()  # defined by define_flags when the script runs, never at import


def define_flags(fv: flags.FlagValues = FLAGS):
    d = cli.Definer(fv)
    d.enum("impl", None, ["ours", "hf"], "The implementation measured: ours (TensorFlow) or hf (PyTorch).")
    d.integer("n_token", 32000, "Vocabulary size.")
    d.integer("n_layer", 4, "Layers.")
    d.integer("d_model", 768, "Model width (n_head = d_model / 64, d_inner = 4 x d_model).")
    d.integer("batch", 8, "Batch size.")
    d.integer("seq_len", 512, "Sequence length.")
    d.integer("num_predict", 85, "Predicted tokens per sequence.")
    d.integer("mem_len", 256, "Memory length.")
    d.bool("remat", False, "ours: rematerialize each layer (XLNetBackbone remat).")
    flags.mark_flag_as_required("impl", flag_values=fv)


def current_rss_mb() -> float:
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmRSS")) / 1024


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def inputs(n_token, n_layer, d_model, batch, seq_len, num_predict, mem_len, seed=0):
    """Random pretraining inputs (numpy) shared by harness.py and this script."""
    rng = np.random.RandomState(seed)
    mapping = np.zeros((batch, num_predict, seq_len), np.float32)
    for b in range(batch):
        mapping[b, np.arange(num_predict), np.sort(rng.choice(seq_len, num_predict, replace=False))] = 1
    data = {"input_ids": rng.randint(0, n_token, (batch, seq_len)).astype(np.int32),
            "segment_ids": (np.arange(seq_len)[None] >= seq_len // 2).repeat(batch, 0).astype(np.int32),
            "attention_mask": np.ones((batch, seq_len), np.float32),
            "perm_mask": (rng.rand(batch, seq_len, seq_len) > 0.5).astype(np.float32), "target_mapping": mapping,
            "target_ids": rng.randint(0, n_token, (batch, num_predict)).astype(np.int32),
            "target_mask": np.ones((batch, num_predict), np.float32),
            "label": rng.randint(0, 2, batch).astype(np.int32)}
    mems = [rng.randn(batch, mem_len, d_model).astype(np.float32) for _ in range(n_layer)] if mem_len else None
    return data, mems


def torch_inputs(data, mems, kind: str) -> dict:
    """HF keyword arguments from `inputs` (`kind` "plm" or a classifier); HF memories are [M, B, D]."""
    import torch

    pt = {"input_ids": torch.tensor(data["input_ids"]).long(), "token_type_ids": torch.tensor(data["segment_ids"]).long(),
          "attention_mask": torch.tensor(data["attention_mask"])}
    if kind == "plm":
        pt.update(perm_mask=torch.tensor(data["perm_mask"]), target_mapping=torch.tensor(data["target_mapping"]),
                  labels=torch.tensor(data["target_ids"]).long())
        if mems is not None:
            pt["mems"] = [torch.tensor(m.transpose(1, 0, 2)) for m in mems]
    else:
        pt["labels"] = torch.tensor(data["label"]).long()
    return pt


_FLUSHED = None  # flush_denormals' verdict, taken once per process


def flush_denormals() -> bool:
    """Flushes denormal floats to zero in PyTorch and returns whether every intra-op thread does.

    PyTorch computes with denormals by default (TensorFlow flushes them in its own thread pools), and the
    masked softmax of XLNet's attention produces them: HF eager was ~5x slower for it on one machine. The
    setting is per thread and a thread inherits it only when created, so this must run before PyTorch starts
    its thread pool (the first parallel op); the check multiplies a denormal tensor large enough to be split
    over every thread and expects zeros everywhere. Idempotent: the first call's verdict is kept.
    """
    global _FLUSHED
    if _FLUSHED is None:
        import torch

        supported = torch.set_flush_denormal(True)
        denormal = torch.full((1 << 22,), 1e-39)
        _FLUSHED = bool(supported) and bool(((denormal * 1.0) == 0).all())
    return _FLUSHED


def hf_train_step(hf, pt):
    """HF's training step: forward, backward, global-norm clipping, torch AdamW (denormals flushed)."""
    import torch

    flush_denormals()
    hf.train()
    opt = torch.optim.AdamW(hf.parameters(), lr=1e-5)

    def step():
        opt.zero_grad(set_to_none=True)
        hf(**pt).loss.backward()
        torch.nn.utils.clip_grad_norm_(hf.parameters(), 1.0)
        opt.step()

    return step


def hf_step(args, data, mems):
    import torch
    import transformers

    flush_denormals()  # before the thread pool starts (see there)
    torch.set_num_threads(os.cpu_count())
    # built here rather than with tests.parity_utils.hf_config, which would import TensorFlow
    cfg = transformers.XLNetConfig(vocab_size=args.n_token, d_model=args.d_model, n_layer=args.n_layer,
                                   n_head=args.d_model // 64, d_inner=4 * args.d_model, ff_activation="gelu_new",
                                   dropout=0.0, mem_len=args.mem_len or None, use_mems_train=bool(args.mem_len))
    return hf_train_step(transformers.XLNetLMHeadModel(cfg), torch_inputs(data, mems, "plm"))


def xla_heap_mb(dump_dir: str):
    """XLA's own account of the step program's memory: "Total bytes used" of its buffer assignment (every
    buffer the compiled step allocates, live ranges overlapped by the heap simulator; weights and optimizer
    slots included), in MiB; None when no dump was written."""
    import glob
    import re

    for path in sorted(glob.glob(os.path.join(dump_dir, "*replica_step*buffer-assignment.txt"))):
        with open(path, encoding="utf-8") as f:
            match = re.search(r"Total bytes used: (\d+)", f.read())
        if match:
            return round(int(match.group(1)) / 2 ** 20, 1)
    return None


def our_step(args, data, mems, xla_dump: str):
    """The production Trainer's step at `args`' size; XLA dumps the step's buffer assignment into `xla_dump` (read
    by xla_heap_mb)."""
    del mems  # ours: the Trainer's own memories (zeros, then carried from step to step), of the same shape
    import atexit
    import shutil
    import tempfile

    # set before TensorFlow loads
    os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + f" --xla_dump_to={xla_dump}"
                               " --xla_dump_hlo_module_re=.*replica_step.*").strip()
    import tensorflow as tf

    from bench.speed.ours import TrainerStep, bench_config, production_trainer

    config = bench_config(args.n_layer, args.d_model, args.mem_len, args.n_token)
    feats = {k: tf.constant(v) for k, v in data.items()}
    # the Trainer of run/pretrain.py and its per-batch step (memories: the Trainer's own, carried across steps)
    model_dir = tempfile.mkdtemp(prefix="xlnet_rss_")
    atexit.register(shutil.rmtree, model_dir, True)
    trainer = production_trainer("plm", config, args.batch, args.seq_len, model_dir)
    trainer.model.backbone.remat = args.remat  # before the step is traced (its first call)
    return TrainerStep(trainer, feats)


def main():
    if FLAGS.remat and FLAGS.impl != "ours":
        raise UserError("--remat: Hugging Face's XLNet has no gradient checkpointing")
    data, mems = inputs(FLAGS.n_token, FLAGS.n_layer, FLAGS.d_model, FLAGS.batch, FLAGS.seq_len, FLAGS.num_predict,
                        FLAGS.mem_len)
    xla_dump = None
    if FLAGS.impl == "hf":
        step = hf_step(FLAGS, data, mems)
    else:
        import atexit
        import shutil
        import tempfile

        xla_dump = tempfile.mkdtemp(prefix="xlnet_xla_dump_")
        atexit.register(shutil.rmtree, xla_dump, True)
        step = our_step(FLAGS, data, mems, xla_dump)
    built = current_rss_mb()
    times = []
    for _ in range(3):
        t0 = time.perf_counter()
        step()
        times.append(time.perf_counter() - t0)
    print(json.dumps({"impl": FLAGS.impl, "remat": FLAGS.remat, "peak_rss_mb": round(peak_rss_mb(), 1),
                      "rss_after_build_mb": round(built, 1),
                      "training_growth_mb": round(peak_rss_mb() - built, 1),
                      "step_s_after_first": round(min(times[1:]), 3),
                      **({"xla_heap_mb": xla_heap_mb(xla_dump)} if xla_dump else {})}))


if __name__ == "__main__":
    cli.run(FLAGS, define_flags, main)
