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
from typing import Callable, Dict, Iterable, Optional

import numpy as np
import tensorflow as tf

from xlnet_tf.config import XLNetConfig

T = "model/transformer"
BIAS_NAMES = ("r_w_bias", "r_r_bias", "r_s_bias")
# Optimizer slots and bookkeeping that a weights loader skips.
_SKIP = re.compile(r"(^global_step$|/adam_[mv]$|/Adam(_1)?$|^beta[12]_power|/Momentum$|"
                   r"/ExponentialMovingAverage$|^_CHECKPOINTABLE_OBJECT_GRAPH$)")


class CheckpointMismatchError(ValueError):
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


def assign_arrays(model, arrays: Dict[str, np.ndarray], source: str, allow_missing: Iterable[str] = (),
                  ignore_unexpected: bool = False) -> Dict[str, list]:
    """Assigns original-layout-named arrays to the model, checking names and shapes.

    Raises `CheckpointMismatchError` listing every missing name (not in `allow_missing`, a list of
    regexes), every unexpected name (unless `ignore_unexpected`) and every shape mismatch.
    Returns `{"loaded": [...], "missing": [...], "unexpected": [...]}`.
    """
    config = model.config
    arrays = _unstack_per_layer({k: v for k, v in arrays.items() if not _SKIP.search(k)}, config)
    targets = model_variables(model)
    allowed = [re.compile(p) for p in allow_missing]
    missing = sorted(n for n in targets if n not in arrays and not any(p.search(n) for p in allowed))
    unexpected = sorted(n for n in arrays if n not in targets)
    bad_shapes = [f"{n}: checkpoint {list(arrays[n].shape)} vs model {list(v.shape)}"
                  for n, v in targets.items() if n in arrays and tuple(arrays[n].shape) != tuple(v.shape)]
    problems = []
    if missing:
        problems.append(f"missing from the checkpoint ({len(missing)}): {missing}")
    if unexpected and not ignore_unexpected:
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
    return {"loaded": loaded, "missing": missing, "unexpected": unexpected}


# ---------------------------------------------------------------------------------- original TF1 release
def read_tf_checkpoint(path: str) -> Dict[str, np.ndarray]:
    """All variables of a TF checkpoint (`xlnet_model.ckpt` prefix or a directory) as numpy arrays."""
    prefix = tf.train.latest_checkpoint(path) if os.path.isdir(path) else path
    if prefix is None or not tf.io.gfile.exists(prefix + ".index"):
        raise FileNotFoundError(f"No TF checkpoint at {path} (expected {path}.index or a directory "
                                f"with a 'checkpoint' file)")
    reader = tf.train.load_checkpoint(prefix)
    return {name: reader.get_tensor(name) for name in reader.get_variable_to_shape_map()
            if not _SKIP.search(name)}


def load_original_checkpoint(model, path: str, allow_missing: Iterable[str] = ()):
    """Loads the original release's `xlnet_model.ckpt` into a backbone or task model.

    Heads absent from the checkpoint are an error unless matched by `allow_missing` (regexes); task
    models' `init_allow_missing` lists their fresh heads.
    """
    return assign_arrays(model, read_tf_checkpoint(path), path, allow_missing)


# ---------------------------------------------------------------------------------------- Hugging Face
_HF_LAYER = re.compile(r"^layer\.(\d+)\.(rel_attn|ff)\.(.+)$")


def hf_to_original_name(name: str) -> Optional[str]:
    """Maps a Hugging Face XLNet parameter name to the original layout (None = not a weight we keep)."""
    name = name[len("transformer."):] if name.startswith("transformer.") else name
    fixed = {"word_embedding.weight": f"{T}/word_embedding/lookup_table",
             "mask_emb": f"{T}/mask_emb/mask_emb", "lm_loss.bias": "model/lm_loss/bias",
             "sequence_summary.summary.weight": "model/sequnece_summary/summary/kernel",
             "sequence_summary.summary.bias": "model/sequnece_summary/summary/bias"}
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
    """Hugging Face state dict (numpy) -> original-layout arrays (Linear weights transposed)."""
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
    return load_file(path)


def load_hf_weights(model, state_or_path, allow_missing: Iterable[str] = ()):
    """Loads Hugging Face XLNet weights (a safetensors path or a name -> array dict)."""
    source = state_or_path if isinstance(state_or_path, str) else "Hugging Face state dict"
    state = read_safetensors(state_or_path) if isinstance(state_or_path, str) else state_or_path
    return assign_arrays(model, hf_state_to_original(state, model.config), source, allow_missing)


def config_from_hf_json(path: str, **overrides) -> XLNetConfig:
    with open(path, encoding="utf-8") as f:
        return XLNetConfig.from_hf_dict(json.load(f), **overrides)


# ----------------------------------------------------------------------------------------- dispatcher
def detect_format(path: str) -> str:
    """`hf` (safetensors), `original` (TF1 names) or `ours` (an object-based TF2 checkpoint)."""
    if path.endswith(".safetensors") or os.path.exists(os.path.join(path, "model.safetensors")):
        return "hf"
    prefix = tf.train.latest_checkpoint(path) if os.path.isdir(path) else path
    if prefix is None or not tf.io.gfile.exists(prefix + ".index"):
        raise FileNotFoundError(f"--init_checkpoint {path}: no checkpoint found (expected a TF checkpoint "
                                f"prefix with a .index file, a directory with a 'checkpoint' file, or a "
                                f".safetensors file)")
    names = tf.train.load_checkpoint(prefix).get_variable_to_shape_map()
    if f"{T}/word_embedding/lookup_table" in names:
        return "original"
    if "_CHECKPOINTABLE_OBJECT_GRAPH" in names:
        return "ours"
    raise CheckpointMismatchError(f"{path}: not an XLNet checkpoint (no {T}/word_embedding/lookup_table "
                                  f"and no object graph)")


def save_original_checkpoint(model, prefix: str) -> str:
    """Writes the model's weights as a name-keyed TF checkpoint in the original release's layout.

    This is our `--init_checkpoint` interchange format (what `run/convert_checkpoint.py` writes): readable
    by `load_init_checkpoint`, by `tf.train.load_checkpoint`, and by the original TF1 code (stacked
    per-layer tensors are re-stacked). Written to a temporary prefix, then renamed.
    """
    config = model.config
    arrays = {name: np.asarray(v.numpy()) for name, v in model_variables(model).items()}
    stacked = ["seg_embed"] + (list(BIAS_NAMES) if config.untie_r else [])
    for name in stacked:
        parts = [arrays.pop(f"{T}/layer_{i}/rel_attn/{name}") for i in range(config.n_layer)]
        arrays[f"{T}/{name}"] = np.stack(parts)
    names = sorted(arrays)
    directory = os.path.dirname(prefix)
    if directory:
        tf.io.gfile.makedirs(directory)
    tmp = prefix + ".tmp"
    tf.raw_ops.SaveV2(prefix=tmp, tensor_names=names, shape_and_slices=[""] * len(names),
                      tensors=[tf.constant(arrays[n]) for n in names])
    for suffix in _checkpoint_suffixes(tmp):
        tf.io.gfile.rename(tmp + suffix, prefix + suffix, overwrite=True)
    if directory:  # a 'checkpoint' file so the directory itself works as --init_checkpoint
        tf.train.update_checkpoint_state(directory, prefix, all_model_checkpoint_paths=[prefix])
    return prefix


def _checkpoint_suffixes(prefix: str):
    return [f[len(prefix):] for f in tf.io.gfile.glob(prefix + ".*")]


def load_init_checkpoint(model, path: str, allow_missing: Iterable[str] = ()) -> Dict[str, list]:
    """Initializes `model` (backbone or task model) from any supported checkpoint format.

    - `hf`: Hugging Face `model.safetensors` (file or directory);
    - `original`: a name-keyed checkpoint in the original release's layout (the released
      `xlnet_model.ckpt`, and what our converter and `save_original_checkpoint` write);
    - `ours`: an object-based training checkpoint of our runners; its backbone is restored.
    Names and shapes are checked; heads absent from the checkpoint must match `allow_missing` (regexes).
    """
    fmt = detect_format(path)
    if fmt == "hf":
        return load_hf_weights(model, path, allow_missing)
    if fmt == "original":
        return load_original_checkpoint(model, path, allow_missing)
    prefix = tf.train.latest_checkpoint(path) if os.path.isdir(path) else path
    backbone = model if hasattr(model, "xl_layers") else model.backbone
    status = tf.train.Checkpoint(model=tf.train.Checkpoint(backbone=backbone)).read(prefix)
    try:
        status.assert_existing_objects_matched()
    except AssertionError as e:
        raise CheckpointMismatchError(f"{path}: the backbone does not fit this checkpoint: {e}") from e
    status.expect_partial()
    return {"loaded": sorted(backbone_variables(backbone)), "missing": [], "unexpected": []}
