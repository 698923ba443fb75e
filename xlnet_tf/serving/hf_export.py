"""A model of ours as a Hugging Face checkpoint: `config.json` + `model.safetensors` that transformers' XLNet classes
load and that compute what ours computes; the inverse of the import (`checkpoints.hf_state_to_original`,
`XLNetConfig.from_hf_dict`), so import(export(model)) is the model again.

The class follows the model: `XLNetPretrainer` -> `XLNetLMHeadModel` (the LM output tied to the word embedding, as
both have it), `XLNetClassifier` -> `XLNetForSequenceClassification` (regression: one label,
`problem_type="regression"`), `XLNetMultipleChoice` -> `XLNetForMultipleChoice`, `XLNetTagger` ->
`XLNetForTokenClassification`, `XLNetForSquad` -> `XLNetForQuestionAnswering`. What transformers cannot compute
is refused before anything is written (one line naming the setting): a `d_head` other than `d_model / n_head`,
a summary other than `last`/`first` (HF's `mean` averages padding too, its `attn` does not exist), long-document
classifiers, an NSP head, a SQuAD 1.1 head without the answer class (HF always has one).

Names map with the import's own table (`checkpoints.hf_to_original_name`), so the two directions cannot drift:
every variable of the model must land on an HF name, or the export is refused.
"""

from __future__ import annotations

import os
from typing import Any, Dict, List, Tuple

import numpy as np

from xlnet_tf import checkpoints
from xlnet_tf.checkpoints import BIAS_NAMES, T
from xlnet_tf.errors import UserError

CONFIG_NAME = "config.json"
WEIGHTS_NAME = "model.safetensors"
_SCORER = ("logits/dense/kernel", "logits/dense/bias")  # XLNetMultipleChoice's scorer: HF's logits_proj


def _hf_names(n_layer: int) -> List[str]:
    """Every parameter name an HF XLNet model of `n_layer` layers may hold (the base model and each head)."""
    names = ["transformer.word_embedding.weight", "transformer.mask_emb", "lm_loss.bias",
             "sequence_summary.summary.weight", "sequence_summary.summary.bias", "logits_proj.weight",
             "logits_proj.bias", "classifier.weight", "classifier.bias", "start_logits.dense.weight",
             "start_logits.dense.bias", "answer_class.dense_1.weight"]
    names += [f"{head}.{part}.{kind}" for head, parts in (("end_logits", ("dense_0", "dense_1", "LayerNorm")),
                                                          ("answer_class", ("dense_0",)))
              for part in parts for kind in ("weight", "bias")]
    for i in range(n_layer):
        names += [f"transformer.layer.{i}.rel_attn.{n}" for n in ("q", "k", "v", "o", "r", "r_w_bias", "r_r_bias",
                                                                   "r_s_bias", "seg_embed", "layer_norm.weight",
                                                                   "layer_norm.bias")]
        names += [f"transformer.layer.{i}.ff.{n}" for n in ("layer_norm.weight", "layer_norm.bias", "layer_1.weight",
                                                             "layer_1.bias", "layer_2.weight", "layer_2.bias")]
    return names


def _original_arrays(model) -> Dict[str, np.ndarray]:
    """The model's variables under original-layout names, in HF's shape of the layout: the shared relative biases
    (untie_r=False) copied to every layer, a classifier's head under the import's name for HF heads."""
    config = model.config
    arrays = {name: np.asarray(v.numpy()) for name, v in checkpoints.model_variables(model).items()}
    if not config.untie_r:
        for name in BIAS_NAMES:
            shared = arrays.pop(f"{T}/{name}")
            arrays.update({f"{T}/layer_{i}/rel_attn/{name}": shared for i in range(config.n_layer)})
    renamed = {}
    for name, value in arrays.items():
        parts = name.split("/")
        if len(parts) > 2 and parts[0] == "model" and parts[1].startswith(("classification_", "regression_")):
            name = "/".join(["model", "classification_hf"] + parts[2:])
        renamed[name] = value
    return renamed


def hf_state(model) -> Dict[str, np.ndarray]:
    """`model`'s weights as an HF state dict (torch layout: Linear weights [out, in]); UserError naming a variable
    no HF name holds."""
    arrays = _original_arrays(model)
    scorer = {k: arrays.pop(k) for k in _SCORER if k in arrays}
    state = {}
    for hf_name in _hf_names(model.config.n_layer):
        original = checkpoints.hf_to_original_name(hf_name)
        if original in arrays:
            value = arrays.pop(original)
            state[hf_name] = value.T if original.endswith("/kernel") and value.ndim == 2 else value
    if scorer:
        state["logits_proj.weight"], state["logits_proj.bias"] = scorer[_SCORER[0]].T, scorer[_SCORER[1]]
    if arrays:
        raise UserError(f"{type(model).__name__}: {sorted(arrays)[:3]} have no Hugging Face counterpart; export "
                        "a model without them")
    if "lm_loss.bias" in state:  # tied: a copy, so the file holds every tensor the class declares
        state["lm_loss.weight"] = state["transformer.word_embedding.weight"]
    return {k: np.ascontiguousarray(v, dtype=np.float32) for k, v in state.items()}


def hf_config(model, labels=None) -> Dict[str, Any]:
    """The `config.json` of `model` as transformers' class for it reads it; UserError for what HF cannot compute."""
    from xlnet_tf.models import XLNetClassifier, XLNetForSquad, XLNetMultipleChoice, XLNetPretrainer, XLNetTagger

    c = model.config
    if c.d_head * c.n_head != c.d_model:
        raise UserError(f"d_head={c.d_head}: Hugging Face's XLNet has d_head = d_model / n_head = "
                        f"{c.d_model / c.n_head:g}; it cannot hold this model")
    values = {"model_type": "xlnet", **c.to_hf_dict(), "d_head": c.d_head, "dropout": c.dropout,
              "initializer_range": c.initializer_range, "tie_word_embeddings": True}
    if isinstance(model, XLNetPretrainer):
        if model.nsp:
            raise UserError("the model has an NSP head: Hugging Face's XLNetLMHeadModel has none")
        return {**values, "architectures": ["XLNetLMHeadModel"]}
    if isinstance(model, (XLNetClassifier, XLNetMultipleChoice)):
        if model.summary_type not in ("last", "first"):
            raise UserError(f"summary_type={model.summary_type!r}: Hugging Face's sequence summary computes "
                            "'last' and 'first' as ours (its 'mean' averages padding too, it has no 'attn')")
        values.update(summary_type=model.summary_type, summary_use_proj=bool(model.use_proj),
                      summary_activation="tanh" if model.use_proj else None, summary_last_dropout=0.1)
        if isinstance(model, XLNetMultipleChoice):
            return {**values, "architectures": ["XLNetForMultipleChoice"]}
        if getattr(model, "mem_len", None):
            raise UserError("a long-document classifier (max_segments > 1) reads several segments with memories; "
                            "Hugging Face's XLNetForSequenceClassification reads one")
        values = {**values, "architectures": ["XLNetForSequenceClassification"], "num_labels": model.num_labels}
        if model.regression:
            return {**values, "problem_type": "regression"}
        return {**values, **_label_maps(labels, model.num_labels)}
    if isinstance(model, XLNetTagger):
        return {**values, "architectures": ["XLNetForTokenClassification"], "num_labels": model.num_labels,
                **_label_maps(labels or getattr(model, "labels", None), model.num_labels)}
    if isinstance(model, XLNetForSquad):
        if not model.use_answer_class:
            raise UserError("a SQuAD 1.1 model has no answer-class head; Hugging Face's XLNetForQuestionAnswering "
                            "always has one (fine-tune with --version_2_with_negative to export it)")
        return {**values, "architectures": ["XLNetForQuestionAnswering"], "start_n_top": model.start_n_top,
                "end_n_top": model.end_n_top}
    raise UserError(f"{type(model).__name__}: no Hugging Face XLNet class holds this model")


def _label_maps(labels, num_labels: int) -> Dict[str, Any]:
    if not labels:
        return {}
    labels = list(labels)
    if len(labels) != num_labels:
        raise UserError(f"{len(labels)} label names for num_labels={num_labels}")
    return {"id2label": {str(i): name for i, name in enumerate(labels)},
            "label2id": {name: i for i, name in enumerate(labels)}}


def prepare(model, labels=None) -> Tuple[Dict[str, Any], Dict[str, np.ndarray]]:
    """`(config.json values, state dict)` of `model`, every refusal made; writes nothing."""
    return hf_config(model, labels), hf_state(model)


def write(output_dir: str, config: Dict[str, Any], state: Dict[str, np.ndarray], spiece_model=None) -> str:
    """Writes `config.json`, `model.safetensors` (and `spiece.model`, the tokenizer's file, when given) into the
    local folder `output_dir`, filled beside it and swapped in (a failed write leaves it as it was)."""
    import shutil

    from safetensors.numpy import save_file

    from xlnet_tf import files

    with files.directory_written_aside(output_dir) as tmp:
        files.write_json_atomic(os.path.join(tmp, CONFIG_NAME), config)
        save_file(state, os.path.join(tmp, WEIGHTS_NAME), metadata={"format": "pt"})
        if spiece_model:
            shutil.copyfile(spiece_model, os.path.join(tmp, "spiece.model"))
    return output_dir
