"""Load weights from the original TF1 release, Hugging Face safetensors, or our own checkpoints.

Every format is translated to the original release's variable names (`../reference/original_xlnet.md`
§4.3), the one vocabulary of this module. Per-layer tensors that the original stacks over layers
(`r_*_bias` with `untie_r`, `seg_embed`) are split into virtual per-layer names
`model/transformer/layer_{i}/rel_attn/{r_w_bias,r_r_bias,r_s_bias,seg_embed}`.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping
from typing import Dict, Optional

import numpy as np
import tensorflow as tf

from xlnet_tf.config import XLNetConfig
from xlnet_tf.errors import UserError

T = "model/transformer"
BIAS_NAMES = ("r_w_bias", "r_r_bias", "r_s_bias")
# Optimizer slots and bookkeeping that a weights loader skips.
_SKIP = re.compile(r"(^global_step$|/adam_[mv]$|/Adam(_1)?$|^beta[12]_power|/Momentum$|"
                   r"/ExponentialMovingAverage$|^_CHECKPOINTABLE_OBJECT_GRAPH$)")


# Head scopes of the original fine-tuning and pretraining code (outside `model/transformer/`).
HEAD_PATTERNS = tuple(re.compile(p) for p in (
    r"^model/lm_loss/bias$",
    # our pretraining's optional next-sentence head (XLNetPretrainer(nsp=True); the release never had one)
    r"^model/nsp/(summary/(kernel|bias)|summary_bias|abs_attn/.+|output/(kernel|bias))$",
    r"^model/sequnece_summary/(summary/(kernel|bias)|summary_bias|abs_attn/.+)$",
    r"^model/(classification|regression)_[^/]+/logit/(kernel|bias)$",
    r"^start_logits/dense/(kernel|bias)$",
    r"^end_logits/(dense_0|dense_1)/(kernel|bias)$", r"^end_logits/LayerNorm/(gamma|beta)$",
    r"^answer_class/dense_0/(kernel|bias)$", r"^answer_class/dense_1/kernel$",
    r"^logits/dense/(kernel|bias)$",
    r"^model/tagging/logit/(kernel|bias)$"))  # our token classification head (the release has none)


def is_head_variable(name: str) -> bool:
    return any(p.search(name) for p in HEAD_PATTERNS)


def head_scopes(names) -> list:
    """The head scopes among original-layout variable `names`, sorted: `lm_loss` (the pretrained LM head's
    bias; its output matrix is the word embedding), `nsp`, `sequnece_summary`, `classification_<task>`,
    `start_logits`, ... (the scope under `model/`, else the first name component)."""
    scopes = set()
    for name in names:
        if is_head_variable(name):
            parts = name.split("/")
            scopes.add(parts[1] if parts[0] == "model" else parts[0])
    return sorted(scopes)


class CheckpointMismatchError(UserError):
    """A checkpoint does not fit the model: names missing or unexpected, or shapes differ."""


# ------------------------------------------------------------------------------------------- our side
def backbone_variables(backbone, prefix: str = T) -> Dict[str, tf.Variable]:
    """Original-layout name -> variable for an `XLNetBackbone`."""
    c = backbone.config
    out = {f"{prefix}/word_embedding/lookup_table": backbone.word_embedding,
           f"{prefix}/mask_emb/mask_emb": backbone.mask_emb}
    if not c.untie_r:
        for name in BIAS_NAMES:
            out[f"{prefix}/{name}"] = getattr(backbone, name)
    for i, layer in enumerate(backbone.xl_layers):
        p = f"{prefix}/layer_{i}"
        attn, ff = layer.rel_attn, layer.ff
        for name in ("q", "k", "v", "o", "r"):
            out[f"{p}/rel_attn/{name}/kernel"] = getattr(attn, name)
        names = ("seg_embed",) + (BIAS_NAMES if c.untie_r else ())
        for name in names:
            out[f"{p}/rel_attn/{name}"] = getattr(attn, name)
        out[f"{p}/rel_attn/LayerNorm/gamma"] = attn.layer_norm.gamma
        out[f"{p}/rel_attn/LayerNorm/beta"] = attn.layer_norm.beta
        for dense in ("layer_1", "layer_2"):
            out[f"{p}/ff/{dense}/kernel"] = getattr(ff, dense).kernel
            out[f"{p}/ff/{dense}/bias"] = getattr(ff, dense).bias
        out[f"{p}/ff/LayerNorm/gamma"] = ff.layer_norm.gamma
        out[f"{p}/ff/LayerNorm/beta"] = ff.layer_norm.beta
    return out


def model_variables(model) -> Dict[str, tf.Variable]:
    """Original-layout name -> variable for a backbone or any task model with `.backbone`.

    Task models add their heads through an `original_variables()` method (name -> variable).
    """
    if hasattr(model, "xl_layers"):
        return backbone_variables(model)
    out = backbone_variables(model.backbone)
    if hasattr(model, "original_variables"):
        out.update(model.original_variables())
    return out


# ------------------------------------------------------------------------------------------ the loader
def _unstack_per_layer(arrays: Dict[str, np.ndarray], config: XLNetConfig) -> Dict[str, np.ndarray]:
    """Splits the original's stacked `[n_layer, ...]` tensors into virtual per-layer names."""
    out = dict(arrays)
    stacked = ["seg_embed"] + (list(BIAS_NAMES) if config.untie_r else [])
    for name in stacked:
        key = f"{T}/{name}"
        if key not in out:
            continue
        value = out.pop(key)
        if value.ndim < 1 or value.shape[0] != config.n_layer:
            raise CheckpointMismatchError(
                f"{key} has shape {list(value.shape)}, expected a leading n_layer={config.n_layer} axis "
                f"(untie_r={config.untie_r}); does the config match the checkpoint?")
        for i in range(config.n_layer):
            out[f"{T}/layer_{i}/rel_attn/{name}"] = value[i]
    return out


def assign_arrays(model, arrays: Dict[str, np.ndarray], source: str, require_heads: bool = False,
                  ignore_unexpected: bool = False) -> Dict[str, list]:
    """Assigns original-layout-named arrays to a backbone or task model, checking names and shapes.

    Every backbone variable must be present; the model's head variables too when `require_heads`
    (otherwise absent heads keep their fresh initialization, as when fine-tuning from a pretrained
    checkpoint). Names that are neither the model's nor a known head scope are unexpected (an error
    unless `ignore_unexpected`); known head scopes the model lacks (e.g. `lm_loss/bias` when
    fine-tuning) are skipped. Raises `CheckpointMismatchError` listing every problem at once.
    Returns `{"loaded": [...], "missing_heads": [...], "skipped": [...]}`.
    """
    config = model.config
    arrays = _unstack_per_layer({k: v for k, v in arrays.items() if not _SKIP.search(k)}, config)
    targets = model_variables(model)
    backbone = model if hasattr(model, "xl_layers") else model.backbone
    backbone_names = set(backbone_variables(backbone))
    absent = sorted(n for n in targets if n not in arrays)
    missing = [n for n in absent if require_heads or n in backbone_names]
    extra = sorted(n for n in arrays if n not in targets)
    unexpected = [] if ignore_unexpected else [n for n in extra if not is_head_variable(n)]
    bad_shapes = [f"{n}: checkpoint {list(arrays[n].shape)} vs model {list(v.shape)}"
                  for n, v in targets.items() if n in arrays and tuple(arrays[n].shape) != tuple(v.shape)]
    problems = []
    if missing:
        problems.append(f"missing from the checkpoint ({len(missing)}): {missing}")
    if unexpected:
        problems.append(f"unexpected in the checkpoint ({len(unexpected)}): {unexpected}")
    if bad_shapes:
        problems.append(f"shape mismatches ({len(bad_shapes)}): {bad_shapes}")
    if problems:
        raise CheckpointMismatchError(f"{source} does not fit the model "
                                      f"(n_layer={config.n_layer}, d_model={config.d_model}, "
                                      f"untie_r={config.untie_r}): " + "; ".join(problems))
    loaded = []
    for name, variable in targets.items():
        if name in arrays:
            variable.assign(arrays[name].astype(variable.dtype))
            loaded.append(name)
    return {"loaded": loaded, "missing_heads": [n for n in absent if n not in missing], "skipped": extra}


# ---------------------------------------------------------------------------------- original TF1 release
def read_tf_checkpoint(path: str) -> Dict[str, np.ndarray]:
    """All variables of a TF checkpoint (`xlnet_model.ckpt` prefix or a directory) as numpy arrays."""
    prefix = tf.train.latest_checkpoint(path) if os.path.isdir(path) else path
    if prefix is None or not tf.io.gfile.exists(prefix + ".index"):
        raise FileNotFoundError(f"No TF checkpoint at {path} (expected {path}.index or a directory "
                                f"with a 'checkpoint' file)")
    reader = open_tf_checkpoint(prefix)
    return {name: reader.get_tensor(name) for name in reader.get_variable_to_shape_map()
            if not _SKIP.search(name)}


def load_original_checkpoint(model, path: str, require_heads: bool = False):
    """Loads the original release's `xlnet_model.ckpt` (or our converted checkpoints) into a model."""
    return assign_arrays(model, read_tf_checkpoint(path), path, require_heads)


def variable_names(path: str) -> set:
    """The original-layout names of the weights a checkpoint holds, in any format `load_init_checkpoint` reads
    (no tensor is read: cheap for a large checkpoint). Optimizer slots and bookkeeping are left out."""
    fmt = detect_format(path)
    if fmt == "hf":
        from safetensors import safe_open

        file = os.path.join(path, "model.safetensors") if os.path.isdir(path) else path
        try:
            with safe_open(file, framework="np") as f:
                keys = list(f.keys())
        except Exception as e:  # safetensors' SafetensorError, or an OSError
            raise CheckpointMismatchError(f"{file} is not a readable safetensors file ({e}); expected a Hugging "
                                          "Face model.safetensors") from None
        return {n for n in map(hf_to_original_name, keys) if n is not None}
    prefix = tf.train.latest_checkpoint(path) if os.path.isdir(path) else path
    keys = open_tf_checkpoint(prefix).get_variable_to_shape_map()
    if fmt == "original":
        return {k for k in keys if not _SKIP.search(k)}
    return {n for n in map(_unescape, keys) if n is not None}


# ---------------------------------------------------------------------------------------- Hugging Face
_HF_LAYER = re.compile(r"^layer\.(\d+)\.(rel_attn|ff)\.(.+)$")


def hf_to_original_name(name: str) -> Optional[str]:
    """Maps a Hugging Face XLNet parameter name to the original layout (None = not a weight we keep)."""
    name = name[len("transformer."):] if name.startswith("transformer.") else name
    fixed = {"word_embedding.weight": f"{T}/word_embedding/lookup_table",
             "mask_emb": f"{T}/mask_emb/mask_emb", "lm_loss.bias": "model/lm_loss/bias",
             "sequence_summary.summary.weight": "model/sequnece_summary/summary/kernel",
             "sequence_summary.summary.bias": "model/sequnece_summary/summary/bias",
             # XLNetForSequenceClassification's projection, under a task name of its own.
             "logits_proj.weight": "model/classification_hf/logit/kernel",
             "logits_proj.bias": "model/classification_hf/logit/bias",
             # XLNetForTokenClassification's output layer
             "classifier.weight": "model/tagging/logit/kernel", "classifier.bias": "model/tagging/logit/bias"}
    qa = re.match(r"^(start_logits|end_logits|answer_class)\.(dense|dense_0|dense_1|LayerNorm)\."
                  r"(weight|bias)$", name)
    if qa:
        scope, dense, kind = qa.groups()
        if dense == "LayerNorm":
            return f"{scope}/LayerNorm/{'gamma' if kind == 'weight' else 'beta'}"
        return f"{scope}/{dense}/{'kernel' if kind == 'weight' else 'bias'}"
    if name in fixed:
        return fixed[name]
    if name == "lm_loss.weight":  # tied to the word embedding
        return None
    m = _HF_LAYER.match(name)
    if not m:
        return f"hf/{name}"
    i, block, rest = m.groups()
    p = f"{T}/layer_{i}/{block}"
    rest = rest.replace("layer_norm.weight", "LayerNorm/gamma").replace("layer_norm.bias", "LayerNorm/beta")
    if block == "rel_attn" and rest in ("q", "k", "v", "o", "r"):
        return f"{p}/{rest}/kernel"
    if block == "ff" and rest.startswith("layer_"):
        dense, kind = rest.split(".")
        return f"{p}/{dense}/{'kernel' if kind == 'weight' else 'bias'}"
    return f"{p}/{rest}"


def hf_state_to_original(state: Dict[str, np.ndarray], config: XLNetConfig) -> Dict[str, np.ndarray]:
    """Hugging Face state dict (numpy) -> original-layout arrays (Linear weights transposed). An `lm_loss.weight`
    that is not the word embedding (an untied head) is refused: this model's LM output is the embedding."""
    head = state.get("lm_loss.weight")
    embedding = state.get("transformer.word_embedding.weight", state.get("word_embedding.weight"))
    if head is not None and (embedding is None or not np.array_equal(np.asarray(head), np.asarray(embedding))):
        raise CheckpointMismatchError("lm_loss.weight differs from the word embedding (an untied LM head, "
                                      "tie_word_embeddings=false): this model ties its LM output to the word "
                                      "embedding and cannot compute what those weights compute")
    out = {}
    for name, value in state.items():
        target = hf_to_original_name(name)
        if target is None:
            continue
        value = np.asarray(value)
        if target.endswith("/kernel") and value.ndim == 2:  # torch Linear is [out, in]
            value = value.T
        out[target] = value
    if not config.untie_r:  # HF keeps per-layer copies of the shared biases; they must agree
        for name in BIAS_NAMES:
            copies = [out.pop(f"{T}/layer_{i}/rel_attn/{name}") for i in range(config.n_layer)
                      if f"{T}/layer_{i}/rel_attn/{name}" in out]
            if copies:
                if any(not np.array_equal(copies[0], c) for c in copies[1:]):
                    raise CheckpointMismatchError(
                        f"untie_r=False but the per-layer {name} tensors differ; use untie_r=True")
                out[f"{T}/{name}"] = copies[0]
    return out


def read_safetensors(path: str) -> Dict[str, np.ndarray]:
    """Tensors of a `.safetensors` file (or a directory holding `model.safetensors`) as numpy arrays."""
    from safetensors.numpy import load_file

    if os.path.isdir(path):
        path = os.path.join(path, "model.safetensors")
    if not os.path.exists(path):
        raise FileNotFoundError(f"No safetensors file at {path}")
    try:
        return load_file(path)
    except Exception as e:  # safetensors' SafetensorError, or an OSError
        raise CheckpointMismatchError(f"{path} is not a readable safetensors file ({e}); expected a Hugging Face "
                                      "model.safetensors") from None


def load_hf_weights(model, state_or_path, require_heads: bool = False):
    """Loads Hugging Face XLNet weights (a safetensors path or a name -> array dict)."""
    source = state_or_path if isinstance(state_or_path, str) else "Hugging Face state dict"
    state = read_safetensors(state_or_path) if isinstance(state_or_path, str) else state_or_path
    return assign_arrays(model, hf_state_to_original(state, model.config), source, require_heads)


def config_from_hf_json(path: str, **overrides) -> XLNetConfig:
    with open(path, encoding="utf-8") as f:
        return XLNetConfig.from_hf_dict(json.load(f), **overrides)


# ----------------------------------------------------------------------------------------- dispatcher
def open_tf_checkpoint(prefix: str):
    """`tf.train.load_checkpoint(prefix)`, with a damaged file named (TensorFlow says 'not an sstable')."""
    try:
        return tf.train.load_checkpoint(prefix)
    except (tf.errors.OpError, ValueError) as e:
        raise CheckpointMismatchError(f"{prefix}: not a readable TF checkpoint ({str(e).splitlines()[0]}); expected "
                                      f"{prefix}.index and its .data-* files as tf.train.Checkpoint or the "
                                      "original release write them") from None


def detect_format(path: str) -> str:
    """`hf` (safetensors), `original` (TF1 names) or `ours` (an object-based TF2 checkpoint)."""
    if path.endswith(".safetensors") or os.path.exists(os.path.join(path, "model.safetensors")):
        return "hf"
    prefix = tf.train.latest_checkpoint(path) if os.path.isdir(path) else path
    if prefix is None or not tf.io.gfile.exists(prefix + ".index"):
        raise FileNotFoundError(f"--init_checkpoint {path}: no checkpoint found (expected a TF checkpoint "
                                f"prefix with a .index file, a directory with a 'checkpoint' file, or a "
                                f".safetensors file)")
    names = open_tf_checkpoint(prefix).get_variable_to_shape_map()
    if f"{T}/word_embedding/lookup_table" in names:
        return "original"
    if _object_key(f"{T}/word_embedding/lookup_table") in names:
        return "ours"
    raise CheckpointMismatchError(f"{path}: not an XLNet checkpoint (no {T}/word_embedding/lookup_table "
                                  f"and no object graph)")


def stack_per_layer(arrays: Dict[str, np.ndarray], config: XLNetConfig) -> Dict[str, np.ndarray]:
    """Inverse of the per-layer split: re-stacks `seg_embed` (and `r_*_bias` with untie_r)."""
    out = dict(arrays)
    for name in ["seg_embed"] + (list(BIAS_NAMES) if config.untie_r else []):
        keys = [f"{T}/layer_{i}/rel_attn/{name}" for i in range(config.n_layer)]
        if all(k in out for k in keys):
            out[f"{T}/{name}"] = np.stack([out.pop(k) for k in keys])
    return out


def write_original_checkpoint(arrays: Dict[str, np.ndarray], prefix: str,
                              config: Optional[XLNetConfig] = None) -> str:
    """Writes name-keyed arrays as a TF checkpoint at `prefix` (temporary name, then rename).

    This is our `--init_checkpoint` interchange format (what `run/convert_checkpoint.py` writes), laid out
    like the original release, so `tf.train.load_checkpoint` and the original TF1 code can read it too.
    With `config`, the per-layer tensors are re-stacked as the original stores them.
    """
    if config is not None:
        arrays = stack_per_layer(arrays, config)
    names = sorted(arrays)
    directory = os.path.dirname(prefix)
    if directory:
        tf.io.gfile.makedirs(directory)
    tmp = prefix + ".tmp"
    tf.raw_ops.SaveV2(prefix=tmp, tensor_names=names, shape_and_slices=[""] * len(names),
                      tensors=[tf.constant(arrays[n]) for n in names])
    for suffix in _checkpoint_suffixes(tmp):
        tf.io.gfile.rename(tmp + suffix, prefix + suffix, overwrite=True)
    if directory:  # a 'checkpoint' state file, so the directory itself works as --init_checkpoint
        name = os.path.basename(prefix)
        state = os.path.join(directory, "checkpoint")
        with tf.io.gfile.GFile(state + ".tmp", "w") as f:
            f.write(f'model_checkpoint_path: "{name}"\nall_model_checkpoint_paths: "{name}"\n')
        tf.io.gfile.rename(state + ".tmp", state, overwrite=True)
    return prefix


def save_original_checkpoint(model, prefix: str) -> str:
    """Writes a backbone or task model's weights in the original layout (see `write_original_checkpoint`)."""
    arrays = {name: np.asarray(v.numpy()) for name, v in model_variables(model).items()}
    return write_original_checkpoint(arrays, prefix, model.config)


def convert_checkpoint(source: str, fmt: str, config: XLNetConfig, output_prefix: str) -> Dict[str, list]:
    """Converts the original release (`fmt="original"`) or Hugging Face safetensors (`fmt="hf"`) into
    our init-checkpoint format, validating the backbone against `config` first.

    Every backbone variable must be present with the right shape; every other name must be a known head
    scope (carried over unchanged, e.g. SQuAD or classification heads of a fine-tuned checkpoint);
    optimizer slots and `global_step` are dropped. Returns `{"backbone": [...], "heads": [...]}`.
    """
    from xlnet_tf.backbone import XLNetBackbone

    if fmt == "original":
        arrays = read_tf_checkpoint(source)
    elif fmt == "hf":
        arrays = hf_state_to_original(read_safetensors(source), config)
    else:
        raise ValueError(f"fmt must be 'original' or 'hf', got {fmt!r}")
    arrays = _unstack_per_layer(arrays, config)
    backbone = XLNetBackbone(config)
    backbone.build()
    expected = backbone_variables(backbone)
    heads = sorted(n for n in arrays if n not in expected)
    unknown = [n for n in heads if not is_head_variable(n)]
    if unknown:
        raise CheckpointMismatchError(f"{source}: unexpected variables (neither the backbone nor a known "
                                      f"head scope): {unknown}")
    assign_arrays(backbone, {n: arrays[n] for n in expected if n in arrays}, source)
    write_original_checkpoint(arrays, output_prefix, config)
    return {"backbone": sorted(expected), "heads": heads}


def _checkpoint_suffixes(prefix: str):
    return [f[len(prefix):] for f in tf.io.gfile.glob(prefix + ".*")]


def load_init_checkpoint(model, path: str, require_heads: bool = False) -> Dict[str, list]:
    """Initializes `model` (backbone or task model) from any supported checkpoint format.

    - `hf`: Hugging Face `model.safetensors` (file or directory);
    - `original`: a name-keyed checkpoint in the original release's layout (the released
      `xlnet_model.ckpt`, and what our converter and `save_original_checkpoint` write);
    - `ours`: an object-based checkpoint of our runners (`tf.train.Checkpoint(model=trackable_weights(m))`).
    Names and shapes are checked (see `assign_arrays`); heads absent from the checkpoint keep their
    initialization unless `require_heads`.
    """
    fmt = detect_format(path)
    if fmt == "hf":
        return load_hf_weights(model, path, require_heads)
    if fmt == "original":
        return load_original_checkpoint(model, path, require_heads)
    prefix = tf.train.latest_checkpoint(path) if os.path.isdir(path) else path
    return assign_arrays(model, read_object_checkpoint(prefix), path, require_heads)


# Keras 3 layers keep sub-layer lists out of TF's object tracking, so `tf.train.Checkpoint(model=keras_model)`
# would silently save only the top-level variables. Our object-based checkpoints therefore track the
# weights as one dict keyed by original-layout names: `tf.train.Checkpoint(model=trackable_weights(m))`.
def trackable_weights(model) -> Dict[str, tf.Variable]:
    """The dict to put under `model=` in a `tf.train.Checkpoint` (original-layout names -> variables)."""
    return model_variables(model)


def _object_key(name: str) -> str:
    return "model/" + name.replace(".", "..").replace("/", ".S") + "/.ATTRIBUTES/VARIABLE_VALUE"


def _unescape(key: str) -> Optional[str]:
    if not (key.startswith("model/") and key.endswith("/.ATTRIBUTES/VARIABLE_VALUE")):
        return None
    local = key[len("model/"):-len("/.ATTRIBUTES/VARIABLE_VALUE")]
    if "/" in local:  # a nested object (e.g. optimizer slot), not one of the weights
        return None
    out, i = [], 0
    while i < len(local):
        if local.startswith(".S", i):
            out.append("/")
            i += 2
        elif local.startswith("..", i):
            out.append(".")
            i += 2
        else:
            out.append(local[i])
            i += 1
    return "".join(out)


def read_object_checkpoint(prefix: str) -> Dict[str, np.ndarray]:
    """The weights of one of our object-based checkpoints, by original-layout name."""
    reader = open_tf_checkpoint(prefix)
    out = {}
    for key in reader.get_variable_to_shape_map():
        name = _unescape(key)
        if name is not None:
            out[name] = reader.get_tensor(key)
    return out


# ---- what from_checkpoint reads: the weights path and the config beside it -----------------------------
def _read_json(path: str) -> Optional[dict]:
    if not os.path.exists(path):
        return None
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def first_existing(*paths) -> Optional[str]:
    return next((p for p in paths if p and os.path.exists(p)), None)


def resolve_weights(checkpoint: str) -> str:
    """The path `checkpoints.load_init_checkpoint` reads for `checkpoint`: a release directory without a
    `checkpoint` state file (as the released zip) resolves to its `xlnet_model.ckpt` prefix."""
    if not os.path.exists(checkpoint) and not tf.io.gfile.exists(checkpoint + ".index"):
        raise FileNotFoundError(f"from_checkpoint: {checkpoint} does not exist")
    if os.path.isdir(checkpoint) and tf.train.latest_checkpoint(checkpoint) is None:
        if os.path.exists(os.path.join(checkpoint, "model.safetensors")):
            return checkpoint
        found = tf.io.gfile.glob(os.path.join(checkpoint, "*.ckpt.index"))
        if len(found) != 1:
            raise FileNotFoundError(f"from_checkpoint: {checkpoint} holds no checkpoint (expected a 'checkpoint' "
                                    f"file, one *.ckpt.index such as xlnet_model.ckpt.index, or model.safetensors); "
                                    f"found {[os.path.basename(p) for p in found]}")
        return found[0][:-len(".index")]
    return checkpoint


def resolve_config(config, directory: str, overrides: Optional[dict] = None):
    """An `XLNetConfig` from a config, its dict, a JSON path (ours, the release's or Hugging Face's), or
    None: `xlnet_config.json` / `config.json` in `directory`."""
    from xlnet_tf.config import XLNetConfig

    overrides = dict(overrides or {})
    if config is None:
        config = first_existing(os.path.join(directory, "xlnet_config.json"), os.path.join(directory, "config.json"))
        if config is None:
            raise ValueError(f"from_checkpoint: no config given and no xlnet_config.json or config.json in "
                             f"{directory}; pass config=")
    if isinstance(config, XLNetConfig):
        return config.replace(**overrides)
    if isinstance(config, Mapping):
        return XLNetConfig.from_dict(dict(config), **overrides)
    values = _read_json(config)
    if values is None:
        raise ValueError(f"from_checkpoint: config file not found: {config}")
    if "vocab_size" in values:  # Hugging Face's config.json
        return XLNetConfig.from_hf_dict(values, **overrides)
    return XLNetConfig.from_json_file(config, **overrides)
