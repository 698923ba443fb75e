"""Whole documents with memories vs the first segment only: dev accuracy, an exact test, time and memory.

  python -m bench.studies.long_documents.long_documents --data_dir=/work/brown_full \
      --init_checkpoint=<plm_model>/final --model_config_path=<plm_model>/xlnet_config.json \
      --spiece_model=<work>/spiece.model --work_dir=bench_out/long_documents \
      --output=bench/studies/long_documents/results/long_documents_cpu

Two fine-tuning runs of run/run_classifier.py with the recipe `--recipe` (the runner's flag file; default
flags/brown_genre_long.flags of this study), the same model, initialization, steps, batch and learning rate: `whole`
as the recipe says (every segment of the document, memories), `first` with `--max_segments=1` (the first
`max_seq_length` tokens, today's truncation). `--learning_rates` (optional) first runs the `first` arm over
those rates and uses its best dev rate for both arms (the choice favours the baseline; a tie in accuracy
goes to the better dev macro F1).

`--seeds` repeats both arms per fine-tuning seed (the records' shuffle and the head's initialization);
`--held_out_splits=dev,test` also predicts the test texts with each trained arm (the rate is chosen on dev
only).

Reported: the accuracy of each arm per split (mean and spread over seeds); per seed, McNemar's exact
two-sided test on the documents where exactly one arm is right; over all seeds, the exact sign test with
the documents as units (a document favours the arm that gets it right in more seeds); training time per
document (the runner's examples/s), inference time per document (the same model shape timed in this
process, both arms alternating, after compilation), and the peak resident memory of each training process
(ru_maxrss of the child, CPU); and, as a reference without XLNet, a TF-IDF + logistic regression
classifier of the whole text and of its first words (about one segment). The report names the CPU and its
vector extensions.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from typing import Dict, List

from absl import flags

from bench import cli

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))  # the repository root
FLAGS = flags.FlagValues()  # defined by define_flags when the script runs, never at import


def arm_dir(args, name: str, seed: int) -> str:
    """The run's model_dir (seed 0 keeps the unsuffixed name of the first reports, so they resume)."""
    return os.path.join(args.work_dir, name + (f"-seed{seed}" if seed else ""))


def run_runner(args, model_dir: str, extra: List[str], seed: int, log_path: str):
    """run/run_classifier.py with the recipe and this benchmark's paths; returns the child's rusage."""
    cmd = [sys.executable, "run/run_classifier.py", f"--flagfile={args.recipe}", f"--data_dir={args.data_dir}",
           f"--record_dir={os.path.join(args.work_dir, 'records_' + os.path.basename(model_dir).split('-')[0])}",
           f"--model_dir={model_dir}", f"--spiece_model_file={args.spiece_model}",
           f"--model_config_path={args.model_config_path}", f"--seed={seed}", *extra]
    if args.init_checkpoint:
        cmd.append(f"--init_checkpoint={args.init_checkpoint}")
    os.makedirs(args.work_dir, exist_ok=True)
    with open(log_path, "w", encoding="utf-8") as log:
        log.write("$ " + " ".join(cmd) + "\n")
        log.flush()
        proc = subprocess.Popen(cmd, cwd=REPO, stdout=log, stderr=subprocess.STDOUT,
                                env={**os.environ, "PYTHONPATH": REPO})
        _, status, usage = os.wait4(proc.pid, 0)
    if os.waitstatus_to_exitcode(status):
        raise RuntimeError(f"{os.path.basename(model_dir)} failed; see {log_path}")
    return usage


def run_arm(args, name: str, extra: List[str], seed: int = 0) -> Dict:
    """One fine-tuning run (resumable: a finished run is read back); its dev results, speed and peak RSS."""
    model_dir = arm_dir(args, name, seed)
    done = os.path.join(model_dir, "arm.json")
    if os.path.exists(done):
        with open(done, encoding="utf-8") as f:
            return json.load(f)
    if os.path.isdir(model_dir):
        import shutil

        shutil.rmtree(model_dir)
    t0 = time.time()
    usage = run_runner(args, model_dir, extra, seed, model_dir + ".log")
    from xlnet_tf.artifacts import results

    last = results.load(model_dir).last("dev")
    history = [json.loads(line) for line in open(os.path.join(model_dir, "train_history.json"), encoding="utf-8")]
    rates = [h["examples_per_sec"] for h in history[1:]] or [h["examples_per_sec"] for h in history]
    out = {"accuracy": float(last["accuracy"]), "macro_f1": float(last.get("macro_f1", float("nan"))),
           "num_examples": int(last["num_examples"]), "train_ms_per_doc": 1000.0 / (sum(rates) / len(rates)),
           "peak_rss_mb": usage.ru_maxrss / 1024.0, "wall_s": round(time.time() - t0, 1),
           "predictions": predictions(model_dir, "dev"), "args": extra}
    with open(done + ".tmp", "w", encoding="utf-8") as f:
        json.dump(out, f, indent=1)
    os.replace(done + ".tmp", done)
    print(f"[long_documents] {os.path.basename(model_dir)}: accuracy {out['accuracy']:.3f}, "
          f"{out['train_ms_per_doc']:.0f} ms/doc training, peak RSS {out['peak_rss_mb']:.0f} MB "
          f"({out['wall_s']:.0f} s)", flush=True)
    return out


def held_out_predictions(args, name: str, extra: List[str], seed: int, split: str) -> Dict[str, str]:
    """The trained arm's predictions on another held-out split (`--do_predict` only; resumable)."""
    model_dir = arm_dir(args, name, seed)
    if not os.path.exists(os.path.join(model_dir, f"predict_{split}.tsv")):
        run_runner(args, model_dir, [*extra, "--do_train=false", "--do_eval=false", "--do_predict=true",
                                     f"--predict_split={split}"], seed, f"{model_dir}.predict_{split}.log")
    return predictions(model_dir, split)


def predictions(model_dir: str, split: str) -> Dict[str, str]:
    from xlnet_tf.training import finetuning

    return finetuning.read_predictions_tsv(os.path.join(model_dir, f"predict_{split}.tsv"))


def read_split(data_dir: str, split: str):
    """The (id, text, label) rows of `split`.tsv, as tfrecords/sets/brown_genre.py writes them (header checked)."""
    from tfrecords.sets.brown_genre import read_tsv

    return read_tsv(os.path.join(data_dir, f"{split}.tsv"))


def gold(data_dir: str, split: str = "dev") -> Dict[str, str]:
    return {guid: label for guid, _, label in read_split(data_dir, split)}


def accuracy(labels: Dict[str, str], predicted: Dict[str, str]) -> float:
    return sum(predicted[k] == y for k, y in labels.items()) / len(labels)


def mcnemar(labels: Dict[str, str], a: Dict[str, str], b: Dict[str, str]) -> Dict:
    """Exact two-sided binomial test on the discordant documents (a right & b wrong vs the reverse)."""
    return sign_test(labels, [a], [b])


def sign_test(labels: Dict[str, str], a: List[Dict[str, str]], b: List[Dict[str, str]]) -> Dict:
    """Exact two-sided sign test with the documents as units: a document favours arm a when a's seeds get it
    right more often than b's (one seed each: McNemar's exact test); ties drop out."""
    from scipy.stats import binomtest

    for run in (*a, *b):
        if set(run) != set(labels):
            raise ValueError("the prediction files do not cover the held-out documents")
    right = lambda runs, k: sum(run[k] == labels[k] for run in runs)  # noqa: E731
    only_a = sum(right(a, k) > right(b, k) for k in labels)
    only_b = sum(right(a, k) < right(b, k) for k in labels)
    p = binomtest(only_a, only_a + only_b, 0.5).pvalue if only_a + only_b else 1.0
    return {"whole_better": only_a, "first_better": only_b, "p_value": p}


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
        model = XLNetClassifier(config, num_labels=4, mem_len=mem if segments > 1 else None,
                                summary_type=recipe.get("summary_type", "last"),
                                document_summary=recipe.get("document_summary", "last_segment")
                                if segments > 1 else "last_segment")
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


def best_rate(accuracy: Dict[str, float], macro_f1: Dict[str, float]) -> str:
    """The learning rate of the best dev accuracy; a tie goes to the better dev macro F1 (then the first)."""
    return max(accuracy, key=lambda lr: (accuracy[lr], macro_f1[lr]))


def bag_of_words(data_dir: str, splits: List[str], first_words: int, c: float = 10.0) -> Dict[str, Dict[str, float]]:
    """A reference without XLNet: TF-IDF (sublinear, min_df 2) + logistic regression (C = `c`, fixed) fit on
    train, of the whole text and of its first `first_words` words; accuracy per held-out split."""
    from sklearn.feature_extraction.text import TfidfVectorizer
    from sklearn.linear_model import LogisticRegression

    rows = {split: read_split(data_dir, split) for split in ["train", *splits]}
    labels = {split: [label for _, _, label in r] for split, r in rows.items()}
    out = {}
    for name, cut in (("whole", None), ("first", first_words)):
        texts = {split: [text if cut is None else " ".join(text.split()[:cut]) for _, text, _ in r]
                 for split, r in rows.items()}
        vectorizer = TfidfVectorizer(sublinear_tf=True, min_df=2)
        clf = LogisticRegression(C=c, max_iter=5000).fit(vectorizer.fit_transform(texts["train"]), labels["train"])
        out[name] = {split: float(clf.score(vectorizer.transform(texts[split]), labels[split])) for split in splits}
    return out


def mean_sd(values: List[float]) -> str:
    import statistics

    values = [100 * v for v in values]
    if len(values) == 1:
        return f"{values[0]:.1f}"
    return f"{statistics.mean(values):.1f} ± {statistics.stdev(values):.1f}"


def define_flags(fv: flags.FlagValues = FLAGS):
    d = cli.Definer(fv)
    d.string("data_dir", None, "train/dev(/test).tsv with id, text, label (tfrecords/sets/brown_genre.py).")
    d.string("recipe", os.path.join(REPO, "bench", "studies", "long_documents", "flags", "brown_genre_long.flags"),
             "The runner's flag file of both arms (run_classifier.py --flagfile).")
    d.string("init_checkpoint", None, "The pretrained weights both arms start from.")
    d.string("model_config_path", None, "Their xlnet_config.json.")
    d.string("spiece_model", None, "Their SentencePiece model.")
    d.string("work_dir", os.path.join(REPO, "bench_out", "long_documents"), "The runs and their records.")
    d.list("learning_rates", [], "Rates tried for the first-segment arm (optional; first seed).")
    d.list("seeds", ["0"], "Fine-tuning seeds of both arms.")
    d.list("held_out_splits", ["dev"], "Splits predicted and tested (dev first: it picks the rate).")
    d.string("output", None, "Report path prefix (.json, .md).")
    for name in ("data_dir", "model_config_path", "spiece_model"):
        flags.mark_flag_as_required(name, flag_values=fv)


def main():
    FLAGS.work_dir = os.path.abspath(FLAGS.work_dir)
    seeds = [int(x) for x in FLAGS.seeds]
    splits = ["dev"] + [x for x in FLAGS.held_out_splits if x and x != "dev"]

    from bench import host
    from bench.studies.transfer.transfer import read_flagfile

    recipe = read_flagfile(FLAGS.recipe)
    rate = recipe["learning_rate"]
    grid, grid_f1 = {}, {}
    for lr in [r for r in FLAGS.learning_rates if r]:
        out = run_arm(FLAGS, f"first-lr{lr}", ["--max_segments=1", f"--learning_rate={lr}"], seeds[0])
        grid[lr], grid_f1[lr] = out["accuracy"], out["macro_f1"]
    if grid:
        rate = best_rate(grid, grid_f1)
    arms = {"whole": [f"--learning_rate={rate}"], "first": ["--max_segments=1", f"--learning_rate={rate}"]}
    runs: Dict[str, List[Dict]] = {name: [] for name in arms}
    for seed in seeds:
        for name in ("first", "whole"):
            out = run_arm(FLAGS, f"{name}-lr{rate}", arms[name], seed)
            preds = {"dev": out.pop("predictions")}
            for split in splits[1:]:
                preds[split] = held_out_predictions(FLAGS, f"{name}-lr{rate}", arms[name], seed, split)
            runs[name].append({"seed": seed, **out, "predictions": preds})
    labels = {split: gold(FLAGS.data_dir, split) for split in splits}
    every = {f"{split}/{k}": y for split in splits for k, y in labels[split].items()}
    both = lambda name: [{f"{sp}/{k}": y for sp in splits for k, y in r["predictions"][sp].items()}  # noqa: E731
                         for r in runs[name]]
    per_seed = [{"seed": seed, **{f"{name}_{split}": accuracy(labels[split], runs[name][i]["predictions"][split])
                                  for name in arms for split in splits},
                 **{f"test_{split}": mcnemar(labels[split], runs["whole"][i]["predictions"][split],
                                             runs["first"][i]["predictions"][split]) for split in splits}}
                for i, seed in enumerate(seeds)]
    pooled = {split: sign_test(labels[split], [r["predictions"][split] for r in runs["whole"]],
                               [r["predictions"][split] for r in runs["first"]]) for split in splits}
    if len(splits) > 1:
        pooled["+".join(splits)] = sign_test(every, both("whole"), both("first"))
    infer = inference_ms_per_doc(FLAGS, recipe)
    words = int(recipe["max_seq_length"]) * 2 // 3  # ~1.45 pieces per word in the CPU recipe's vocabulary
    bow = bag_of_words(FLAGS.data_dir, splits, words)
    report = {
        "command": cli.invocation("bench.studies.long_documents.long_documents"),
        "machine": host.summary(),
        "recipe": FLAGS.recipe, "learning_rate": rate, "first_segment_grid": grid,
        "first_segment_grid_macro_f1": grid_f1, "seeds": seeds,
        "documents": {split: len(labels[split]) for split in splits},
        "majority_baseline": {split: max(list(v.values()).count(y) for y in set(v.values())) / len(v)
                              for split, v in labels.items()},
        "runs": {name: [{k: v for k, v in r.items() if k != "predictions"} for r in rs] for name, rs in runs.items()},
        "per_seed": per_seed, "sign_test": pooled, "inference_ms_per_doc": infer,
        "bag_of_words": {"first_words": words, **bow},
    }
    L, S = recipe["max_seq_length"], recipe["max_segments"]
    n = len(seeds)
    lines = [
        f"# Long documents: whole document with memories vs first segment ({report['machine']['cpu']}, "
        f"{report['machine']['cores']} cores; {report['machine']['vector_extensions']})", "",
        f"Command: `{report['command']}`", "",
        f"Recipe `{os.path.relpath(FLAGS.recipe, REPO)}`: segments of {L} tokens; whole = {S} segments with "
        f"memories of {recipe['mem_len']} positions, first = `--max_segments=1`; learning rate {rate}"
        + (f" (best dev accuracy of the first-segment grid {grid}, ties to the better macro F1 "
           f"{ {lr: round(f1, 3) for lr, f1 in grid_f1.items()} }, seed {seeds[0]})" if grid else "")
        + f"; seeds {seeds}; held-out documents: "
        + ", ".join(f"{len(labels[sp])} {sp}" for sp in splits) + ".", "",
        "| arm | " + " | ".join(f"{sp} accuracy" for sp in splits) + " | dev macro F1 | training ms/doc | "
        "inference ms/doc | peak RSS (training) |",
        "|---|" + "---|" * (len(splits) + 4)]
    for name, title in (("whole", "whole document, memories"), ("first", "first segment")):
        rs = runs[name]
        lines.append(f"| {title} | " + " | ".join(mean_sd([accuracy(labels[sp], r["predictions"][sp]) for r in rs])
                                                  for sp in splits)
                     + f" | {mean_sd([r['macro_f1'] for r in rs])} | "
                     f"{sum(r['train_ms_per_doc'] for r in rs) / n:.0f} | {infer[name]:.1f} | "
                     f"{max(r['peak_rss_mb'] for r in rs):.0f} MB |")
    lines += ["", (f"Accuracies are the mean ± standard deviation over the {n} seeds. " if n > 1 else "")
              + "Majority class: " + ", ".join(f"{100 * report['majority_baseline'][sp]:.1f}% ({sp})" for sp in splits)
              + ".", "", "Per seed (McNemar's exact test: documents only the whole-document arm gets right vs only "
              "the first-segment arm, two-sided p):", "",
              "| seed | " + " | ".join(f"{sp}: whole / first | {sp}: whole-only / first-only, p" for sp in splits)
              + " |", "|---|" + "---|---|" * len(splits)]
    for row in per_seed:
        lines.append(f"| {row['seed']} | " + " | ".join(
            f"{100 * row['whole_' + sp]:.1f} / {100 * row['first_' + sp]:.1f} | {row['test_' + sp]['whole_better']}"
            f" / {row['test_' + sp]['first_better']}, {row['test_' + sp]['p_value']:.2g}" for sp in splits) + " |")
    lines += ["", f"Over all seeds (exact two-sided sign test, the documents as units: a document favours an arm when "
                  f"that arm gets it right in more of the {n} seeds than the other; ties drop out):", ""]
    lines += [f"- {sp}: whole better on {t['whole_better']} documents, first better on {t['first_better']}, "
              f"p = {t['p_value']:.2g}" for sp, t in pooled.items()]
    lines += ["", "Reference without XLNet (same train texts, fixed settings): TF-IDF + logistic regression on the "
                  "whole text " + ", ".join(f"{100 * bow['whole'][sp]:.1f}% ({sp})" for sp in splits)
              + f"; on its first {words} words " + ", ".join(f"{100 * bow['first'][sp]:.1f}%" for sp in splits) + "."]
    lines += ["", "Training ms/doc: the runner's examples/s (after the first logging interval), mean over seeds; "
                  "inference ms/doc: the same shapes in one process, XLA, batch of the recipe's eval batch size, best "
                  "of 3 alternating repeats; peak RSS: the whole training process (TensorFlow runtime included), "
                  "the largest over seeds."]
    print("\n".join(lines))
    if FLAGS.output:
        os.makedirs(os.path.dirname(os.path.abspath(FLAGS.output)), exist_ok=True)
        with open(FLAGS.output + ".json", "w", encoding="utf-8") as f:
            json.dump(report, f, indent=2)
        with open(FLAGS.output + ".md", "w", encoding="utf-8") as f:
            f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    cli.run(FLAGS, define_flags, main)
