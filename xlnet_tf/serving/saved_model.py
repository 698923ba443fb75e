"""SavedModel export for TF Serving: `export()` writes one version of a task's serving module, and
`SERVING_MODULES` names the module of each task (the serving side of `xlnet_tf.models.TASK_MODELS`).

`export()` writes `<export_dir>/<version>/` (the TF Serving layout) with `tf.saved_model.save` on the task's
`tf.Module` and its explicit signatures (Keras 3's `model.export()` writes every variable twice), plus
`assets.extra/`: `tf_serving_warmup_requests` (TF Serving's warm-up `PredictionLog`s) when warm-up inputs are
given, `xlnet_export.json` (the settings that shaped the export, `EXPORT_FILE`, with the TextSettings of its
tokenization) and any further JSON files. The version is written aside and renamed into place, so a failed export
never leaves a half version and an existing one is never replaced.

The signatures by task (their inputs, outputs, shapes and request bounds): `classifier`, `regression`,
`embedding` in xlnet_tf/serving/sequence.py, `race` in race.py, `squad` in squad.py, `tagging` in tagging.py,
`lm` (a pretrained model's `generate`) in lm.py; what every export shares (`features`, the `from_ids` checks) in
base.py.
"""

from __future__ import annotations

import dataclasses
import os
from typing import Dict, Optional

import numpy as np
import tensorflow as tf

from xlnet_tf import files
from xlnet_tf.artifacts.export_info import ExportInfo
from xlnet_tf.artifacts.text_settings import TextSettings
from xlnet_tf.artifacts.versioned_json import VersionedJson
from xlnet_tf.serving import half_weights
from xlnet_tf.serving.base import ServingModule
from xlnet_tf.serving.lm import LanguageModelServing
from xlnet_tf.serving.race import RaceServing
from xlnet_tf.serving.sequence import ClassifierServing, EmbeddingServing, RegressionServing
from xlnet_tf.serving.squad import SquadServing
from xlnet_tf.serving.tagging import TaggingServing
from xlnet_tf.text import tokenization

SERVING_MODULES = {
    "classifier": ClassifierServing,
    "regression": RegressionServing,
    "squad": SquadServing,
    "race": RaceServing,
    "embedding": EmbeddingServing,
    "tagging": TaggingServing,
    "lm": LanguageModelServing,
}
TASKS = tuple(SERVING_MODULES)
WARMUP_FILE = "tf_serving_warmup_requests"
EXPORT_FILE_NAME = "xlnet_export.json"
EXPORT_FILE = VersionedJson("xlnet_tf.export", 1, "export the model again with run/export_savedmodel.py")
_INFO_FIELDS = frozenset(f.name for f in dataclasses.fields(ExportInfo))


def serving_module(model, task: str, spiece_proto: bytes, max_seq_length: int, text: TextSettings,
                   **options) -> ServingModule:
    """The serving module of `task` (`SERVING_MODULES`) for `model`: `options` that are `ExportInfo` fields
    (`labels`, `text_pair`, `max_segments`, `max_qa_length`, `doc_stride`, ...) make its export info with `task`,
    `max_seq_length` and `text`; the others are the module's own arguments (a tagger's `max_windows`, a language
    model's `generation`)."""
    if task not in SERVING_MODULES:
        raise ValueError(f"task must be one of {TASKS}, got {task!r}")
    info = ExportInfo(task=task, max_seq_length=max_seq_length, text=text,
                      **{k: v for k, v in options.items() if k in _INFO_FIELDS})
    return SERVING_MODULES[task](model, info, spiece_proto,
                                 **{k: v for k, v in options.items() if k not in _INFO_FIELDS})


def write_warmup_requests(export_path: str, inputs: Dict[str, np.ndarray], model_name: str = "xlnet",
                          signature_name: str = "serving_default", num_records: int = 1) -> str:
    """`assets.extra/tf_serving_warmup_requests`: TFRecord of `PredictionLog`s (TF Serving's format)."""
    from tensorflow_serving.apis import model_pb2, predict_pb2, prediction_log_pb2

    directory = os.path.join(export_path, "assets.extra")
    tf.io.gfile.makedirs(directory)
    path = os.path.join(directory, WARMUP_FILE)
    request = predict_pb2.PredictRequest(
        model_spec=model_pb2.ModelSpec(name=model_name, signature_name=signature_name))
    for key, value in inputs.items():
        request.inputs[key].CopyFrom(tf.make_tensor_proto(value))
    log = prediction_log_pb2.PredictionLog(predict_log=prediction_log_pb2.PredictLog(request=request))
    with tf.io.TFRecordWriter(path) as writer:
        for _ in range(num_records):
            writer.write(log.SerializeToString())
    return path


def export(model, task: str, spiece_model: str, export_dir: str, version: int, max_seq_length: int,
           warmup_inputs: Optional[Dict[str, np.ndarray]] = None, extra_files: Optional[Dict[str, dict]] = None,
           **options) -> str:
    """Writes `<export_dir>/<version>/` (SavedModel + warm-up requests + `assets.extra/xlnet_export.json`: the
    settings that shaped the export, `EXPORT_FILE`, with the TextSettings of its tokenization); returns it.

    `options`: `uncased`, `keep_accents` (the records' normalization) and `serving_module`'s options of the task.
    A mixed-precision model (not a language model) is exported with its weights in its compute dtype
    (`half_weights.rounded_once`: the same outputs; the file records `dtype_policy` and `weights_dtype`). Written to a
    temporary directory and renamed, so a failed export never leaves a half version.
    `extra_files`: more JSON files for `assets.extra/` (name -> content), in the version before it appears.
    """
    with open(spiece_model, "rb") as f:
        proto = f.read()
    text = TextSettings(tokenization.file_sha256(spiece_model), bool(options.get("uncased", False)),
                        bool(options.get("keep_accents", False)))
    settings = {k: v for k, v in options.items() if k not in ("uncased", "keep_accents")}
    # a mixed-precision model's weights stored in its compute dtype; not a language model's: its generation loop
    # reads the LM head's bias unrounded (heads.LMHead.transposed_logits, outside Keras's autocast)
    served = model if task == "lm" else half_weights.rounded_once(model)
    module = serving_module(served, task, proto, max_seq_length, text, **settings)
    signatures = module.signatures()
    path = os.path.join(export_dir, str(int(version)))
    if tf.io.gfile.exists(path):
        raise FileExistsError(f"{path} exists: choose another --version (TF Serving loads the highest)")
    tmp = os.path.join(export_dir, f".tmp-{int(version)}")
    if tf.io.gfile.exists(tmp):
        tf.io.gfile.rmtree(tmp)
    # no gradients saved: serving never differentiates, and the layers' written-out gradients (layers/activations.py,
    # attention.rel_shift) would otherwise be traced and stored with every signature
    tf.saved_model.save(module, tmp, signatures=signatures,
                        options=tf.saved_model.SaveOptions(experimental_custom_gradients=False))
    if warmup_inputs:
        write_warmup_requests(tmp, warmup_inputs)
    tf.io.gfile.makedirs(os.path.join(tmp, "assets.extra"))
    EXPORT_FILE.write(os.path.join(tmp, "assets.extra", EXPORT_FILE_NAME), {
        "task": task, "max_seq_length": max_seq_length, "config": model.config.to_dict(),
        "dtype_policy": model.dtype_policy.name, "weights_dtype": served.dtype_policy.variable_dtype,
        "text": dataclasses.asdict(text),
        **{k: (list(v) if isinstance(v, (list, tuple)) else v.to_dict() if hasattr(v, "to_dict") else v)
           for k, v in settings.items()}})
    for name, content in (extra_files or {}).items():
        files.write_json_atomic(os.path.join(tmp, "assets.extra", name), content)
    tf.io.gfile.rename(tmp, path)
    return path
