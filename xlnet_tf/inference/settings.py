"""What a generation call may ask for, of which model, and what it returns: `GenerationSettings` (validated on
construction), the bound on new tokens every entry point shares, `check_model`, the per-row output, and the part
of the settings that shapes a compiled program (`ProgramStructure`). No TensorFlow here."""

from __future__ import annotations

import collections
import dataclasses
from typing import List, Optional, Sequence, Tuple

import numpy as np

from xlnet_tf.errors import UserError
from xlnet_tf.text.layout import EOD_ID

LAYOUTS = ("causal", "bidirectional_prompt")
# A row's stop reason: it produced one of the stop ids, or reached max_new_tokens.
STOP_ID, MAX_NEW_TOKENS = "stop_id", "max_new_tokens"
# The most tokens one call may generate: the memory and output buffers grow with it, and a value no program can
# finish is refused instead of allocated. GenerationSettings (the Keras API and run/generate.py) and the exported
# signature's bound (xlnet_tf.serving.lm.GenerationBounds) share it.
NEW_TOKENS_LIMIT = 4096


@dataclasses.dataclass(frozen=True)
class GenerationSettings:
    """How to decode; validated on construction (`UserError` naming the field).

    max_new_tokens: tokens to generate per row (>= 1). temperature: 0 = greedy, > 0 = sampling.
    top_k: keep the k best tokens when sampling (0 = all). top_p: nucleus mass in (0, 1] (1 = all).
    repetition_penalty: > 0 (1 = off). stop_ids: ids that end a row (default `<eod>`; () = none).
    seed: of the sampling noise. layout: one of `LAYOUTS`. mem_len: the memory buffer `M` (positions per
    layer; None = the padded prompt length + max_new_tokens, i.e. the whole past). segment_len: prompt tokens
    read per pass. pad_multiple: the padded prompt length is rounded up to it (fewer traces).
    padding_text: prepend `PADDING_TEXT <eod>` to text prompts (`generate_text`). jit_compile: XLA.
    native_step: each step after the prompt as one native op (`native_step.py`) where the model allows it
    (`native_step.available`): True; False: XLA's program of the step; None (default): the op for a bfloat16
    model (about twice as fast as XLA's bfloat16 step), XLA's for float32 (the two measured even). The same numbers
    to float32 rounding (a bfloat16 model's: closer to float32, the op keeps its activations in float32).
    """

    max_new_tokens: int = 32
    temperature: float = 0.0
    top_k: int = 0
    top_p: float = 1.0
    repetition_penalty: float = 1.0
    stop_ids: Tuple[int, ...] = (EOD_ID,)
    seed: int = 0
    layout: str = "causal"
    mem_len: Optional[int] = None
    segment_len: int = 512
    pad_multiple: int = 8
    padding_text: bool = False
    jit_compile: bool = True
    native_step: Optional[bool] = None

    def __post_init__(self):
        object.__setattr__(self, "stop_ids", tuple(self.stop_ids))
        self.validate()

    def validate(self) -> "GenerationSettings":
        def bad(field, why):
            raise UserError(f"GenerationSettings.{field} {why}, got {getattr(self, field)!r}")

        def integer(value):
            return isinstance(value, (int, np.integer)) and not isinstance(value, bool)

        for field, low, note in (("max_new_tokens", 1, ""), ("segment_len", 1, ""), ("pad_multiple", 1, ""),
                                 ("top_k", 0, " (0 = off)")):
            if not integer(getattr(self, field)) or getattr(self, field) < low:
                bad(field, f"must be an integer >= {low}{note}")
        if self.max_new_tokens > NEW_TOKENS_LIMIT:
            bad("max_new_tokens", f"must be at most {NEW_TOKENS_LIMIT} (generation.NEW_TOKENS_LIMIT; generate longer "
                                  "texts in several calls, the output as the next prompt)")
        if not isinstance(self.temperature, (int, float)) or not self.temperature >= 0:
            bad("temperature", "must be >= 0 (0 = greedy)")
        if not isinstance(self.top_p, (int, float)) or not 0 < self.top_p <= 1:
            bad("top_p", "must be in (0, 1] (1 = off)")
        if not isinstance(self.repetition_penalty, (int, float)) or not self.repetition_penalty > 0:
            bad("repetition_penalty", "must be > 0 (1 = off)")
        if not all(integer(i) and i >= 0 for i in self.stop_ids):
            bad("stop_ids", "must be token ids >= 0")
        if not integer(self.seed):
            bad("seed", "must be an integer")
        if self.layout not in LAYOUTS:
            bad("layout", f"must be one of {LAYOUTS}")
        for field in ("padding_text", "jit_compile", "native_step"):
            if not isinstance(getattr(self, field), (bool, np.bool_)) and (field, getattr(self, field)) != (
                    "native_step", None):
                bad(field, "must be True or False" + (" or None (automatic)" if field == "native_step" else ""))
        if self.mem_len is not None and (not integer(self.mem_len) or self.mem_len < 1):
            bad("mem_len", "must be an integer >= 1 or None (the whole past)")
        return self


# What shapes a compiled program: greedy (True, False, or None = decided at run time by the temperature), top_k
# (the k, or with a run-time `values["top_k"]` its bound), whether top-p and the repetition penalty are on, the
# layout, max_new_tokens (the output buffers' width), stop ids, XLA, and whether the steps are the native op
# (`native_step.py`; resolved for the model by `program_structure`). Seed, temperature, top_p and the penalty are
# the program's run-time inputs (`programs.program_values`): no retrace for them.
ProgramStructure = collections.namedtuple(
    "ProgramStructure", "greedy top_k top_p penalty layout max_new_tokens stop_ids jit_compile native")


def program_structure(s: GenerationSettings, model=None) -> ProgramStructure:
    """`s`'s structure; `native` where `model` is given, `s.native_step` asks for the native step (None: for a
    bfloat16 model) and the model allows it."""
    from xlnet_tf.inference import native_step  # (it loads the native library only when asked)

    wanted = s.native_step if s.native_step is not None else (
        model is not None and model.backbone.compute_dtype == "bfloat16")
    native = bool(wanted and model is not None and native_step.available(model))
    return ProgramStructure(s.temperature == 0, s.top_k, s.top_p < 1.0, s.repetition_penalty != 1.0, s.layout,
                            s.max_new_tokens, s.stop_ids, s.jit_compile, native)


@dataclasses.dataclass
class GeneratedRow:
    """One prompt's continuation: `token_ids` (the stop token included), `log_probs` (model distribution),
    `sampling_log_probs` (final sampling distribution), `stop_reason`, `prompt_tokens` (read),
    `prompt_truncated` (the prompt lost its first tokens to the memory buffer)."""

    token_ids: List[int]
    log_probs: List[float]
    sampling_log_probs: List[float]
    stop_reason: str
    prompt_tokens: int
    prompt_truncated: bool


@dataclasses.dataclass
class GenerationOutput:
    """`rows`, one per prompt; `logits [B, max_new_tokens, n_token]` float32 when asked for: each step's raw
    logits (zeros after a row's stop)."""

    rows: List[GeneratedRow]
    logits: Optional[np.ndarray] = None


def check_model(model, layout: str = "causal", stop_ids: Sequence[int] = (), stop_ids_name: str = "stop_ids"
                ) -> None:
    """`UserError` naming `model` unless it is a permutation-LM pretrainer with an LM head that can read
    `layout` and produce each of `stop_ids` (named `stop_ids_name` in the message)."""
    if getattr(model, "lm_head", None) is None or getattr(model, "backbone", None) is None:
        raise UserError(f"model: {type(model).__name__} has no LM head (lm_head): generation needs a pretrained "
                        "XLNetPretrainer (a pretraining run's final/, the original release or a Hugging Face "
                        "XLNetLMHeadModel), not a fine-tuned model")
    if getattr(model, "objective", "plm") != "plm":
        raise UserError(f"model: objective {model.objective!r}: a masked LM never trained the query stream that "
                        "predicts each next token; generate with a 'plm' model")
    config = model.backbone.config
    outside = [int(i) for i in stop_ids if not 0 <= int(i) < config.n_token]
    if outside:
        raise UserError(f"{stop_ids_name}: {outside} outside the model's vocabulary (ids 0 to {config.n_token - 1}): "
                        "no step could produce them")
    if config.attn_type == "uni" and config.same_length:
        raise UserError("model: attn_type 'uni' with same_length=True; build it with same_length=False "
                        "(config_overrides) to generate")
    if layout == "bidirectional_prompt" and config.attn_type == "uni":
        raise UserError("GenerationSettings.layout 'bidirectional_prompt' needs a model with attn_type 'bi'; this "
                        "one is 'uni' (every token sees only earlier ones): use 'causal'")
