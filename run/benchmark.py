"""Runs a list of fine-tuning flag files and writes a results table (Markdown + JSON).

  python run/benchmark.py --flagfiles=run/flags/mrpc.flags,run/flags/stsb.flags,run/flags/race.flags \
      --data_root=glue_and_race/ --results_dir=bench_out/ \
      --extra_flags="--model_config_path=xlnet_cased_L-24_H-1024_A-16/xlnet_config.json
                     --init_checkpoint=converted/ --spiece_model_file=xlnet_cased_L-24_H-1024_A-16/spiece.model"

With `--quick`, each flag file only trains, for `QUICK_FLAGS`' two host loops of 5 steps (no warm-up, no
evaluation or prediction): the runners' examples/s in minutes, without metrics. The headline speed comparison
with Hugging Face is the speed harness, `python -m bench.speed.harness` (`--quick` there too; run/ imports
nothing of bench/).

Each flag file runs in its own process (one tf.distribute strategy per process) with
`--model_dir=<results_dir>/<name>` and `--record_dir=<results_dir>/<name>/records`; `--data_dir` is
`<data_root>/<the task's usual folder>` unless the flag file sets it. The runner is chosen by the file
name (`race*` -> run_race.py, `squad*` -> run_squad.py, `ner*`/`pos*` -> run_tagger.py, otherwise
run_classifier.py).
Rows: task, metric, value (best and last checkpoint), steps, examples/s (mean over the host loops after the
first, which traces and compiles), wall time.
"""

import json
import os
import shlex
import subprocess
import sys
import time


from absl import flags

from run import common_flags
from xlnet_tf.errors import UserError

FLAGS = flags.FlagValues()  # defined by define_flags when the benchmark runs, never at import


def define_flags(fv: flags.FlagValues = FLAGS):
    d = common_flags.Definer(fv)
    d.list("flagfiles", None, "Flag files to run, in order.")
    d.string("results_dir", None, "Where model directories and the results table go.")
    d.string("data_root", "", "Folder holding the tasks' data folders (GLUE layout names).")
    d.string("extra_flags", "", "Flags added to every run (model config, init checkpoint, ...).")
    d.bool("quick", False, "Only train, two host loops of 5 steps per flag file (QUICK_FLAGS; --extra_flags "
           "still win): examples/s in minutes, no metrics.")


RUN_DIR = os.path.dirname(os.path.abspath(__file__))
DATA_FOLDERS = {"mnli": "MNLI", "qqp": "QQP", "sst2": "SST-2", "cola": "CoLA", "stsb": "STS-B", "mrpc": "MRPC",
                "rte": "RTE", "qnli": "QNLI", "wnli": "WNLI", "imdb": "aclImdb", "yelp5": "yelp_review_full_csv",
                "yelp2": "yelp_review_polarity_csv", "race": "RACE"}
# --quick: two host loops of 5 steps (the first traces and compiles), training only; warm-up off (a recipe's
# is longer than this run); placed before --extra_flags, which win.
QUICK_FLAGS = ("--do_train=true", "--do_eval=false", "--do_predict=false", "--steps_per_loop=5", "--train_steps=10",
               "--save_steps=10", "--keep_checkpoint_steps=0", "--warmup_steps=0")
# The headline metric of each task (the first one present is reported).
METRICS = ("pearson", "mcc", "f1", "accuracy", "best_f1", "f1_score")


def runner_for(flagfile: str) -> str:
    name = os.path.basename(flagfile)
    if name.startswith("race"):
        return os.path.join(RUN_DIR, "run_race.py")
    if name.startswith("squad"):
        return os.path.join(RUN_DIR, "run_squad.py")
    if name.startswith(("ner", "pos")):
        return os.path.join(RUN_DIR, "run_tagger.py")
    return os.path.join(RUN_DIR, "run_classifier.py")


def command_for(flagfile: str, output_dir: str, data_root: str, extra: str, quick: bool = False):
    name = os.path.splitext(os.path.basename(flagfile))[0]
    model_dir = os.path.join(output_dir, name)
    cmd = [sys.executable, runner_for(flagfile), f"--flagfile={flagfile}", f"--model_dir={model_dir}",
           f"--record_dir={os.path.join(model_dir, 'records')}"]
    sets_data = any(line.startswith("--data_dir") for line in open(flagfile, encoding="utf-8"))
    task = name.split("_")[0]
    if not sets_data and data_root and task in DATA_FOLDERS:
        cmd.append(f"--data_dir={os.path.join(data_root, DATA_FOLDERS[task])}")
    return name, model_dir, cmd + list(QUICK_FLAGS if quick else ()) + shlex.split(extra)


def summarize(name: str, model_dir: str, wall: float, returncode: int):
    from xlnet_tf.artifacts import results

    row = {"task": name, "status": "ok" if returncode == 0 else f"failed ({returncode})",
           "wall_s": round(wall, 1)}
    recorded = results.load(model_dir)
    splits = recorded.splits() if recorded is not None else []
    if splits:
        split = "dev" if "dev" in splits else splits[-1]  # the runs' --eval_split (dev unless a flag file says)
        best, last = recorded.best(split), recorded.last(split)
        metric = next((m for m in METRICS if m in last), None)
        if metric:
            row.update(metric=metric, best=best.get(metric), best_step=best.get("step"),
                       last=last.get(metric), steps=last.get("step"))
    history = os.path.join(model_dir, "train_history.json")
    if os.path.exists(history):
        lines = [json.loads(line) for line in open(history) if line.strip()]
        steady = lines[1:] or lines  # the first loop traces and compiles
        if steady:
            row["examples_per_sec"] = round(sum(r["examples_per_sec"] for r in steady) / len(steady), 1)
    return row


def write_table(rows, output_dir: str):
    columns = ("task", "metric", "best", "best_step", "last", "steps", "examples_per_sec", "wall_s", "status")
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    for row in rows:
        cells = [f"{row[c]:.4f}" if isinstance(row.get(c), float) and c in ("best", "last") else str(row.get(c, ""))
                 for c in columns]
        lines.append("| " + " | ".join(cells) + " |")
    with open(os.path.join(output_dir, "results.md"), "w", encoding="utf-8") as f:
        f.write("\n".join(lines) + "\n")
    with open(os.path.join(output_dir, "results.json"), "w", encoding="utf-8") as f:
        json.dump(rows, f, indent=2)
    return "\n".join(lines)


def run_all(flagfiles, output_dir: str, data_root: str = "", extra: str = "", quick: bool = False):
    missing = [f for f in flagfiles if not os.path.isfile(f)]
    if missing:  # checked before the results folder is made
        raise UserError(f"--flagfiles: {', '.join(missing)} does not exist")
    os.makedirs(output_dir, exist_ok=True)
    rows = []
    for flagfile in flagfiles:
        name, model_dir, cmd = command_for(flagfile, output_dir, data_root, extra, quick)
        print("$ " + " ".join(shlex.quote(c) for c in cmd), flush=True)
        start = time.time()
        proc = subprocess.run(cmd)
        rows.append(summarize(name, model_dir, time.time() - start, proc.returncode))
        write_table(rows, output_dir)  # after every run: a partial table survives a later failure
    return rows


def run():
    if not FLAGS.flagfiles or not FLAGS.results_dir:
        raise UserError("--flagfiles and --results_dir are required")
    rows = run_all(FLAGS.flagfiles, FLAGS.results_dir, FLAGS.data_root, FLAGS.extra_flags, FLAGS.quick)
    print(write_table(rows, FLAGS.results_dir))
    return rows


if __name__ == "__main__":
    common_flags.run_main(FLAGS, define_flags, run)
