"""Text generation with a pretrained XLNet (`XLNetPretrainer`: backbone + LM head) and Transformer-XL memories.

The identity factorization order, read left to right. Prompts (token ids, any lengths) are left-padded to one
length `Lp` (a multiple of `pad_multiple`, then of the segment length) and read once, in segments of
`segment_len` tokens, with the backbone's layers and memories of `M` positions (`[B, M, D]` per layer, static
shapes; a `[B, M]` mask, **True = real position**, keeps padding and empty slots out of every attention). The
memory is then kept as each layer's keys and values, a ring of `M + 1` slots (`[B, H, M + 1, Dh]`, position
p in slot `p % (M + 1)`), and each new token costs one step over ONE position: the chosen token's content
stream at `t` (its keys and values written into one slot) and, in the same pass, the query stream at `t + 1`
predicting the next token (the query never sees its own position's content, so no dummy token is computed).

Windows (masks: **True = may NOT attend**): a generated token's content stream sees the `M` positions before
it and itself, a query stream the `M` positions before it; padding never. While prompt + generated
`<= M + 1` tokens that is the whole past (`mem_len=None`, the default, sizes M so). A prompt longer than M
keeps its last M tokens: the row's `prompt_truncated` is set and a warning issued.

Layouts (`GenerationSettings.layout`):
  `causal`: every token, the prompt's included, sees only earlier ones (and itself). The cache is exact:
    each step's logits equal `recompute_logits` (the whole prefix recomputed, window M) to float32 rounding.
  `bidirectional_prompt`: the prompt's tokens see each other (pretraining's context, Hugging Face's layout; a
    prompt of several segments is read as Transformer-XL reads them: each sees the earlier ones through the
    memories and all of itself); generated tokens enter through the memories and see the prompt and the
    earlier generated tokens. The first token's logits equal Hugging Face's (prompt + a dummy hidden from all).
Every token is in segment 0 (the "same segment" attention term; give Hugging Face `token_type_ids` of zeros).

Decoding: greedy (`temperature == 0`), or sampling from `softmax(logits' / temperature)` restricted to the
`top_k` best tokens and the smallest set of probability `>= top_p`; `logits'` carry the CTRL repetition
penalty on the tokens of the prompt and the output (positive logits divided by it, negative ones multiplied).
Sampling is Gumbel-max with noise hashed from `(seed, row key, step, token)`: reproducible, and a row's draws
depend on its key (default: its index; `row_keys` gives a row the same draws in another batch), never on the
batch. A row stops at one of `stop_ids` (`<eod>` by default; kept in its output) or after `max_new_tokens`.
Per row: the ids, `log_probs` (each chosen token under the MODEL's distribution, `log_softmax` of the raw
logits: what `lm_eval` and teacher forcing score), `sampling_log_probs` (under the final sampling
distribution; 0 for greedy choices) and the stop reason (`STOP_ID` or `MAX_NEW_TOKENS`).

The prompt pass and the `tf.while_loop` of steps are one `tf.function(jit_compile=True)` program; everything
in it (gathers, scatters, roll, sort, top_k, the uint32 hash) compiles with XLA, so there is no fallback
(`jit_compile=False` runs the same graph without XLA, for debugging). One trace per (batch, `Lp`, M, structure).

The parts (this module is the one to import: every name below is here too): `settings` (`GenerationSettings`,
`check_model`, the outputs, `NEW_TOKENS_LIMIT`), `prompts` (packing, `PADDING_TEXT`), `sampling` (penalty,
temperature, top-k/top-p, the noise), `decoding` (the prompt pass and the one-position step, on the layers'
public `decode_step`), `loop` (the program's body) and `programs` (the compiled programs: `generate`'s cache,
`serving_function`, `request_program`); here, `generate` and its text and teacher-forcing forms.
"""

from __future__ import annotations

import dataclasses
import warnings
from typing import List, Sequence

import numpy as np
import tensorflow as tf

from xlnet_tf.errors import UserError
from xlnet_tf.inference.prompts import PADDING_TEXT, memory_length, pack_prompts, round_up
from xlnet_tf.inference.programs import program_for, program_values, request_program, serving_function
from xlnet_tf.inference.sampling import NEG, gumbel_noise, sampling_logits
from xlnet_tf.inference.settings import (LAYOUTS, MAX_NEW_TOKENS, NEW_TOKENS_LIMIT, STOP_ID, GeneratedRow,
                                         GenerationOutput, GenerationSettings, ProgramStructure, check_model,
                                         program_structure)
from xlnet_tf.text.layout import EOD_ID


__all__ = ["GeneratedRow", "GenerationOutput", "GenerationSettings", "LAYOUTS", "MAX_NEW_TOKENS", "NEG",
           "NEW_TOKENS_LIMIT", "PADDING_TEXT", "ProgramStructure", "STOP_ID", "check_model", "generate",
           "generate_text", "gumbel_noise", "memory_length", "pack_prompts", "program_structure", "program_values",
           "request_program", "round_up", "sampling_logits", "serving_function", "teacher_force"]


def generate(model, prompts: Sequence[Sequence[int]], settings: GenerationSettings = GenerationSettings(),
             row_keys=None, forced_ids=None, return_logits: bool = False) -> GenerationOutput:
    """Continuations of `prompts` (token-id lists of different lengths) by `model` (an `XLNetPretrainer`).

    row_keys: `[B]` ints keying each row's sampling noise (default: the row's index). forced_ids: `[B, N]` ints,
    N = max_new_tokens: teacher forcing (step k takes `forced_ids[:, k]` whatever the logits say; `log_probs`
    score it). return_logits: also return every step's raw logits. Compiled programs are shared by all calls
    with the same model and settings structure (greedy or not, top_k, whether top_p and the penalty are on,
    layout, max_new_tokens, stop ids, XLA) and traced once per shape.
    """
    check_model(model, settings.validate().layout, settings.stop_ids, "GenerationSettings.stop_ids")
    if not len(prompts):
        raise UserError("prompts: none given; give at least one prompt")
    s, batch = settings, len(prompts)
    mem_len = memory_length(s, round_up(max(len(p) for p in prompts), s.pad_multiple))
    ids, mask, lengths, truncated, seg = pack_prompts(prompts, model.backbone.config.n_token, mem_len, s)
    for b in np.flatnonzero(truncated):
        warnings.warn(f"prompts[{b}] has {len(prompts[b])} tokens, more than the memory buffer (mem_len "
                      f"{mem_len}): its last {mem_len} are read", stacklevel=2)
    keys = np.arange(batch) if row_keys is None else np.asarray(row_keys, np.int64).reshape(-1)
    if keys.shape != (batch,):
        raise UserError(f"row_keys: one key per prompt ({batch}), got {keys.shape[0]}")
    forced = None if forced_ids is None else np.asarray(forced_ids, np.int32)
    if forced is not None and forced.shape != (batch, s.max_new_tokens):
        raise UserError(f"forced_ids: shape [{batch}, max_new_tokens={s.max_new_tokens}] expected, got "
                        f"{list(forced.shape)}")
    n_token = model.backbone.config.n_token
    if forced is not None and ((forced < 0) | (forced >= n_token)).any():
        raise UserError(f"forced_ids: ids outside the model's vocabulary (0 to {n_token - 1}), e.g. "
                        f"{int(forced[(forced < 0) | (forced >= n_token)][0])}")
    program = program_for(model, program_structure(s, model))
    out = program(tf.constant(ids), tf.constant(mask), tf.constant((keys & 0xFFFFFFFF).astype(np.uint32)),
                  program_values(s), None if forced is None else tf.constant(forced), mem_len, seg,
                  bool(return_logits))
    out = {k: (v.numpy() if v is not None else None) for k, v in out.items()}
    rows = []
    for b in range(batch):
        n = int(out["lengths"][b])
        rows.append(GeneratedRow(
            token_ids=out["ids"][b, :n].tolist(), log_probs=out["log_probs"][b, :n].tolist(),
            sampling_log_probs=out["sampling_log_probs"][b, :n].tolist(),
            stop_reason=STOP_ID if out["stopped"][b] else MAX_NEW_TOKENS, prompt_tokens=int(lengths[b]),
            prompt_truncated=bool(truncated[b])))
    return GenerationOutput(rows=rows, logits=out["logits"] if return_logits else None)


def teacher_force(model, prompt: Sequence[int], continuation: Sequence[int], settings: GenerationSettings = None):
    """Log-probabilities (model distribution) of `continuation` after `prompt`, read through the generation
    path (prompt pass + one step per token); `[len(continuation)]` float32."""
    base = settings or GenerationSettings()
    settings = dataclasses.replace(base, max_new_tokens=len(continuation), stop_ids=(), temperature=0.0,
                                   repetition_penalty=1.0)
    out = generate(model, [list(prompt)], settings, forced_ids=[list(continuation)])
    return np.asarray(out.rows[0].log_probs, np.float32)


def generate_text(model, tokenizer, texts: Sequence[str], settings: GenerationSettings = GenerationSettings(),
                  **kwargs) -> List[dict]:
    """`generate` on raw text: each text encoded (after `PADDING_TEXT <eod>` with `settings.padding_text`);
    returns per text `{prompt, text, token_ids, log_probs, sampling_log_probs, stop_reason, prompt_tokens,
    prompt_truncated}` (`text` decodes the generated ids without the stop token)."""
    prefix = tokenizer.encode(PADDING_TEXT) + [EOD_ID] if settings.padding_text else []
    prompts = []
    for i, text in enumerate(texts):
        ids = tokenizer.encode(text)
        if not ids:
            raise UserError(f"prompts[{i}] is empty (no tokens in {text!r}): give some text")
        prompts.append(prefix + ids)
    out = generate(model, prompts, settings, **kwargs)
    results = []
    for text, row in zip(texts, out.rows):
        body = row.token_ids[:-1] if row.stop_reason == STOP_ID else row.token_ids
        results.append({"prompt": text, "text": tokenizer.decode(body), **dataclasses.asdict(row)})
    return results
