"""`export_info.json`: what a fine-tuning run's model_dir tells the exporter and `from_checkpoint` (schema
"xlnet_tf.export_info", version 5; versions 1 to 4 are read too).

Written by every fine-tuning runner (run/lifecycle.py, through `model_dir.prepare`, which compares it
field by field on reruns), read by run/export_savedmodel.py and `Task.from_checkpoint`. Fields by task:

- all: `task` (classifier | regression | race | squad), `max_seq_length`, `uncased`, `keep_accents` (version
  4; the records' normalization, which serving and `from_checkpoint` must repeat; absent = False, the original's
  default), the SentencePiece model (`spiece_model_file`, absolute; `spiece_sha256`, the one compared on reruns);
- classifier / regression: `num_labels`; optional `labels` (their names, as many), `text_pair` (default
  false), `task_name`; long documents (version 2): `max_segments` (> 1: documents of that many segments of
  `max_seq_length`, read with Transformer-XL memories) and `mem_len` (the memory length), both or neither;
  `document_summary` (version 3; `last_segment`, the default, or `all_segments`: what the summary of such a
  document reads);
- classifier / regression / race: the sequence summary, `summary_type`, `use_summ_proj`;
- race: `max_qa_length`; `qa_truncation` (version 5; `tail`, the original's and the default, keeps the last
  `max_qa_length` ids of question + option, `head` the first: the records' rule, which serving repeats);
- squad: `max_query_length`, `max_answer_length`, `start_n_top`, `end_n_top`, `version_2_with_negative`;
  `split_unknown` (version 5; absent = true, the builder's default: a multi-character `<unk>` piece of the
  context is split into one `<unk>` per character, in the records and in serving alike);
- tagging (version 5): `num_labels`, `labels` (the tag names), `doc_stride` (pieces between the starts of two
  windows of a long sentence: serving windows a request as the records were).

Files written before the schema existed (no `schema` key) are read as version 1. Version 2 added the
long-document fields, version 3 `document_summary`, version 4 `keep_accents`, version 5 `qa_truncation` and
`split_unknown` (an older file holding a newer field
is refused: its writer did not know it).
"""

from __future__ import annotations

import dataclasses
import json
import os
from typing import Any, Dict, List, Optional

from xlnet_tf.errors import UserError

SCHEMA = "xlnet_tf.export_info"
VERSION = 5
READABLE_VERSIONS = (1, 2, 3, 4, 5)
V2_FIELDS = ("max_segments", "mem_len")
V3_FIELDS = ("document_summary",)
V4_FIELDS = ("keep_accents",)
V5_FIELDS = ("qa_truncation", "split_unknown", "doc_stride")
QA_TRUNCATIONS = ("tail", "head")
NAME = "export_info.json"
TASKS = ("classifier", "regression", "race", "squad", "tagging")
_REQUIRED = {
    "classifier": ("num_labels", "summary_type", "use_summ_proj"),
    "regression": ("num_labels", "summary_type", "use_summ_proj"),
    "race": ("max_qa_length", "summary_type", "use_summ_proj"),
    "squad": ("max_query_length", "max_answer_length", "start_n_top", "end_n_top", "version_2_with_negative"),
    "tagging": ("num_labels", "doc_stride"),
}


class ExportInfoError(UserError):
    """An export_info.json (or the values for one) that does not follow the schema."""


@dataclasses.dataclass(frozen=True)
class ExportInfo:
    task: str
    max_seq_length: int
    uncased: bool = False
    keep_accents: bool = False
    spiece_model_file: Optional[str] = None
    spiece_sha256: Optional[str] = None
    labels: Optional[List[str]] = None
    num_labels: Optional[int] = None
    text_pair: Optional[bool] = None
    task_name: Optional[str] = None
    summary_type: Optional[str] = None
    use_summ_proj: Optional[bool] = None
    max_qa_length: Optional[int] = None
    max_query_length: Optional[int] = None
    max_answer_length: Optional[int] = None
    start_n_top: Optional[int] = None
    end_n_top: Optional[int] = None
    version_2_with_negative: Optional[bool] = None
    max_segments: Optional[int] = None
    mem_len: Optional[int] = None
    document_summary: Optional[str] = None
    qa_truncation: Optional[str] = None
    split_unknown: Optional[bool] = None
    doc_stride: Optional[int] = None

    def validate(self, where: str = NAME) -> "ExportInfo":
        def bad(field, why):
            raise ExportInfoError(f"{where}: {field} {why}")

        if self.task not in TASKS:
            bad("task", f"is {self.task!r}; one of {TASKS}")
        missing = [f for f in _REQUIRED[self.task] if getattr(self, f) is None]
        if missing:
            bad(", ".join(missing), f"missing (required for task {self.task!r})")
        for field in ("max_seq_length", "num_labels", "max_qa_length", "max_query_length", "max_answer_length",
                      "start_n_top", "end_n_top", "max_segments", "mem_len", "doc_stride"):
            value = getattr(self, field)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
                bad(field, f"must be a positive integer, got {value!r}")
        for field in ("uncased", "keep_accents"):
            if not isinstance(getattr(self, field), bool):
                bad(field, f"must be true or false, got {getattr(self, field)!r}")
        if self.labels is not None and (not isinstance(self.labels, list) or len(self.labels) != self.num_labels):
            bad("labels", f"must be a list of num_labels={self.num_labels} names, got {self.labels!r}")
        if self.task == "regression" and self.num_labels != 1:
            bad("num_labels", f"must be 1 for regression, got {self.num_labels!r}")
        if (self.max_segments is None) != (self.mem_len is None):
            bad("max_segments/mem_len", "must be given together (a long-document model)")
        if self.max_segments is not None and self.task not in ("classifier", "regression"):
            bad("max_segments", f"is for classifier/regression models, not {self.task!r}")
        if self.qa_truncation is not None:
            if self.task != "race":
                bad("qa_truncation", f"is for race models, not {self.task!r}")
            if self.qa_truncation not in QA_TRUNCATIONS:
                bad("qa_truncation", f"is {self.qa_truncation!r}; one of {QA_TRUNCATIONS}")
        if self.split_unknown is not None:
            if self.task != "squad":
                bad("split_unknown", f"is for squad models, not {self.task!r}")
            if not isinstance(self.split_unknown, bool):
                bad("split_unknown", f"must be true or false, got {self.split_unknown!r}")
        if self.document_summary is not None:
            from xlnet_tf.heads import DOCUMENT_SUMMARIES

            if self.document_summary not in DOCUMENT_SUMMARIES:
                bad("document_summary", f"is {self.document_summary!r}; one of {DOCUMENT_SUMMARIES}")
            if self.max_segments is None:
                bad("document_summary", "is for long-document models (max_segments/mem_len)")
        return self

    def to_dict(self) -> Dict[str, Any]:
        """As written: the schema header, then every field that is set."""
        values = {k: v for k, v in dataclasses.asdict(self).items() if v is not None}
        return {"schema": SCHEMA, "version": VERSION, **values}

    @classmethod
    def from_dict(cls, values: Dict[str, Any], where: str = NAME) -> "ExportInfo":
        if not isinstance(values, dict):
            raise ExportInfoError(f"{where}: not a JSON object")
        values = dict(values)
        schema, version = values.pop("schema", SCHEMA), values.pop("version", VERSION)
        if schema != SCHEMA or version not in READABLE_VERSIONS:
            raise ExportInfoError(f"{where}: schema {schema!r} version {version!r} is not {SCHEMA!r} version "
                                  f"{' or '.join(map(str, READABLE_VERSIONS))}; it was written by another tool or "
                                  "version")
        newer = ((set(V2_FIELDS) if version < 2 else set()) | (set(V3_FIELDS) if version < 3 else set())
                 | (set(V4_FIELDS) if version < 4 else set()) | (set(V5_FIELDS) if version < 5 else set()))
        known = {f.name for f in dataclasses.fields(cls)} - newer
        unknown = sorted(set(values) - known)
        if unknown:
            raise ExportInfoError(f"{where}: unknown field(s) {unknown}; known: {sorted(known)}")
        if "task" not in values or "max_seq_length" not in values:
            raise ExportInfoError(f"{where}: task and max_seq_length are required")
        if version < 5:  # what its writer did without saying: the builders' defaults of the time
            values.update({"race": {"qa_truncation": "tail"}, "squad": {"split_unknown": True}}.get(values["task"], {}))
        return cls(**values).validate(where)

    @classmethod
    def for_run(cls, **values) -> "ExportInfo":
        """A run's export info: the SentencePiece path made absolute (the exporter finds it from any working
        directory) and its checksum (`spiece_sha256`, compared on reruns)."""
        spm = values.get("spiece_model_file")
        if spm:
            from xlnet_tf.text.tokenization import file_sha256

            values["spiece_model_file"] = os.path.abspath(spm)
            values["spiece_sha256"] = file_sha256(spm) if os.path.isfile(spm) else None
        return cls(**values).validate("export info of this run")


def read(path: str) -> ExportInfo:
    """Reads and validates an export_info.json; `ExportInfoError` naming the file."""
    import tensorflow as tf

    try:
        with tf.io.gfile.GFile(path, "r") as f:
            values = json.loads(f.read())
    except (OSError, ValueError, tf.errors.OpError) as e:
        raise ExportInfoError(f"{path} is unreadable ({e})") from None
    return ExportInfo.from_dict(values, where=path)


def read_optional(directory: str) -> Optional[ExportInfo]:
    """The export info of a model directory, or None when it has none."""
    path = os.path.join(directory, NAME)
    return read(path) if os.path.isfile(path) else None
