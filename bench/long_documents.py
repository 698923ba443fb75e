"""Whole documents with memories vs the first segment only: dev accuracy, an exact test, time and memory.

  python bench/long_documents.py --data_dir=/work/brown_full \
      --init_checkpoint=<plm_model>/final --model_config_path=<plm_model>/xlnet_config.json \
      --spiece_model=<work>/spiece.model --work_dir=bench_out/long_documents \
      --output=bench/results/long_documents_cpu

Two fine-tuning runs of run/run_classifier.py with the recipe `--flagfile` (default
run/flags/brown_genre_long.flags), the same model, initialization, steps, batch and learning rate: `whole`
as the recipe says (every segment of the document, memories), `first` with `--max_segments=1` (the first
`max_seq_length` tokens, today's truncation). `--learning_rates` (optional) first runs the `first` arm over
those rates and uses its best dev rate for both arms (the choice favours the baseline).

Reported: dev accuracy of each arm; the exact two-sided binomial (McNemar) test on the documents where
exactly one arm is right; training time per document (the runner's examples/s), inference time per document
(the same model shape timed in this process, both arms alternating, after compilation), and the peak
resident memory of each training process (ru_maxrss of the child, CPU). The report names the CPU and its
vector extensions.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from typing import Dict, List

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run_arm(args, name: str, extra: List[str]) -> Dict:
    """One fine-tuning run (resumable: a finished run is read back); its results, speed and peak RSS."""
    model_dir = os.path.join(args.work_dir, name)
    done = os.path.join(model_dir, "arm.json")
    if os.path.exists(done):
        with open(done, encoding="utf-8") as f:
            return json.load(f)
    if os.path.isdir(model_dir):
        import shutil

        shutil.rmtree(model_dir)
    cmd = [sys.executable, "run/run_classifier.py", f"--flagfile={args.flagfile}", f"--data_dir={args.data_dir}",
           f"--record_dir={os.path.join(args.work_dir, 'records_' + name.split('-')[0])}",
           f"--model_dir={model_dir}", f"--spiece_model_file={args.spiece_model}",
           f"--model_config_path={args.model_config_path}", f"--seed={args.seed}", *extra]
    if args.init_checkpoint:
        cmd.append(f"--init_checkpoint={args.init_checkpoint}")
    os.makedirs(args.work_dir, exist_ok=True)
    t0 = time.time()
    with open(model_dir + ".log", "w", encoding="utf-8") as log:
        log.write("$ " + " ".join(cmd) + "\n")
        log.flush()
        proc = subprocess.Popen(cmd, cwd=REPO, stdout=log, stderr=subprocess.STDOUT,
                                env={**os.environ, "PYTHONPATH": REPO})
        _, status, usage = os.wait4(proc.pid, 0)
    if os.waitstatus_to_exitcode(status):
        raise RuntimeError(f"{name} failed; see {model_dir}.log")
    from xlnet_tf import results

    last = results.load(model_dir).last
    history = [json.loads(line) for line in open(os.path.join(model_dir, "train_history.json"), encoding="utf-8")]
    rates = [h["examples_per_sec"] for h in history[1:]] or [h["examples_per_sec"] for h in history]
    out = {"accuracy": float(last["accuracy"]), "macro_f1": float(last.get("macro_f1", float("nan"))),
           "num_examples": int(last["num_examples"]), "train_ms_per_doc": 1000.0 / (sum(rates) / len(rates)),
           "peak_rss_mb": usage.ru_maxrss / 1024.0, "wall_s": round(time.time() - t0, 1),
           "predictions": predictions(model_dir), "args": extra}
    with open(done + ".tmp", "w", encoding="utf-8") as f:
        json.dump(out, f, indent=1)
    os.replace(done + ".tmp", done)
    print(f"[long_documents] {name}: accuracy {out['accuracy']:.3f}, {out['train_ms_per_doc']:.0f} ms/doc "
          f"training, peak RSS {out['peak_rss_mb']:.0f} MB ({out['wall_s']:.0f} s)", flush=True)
    return out


def predictions(model_dir: str) -> Dict[str, str]:
    with open(os.path.join(model_dir, "predict_dev.tsv"), encoding="utf-8") as f:
        rows = [line.rstrip("\n").split("\t") for line in f][1:]
    return {guid: label for guid, label in rows}


def gold(data_dir: str) -> Dict[str, str]:
    with open(os.path.join(data_dir, "dev.tsv"), encoding="utf-8") as f:
        header = f.readline().rstrip("\n").split("\t")
        rows = [line.rstrip("\n").split("\t") for line in f]
    i, j = header.index("id"), header.index("label")
    return {r[i]: r[j] for r in rows}


def mcnemar(labels: Dict[str, str], a: Dict[str, str], b: Dict[str, str]) -> Dict:
    """Exact two-sided binomial test on the discordant documents (a right & b wrong vs the reverse)."""
    from scipy.stats import binomtest

    if set(a) != set(labels) or set(b) != set(labels):
        raise ValueError("the prediction files do not cover the dev documents")
    only_a = sum(a[k] == y and b[k] != y for k, y in labels.items())
    only_b = sum(b[k] == y and a[k] != y for k, y in labels.items())
    p = binomtest(only_a, only_a + only_b, 0.5).pvalue if only_a + only_b else 1.0
    return {"whole_right_first_wrong": only_a, "first_right_whole_wrong": only_b, "p_value": p}


def inference_ms_per_doc(args, recipe: Dict[str, str], repeats: int = 3) -> Dict[str, float]:
    """Forward time per document of both arms' shapes (random weights of the same config), alternating."""
    import numpy as np
    import tensorflow as tf

    from xlnet_tf.config import XLNetConfig
    from xlnet_tf.models import XLNetClassifier

    config = XLNetConfig.from_json_file(args.model_config_path, dropout=0.0, dropatt=0.0)
    L, S, mem = int(recipe["max_seq_length"]), int(recipe["max_segments"]), int(recipe["mem_len"])
    batch = int(recipe.get("eval_batch_size", 16))
    rng = np.random.default_rng(0)
    fns = {}
    for name, segments in (("whole", S), ("first", 1)):
        model = XLNetClassifier(config, num_labels=4, mem_len=mem if segments > 1 else None)
        shape = [batch, segments, L] if segments > 1 else [batch, L]
        feats = {"input_ids": tf.constant(rng.integers(5, config.n_token, shape), tf.int32),
                 "segment_ids": tf.zeros(shape, tf.int32), "attention_mask": tf.ones(shape, tf.float32)}
        fn = tf.function(lambda f, m=model: m(f, training=False)["logits"], jit_compile=True)
        fn(feats).numpy()  # compile
        fns[name] = (fn, feats)
    times = {name: [] for name in fns}
    for _ in range(repeats):
        for name, (fn, feats) in fns.items():
            t0 = time.perf_counter()
            fn(feats).numpy()
            times[name].append((time.perf_counter() - t0) * 1000.0 / batch)
    return {name: min(v) for name, v in times.items()}


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data_dir", required=True, help="train.tsv/dev.tsv with id, text, label (brown_genre.py)")
    p.add_argument("--flagfile", default=os.path.join(REPO, "run", "flags", "brown_genre_long.flags"))
    p.add_argument("--init_checkpoint", default=None)
    p.add_argument("--model_config_path", required=True)
    p.add_argument("--spiece_model", required=True)
    p.add_argument("--work_dir", default=os.path.join(REPO, "bench_out", "long_documents"))
    p.add_argument("--learning_rates", default="", help="rates tried for the first-segment arm (optional)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--output", default=None, help="report path prefix (.json, .md)")
    args = p.parse_args()
    args.work_dir = os.path.abspath(args.work_dir)

    from bench.transfer import machine, read_flagfile

    recipe = read_flagfile(args.flagfile)
    rate = recipe["learning_rate"]
    grid = {}
    for lr in [r for r in args.learning_rates.split(",") if r]:
        grid[lr] = run_arm(args, f"first-lr{lr}", ["--max_segments=1", f"--learning_rate={lr}"])["accuracy"]
    if grid:
        rate = max(grid, key=grid.get)
    first = run_arm(args, f"first-lr{rate}", ["--max_segments=1", f"--learning_rate={rate}"])
    whole = run_arm(args, f"whole-lr{rate}", [f"--learning_rate={rate}"])
    labels = gold(args.data_dir)
    test = mcnemar(labels, whole["predictions"], first["predictions"])
    infer = inference_ms_per_doc(args, recipe)
    report = {
        "command": "python bench/long_documents.py " + " ".join(sys.argv[1:]),
        "machine": machine(),
        "recipe": args.flagfile, "learning_rate": rate, "first_segment_grid": grid,
        "dev_documents": len(labels),
        "majority_baseline": max(list(labels.values()).count(y) for y in set(labels.values())) / len(labels),
        "whole": {k: v for k, v in whole.items() if k != "predictions"},
        "first": {k: v for k, v in first.items() if k != "predictions"},
        "test": test, "inference_ms_per_doc": infer,
    }
    L, S = recipe["max_seq_length"], recipe["max_segments"]
    lines = [
        f"# Long documents: whole document with memories vs first segment ({report['machine']['cpu']}, "
        f"{report['machine']['cores']} cores; {report['machine']['vector_extensions']})", "",
        f"Command: `{report['command']}`", "",
        f"Recipe `{os.path.relpath(args.flagfile, REPO)}`: segments of {L} tokens; whole = {S} segments with "
        f"memories of {recipe['mem_len']} positions, first = `--max_segments=1`; learning rate {rate}"
        + (f" (best of the first-segment grid {grid})" if grid else "") + f"; {len(labels)} dev documents.", "",
        "| arm | dev accuracy | macro F1 | training ms/doc | inference ms/doc | peak RSS (training) |",
        "|---|---|---|---|---|---|"]
    for name, arm in (("whole document, memories", whole), ("first segment", first)):
        key = "whole" if arm is whole else "first"
        lines.append(f"| {name} | {100 * arm['accuracy']:.1f} | {100 * arm['macro_f1']:.1f} | "
                     f"{arm['train_ms_per_doc']:.0f} | {infer[key]:.1f} | {arm['peak_rss_mb']:.0f} MB |")
    lines += ["", f"Majority class: {100 * report['majority_baseline']:.1f}%. Exact binomial (McNemar) test on "
                  f"the documents exactly one arm gets right: whole right / first wrong "
                  f"{test['whole_right_first_wrong']}, the reverse {test['first_right_whole_wrong']}, "
                  f"two-sided p = {test['p_value']:.2g}.", "",
              "Training ms/doc: the runner's examples/s (after the first logging interval); inference ms/doc: "
              "the same shapes in one process, XLA, batch of the recipe's eval batch size, best of 3 "
              "alternating repeats; peak RSS: the whole training process (TensorFlow runtime included)."]
    print("\n".join(lines))
    if args.output:
        os.makedirs(os.path.dirname(os.path.abspath(args.output)), exist_ok=True)
        with open(args.output + ".json", "w", encoding="utf-8") as f:
            json.dump(report, f, indent=2)
        with open(args.output + ".md", "w", encoding="utf-8") as f:
            f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
