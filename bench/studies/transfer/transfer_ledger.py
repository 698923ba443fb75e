"""The transfer table's run ledger: every finished fine-tuning run's scores, kept in the repository so that a
table that takes longer than one machine's life (dozens of ~10-minute runs on 2 cores) survives the machine.

`transfer.py` saves each run here as it finishes (its `eval_results.json`, after the test evaluation when
there is one) and, when its work_dir lacks a run, restores it from here instead of training again, but only when
everything that shaped the run is the same (`RunProvenance`): the runner and the task's flag file, the data
(fingerprints of the files of every data argument), the SentencePiece model, the model config, the initial
weights (SHA-256 of the pretrained checkpoint; none for scratch), learning rate, seed and the extra and budget
flags. Pretraining and fine-tuning are deterministic here, so such a run would give the same scores. A run
restored this way has its scores but not its weights: where the weights are needed again (a test evaluation the
ledger lacks) the run is trained again.

File (`<results_prefix>_runs.json`, schema `SCHEMA` version `VERSION`):

    {"schema": "xlnet_tf.transfer_ledger", "version": 1,
     "runs": {"<task>/<init>/lr<lr>-seed<seed>": {"provenance": {...}, "eval_results": {...},
                                                   "commit": "<HEAD when it was saved>",
                                                   "code": "<the last commit that changed code when the
                                                            run's processes started>",
                                                   "machine": {...}, "saved": "<UTC time>"}}}

`eval_results` is the run's eval_results.json as saved (xlnet_tf/artifacts/results.py): its `best` of the test split is test's
own best over the checkpoints (an oracle); the dev-chosen step and the test score there are its `selected` (from
version 3; derived when an older entry is read with `results.EvalResults.from_dict`), which is what the report uses.

A ledger entry whose provenance differs from the run asked for is left alone (and the run is trained again,
then replaces it), never used. No TensorFlow.
"""

from __future__ import annotations

import dataclasses
import fcntl
import hashlib
import json
import os
import subprocess
import tempfile
import time
from typing import Any, Dict, List, Optional, Sequence, Tuple

from xlnet_tf import files

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))  # the repository root
SCHEMA = "xlnet_tf.transfer_ledger"
VERSION = 1
RESTORED_MARKER = "restored_from_ledger.json"  # written into a run dir restored from the ledger


class LedgerError(ValueError):
    """A ledger file that cannot be read as this schema."""


def fingerprint(path: str) -> str:
    """SHA-256 of a file's bytes, or of a folder's sorted (relative path, file SHA-256) pairs."""
    if os.path.isfile(path):
        return files.file_sha256(path)
    if not os.path.isdir(path):
        raise FileNotFoundError(f"{path}: no such file or folder (a transfer task's data argument)")
    digest = hashlib.sha256()
    for root, dirs, names in os.walk(path):
        dirs.sort()
        for name in sorted(names):
            full = os.path.join(root, name)
            digest.update(f"{os.path.relpath(full, path)}\0{files.file_sha256(full)}\n".encode())
    return digest.hexdigest()


def data_fingerprints(data_args: Sequence[str]) -> Dict[str, str]:
    """{flag name: fingerprint of its path} for a task's `--flag=path` data arguments."""
    out = {}
    for arg in data_args:
        name, _, value = arg.lstrip("-").partition("=")
        out[name] = fingerprint(value)
    return out


def checkpoint_fingerprint(checkpoint_prefix: str) -> str:
    """SHA-256 over a TF checkpoint's index and data shards (`<prefix>.index`, `<prefix>.data-*`)."""
    folder, stem = os.path.split(checkpoint_prefix)
    parts = sorted(n for n in os.listdir(folder) if n.startswith(stem + ".index") or n.startswith(stem + ".data-"))
    if not any(n.endswith(".index") for n in parts):
        raise FileNotFoundError(f"{checkpoint_prefix}.index: no checkpoint (a transfer init's weights)")
    digest = hashlib.sha256()
    for name in parts:
        digest.update(f"{name}\0{files.file_sha256(os.path.join(folder, name))}\n".encode())
    return digest.hexdigest()


@dataclasses.dataclass(frozen=True)
class RunProvenance:
    """Everything that shapes one fine-tuning run's scores."""

    runner: str
    flagfile_sha256: str
    data: Dict[str, str]
    spiece_sha256: str
    model_config_sha256: str
    init: str
    init_checkpoint_sha256: Optional[str]  # None for scratch
    learning_rate: str
    seed: str
    flags: List[str]  # the budget flags and --extra_finetune_flags, in order

    def to_dict(self) -> Dict[str, Any]:
        return dataclasses.asdict(self)


def run_key(task: str, init: str, lr: str, seed: str) -> str:
    return f"{task}/{init}/lr{lr}-seed{seed}"


def _empty() -> Dict[str, Any]:
    return {"schema": SCHEMA, "version": VERSION, "runs": {}}


def read(path: str) -> Dict[str, Any]:
    """The ledger at `path` (an empty one when there is no file)."""
    if not os.path.exists(path):
        return _empty()
    try:
        with open(path, encoding="utf-8") as f:
            values = json.load(f)
    except json.JSONDecodeError as e:
        raise LedgerError(f"{path}: not JSON ({e}); restore it from git or delete it to start a new ledger") from e
    if not isinstance(values, dict) or values.get("schema") != SCHEMA or not isinstance(values.get("runs"), dict):
        raise LedgerError(f"{path}: not a {SCHEMA} file; restore it from git or delete it to start a new ledger")
    if values.get("version") != VERSION:
        raise LedgerError(f"{path}: {SCHEMA} version {values.get('version')}, this code reads version {VERSION}")
    return values


def lookup(runs: Dict[str, Any], key: str, provenance: RunProvenance) -> Optional[Dict[str, Any]]:
    """The eval_results of run `key` of a ledger's `runs` (`read(path)["runs"]`) when it was made with the same
    `provenance`, else None."""
    entry = runs.get(key)
    if entry is None or entry.get("provenance") != provenance.to_dict():
        return None
    return entry["eval_results"]


def init_checkpoints(runs: Dict[str, Any], init: str) -> set:
    """The pretrained checkpoints (SHA-256) that a ledger's `runs` of `init` were made from."""
    return {entry["provenance"]["init_checkpoint_sha256"] for key, entry in runs.items()
            if key.split("/")[1] == init and entry.get("provenance", {}).get("init_checkpoint_sha256")}


def differs(runs: Dict[str, Any], key: str, provenance: RunProvenance) -> List[str]:
    """The provenance fields in which run `key` of a ledger's `runs` differs from `provenance` ([] when it matches
    or there is no such run): what the log says when a kept run cannot stand for this one."""
    entry = runs.get(key)
    if entry is None:
        return []
    kept = entry.get("provenance") or {}
    return sorted(k for k, v in provenance.to_dict().items() if kept.get(k) != v)


# what counts as code for a run's code version: everything but results and prose
CODE_PATHS = (".", ":(exclude,glob)bench/**/results/**", ":(exclude)*.md")
# the code a fine-tuning run's own process executes (its runner, the library, the record readers): what must not
# change between a killed run and its resumption (transfer.py's orchestration may; the flag files are not
# code: a run's launch record holds its own flag file's SHA-256, and a new flag file changes no run)
RUNNER_CODE_PATHS = ("run", "xlnet_tf", "tfrecords", "pyproject.toml", ":(exclude)*.md", ":(exclude)run/flags")


def _git(*args: str) -> Optional[str]:
    try:
        return subprocess.run(["git", *args], cwd=REPO, capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return None


def code_version(commit: str = "HEAD", paths: Tuple[str, ...] = CODE_PATHS, untracked: bool = False
                 ) -> Optional[str]:
    """The last commit at or before `commit` that changed code (not results or prose: committing a ledger does
    not make a new code version), with "+changes" when `commit` is HEAD and the work tree's code differs from it.
    `paths`: git pathspecs of what counts as code (RUNNER_CODE_PATHS: only what a fine-tuning run executes);
    `untracked`: files git does not track (and does not ignore) under them count as changes too (a new module a
    run imports)."""
    last = _git("log", "-1", "--format=%H", commit, "--", *paths)
    if not last:
        return None
    if commit == "HEAD" and _git("status", "--porcelain", f"--untracked-files={'all' if untracked else 'no'}",
                                 "--", *paths):
        last += "+changes"
    return last


def _locked_update(path: str, update) -> Any:
    """`update(ledger)` -> result, under the ledger's exclusive lock; the ledger is written back when the result is
    true."""
    path = os.path.abspath(path)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    lock_name = "transfer_ledger_" + hashlib.sha256(path.encode()).hexdigest()[:16] + ".lock"
    with open(os.path.join(tempfile.gettempdir(), lock_name), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        ledger = read(path)
        changed = update(ledger)
        if changed:
            files.write_json_atomic(path, ledger)
    return changed


def copy_entry(path: str, key: str, entry: Dict[str, Any]) -> bool:
    """Record another ledger's entry of run `key` as it is (its code, commit, machine and time stay those of the
    run), unless this ledger already has `key`; True when copied."""
    def update(ledger):
        if key in ledger["runs"]:
            return False
        ledger["runs"][key] = entry
        return True

    return _locked_update(path, update)


def save(path: str, key: str, provenance: RunProvenance, eval_results: Dict[str, Any],
         machine: Dict[str, str], code: Optional[str] = None) -> bool:
    """Record run `key` (replacing an entry of other provenance); False when the same entry is already there.
    `code`: the code version(s) the run's processes started from (`code_version()` taken at each launch; a run
    can outlast edits of the work tree); without it, the code version now.
    Read-modify-write under an exclusive lock (a file in the temporary folder, named by the ledger's path, so
    that two transfer.py processes sharing a ledger never drop each other's runs), then an atomic rename."""
    def update(ledger):
        kept = ledger["runs"].get(key)
        if kept and kept.get("provenance") == provenance.to_dict() and kept.get("eval_results") == eval_results:
            return False
        ledger["runs"][key] = {"provenance": provenance.to_dict(), "eval_results": eval_results,
                               "commit": _git("rev-parse", "HEAD"), "code": code or code_version(), "machine": machine,
                               "saved": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
        return True

    return _locked_update(path, update)
