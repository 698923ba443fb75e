"""Pairs of (Hugging Face PyTorch XLNet, our Keras XLNet) holding identical random weights."""

from __future__ import annotations

import numpy as np
import torch
import transformers

from xlnet_tf import checkpoints
from xlnet_tf.config import XLNetConfig
from xlnet_tf.models import XLNetPretrainer

TINY = dict(n_token=53, d_model=16, n_layer=2, n_head=2, d_head=8, d_inner=24)


def hf_config(config: XLNetConfig) -> transformers.XLNetConfig:
    """Our config as a Hugging Face config (ff_activation `gelu` = HF `gelu_new`, the tanh form)."""
    return transformers.XLNetConfig(**config.to_hf_dict())


def randomize_(module: torch.nn.Module, seed: int, scale: float = 0.4, tie_biases: bool = False):
    """Replaces every parameter (LayerNorm included) by N(0, scale) noise (gammas around 1).

    With `tie_biases`, every layer gets layer 0's r_w/r_r/r_s biases (the untie_r=False layout)."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in module.named_parameters():
            noise = torch.randn(p.shape, generator=gen) * scale
            p.copy_(1.0 + noise if name.endswith("layer_norm.weight") else noise)
        if tie_biases:
            layers = module.transformer.layer
            for layer in layers[1:]:
                for bias in ("r_w_bias", "r_r_bias", "r_s_bias"):
                    getattr(layer.rel_attn, bias).copy_(getattr(layers[0].rel_attn, bias))


def make_pair(seed: int = 0, **overrides):
    """Returns `(hf XLNetLMHeadModel in eval mode, our XLNetPretrainer, our config)` with equal weights."""
    config = XLNetConfig(**{**TINY, "dropout": 0.0, "dropatt": 0.0, **overrides})
    hf = transformers.XLNetLMHeadModel(hf_config(config)).eval()
    randomize_(hf, seed, tie_biases=not config.untie_r)
    ours = XLNetPretrainer(config)
    state = {k: v.detach().numpy() for k, v in hf.state_dict().items()}
    checkpoints.load_hf_weights(ours, state, require_heads=True)
    return hf, ours, config


def random_inputs(rng, batch: int, seq_len: int, n_token: int, n_pred: int = 0, left_pad=None,
                  two_segments: bool = True):
    """Random ids, segment ids (0/1 with CLS=2 last), attention mask (left padding), perm mask and
    target mapping (`n_pred` one-hot slots, the last slot of the last row padded)."""
    ids = rng.randint(0, n_token, (batch, seq_len))
    seg = np.zeros((batch, seq_len), np.int64)
    if two_segments:
        seg[:, seq_len // 2:] = 1
        seg[:, -1] = 2
    mask = np.ones((batch, seq_len), np.float32)
    for b, pad in enumerate(left_pad or []):
        mask[b, :pad] = 0
        seg[b, :pad] = 4
    out = {"input_ids": ids, "segment_ids": seg, "attention_mask": mask}
    if n_pred:
        out["perm_mask"] = (rng.rand(batch, seq_len, seq_len) > 0.5).astype(np.float32)
        mapping = np.zeros((batch, n_pred, seq_len), np.float32)
        for b in range(batch):
            for p, pos in enumerate(np.sort(rng.choice(seq_len, n_pred, replace=False))):
                mapping[b, p, pos] = 1.0
        mapping[-1, -1] = 0.0
        out["target_mapping"] = mapping
    return out


def hf_forward(hf, inputs, mems=None):
    """Runs the HF model; returns (outputs with hidden states, batch-major content of the last layer)."""
    kwargs = {"input_ids": torch.tensor(inputs["input_ids"])}
    names = {"segment_ids": "token_type_ids", "attention_mask": "attention_mask",
             "perm_mask": "perm_mask", "target_mapping": "target_mapping"}
    for ours, theirs in names.items():
        if inputs.get(ours) is not None:
            kwargs[theirs] = torch.tensor(inputs[ours])
    if mems is not None:  # ours are batch-major [B, M, D], HF's time-major [M, B, D]
        kwargs["mems"] = [torch.tensor(np.transpose(m, (1, 0, 2))) for m in mems]
    with torch.no_grad():
        out = hf(**kwargs, output_hidden_states=True, use_mems=True)
    hidden = out.hidden_states[-2 if inputs.get("target_mapping") is not None else -1]
    return out, hidden.numpy()


def max_diff(a, b) -> float:
    return float(np.max(np.abs(np.asarray(a, np.float64) - np.asarray(b, np.float64))))
