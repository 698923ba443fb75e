"""Pretraining provenance: the facts that shaped a pretraining run and the weights it leaves behind.

Two typed, versioned files (xlnet_tf/artifacts/versioned_json.py; other versions are refused: re-run):

- `<model_dir>/pretrain_run.json` (`PretrainRun`, schema "xlnet_tf.pretrain_run", version 2): written by
  run/pretrain.py through `model_dir.prepare_pretraining` once every check has passed (atomically, with the
  model's `xlnet_config.json`), and compared whole when a later run resumes that model_dir.
- `<model_dir>/final/pretrained_model.json` (`PretrainedModel`, schema "xlnet_tf.pretrained_model",
  version 2): written by run/pretrain.py next to `final/xlnet_model.ckpt` (last, so it describes weights that
  are there); read by `check_final`, which consumers of pretrained weights call (run/evaluate_lm.py,
  run/convert_checkpoint.py; `from_checkpoint` and the exporter may too).

What a resume may change (`PretrainRun.resume_view` says what it may; every other field, a new one included, is
compared):

- refused: any difference in `objective`, `nsp`, the record layout (`seq_len`, `reuse_len`, `num_predict`,
  `perm_size`, `bi_data`, `global_batch_size`, `num_replicas`), the tokenization (`text`: the TextSettings,
  SentencePiece checksum, `uncased`, `keep_accents`), the training records (`records_fingerprint`: the builder's fingerprint of its
  parameters, SentencePiece model and the content of every input file), the held-out records
  (`eval_records_fingerprint`, when both runs evaluate: the history in eval_results.json must stay one
  curve), and a switch to or from `--mixed_precision=float16` (its checkpoints hold a loss-scale optimizer);
- allowed: the directories the records are read from (`records_dir`, `eval_records_dir`: the same data in
  another directory has the same fingerprint), `--train_steps` (a resume usually grows it), the optimizer and
  schedule flags, the checkpoint/log cadence, `--jit_compile`, float32 <-> bfloat16, and starting or stopping
  held-out evaluation (the file keeps the held-out records' fingerprint once given). The model itself is
  compared through `xlnet_config.json` (`model_dir.check`).

Checkpoints without these files (the original release, Hugging Face safetensors, `final/` directories of
earlier versions) carry no such facts: `check_final` accepts them and returns None.
"""

from __future__ import annotations

import dataclasses
import json
import os
from typing import Any, Dict, List, Optional, Sequence, Tuple

from xlnet_tf import files
from xlnet_tf.artifacts import provenance
from xlnet_tf.artifacts.text_settings import TextSettings
from xlnet_tf.artifacts.versioned_json import VersionedJson
from xlnet_tf.errors import UserError

VERSION = 2
RUN_SCHEMA = "xlnet_tf.pretrain_run"
RUN_NAME = "pretrain_run.json"
MODEL_SCHEMA = "xlnet_tf.pretrained_model"
MODEL_NAME = "pretrained_model.json"
# Folder of a pretraining model_dir holding the checkpoints kept by --keep_checkpoint_steps (`kept/ckpt-<step>`);
# their facts are the run's (pretrain_run.json and xlnet_config.json one level up).
KEPT_DIR = "kept"
OBJECTIVES = ("plm", "mlm")
MIXED_PRECISIONS = ("float32", "bfloat16", "float16")
# Head scopes a pretrained model can hold (`checkpoints.head_scopes` names them the same way): the LM head's
# bias `model/lm_loss/bias` (its output matrix is tied to the word embedding) and the optional NSP head.
LM_HEAD = "lm_loss"
NSP_HEAD = "nsp"
# The XLNetConfig keys that make the weights (the rest are run-time knobs a consumer may override).
ARCHITECTURE = ("n_token", "n_layer", "d_model", "n_head", "d_head", "d_inner", "ff_activation", "untie_r")


class PretrainInfoError(UserError):
    """A pretraining info file that does not follow its schema, or weights that do not fit their use."""


RUN_FILE = VersionedJson(RUN_SCHEMA, VERSION, "pretrain into a new --model_dir", PretrainInfoError)
MODEL_FILE = VersionedJson(MODEL_SCHEMA, VERSION, "pretrain again, or remove the file to use the weights without "
                           "their recorded facts", PretrainInfoError)


def pretrained_heads(nsp: bool) -> List[str]:
    """The heads a pretraining run's weights hold."""
    return [LM_HEAD] + ([NSP_HEAD] if nsp else [])


def _check_types(obj, where: str, ints=(), bools=(), strings=(), optional=()):
    def bad(field, why):
        raise PretrainInfoError(f"{where}: {field} {why}")

    for field in ints:
        value = getattr(obj, field)
        if value is None and field in optional:
            continue
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            bad(field, f"must be a positive integer, got {value!r}")
    for field in bools:
        if not isinstance(getattr(obj, field), bool):
            bad(field, f"must be true or false, got {getattr(obj, field)!r}")
    for field in strings:
        value = getattr(obj, field)
        if value is None and field in optional:
            continue
        if not isinstance(value, str) or not value:
            bad(field, f"must be a non-empty string, got {value!r}")
    if getattr(obj, "objective", None) not in OBJECTIVES:
        bad("objective", f"is {getattr(obj, 'objective', None)!r}; one of {OBJECTIVES}")


def _from_fields(cls, values: Dict[str, Any], where: str):
    known = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(values) - known)
    if unknown:
        raise PretrainInfoError(f"{where}: unknown field(s) {unknown}; known: {sorted(known)}")
    required = [f.name for f in dataclasses.fields(cls)
                if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING]
    missing = [f for f in required if f not in values]
    if missing:
        raise PretrainInfoError(f"{where}: required field(s) {missing} missing")
    values = {**values, "text": provenance.from_json(TextSettings, values["text"], f"{where}: text",
                                                     PretrainInfoError)}
    return cls(**values).validate(where)


def _check_text(text: Any, where: str) -> None:
    if not isinstance(text, TextSettings) or not isinstance(text.spiece_sha256, str) or not text.spiece_sha256:
        raise PretrainInfoError(f"{where}: text must be the TextSettings of a SentencePiece model, got {text!r}")


@dataclasses.dataclass(frozen=True)
class PretrainRun:
    """The facts of a pretraining run, kept in its model_dir (`pretrain_run.json`) and compared on resume."""

    objective: str
    nsp: bool
    seq_len: int
    reuse_len: int
    num_predict: int
    perm_size: int
    bi_data: bool
    global_batch_size: int
    num_replicas: int
    text: TextSettings
    records_fingerprint: str
    mixed_precision: str = "float32"
    records_dir: Optional[str] = None
    eval_records_fingerprint: Optional[str] = None
    eval_records_dir: Optional[str] = None

    def validate(self, where: str = RUN_NAME) -> "PretrainRun":
        _check_types(self, where,
                     ints=("seq_len", "reuse_len", "num_predict", "perm_size", "global_batch_size", "num_replicas"),
                     bools=("nsp", "bi_data"),
                     strings=("records_fingerprint", "records_dir", "eval_records_fingerprint", "eval_records_dir"),
                     optional=("records_dir", "eval_records_fingerprint", "eval_records_dir"))
        _check_text(self.text, where)
        if self.mixed_precision not in MIXED_PRECISIONS:
            raise PretrainInfoError(f"{where}: mixed_precision is {self.mixed_precision!r}; one of {MIXED_PRECISIONS}")
        return self

    def to_dict(self) -> Dict[str, Any]:
        values = {k: v for k, v in dataclasses.asdict(self).items() if v is not None}
        return RUN_FILE.to_json(values)

    @classmethod
    def from_dict(cls, values: Dict[str, Any], where: str = RUN_NAME) -> "PretrainRun":
        return _from_fields(cls, RUN_FILE.fields(values, where), where)

    @classmethod
    def from_manifest(cls, manifest: Dict[str, Any], objective: str, nsp: bool, num_replicas: int,
                      mixed_precision: str = "float32",
                      eval_manifest: Optional[Dict[str, Any]] = None) -> "PretrainRun":
        """This run's facts: the layout and tokenization from the training records' manifest (already validated
        against the flags), the objective, NSP, replicas and precision of the trainer."""
        p = manifest["params"]
        return cls(objective=objective, nsp=bool(nsp), seq_len=p["seq_len"], reuse_len=p["reuse_len"],
                   num_predict=p["num_predict"], perm_size=p["perm_size"], bi_data=p["bi_data"],
                   global_batch_size=p["global_batch_size"], num_replicas=num_replicas,
                   text=TextSettings(manifest["spiece_model"]["sha256"], bool(p.get("uncased", False)),
                                     bool(p.get("keep_accents", False))),
                   records_fingerprint=manifest["fingerprint"],
                   mixed_precision=mixed_precision,
                   records_dir=os.path.abspath(manifest["_dir"]) if manifest.get("_dir") else None,
                   eval_records_fingerprint=eval_manifest["fingerprint"] if eval_manifest else None,
                   eval_records_dir=(os.path.abspath(eval_manifest["_dir"])
                                     if eval_manifest and eval_manifest.get("_dir") else None)).validate(
                                         "this run's pretraining facts")

    def resume_view(self, other: "PretrainRun") -> "PretrainRun":
        """These facts with what a resume (to or from `other`) may change made equal: where the records are read
        from, whether held-out records are evaluated at all, and float32 <-> bfloat16 (float16 checkpoints hold a
        loss-scale optimizer: a switch to or from it stays a difference). Every other field is compared."""
        return dataclasses.replace(
            self, records_dir=None, eval_records_dir=None,
            eval_records_fingerprint=self.eval_records_fingerprint if other.eval_records_fingerprint else None,
            mixed_precision="float16" if self.mixed_precision == "float16" else "float32 or bfloat16")

    def differences(self, now: "PretrainRun") -> List[str]:
        """`field: <recorded> there, <now> now` for every difference a resume may not have (module docstring)."""
        diffs = provenance.differences(self.resume_view(now), now.resume_view(self))
        return [f"{field}: {a!r} there, {b!r} now{_HINTS.get(field, '')}" for field, a, b in diffs]

    def merged_with(self, recorded: Optional["PretrainRun"]) -> "PretrainRun":
        """What a resume writes: this run's facts, keeping the held-out records of an earlier run that had them."""
        if recorded is None or self.eval_records_fingerprint is not None:
            return self
        return dataclasses.replace(self, eval_records_fingerprint=recorded.eval_records_fingerprint,
                                   eval_records_dir=recorded.eval_records_dir)

    def as_model_facts(self, config: Optional[Dict[str, Any]] = None, step: Optional[int] = None
                       ) -> "PretrainedModel":
        """The facts of the weights this run writes (`final/pretrained_model.json`)."""
        return PretrainedModel(objective=self.objective, nsp=self.nsp, heads=pretrained_heads(self.nsp),
                               text=self.text, seq_len=self.seq_len, reuse_len=self.reuse_len,
                               records_fingerprint=self.records_fingerprint, config=dict(config or {}),
                               step=step).validate("the pretrained model's facts")


_HINTS = {
    "records_fingerprint": " (--record_dir holds other records: other text, SentencePiece model or build "
                           "parameters)",
    "eval_records_fingerprint": " (--eval_records_dir holds other held-out records than the ones "
                                "eval_results.json measured)",
    "text.spiece_sha256": " (the records were tokenized with another SentencePiece model)",
    "mixed_precision": " (float16 checkpoints hold a loss-scale optimizer; the others do not)",
}


@dataclasses.dataclass(frozen=True)
class PretrainedModel:
    """The facts of a pretraining run's weights (`final/pretrained_model.json`)."""

    objective: str
    nsp: bool
    heads: List[str]
    text: TextSettings
    seq_len: int
    reuse_len: int
    records_fingerprint: str
    config: Dict[str, Any]
    step: Optional[int] = None

    def validate(self, where: str = MODEL_NAME) -> "PretrainedModel":
        _check_types(self, where, ints=("seq_len", "reuse_len", "step"), bools=("nsp",),
                     strings=("records_fingerprint",), optional=("step",))
        _check_text(self.text, where)
        if (not isinstance(self.heads, list) or not all(isinstance(h, str) for h in self.heads)
                or LM_HEAD not in self.heads or (NSP_HEAD in self.heads) != self.nsp):
            raise PretrainInfoError(f"{where}: heads must list {LM_HEAD!r} (and {NSP_HEAD!r} exactly when nsp), "
                                    f"got {self.heads!r}")
        if not isinstance(self.config, dict) or any(k not in self.config for k in ARCHITECTURE):
            raise PretrainInfoError(f"{where}: config must hold the model's {list(ARCHITECTURE)}, got "
                                    f"{self.config!r}")
        return self

    def to_dict(self) -> Dict[str, Any]:
        values = {k: v for k, v in dataclasses.asdict(self).items() if v is not None}
        return MODEL_FILE.to_json(values)

    @classmethod
    def from_dict(cls, values: Dict[str, Any], where: str = MODEL_NAME) -> "PretrainedModel":
        return _from_fields(cls, MODEL_FILE.fields(values, where), where)


# ------------------------------------------------------------------------------------------------ files
def _read_json(path: str, where: Optional[str] = None) -> Any:
    import tensorflow as tf

    try:
        with tf.io.gfile.GFile(path, "r") as f:
            return json.loads(f.read())
    except (OSError, ValueError, tf.errors.OpError) as e:
        raise PretrainInfoError(f"{where or path} is unreadable ({' '.join(str(e).split())})") from None


def read_run(path: str) -> PretrainRun:
    """Reads and validates a `pretrain_run.json`; `PretrainInfoError` naming the file and field."""
    return _from_fields(PretrainRun, RUN_FILE.read(path), path)


def read_model(path: str) -> PretrainedModel:
    """Reads and validates a `pretrained_model.json`; `PretrainInfoError` naming the file and field."""
    return _from_fields(PretrainedModel, MODEL_FILE.read(path), path)


def write(path: str, info) -> str:
    """Writes a `PretrainRun` or `PretrainedModel` atomically (temporary name, then rename)."""
    files.write_json_atomic(path, info.to_dict())
    return path


def _directory(checkpoint: str) -> str:
    import tensorflow as tf

    return checkpoint if tf.io.gfile.isdir(checkpoint) else os.path.dirname(checkpoint)


def _exists(path: str) -> bool:
    import tensorflow as tf

    return tf.io.gfile.exists(path)


def _locate(checkpoint: str) -> Tuple[Optional[PretrainedModel], Optional[str]]:
    directory = _directory(checkpoint)
    if os.path.basename(directory.rstrip("/")) == KEPT_DIR:  # a kept checkpoint: the facts are its run's
        directory = os.path.dirname(directory.rstrip("/"))
    path = os.path.join(directory, MODEL_NAME)
    if _exists(path):
        return read_model(path), path
    run_path = os.path.join(directory, RUN_NAME)
    if not _exists(run_path):
        return None, None
    run = read_run(run_path)
    config_path = os.path.join(directory, "xlnet_config.json")
    config = _read_json(config_path) if _exists(config_path) else None
    if not isinstance(config, dict) or any(k not in config for k in ARCHITECTURE):
        raise PretrainInfoError(f"{config_path}: missing or not a model config; the pretraining model_dir "
                                f"{directory} is incomplete")
    return run.as_model_facts(config), run_path


def read_pretrained(checkpoint: str) -> Optional[PretrainedModel]:
    """The facts of the pretrained weights at `checkpoint` (a `final/` directory or its `xlnet_model.ckpt`
    prefix: `pretrained_model.json`; a pretraining model_dir or one of its `ckpt-N`: `pretrain_run.json` and
    `xlnet_config.json`), or None when it records none (the original release, Hugging Face safetensors, a
    `final/` of an earlier version)."""
    return _locate(checkpoint)[0]


def check_final(directory: str, spiece_sha256: Optional[str] = None, need_heads: Sequence[str] = (),
                spiece_flag: str = "the SentencePiece model", config: Optional[Dict[str, Any]] = None,
                config_flag: str = "the model config") -> Optional[PretrainedModel]:
    """Checks pretrained weights against their use; returns their facts, or None when they record none.

    Args:
      directory: a pretraining run's `final/` (or its `xlnet_model.ckpt` prefix), or its model_dir (or a
        `ckpt-N` prefix in it).
      spiece_sha256: the checksum of the SentencePiece model the caller will tokenize with (None: not checked).
      need_heads: head scopes the caller needs (`LM_HEAD`, `NSP_HEAD`).
      spiece_flag: how the caller's SentencePiece model is named in messages (e.g. "--spiece_model=spm.model").
      config: the `XLNetConfig` dict the caller will build (None: not checked); its `ARCHITECTURE` keys must be
        the weights'.
      config_flag: how the caller's config is named in messages (e.g. "--config=xlnet_config.json").

    Also checks that an `xlnet_config.json` next to the weights describes them. Raises `PretrainInfoError` (a
    `UserError`) in one line naming the file and the fact. Weights without a facts file (the original release,
    Hugging Face safetensors, a `final/` written before this file existed) are accepted as they are: they carry
    no such facts, and None is returned.
    """
    info, where = _locate(directory)
    if info is None:
        return None
    if spiece_sha256 is not None and spiece_sha256 != info.text.spiece_sha256:
        raise PretrainInfoError(
            f"{spiece_flag} has sha256 {spiece_sha256}, but {where} says the model was pretrained with the "
            f"SentencePiece model of sha256 {info.text.spiece_sha256}: give that model (the pretraining run's "
            "--spiece_model)")
    missing = [h for h in need_heads if h not in info.heads]
    if missing:
        raise PretrainInfoError(f"{where}: the weights hold the heads {info.heads}, not {missing}")
    sibling = os.path.join(_directory(directory), "xlnet_config.json")
    for against, name in ((config, config_flag), (_read_json(sibling) if _exists(sibling) else None, sibling)):
        if not isinstance(against, dict):
            continue
        differ = [f"{k}: {info.config.get(k)!r} in {where}, {against.get(k)!r} in {name}"
                  for k in ARCHITECTURE if against.get(k, info.config.get(k)) != info.config.get(k)]
        if differ:
            raise PretrainInfoError(f"{name} does not describe the pretrained weights: " + "; ".join(differ))
    return info
