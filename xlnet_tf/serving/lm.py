"""The pretrained language model's SavedModel signatures (export task `lm`): text generation with the cached,
compiled decoding loop of xlnet_tf/inference/generation.py, and `features`.

`generate` (also `serving_default`), inputs (every one required; scalars are rank 0):
- `prompt [B]` string: raw UTF-8 text, tokenized in the graph as the other signatures tokenize (the
  SentencePiece model travels inside the export). A prompt of more than `max_prompt_tokens` tokens keeps its
  last ones (`prompt_truncated` says so); an empty or whitespace-only prompt is refused.
- `max_new_tokens` int32 in `[1, bound]`, `temperature` float32 >= 0 (0 = greedy), `top_k` int32 in
  `[0, max_top_k]` (0 = off), `top_p` float32 in (0, 1] (1 = off), `repetition_penalty` float32 > 0 (1 = off),
  `seed` int32 (sampling noise; row b's draws are keyed by b, so the same request gives the same text).
Outputs: `text [B]` (the continuation decoded, the stop token left out), `token_ids [B, N]` int32 (N =
the request's `max_new_tokens`; `<pad>` after a row's length), `log_probs [B, N]` (each token under the model's
distribution), `sampling_log_probs [B, N]` (under the final sampling distribution; 0 for greedy),
`lengths [B]` int32, `stopped [B]` bool (True = ended at a stop id, `<eod>` by default), `prompt_tokens [B]`
int32 (tokens read), `prompt_truncated [B]` bool.

The bounds are fixed at export (`GenerationBounds`: `--export_max_*` flags of run/export_savedmodel.py) and
checked in the graph, so no request can make the server allocate beyond them: batch size <= `max_batch_size`,
the memory buffer `[B, max_prompt_tokens + max_new_tokens, d_model]` per layer. Every request reads a prompt
buffer of `max_prompt_tokens` (rounded up to a multiple of 8) positions, left-padded and masked: the shapes are
static, so the program is compiled once per batch size.

`features`: `text [B]` -> the backbone's last-layer content stream of the text packed as a classifier input
(`text <sep> <cls>`, left-padded to the longest of the request, at most `max_seq_length` tokens: a longer text
keeps its first tokens, as the classifier builder cuts): `token_states [B, L, D]`, `input_ids [B, L]`,
`attention_mask [B, L]` (1 = real token) and `pooled [B, D]` = the state at `<cls>` (a pretrained model has no
summary layer).
"""

from __future__ import annotations

import dataclasses
from typing import Dict, Tuple

import tensorflow as tf

from xlnet_tf.artifacts.export_info import ExportInfo
from xlnet_tf.errors import UserError
from xlnet_tf.inference import generation
from xlnet_tf.inference.prompts import round_up
from xlnet_tf.serving.base import ServingModule
from xlnet_tf.serving.checks import signature_function, string_spec, valid_utf8
from xlnet_tf.text import packing_tf, preprocessing
from xlnet_tf.text.layout import EOD_ID

SIGNATURE = "generate"


@dataclasses.dataclass(frozen=True)
class GenerationBounds:
    """What an exported `generate` allows a request (checked in the graph) and how it reads prompts."""

    max_prompt_tokens: int = 512
    max_new_tokens: int = 256
    max_top_k: int = 100
    max_batch_size: int = 16
    layout: str = "causal"
    stop_ids: Tuple[int, ...] = (EOD_ID,)
    segment_len: int = 512

    def __post_init__(self):
        object.__setattr__(self, "stop_ids", tuple(int(i) for i in self.stop_ids))
        for field in ("max_prompt_tokens", "max_new_tokens", "max_top_k", "max_batch_size", "segment_len"):
            value = getattr(self, field)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise UserError(f"GenerationBounds.{field} must be an integer >= 1, got {value!r}")
        if self.max_new_tokens > generation.NEW_TOKENS_LIMIT:
            raise UserError(f"GenerationBounds.max_new_tokens must be at most {generation.NEW_TOKENS_LIMIT} "
                            f"(generation.NEW_TOKENS_LIMIT), got {self.max_new_tokens}")
        if self.layout not in generation.LAYOUTS:
            raise UserError(f"GenerationBounds.layout must be one of {generation.LAYOUTS}, got {self.layout!r}")
        if any(i < 0 for i in self.stop_ids):
            raise UserError(f"GenerationBounds.stop_ids must be token ids >= 0, got {self.stop_ids}")

    @property
    def prompt_len(self) -> int:
        """The prompt buffer: `max_prompt_tokens` rounded up to a multiple of 8, then of the segment."""
        length = round_up(self.max_prompt_tokens, 8)
        return round_up(length, min(self.segment_len, length))

    def to_dict(self) -> Dict:
        return {**dataclasses.asdict(self), "stop_ids": list(self.stop_ids)}


class LanguageModelServing(ServingModule):
    """`lm`: a pretrained permutation LM's `generate` (= `serving_default`) and `features`.

    Args (beyond `ServingModule`'s; `info` gives `max_seq_length`, the `features` input's length, and the text
    normalization):
      generation: the request bounds, `GenerationBounds` (or a dict of its fields).
    """

    TASKS = ("lm",)

    def __init__(self, model, info: ExportInfo, spiece_proto: bytes, generation=None):
        super().__init__(model, info, spiece_proto)
        generation = GenerationBounds(**generation) if isinstance(generation, dict) else generation
        if not isinstance(generation, GenerationBounds):
            raise ValueError("an lm export needs generation bounds (xlnet_tf.serving.lm.GenerationBounds)")
        self.generation = generation

    def signatures(self):
        """`generate` (also `serving_default`) and `features` (module docstring)."""
        self.serve_generate = self.generate_signature()
        self.serve_features = self.text_signature(self.text_features, "features")
        return {"serving_default": self.serve_generate, SIGNATURE: self.serve_generate,
                "features": self.serve_features}

    def generate_signature(self):
        """The `generate` signature function (module docstring)."""
        bounds, model, encoder = self.generation, self.model, self.encoder
        program = generation.request_program(model, bounds.layout, bounds.max_new_tokens, bounds.max_top_k,
                                             bounds.stop_ids, bounds.prompt_len, bounds.segment_len)
        S = tf.TensorSpec
        sig = SIGNATURE

        def generate(prompt, max_new_tokens, temperature, top_k, top_p, repetition_penalty, seed):
            batch = tf.shape(prompt)[0]
            checks = [
                tf.debugging.Assert((batch >= 1) & (batch <= bounds.max_batch_size),
                                    [f"{sig}: prompt must hold 1 to {bounds.max_batch_size} prompts (the exported "
                                     "max_batch_size); split the request"]),
                tf.debugging.Assert((max_new_tokens >= 1) & (max_new_tokens <= bounds.max_new_tokens),
                                    [f"{sig}: max_new_tokens must be in [1, {bounds.max_new_tokens}] (the exported "
                                     "bound)"]),
                tf.debugging.Assert(tf.math.is_finite(temperature) & (temperature >= 0.0),
                                    [f"{sig}: temperature must be >= 0 (0 = greedy)"]),
                tf.debugging.Assert((top_k >= 0) & (top_k <= bounds.max_top_k),
                                    [f"{sig}: top_k must be in [0, {bounds.max_top_k}] (0 = off; the exported "
                                     "bound)"]),
                tf.debugging.Assert((top_p > 0.0) & (top_p <= 1.0), [f"{sig}: top_p must be in (0, 1] (1 = off)"]),
                tf.debugging.Assert(tf.math.is_finite(repetition_penalty) & (repetition_penalty > 0.0),
                                    [f"{sig}: repetition_penalty must be > 0 (1 = off)"]),
            ]
            with tf.control_dependencies(checks):
                ids = encoder.encode(valid_utf8("prompt", prompt, signature=sig))
            n = ids.row_lengths()
            empty = tf.debugging.Assert(tf.reduce_all(n > 0), [
                f"{sig}: every prompt needs at least one token; an empty or whitespace-only prompt was given"])
            keep = tf.minimum(n, bounds.max_prompt_tokens)
            with tf.control_dependencies([empty]):
                tail = packing_tf.tail(ids, keep)
                packed = packing_tf.pad(tail, tf.zeros_like(tail), bounds.prompt_len, side=packing_tf.LEFT)
            values = {"seed": tf.cast(seed, tf.uint32), "temperature": temperature, "top_k": top_k, "top_p": top_p,
                      "penalty": repetition_penalty, "max_new_tokens": max_new_tokens}
            keys = tf.cast(tf.range(batch), tf.uint32)
            out = program(packed["input_ids"], packed["attention_mask"] > 0, keys, values)
            token_ids = out["ids"][:, :max_new_tokens]
            lengths, stopped = out["lengths"], out["stopped"]
            body = tf.RaggedTensor.from_tensor(token_ids, lengths=lengths - tf.cast(stopped, tf.int32))
            return {"text": encoder.tokenizer.detokenize(body), "token_ids": token_ids,
                    "log_probs": out["log_probs"][:, :max_new_tokens],
                    "sampling_log_probs": out["sampling_log_probs"][:, :max_new_tokens],
                    "lengths": lengths, "stopped": stopped, "prompt_tokens": tf.cast(keep, tf.int32),
                    "prompt_truncated": n > bounds.max_prompt_tokens}

        return signature_function(generate, [
            string_spec("prompt"), S([], tf.int32, name="max_new_tokens"), S([], tf.float32, name="temperature"),
            S([], tf.int32, name="top_k"), S([], tf.float32, name="top_p"),
            S([], tf.float32, name="repetition_penalty"), S([], tf.int32, name="seed")])

    def text_features(self, text):
        f = preprocessing.encode_and_pack(self.encoder, text, None, self.max_seq_length)
        content, out = self.content_states(f["input_ids"], f["segment_ids"], f["attention_mask"])
        content = tf.cast(content, tf.float32)
        return {**out, "token_states": content, "pooled": content[:, -1]}  # <cls> ends each packed text
