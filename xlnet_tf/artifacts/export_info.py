"""`export_info.json`: what a fine-tuning run's model_dir tells the exporter and `from_checkpoint` (schema
"xlnet_tf.artifacts.export_info", version 6; other versions are refused: re-run the fine-tuning).

Written by every fine-tuning runner (run/lifecycle.py, through `model_dir.prepare`, which compares the recorded
object whole with the run's), read by run/export_savedmodel.py and `Task.from_checkpoint`. Fields by task:

- all: `task` (classifier | regression | race | squad | tagging), `max_seq_length`, `text` (the records'
  TextSettings: SentencePiece checksum, `uncased`, `keep_accents`; serving and `from_checkpoint` repeat the
  normalization and refuse another SentencePiece model), `spiece_model_file` (where the SentencePiece model was,
  absolute: a location, not compared);
- classifier / regression: `num_labels`; optional `labels` (their names, as many), `text_pair` (default
  false), `task_name`; long documents: `max_segments` (> 1: documents of that many segments of
  `max_seq_length`, read with Transformer-XL memories) and `mem_len` (the memory length), both or neither;
  `document_summary` (`last_segment`, the default, or `all_segments`: what the summary of such a document reads);
- classifier / regression / race: the sequence summary, `summary_type`, `use_summ_proj`;
- race: `max_qa_length`, `qa_truncation` (`tail` keeps the last `max_qa_length` ids of question + option,
  `head` the first: the records' rule, which serving repeats);
- squad: `max_query_length`, `max_answer_length`, `start_n_top`, `end_n_top`, `version_2_with_negative`,
  `split_unknown` (a multi-character `<unk>` piece of the context split into one `<unk>` per character, in the
  records and in serving alike);
- tagging: `num_labels`, `labels` (the tag names), `doc_stride` (pieces between the starts of two windows of a
  long sentence: serving windows a request as the records were).
"""

from __future__ import annotations

import dataclasses
import os
from typing import Any, Dict, List, Optional

from xlnet_tf.artifacts.text_settings import TextSettings
from xlnet_tf.artifacts.versioned_json import VersionedJson
from xlnet_tf.errors import UserError

SCHEMA = "xlnet_tf.artifacts.export_info"
VERSION = 6
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


FILE = VersionedJson(SCHEMA, VERSION, "re-run the fine-tuning into a new --model_dir (or export with --task and "
                     "--export_* flags)", ExportInfoError)


@dataclasses.dataclass(frozen=True)
class ExportInfo:
    task: str
    max_seq_length: int
    text: TextSettings = TextSettings(None)
    spiece_model_file: Optional[str] = None
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
        if not isinstance(self.text, TextSettings):
            bad("text", f"must be the text settings, got {self.text!r}")
        for field in ("uncased", "keep_accents"):
            if not isinstance(getattr(self.text, field), bool):
                bad(f"text.{field}", f"must be true or false, got {getattr(self.text, field)!r}")
        if self.text.spiece_sha256 is not None and not isinstance(self.text.spiece_sha256, str):
            bad("text.spiece_sha256", f"must be a string or null, got {self.text.spiece_sha256!r}")
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
        """As written: the schema header, then every field that is set (`text` as an object)."""
        values = {k: v for k, v in dataclasses.asdict(self).items() if v is not None}
        return FILE.to_json(values)

    @classmethod
    def from_dict(cls, values: Dict[str, Any], where: str = NAME) -> "ExportInfo":
        """From a file's content (the schema header first)."""
        return cls.from_fields(FILE.fields(values, where), where)

    @classmethod
    def from_fields(cls, values: Dict[str, Any], where: str = NAME) -> "ExportInfo":
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(values) - known)
        if unknown:
            raise ExportInfoError(f"{where}: unknown field(s) {unknown}; known: {sorted(known)}")
        missing = [f for f in ("task", "max_seq_length", "text") if f not in values]
        if missing:
            raise ExportInfoError(f"{where}: {', '.join(missing)} required")
        text = values["text"]
        if not isinstance(text, dict) or set(text) != {f.name for f in dataclasses.fields(TextSettings)}:
            raise ExportInfoError(f"{where}: text must hold spiece_sha256, uncased and keep_accents, got {text!r}")
        return cls(**{**values, "text": TextSettings(**text)}).validate(where)

    @classmethod
    def for_run(cls, uncased: bool = False, keep_accents: bool = False, **values) -> "ExportInfo":
        """A run's export info: the text settings of its SentencePiece model (checksum read now) and
        normalization, the SentencePiece path made absolute (the exporter finds it from any working directory)."""
        spm = values.get("spiece_model_file")
        sha = None
        if spm:
            values["spiece_model_file"] = os.path.abspath(spm)
            sha = TextSettings.of_model(spm).spiece_sha256 if os.path.isfile(spm) else None
        return cls(text=TextSettings(sha, bool(uncased), bool(keep_accents)), **values).validate(
            "export info of this run")

    def compared(self) -> "ExportInfo":
        """What a rerun must match: everything but where the SentencePiece model was (compared by checksum)."""
        return dataclasses.replace(self, spiece_model_file=None)


def read(path: str) -> ExportInfo:
    """Reads and validates an export_info.json; `ExportInfoError` naming the file."""
    return ExportInfo.from_fields(FILE.read(path), where=path)


def read_optional(directory: str) -> Optional[ExportInfo]:
    """The export info of a model directory, or None when it has none."""
    path = os.path.join(directory, NAME)
    return read(path) if os.path.isfile(path) else None
