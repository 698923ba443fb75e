"""Where does pretraining start to pay off? The transfer gain (PLM minus scratch) against the pretraining steps of
the initial weights, in-domain and out-of-domain rows side by side, composed from the transfer reports that
transfer.py writes (nothing is trained or evaluated here):

  python -m bench.studies.transfer.transfer_steps

Inputs (each a transfer.py report .json; a missing one leaves its points out and the report says so):
  --indomain_report        the transfer table (topic: fixed budget; scratch and the 1x PLM recipe, annealed)
  --indomain_steps_report  topic against the 10x run's kept checkpoints (same protocol; its own scratch rerun)
  --ood_report             the out-of-domain table (tweets, spam: best checkpoint on dev; scratch and 1x PLM)
  --ood_steps_report       the same rows against the 10x run's kept checkpoints (scratch restored from the above)
  --indomain_steps_3x_report, --ood_steps_3x_report
                           the same against the 3x recipe's run (9,000 steps, annealed at its end): its own point

Two more kinds of input, for the out-of-domain rows:
  --adapted_reports  TASK=PATH: the table of the recipe's model after task-adaptive pretraining on TASK's own train
                     text (flags/transfer_cpu_ood_tapt.flags); one more point per row, against the OOD table's
                     scratch cell, at step 3,000 + its own pretraining steps
  --screen_reports   LABEL=PATH: seed-0 screens of one fine-tuning change each (layer-wise rate decay, the mean
                     summary); with the OOD table's own grid (scratch, PLM, MLM) and the adapted models' grid they
                     make the diagnosis table: dev at each rate of seed 0, and test where seeds were run

Each point is a table cell: the mean over seeds at the rate chosen on dev with seed 0, as in the reports. The gain
is taken against the scratch cell of the same table (the in-domain steps table has its own scratch runs), with
the standard error of a difference of two means (sqrt(s1^2/n1 + s2^2/n2)) as its error bar. Out-of-domain rows
use the test split (dev chose rate and checkpoint); topic uses dev (the transfer table's protocol).

Output: <output_prefix>.json / .md / .png.
"""

from __future__ import annotations

import json
import math
import os
from typing import Dict, List, Optional, Tuple

from absl import flags

from bench import cli, figures, labelled_paths
from xlnet_tf import files
from xlnet_tf.errors import UserError

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))  # the repository root
FLAGS = flags.FlagValues()  # defined by define_flags when the script runs, never at import
RESULTS = os.path.join(REPO, "bench", "studies", "transfer", "results")
# (task, metric, kind): the rows of the composed table, in order.
ROWS = (("topic", "accuracy", "in-domain"), ("tweets", "test_accuracy", "out-of-domain"),
        ("spam", "test_accuracy", "out-of-domain"))
RECIPE_STEPS = 3000  # run/flags/pretrain_cpu.flags --train_steps: the 1x recipe, annealed at its end


def define_flags(fv: flags.FlagValues = FLAGS) -> None:
    d = cli.Definer(fv)
    d.string("indomain_report", os.path.join(RESULTS, "transfer_cpu.json"), "The transfer table.")
    d.string("indomain_steps_report", os.path.join(RESULTS, "transfer_topic_cpu_steps.json"),
             "The in-domain table against the 10x run's checkpoints.")
    d.string("ood_report", os.path.join(RESULTS, "transfer_ood_cpu.json"), "The out-of-domain table.")
    d.string("indomain_steps_3x_report", os.path.join(RESULTS, "transfer_topic_cpu_steps_3x.json"),
             "Topic fine-tuned from the 3x recipe's run (flags/pretrain_cpu_3x.flags).")
    d.string("ood_steps_3x_report", os.path.join(RESULTS, "transfer_ood_cpu_steps_3x.json"),
             "The out-of-domain rows fine-tuned from the 3x recipe's run "
             "(flags/transfer_cpu_ood_steps_3x.flags).")
    d.string("ood_steps_report", os.path.join(RESULTS, "transfer_ood_cpu_steps.json"),
             "The out-of-domain table against the 10x run's checkpoints.")
    d.list("adapted_reports", [f"{t}=" + os.path.join(RESULTS, f"transfer_ood_cpu_tapt_{t}.json")
                               for t in ("tweets", "spam")],
           "Task-adaptive pretraining tables as TASK=PATH.json (transfer.py --corpus_task=TASK).")
    d.list("screen_reports", [f"{k}=" + os.path.join(RESULTS, f"transfer_ood_cpu_{k}.json")
                              for k in ("mlm", "layer_decay", "mean")],
           "Seed-0 screens of one change each on the OOD rows (another init or fine-tuning flag), "
           "as LABEL=PATH.json.")
    d.list("domain_shift", [], "domain_shift.py reports of the same PLM runs, as LABEL=PATH.json: "
           "LABEL is `1x` (the recipe's run, annealed), a step of the 10x run (its kept checkpoint) or "
           "`adapted-TASK` (the recipe's model after task-adaptive pretraining on TASK); "
           "adds each set's LM loss (bits per character, no memories) against the pretraining step.")
    d.string("output_prefix", os.path.join(RESULTS, "transfer_steps_cpu"), "Report path, no extension.")


def load(path: str) -> Optional[Dict]:
    if not os.path.exists(path):
        return None
    with open(path, encoding="utf-8") as f:
        report = json.load(f)
    if "rows" not in report:
        raise UserError(f"{path}: not a report of bench.studies.transfer.transfer (no 'rows'); pass the "
                        "report's .json")
    return report


def find_row(report: Optional[Dict], task: str, metric: str) -> Optional[Dict]:
    if report is None:
        return None
    return next((r for r in report["rows"] if r["task"] == task and r["metric"] == metric), None)


def cell(row: Optional[Dict], init: str) -> Optional[Dict]:
    """{mean, std, n, runs, lr} of one init in one report row, or None when the row has no complete cell."""
    if row is None or init not in row:
        return None
    return {"mean": row[init], "std": row.get(f"{init}_std"), "n": row.get(f"{init}_seeds"),
            "runs": row.get(f"{init}_runs"), "lr": row.get(f"{init}_best_lr")}


def gain(plm: Optional[Dict], scratch: Optional[Dict]) -> Optional[Dict]:
    """PLM minus scratch and the standard error of that difference (None without both cells)."""
    if plm is None or scratch is None:
        return None
    se = None
    if plm["std"] is not None and scratch["std"] is not None and plm["n"] and scratch["n"]:
        se = math.sqrt(plm["std"] ** 2 / plm["n"] + scratch["std"] ** 2 / scratch["n"])
    return {"gain": plm["mean"] - scratch["mean"], "se": se}


def better_measured(own: Optional[Dict], base: Optional[Dict]) -> Optional[Dict]:
    """The scratch cell a steps table's points are compared with: its own (same data, rates and protocol) unless the
    base table's has more seeds (a screen that ran one rate restores only that rate's scratch runs; the base
    table's cell has its seeds at its own dev-chosen rate)."""
    if own is None or (base is not None and (base["n"] or 0) > (own["n"] or 0)):
        return base
    return own


def step_inits(report: Optional[Dict], row: Optional[Dict]) -> List[Tuple[int, str]]:
    """(step, init) of the `plm@<step>` cells a steps report has for a row, by step."""
    if row is None:
        return []
    out = []
    for key in row:
        base, sep, step = key.partition("@")
        if base == "plm" and sep and step.isdigit():
            out.append((int(step), key))
    return sorted(out)


def heldout_loss(report: Optional[Dict], step: int) -> Optional[float]:
    if report is None:
        return None
    at = [r["loss"] for r in report.get("pretrain_heldout", {}).get("plm", []) if int(r["step"]) == step]
    return at[-1] if at else None


def first_curve(reports: Dict[str, Optional[Dict]], keys: Tuple[str, ...]) -> List[Dict]:
    """The PLM held-out curve of the first of these reports that has one (tables of one pretraining run agree)."""
    for key in keys:
        curve = (reports[key] or {}).get("pretrain_heldout", {}).get("plm", [])
        if curve:
            return curve
    return []


ADAPTED_RUN = "1x recipe + task-adaptive"
ONE_X_RUN = "1x recipe (annealed)"
THREE_X_RUN = "3x recipe (annealed at 9,000)"
TEN_X_RUN = "10x recipe"
# Each steps table's report key and its run's name in the composed report.
STEPS_TABLES = (("steps", TEN_X_RUN), ("steps_3x", THREE_X_RUN))


def shift_column(run: str, step: int) -> Tuple[int, int, str]:
    """Order of the domain-shift table's columns: the 1x recipe, the 3x recipe, the 10x run by step, the
    task-adapted models."""
    order = {ONE_X_RUN: 0, THREE_X_RUN: 1, TEN_X_RUN: 2}
    return (order.get(run, 3), step, run)


def domain_shift_points(entries: List[str]) -> List[Dict]:
    """[{run, step, set, bits_per_character, perplexity}] of the --domain_shift reports, by column (shift_column).
    LABEL `1x`: the recipe's model; `3x`: the 3x recipe's final (annealed) model; a step: the 10x run's kept
    checkpoint; `adapted-TASK`: the recipe's model after task-adaptive pretraining on TASK's train text (step: the
    recipe's, where it started)."""
    form = "LABEL=PATH with LABEL `1x`, `3x`, a step or `adapted-TASK`"
    out = []
    for label, path in labelled_paths.parse("domain_shift", entries, exists=None, form=form,
                                            error=UserError).items():
        adapted_task = label[len("adapted-"):] if label.startswith("adapted-") else ""
        if not (label in ("1x", "3x") or label.isdigit() or adapted_task):
            raise UserError(f"--domain_shift: {label + '=' + path!r} is not {form}")
        if not os.path.exists(path):
            raise UserError(f"--domain_shift: {path} does not exist (make it with python -m "
                            "bench.studies.transfer.domain_shift)")
        with open(path, encoding="utf-8") as f:
            report = json.load(f)
        if "rows" not in report or not all("without_memories_bits_per_character" in r for r in report["rows"]):
            raise UserError(f"--domain_shift: {path} is not a report of bench.studies.transfer.domain_shift")
        if adapted_task:
            run, step = f"{ADAPTED_RUN} on {adapted_task}", RECIPE_STEPS
        elif label == "1x":
            run, step = ONE_X_RUN, RECIPE_STEPS
        elif label == "3x":
            run, step = THREE_X_RUN, 3 * RECIPE_STEPS
        else:  # a step of the 10x run (validated above)
            run, step = TEN_X_RUN, int(label)
        for r in report["rows"]:
            out.append({"run": run, "step": step, "set": r["set"], "tokens": r["tokens"],
                        "bits_per_character": r["without_memories_bits_per_character"],
                        "perplexity": r["without_memories_perplexity"], "checkpoint": report.get("checkpoint")})
    return sorted(out, key=lambda p: (shift_column(p["run"], p["step"]), p["set"]))


def labelled(flag: str, entries: List[str]) -> Dict[str, str]:
    """{label: absolute path} of a LABEL=PATH list flag (a missing report is reported by the composer, which names
    what makes it)."""
    parsed = labelled_paths.parse(flag, entries, exists=None, error=UserError)
    return {label: os.path.abspath(path) for label, path in parsed.items()}


def adapted_steps(report: Dict, path: str) -> int:
    """The task-adaptive run's own pretraining steps (its report's recipe, after the 1x recipe's)."""
    steps = (report.get("pretrain_recipe") or {}).get("train_steps")
    if steps is None or not str(steps).isdigit():
        raise UserError(f"{path}: its pretrain_recipe has no train_steps; is it a task-adaptive table "
                        "(bench.studies.transfer.transfer --corpus_task with the pretrain stage)?")
    return int(steps)


def variant_flags(report: Dict, base: Optional[Dict]) -> Optional[str]:
    """The fine-tuning flags a screen adds to the OOD table's (e.g. `--summary_type=mean`), None if none."""
    own = (report.get("finetune_settings") or {}).get("extra_finetune_flags") or []
    shared = set(((base or {}).get("finetune_settings") or {}).get("extra_finetune_flags") or [])
    return " ".join(f for f in own if f not in shared) or None


def diagnosis(reports: Dict[str, Optional[Dict]], adapted: Dict[str, Optional[Dict]],
              screens: Dict[str, Optional[Dict]]) -> List[Dict]:
    """Per OOD task: every variant's seed-0 dev grid, rate chosen and test cell (where its seeds were run)."""
    ood, out = reports["ood"], []
    for task, metric, kind in ROWS:
        if kind != "out-of-domain":
            continue
        dev_metric = metric[len("test_"):] if metric.startswith("test_") else metric
        sources = [("scratch", ood, "scratch"), ("PLM", ood, "plm"), ("MLM", ood, "mlm")]
        for r in screens.values():
            for init in ("plm", "mlm"):  # a screen fine-tunes one init (the OOD table's own MLM cells may be empty)
                if r is not None and any(f"{init}_grid" in row for row in r["rows"]):
                    own = variant_flags(r, ood)
                    sources.append((init.upper() + ("" if own is None else f", {own}"), r, init))
        if adapted.get(task) is not None:
            steps = adapted[task]["_steps"]
            sources.append((f"PLM + task-adaptive ({steps:,} steps on its train text)", adapted[task], "plm"))
        for key, run in STEPS_TABLES:  # the longer runs' weights, each with its own grid
            table = reports.get(f"ood_{key}")
            for step, init in step_inits(table, find_row(table, task, dev_metric)):
                sources.append((f"PLM, {run}, step {step:,}", table, init))
        for variant, report, init in sources:
            dev, test = find_row(report, task, dev_metric), find_row(report, task, metric)
            grid = (dev or {}).get(f"{init}_grid") or {}
            if not grid:
                continue
            out.append({"task": task, "variant": variant, "metric": dev_metric, "grid": grid,
                        "best_lr": (dev or {}).get(f"{init}_best_lr") or max(grid, key=grid.get),
                        "dev": cell(dev, init), "test": cell(test, init)})
    return out


def compose(reports: Dict[str, Optional[Dict]], paths: Dict[str, str], shift: List[Dict] = (),
            adapted: Dict[str, Optional[Dict]] = None, screens: Dict[str, Optional[Dict]] = None) -> Dict:
    """The composed report from the input reports (None: absent) read from `paths` (input_paths())."""
    adapted, screens = adapted or {}, screens or {}
    rows = []
    for task, metric, kind in ROWS:
        prefix = "indomain" if kind == "in-domain" else "ood"
        base_report = reports[prefix]
        base = find_row(base_report, task, metric)
        stepped = find_row(reports[f"{prefix}_steps"], task, metric)
        scratch, steps_scratch = cell(base, "scratch"), cell(stepped, "scratch")
        points = []
        if base is not None:
            plm = cell(base, "plm")
            points.append({"run": ONE_X_RUN, "step": RECIPE_STEPS, "init": "plm", "cell": plm,
                           "heldout_loss": heldout_loss(base_report, RECIPE_STEPS),
                           "gain": gain(plm, scratch)})
        for key, run in STEPS_TABLES:
            table = reports[f"{prefix}_{key}"]
            table_row = find_row(table, task, metric)
            for step, init in step_inits(table, table_row):
                plm = cell(table_row, init)
                points.append({"run": run, "step": step, "init": init, "cell": plm,
                               "heldout_loss": heldout_loss(table, step),
                               "gain": gain(plm, better_measured(cell(table_row, "scratch"), scratch))})
        if adapted.get(task) is not None:
            plm = cell(find_row(adapted[task], task, metric), "plm")
            steps = adapted[task]["_steps"]
            points.append({"run": ADAPTED_RUN, "step": RECIPE_STEPS + steps, "init": "plm", "cell": plm,
                           "heldout_loss": heldout_loss(adapted[task], steps), "gain": gain(plm, scratch)})
        rows.append({"task": task, "metric": metric, "kind": kind,
                     "baseline": (base or stepped or {}).get("baseline"),
                     "majority": (base or stepped or {}).get("majority"),
                     "scratch": scratch, "steps_table_scratch": steps_scratch, "points": points})
    return {"rows": rows,
            "heldout": {"1x": first_curve(reports, ("ood", "indomain")),
                        "3x": first_curve(reports, ("ood_steps_3x", "indomain_steps_3x")),
                        "10x": first_curve(reports, ("ood_steps", "indomain_steps"))},
            "domain_shift": list(shift),
            "diagnosis": diagnosis(reports, adapted, screens),
            "inputs": {key: os.path.relpath(path, REPO) for key, path in paths.items()},
            "missing": sorted(os.path.relpath(path, REPO) for key, path in paths.items() if reports[key] is None),
            "command": cli.invocation("bench.studies.transfer.transfer_steps")}


def input_paths() -> Dict[str, str]:
    """Every input report by key (the task-adaptive tables as `adapted:TASK`, the screens as `screen:LABEL`)."""
    paths = {"indomain": FLAGS.indomain_report, "indomain_steps": FLAGS.indomain_steps_report,
             "indomain_steps_3x": FLAGS.indomain_steps_3x_report,
             "ood": FLAGS.ood_report, "ood_steps": FLAGS.ood_steps_report, "ood_steps_3x": FLAGS.ood_steps_3x_report}
    paths.update({f"adapted:{t}": p for t, p in labelled("adapted_reports", FLAGS.adapted_reports).items()})
    paths.update({f"screen:{k}": p for k, p in labelled("screen_reports", FLAGS.screen_reports).items()})
    return {key: os.path.abspath(path) for key, path in paths.items()}


def fmt(c: Optional[Dict]) -> str:
    if c is None:
        return "-"
    std = f" ± {c['std']:.1f}" if c["std"] is not None else ""
    return f"{c['mean']:.1f}{std} (n={c['n']}, lr {c['lr']})"


def fmt_gain(g: Optional[Dict]) -> str:
    if g is None:
        return "-"
    return f"{g['gain']:+.1f}" + (f" ± {g['se']:.1f}" if g["se"] is not None else "")


def markdown(out: Dict) -> str:
    lines = ["# Transfer against pretraining steps, in-domain and out-of-domain (CPU recipe, 4 x 256)", "",
             "Composed from the transfer reports (nothing trained here): " +
             ", ".join(f"`{p}`" for p in out["inputs"].values()) + ".", "",
             f"Command: `{out['command']}`", ""]
    if out["missing"]:
        lines += ["Not yet made (their points are absent): " + ", ".join(f"`{p}`" for p in out["missing"]), ""]
    lines += ["The 1x point is the recipe's own run (3,000 steps, learning rate annealed to 0 at its end), the 3x "
              "point its run of 9,000 steps (annealed at 9,000); the 10x points are kept checkpoints of one run of "
              "10x the steps (30,000, the same recipe otherwise), whose learning rate at step s is still high "
              "unless s = 30,000. Gain: PLM minus the scratch cell of the "
              "same table (± the standard error of the difference). Topic: dev accuracy at the flag file's fixed "
              "budget; tweets and spam: test accuracy at each run's best checkpoint on dev. "
              f"`{ADAPTED_RUN}`: the 1x model pretrained further, with the same objective, on the task's own train "
              "text (labels dropped); its held-out loss is the corpus's (what it forgot).", "",
              "| task | kind | metric | scratch | run | pretraining step | held-out loss | PLM | gain |",
              "|---|---|---|---|---|---|---|---|---|"]
    for row in out["rows"]:
        scratch = fmt(row["scratch"])
        if row["steps_table_scratch"] is not None and row["steps_table_scratch"] != row["scratch"]:
            scratch += f"; steps table: {fmt(row['steps_table_scratch'])}"
        if not row["points"]:
            lines.append(f"| {row['task']} | {row['kind']} | {row['metric']} | {scratch} | - | - | - | - | - |")
        for p in row["points"]:
            loss = f"{p['heldout_loss']:.3f}" if p["heldout_loss"] is not None else "-"
            lines.append(f"| {row['task']} | {row['kind']} | {row['metric']} | {scratch} | {p['run']} | "
                         f"{p['step']:,} | {loss} | {fmt(p['cell'])} | {fmt_gain(p['gain'])} |")
    if out["domain_shift"]:
        columns = sorted({shift_column(p["run"], p["step"]) for p in out["domain_shift"]})
        names = list(dict.fromkeys(p["set"] for p in out["domain_shift"]))
        heads = {0: lambda step, run: f"1x recipe, step {step:,}", 1: lambda step, run: f"3x recipe, step {step:,}",
                 2: lambda step, run: f"10x run, step {step:,}",
                 3: lambda step, run: run.replace(ADAPTED_RUN, "1x recipe + task-adaptive pretraining")}
        lines += ["", "How well the pretrained model predicts each set's text (domain_shift.py: its left-to-right "
                  "LM loss, bits per character without memories; lower is better), by pretraining step:", "",
                  "| set | " + " | ".join(heads[kind](step, run) for kind, step, run in columns) + " |",
                  "|---|" + "---|" * len(columns)]
        for name in names:
            cells = []
            for column in columns:
                hit = [p for p in out["domain_shift"] if p["set"] == name
                       and shift_column(p["run"], p["step"]) == column]
                cells.append(f"{hit[0]['bits_per_character']:.3f}" if hit else "-")
            lines.append(f"| {name} | " + " | ".join(cells) + " |")
    if out["diagnosis"]:
        rates = sorted({lr for d in out["diagnosis"] for lr in d["grid"]}, key=float)
        lines += ["", "Diagnosis on the out-of-domain rows: each variant's dev score at each learning rate (seed 0), "
                  "and dev and test at the rate chosen on dev where its seeds were run (mean ± std over the seeds; a "
                  "screen has seed 0 only):", "",
                  "| task | variant | " + " | ".join(f"dev, lr {lr}" for lr in rates)
                  + " | dev at the chosen rate | test at the chosen rate |",
                  "|---|---|" + "---|" * (len(rates) + 2)]
        for d in out["diagnosis"]:
            grid = [f"**{d['grid'][lr]:.1f}**" if lr == d["best_lr"] else
                    (f"{d['grid'][lr]:.1f}" if lr in d["grid"] else "-") for lr in rates]
            seeded = d["test"] is not None  # a screen's dev cell is its one seed-0 run, already in the grid
            lines.append(f"| {d['task']} | {d['variant']} | " + " | ".join(grid)
                         + f" | {fmt(d['dev']) if seeded else '-'} | {fmt(d['test'])} |")
    lines += ["", f"![transfer against pretraining steps]({os.path.basename(FLAGS.output_prefix)}.png)", ""]
    return "\n".join(lines)


def plot(out: Dict, path: str) -> None:
    plt = figures.pyplot()

    shift = out["domain_shift"]
    fig, axes = plt.subplots(1, 3 if shift else 2, figsize=(16 if shift else 11, 4))
    ax0, ax1 = axes[0], axes[1]
    for name, color in (("1x", "#999999"), ("3x", "#9467bd"), ("10x", "#d62728")):
        curve = out["heldout"][name]
        if curve:
            ax0.plot([r["step"] for r in curve], [r["loss"] for r in curve], color=color, marker="o", ms=2,
                     label=f"{name} recipe run")
    ax0.set_xlabel("pretraining step")
    ax0.set_ylabel("held-out loss (nats / target token)")
    ax0.set_title("PLM pretraining, held-out")
    ax0.legend(fontsize=8)
    colors = {"topic": "#1f77b4", "tweets": "#2ca02c", "spam": "#ff7f0e"}
    for row in out["rows"]:
        style = "-" if row["kind"] == "in-domain" else "--"
        for run, marker, ms, ls in ((TEN_X_RUN, "o", 4, style), (ONE_X_RUN, "s", 4, "none"),
                                    (THREE_X_RUN, "D", 5, "none"), (ADAPTED_RUN, "*", 9, "none")):
            pts = [p for p in row["points"] if p["run"] == run and p["gain"] is not None]
            if not pts:
                continue
            ax1.errorbar([p["step"] for p in pts], [p["gain"]["gain"] for p in pts],
                         yerr=[p["gain"]["se"] or 0 for p in pts], ls=ls, marker=marker, ms=ms, capsize=2,
                         color=colors[row["task"]], label=f"{row['task']} ({row['kind']}, {run})")
    ax1.axhline(0, color="#555555", lw=0.8)
    ax1.set_xscale("symlog", linthresh=1000)
    steps = sorted({p["step"] for row in out["rows"] for p in row["points"] if p["gain"] is not None})
    if steps:  # label every step with a point (symlog's own ticks can leave a few close steps unlabeled)
        ax1.set_xticks(steps)
        ax1.set_xticklabels([f"{s:,}" for s in steps], fontsize=7)
    ax1.set_xlabel("pretraining step of the initial weights")
    ax1.set_ylabel("PLM minus scratch (points)")
    ax1.set_title("Transfer gain")
    ax1.legend(fontsize=7)
    if shift:
        ax2 = axes[2]
        set_colors = dict(colors, heldout="#555555")
        for name in dict.fromkeys(p["set"] for p in shift):
            for run, marker, ls in ((TEN_X_RUN, "o", "-"), (ONE_X_RUN, "s", "none"), (THREE_X_RUN, "D", "none")):
                pts = sorted((p["step"], p["bits_per_character"]) for p in shift if p["set"] == name and p["run"] == run)
                if pts:
                    ax2.plot([x for x, _ in pts], [y for _, y in pts], marker=marker, ls=ls, ms=4,
                             color=set_colors.get(name), label=f"{name} ({run})")
        ax2.set_xlabel("pretraining step")
        ax2.set_ylabel("LM loss on the set's text (bits / char)")
        ax2.set_title("Domain shift, to the model itself")
        ax2.legend(fontsize=6)
    fig.tight_layout()
    figures.save(fig, path)


def main():
    paths = input_paths()
    reports = {key: load(path) for key, path in paths.items()}
    if reports["indomain"] is None and reports["ood"] is None:
        raise UserError(f"neither --indomain_report={FLAGS.indomain_report} nor --ood_report="
                        f"{FLAGS.ood_report} exists: make them with python -m bench.studies.transfer.transfer "
                        "first")
    adapted = {}
    for key, report in reports.items():
        if key.startswith("adapted:") and report is not None:
            adapted[key.partition(":")[2]] = dict(report, _steps=adapted_steps(report, paths[key]))
    screens = {key.partition(":")[2]: r for key, r in reports.items() if key.startswith("screen:")}
    out = compose(reports, paths, domain_shift_points(FLAGS.domain_shift), adapted, screens)
    prefix = os.path.abspath(FLAGS.output_prefix)
    plot(out, prefix + ".png")
    files.write_json_atomic(prefix + ".json", out)
    files.write_text_atomic(prefix + ".md", markdown(out))
    print(f"report: {os.path.relpath(prefix, REPO)}.md")


if __name__ == "__main__":
    cli.run(FLAGS, define_flags, main)
