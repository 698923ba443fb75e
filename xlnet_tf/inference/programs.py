"""The compiled generation programs: `generate`'s (cached per model and `ProgramStructure`), a SavedModel's fixed
signature (`serving_function`) and a server's, every decoding value a run-time input (`request_program`).

Each is one `tf.function(jit_compile=True)` around `loop.run` (`jit_compile=False` runs the same graph without
XLA, for debugging), traced once per (batch, padded prompt length, memory length, structure).
"""

from __future__ import annotations

import weakref
from typing import Dict, Sequence

import tensorflow as tf

from xlnet_tf.inference import loop
from xlnet_tf.inference.prompts import memory_length, round_up
from xlnet_tf.inference.settings import GenerationSettings, ProgramStructure, check_model, program_structure

_PROGRAMS: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def program_values(s: GenerationSettings) -> Dict[str, tf.Tensor]:
    """The run-time inputs of a program: `seed` uint32, `temperature`, `top_p`, `penalty` float32 scalars."""
    return {"seed": tf.constant(s.seed & 0xFFFFFFFF, tf.uint32), "temperature": tf.constant(s.temperature, tf.float32),
            "top_p": tf.constant(s.top_p, tf.float32), "penalty": tf.constant(s.repetition_penalty, tf.float32)}


def program_for(model, structure: ProgramStructure):
    """The `tf.function` of `(model, structure)`, called as `loop.run` without its first two arguments (it holds
    the model weakly: the cache never keeps it alive)."""
    per_model = _PROGRAMS.setdefault(model, {})
    if structure not in per_model:
        ref = weakref.ref(model)
        # the native step runs outside XLA: its program is a graph around a compiled prompt pass (loop.run)
        per_model[structure] = tf.function(lambda *args: loop.run(ref(), structure, *args),
                                           jit_compile=structure.jit_compile and not structure.native,
                                           autograph=False)
    return per_model[structure]


def serving_function(model, settings: GenerationSettings, prompt_len: int):
    """The program as a `tf.function` with a fixed signature, for a SavedModel's `generate` signature.

    Inputs: `input_ids [B, prompt_len]` int32, left-padded (the caller keeps each prompt's last `prompt_len`
    tokens), `attention_mask [B, prompt_len]` int32 (**1 = real token**, at least one per row), `seed` int32,
    `temperature`, `top_p`, `repetition_penalty` float32 scalars (used where the export's settings turn them on:
    greedy or sampling, top_k, stop ids, max_new_tokens and the layout are fixed at export). Row b's noise is
    keyed by b. Outputs: `token_ids [B, N]` (padding after `lengths`), `log_probs [B, N]`,
    `sampling_log_probs [B, N]`, `lengths [B]`, `stopped [B]` (True = ended at a stop id), N = max_new_tokens.
    """
    check_model(model, settings.validate().layout, settings.stop_ids, "GenerationSettings.stop_ids")
    st = program_structure(settings)
    mem_len = memory_length(settings, round_up(prompt_len, settings.pad_multiple))
    seg = min(settings.segment_len, prompt_len)
    seg = seg if prompt_len % seg == 0 else prompt_len  # segments tile the prompt, or one segment reads it
    spec = lambda shape, dtype, name: tf.TensorSpec(shape, dtype, name=name)  # noqa: E731

    @tf.function(jit_compile=settings.jit_compile, autograph=False, input_signature=[
        spec([None, prompt_len], tf.int32, "input_ids"), spec([None, prompt_len], tf.int32, "attention_mask"),
        spec([], tf.int32, "seed"), spec([], tf.float32, "temperature"), spec([], tf.float32, "top_p"),
        spec([], tf.float32, "repetition_penalty")])
    def serve(input_ids, attention_mask, seed, temperature, top_p, repetition_penalty):
        values = {"seed": tf.cast(seed, tf.uint32), "temperature": temperature, "top_p": top_p,
                  "penalty": repetition_penalty}
        keys = tf.cast(tf.range(tf.shape(input_ids)[0]), tf.uint32)
        out = loop.run(model, st, input_ids, attention_mask > 0, keys, values, None, mem_len, seg, False)
        return {"token_ids": out["ids"], "log_probs": out["log_probs"],
                "sampling_log_probs": out["sampling_log_probs"], "lengths": out["lengths"], "stopped": out["stopped"]}
    return serve


def request_program(model, layout: str, max_new_tokens: int, max_top_k: int, stop_ids: Sequence[int],
                    prompt_len: int, segment_len: int = 512):
    """The compiled program behind a server's `generate` (xlnet_tf/serving/lm.py), every decoding value a run-time
    input within bounds fixed here (memory buffer: prompt_len + max_new_tokens). Returns
    `program(ids, mask, row_keys, values)`:
    `ids [B, prompt_len]` int32 left-padded, `mask [B, prompt_len]` bool (**True = real token**), `row_keys [B]`
    uint32, `values` a dict of scalars: `seed` uint32, `temperature` float32 (0 = greedy), `top_k` int32 in
    `[0, max_top_k]` (0 = off), `top_p` float32 in (0, 1], `penalty` float32 > 0 (1 = off), `max_new_tokens`
    int32 in `[1, max_new_tokens]`. Outputs as `loop.run`'s, `[B, max_new_tokens]` wide (a row ends at its
    `lengths`). The caller enforces the bounds; greedy and sampling share the program (greedy is decided per
    request)."""
    check_model(model, layout, stop_ids)
    if prompt_len % min(segment_len, prompt_len):
        raise ValueError(f"prompt_len {prompt_len} must be a multiple of segment_len {segment_len} (or below it)")
    st = ProgramStructure(greedy=None, top_k=int(max_top_k), top_p=True, penalty=True, layout=layout,
                          max_new_tokens=int(max_new_tokens), stop_ids=tuple(int(i) for i in stop_ids),
                          jit_compile=True, native=False)
    mem_len = prompt_len + int(max_new_tokens)
    seg = min(segment_len, prompt_len)

    @tf.function(jit_compile=True, autograph=False)
    def program(ids, mask, row_keys, values):
        return loop.run(model, st, ids, mask, row_keys, values, None, mem_len, seg, False)
    return program
