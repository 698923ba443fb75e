"""`eval_results.json`: one typed, versioned shape for every runner (pretraining, classification, RACE, SQuAD).

    {"schema": "xlnet_tf.eval_results", "version": 1, "task": "classifier", "key": "accuracy",
     "higher_is_better": true,
     "evaluations": [{"step": 150, "split": "dev", "checkpoint": ".../ckpt-150", "accuracy": 0.61, ...}, ...],
     "best": {<split>: <its evaluation with the best `key`>, ...},
     "last": {<split>: <its evaluation of the highest step>, ...},
     "selected": {"by": "dev", "step": 150, "evaluations": {<split>: <its evaluation at that step, or null>}}}

`best` and `last` are per split (version 2): in version 1 they ranged over every split, so once a run's final
weights were scored on test, "best" and "last" (and the runner's "best accuracy ... at step" line) reported the
test evaluation as if it were the dev one. `best` of a split is that split's own best over the checkpoints: for
test, a step chosen on test (an oracle). What to report is `selected` (version 3): the step of the selection
split's best evaluation (`dev` when it was evaluated, else the first split evaluated) and every split's
evaluation at that step. Versions 1 and 2 are read (`best`, `last` and `selected` are derived, recomputed).

Evaluations are recorded as they happen (`record`: read, add, atomic rewrite), so a resumed run keeps what the
killed one measured and reports "step 0 -> end", and `run/benchmark.py` reads every task's metric the same
way. An evaluation of a step and split already recorded replaces it (a resumed run re-evaluates the steps
after its last checkpoint). Files written before the schema (a list of pretraining evaluations, the
`{"checkpoints", "best", "last"}` dict, SQuAD's flat dict) are read as version 0.
"""

from __future__ import annotations

import dataclasses
import json
import os
from typing import Any, Dict, List, Optional

import tensorflow as tf

from xlnet_tf import files
from xlnet_tf.errors import UserError

FILE_NAME = "eval_results.json"
SCHEMA = "xlnet_tf.eval_results"
VERSION = 3
READABLE_VERSIONS = (1, 2, 3)
SELECTION_SPLIT = "dev"  # the split whose best evaluation picks the step `selected` reports (when evaluated)
UNNAMED_SPLIT = "unnamed"  # the key of evaluations recorded without a split (files from before the schema)
TASKS = ("pretrain", "classifier", "regression", "race", "squad", "tagging")
_RESERVED = ("step", "split", "checkpoint")


class ResultsError(UserError):
    """An eval_results.json that cannot be read or does not belong to this run."""


@dataclasses.dataclass
class EvalResults:
    task: str
    key: str  # the metric that picks `best`
    higher_is_better: bool = True
    evaluations: List[Dict[str, Any]] = dataclasses.field(default_factory=list)

    def validate(self, where: str = FILE_NAME) -> "EvalResults":
        if self.task not in TASKS:
            raise ResultsError(f"{where}: task {self.task!r} is not one of {TASKS}")
        if not isinstance(self.key, str) or not self.key:
            raise ResultsError(f"{where}: key must name a metric, got {self.key!r}")
        for i, e in enumerate(self.evaluations):
            if not isinstance(e, dict) or not isinstance(e.get("step"), int) or isinstance(e.get("step"), bool):
                raise ResultsError(f"{where}: evaluations[{i}] has no integer 'step': {e!r}")
        return self

    # ------------------------------------------------------------------------------------------- reading
    def splits(self) -> List[Optional[str]]:
        """The splits evaluated, in the order of their first evaluation."""
        return list(dict.fromkeys(e.get("split") for e in self.evaluations))

    def last(self, split: Optional[str]) -> Optional[Dict[str, Any]]:
        """`split`'s evaluation of the highest step (None if it has none)."""
        mine = [e for e in self.evaluations if e.get("split") == split]
        return mine[-1] if mine else None

    @property
    def last_step(self) -> Optional[int]:
        """The highest step evaluated on any split (None before the first evaluation)."""
        return self.evaluations[-1]["step"] if self.evaluations else None

    def best(self, split: Optional[str]) -> Optional[Dict[str, Any]]:
        """`split`'s evaluation with the best `key` (the earliest on a tie; its last one if none has `key`)."""
        scored = [e for e in self.evaluations if e.get("split") == split and isinstance(e.get(self.key), (int, float))]
        if not scored:
            return self.last(split)
        sign = 1 if self.higher_is_better else -1
        return max(scored, key=lambda e: (sign * e[self.key], -e["step"]))

    def selected(self) -> Optional[Dict[str, Any]]:
        """What to report: `{"by": split, "step": step, "evaluations": {split: evaluation at step or None}}`, the
        step of the best evaluation of `SELECTION_SPLIT` (or, when that split was not evaluated, of the first
        split evaluated); None before the first evaluation. Unlike `best(<another split>)`, no split's score picks
        its own step."""
        splits = self.splits()
        if not splits:
            return None
        by = SELECTION_SPLIT if SELECTION_SPLIT in splits else splits[0]
        step = self.best(by)["step"]
        at = {_split_key(split): next((e for e in self.evaluations if e.get("split") == split and e["step"] == step),
                                      None) for split in splits}
        return {"by": _split_key(by), "step": step, "evaluations": at}

    def to_dict(self) -> Dict[str, Any]:
        return {"schema": SCHEMA, "version": VERSION, "task": self.task, "key": self.key,
                "higher_is_better": self.higher_is_better, "evaluations": self.evaluations,
                "best": {_split_key(split): self.best(split) for split in self.splits()},
                "last": {_split_key(split): self.last(split) for split in self.splits()},
                "selected": self.selected()}

    @classmethod
    def from_dict(cls, values: Any, where: str = FILE_NAME) -> "EvalResults":
        if isinstance(values, list):  # version 0: pretraining's list of held-out evaluations
            return cls("pretrain", "loss", False, [dict(e) for e in values]).validate(where)
        if not isinstance(values, dict):
            raise ResultsError(f"{where}: expected a JSON object, got {type(values).__name__}")
        if "schema" not in values:  # version 0 fine-tuning files
            if "checkpoints" in values:
                return cls("classifier", _guess_key(values.get("last") or {}), True,
                           [dict(e) for e in values["checkpoints"]]).validate(where)
            if "f1" in values:  # SQuAD's flat report (no step recorded: -1)
                return cls("squad", "f1", True, [{"step": -1, **values}]).validate(where)
            raise ResultsError(f"{where}: not an eval_results.json (no 'schema' field)")
        if values.get("schema") != SCHEMA:
            raise ResultsError(f"{where}: schema is {values.get('schema')!r}, expected {SCHEMA!r}")
        if values.get("version") not in READABLE_VERSIONS:
            raise ResultsError(f"{where}: version {values.get('version')!r} is not supported (this code reads "
                               f"{READABLE_VERSIONS}); evaluate again into a new --model_dir")
        try:
            return cls(values["task"], values["key"], bool(values.get("higher_is_better", True)),
                       list(values["evaluations"])).validate(where)
        except KeyError as e:
            raise ResultsError(f"{where}: missing field {e}") from None

    # ------------------------------------------------------------------------------------------- writing
    def add(self, step: int, metrics: Dict[str, Any], split: Optional[str] = None,
            checkpoint: Optional[str] = None) -> Dict[str, Any]:
        clash = sorted(set(metrics) & set(_RESERVED))
        if clash:
            raise ValueError(f"metric names {clash} are reserved in {FILE_NAME}")
        entry = {"step": int(step), "split": split, "checkpoint": checkpoint, **metrics}
        self.evaluations = [e for e in self.evaluations
                            if (e["step"], e.get("split")) != (entry["step"], split)] + [entry]
        self.evaluations.sort(key=lambda e: e["step"])
        return entry


def _split_key(split: Optional[str]) -> str:
    """A split's key in the file (evaluations recorded without a split: `UNNAMED_SPLIT`)."""
    return UNNAMED_SPLIT if split is None else split


def _guess_key(entry: Dict[str, Any]) -> str:
    for key in ("accuracy", "pearson", "f1", "loss"):
        if key in entry:
            return key
    return next((k for k in entry if k not in _RESERVED), "accuracy")


def path_of(model_dir: str) -> str:
    return os.path.join(model_dir, FILE_NAME)


def load(model_dir: str) -> Optional[EvalResults]:
    """The results recorded in `model_dir` (None if there are none yet)."""
    path = path_of(model_dir)
    if not tf.io.gfile.exists(path):
        return None
    try:
        with tf.io.gfile.GFile(path, "r") as f:
            values = json.loads(f.read())
    except (ValueError, tf.errors.OpError) as e:
        raise ResultsError(f"{path} is unreadable ({e}); move it away to start the results afresh") from None
    return EvalResults.from_dict(values, path)


def save(model_dir: str, results: EvalResults) -> str:
    path = path_of(model_dir)
    tf.io.gfile.makedirs(model_dir)
    files.write_text_atomic(path, json.dumps(results.to_dict(), indent=2) + "\n")
    return path


def load_for(model_dir: str, task: str) -> Optional[EvalResults]:
    """`load`, refusing results of another task (a run that will record `task` checks this before it writes)."""
    results = load(model_dir)
    if results is not None and results.task != task:
        raise ResultsError(f"{path_of(model_dir)} holds {results.task} results, this run records {task}; "
                           "use another --model_dir")
    return results


def record(model_dir: str, task: str, key: str, step: int, metrics: Dict[str, Any], split: Optional[str] = None,
           checkpoint: Optional[str] = None, higher_is_better: bool = True) -> EvalResults:
    """Adds one evaluation to `model_dir`'s results (created if absent) and writes them at once."""
    results = load_for(model_dir, task)
    if results is None:
        results = EvalResults(task, key, higher_is_better)
    results.key, results.higher_is_better = key, higher_is_better
    results.add(step, metrics, split, checkpoint)
    save(model_dir, results)
    return results
