"""Why multiple choice sits at chance in the transfer table: mc_wordnet under controlled changes.

  python -m bench.studies.diagnostics.mc_diagnosis --work_dir=/work/mc_diag      # resumable; ~3 h on 2 cores

Every run is `run/run_race.py` on the transfer recipe `flags/transfer_mc_wordnet.flags` (the table's budget:
80 steps of 16 questions, dropout 0), at each init's rate chosen in the table (scratch 1e-3, PLM 3e-4), seed 0,
with the training loss logged every 10 steps and every checkpoint scored on dev (`--eval_all_checkpoints`), so
each run gives a loss curve against log 4 and a dev curve with `xlnet_tf.metrics.race.race_metrics`'s loss, logit spread and
letter collapse. What changes between runs (`RUNS`):
- `full`: the set as the table trains it;
- `no_article`: the article removed (question + option only, 64-piece windows): does the model use it?
- `shuffled`: each question's options in a new seeded order (the answer letter follows): a position prior?
  (None can form: each choice is scored on its own by the same network, so the model is permutation-
  equivariant and this run equals `full` up to float rounding; it checks that, nothing more.)
- the budget: 80 steps (the table) against 400 (5x, 1.3 epochs of the 5,000 questions), from the PLM.
Also the answer letters' distribution (a majority-letter baseline), and what the PLM knows before any fine-tuning
(`zero_shot`, bench/studies/cloze/blank_scoring.py): its own probability of each option written into a blank after the
question, with and without the article, and in a "_ means <definition>." sentence (the cloze task's zero-shot
reading, where the same model is well above chance).
Writes `<results_prefix>.{json,md,png}`.
"""

from __future__ import annotations

import collections
import json
import math
import os
import random
from typing import Dict, List

from absl import flags

from bench import cli, figures, host
from bench.studies.transfer import transfer

REPO = transfer.REPO
FLAGS = flags.FlagValues()  # defined by define_flags when the script runs, never at import
RATES = {"scratch": "1e-3", "plm": "3e-4"}
# (variant, init, steps)
# (The larger budget is run from the PLM only: from scratch the 80-step run's loss never leaves log 4 and its
# choice logits differ by 0.001, while the PLM's spread 50x more and its loss first moves as the budget ends.)
RUNS = [("full", "scratch", 80), ("full", "plm", 80), ("shuffled", "plm", 80), ("no_article", "plm", 80),
        ("no_article", "scratch", 80), ("full", "plm", 400)]
VARIANT_FLAGS = {"no_article": ["--max_seq_length=64"]}


class DiagnosisSet(transfer.TransferSet):
    """One data variant of mc_wordnet on the transfer recipe's flag file."""

    @property
    def flagfile(self) -> str:
        return transfer.TASK_FLAGFILES["mc_wordnet"]


def write_variant(source: str, out: str, variant: str) -> str:
    """The mc_wordnet RACE folders with `variant` applied (full: a link to `source`)."""
    if variant == "full":
        if not os.path.exists(out):
            os.makedirs(os.path.dirname(out), exist_ok=True)
            os.symlink(source, out)
        return out
    if os.path.exists(os.path.join(out, "done")):
        return out
    for split in ("train", "dev"):
        os.makedirs(os.path.join(out, split), exist_ok=True)
        for name in sorted(os.listdir(os.path.join(source, split))):
            with open(os.path.join(source, split, name), encoding="utf-8") as f:
                art = json.load(f)
            if variant == "no_article":
                art["article"] = ""
            elif variant == "shuffled":
                rng = random.Random(f"{split}/{name}")
                for k, options in enumerate(art["options"]):
                    answer = options["ABCD".index(art["answers"][k])]
                    order = rng.sample(options, len(options))
                    art["options"][k], art["answers"][k] = order, "ABCD"[order.index(answer)]
            else:
                raise ValueError(f"unknown variant {variant}")
            with open(os.path.join(out, split, name), "w", encoding="utf-8") as f:
                json.dump(art, f)
    open(os.path.join(out, "done"), "w").close()
    return out


def letters(data_dir: str, split: str) -> Dict[str, int]:
    counts = collections.Counter()
    for name in os.listdir(os.path.join(data_dir, split)):
        with open(os.path.join(data_dir, split, name), encoding="utf-8") as f:
            counts.update(json.load(f)["answers"])
    return dict(sorted(counts.items()))


def run_one(work: str, data_root: str, variant: str, init: str, steps: int) -> Dict:
    data = write_variant(os.path.join(data_root, "labeled", "mc_wordnet"), os.path.join(work, "data", variant), variant)
    task = DiagnosisSet(f"mc_{variant}", "run_race.py", [f"--data_dir={data}"], ("accuracy",), "accuracy")
    out = os.path.join(work, "runs", f"{variant}-{init}-{steps}")
    history = os.path.join(out, "train_history.json")
    if transfer.read_score(out, task, steps) is None:  # finished: a dev evaluation of its last step
        if os.path.isdir(out):
            import shutil

            shutil.rmtree(out)
        cmd = transfer.runner_command(work, task, out, "0") + [
            f"--learning_rate={RATES[init]}", f"--train_steps={steps}", f"--warmup_steps={max(steps // 10, 1)}",
            "--save_steps=80", "--keep_checkpoints=10", "--steps_per_loop=10", "--eval_all_checkpoints=true", *VARIANT_FLAGS.get(variant, [])]
        if init != "scratch":
            cmd.append(f"--init_checkpoint={transfer.pretrained_dir(work, init)}/final")
        transfer._say(f"mc diagnosis: {variant} {init} {steps} steps")
        transfer.run_logged(cmd, out + ".log")
    from xlnet_tf.artifacts import results

    evals = [{k: e[k] for k in ("step", "accuracy", "loss", "logit_std", "top_letter_share") if k in e}
             for e in results.load(out).evaluations]
    with open(history, encoding="utf-8") as f:
        losses = [(int(r["step"]), float(r["loss"])) for r in map(json.loads, f) if "loss" in r]
    return {"variant": variant, "init": init, "steps": steps, "learning_rate": RATES[init], "dev": evals,
            "train_loss": losses}


ZERO_SHOT_READINGS = {  # name -> (query with one blank made from a question "Which word means: <definition>?", article?)
    "question _ (with article)": (lambda q: q + " _", True),
    "question _ (no article)": (lambda q: q + " _", False),
    "_ means <definition>. (with article)": (lambda q: "_ means " + q.split(": ", 1)[1].rstrip("?") + ".", True),
}


def zero_shot(mc_dir: str, plm_dir: str) -> Dict[str, float]:
    """Dev accuracy (%) of the PLM's own probability of each option in the blank, per reading (no fine-tuning)."""
    from bench.studies.cloze import cloze_baselines

    scorer = cloze_baselines.load_scorer(os.path.join(plm_dir, "final"), os.path.join(plm_dir, "spiece.model"),
                                         seq_len=256, max_pieces=24)
    articles = []
    for file_name in sorted(os.listdir(os.path.join(mc_dir, "dev"))):
        with open(os.path.join(mc_dir, "dev", file_name), encoding="utf-8") as f:
            articles.append(json.load(f))
    out = {}
    for name, (template, with_article) in ZERO_SHOT_READINGS.items():
        questions = [{"article": art["article"] if with_article else "", "questions": [template(q)],
                      "options": [art["options"][k]], "answers": [art["answers"][k]]}
                     for art in articles for k, q in enumerate(art["questions"])]
        out[name] = cloze_baselines.lm_zero_shot(questions, scorer)
    return out


def write_report(runs: List[Dict], letter_counts: Dict, prefix: str, zero: Dict[str, float]) -> None:
    machine = host.describe()
    report = {"machine": machine, "command": cli.invocation("bench.studies.diagnostics.mc_diagnosis"),
              "log4": math.log(4), "answer_letters": letter_counts, "zero_shot_plm": zero, "runs": runs}
    with open(prefix + ".json", "w", encoding="utf-8") as f:
        json.dump(report, f, indent=1)
    lines = [f"# Multiple choice at chance: mc_wordnet diagnosis ({machine['cpu']}, {machine['cores']} cores; "
             f"{machine['vector_extensions']})", "", f"Command: `{report['command']}`", "",
             "Recipe bench/studies/diagnostics/flags/transfer_mc_wordnet.flags (16 questions a step, dropout 0), "
             "seed 0, the table's "
             "rate per init (scratch 1e-3, PLM 3e-4). Dev: 500 questions, chance 25%, log 4 = 1.386.", "",
             "Answer letters: " + "; ".join(f"{s} {c}" for s, c in letter_counts.items()), "",
             "| variant | init | steps | train loss (first 10 / last 10 steps) | dev accuracy (last) | best dev "
             "(step) | dev loss | logit std | top letter share |", "|---|---|---|---|---|---|---|---|---|"]
    for r in runs:
        last = r["dev"][-1]
        best = max(r["dev"], key=lambda e: e["accuracy"])
        first_loss, last_loss = r["train_loss"][0][1], r["train_loss"][-1][1]
        lines.append(f"| {r['variant']} | {r['init']} | {r['steps']} | {first_loss:.3f} / {last_loss:.3f} | "
                     f"{100 * last['accuracy']:.1f} | {100 * best['accuracy']:.1f} ({best['step']}) | "
                     f"{last.get('loss', float('nan')):.3f} | {last.get('logit_std', float('nan')):.3f} | "
                     f"{last.get('top_letter_share', float('nan')):.2f} |")
    lines += ["", "What the PLM knows before fine-tuning (zero-shot, bench/studies/cloze/blank_scoring.py: its own "
              "probability "
              "of each option in the blank; dev, chance 25): " + "; ".join(f"`{k}` {v:.1f}" for k, v in zero.items())]
    with open(prefix + ".md", "w", encoding="utf-8") as f:
        f.write("\n".join(lines) + "\n")
    plt = figures.pyplot()

    fig, (ax0, ax1) = plt.subplots(1, 2, figsize=(11, 4))
    for r in runs:
        label = f"{r['variant']} {r['init']} {r['steps']}"
        ax0.plot(*zip(*r["train_loss"]), label=label, lw=1)
        ax1.plot([e["step"] for e in r["dev"]], [100 * e["accuracy"] for e in r["dev"]], marker="o", label=label)
    ax0.axhline(math.log(4), ls="--", color="k", lw=1, label="log 4")
    ax0.set_xlabel("step")
    ax0.set_ylabel("train loss (10-step mean)")
    ax1.axhline(25, ls="--", color="k", lw=1, label="chance")
    ax1.set_xlabel("step")
    ax1.set_ylabel("dev accuracy (%)")
    ax1.legend(fontsize=7)
    fig.tight_layout()
    figures.save(fig, prefix + ".png")


def define_flags(fv: flags.FlagValues = FLAGS):
    d = cli.Definer(fv)
    d.string("work_dir", None, "Runs, data variants and records.")
    d.string("data_root", os.path.join(os.path.dirname(REPO), "shared", "data"), "The shared data.")
    d.string("plm_dir", os.path.join(os.path.dirname(REPO), "shared", "models", "plm_cpu"),
             "The CPU recipe's PLM model (the transfer study's plm_model).")
    d.list("only", [], "Run only these `variant-init-steps` (default: all of RUNS).")
    d.string("results_prefix", os.path.join(REPO, "bench", "studies", "diagnostics", "results", "mc_diagnosis_cpu"),
             "Report path.")
    flags.mark_flag_as_required("work_dir", flag_values=fv)


def main():
    work = os.path.abspath(FLAGS.work_dir)
    os.makedirs(work, exist_ok=True)
    for link, target in (("plm_model", FLAGS.plm_dir), ("spiece.model", os.path.join(FLAGS.plm_dir, "spiece.model"))):
        if not os.path.exists(os.path.join(work, link)):
            os.symlink(os.path.abspath(target), os.path.join(work, link))
    data_root = os.path.abspath(FLAGS.data_root)
    wanted = [r for r in RUNS if not FLAGS.only or f"{r[0]}-{r[1]}-{r[2]}" in FLAGS.only]
    runs = [run_one(work, data_root, *r) for r in wanted]
    mc = os.path.join(data_root, "labeled", "mc_wordnet")
    write_report(runs, {s: letters(mc, s) for s in ("train", "dev")}, FLAGS.results_prefix,
                 zero_shot(mc, os.path.abspath(FLAGS.plm_dir)))


if __name__ == "__main__":
    cli.run(FLAGS, define_flags, main)
