"""Why named entities did not learn with the tagging recipe: WNUT 2016 Twitter NER under controlled changes.

  python tfrecords/sets/wnut16.py --output_dir=/work/wnut16
  python -m bench.studies.ner.diagnose --work_dir=/work/ner --data_dir=/work/wnut16 \\
      --init_dir=../shared/models/plm_cpu          # resumable; about 5 minutes a 1,000-step run on 2 cores

Every run is `run/run_tagger.py --metrics=entities` on `flags/ner_diagnosis.flags` (batch 32, dropout 0, weight decay
0.01, warm-up a tenth of the run, every one of 8 evenly spaced checkpoints scored on dev) from the CPU recipe's PLM
model (`--init_dir`: its `final` checkpoint, `spiece.model`, `xlnet_config.json`) or from random weights, with what
`RUNS` changes: the budget (steps), the rate, the window (128 pieces as the tagging recipe, 64 for tweets), the
labelled pieces, dropout. Beside them the most-frequent-tag tagger (each word's most frequent train tag, the most
frequent tag, O, for unseen words) and an analysis of the tokenizer on these tweets: the share of entity words whose first piece is the bare
word-start piece `▁` (where a first-piece tagger reads its label), and the dev recall of entities by that first
piece, from the best run's dev predictions (its last checkpoint), and what it finds that a lookup table cannot
(entities with a word unseen in training). Writes `<results_prefix>.{json,md}`.
"""

from __future__ import annotations

import collections
import json
import os
import subprocess
import sys
from typing import Dict, List, Optional, Sequence

from absl import flags

from bench import cli, host

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
HERE = os.path.join(REPO, "bench", "studies", "ner")
FLAGFILE = os.path.join(HERE, "flags", "ner_diagnosis.flags")
FLAGS = flags.FlagValues()  # defined by define_flags when the script runs, never at import
CHECKPOINTS = 8


class Run:
    """One fine-tuning run: its init ("plm" or "scratch"), rate, steps, window and added runner flags."""

    def __init__(self, name: str, init: str, lr: str, steps: int, window: int = 64, extra: Sequence[str] = (),
                 question: str = ""):
        self.name, self.init, self.lr, self.steps, self.window = name, init, lr, int(steps), int(window)
        self.extra, self.question = list(extra), question

    def flags(self) -> List[str]:
        every = self.steps // CHECKPOINTS
        return [f"--learning_rate={self.lr}", f"--train_steps={self.steps}", f"--warmup_steps={self.steps // 10}",
                f"--save_steps={every}", f"--steps_per_loop={every}", f"--keep_checkpoints={CHECKPOINTS}",
                f"--max_seq_length={self.window}", f"--doc_stride={self.window // 2}", *self.extra]


# The tagging recipe's budget and window (200 steps, 128 pieces), then one change at a time from the 1,000-step
# PLM run at 1e-3 (the grid's best: 3e-4 reaches 25.9 at step 1,000).
RUNS = [
    Run("recipe_budget", "plm", "3e-4", 200, window=128, question="the tagging recipe's budget (200 steps)"),
    Run("plm_1000_lr3e-4", "plm", "3e-4", 1000, question="budget x5"),
    Run("plm_1000", "plm", "1e-3", 1000, question="budget x5, rate 1e-3"),
    Run("scratch_1000", "scratch", "1e-3", 1000, question="random weights"),
    Run("plm_2000", "plm", "1e-3", 2000, question="budget x10, rate 1e-3"),
    Run("plm_1000_all_pieces", "plm", "1e-3", 1000, extra=["--label_all_pieces"],
        question="every piece of a word labelled (first-piece labelling)"),
    Run("plm_1000_dropout", "plm", "1e-3", 1000, extra=["--dropout=0.1", "--dropatt=0.1"],
        question="dropout 0.1 (regularization on 1,623 tweets)"),
]


def define_flags(fv: flags.FlagValues = FLAGS):
    d = cli.Definer(fv)
    d.string("work_dir", None, "Records and runs (resumable).")
    d.string("data_dir", None, "The WNUT 2016 split (python tfrecords/sets/wnut16.py --output_dir=DIR).")
    d.string("init_dir", os.path.join(os.path.dirname(REPO), "shared", "models", "plm_cpu"),
             "The pretrained model: its `final` checkpoint, spiece.model and xlnet_config.json.")
    d.list("runs", [r.name for r in RUNS], "Runs of RUNS to make and report.")
    d.string("seed", "0", "Fine-tuning seed.")
    d.string("results_prefix", os.path.join(HERE, "results", "ner_diagnosis"), "Report path without extension.")


def command(run: Run, work: str, data_dir: str, init_dir: str, seed: str) -> List[str]:
    """The run's runner command."""
    cmd = [sys.executable, "run/run_tagger.py", f"--flagfile={FLAGFILE}", f"--data_dir={data_dir}",
           f"--record_dir={work}/records{run.window}{'_all' if '--label_all_pieces' in run.extra else ''}",
           f"--model_dir={work}/runs/{run.name}", f"--spiece_model_file={init_dir}/spiece.model",
           f"--model_config_path={init_dir}/xlnet_config.json", f"--seed={seed}", *run.flags()]
    if run.init == "plm":
        cmd.append(f"--init_checkpoint={init_dir}/final")
    return cmd


def curve(model_dir: str, steps: int) -> Optional[List[Dict]]:
    """The run's dev evaluations (step, precision, recall, F1 in percent, predicted and gold entities), or None
    until its last checkpoint is scored."""
    path = os.path.join(model_dir, "eval_results.json")
    if not os.path.exists(path):
        return None
    with open(path, encoding="utf-8") as f:
        evaluations = [e for e in json.load(f)["evaluations"] if e["split"] == "dev"]
    if not any(int(e["step"]) == steps for e in evaluations):
        return None
    return [{"step": int(e["step"]), "precision": 100 * e["precision"], "recall": 100 * e["recall"],
             "f1": 100 * e["f1"], "predicted": e["num_predicted"], "gold": e["num_gold"],
             "per_type_f1": {t: round(100 * v["f1"], 1) for t, v in e["per_label"].items()}} for e in evaluations]


def make(run: Run, work: str, data_dir: str, init_dir: str, seed: str) -> List[Dict]:
    """The run's dev curve, training it first when it has not finished (a log beside its folder)."""
    out = os.path.join(work, "runs", run.name)
    done = curve(out, run.steps)
    if done is not None:
        return done
    cmd = command(run, work, data_dir, init_dir, seed)
    os.makedirs(os.path.dirname(out), exist_ok=True)
    print(f"{run.name}: {' '.join(cmd[1:])}", flush=True)
    with open(out + ".log", "a", encoding="utf-8") as log:
        subprocess.run(cmd, cwd=REPO, stdout=log, stderr=subprocess.STDOUT, check=True)
    done = curve(out, run.steps)
    if done is None:
        raise RuntimeError(f"{out}: finished without a dev score at step {run.steps}; see {out}.log")
    return done


def tokenizer_analysis(data_dir: str, spiece_model: str) -> Dict:
    """How the SentencePiece model cuts the train tweets: pieces per word, and the share of words whose first
    piece is the bare `▁` (entity words and others)."""
    import sentencepiece

    from tfrecords.readers import conll

    sp = sentencepiece.SentencePieceProcessor(model_file=spiece_model)
    counts = collections.Counter()
    pieces = collections.defaultdict(list)
    for s in conll.read_conll(os.path.join(data_dir, "train.txt")):
        for word, tag in zip(s.words, s.labels):
            p = sp.encode(word, out_type=str)
            kind = "entity" if tag != "O" else "other"
            counts[kind, p[0] == "\u2581"] += 1
            pieces[kind].append(len(p))
    return {kind: {"words": counts[kind, True] + counts[kind, False],
                   "bare_first_piece_percent": 100 * counts[kind, True] / (counts[kind, True] + counts[kind, False]),
                   "pieces_per_word": sum(pieces[kind]) / len(pieces[kind])} for kind in ("entity", "other")}


def recall_by_first_piece(data_dir: str, predictions: str, spiece_model: str) -> Dict:
    """Dev entity recall (exact span and type) split by whether the entity's first word starts with the bare `▁`
    piece, from a run's `predict_dev.txt` (gold in the second column, prediction in the last)."""
    import sentencepiece

    from tfrecords.readers import conll
    from xlnet_tf.metrics import tagging as tagging_metrics

    sp = sentencepiece.SentencePieceProcessor(model_file=spiece_model)
    sentences = conll.read_conll(predictions, label_column=-1)
    gold_tags = [[c[1] for c in s.columns] for s in sentences]
    found = collections.Counter()
    for i, s in enumerate(sentences):
        gold = tagging_metrics.entity_spans([gold_tags[i]], 0)
        predicted = set(tagging_metrics.entity_spans([list(s.labels)], 0))
        for span in gold:
            bare = sp.encode(s.words[span[2]], out_type=str)[0] == "\u2581"
            found[bare, "gold"] += 1
            found[bare, "found"] += span in predicted
    return {("bare_first_piece" if bare else "word_first_piece"): {
        "entities": found[bare, "gold"], "recall_percent": 100 * found[bare, "found"] / max(found[bare, "gold"], 1)}
        for bare in (True, False)}


def recall_by_seen_words(data_dir: str, predictions: str) -> Dict:
    """Dev entities found (exact span and type) by the run's predictions and by the most-frequent-tag tagger,
    split by whether every word of the entity occurs in train.txt (what a lookup table can know)."""
    from bench.studies.transfer import transfer
    from tfrecords.readers import conll
    from xlnet_tf.metrics import tagging as tagging_metrics

    lookup, known = transfer.most_frequent_tagger(data_dir)
    found = collections.Counter()
    for s in conll.read_conll(predictions, label_column=-1):
        gold = tagging_metrics.entity_spans([[c[1] for c in s.columns]])
        model = tagging_metrics.entity_spans([list(s.labels)])
        table = tagging_metrics.entity_spans([lookup(s.words)])
        for span in gold:
            kind = "seen" if all(s.words[i] in known for i in range(span[2], span[3] + 1)) else "unseen"
            found[kind, "entities"] += 1
            found[kind, "model"] += span in model
            found[kind, "most_frequent_tag"] += span in table
    return {kind: {k: found[kind, k] for k in ("entities", "model", "most_frequent_tag")}
            for kind in ("seen", "unseen")}


def most_frequent_tag(data_dir: str) -> Dict[str, float]:
    from bench.studies.transfer import transfer

    return transfer.most_frequent_tag(data_dir, kind="entities")


def report(rows: List[Dict], baseline: Dict, tokens: Dict, recall: Optional[Dict], seen: Dict, best_name: str,
           prefix: str, command: str) -> None:
    values = {"command": command, "machine": host.one_line(), "runs": rows, "most_frequent_tag": baseline,
              "tokenizer": tokens, "recall_by_first_piece": recall, "found_by_seen_words": seen}
    os.makedirs(os.path.dirname(prefix), exist_ok=True)
    with open(prefix + ".json", "w", encoding="utf-8") as f:
        json.dump(values, f, indent=1)
    lines = ["# NER diagnosis: WNUT 2016 (Twitter), entity F1 on dev", "", f"`{command}`", "",
             f"Machine: {values['machine']}", "",
             f"Most-frequent-tag tagger: dev F1 {baseline['f1']:.1f}, test {baseline['test_f1']:.1f}.", "",
             "| run | init | rate | steps | window | question | dev F1 by step (predicted / gold entities at the end) "
             "| best |", "|---|---|---|---|---|---|---|---|"]
    for row in rows:
        points = " ".join(f"{p['step']}: {p['f1']:.1f}" for p in row["curve"])
        best = max(row["curve"], key=lambda p: (p["f1"], -p["step"]))
        end = row["curve"][-1]
        lines.append(f"| {row['name']} | {row['init']} | {row['lr']} | {row['steps']} | {row['window']} | "
                     f"{row['question']} | {points} ({end['predicted']} / {end['gold']}) | "
                     f"**{best['f1']:.1f}** at {best['step']} |")
    lines += ["", "Tokenizer on the train tweets (the CPU recipe's 8,000-piece model):", ""]
    for kind, t in tokens.items():
        lines.append(f"- {kind} words: {t['words']}, {t['pieces_per_word']:.2f} pieces a word, "
                     f"{t['bare_first_piece_percent']:.1f}% start with the bare `▁` piece")
    if recall:
        lines += ["", f"Dev recall of entities by their first piece ({best_name}, its last checkpoint):", ""]
        lines += [f"- {k}: {v['entities']} entities, recall {v['recall_percent']:.1f}%" for k, v in recall.items()]
    lines += ["", f"Dev entities found by {best_name} (its last checkpoint) and by the most-frequent-tag tagger, by "
              "whether all their words occur in train.txt:", ""]
    lines += [f"- {kind}: {v['entities']} entities; found by the model {v['model']}, by the lookup table "
              f"{v['most_frequent_tag']}" for kind, v in seen.items()]
    with open(prefix + ".md", "w", encoding="utf-8") as f:
        f.write("\n".join(lines) + "\n")


def main():
    fv = FLAGS
    from xlnet_tf.errors import UserError

    if not fv.work_dir or not fv.data_dir:
        raise UserError("give --work_dir and --data_dir")
    known = {r.name: r for r in RUNS}
    unknown = [n for n in fv.runs if n not in known]
    if unknown:
        raise UserError(f"--runs: unknown {unknown}; known: {sorted(known)}")
    work, data_dir, init_dir = (os.path.abspath(p) for p in (fv.work_dir, fv.data_dir, fv.init_dir))
    rows = []
    for name in fv.runs:
        run = known[name]
        rows.append({"name": name, "init": run.init, "lr": run.lr, "steps": run.steps, "window": run.window,
                     "question": run.question, "flags": run.flags(),
                     "curve": make(run, work, data_dir, init_dir, fv.seed)})
    best = max(rows, key=lambda r: max(p["f1"] for p in r["curve"]))
    predictions = os.path.join(work, "runs", best["name"], "predict_dev.txt")
    if not os.path.exists(predictions):  # the runner predicts with the run's last checkpoint
        cmd = command(known[best["name"]], work, data_dir, init_dir, fv.seed) + [
            "--do_train=false", "--do_eval=false", "--do_predict", "--predict_split=dev"]
        with open(os.path.join(work, "runs", best["name"] + ".predict.log"), "a", encoding="utf-8") as log:
            subprocess.run(cmd, cwd=REPO, stdout=log, stderr=subprocess.STDOUT, check=True)
    spm = os.path.join(init_dir, "spiece.model")
    report(rows, most_frequent_tag(data_dir), tokenizer_analysis(data_dir, spm),
           recall_by_first_piece(data_dir, predictions, spm), recall_by_seen_words(data_dir, predictions),
           best["name"], fv.results_prefix,
           cli.command_line("bench.studies.ner.diagnose", fv))
    print(f"report: {fv.results_prefix}.md", flush=True)


if __name__ == "__main__":
    cli.run(FLAGS, define_flags, main)
