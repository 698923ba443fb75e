"""One harness for every task family (as KerasHub's task tests): build a tiny model, fit a step, predict, round-trip
a `.keras` file, export a SavedModel and reload it, each compared with the model it came from.

A family is a `TaskFamily`: how to build its model, a batch of features and labels, the export task and options,
and which outputs of `predict` the export's `from_ids` signature must reproduce (same inputs, no padding, so that
the export's left trim of all-padding columns changes nothing)."""

from __future__ import annotations

import dataclasses
from typing import Callable, Dict, Tuple

import numpy as np

from tests import data_fixtures

BATCH, LENGTH = 4, 12


def tiny_config():
    from xlnet_tf.config import XLNetConfig

    return XLNetConfig(n_token=data_fixtures.TINY_VOCAB, n_layer=1, d_model=16, n_head=2, d_head=8, d_inner=32,
                       dropout=0.0, dropatt=0.0)


def id_features(rng, shape=(BATCH, LENGTH)) -> Dict[str, np.ndarray]:
    """Token ids of real tokens (no padding) in one segment, ending in <sep> <cls> as the builders pack them."""
    from xlnet_tf.text.layout import CLS_ID, SEP_ID

    ids = rng.randint(10, data_fixtures.TINY_VOCAB, shape).astype(np.int32)
    ids[..., -2], ids[..., -1] = SEP_ID, CLS_ID
    segments = np.zeros(shape, np.int32)
    segments[..., -1] = 2  # <cls>'s own segment
    return {"input_ids": ids, "segment_ids": segments, "attention_mask": np.ones(shape, np.float32)}


@dataclasses.dataclass(frozen=True)
class TaskFamily:
    name: str
    build: Callable[..., object]  # (config, dtype="float32": a Keras dtype policy) -> model
    data: Callable[[np.random.RandomState], Tuple[dict, object]]  # rng -> (features, labels)
    export_task: str
    compared: Tuple[str, ...]  # outputs of predict that from_ids returns under the same name
    export_options: Dict[str, object] = dataclasses.field(default_factory=dict)
    id_inputs: Tuple[str, ...] = ("input_ids", "segment_ids", "attention_mask")


def _classifier(config, dtype="float32"):
    from xlnet_tf.models import XLNetClassifier

    return XLNetClassifier(config, num_labels=3, dtype=dtype)


def _regression(config, dtype="float32"):
    from xlnet_tf.models import XLNetClassifier

    return XLNetClassifier(config, regression=True, dtype=dtype)


def _multiple_choice(config, dtype="float32"):
    from xlnet_tf.models import XLNetMultipleChoice

    return XLNetMultipleChoice(config, num_choices=4, dtype=dtype)


def _squad(config, dtype="float32"):
    from xlnet_tf.models import XLNetForSquad

    return XLNetForSquad(config, start_n_top=2, end_n_top=2, dtype=dtype)


def _tagger(config, dtype="float32"):
    from xlnet_tf.models import XLNetTagger

    return XLNetTagger(config, num_labels=3, labels=["O", "B-X", "I-X"], dtype=dtype)


def _squad_data(rng):
    x = id_features(rng)
    x["p_mask"] = np.zeros((BATCH, LENGTH), np.float32)
    x["p_mask"][:, -2] = 1.0  # <sep> is no answer
    x["cls_index"] = np.full([BATCH], LENGTH - 1, np.int32)
    y = {"start_positions": rng.randint(0, LENGTH - 2, BATCH), "end_positions": rng.randint(0, LENGTH - 2, BATCH),
         "is_impossible": rng.randint(0, 2, BATCH).astype(np.float32)}
    return x, y


FAMILIES = (
    TaskFamily("classifier", _classifier, lambda rng: (id_features(rng), rng.randint(0, 3, BATCH)),
               "classifier", ("logits",), {"labels": ["a", "b", "c"]}),
    TaskFamily("regression", _regression, lambda rng: (id_features(rng), rng.rand(BATCH).astype(np.float32)),
               "regression", ("score",)),
    TaskFamily("multiple_choice", _multiple_choice,
               lambda rng: (id_features(rng, (BATCH, 4, LENGTH)), rng.randint(0, 4, BATCH)),
               "race", ("logits",)),
    TaskFamily("squad", _squad, _squad_data, "squad",
               ("start_top_log_probs", "start_top_index", "end_top_log_probs", "end_top_index", "cls_logits"),
               id_inputs=("input_ids", "segment_ids", "attention_mask", "p_mask", "cls_index")),
    TaskFamily("tagger", _tagger, lambda rng: (id_features(rng), rng.randint(0, 3, (BATCH, LENGTH))),
               "tagging", ("logits",), {"labels": ["O", "B-X", "I-X"], "doc_stride": 4}),
)
