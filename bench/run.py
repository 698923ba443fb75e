"""Benchmark harness: our XLNet vs Hugging Face's PyTorch XLNet, side by side in one process.

  python bench/run.py --suite=pretrain_step|finetune_step|serving|builder|all --output_dir=bench_output

Every row carries the absolute figures of both implementations and `ratio` = reference time / our time
(> 1 = we are faster), measured in the same run at identical shapes and weights. The machine description
and its measured dense matmul peak (float32 and bfloat16, XLA) head the report; model FLOP utilisation
(MFU) = achieved training FLOP/s / measured float32 peak. Writes `report.json` and `report.md`.
Timings are medians after warm-up; run on a quiet machine (concurrent load changes them up to 2x).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

SUITES = ("pretrain_step", "finetune_step", "serving", "builder")


def median_ms(fn, repeats: int, warmup: int = 2) -> float:
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return 1000.0 * float(np.median(times))


def machine() -> dict:
    cpu = ""
    if os.path.exists("/proc/cpuinfo"):
        cpu = next((line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo") if "model name" in line), "")
    import torch

    return {"platform": platform.platform(), "cpu": cpu, "cores": os.cpu_count(), "python": platform.python_version(),
            "tensorflow": tf.__version__, "torch": torch.__version__,
            "gpus": [d.name for d in tf.config.list_physical_devices("GPU")]}


def matmul_peak(dtype: str, n: int = 2048, repeats: int = 10) -> float:
    """Dense matmul GFLOP/s (XLA), the denominator of MFU."""
    a = tf.random.normal([n, n], dtype=tf.float32)
    a = tf.cast(a, dtype)
    f = tf.function(lambda x: tf.matmul(x, x), jit_compile=True)
    ms = median_ms(lambda: f(a).numpy(), repeats)
    return 2 * n ** 3 / (ms / 1000) / 1e9


def train_flops(config, batch: int, seq_len: int, num_predict: int = 0) -> float:
    """Approximate FLOPs of one forward+backward (3x forward) step: projections, attention scores and
    values, feed-forward, positional projection, LM head over the predicted tokens."""
    d, h, dh, di, n = config.d_model, config.n_head, config.d_head, config.d_inner, config.n_layer
    tokens = batch * seq_len
    per_layer = 2 * tokens * d * h * dh * 4 + 2 * tokens * d * di * 2
    per_layer += 2 * 2 * batch * h * seq_len * (2 * seq_len) * dh  # ac + bd (P = 2L positions)
    per_layer += 2 * batch * h * seq_len * seq_len * dh  # prob @ v
    if num_predict:
        q_tokens = batch * num_predict
        per_layer += 2 * q_tokens * d * h * dh * 2 + 2 * q_tokens * d * di * 2
        per_layer += 3 * 2 * batch * h * num_predict * (2 * seq_len) * dh
    forward = n * per_layer + (2 * batch * num_predict * d * config.n_token if num_predict else 0)
    return 3.0 * forward


def _pair(config, model_kind: str):
    import transformers

    from tests.parity_utils import hf_config
    from xlnet_tf import checkpoints
    from xlnet_tf.models import XLNetClassifier, XLNetPretrainer

    cfg = hf_config(config)
    if model_kind == "plm":
        hf = transformers.XLNetLMHeadModel(cfg)
        ours = XLNetPretrainer(config)
    else:
        cfg.num_labels = 2
        hf = transformers.XLNetForSequenceClassification(cfg)
        ours = XLNetClassifier(config, num_labels=2, task_name="hf")
    checkpoints.load_hf_weights(ours, {k: v.detach().numpy() for k, v in hf.state_dict().items()}, require_heads=True)
    return hf, ours


def _inputs(config, batch, seq_len, num_predict):
    rng = np.random.RandomState(0)
    mapping = np.zeros((batch, num_predict, seq_len), np.float32)
    for b in range(batch):
        mapping[b, np.arange(num_predict), np.sort(rng.choice(seq_len, num_predict, replace=False))] = 1
    return {"input_ids": rng.randint(0, config.n_token, (batch, seq_len)).astype(np.int32),
            "segment_ids": np.zeros((batch, seq_len), np.int32), "attention_mask": np.ones((batch, seq_len), np.float32),
            "perm_mask": (rng.rand(batch, seq_len, seq_len) > 0.5).astype(np.float32), "target_mapping": mapping,
            "target_ids": rng.randint(0, config.n_token, (batch, num_predict)).astype(np.int32),
            "target_mask": np.ones((batch, num_predict), np.float32), "label": rng.randint(0, 2, batch).astype(np.int32)}


def step_rows(kind: str, config, batch: int, seq_len: int, num_predict: int, repeats: int, peak: float, variants):
    """Training steps (forward + backward + AdamW) of ours (each variant) and HF at the same shapes."""
    import keras
    import torch

    from xlnet_tf import optimization

    torch.set_num_threads(os.cpu_count())
    hf, ours = _pair(config, kind)
    data = _inputs(config, batch, seq_len, num_predict)
    feats = {k: tf.constant(v) for k, v in data.items()}
    pt = {"input_ids": torch.tensor(data["input_ids"]).long(), "token_type_ids": torch.tensor(data["segment_ids"]).long(),
          "attention_mask": torch.tensor(data["attention_mask"])}
    if kind == "plm":
        pt.update(perm_mask=torch.tensor(data["perm_mask"]), target_mapping=torch.tensor(data["target_mapping"]),
                  labels=torch.tensor(data["target_ids"]).long())
    else:
        pt["labels"] = torch.tensor(data["label"]).long()
    hf.train()
    opt_pt = torch.optim.AdamW(hf.parameters(), lr=1e-5)

    def hf_step():
        opt_pt.zero_grad(set_to_none=True)
        hf(**pt).loss.backward()
        opt_pt.step()

    hf_ms = median_ms(hf_step, repeats)
    flops = train_flops(config, batch, seq_len, num_predict if kind == "plm" else 0)
    rows = []
    for name, jit, policy, query_stream in variants:
        from xlnet_tf.models import XLNetClassifier, XLNetPretrainer

        keras.utils.set_random_seed(0)
        model = (XLNetPretrainer(config, dtype=policy) if kind == "plm"
                 else XLNetClassifier(config, num_labels=2, task_name="hf", dtype=policy))
        model.set_weights(ours.get_weights())
        if kind == "plm":
            model.backbone.query_stream = query_stream
        opt = optimization.create_optimizer(model, learning_rate=1e-5, train_steps=1000)
        opt.build(model.trainable_variables)

        def loss_fn():
            out = model(feats, training=True)
            return model.compute_plm_loss(feats, out) if kind == "plm" else model.compute_loss(feats, out)

        @tf.function(jit_compile=jit)
        def grads():
            with tf.GradientTape() as tape:
                loss = loss_fn()
            return loss, tape.gradient(loss, model.trainable_variables)

        @tf.function
        def step():
            loss, g = grads()
            g = [tf.zeros_like(v) if x is None else tf.convert_to_tensor(x) for x, v in zip(g, model.trainable_variables)]
            opt.apply_gradients(zip(g, model.trainable_variables))
            return loss

        ms = median_ms(lambda: step().numpy(), repeats)
        rows.append({"suite": f"{kind}_step", "variant": name, "batch": batch, "seq_len": seq_len,
                     "n_layer": config.n_layer, "d_model": config.d_model, "ours_ms": round(ms, 1),
                     "reference_ms": round(hf_ms, 1), "ratio": round(hf_ms / ms, 3),
                     "tokens_per_s": round(batch * seq_len / (ms / 1000), 1),
                     "mfu_fp32": round(flops / (ms / 1000) / 1e9 / peak, 3)})
        print(json.dumps(rows[-1]), flush=True)
    return rows


def serving_rows(config, batch: int, seq_len: int, repeats: int):
    """SavedModel `from_ids` (fresh load) vs HF PyTorch eager inference, batch `batch`."""
    import torch

    from tests import data_fixtures
    from xlnet_tf import serving

    hf, ours = _pair(config, "classifier")
    hf.eval()
    data = _inputs(config, batch, seq_len, 1)
    with tempfile.TemporaryDirectory() as tmp:
        path = serving.export(ours, "classifier", data_fixtures.tiny_spm(), tmp, 1, seq_len, text_pair=True)
        fn = tf.saved_model.load(path).signatures["from_ids"]
        args = {k: tf.constant(data[k]) for k in ("input_ids", "segment_ids", "attention_mask")}
        ms = median_ms(lambda: fn(**args)["logits"].numpy(), repeats)
    pt = {"input_ids": torch.tensor(data["input_ids"]).long(), "token_type_ids": torch.tensor(data["segment_ids"]).long(),
          "attention_mask": torch.tensor(data["attention_mask"])}

    def hf_infer():
        with torch.no_grad():
            return hf(**pt).logits.numpy()

    hf_ms = median_ms(hf_infer, repeats)
    row = {"suite": "serving", "variant": "SavedModel from_ids vs HF eager", "batch": batch, "seq_len": seq_len,
           "n_layer": config.n_layer, "d_model": config.d_model, "ours_ms": round(ms, 1),
           "reference_ms": round(hf_ms, 1), "ratio": round(hf_ms / ms, 3),
           "examples_per_s": round(batch / (ms / 1000), 1)}
    print(json.dumps(row), flush=True)
    return [row]


def builder_rows(corpus_glob: str):
    """The record builder and reader (bench/build_pretrain.py, seq_len 512)."""
    out = os.path.join(tempfile.mkdtemp(), "builder.json")
    cmd = [sys.executable, os.path.join(REPO, "bench", "build_pretrain.py"), f"--corpus_glob={corpus_glob}",
           "--processes=1,2", f"--out={out}"]
    subprocess.run(cmd, check=True)
    result = json.load(open(out))
    return [{"suite": "builder", "variant": "tfrecords/build_pretrain (seq 512)", "details": result}]


def write_report(report: dict, output_dir: str):
    os.makedirs(output_dir, exist_ok=True)
    with open(os.path.join(output_dir, "report.json"), "w") as f:
        json.dump(report, f, indent=2)
    lines = ["# xlnet_tf benchmarks", "", f"Machine: {json.dumps(report['machine'])}", "",
             f"Measured matmul peak (2048^2, XLA): float32 {report['peak_gflops']['float32']:.1f} GFLOP/s, "
             f"bfloat16 {report['peak_gflops']['bfloat16']:.1f} GFLOP/s", "",
             "| suite | variant | batch | seq | ours ms | reference ms | ratio | tokens/s or ex/s | MFU fp32 |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in report["rows"]:
        if "ours_ms" in r:
            speed = r.get("tokens_per_s", r.get("examples_per_s", ""))
            lines.append(f"| {r['suite']} | {r['variant']} | {r['batch']} | {r['seq_len']} | {r['ours_ms']} | "
                         f"{r['reference_ms']} | {r['ratio']} | {speed} | {r.get('mfu_fp32', '')} |")
        else:
            lines.append(f"| {r['suite']} | {r['variant']} | | | | | | {json.dumps(r['details'])[:200]} | |")
    with open(os.path.join(output_dir, "report.md"), "w") as f:
        f.write("\n".join(lines) + "\n")
    return "\n".join(lines)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--suite", default="all", choices=SUITES + ("all",))
    parser.add_argument("--output_dir", default="bench_output")
    parser.add_argument("--n_layer", type=int, default=4)
    parser.add_argument("--d_model", type=int, default=768)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--seq_lens", default="128")
    parser.add_argument("--num_predict", type=int, default=21)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--corpus_glob", default=os.path.join(REPO, "..", "shared", "data", "corpus", "train", "*.txt"))
    args = parser.parse_args()
    from xlnet_tf.config import XLNetConfig

    config = XLNetConfig(n_token=32000, n_layer=args.n_layer, d_model=args.d_model, n_head=args.d_model // 64,
                         d_head=64, d_inner=4 * args.d_model, dropout=0.0, dropatt=0.0)
    suites = SUITES if args.suite == "all" else (args.suite,)
    report = {"machine": machine(), "peak_gflops": {"float32": matmul_peak("float32"),
                                                    "bfloat16": matmul_peak("bfloat16")}, "rows": []}
    peak = report["peak_gflops"]["float32"]
    variants = [("XLA, float32, query at targets", True, "float32", "targets"),
                ("no XLA, float32", False, "float32", "targets"),
                ("XLA, float32, query full length (A/B)", True, "float32", "full"),
                ("XLA, mixed_bfloat16", True, "mixed_bfloat16", "targets")]
    for seq_len in [int(s) for s in args.seq_lens.split(",")]:
        if "pretrain_step" in suites:
            report["rows"] += step_rows("plm", config, args.batch, seq_len, args.num_predict, args.repeats, peak, variants)
        if "finetune_step" in suites:
            report["rows"] += step_rows("classifier", config, args.batch, seq_len, 0, args.repeats, peak, variants[:2])
    if "serving" in suites:
        report["rows"] += serving_rows(config, 32, 128, args.repeats)
    if "builder" in suites and os.path.exists(os.path.dirname(args.corpus_glob)):
        report["rows"] += builder_rows(args.corpus_glob)
    print(write_report(report, args.output_dir))


if __name__ == "__main__":
    main()
