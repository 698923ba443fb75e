"""Do the pretrained weights already know the task? A linear probe of frozen features (a diagnosis for the
transfer table's out-of-domain rows): each model reads the set's texts once, without training, and a
logistic regression learns the labels from its features. Where pretrained features carry the task much better
than random ones, pretraining learned something the task needs (and a fine-tuning loss says the budget or the
optimization did not use it); where they do not, the pretrained model has nothing to give this text.

  python -m bench.studies.transfer.feature_probe --data_dir=OOD/tweets --sequence_length=64 \
      --spiece_model=../shared/models/plm_cpu/spiece.model --config=../shared/models/plm_cpu/xlnet_config.json \
      --models=random,plm=../shared/models/plm_cpu/final \
      --output=bench/studies/transfer/results/feature_probe_cpu_tweets

`--models`: LABEL=CHECKPOINT (anything `XLNetClassifier.from_checkpoint` reads: a pretraining run's final
weights, a `ckpt-N`, the original release's checkpoint), or `random`: the `--config` model at its initialization,
one per `--random_seeds` (mean and spread over them). Texts are packed by the model's own preprocessor
(`XLNetPreprocessor`, the runners' and the export's packing) at `--sequence_length` (the task flag file's
`--max_seq_length`); the examples are the runners' own (`tfrecords/readers/processors.py`). Features of the last layer,
no dropout: `cls`, the state at `<cls>` (last position: what the classifier's `last` summary reads, before its
projection, which a pretrained model does not have), and `mean`, the mean over the real positions (`mean`).
Probe: standardized features, scikit-learn `LogisticRegression` (lbfgs), its C chosen on dev from
`C_GRID`, then dev and test at that C (percent accuracy). The majority class and the
TF-IDF baseline of the same rows are listed beside.
"""

from __future__ import annotations

import os
import statistics
from typing import Any, Dict, List, Sequence

from absl import flags

from bench import cli, labelled_paths
from xlnet_tf.errors import UserError

FLAGS = flags.FlagValues()  # defined by define_flags when the script runs, never at import

SUMMARIES = ("cls", "mean")
# the probe's regularization grid: standardized dense features of a few hundred dimensions need a strong prior
# (large C on a few thousand examples fits them apart: slow to converge and worse on dev)
C_GRID = (0.001, 0.003, 0.01, 0.03, 0.1, 0.3, 1.0, 3.0)


def parse_models(entries: Sequence[str]) -> Dict[str, str]:
    """{label: checkpoint or "random"} of `--models`; a one-line error for a malformed or missing entry."""
    return labelled_paths.parse("models", entries, exists=lambda p: os.path.exists(p) or os.path.exists(p + ".index"),
                                keep=("random",), form="LABEL=CHECKPOINT or `random`")


def features(model, texts: List[str], batch_size: int = 64) -> Dict[str, Any]:
    """`{"cls": [N, D], "mean": [N, D]}`: the last layer's state at `<cls>` and its mean over real positions."""
    import numpy as np
    import tensorflow as tf

    @tf.function(reduce_retracing=True)  # one graph per batch shape (eager reads were 2-3x slower)
    def summaries(texts):
        x = model.preprocessor(texts)
        content = model.backbone(x["input_ids"], segment_ids=x["segment_ids"], attention_mask=x["attention_mask"],
                                 training=False)["content"]  # [B, L, D]; left-padded, <cls> last
        mask = tf.cast(x["attention_mask"], content.dtype)[:, :, None]
        return content[:, -1], tf.reduce_sum(content * mask, 1) / tf.reduce_sum(mask, 1)

    out = {name: [] for name in SUMMARIES}
    for start in range(0, len(texts), batch_size):
        cls, mean = summaries(tf.constant(texts[start:start + batch_size]))
        out["cls"].append(cls.numpy())
        out["mean"].append(mean.numpy())
    return {name: np.concatenate(parts).astype(np.float64) for name, parts in out.items()}


def probe(train_x, train_y, evals: Dict[str, tuple]) -> Dict:
    """Logistic regression on standardized features, C chosen on the first of `evals` (dev):
    `{"C": c, split: accuracy}`."""
    from sklearn.linear_model import LogisticRegression
    from sklearn.preprocessing import StandardScaler

    scaler = StandardScaler().fit(train_x)
    train_x = scaler.transform(train_x)
    evals = {s: (scaler.transform(x), y) for s, (x, y) in evals.items()}
    choose = next(iter(evals))
    best = None
    for c in C_GRID:
        clf = LogisticRegression(C=c, max_iter=1000).fit(train_x, train_y)
        dev = 100.0 * clf.score(*evals[choose])
        if best is None or dev > best[0]:
            best = (dev, c, clf)
    _, c, clf = best
    return {"C": c, **{s: 100.0 * clf.score(x, y) for s, (x, y) in evals.items()}}


def load(path: str, args, seed: int):
    """The classifier whose backbone is probed: `path`'s weights, or (`random`) the `--config` model at `seed`."""
    import keras

    from xlnet_tf.models.sequence import XLNetClassifier
    from xlnet_tf.text.preprocessing import XLNetPreprocessor

    if path == "random":
        from xlnet_tf import checkpoints

        keras.utils.set_random_seed(seed)
        config = checkpoints.resolve_config(args.config, os.path.dirname(args.config), {"dropout": 0.0,
                                                                                        "dropatt": 0.0})
        return XLNetClassifier(config, preprocessor=XLNetPreprocessor(args.spiece_model, args.sequence_length))
    return XLNetClassifier.from_checkpoint(path, config=args.config, spiece_model=args.spiece_model,
                                           sequence_length=args.sequence_length,
                                           config_overrides={"dropout": 0.0, "dropatt": 0.0})


def summarize(runs: List[Dict], splits: Sequence[str]) -> Dict:
    """Mean (and sample std over random seeds) of each split's accuracy; the C of every run."""
    out = {"C": [r["C"] for r in runs], "n": len(runs)}
    for s in splits:
        values = [r[s] for r in runs]
        out[s] = statistics.mean(values)
        out[f"{s}_std"] = statistics.stdev(values) if len(values) > 1 else None
    return out


def markdown(out: Dict) -> str:
    machine = out["machine"]
    lines = [f"# Linear probe of frozen features: {out['set']} ({machine['cpu']}, {machine['cores']} cores; "
             f"{machine['vector_extensions']})", "",
             f"Command: `{out['command']}`", "",
             "Each model reads the texts once (no training, no dropout); a logistic regression on its standardized "
             "last-layer features, C chosen on dev (feature_probe.py). `cls`: the state at `<cls>`; `mean`: "
             "the mean over real positions. `random`: the same model at its initialization, mean ± std over "
             f"seeds {', '.join(map(str, out['random_seeds']))}. Percent accuracy; train {out['examples']['train']}, "
             f"dev {out['examples']['dev']}, test {out['examples']['test']} examples.", "",
             "| model | features | dev | test | C |", "|---|---|---|---|---|"]

    def cell(r, s):
        std = r.get(f"{s}_std")
        return f"{r[s]:.1f}" + (f" ± {std:.1f}" if std is not None else "")

    for row in out["rows"]:
        lines.append(f"| {row['model']} | {row['features']} | {cell(row, 'dev')} | {cell(row, 'test')} | "
                     f"{', '.join(f'{c:g}' for c in row['C'])} |")
    base = out["baselines"]
    lines.append(f"| majority class | - | {base['majority']['dev']['accuracy']:.1f} | "
                 f"{base['majority']['test']['accuracy']:.1f} | - |")
    lines.append(f"| TF-IDF word 1-2-grams (bench/studies/baselines/linear_baseline.py) | - | "
                 f"{base['tfidf_logreg']['dev']['accuracy']:.1f} | {base['tfidf_logreg']['test']['accuracy']:.1f} | "
                 f"{base['C']:g} |")
    return "\n".join(lines) + "\n"


def define_flags(fv: flags.FlagValues = FLAGS):
    d = cli.Definer(fv)
    d.string("data_dir", None, "train/dev/test.tsv of a classification set (label, text).")
    d.string("task", "tsv", "The classifier runner's --task.")
    d.list("models", None, "LABEL=CHECKPOINT entries, or `random`.")
    d.string("spiece_model", None, "The SentencePiece model.")
    d.string("config", None, "xlnet_config.json (of every model; random's shape).")
    d.integer("sequence_length", 128, "Packed length (the task flag file's --max_seq_length).")
    d.list("random_seeds", ["0", "1", "2"], "Seeds of the `random` model.")
    d.string("output", None, "Path prefix of the .json/.md report.")
    for name in ("data_dir", "models", "spiece_model", "config"):
        flags.mark_flag_as_required(name, flag_values=fv)


def main():
    """Probes every model of the flags; returns the report."""
    models = parse_models([m for m in FLAGS.models if m])
    for name, path in (("--spiece_model", FLAGS.spiece_model), ("--config", FLAGS.config)):
        if not os.path.isfile(path):
            raise UserError(f"{name}={path} does not exist")
    for split in ("train", "dev", "test"):
        if not os.path.isfile(os.path.join(FLAGS.data_dir, f"{split}.tsv")):
            raise UserError(f"--data_dir={FLAGS.data_dir} has no {split}.tsv")
    seeds = [int(s) for s in FLAGS.random_seeds if s]

    from bench import host
    from bench.studies.baselines.linear_baseline import baselines, read_split
    from xlnet_tf import files

    data = {s: read_split(FLAGS.data_dir, s, FLAGS.task) for s in ("train", "dev", "test")}
    if any(b is not None for _, b, _ in data.values()):
        raise UserError(f"--data_dir={FLAGS.data_dir}: a pair task (text_b); the probe reads single texts")
    rows = []
    for label, path in models.items():
        runs = {name: [] for name in SUMMARIES}
        for seed in (seeds if path == "random" else [0]):
            model = load(path, FLAGS, seed)
            feats = {s: features(model, texts) for s, (texts, _, _) in data.items()}
            for name in SUMMARIES:
                runs[name].append(probe(feats["train"][name], data["train"][2],
                                        {s: (feats[s][name], data[s][2]) for s in ("dev", "test")}))
        for name in SUMMARIES:
            row = {"model": label, "checkpoint": path, "features": name, **summarize(runs[name], ("dev", "test"))}
            print(row, flush=True)
            rows.append(row)
    out = {"machine": host.describe(), "set": os.path.basename(os.path.normpath(FLAGS.data_dir)),
           "command": cli.command_line("bench.studies.transfer.feature_probe", FLAGS),
           "random_seeds": seeds, "examples": {s: len(d[0]) for s, d in data.items()},
           "baselines": baselines(FLAGS.data_dir, FLAGS.task), "rows": rows}
    if FLAGS.output:
        files.write_json_atomic(FLAGS.output + ".json", out)
        files.write_text_atomic(FLAGS.output + ".md", markdown(out))
    return out


if __name__ == "__main__":
    cli.run(FLAGS, define_flags, main)
