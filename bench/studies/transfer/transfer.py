"""Does pretraining pay off? Fine-tune from random weights, from BERT's objective (MLM) and from XLNet's
(PLM), pretrained on the same data with the same model, optimizer and steps; one command, resumable.

  python -m bench.studies.transfer.transfer --flagfile=bench/studies/transfer/flags/transfer_cpu.flags

Stages (`--stages`, in order; each skips what is already done, so a killed run just starts again):
  corpus    <work_dir>/corpus/: the shared corpus' five train files; `wiki.txt` without the articles of the
            topic task's dev and test splits (their lead sections would otherwise be pretraining text).
  spm       <work_dir>/spiece.model (SentencePiece, `--vocab_size`).
  records   <work_dir>/<objective>_{train,heldout}/ (tfrecords/build_pretrain.py's builder, the data flags
            of `--pretrain_flagfile`, `--objective`); held-out text: corpus/heldout.txt.
  pretrain  <work_dir>/<objective>_model/ (run/pretrain.py --flagfile=<pretrain_flagfile> --objective=...).
  finetune  <work_dir>/finetune/<task>/<init>/lr<lr>-seed<seed>/ for every task x init x learning rate of the
            grid with seed 0, then the extra `--seeds` at each init's best rate (run/run_classifier.py,
            run_race.py, run_squad.py with the task's transfer_<task>.flags, `TASK_FLAGFILES`; same budget for
            every init).
  report    <results_prefix>.json / .md / .png.

Every finished run's scores are also kept, with what shaped the run, in the run ledger (`--runs_ledger`, by
default `<results_prefix>_runs.json`, committed beside the report; transfer_ledger.py): a work_dir lost
with its machine restores them instead of training again, so a table longer than one machine's life resumes.

The grid's best learning rate is chosen on the dev split, which is also what is reported (the tasks have
no other labelled split here except topic and paraphrase); the same choice is made for every init.
"""

from __future__ import annotations

import dataclasses
import functools
import glob
import json
import math
import os
import shutil
import statistics
import subprocess
import sys
import time
from typing import Any, Dict, List, Optional, Sequence, Tuple

from absl import flags

from bench import cli, figures
from bench.studies.transfer import transfer_ledger
from xlnet_tf.errors import UserError

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))  # the repository root
FLAGS = flags.FlagValues()  # defined by define_flags when the script runs, never at import
STAGES = ("corpus", "spm", "records", "pretrain", "finetune", "report")
INITS = ("scratch", "mlm", "plm")
CORPUS_FILES = ("sotu.txt", "austen.txt", "moby_dick.txt", "brown.txt", "wiki.txt")
# Data flags the record builder and the trainer must agree on (taken from the pretraining flag file).
DATA_FLAGS = ("seq_len", "reuse_len", "num_predict", "perm_size", "bi_data")
# Each task's flag file (its runs' budget, the same for every init): transfer_<task>.flags of this study's flags/,
# or of the study that grew from the task.
FLAGS_DIR = os.path.join(REPO, "bench", "studies", "transfer", "flags")
TASK_FLAGFILES = {"cloze": os.path.join(REPO, "bench", "studies", "cloze", "flags", "transfer_cloze.flags"),
                  "mc_wordnet": os.path.join(REPO, "bench", "studies", "diagnostics", "flags",
                                             "transfer_mc_wordnet.flags")}
# Where the task flag files were before (the same files, moved): a run launched then names them there and is still
# the run of its table.
MOVED_FROM = os.path.join(REPO, "run", "flags")


class TransferSet:
    """One labeled set of the transfer table: its runner, flag file, data arguments and headline metrics."""

    def __init__(self, name, runner, data_args, metrics, primary, test_split=None, baseline=None, baseline_note="",
                 zero_shot=None):
        self.name, self.runner, self.data_args, self.metrics, self.primary = (
            name, runner, data_args, metrics, primary)
        # A labelled test split: the runs at each init's best rate are also evaluated on it, and its scores
        # enter the rows as "test_<metric>" (the grid is still chosen on dev).
        self.test_split = test_split
        # Baseline scores beside the row: a callable returning {metric: percent} (test metrics "test_...").
        self.baseline = baseline
        self.baseline_note = baseline_note  # what the baseline column holds for this task (the report's note)
        # A pretrained model's score without fine-tuning: a callable (work, init) -> {metric: percent}, or None.
        self.zero_shot = zero_shot
        # "last": a run's score is its last dev evaluation (the recipe's fixed budget); "best_checkpoint": its best
        # dev evaluation over the checkpoints of a longer run (SELECTIONS), the step chosen as the rate is
        self.selection = "last"
        # classifier/RACE metrics are fractions, SQuAD's percentages; the report is in percent
        self.to_percent = 1.0 if runner == "run_squad.py" else 100.0

    @property
    def flagfile(self) -> str:
        return TASK_FLAGFILES.get(self.name) or os.path.join(FLAGS_DIR, f"transfer_{self.name}.flags")


def tasks(labeled: str, pos_dir: Optional[str] = None, cloze_dir: Optional[str] = None,
          ood_dir: Optional[str] = None, ner_dir: Optional[str] = None) -> Dict[str, TransferSet]:
    sq = os.path.join(labeled, "squad_wordnet")
    ner_dir = ner_dir or os.path.join(labeled, "wnut16")
    ood_dir = ood_dir or os.path.join(labeled, "ood")
    pos_dir = pos_dir or os.path.join(labeled, "brown_pos")
    cloze_dir = cloze_dir or os.path.join(labeled, "cloze")
    corpus = sorted(glob.glob(os.path.join(os.path.dirname(labeled), "corpus", "train", "*.txt")))
    return {t.name: t for t in (
        TransferSet("pos_brown", "run_tagger.py", [f"--data_dir={pos_dir}"],
                    ("token_accuracy", "test_token_accuracy"), "token_accuracy", test_split="test",
                    baseline=lambda: most_frequent_tag(pos_dir),
                    baseline_note="pos_brown's is the most-frequent-tag tagger (each word's most frequent tag in "
                                  "train.txt, the most frequent tag overall for unseen words)"),
        TransferSet("ner_wnut16", "run_tagger.py", [f"--data_dir={ner_dir}"], ("f1", "test_f1"), "f1",
                    test_split="test", baseline=lambda: most_frequent_tag(ner_dir, kind="entities"),
                    baseline_note="ner_wnut16's is the most-frequent-tag tagger scored as entities (seqeval's entity "
                                  "F1 of each word's most frequent tag in train.txt, O for unseen words)"),
        # accuracy only: the classifier scores a two-class set's F1 on its second label (GLUE's), the linear
        # baseline a macro F1; the runs made so far have no macro F1 to set beside it
        *(TransferSet(name, "run_classifier.py", [f"--data_dir={ood_dir}/{name}"],
                      ("accuracy", "test_accuracy"), "accuracy", test_split="test",
                      baseline=lambda name=name: linear_baseline(f"{ood_dir}/{name}"), baseline_note=LINEAR_NOTE)
          for name in ("tweets", "spam")),
        TransferSet("cloze", "run_race.py", [f"--data_dir={cloze_dir}"], ("accuracy", "test_accuracy"), "accuracy",
                    test_split="test", baseline=lambda: cloze_baseline(cloze_dir, corpus),
                    baseline_note="cloze's is the best of bench/studies/cloze/cloze_baselines.py's (a word-bigram "
                                  "model of the pretraining corpus; frequency in the passage and corpus unigram "
                                  "frequency score lower), chance 25",
                    zero_shot=lambda work, init: cloze_zero_shot(work, init, cloze_dir)),
        TransferSet("topic", "run_classifier.py", [f"--data_dir={labeled}/topic"], ("accuracy", "macro_f1"), "accuracy",
                    baseline=lambda: linear_baseline(f"{labeled}/topic"), baseline_note=LINEAR_NOTE),
        TransferSet("paraphrase", "run_classifier.py", [f"--data_dir={labeled}/paraphrase"], ("accuracy", "f1"),
                    "accuracy", baseline=lambda: linear_baseline(f"{labeled}/paraphrase"),
                    baseline_note=LINEAR_NOTE),
        TransferSet("mc_wordnet", "run_race.py", [f"--data_dir={labeled}/mc_wordnet"], ("accuracy",), "accuracy"),
        TransferSet("squad_v1", "run_squad.py", [f"--train_file={sq}/train-v1.1.json", f"--predict_file={sq}/dev-v1.1.json"],
             ("exact_match", "f1"), "f1"),
        TransferSet("squad_v2", "run_squad.py", [f"--train_file={sq}/train-v2.0.json", f"--predict_file={sq}/dev-v2.0.json"],
             ("exact", "f1", "best_f1"), "f1"),
    )}


def define_flags(fv: flags.FlagValues = FLAGS):
    d = cli.Definer(fv)
    d.string("work_dir", None, "Everything the stages write (corpus, records, models, runs).")
    d.string("data_root", os.path.join(os.path.dirname(REPO), "shared", "data"),
             "The shared data folder (corpus/ and labeled/).")
    d.list("stages", list(STAGES), f"Stages to run, of {STAGES}.")
    d.string("pretrain_flagfile", os.path.join(REPO, "run", "flags", "pretrain_cpu.flags"),
             "Pretraining recipe (model, data layout, optimizer, steps) shared by both objectives.")
    d.list("objectives", ["plm", "mlm"], "Pretraining objectives.")
    d.integer("vocab_size", 8000, "SentencePiece vocabulary (must equal the recipe's --n_token).")
    d.string("pos_data_dir", None, "Brown part-of-speech CoNLL split for the pos_brown task "
             "(python tfrecords/sets/brown_pos.py --output_dir=DIR; default: <data_root>/labeled/brown_pos).")
    d.string("ner_data_dir", None, "The WNUT 2016 named-entity split for the ner_wnut16 task (python "
             "tfrecords/sets/wnut16.py --output_dir=DIR; default: <data_root>/labeled/wnut16).")
    d.enum("selection", "last", ["last", "best_checkpoint"], "How a run is scored on dev: its last "
           "checkpoint (the flag file's budget, the same for every init), or its best of "
           "--checkpoints_per_run checkpoints over --steps_multiplier times that budget (the number of "
           "steps chosen on dev, like the rate; test is then scored at that checkpoint).")
    d.integer("steps_multiplier", 4, "--selection=best_checkpoint: run length over the flag file's steps.",
              lower_bound=1)
    d.integer("checkpoints_per_run", 8, "--selection=best_checkpoint: checkpoints scored on dev.",
              lower_bound=1)
    d.string("ood_data_dir", None, "The out-of-domain sets' folder (python tfrecords/sets/ood.py "
             "--output_dir=DIR; default: <data_root>/labeled/ood), for the tweets and spam tasks.")
    d.string("cloze_data_dir", None, "The cloze task's RACE folders for the cloze task (python "
             "tfrecords/sets/cloze.py --output_dir=DIR ...; default: <data_root>/labeled/cloze).")
    d.list("tasks", ["topic", "paraphrase", "mc_wordnet", "squad_v1", "squad_v2"], "Tasks.")
    d.list("inits", list(INITS), "Initialisations: scratch, mlm, plm, and <mlm|plm>@<step> for the "
           "pretraining run's checkpoint kept at that step (the transfer-against-pretraining-steps "
           "curve; the recipe keeps every --keep_checkpoint_steps).")
    d.list("learning_rates", ["1e-4", "3e-4"], "Fine-tuning learning-rate grid (seed 0).")
    d.list("seeds", ["0"], "Seeds at each init's best learning rate (the grid runs seed 0).")
    d.integer("max_grid_extensions", 2, "Extra learning rates (one step of the ladder 1e-5, 3e-5, "
              "1e-4, ...) tried while an init's best rate is at the edge of its grid.")
    d.string("extra_finetune_flags", "", "Flags added to every fine-tuning run.")
    d.string("results_prefix", os.path.join(REPO, "bench", "studies", "transfer", "results", "transfer_cpu"),
             "Report path without extension (.json, .md, .png).")
    d.integer("num_processes", 2, "Record builder processes.")
    d.string("runs_ledger", None, "The run ledger (transfer_ledger.py): every finished run's scores "
             "and what shaped them, kept so that a table outlives its machine; runs missing from the "
             "work_dir are restored from it when their provenance matches. Default "
             "<results_prefix>_runs.json; 'none' for no ledger.")
    d.list("restore_from", [], "Other tables' run ledgers, read only: their runs this table needs are "
           "restored (provenance checked as for its own ledger) and copied into its own ledger as they are "
           "(e.g. a pretraining-steps table reusing the main table's scratch runs).")
    d.string("corpus_task", None, "The corpus stage writes this classification task's train texts (its "
             "train.tsv `text` column, labels dropped; one document per row) as the pretraining corpus "
             "instead of the shared corpus: task-adaptive pretraining (Gururangan et al. 2020), continued "
             "from the --init_checkpoint of --pretrain_flagfile (flags/pretrain_cpu_tapt.flags).")
    d.string("carry_over", None, "An earlier report (.json) of this command whose seed-0 runs (its "
             "learning-rate grids) stand for the runs this work_dir has not made: only when its "
             "pretraining recipe is the same and, for mlm/plm, its pretraining held-out curve equals "
             "this work_dir's (the same pretrained model); cells using them are marked in the report.")


@dataclasses.dataclass(frozen=True)
class TransferSettings:
    """One table's settings: the flags of `define_flags` (lists as tuples, paths as given), read once in main
    (`from_flags`) and passed down, so that the stages, the runs' commands, the ledger and the report read values.
    `tests/bench/test_transfer_ledger.py` holds the fields equal to the flags."""

    work_dir: Optional[str]  # required by run()
    data_root: str
    stages: Tuple[str, ...]
    pretrain_flagfile: str
    objectives: Tuple[str, ...]
    vocab_size: int
    pos_data_dir: Optional[str]
    ner_data_dir: Optional[str]
    selection: str
    steps_multiplier: int
    checkpoints_per_run: int
    ood_data_dir: Optional[str]
    cloze_data_dir: Optional[str]
    tasks: Tuple[str, ...]
    inits: Tuple[str, ...]
    learning_rates: Tuple[str, ...]
    seeds: Tuple[str, ...]
    max_grid_extensions: int
    extra_finetune_flags: str
    results_prefix: str
    num_processes: int
    runs_ledger: Optional[str]
    restore_from: Tuple[str, ...]
    corpus_task: Optional[str]
    carry_over: Optional[str]

    @classmethod
    def from_flags(cls, fv: flags.FlagValues) -> "TransferSettings":
        """The settings of parsed flags `fv` (`define_flags`')."""
        values = {field.name: fv[field.name].value for field in dataclasses.fields(cls)}
        return cls(**{k: tuple(v) if isinstance(v, list) else v for k, v in values.items()})


# ---- helpers ----------------------------------------------------------------------------------------------

def read_flagfile(path: str) -> Dict[str, str]:
    """`--name=value` lines of a flag file (comments and blank lines skipped); a `--flagfile=` line is read in
    place as absl reads it (a relative path from the repository, where the runners start), later lines win."""
    out = {}
    with open(path, encoding="utf-8") as f:
        for line in f:
            line = line.strip()
            if line.startswith("--"):
                name, _, value = line[2:].partition("=")
                if name == "flagfile":
                    out.update(read_flagfile(value if os.path.isabs(value) else os.path.join(REPO, value)))
                else:
                    out[name] = value
    return out


def run_logged(cmd: List[str], log_path: str) -> None:
    """Run a subprocess, output appended to `log_path`; a failure names the log."""
    os.makedirs(os.path.dirname(log_path), exist_ok=True)
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", "PYTHONPATH": REPO}
    with open(log_path, "a", encoding="utf-8") as log:
        log.write(f"\n$ {' '.join(cmd)}\n")
        log.flush()
        rc = subprocess.call(cmd, stdout=log, stderr=subprocess.STDOUT, cwd=REPO, env=env)
    if rc:
        raise RuntimeError(f"{cmd[1]} failed (exit {rc}); see {log_path}")


def _say(msg: str) -> None:
    print(f"[transfer {time.strftime('%H:%M:%S')}] {msg}", flush=True)


# ---- stages -----------------------------------------------------------------------------------------------

def topic_eval_titles(labeled: str) -> set:
    titles = set()
    for split in ("dev", "test"):
        with open(os.path.join(labeled, "topic", f"{split}_titles.tsv"), encoding="utf-8") as f:
            next(f)
            titles.update(line.rstrip("\n").split("\t")[-1] for line in f if line.strip())
    return titles


def stage_corpus(work: str, data_root: str) -> str:
    """The pretraining text; wiki.txt's documents are matched to corpus/wiki_titles.txt line by line."""
    from xlnet_tf import files

    out = os.path.join(work, "corpus")
    os.makedirs(out, exist_ok=True)
    src = os.path.join(data_root, "corpus", "train")
    for name in CORPUS_FILES[:-1]:
        dst = os.path.join(out, name)
        if not os.path.exists(dst):
            os.symlink(os.path.join(src, name), dst)
    dst = os.path.join(out, "wiki.txt")
    if not os.path.exists(dst):
        with open(os.path.join(data_root, "corpus", "wiki_titles.txt"), encoding="utf-8") as f:
            titles = [line.rstrip("\n") for line in f]
        with open(os.path.join(src, "wiki.txt"), encoding="utf-8") as f:
            docs = [d.strip("\n") for d in f.read().split("\n\n") if d.strip()]
        if len(docs) != len(titles):
            raise ValueError(f"{src}/wiki.txt has {len(docs)} documents but wiki_titles.txt {len(titles)} titles")
        drop = topic_eval_titles(os.path.join(data_root, "labeled"))
        keep = [d for d, t in zip(docs, titles) if t not in drop]
        files.write_text_atomic(dst, "\n\n".join(keep) + "\n")
        _say(f"corpus: wiki.txt keeps {len(keep)} of {len(docs)} articles (topic dev/test dropped)")
    return out


def stage_task_corpus(work: str, task: TransferSet) -> str:
    """--corpus_task: <work_dir>/corpus/<task>_train.txt, the task's train texts in the corpus format (one document
    per row, its text on one line, a blank line between); refused when the corpus folder holds other text."""
    from tfrecords.readers import tables
    from xlnet_tf import files

    data_dir = next((a.split("=", 1)[1] for a in task.data_args if a.startswith("--data_dir=")), None)
    if task.runner != "run_classifier.py" or data_dir is None:
        raise UserError(f"--corpus_task={task.name}: only a classification task's train.tsv can be a corpus")
    out = os.path.join(work, "corpus")
    os.makedirs(out, exist_ok=True)
    dst = os.path.join(out, f"{task.name}_train.txt")
    others = sorted(set(os.listdir(out)) - {os.path.basename(dst)})
    if others:
        raise UserError(f"--corpus_task={task.name}: {out} also holds {others}; the task's text would be "
                        "pretrained on mixed with them: use a work_dir of its own")
    if not os.path.exists(dst):
        table = tables.read_table(os.path.join(data_dir, "train.tsv"))
        column = table.column("text")
        docs = [" ".join(table.field(line, fields, column, "text").split()) for line, fields in table.rows]
        docs = [d for d in docs if d]
        files.write_text_atomic(dst, "\n\n".join(docs) + "\n")
        _say(f"corpus: {len(docs)} train texts of {task.name} (labels dropped) in {dst}")
    return out


def stage_spm(work: str, vocab_size: int) -> str:
    model = os.path.join(work, "spiece.model")
    if not os.path.exists(model):
        from tfrecords.readers import corpus
        from tfrecords import spm

        spm.train_spm(corpus.expand_globs(os.path.join(work, "corpus", "*.txt")), os.path.join(work, "spiece"),
                      vocab_size=vocab_size, num_threads=2)
        _say(f"spm: {model}")
    return model


def stage_records(work: str, data_root: str, recipe: Dict[str, str], objective: str, num_processes: int):
    from tfrecords.pretrain import writer as pretrain_data

    common = dict(seq_len=int(recipe["seq_len"]), reuse_len=int(recipe["reuse_len"]),
                  num_predict=int(recipe["num_predict"]), perm_size=int(recipe["perm_size"]),
                  bi_data=recipe["bi_data"] == "true", global_batch_size=int(recipe["train_batch_size"]),
                  objective=objective)
    spiece = os.path.join(work, "spiece.model")
    for split, glob_, shards in (("train", os.path.join(work, "corpus", "*.txt"), 4),
                                 ("heldout", os.path.join(data_root, "corpus", "heldout.txt"), 1)):
        out = os.path.join(work, f"{objective}_{split}")
        cfg = pretrain_data.PretrainConfig(**common, split=split, num_shards=shards)
        pretrain_data.build_pretrain_records(glob_, spiece, out, cfg, num_processes=num_processes,
                                             log=lambda s: None)  # finished shards are skipped
    _say(f"records: {objective} train/heldout ready")


def pretrained_dir(work: str, objective: str) -> str:
    return os.path.join(work, f"{objective}_model")


def parse_init(init: str) -> tuple:
    """`scratch`, `mlm`, `plm`, or `<mlm|plm>@<step>`: the pretraining run's checkpoint kept at that step (the
    recipe's `--keep_checkpoint_steps`; the transfer-against-pretraining-steps curve). Returns (objective, step or
    None); raises ValueError naming the init."""
    base, sep, step = init.partition("@")
    if base not in INITS or (sep and (base == "scratch" or not step.isdigit() or int(step) <= 0)):
        raise ValueError(f"init {init!r}: expected one of {INITS} or <mlm|plm>@<step> (a positive step the "
                         "pretraining run kept, e.g. plm@900)")
    return base, (int(step) if sep else None)


def init_checkpoint(work: str, init: str) -> Optional[str]:
    """The weights fine-tuning starts from (`--init_checkpoint`): the pretraining run's `final/`, or for
    `<objective>@<step>` its kept checkpoint of that step (`kept/ckpt-<step>`); None for scratch."""
    objective, step = parse_init(init)
    if objective == "scratch":
        return None
    if step is None:
        return os.path.join(pretrained_dir(work, objective), "final")
    from xlnet_tf.artifacts import pretrain_info

    return os.path.join(pretrained_dir(work, objective), pretrain_info.KEPT_DIR, f"ckpt-{step}")


def init_checkpoint_prefix(work: str, init: str) -> Optional[str]:
    """The checkpoint prefix of `init_checkpoint` (whose `.index` file tells whether the weights exist)."""
    path = init_checkpoint(work, init)
    if path is None or parse_init(init)[1] is not None:
        return path
    return os.path.join(path, "xlnet_model.ckpt")


def pretraining_done(work: str, objective: str, train_steps: int) -> bool:
    from xlnet_tf.artifacts import results

    final = os.path.join(pretrained_dir(work, objective), "final", "xlnet_model.ckpt.index")
    recorded = results.load(pretrained_dir(work, objective))
    return os.path.exists(final) and recorded is not None and recorded.last_step == train_steps


def stage_pretrain(work: str, recipe_path: str, recipe: Dict[str, str], objective: str):
    if pretraining_done(work, objective, int(recipe["train_steps"])):
        return
    _say(f"pretrain {objective}: {recipe['train_steps']} steps (resumes from its model_dir)")
    run_logged([sys.executable, "run/pretrain.py", f"--flagfile={recipe_path}", f"--objective={objective}",
                f"--record_dir={work}/{objective}_train", f"--eval_records_dir={work}/{objective}_heldout",
                f"--spiece_model={work}/spiece.model", f"--model_dir={pretrained_dir(work, objective)}"],
               os.path.join(work, f"pretrain_{objective}.log"))


def run_dir(work: str, task: str, init: str, lr: str, seed: str) -> str:
    return os.path.join(work, "finetune", task, init, f"lr{lr}-seed{seed}")


def differing_keys(a: Dict[str, Any], b: Dict[str, Any]) -> List[str]:
    """The keys whose values differ between two records (a key only one has counts), sorted."""
    return sorted(k for k in set(a) | set(b) if a.get(k) != b.get(k))


def check_extra_flags(extra: str) -> None:
    """--extra_finetune_flags as this script reads them (`final_step`, run identity): `--name=value` or a boolean
    `--name` / `--noname`, each a token of its own; no --flagfile (its content would go unrecorded)."""
    for token in extra.split():
        if not token.startswith("--"):
            raise UserError(f"--extra_finetune_flags: '{token}' is not a --name=value flag (write "
                            "--name=value, not --name value)")
        if token[2:].split("=", 1)[0] == "flagfile":
            raise UserError("--extra_finetune_flags: no --flagfile (its content would not be part of the runs' "
                            "identity); list the flags themselves")


def final_step(task: TransferSet, settings: TransferSettings) -> int:
    """The step a run of `task` trains to: the flag file's --train_steps, as the budget flags and
    --extra_finetune_flags override it (the runner reads them in that order; the last one counts)."""
    steps = read_flagfile(task.flagfile).get("train_steps")
    for arg in budget_flags(task, settings) + settings.extra_finetune_flags.split():
        if arg.startswith("--train_steps="):
            steps = arg.split("=", 1)[1]
    if steps is None:
        raise UserError(f"{task.flagfile}: no --train_steps (every transfer task's flag file sets one)")
    return int(steps)


def read_score(path: str, task: TransferSet, final: int) -> Optional[Dict[str, float]]:
    """The run's dev metrics, plus "test_<metric>" of the same checkpoint's test evaluation when there is one.
    Dev: the last evaluation of any split but the task's test split (`task.selection == "last"`), or the one with
    the best primary metric, the earliest on a tie ("best_checkpoint"); its checkpoint's step is "step".
    None for a run that has not finished: no dev evaluation of its final step `final` (`final_step`). The runner scores
    the checkpoints in order and records each at once, so a run killed while scoring them has some, and its best
    so far must not stand for the run's."""
    from xlnet_tf.artifacts import results

    recorded = results.load(path)
    if recorded is None:
        return None
    dev = [e for e in recorded.evaluations if not task.test_split or e.get("split") != task.test_split]
    test = [e for e in recorded.evaluations if task.test_split and e.get("split") == task.test_split]
    if not any(int(e["step"]) == final for e in dev):
        return None
    chosen = dev[-1]
    if task.selection == "best_checkpoint":
        chosen = max(dev, key=lambda e: (float(e[task.primary]), -int(e["step"])))
        test = [e for e in test if int(e["step"]) == int(chosen["step"])]
    score = {m: float(chosen[m]) * task.to_percent for m in task.metrics if m in chosen}
    score["step"] = int(chosen["step"])
    if test:
        test = test[-1]
        score.update({m: float(test[m[len("test_"):]]) * task.to_percent for m in task.metrics
                      if m.startswith("test_") and m[len("test_"):] in test})
    return score


def as_moved(args: List[str], task: TransferSet) -> List[str]:
    """A run's arguments with its task flag file named where it is now (`MOVED_FROM`: a run launched before the
    move names the same file there)."""
    before = f"--flagfile={os.path.join(MOVED_FROM, os.path.basename(task.flagfile))}"
    return [f"--flagfile={task.flagfile}" if arg == before else arg for arg in args]


def made_by(out: str) -> Optional[tuple]:
    """How run `out` was made: `(arguments without the interpreter's path, its task flag file's SHA-256 or None)`
    from its launch record (`<run>.launch.json`), or for runs made before those, the arguments of its .log's last
    `$ ` line (the launch that made what the folder holds; paths without spaces); None when neither exists."""
    launch = read_launch(out)
    if launch is not None:
        return launch["command"][1:], launch.get("flagfile_sha256")
    try:
        with open(out + ".log", encoding="utf-8") as f:
            launches = [line[2:].split() for line in f if line.startswith("$ ")]
    except FileNotFoundError:
        return None
    return (launches[-1][1:], None) if launches else None


def run_score(settings: TransferSettings, work: str, task: TransferSet, init: str, lr: str, seed: str
              ) -> Optional[Dict[str, float]]:
    """`read_score` of run (task, init, lr, seed) of this work_dir, refusing a run made otherwise than this table
    makes it: its folder's name holds the task, init, rate and seed only, so a table with other fine-tuning flags
    (a diagnosis row's --extra_finetune_flags, another budget) or an edited task flag file in the same work_dir
    would otherwise take the runs there as its own. A run made here: its command (paths included) and flag file;
    a run restored from the ledger: the provenance it was restored with against this table's."""
    out = run_dir(work, task.name, init, lr, seed)
    score = read_score(out, task, final_step(task, settings))
    if score is None:
        return None
    marker = os.path.join(out, transfer_ledger.RESTORED_MARKER)
    if os.path.exists(marker):
        with open(marker, encoding="utf-8") as f:
            restored = json.load(f)["provenance"]
        wanted = run_provenance(settings, work, task, init, lr, seed, restored.get("init_checkpoint_sha256")).to_dict()
        differs = differing_keys(restored, wanted)
        if differs:
            raise UserError(f"{out}: restored from the ledger for a table with other {', '.join(differs)} than "
                            "this one's; give this table its own --work_dir")
        return score
    made = made_by(out)
    if made is None:
        return score  # no record of how it was made (not made by this script)
    args, flagfile_sha = made
    args = as_moved(args, task)
    wanted_args = run_command(settings, work, task, init, lr, seed)[1:]
    if args != wanted_args:
        differs = sorted(set(args) ^ set(wanted_args)) or ["the order of the arguments"]
        raise UserError(f"{out}: made by another command than this table's (differs in {' '.join(differs)}); "
                        "give a table with other fine-tuning flags its own --work_dir (with links to the "
                        "pretrained models and spiece.model; a moved work_dir also differs, in its paths)")
    if flagfile_sha is not None and flagfile_sha != transfer_ledger.fingerprint(task.flagfile):
        raise UserError(f"{out}: made with another {task.flagfile} (edited since); train it again in a new "
                        "--work_dir, or restore the flag file")
    return score


def evaluate_test(settings: TransferSettings, work: str, task: TransferSet, init: str, lr: str, seed: str) -> None:
    """Evaluate a finished run's dev-chosen checkpoint on the task's test split (appended to its
    eval_results.json)."""
    out = run_dir(work, task.name, init, lr, seed)
    score = run_score(settings, work, task, init, lr, seed)
    if not task.test_split or score is None or any(m.startswith("test_") for m in score):
        return
    if os.path.exists(os.path.join(out, transfer_ledger.RESTORED_MARKER)):
        # restored from the ledger without its weights: train it again (deterministic) to score them on test
        _say(f"{task.name} {init} lr {lr} seed {seed}: the ledger has no {task.test_split} score; training it again")
        shutil.rmtree(out)
        finetune(settings, work, task, init, lr, seed)
        score = run_score(settings, work, task, init, lr, seed)
    # the run's own command (its model settings are checked against the model_dir's), training off, scoring only
    # the dev-chosen checkpoint (read_score then takes its test score)
    cmd = run_command(settings, work, task, init, lr, seed) + [
        "--do_train=false", "--do_eval=true", f"--eval_split={task.test_split}",
        f"--eval_checkpoint_steps={score['step']}"]
    note_launch_code(out, first=False)
    run_logged(cmd, out + f".{task.test_split}.log")
    _say(f"{task.name} {init} lr {lr} seed {seed} on {task.test_split}: "
         f"{read_score(out, task, final_step(task, settings))}")
    keep_in_ledger(settings, work, task, init, lr, seed)


def most_frequent_tagger(data_dir: str):
    """`(tag, known)`: `tag(words)` gives each word its most frequent tag in `<data_dir>/train.txt` (the first seen of
    equally frequent tags), the most frequent tag overall for words never seen in training; `known` is the set of
    train words."""
    import collections

    from tfrecords.readers import conll

    by_word, overall = collections.defaultdict(collections.Counter), collections.Counter()
    for sentence in conll.read_conll(os.path.join(data_dir, "train.txt")):
        for word, tag in zip(sentence.words, sentence.labels):
            by_word[word][tag] += 1
            overall[tag] += 1
    fallback = overall.most_common(1)[0][0]
    best = {word: counts.most_common(1)[0][0] for word, counts in by_word.items()}
    return (lambda words: [best.get(w, fallback) for w in words]), frozenset(best)


def most_frequent_tag(data_dir: str, kind: str = "pos") -> Dict[str, float]:
    """The most-frequent-tag tagger (`most_frequent_tagger`) on dev and test, in percent: token accuracy (`kind`
    "pos"), or seqeval's entity F1 ("entities", the runner's --metrics=entities scorer). What a tagger must beat."""
    from tfrecords.readers import conll
    from xlnet_tf.metrics import tagging as tagging_metrics

    tag, _ = most_frequent_tagger(data_dir)
    key = {"pos": "token_accuracy", "entities": "f1"}[kind]
    out = {}
    for split, prefix in (("dev", ""), ("test", "test_")):
        sentences = conll.read_conll(os.path.join(data_dir, f"{split}.txt"))
        guesses = [tag(s.words) for s in sentences]
        scores = tagging_metrics.tagging_results([list(s.labels) for s in sentences], guesses, kind=kind)
        out[prefix + key] = 100.0 * scores[key]
    return out


LINEAR_NOTE = ("the classification rows' is bench/studies/baselines/linear_baseline.py's TF-IDF word 1-2-gram logistic "
               "regression (C chosen on dev; a pair's features [a, b, a*b]), and `majority` always answers the most "
               "frequent train label")


def linear_baseline(data_dir: str) -> Dict[str, float]:
    """The linear baseline's and the majority class's dev scores (percent): `{metric: linear,
    "majority_<metric>": majority}`, and "test_..." of both when the set has a test split."""
    from bench.studies.baselines import linear_baseline as lb

    splits = ("dev", "test") if os.path.exists(os.path.join(data_dir, "test.tsv")) else ("dev",)
    out = lb.baselines(data_dir, splits=splits)
    scores = {}
    for split in splits:
        prefix = "" if split == "dev" else "test_"
        scores.update({prefix + m: v for m, v in out["tfidf_logreg"][split].items()})
        scores.update({"majority_" + prefix + m: v for m, v in out["majority"][split].items()})
    return scores


def cloze_baseline(cloze_dir: str, corpus: Sequence[str]) -> Dict[str, float]:
    """The word-bigram baseline's accuracy (percent) on dev ("accuracy") and test ("test_accuracy")."""
    from bench.studies.cloze import cloze_baselines

    scores = cloze_baselines.baselines(cloze_dir, corpus)
    return {"accuracy": scores["dev"]["bigram"], "test_accuracy": scores["test"]["bigram"]}


def cloze_zero_shot(work: str, init: str, cloze_dir: str) -> Optional[Dict[str, float]]:
    """The pretrained `init`'s zero-shot cloze accuracy (percent; bench/studies/cloze/blank_scoring.py: its own
    probability of each candidate in the blank) on dev ("accuracy") and test ("test_accuracy"); None without the model.
    Kept in <work>/zero_shot_cloze_<init>.json, keyed by the model's checkpoint and the cloze set's info."""
    from bench.studies.cloze import cloze_baselines
    from tfrecords.sets import cloze
    from xlnet_tf import files

    checkpoint = init_checkpoint(work, init)
    if not os.path.exists(init_checkpoint_prefix(work, init) + ".index"):
        return None
    with open(os.path.join(cloze_dir, cloze.CLOZE_INFO), encoding="utf-8") as f:
        key = {"checkpoint": os.path.realpath(checkpoint), "cloze_info": json.load(f)}
    cache = os.path.join(work, f"zero_shot_cloze_{init}.json")
    if os.path.exists(cache):
        with open(cache, encoding="utf-8") as f:
            kept = json.load(f)
        if kept.get("key") == key:
            return kept["scores"]
    scorer = cloze_baselines.load_scorer(checkpoint, os.path.join(work, "spiece.model"))
    scores = {("" if split == "dev" else "test_") + "accuracy":
              cloze_baselines.lm_zero_shot(cloze.read_questions(os.path.join(cloze_dir, split)), scorer)
              for split in ("dev", "test")}
    files.write_json_atomic(cache, {"key": key, "scores": scores})
    return scores


def runner_command(work: str, task: TransferSet, model_dir: str, seed: str) -> List[str]:
    """The task's runner on its flag file, data, shared records, SentencePiece model and model config."""
    return [sys.executable, f"run/{task.runner}", f"--flagfile={task.flagfile}", *task.data_args,
            f"--record_dir={work}/finetune_records/{task.name}", f"--model_dir={model_dir}",
            f"--spiece_model_file={work}/spiece.model", f"--seed={seed}",
            f"--model_config_path={pretrained_dir(work, 'plm')}/xlnet_config.json"]


def budget_flags(task: TransferSet, settings: TransferSettings) -> List[str]:
    """`--selection=best_checkpoint`: the run lasts `--steps_multiplier` times the flag file's steps (warm-up
    scaled alike) and keeps `--checkpoints_per_run` evenly spaced checkpoints, each scored on dev. The host loop
    is shortened where needed so that each checkpoint ends a loop (the Trainer saves only there)."""
    if task.selection != "best_checkpoint":
        return []
    recipe = read_flagfile(task.flagfile)
    steps = int(recipe["train_steps"]) * settings.steps_multiplier
    every = max(steps // settings.checkpoints_per_run, 1)
    loop = math.gcd(every, int(recipe.get("steps_per_loop", every)))
    warmup = int(recipe.get("warmup_steps", 0)) * settings.steps_multiplier
    return [f"--train_steps={steps}", f"--warmup_steps={warmup}", f"--save_steps={every}", f"--steps_per_loop={loop}",
            f"--keep_checkpoints={settings.checkpoints_per_run}", "--eval_all_checkpoints=true"]


def run_command(settings: TransferSettings, work: str, task: TransferSet, init: str, lr: str, seed: str
                ) -> List[str]:
    """A fine-tuning run's command, the one place its settings come from: its training, and its test evaluation
    (the same command with training off: the runner refuses a model_dir trained with other model settings, e.g.
    --extra_finetune_flags' dropout)."""
    cmd = runner_command(work, task, run_dir(work, task.name, init, lr, seed), seed) + [
        f"--learning_rate={lr}"] + budget_flags(task, settings)
    if init != "scratch":
        cmd.append(f"--init_checkpoint={init_checkpoint(work, init)}")
    return cmd + settings.extra_finetune_flags.split()


LAUNCH_SUFFIX = ".launch.json"


def launch_record(cmd: List[str], task: TransferSet) -> Dict[str, object]:
    """What a run's training launch was: its command, its task flag file's SHA-256 (the command names the file)
    and the version of the code its process executes."""
    return {"command": cmd, "flagfile_sha256": transfer_ledger.fingerprint(task.flagfile),
            "runner_code": transfer_ledger.code_version(paths=transfer_ledger.RUNNER_CODE_PATHS, untracked=True)}


def read_launch(out: str) -> Optional[Dict[str, Any]]:
    """Run `out`'s launch record (`launch_record` of its first training launch), None when it has none."""
    try:
        with open(out + LAUNCH_SUFFIX, encoding="utf-8") as f:
            return json.load(f)
    except FileNotFoundError:
        return None


def launch_differences(out: str, launch: Dict[str, object], task: TransferSet) -> List[str]:
    """What differs between `launch` and the first launch of the killed run `out` of `task` ([]: none), or why it
    cannot be resumed at all."""
    code = launch["runner_code"]
    if not code or code.endswith("+changes"):
        return [f"runner code {code or 'unknown'} (uncommitted or not in git)"]
    try:
        first = read_launch(out)
    except (OSError, ValueError):
        first = None
    if first is None:
        return ["no launch record"]
    first["command"] = first["command"][:1] + as_moved(first["command"][1:], task)
    return differing_keys(first, launch)


def finetune(settings: TransferSettings, work: str, task: TransferSet, init: str, lr: str, seed: str
             ) -> Dict[str, float]:
    """Train and score one run (records are shared, outside the run). A run killed before it finished (a session
    ending, a pause) is resumed from its last checkpoint when nothing that shapes it changed, and started again
    otherwise (`launch_differences`)."""
    from xlnet_tf import files

    out = run_dir(work, task.name, init, lr, seed)
    score = run_score(settings, work, task, init, lr, seed)
    if score is not None:
        return score
    cmd = run_command(settings, work, task, init, lr, seed)
    launch = launch_record(cmd, task)
    t0 = time.time()
    differs = launch_differences(out, launch, task) if os.path.isdir(out) else None
    if differs == []:  # the training loop resumes exactly: the same batches, dropout draws and optimizer state
        _say(f"{task.name} {init} lr {lr} seed {seed}: resuming the killed run (same command, flag file and "
             "runner code)")
        note_launch_code(out, first=False)
    else:
        if differs:
            _say(f"{task.name} {init} lr {lr} seed {seed}: starting the killed run again ({', '.join(differs)} "
                 "changed)")
            shutil.rmtree(out)
        note_launch_code(out, first=True)
        files.write_json_atomic(out + LAUNCH_SUFFIX, launch)
    run_logged(cmd, os.path.join(out + ".log"))
    final = final_step(task, settings)
    score = read_score(out, task, final)
    if score is None:
        raise RuntimeError(f"{out}: the run ended without a dev evaluation of its final step {final}")
    _say(f"{task.name} {init} lr {lr} seed {seed}: {score} ({time.time() - t0:.0f} s)")
    keep_in_ledger(settings, work, task, init, lr, seed)
    return score


# ---- run ledger (transfer_ledger.py) ---------------------------------------------------------------

def ledger_path(settings: TransferSettings) -> Optional[str]:
    """The table's run ledger: --runs_ledger, by default <results_prefix>_runs.json; None for 'none'."""
    if settings.runs_ledger == "none":
        return None
    return os.path.abspath(settings.runs_ledger or settings.results_prefix + "_runs.json")


@functools.lru_cache(maxsize=None)
def init_weights(work: str, init: str) -> Optional[str]:
    """SHA-256 of `init`'s initial weights in this work_dir (`init_checkpoint`: the final checkpoint, or the kept
    one of a stepped init; None for scratch); hashed once per process (they do not change while a table runs)."""
    prefix = init_checkpoint_prefix(work, init)
    return None if prefix is None else transfer_ledger.checkpoint_fingerprint(prefix)


@functools.lru_cache(maxsize=None)
def data_fingerprints(data_args: tuple) -> Dict[str, str]:
    """A task's data fingerprints, read once per process (its thousands of files do not change while it runs)."""
    return transfer_ledger.data_fingerprints(data_args)


def run_provenance(settings: TransferSettings, work: str, task: TransferSet, init: str, lr: str, seed: str,
                   weights: Optional[str] = None) -> transfer_ledger.RunProvenance:
    """What shapes run (task, init, lr, seed) of this work_dir (the inputs of `finetune`'s command); `weights`:
    the pretrained init's checkpoint SHA-256 when it is known without the checkpoint (see `sync_ledger`)."""
    sha = transfer_ledger.fingerprint
    return transfer_ledger.RunProvenance(
        runner=task.runner, flagfile_sha256=sha(task.flagfile), data=data_fingerprints(tuple(task.data_args)),
        spiece_sha256=sha(os.path.join(work, "spiece.model")),
        model_config_sha256=sha(os.path.join(pretrained_dir(work, "plm"), "xlnet_config.json")),
        init=init, init_checkpoint_sha256=weights or init_weights(work, init),
        learning_rate=lr, seed=seed, flags=budget_flags(task, settings) + settings.extra_finetune_flags.split())


LAUNCH_CODE_SUFFIX = ".code"


def note_launch_code(out: str, first: bool) -> None:
    """Keep the code version a run's process starts from (`transfer_ledger.code_version()`, one line per launch:
    training, then the test evaluation) in `<run dir>.code`, so that the ledger records the code that ran, not
    the work tree's at saving time (runs take minutes; the tree may change meanwhile). `first`: a fresh run."""
    os.makedirs(os.path.dirname(out), exist_ok=True)  # the first run of a task and init: before run_logged makes it
    with open(out + LAUNCH_CODE_SUFFIX, "w" if first else "a", encoding="utf-8") as f:
        f.write(f"{transfer_ledger.code_version()}\n")


def launch_code(out: str) -> Optional[str]:
    """The code version(s) a run's processes started from (`note_launch_code`), or None where none was kept
    (runs made before it was): one version, or the distinct ones in launch order joined by " then "."""
    try:
        with open(out + LAUNCH_CODE_SUFFIX, encoding="utf-8") as f:
            versions = [line.strip() for line in f if line.strip()]
    except FileNotFoundError:
        return None
    return " then ".join(dict.fromkeys(versions)) or None


def keep_in_ledger(settings: TransferSettings, work: str, task: TransferSet, init: str, lr: str, seed: str,
                   weights: Optional[str] = None) -> None:
    """Save a finished run of this work_dir (its eval_results.json) in the ledger, with the code it ran."""
    from xlnet_tf.artifacts import results

    path = ledger_path(settings)
    out = run_dir(work, task.name, init, lr, seed)
    recorded = results.load(out) if path and run_score(settings, work, task, init, lr, seed) is not None else None
    if recorded is None:  # no ledger, or not a finished run
        return
    if transfer_ledger.save(path, transfer_ledger.run_key(task.name, init, lr, seed),
                            run_provenance(settings, work, task, init, lr, seed, weights), recorded.to_dict(),
                            machine(),
                            code=launch_code(out)):
        _say(f"ledger: kept {task.name} {init} lr {lr} seed {seed} in {os.path.relpath(path, REPO)}")


def sync_ledger(settings: TransferSettings, work: str, task_map: Dict[str, TransferSet]) -> None:
    """Restore the ledger's runs of the asked tasks and inits that this work_dir lacks (when their provenance
    matches), and keep this work_dir's finished runs that the ledger lacks.

    A pretrained init whose model this work_dir lacks (a report of runs made on another machine): its runs are
    restored when all of the ledger's runs of that init were made from one pretrained checkpoint, whose SHA-256
    then stands for the model's (the rest of the provenance is checked as always); the report says so. Runs of
    two different checkpoints are not restored without the model, which tells which one is meant."""
    from xlnet_tf import files
    from xlnet_tf.artifacts import results

    path = ledger_path(settings)
    if path is None:
        return
    kept = transfer_ledger.read(path)["runs"]
    source = dict.fromkeys(kept, path)  # run key -> the ledger its entry comes from (this table's first)
    for other in settings.restore_from:
        other = os.path.abspath(other)
        for key, entry in transfer_ledger.read(other)["runs"].items():
            if key not in kept:
                kept[key], source[key] = entry, other
    weights = {}
    for init in settings.inits:
        if init == "scratch" or os.path.exists(init_checkpoint_prefix(work, init) + ".index"):
            weights[init] = None  # computed from the checkpoint here
            continue
        made_from = transfer_ledger.init_checkpoints(kept, init)
        if len(made_from) == 1:
            weights[init] = made_from.pop()
            _say(f"ledger: no {init} model in this work_dir; its runs are taken as the ledger has them, all made "
                 f"from one checkpoint (sha256 {weights[init][:12]}...)")
        elif made_from:
            _say(f"ledger: no {init} model in this work_dir and the ledger's {init} runs come from "
                 f"{len(made_from)} different checkpoints; none restored")
    for name in settings.tasks:
        task = task_map[name]
        for init in settings.inits:
            if init not in weights:
                continue
            for lr in LR_LADDER:
                for seed in sorted({"0", *settings.seeds}):
                    key, out = transfer_ledger.run_key(name, init, lr, seed), run_dir(work, name, init, lr, seed)
                    if run_score(settings, work, task, init, lr, seed) is not None:  # finished here
                        keep_in_ledger(settings, work, task, init, lr, seed, weights[init])
                        continue
                    if key not in kept:
                        continue
                    provenance = run_provenance(settings, work, task, init, lr, seed, weights[init])
                    values = transfer_ledger.lookup(kept, key, provenance)
                    if values is None:
                        _say(f"ledger: {key} was made with other {transfer_ledger.differs(kept, key, provenance)}; "
                             "not restored (it will be trained again if the table needs it)")
                        continue
                    if os.path.isdir(out):
                        shutil.rmtree(out)  # a killed run's leftovers
                    os.makedirs(out)
                    results.save(out, results.EvalResults.from_dict(values, where=f"{source[key]} {key}"))
                    files.write_json_atomic(os.path.join(out, transfer_ledger.RESTORED_MARKER),
                                            {"ledger": source[key], "key": key, "provenance": provenance.to_dict()})
                    # kept by older code before its final dev evaluation
                    if read_score(out, task, final_step(task, settings)) is None:
                        shutil.rmtree(out)
                        _say(f"ledger: {key} has no dev evaluation of its final step; not restored")
                        continue
                    if source[key] != path:  # this table's ledger keeps it as the run was made
                        transfer_ledger.copy_entry(path, key, kept[key])
                    _say(f"ledger: restored {key} (scores only, no weights)"
                         + (f" from {os.path.relpath(source[key], REPO)}" if source[key] != path else ""))


LR_LADDER = ("1e-5", "3e-5", "1e-4", "3e-4", "1e-3", "3e-3", "1e-2")


Grids = Dict[tuple, Dict[str, Dict[str, float]]]  # (task, init) -> {lr: {metric: score}}


def seed0_grid(settings: TransferSettings, work: str, task: TransferSet, init: str, carried: Optional[Grids] = None
               ) -> Dict[str, Dict[str, float]]:
    """Scores of the seed-0 runs of every learning rate on the ladder: the finished runs of this work_dir,
    then those `carried` from an earlier report (see `carried_grids`) for the rates not run here."""
    return with_carried(finished_seed0_runs(settings, work, task, init), carried, task.name, init)


def finished_seed0_runs(settings: TransferSettings, work: str, task: TransferSet, init: str
                        ) -> Dict[str, Dict[str, float]]:
    """Scores of this work_dir's finished seed-0 runs, by learning rate."""
    scores = {lr: run_score(settings, work, task, init, lr, "0") for lr in LR_LADDER}
    return {lr: s for lr, s in scores.items() if s is not None}


def with_carried(here: Dict[str, Dict[str, float]], carried: Optional[Grids], task: str, init: str
                 ) -> Dict[str, Dict[str, float]]:
    """`here`, plus the carried runs of the rates not run here, in ladder order."""
    out = {**(carried or {}).get((task, init), {}), **here}
    return {lr: out[lr] for lr in LR_LADDER if lr in out}


def seed0_run(settings: TransferSettings, work: str, task: TransferSet, init: str, lr: str,
              carried: Optional[Grids]) -> Dict[str, float]:
    """The seed-0 run of one rate: carried from the earlier report when this work_dir has not run it."""
    here = run_score(settings, work, task, init, lr, "0")
    if here is None and lr in (carried or {}).get((task.name, init), {}):
        return carried[(task.name, init)][lr]
    return finetune(settings, work, task, init, lr, "0")


def stage_finetune(settings: TransferSettings, work: str, task_map: Dict[str, TransferSet],
                   carried: Optional[Grids] = None) -> None:
    """The grid with seed 0, extended one ladder step while an init's best rate is at the grid's edge
    (at most `--max_grid_extensions` times, the same rule for every init), then the seeds at the best.
    Seed-0 runs `carried` from an earlier report are not run again."""
    for lr in settings.learning_rates:
        if lr not in LR_LADDER:
            raise UserError(f"--learning_rates: {lr} is not on the ladder {LR_LADDER}")
    for name in settings.tasks:
        task = task_map[name]
        for init in settings.inits:
            for lr in sorted(settings.learning_rates, key=LR_LADDER.index):
                seed0_run(settings, work, task, init, lr, carried)
            for _ in range(settings.max_grid_extensions):
                grid = {lr: s[task.primary] for lr, s in seed0_grid(settings, work, task, init, carried).items()}
                best = max(grid, key=grid.get)
                ladder = sorted(grid, key=LR_LADDER.index)
                k = LR_LADDER.index(best)
                if best == ladder[-1] and k + 1 < len(LR_LADDER):
                    nxt = LR_LADDER[k + 1]
                elif best == ladder[0] and k > 0:
                    nxt = LR_LADDER[k - 1]
                else:
                    break
                _say(f"{name} {init}: best rate {best} at the edge of the grid; adding {nxt}")
                seed0_run(settings, work, task, init, nxt, carried)
            grid = {lr: s[task.primary] for lr, s in seed0_grid(settings, work, task, init, carried).items()}
            best = max(grid, key=grid.get)
            for seed in settings.seeds:
                if seed == "0":
                    seed0_run(settings, work, task, init, best, carried)
                else:
                    finetune(settings, work, task, init, best, seed)
                evaluate_test(settings, work, task, init, best, seed)


# ---- report -----------------------------------------------------------------------------------------------

def collect(settings: TransferSettings, work: str, task_map: Dict[str, TransferSet], carried: Optional[Grids] = None,
            source: Optional[str] = None) -> List[Dict]:
    """Report rows: per task and metric, each init's mean and std over the seeds at its best seed-0 rate.
    A cell whose seed-0 grid includes runs `carried` from the report at `source` gets `<init>_from`."""
    rows = []
    for name in settings.tasks:
        task = task_map[name]
        runs = {}  # init -> (seed-0 grid, best rate, the seeds' scores at it, carried?), read once per task
        for init in settings.inits:
            here = finished_seed0_runs(settings, work, task, init)
            grid = with_carried(here, carried, name, init)
            if grid:
                best = max(grid, key=lambda lr: grid[lr][task.primary])
                at_best = (grid[best] if seed == "0" else run_score(settings, work, task, init, best, seed)
                           for seed in settings.seeds)
                seeds = [s for s in at_best if s is not None]
                runs[init] = (grid, best, seeds, len(grid) > len(here))
        baseline = task.baseline() if task.baseline else {}
        zero_shot = {init: task.zero_shot(work, init) for init in settings.inits
                     if init in ("mlm", "plm")} if task.zero_shot else {}
        for metric in task.metrics:
            row = {"task": name, "metric": metric, "primary": metric == task.primary}
            if metric in baseline:
                row["baseline"] = baseline[metric]
            if "majority_" + metric in baseline:
                row["majority"] = baseline["majority_" + metric]
            for init, scores in zero_shot.items():
                if scores and metric in scores:
                    row[f"{init}_zero_shot"] = scores[metric]
            for init, (grid, best, seeds, from_earlier) in runs.items():
                vals = [s[metric] for s in seeds if metric in s]
                if not vals:
                    continue
                row[init] = statistics.fmean(vals)
                row[f"{init}_std"] = statistics.stdev(vals) if len(vals) > 1 else None
                row[f"{init}_seeds"] = len(vals)
                row[f"{init}_runs"] = vals
                row[f"{init}_best_lr"] = best
                row[f"{init}_steps"] = [s.get("step") for s in seeds if metric in s]
                row[f"{init}_grid"] = {lr: s.get(metric) for lr, s in grid.items()}
                if from_earlier:
                    row[f"{init}_from"] = source
            rows.append(row)
    return rows


# Recipe flags that only say which checkpoints are kept, not what is trained
RECIPE_BOOKKEEPING = ("keep_checkpoint_steps", "keep_checkpoints", "save_steps")


# what reports made before they recorded their fine-tuning settings were all made with: every such command
# (transfer_cpu, transfer_cloze_cpu, transfer_pos_brown_cpu) shows the default protocol and no added flags
LEGACY_FINETUNE_SETTINGS = {"selection": "last", "extra_finetune_flags": []}


def finetune_settings(settings: TransferSettings) -> Dict[str, object]:
    """What shapes every fine-tuning run of this table besides its task's flag file, init, rate and seed: the
    selection protocol (with its budget) and the added runner flags, as its report records them."""
    out: Dict[str, object] = {"selection": settings.selection,
                              "extra_finetune_flags": settings.extra_finetune_flags.split()}
    if settings.selection == "best_checkpoint":
        out.update(steps_multiplier=settings.steps_multiplier, checkpoints_per_run=settings.checkpoints_per_run)
    return out


def task_flagfile_hashes(task_list: Sequence[TransferSet], tasks: Sequence[str]) -> Dict[str, str]:
    """SHA-256 of the flag file of each task of `task_list` that this table runs (`tasks`: --tasks)."""
    return {t.name: transfer_ledger.fingerprint(t.flagfile) for t in task_list if t.name in tasks}


def carried_grids(settings: TransferSettings, path: str, recipe: Dict[str, str], curves: Dict,
                  task_map: Optional[Dict[str, TransferSet]] = None) -> Grids:
    """The seed-0 runs (the learning-rate grids) of an earlier report at `path`, to stand for runs this
    work_dir has not made: only when it is a report of the same pretraining recipe (checkpoint bookkeeping
    aside) and, for mlm/plm, of a pretrained model whose held-out curve is the one measured here (pretraining
    and fine-tuning are deterministic here, so such a run would give the same scores). The other seeds are
    not carried: a report keeps only their mean."""
    with open(path, encoding="utf-8") as f:
        earlier = json.load(f)

    def shaping(r):  # what the recipe does to the model, without the checkpoint bookkeeping
        return {k: v for k, v in (r or {}).items() if k not in RECIPE_BOOKKEEPING}

    if shaping(earlier.get("pretrain_recipe")) != shaping(recipe):
        raise UserError(f"--carry_over={path}: another pretraining recipe; its cells do not belong here")
    theirs, ours = earlier.get("finetune_settings", LEGACY_FINETUNE_SETTINGS), finetune_settings(settings)
    if theirs != ours:
        differs = differing_keys(theirs, ours)
        raise UserError(f"--carry_over={path}: made with other fine-tuning settings ("
                        + ", ".join(f"{k}: {theirs.get(k)!r} there, {ours.get(k)!r} here" for k in differs)
                        + "); its cells do not belong here")
    recorded = earlier.get("task_flagfile_sha256", {})
    for name, task in (task_map or {}).items():
        if name in settings.tasks and name in recorded and recorded[name] != transfer_ledger.fingerprint(task.flagfile):
            raise UserError(f"--carry_over={path}: its {name} runs were made with another {task.flagfile}; "
                            "its cells do not belong here")
    same_model = {o for o in settings.objectives
                  if o in curves and earlier.get("pretrain_heldout", {}).get(o) == curves[o]}
    grids: Grids = {}
    for old in earlier["rows"]:
        if old["task"] not in settings.tasks:
            continue
        for init in settings.inits:
            if init != "scratch" and init not in same_model:
                continue
            for lr, score in (old.get(f"{init}_grid") or {}).items():
                if score is not None:
                    grids.setdefault((old["task"], init), {}).setdefault(lr, {})[old["metric"]] = score
    return grids


def pretrain_curves(work: str, objectives: Sequence[str]) -> Dict:
    """{objective: its pretraining run's held-out evaluations (step, loss, accuracy)} of this work_dir's runs."""
    from xlnet_tf.artifacts import results

    curves = {}
    for objective in objectives:
        recorded = results.load(pretrained_dir(work, objective))
        if recorded is not None:
            curves[objective] = [{"step": r["step"], "loss": r["loss"], "accuracy": r["accuracy"]}
                                 for r in recorded.evaluations]
    return curves


def unigram(work: str, objective: str, vocab_size: int) -> Optional[float]:
    from tfrecords.pretrain import writer as pretrain_data

    train, heldout = os.path.join(work, f"{objective}_train"), os.path.join(work, f"{objective}_heldout")
    if not os.path.exists(os.path.join(heldout, "manifest.json")):
        return None
    return pretrain_data.unigram_baseline(train, heldout, vocab_size)["loss"]


@functools.lru_cache(maxsize=None)
def machine() -> Dict[str, str]:
    """This machine as the ledger's entries and the report record it (bench/host.py `summary`), read once."""
    from bench import host

    return host.summary()


def ledger_summary(settings: TransferSettings, work: str) -> Optional[Dict]:
    """The run ledger behind the report: its path, how many of the table's runs were restored from it rather
    than trained in this work_dir, and the machines (CPU, vector extensions) its runs of the table were made on."""
    path = ledger_path(settings)
    if path is None:
        return None
    runs = transfer_ledger.read(path)["runs"]
    keys = [k for k in runs if k.split("/")[0] in settings.tasks and k.split("/")[1] in settings.inits]
    restored = [k for k in keys if os.path.exists(os.path.join(work, "finetune", k, transfer_ledger.RESTORED_MARKER))]
    machines = sorted({f"{runs[k]['machine'].get('cpu')}; {runs[k]['machine'].get('vector_extensions')}"
                       for k in keys if runs[k].get("machine")})
    commits = sorted({(runs[k].get("code") or "unknown")[:7] for k in keys})
    return {"path": os.path.relpath(path, REPO), "runs": len(keys), "restored": len(restored), "machines": machines,
            "commits": commits}


def ledger_lines(summary: Optional[Dict]) -> List[str]:
    if not summary:
        return []
    lines = [f"Every run's scores and what shaped it (data, flag file, initial weights, rate, seed): "
             f"`{summary['path']}` (transfer_ledger.py), {summary['runs']} runs"
             + (f", {summary['restored']} of them restored from it rather than trained in this work_dir" if
                summary["restored"] else "") + "."]
    if len(summary["machines"]) > 1:
        lines[0] += " Its runs were made on more than one machine: " + " / ".join(summary["machines"]) + "."
    if summary.get("commits"):
        lines[0] += f" Code version(s) when the runs were saved: {', '.join(summary['commits'])} (a run's " \
                    "identity leaves the code out; runners' numerics did not change between them unless a commit " \
                    "says so)."
    return lines + [""]


def cell(row: Dict, init: str, selection: str) -> str:
    """A report cell: `init`'s mean ± std over the seeds, its rate (and with `selection` best_checkpoint each seed's
    chosen step), the number of seeds, † when carried over; "-" without runs."""
    if init not in row:
        return "-"
    std = row.get(f"{init}_std")
    s = f"{row[init]:.1f}"
    if std is not None:
        s += f" ± {std:.1f}"
    carried = "†" if row.get(f"{init}_from") else ""
    steps = f", steps {'/'.join(map(str, row[f'{init}_steps']))}" if selection == "best_checkpoint" else ""
    return s + f" (lr {row[f'{init}_best_lr']}{steps}, n={row[f'{init}_seeds']}){carried}"


def primary_and_test(rows: List[Dict]) -> List[tuple]:
    """(primary row, its test_ row or None) per task, in the rows' order."""
    return [(row, next((r for r in rows if r["task"] == row["task"] and r["metric"] == "test_" + row["metric"]), None))
            for row in rows if row["primary"]]


def write_report(settings: TransferSettings, work: str, recipe: Dict[str, str], rows: List[Dict], curves: Dict,
                 baselines: Dict, task_list: Sequence[TransferSet] = ()) -> None:
    """<results_prefix>.json / .md / .png (and _steps.png with stepped inits)."""
    prefix = settings.results_prefix
    complete = all(row.get(f"{i}_seeds") == len(settings.seeds) for row in rows for i in settings.inits)
    carried = sorted({row[k] for row in rows for k in row if k.endswith("_from")})
    report = {
        "complete": complete,
        "unit": "percent (dev set)",
        "description": "Fine-tuning from random weights (scratch), BERT's masked LM (mlm) and XLNet's "
                       "permutation LM (plm), pretrained with "
                       f"{os.path.relpath(os.path.abspath(settings.pretrain_flagfile), REPO)} on the same records "
                       "layout, model, optimizer and steps; " + (
                           "dev-set scores at the end of a fixed budget (the task's transfer_<task>.flags)"
                           if settings.selection == "last" else
                           f"dev-set scores at each run's best of {settings.checkpoints_per_run} evenly spaced "
                           f"checkpoints over {settings.steps_multiplier}x the budget of the task's "
                           "transfer_<task>.flags (the step chosen on dev, listed in each cell; test scored at it)")
                       + "; learning rate = best of the grid on dev with seed 0, then mean and sample std over the "
                         "seeds at that rate" + (f"; every run adds the runner flags `{settings.extra_finetune_flags}`"
                                                 if settings.extra_finetune_flags else "") + ".",
        "command": cli.invocation("bench.studies.transfer.transfer")
                   + (f" --carry_over={carried[0]}" if carried else ""),
        "machine": machine(),
        "learning_rates": list(settings.learning_rates),
        "finetune_settings": finetune_settings(settings),
        "task_flagfile_sha256": task_flagfile_hashes(task_list, settings.tasks),
        "max_grid_extensions": settings.max_grid_extensions,
        "seeds": list(settings.seeds),
        "pretrain_recipe": recipe,
        "pretrain_heldout": curves,
        "unigram_baseline": baselines,
        "runs_ledger": ledger_summary(settings, work),
        "rows": rows,
    }
    os.makedirs(os.path.dirname(prefix), exist_ok=True)
    with open(prefix + ".json.tmp", "w", encoding="utf-8") as f:
        json.dump(report, f, indent=2)
    os.replace(prefix + ".json.tmp", prefix + ".json")

    lines = [f"# Transfer: scratch vs MLM vs PLM pretraining ({report['machine']['cpu']}, "
             f"{report['machine']['cores']} cores; {report['machine']['vector_extensions']})", "",
             report["description"], "", f"Command: `{report['command']}`", "",
             *ledger_lines(report["runs_ledger"]),
             *([] if complete else ["**Partial results**: some cells are missing or have fewer seeds than "
                                    f"{len(settings.seeds)}; the command resumes the rest.", ""]),
             "| task | metric | majority | baseline | scratch | MLM | PLM |", "|---|---|---|---|---|---|---|"]
    for row in rows:
        base, majority = (f"{row[k]:.1f}" if k in row else "-" for k in ("baseline", "majority"))
        lines.append(f"| {row['task']} | {row['metric']} | {majority} | {base} | "
                     + " | ".join(cell(row, i, settings.selection) for i in INITS) + " |")
    notes = list(dict.fromkeys(t.baseline_note for t in task_list if t.baseline_note and any(
        "baseline" in row and row["task"] == t.name for row in rows)))  # tasks sharing a baseline: said once
    if notes:
        lines += ["", f"Baseline: {'; '.join(notes)}. test_ metrics: the runs at the dev-chosen rate, evaluated once "
                      "on the test split."]
    zero_shot = [row for row in rows if any(f"{i}_zero_shot" in row for i in INITS)]
    if zero_shot:
        lines += ["", "Zero-shot, no fine-tuning (bench/studies/cloze/blank_scoring.py: the pretrained LM's own "
                      "probability of each candidate in the blank, both sides of it visible):", "",
                  "| task | metric | MLM | PLM |", "|---|---|---|---|"]
        for row in zero_shot:
            lines.append(f"| {row['task']} | {row['metric']} | " + " | ".join(
                f"{row[f'{i}_zero_shot']:.1f}" if f"{i}_zero_shot" in row else "-" for i in ("mlm", "plm")) + " |")
    sources = sorted({row[k] for row in rows for k in row if k.endswith("_from")})
    if sources:
        lines += ["", f"† some seed-0 runs (grid) carried over from an earlier run of the same command "
                      f"({', '.join(sources)}): same pretraining recipe, and for MLM/PLM the same held-out curve, "
                      "i.e. the same pretrained model (pretraining and fine-tuning are deterministic here); those "
                      "runs were not repeated in this work_dir, the other seeds were."]
    shown = list(INITS) + [i for i in settings.inits if i not in INITS]  # stepped inits after the table's three
    used = sorted({lr for row in rows for i in shown for lr in row.get(f"{i}_grid", {})}, key=LR_LADDER.index)
    lines += ["", "Learning-rate grid (seed 0, dev; extended while the best rate was at its edge):", "",
              "| task | metric | init | " + " | ".join(used) + " |",
              "|---|---|---|" + "---|" * len(used)]
    for row in rows:
        for init in shown:
            if f"{init}_grid" in row:
                g = row[f"{init}_grid"]
                lines.append(f"| {row['task']} | {row['metric']} | {init} | " +
                             " | ".join("-" if g.get(lr) is None else f"{g[lr]:.1f}" for lr in used)
                             + " |")
    lines += seed_lines([row for row in rows if row["primary"] and all(f"{i}_runs" in row for i in settings.inits)],
                        shown)
    lines += steps_lines(rows, curves, int(recipe["train_steps"]), settings.inits, settings.selection)
    lines += ["", "Pretraining held-out loss (nats per predicted token; the unigram baseline in brackets):", ""]
    for objective, curve in curves.items():
        lines.append(f"- {objective}: " + ", ".join(f"{r['step']}: {r['loss']:.3f}" for r in curve)
                     + (f" [{baselines[objective]:.3f}]" if objective in baselines else
                        " [unigram baseline not computed: this work_dir has no pretraining records]"))
    with open(prefix + ".md", "w", encoding="utf-8") as f:
        f.write("\n".join(lines) + "\n")
    plot(rows, curves, baselines, prefix + ".png")
    if steps_points(rows, int(recipe["train_steps"]), settings.inits):
        plot_steps(rows, curves, int(recipe["train_steps"]), settings.inits, prefix + "_steps.png")


def steps_points(rows: List[Dict], train_steps: int, inits: Sequence[str]) -> Dict[str, List[tuple]]:
    """The transfer-against-pretraining-steps curve of each objective that has stepped inits among `inits`:
    {objective: [(pretraining step, init), ...]} from scratch (step 0) through the kept checkpoints to `final`
    (the recipe's `train_steps`), only the inits with scores in `rows`."""
    have = {i for row in rows for i in inits if i in row}
    points = {}
    for init in inits:
        objective, step = parse_init(init)
        if step is not None:
            points.setdefault(objective, []).append((step, init))
    out = {}
    for objective, stepped in points.items():
        curve = [(0, "scratch")] + sorted(stepped) + [(train_steps, objective)]
        curve = [(step, init) for step, init in curve if init in have]
        if len(curve) > 1:
            out[objective] = curve
    return out


def heldout_at(curves: Dict, objective: str, step: int) -> Optional[float]:
    """The pretraining held-out loss at `step` (its evaluation at that step), or None when none was made there."""
    at = [r["loss"] for r in curves.get(objective, []) if int(r["step"]) == step]
    return at[-1] if at else None


def steps_lines(rows: List[Dict], curves: Dict, train_steps: int, inits: Sequence[str], selection: str
                ) -> List[str]:
    """The report's table of fine-tuned scores against the pretraining step of the initial weights."""
    points = steps_points(rows, train_steps, inits)
    if not points:
        return []
    lines = ["", "Transfer against pretraining steps: each cell fine-tunes from the pretraining run's checkpoint "
                 "of that step (step 0: random weights, the scratch column; the last: its final weights), with the "
                 "same protocol as above (grid on dev with seed 0, then the seeds at the best rate). Held-out "
                 "loss of the pretraining run at that step in brackets.", ""]
    for objective, curve in points.items():
        lines += [f"| task | metric | {objective.upper()} step: " + " | ".join(str(s) for s, _ in curve) + " |",
                  "|---|---|" + "---|" * len(curve)]
        for row in (r for pair in primary_and_test(rows) for r in pair if r is not None):
            cells = []
            for step, init in curve:
                loss = heldout_at(curves, objective, step) if step and init in row else None
                cells.append(cell(row, init, selection) + (f" [{loss:.2f}]" if loss is not None else ""))
            lines.append(f"| {row['task']} | {row['metric']} | " + " | ".join(cells) + " |")
        lines.append("")
    return lines


def plot_steps(rows: List[Dict], curves: Dict, train_steps: int, inits: Sequence[str], path: str) -> None:
    """One panel per task (its primary metric and, when there is one, its test metric): the fine-tuned score
    against the pretraining step of the initial weights, one line per objective, the baseline and majority
    dashed; the held-out loss on a second axis."""
    plt = figures.pyplot()

    points = steps_points(rows, train_steps, inits)
    panels = primary_and_test(rows)
    fig, axes = plt.subplots(1, len(panels), figsize=(4.2 * len(panels), 3.8), squeeze=False)
    colors = {"mlm": "#1f77b4", "plm": "#d62728"}
    for ax, (row, test) in zip(axes[0], panels):
        for objective, curve in points.items():
            for r, style, label in ((row, "-", "dev"), (test, ":", "test")):
                if r is None:
                    continue
                xs = [s for s, i in curve if i in r]
                ys = [r[i] for s, i in curve if i in r]
                errs = [r.get(f"{i}_std") or 0 for s, i in curve if i in r]
                ax.errorbar(xs, ys, yerr=errs, ls=style, marker="o", ms=3, capsize=2, color=colors[objective],
                            label=f"{objective.upper()} ({label})")
        for key, style in (("baseline", "--"), ("majority", ":")):
            if key in row:
                ax.axhline(row[key], ls=style, lw=1, color="#555555", label=f"{key} (dev)")
        ax.set_title(f"{row['task']} ({row['metric']})")
        ax.set_xlabel("pretraining step of the initial weights (0: scratch)")
        ax.set_ylabel("score (%)")
        ax2 = ax.twinx()
        for objective in points:
            curve = curves.get(objective, [])
            ax2.plot([r["step"] for r in curve], [r["loss"] for r in curve], lw=0.8, alpha=0.4,
                     color=colors[objective])
        ax2.set_ylabel("held-out loss (faint)", fontsize=8)
        ax.legend(fontsize=7)
    fig.tight_layout()
    figures.save(fig, path)


def seed_lines(primary: List[Dict], inits: Sequence[str]) -> List[str]:
    """The report's table of every seed at the best rate (the primary metric's rows `primary`) with Welch's test of
    each pretrained init against scratch: a column per init of `inits` (the table's three, then stepped inits such
    as `plm@9000`) that has runs in some row; none -> no table."""
    inits = [i for i in inits if any(f"{i}_runs" in row for row in primary)]
    pretrained = [i for i in inits if i != "scratch"]
    if not primary or not inits:
        return []
    label = {"scratch": "scratch", "mlm": "MLM", "plm": "PLM"}
    names = [label.get(i, i) for i in inits]
    lines = ["", "Every seed at the best rate (primary metric), and Welch's two-sided t-test of each pretrained "
                 "init against scratch over the seeds:", "",
             "| task | metric | " + " | ".join(names) + " | "
             + " | ".join(f"{label.get(i, i)} vs scratch p" for i in pretrained) + " |",
             "|---|---|" + "---|" * (len(inits) + len(pretrained))]
    for row in primary:
        seeds = " | ".join(", ".join(f"{v:.1f}" for v in row.get(f"{i}_runs", [])) or "-" for i in inits)
        lines.append(f"| {row['task']} | {row['metric']} | {seeds} | "
                     + " | ".join(welch_p(row.get(f"{i}_runs", []), row.get("scratch_runs", [])) for i in pretrained)
                     + " |")
    return lines


def welch_p(a: List[float], b: List[float]) -> str:
    """Welch's two-sided t-test p-value of two seed samples, as text ('-' with fewer than two each)."""
    from scipy.stats import ttest_ind

    if min(len(a), len(b)) < 2:
        return "-"
    return f"{ttest_ind(a, b, equal_var=False).pvalue:.2g}"


def plot(rows, curves, baselines, path):
    plt = figures.pyplot()

    fig, (ax0, ax1) = plt.subplots(1, 2, figsize=(12, 4.2), gridspec_kw={"width_ratios": [1, 1.6]})
    colors = {"scratch": "#999999", "mlm": "#1f77b4", "plm": "#d62728"}
    for objective, curve in curves.items():
        ax0.plot([r["step"] for r in curve], [r["loss"] for r in curve], marker="o", ms=3,
                 color=colors[objective], label=f"{objective.upper()} held-out")
        if objective in baselines:
            ax0.axhline(baselines[objective], ls="--", lw=1, color=colors[objective],
                        label=f"unigram ({objective.upper()} targets)")
    ax0.set_xlabel("pretraining step")
    ax0.set_ylabel("held-out loss (nats / target token)")
    ax0.set_title("Pretraining")
    ax0.legend(fontsize=8)
    primary = [r for r in rows if r["primary"]]
    width = 0.27
    for k, init in enumerate(INITS):
        xs = [i + (k - 1) * width for i in range(len(primary))]
        vals = [r.get(init, float("nan")) for r in primary]
        errs = [r.get(f"{init}_std") or 0 for r in primary]
        ax1.bar(xs, vals, width, yerr=errs, color=colors[init], label=init, capsize=2)
    ax1.set_xticks(range(len(primary)))
    ax1.set_xticklabels([f"{r['task']}\n{r['metric']}" for r in primary], fontsize=8)
    ax1.set_ylabel("dev score (%)")
    ax1.set_title("Fine-tuning, same budget")
    ax1.legend(fontsize=8)
    fig.tight_layout()
    figures.save(fig, path)


def main():
    run(TransferSettings.from_flags(FLAGS))


def run(settings: TransferSettings) -> None:
    """The table of `settings`: the stages asked for, in order (see the module docstring)."""
    if not settings.work_dir:
        raise UserError("--work_dir is required")
    bad = sorted(set(settings.stages) - set(STAGES))
    if bad:
        raise UserError(f"unknown stage {bad}; stages are {STAGES}")
    check_extra_flags(settings.extra_finetune_flags)
    for init in settings.inits:
        try:
            parse_init(init)
        except ValueError as e:
            raise UserError(f"--inits: {e}") from None
    work, data_root = os.path.abspath(settings.work_dir), os.path.abspath(settings.data_root)
    recipe_path = os.path.abspath(settings.pretrain_flagfile)
    recipe = read_flagfile(recipe_path)
    if int(recipe["n_token"]) != settings.vocab_size:
        raise UserError(f"--vocab_size={settings.vocab_size} but {recipe_path} has --n_token={recipe['n_token']}")
    task_map = tasks(os.path.join(data_root, "labeled"),
                     settings.pos_data_dir and os.path.abspath(settings.pos_data_dir),
                     settings.cloze_data_dir and os.path.abspath(settings.cloze_data_dir),
                     settings.ood_data_dir and os.path.abspath(settings.ood_data_dir),
                     settings.ner_data_dir and os.path.abspath(settings.ner_data_dir))
    for task in task_map.values():
        task.selection = settings.selection
    unknown = sorted(set(settings.tasks) - set(task_map))
    if unknown:
        raise UserError(f"unknown task(s) {unknown}; known: {sorted(task_map)}")
    if settings.corpus_task and settings.corpus_task not in task_map:
        raise UserError(f"--corpus_task={settings.corpus_task}: unknown task; known: {sorted(task_map)}")
    os.makedirs(work, exist_ok=True)
    if "corpus" in settings.stages:
        if settings.corpus_task:
            stage_task_corpus(work, task_map[settings.corpus_task])
        else:
            stage_corpus(work, data_root)
    if "spm" in settings.stages:
        stage_spm(work, settings.vocab_size)
    for objective in settings.objectives:
        if "records" in settings.stages:
            stage_records(work, data_root, recipe, objective, settings.num_processes)
        if "pretrain" in settings.stages:
            stage_pretrain(work, recipe_path, recipe, objective)
    carried, source = None, None
    if settings.carry_over:
        source = os.path.relpath(os.path.abspath(settings.carry_over), REPO)
        carried = carried_grids(settings, os.path.abspath(settings.carry_over), recipe,
                                pretrain_curves(work, settings.objectives), task_map)
    if "finetune" in settings.stages or "report" in settings.stages:
        try:
            sync_ledger(settings, work, task_map)
        except transfer_ledger.LedgerError as e:  # before any run: a ledger it cannot read changes nothing
            raise UserError(f"--runs_ledger: {e}") from None
    if "finetune" in settings.stages:
        stage_finetune(settings, work, task_map, carried)
    if "report" in settings.stages:
        baselines = {o: unigram(work, o, settings.vocab_size) for o in settings.objectives}
        rows, curves = collect(settings, work, task_map, carried, source), pretrain_curves(work, settings.objectives)
        write_report(settings, work, recipe, rows, curves, {k: v for k, v in baselines.items() if v is not None},
                     list(task_map.values()))
        _say(f"report: {settings.results_prefix}.md")


if __name__ == "__main__":
    cli.run(FLAGS, define_flags, main)
