"""XLNet model configuration, compatible with the original release's `xlnet_config.json`."""

from __future__ import annotations

import dataclasses
import json
import os
from typing import Any, Optional

from xlnet_tf.errors import UserError

# Keys written by the original `xlnet.XLNetConfig.to_json` (and read by `from_json_file`).
ORIGINAL_KEYS = ("n_layer", "d_model", "n_head", "d_head", "d_inner", "ff_activation", "untie_r",
                                  "n_token")
FF_ACTIVATIONS = ("gelu", "gelu_exact", "relu")  # gelu: tanh approximation, as the original
ATTN_TYPES = ("bi", "uni")


@dataclasses.dataclass
class XLNetConfig:
    """Model hyper-parameters (the original keys) plus run-time knobs.

    Original keys: `n_layer d_model n_head d_head d_inner ff_activation untie_r n_token`. `d_head` may differ
    from `d_model // n_head`, as in the released configs.

    Run-time knobs (the original's `RunConfig` and flags): `dropout`, `dropatt` (attention-probability
    dropout), `mem_len` (0/None = no memory), `reuse_len` (positions cached into the memory, 0/None = all),
    `clamp_len` (-1 = no clamping of relative distances), `same_length`, `bi_data` (batch rows are
    `[forward half; backward half]`), `attn_type` (`bi` or `uni`), `initializer_range` (std of the normal
    initializer), `layer_norm_eps`.
    """

    n_token: int = 32000
    n_layer: int = 12
    d_model: int = 768
    n_head: int = 12
    d_head: int = 64
    d_inner: int = 3072
    ff_activation: str = "gelu"
    untie_r: bool = True
    dropout: float = 0.1
    dropatt: float = 0.1
    mem_len: Optional[int] = None
    reuse_len: Optional[int] = None
    clamp_len: int = -1
    same_length: bool = False
    bi_data: bool = False
    attn_type: str = "bi"
    initializer_range: float = 0.02
    layer_norm_eps: float = 1e-12

    def __post_init__(self):
        self.validate()

    # --------------------------------------------------------------------------------------------- checks
    def validate(self, batch_size: Optional[int] = None, seq_len: Optional[int] = None) -> "XLNetConfig":
        """Raises `ValueError` naming the offending field. Optionally checks input sizes too."""
        for name in ("n_token", "n_layer", "d_model", "n_head", "d_head", "d_inner"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise UserError(f"XLNetConfig.{name} must be a positive integer, got {value!r}")
        if self.d_model % 2:
            raise UserError(f"XLNetConfig.d_model must be even (sinusoidal positions), got {self.d_model}")
        if self.ff_activation not in FF_ACTIVATIONS:
            raise UserError(f"XLNetConfig.ff_activation must be one of {FF_ACTIVATIONS}, "
                                              f"got {self.ff_activation!r}")
        if self.attn_type not in ATTN_TYPES:
            raise UserError(f"XLNetConfig.attn_type must be one of {ATTN_TYPES}, got {self.attn_type!r}")
        for name in ("dropout", "dropatt"):
            value = getattr(self, name)
            if not 0.0 <= float(value) < 1.0:
                raise UserError(f"XLNetConfig.{name} must be in [0, 1), got {value!r}")
        for name in ("mem_len", "reuse_len"):
            value = getattr(self, name)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 0):
                raise UserError(f"XLNetConfig.{name} must be None or a non-negative integer, got {value!r}")
        if not isinstance(self.clamp_len, int) or isinstance(self.clamp_len, bool):
            raise UserError(f"XLNetConfig.clamp_len must be an integer (-1 = off), got {self.clamp_len!r}")
        if self.initializer_range <= 0:
            raise UserError(f"XLNetConfig.initializer_range must be positive, got {self.initializer_range!r}")
        if self.layer_norm_eps <= 0:
            raise UserError(f"XLNetConfig.layer_norm_eps must be positive, got {self.layer_norm_eps!r}")
        if batch_size is not None:
            if batch_size <= 0:
                raise UserError(f"batch_size must be positive, got {batch_size}")
            if self.bi_data and batch_size % 2:
                raise UserError(f"XLNetConfig.bi_data needs an even (per-replica) batch size, got {batch_size}")
        if seq_len is not None:
            if seq_len <= 0:
                raise UserError(f"seq_len must be positive, got {seq_len}")
            if self.reuse_len and self.reuse_len > seq_len:
                raise UserError(f"XLNetConfig.reuse_len ({self.reuse_len}) must not exceed seq_len ({seq_len})")
        return self

    # ---------------------------------------------------------------------------------------------- I/O
    @classmethod
    def from_dict(cls, values: dict[str, Any], **overrides) -> "XLNetConfig":
        values = {**values, **overrides}
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(values) - known)
        if unknown:
            raise UserError(f"Unknown XLNetConfig keys: {unknown}; known keys are {sorted(known)}")
        return cls(**values)

    @classmethod
    def from_json_file(cls, path: str, **overrides) -> "XLNetConfig":
        """Reads a released `xlnet_config.json` (original keys only) or one written by `to_json_file`."""
        if not os.path.exists(path):
            raise UserError(f"XLNet config file not found: {path}")
        with open(path, encoding="utf-8") as f:
            try:
                values = json.load(f)
            except json.JSONDecodeError as e:
                raise UserError(f"{path} is not valid JSON: {e}") from e
        try:
            return cls.from_dict(values, **overrides)
        except (TypeError, ValueError) as e:
            raise UserError(f"{path}: {e}") from e

    @classmethod
    def from_hf_dict(cls, values: dict[str, Any], **overrides) -> "XLNetConfig":
        """Builds a config from a Hugging Face `config.json` dict (vocab_size, d_model, n_layer, ...) that
        computes what Hugging Face computes: its `gelu` is the erf form (our `gelu_exact`), `gelu_new` the tanh
        form (our `gelu`, the original release's); the inverse of `to_hf_dict`. An untied output matrix
        (`tie_word_embeddings: false`) is refused: this model ties its LM output to the word embedding."""
        act = {"gelu": "gelu_exact", "gelu_new": "gelu", "relu": "relu"}.get(values.get("ff_activation", "gelu"))
        if act is None:
            raise UserError(f"Hugging Face ff_activation {values.get('ff_activation')!r} is not one this model "
                            "computes (gelu, gelu_new, relu)")
        if values.get("tie_word_embeddings", True) is False:
            raise UserError("Hugging Face config tie_word_embeddings=false: its LM output matrix is its own, this "
                            "model ties it to the word embedding; it cannot compute what that model computes")
        mapping = dict(
                n_token=values["vocab_size"], n_layer=values["n_layer"], d_model=values["d_model"],
                n_head=values["n_head"], d_head=values.get("d_head", values["d_model"] // values["n_head"]),
                d_inner=values["d_inner"], ff_activation=act,
                untie_r=values.get("untie_r", True), dropout=values.get("dropout", 0.1),
                dropatt=values.get("dropout", 0.1), clamp_len=values.get("clamp_len", -1),
                same_length=values.get("same_length", False), bi_data=values.get("bi_data", False),
                attn_type=values.get("attn_type", "bi"),
                initializer_range=values.get("initializer_range", 0.02),
                layer_norm_eps=values.get("layer_norm_eps", 1e-12))
        mapping.update(overrides)
        return cls(**mapping)

    def to_hf_dict(self) -> dict[str, Any]:
        """Keyword arguments of a Hugging Face `XLNetConfig` with the same architecture (dropout 0, mems
        kept in evaluation); `gelu` (the original's tanh form) is HF's `gelu_new`, `gelu_exact` its `gelu`."""
        act = {"gelu": "gelu_new", "gelu_exact": "gelu", "relu": "relu"}[self.ff_activation]
        return dict(
            vocab_size=self.n_token, d_model=self.d_model, n_layer=self.n_layer, n_head=self.n_head,
            d_inner=self.d_inner, ff_activation=act, untie_r=self.untie_r, attn_type=self.attn_type,
            bi_data=self.bi_data, clamp_len=self.clamp_len, same_length=self.same_length, dropout=0.0,
            mem_len=self.mem_len, reuse_len=self.reuse_len, use_mems_eval=True,
            layer_norm_eps=self.layer_norm_eps)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def to_original_dict(self) -> dict[str, Any]:
        """Only the keys of the original `xlnet_config.json`."""
        return {k: getattr(self, k) for k in ORIGINAL_KEYS}

    def to_json_file(self, path: str, original_only: bool = False) -> None:
        values = self.to_original_dict() if original_only else self.to_dict()
        from xlnet_tf import files

        files.write_text_atomic(path, json.dumps(values, indent=4, sort_keys=True) + "\n")

    def replace(self, **changes) -> "XLNetConfig":
        return dataclasses.replace(self, **changes)
