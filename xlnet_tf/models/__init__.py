"""Task models: `XLNetBackbone` + head + loss, each a Keras model that `compile`/`fit`/`evaluate`/`predict`
(and, for text classification, raw text through an `XLNetPreprocessor`) drive as any Keras model (`task.Task`).
One module per family: `pretrainer` (PLM / MLM), `sequence` (classification, regression, multiple choice),
`squad` (span extraction), `tagger` (token classification); `common` holds what they share. Every name is importable from `xlnet_tf.models`.

Loss names: `per_example_loss` / `per_token_loss` (unreduced), `task_loss(features, outputs, sample_weight=None)`
(the weighted mean `fit` optimizes); Keras's own `compute_loss(x, y, y_pred, sample_weight)` is `Task`'s.
"""

from __future__ import annotations

from typing import Optional

# `preprocessing` registers XLNetPreprocessor with Keras: a `.keras` classifier with its preprocessor then loads
# after `import xlnet_tf.models` alone (what registers the task models themselves).
from xlnet_tf.text import preprocessing, tagging_preprocessor  # noqa: F401  (register the preprocessors for .keras loading)
from xlnet_tf.config import XLNetConfig
from xlnet_tf.errors import UserError
from xlnet_tf.heads import DOCUMENT_SUMMARIES  # noqa: F401  (a models name too)
from xlnet_tf.models.common import (  # noqa: F401
    FineTuningModel, check_document_preprocessor, finetuning_config, masked_mean, token_ids)
from xlnet_tf.models.pretrainer import XLNetPretrainer
from xlnet_tf.models.sequence import XLNetClassifier, XLNetMultipleChoice
from xlnet_tf.models.squad import XLNetForSquad
from xlnet_tf.models.tagger import XLNetTagger

# The one task -> model mapping of a run's export_info.json: the exporter (run/export_savedmodel.py) and
# `Task.from_checkpoint` (through each class's `task_kwargs_from_export_info`) build the same model from it.
TASK_MODELS = {"classifier": XLNetClassifier, "regression": XLNetClassifier, "embedding": XLNetClassifier,
               "race": XLNetMultipleChoice, "squad": XLNetForSquad, "tagging": XLNetTagger}


def model_from_export_info(config: XLNetConfig, info: dict, task: Optional[str] = None, **overrides):
    """The task model `info` (an export_info.json's fields) describes, for `task` (default: the recorded one;
    "embedding" = the classifier's backbone and summary, any head), with `overrides` on top of its kwargs."""
    task = task or info.get("task")
    if task not in TASK_MODELS:
        raise UserError(f"task is {task!r}; one of {sorted(TASK_MODELS)}")
    cls = TASK_MODELS[task]
    kwargs = cls.task_kwargs_from_export_info(info)
    if cls is XLNetClassifier:
        kwargs["regression"] = task == "regression"
    return cls(config, **{**kwargs, **overrides})


__all__ = ["DOCUMENT_SUMMARIES", "FineTuningModel", "TASK_MODELS", "XLNetClassifier", "XLNetForSquad",
           "XLNetMultipleChoice", "XLNetPretrainer", "XLNetTagger", "check_document_preprocessor", "finetuning_config",
           "masked_mean", "model_from_export_info", "token_ids"]
