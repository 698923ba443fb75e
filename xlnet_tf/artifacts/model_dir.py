"""A run's model directory, checked before anything is written to it.

Every runner (pretraining and fine-tuning) calls `prepare` first (pretraining: `prepare_pretraining`, which
also keeps and compares the run's facts, xlnet_tf.artifacts.pretrain_info). A model_dir that already holds an
`xlnet_config.json` or `export_info.json` belongs to an earlier run: resuming it with different model or task
settings would silently mix two runs (checkpoints restored into another shape, or into the same shape with a
different vocabulary, labels or sequence length). `prepare` compares every field and raises `ModelDirError`
naming each difference, leaving every file as it was; only when all agree does it write (atomically) and
remove the `ckpt-*_temp` directories an interrupted checkpoint save leaves behind. Paths may be local or any
filesystem `tf.io.gfile` knows (`gs://` on TPU).
"""

from __future__ import annotations

import json
import os
from typing import Any, Callable, Dict, List, Optional

import tensorflow as tf

from xlnet_tf import files
from xlnet_tf.artifacts import provenance
from xlnet_tf.config import XLNetConfig
from xlnet_tf.errors import UserError
from xlnet_tf.artifacts.export_info import ExportInfo
from xlnet_tf.artifacts.pretrain_info import RUN_NAME as PRETRAIN_RUN_NAME
from xlnet_tf.artifacts.pretrain_info import PretrainInfoError, PretrainRun

CONFIG_NAME = "xlnet_config.json"
EXPORT_INFO_NAME = "export_info.json"  # xlnet_tf.artifacts.export_info


class ModelDirError(UserError):
    """The model directory holds a different run's settings."""


def _read_json(path: str) -> Dict[str, Any]:
    try:
        with tf.io.gfile.GFile(path, "r") as f:
            values = json.loads(f.read())
    except (OSError, ValueError, tf.errors.OpError) as e:
        raise ModelDirError(f"{path} is unreadable ({e}); it belongs to an earlier run: move it away or use "
                            "another --model_dir") from None
    if not isinstance(values, dict):
        raise ModelDirError(f"{path} is not a JSON object; use another --model_dir")
    return values


def check(model_dir: str, config: Optional[XLNetConfig] = None,
          export_info: Optional[ExportInfo] = None) -> None:
    """Raises `ModelDirError` if `model_dir`'s existing config or export info differs from this run's."""
    if tf.io.gfile.exists(model_dir) and not tf.io.gfile.isdir(model_dir):
        raise ModelDirError(f"--model_dir={model_dir} is a file, not a directory")
    problems = _recorded_differences(model_dir, config, export_info)
    if problems:
        raise ModelDirError(
            f"--model_dir={model_dir} holds a run with other settings; nothing was written. Use another "
            f"--model_dir, or the earlier run's flags. Differences: " + "; ".join(problems))


def _recorded_differences(model_dir: str, config: Optional[XLNetConfig] = None,
                          export_info: Optional[ExportInfo] = None) -> List[str]:
    """`<file> <field>: <recorded> there, <wanted> now` for the config and export info of `model_dir`, each read
    as its typed object and compared whole with this run's (the SentencePiece model by checksum: its path may
    move between runs)."""
    problems = []
    for name, wanted in ((CONFIG_NAME, config), (EXPORT_INFO_NAME, export_info)):
        path = os.path.join(model_dir, name)
        if wanted is None or not tf.io.gfile.exists(path):
            continue
        recorded = _read_json(path)
        try:  # typed: a config of an older version gets the fields it lacked (defaults); a bad file is named
            if name == CONFIG_NAME:
                pair = (XLNetConfig.from_dict(recorded), wanted)
            else:
                pair = (ExportInfo.from_dict(recorded, where=path).compared(), wanted.compared())
        except (TypeError, ValueError) as e:
            raise ModelDirError(f"{path}: {e}; use another --model_dir") from None
        problems += [f"{name} {field}: {a!r} there, {b!r} now" for field, a, b in provenance.differences(*pair)]
    return problems


def check_pretraining(model_dir: str, config: XLNetConfig, run: PretrainRun) -> Optional[PretrainRun]:
    """Raises `ModelDirError` listing, in one line, every difference between the pretraining run recorded in
    `model_dir` (`xlnet_config.json`, `pretrain_run.json`: xlnet_tf.artifacts.pretrain_info says which facts a resume may
    change) and this one; returns the recorded `PretrainRun` (None for a new model_dir).

    A model_dir of a fine-tuning run (`export_info.json`) is refused. One written before `pretrain_run.json`
    existed (a config and checkpoints, no facts) is compared on what its latest checkpoint shows: whether it
    holds the NSP head."""
    if tf.io.gfile.exists(model_dir) and not tf.io.gfile.isdir(model_dir):
        raise ModelDirError(f"--model_dir={model_dir} is a file, not a directory")
    if tf.io.gfile.exists(os.path.join(model_dir, EXPORT_INFO_NAME)):
        raise ModelDirError(f"--model_dir={model_dir} holds a fine-tuning run ({EXPORT_INFO_NAME}); nothing was "
                            "written. Pretrain into another --model_dir")
    problems = _recorded_differences(model_dir, config)
    path = os.path.join(model_dir, PRETRAIN_RUN_NAME)
    recorded = None
    if tf.io.gfile.exists(path):
        try:
            recorded = PretrainRun.from_dict(_read_json(path), where=path)
        except PretrainInfoError as e:
            raise ModelDirError(f"{e}; use another --model_dir") from None
        problems += [f"{PRETRAIN_RUN_NAME} {d}" for d in recorded.differences(run)]
    else:
        latest = tf.train.latest_checkpoint(model_dir) if tf.io.gfile.isdir(model_dir) else None
        if latest:
            from xlnet_tf import checkpoints

            had_nsp = "nsp" in checkpoints.head_scopes(checkpoints.variable_names(latest))
            if had_nsp != run.nsp:
                problems.append(f"nsp: {had_nsp!r} there (the heads of {os.path.basename(latest)}), "
                                f"{run.nsp!r} now")
    if problems:
        raise ModelDirError(
            f"--model_dir={model_dir} holds a run with other settings; nothing was written. Use another "
            f"--model_dir, or the earlier run's flags and records. Differences: " + "; ".join(problems))
    return recorded


def prepare_pretraining(model_dir: str, config: XLNetConfig, run: PretrainRun,
                        log: Optional[Callable[[str], None]] = None) -> PretrainRun:
    """`check_pretraining`, then create `model_dir`, clear stale saves and write (atomically) the config and
    `pretrain_run.json` (this run's facts, keeping an earlier run's held-out records); returns what was
    written. Call it once the run is known to proceed (after the model and its initial weights are built)."""
    recorded = check_pretraining(model_dir, config, run)
    legacy = recorded is None and tf.io.gfile.exists(os.path.join(model_dir, CONFIG_NAME))
    tf.io.gfile.makedirs(model_dir)
    remove_stale_saves(model_dir, log)
    written = run.merged_with(recorded)
    write_json_atomic(os.path.join(model_dir, CONFIG_NAME), config.to_dict())
    write_json_atomic(os.path.join(model_dir, PRETRAIN_RUN_NAME), written.to_dict())
    if legacy and log:
        log(f"{model_dir} recorded no {PRETRAIN_RUN_NAME} (an earlier version): only its config and NSP head "
            "could be compared; this run's facts are recorded from now on")
    return written


def remove_stale_saves(model_dir: str, log: Optional[Callable[[str], None]] = None) -> List[str]:
    """Deletes `ckpt-*_temp*` directories (a save killed before its rename); returns what was removed."""
    removed = []
    for pattern in ("ckpt-*_temp*", os.path.join("*", "ckpt-*_temp*")):  # model_dir and kept/, .workers/...
        for path in sorted(tf.io.gfile.glob(os.path.join(model_dir, pattern))):
            if not tf.io.gfile.isdir(path):
                continue
            tf.io.gfile.rmtree(path)
            removed.append(path)
            if log:
                log(f"Removed {path} (an interrupted checkpoint save)")
    return removed


write_json_atomic = files.write_json_atomic  # the project's one atomic JSON writer (xlnet_tf/files.py)


def prepare(model_dir: str, config: Optional[XLNetConfig] = None, export_info: Optional[ExportInfo] = None,
            log: Optional[Callable[[str], None]] = None) -> None:
    """`check`, then create `model_dir`, clear stale saves and write the config / export info."""
    check(model_dir, config, export_info)
    tf.io.gfile.makedirs(model_dir)
    remove_stale_saves(model_dir, log)
    if config is not None:
        write_json_atomic(os.path.join(model_dir, CONFIG_NAME), config.to_dict())
    if export_info is not None:
        write_json_atomic(os.path.join(model_dir, EXPORT_INFO_NAME), export_info.to_dict())


def export_info(**info) -> ExportInfo:
    """The typed export info of a fine-tuning run (xlnet_tf.artifacts.export_info.ExportInfo.for_run)."""
    return ExportInfo.for_run(**info)
