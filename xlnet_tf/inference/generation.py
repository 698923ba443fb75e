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
"""

from __future__ import annotations

import collections
import dataclasses
import warnings
import weakref
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np
import tensorflow as tf

from xlnet_tf.backbone import cache_mems
from xlnet_tf.errors import UserError
from xlnet_tf.layers import column_pieces
from xlnet_tf.layers.attention import MASK_VALUE
from xlnet_tf.text.layout import EOD_ID, PADDING_ID

LAYOUTS = ("causal", "bidirectional_prompt")
STOP_ID, MAX_NEW_TOKENS = "stop_id", "max_new_tokens"
NEG = -1e30  # filtered logits (finite: no inf - inf anywhere)
# The most tokens one call may generate: the memory and output buffers grow with it, and a value no program can
# finish is refused instead of allocated. GenerationSettings (the Keras API and run/generate.py) and the exported
# signature's bound (serving_lm.GenerationBounds) share it.
NEW_TOKENS_LIMIT = 4096

# Prepended (with <eod>) to each prompt when `padding_text` is on: the original authors' advice for short
# prompts is to give XLNet a long context to condition on. Any long neutral text serves; this one is ours.
PADDING_TEXT = (
    "The river valley was settled by farmers in the early years of the nineteenth century. They cleared the "
    "forest along the banks, built mills where the water fell fastest, and traded grain and timber with the "
    "towns downstream. A road followed the river by the middle of the century, and a railway some decades "
    "later; the mills grew into factories, and the villages into small towns with schools, churches and a "
    "weekly newspaper. The valley's history was written down by a local teacher, whose notes on the families, "
    "the floods and the harvests of each year are still kept in the town library.")


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
        if self.mem_len is not None and (not integer(self.mem_len) or self.mem_len < 1):
            bad("mem_len", "must be an integer >= 1 or None (the whole past)")
        return self


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


# ------------------------------------------------------------------------------------------------ checks
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


def pack_prompts(prompts: Sequence[Sequence[int]], n_token: int, mem_len: int, settings: GenerationSettings):
    """Left-pads `prompts` (each kept to its last `mem_len` tokens) -> `(ids [B, Lp] int32, mask [B, Lp]
    bool (True = real token), lengths [B], truncated [B] bool, segment length S)`, `Lp` a multiple of S."""
    rows = []
    for i, p in enumerate(prompts):
        p = np.asarray(p, np.int64).reshape(-1)
        if p.size == 0:
            raise UserError(f"prompts[{i}] is empty: give at least one token")
        if p.min() < 0 or p.max() >= n_token:
            raise UserError(f"prompts[{i}] holds ids outside the vocabulary [0, {n_token}): "
                            f"{sorted(set(p[(p < 0) | (p >= n_token)].tolist()))[:5]}")
        rows.append(p)
    truncated = np.array([len(p) > mem_len for p in rows])
    rows = [p[-mem_len:] for p in rows]
    lengths = np.array([len(p) for p in rows])
    length = _round_up(int(lengths.max()), settings.pad_multiple)
    seg = min(settings.segment_len, length)
    length = _round_up(length, seg)
    ids = np.full((len(rows), length), PADDING_ID, np.int32)
    mask = np.zeros((len(rows), length), bool)
    for b, p in enumerate(rows):
        ids[b, length - len(p):] = p
        mask[b, length - len(p):] = True
    return ids, mask, lengths, truncated, seg


def _memory_length(s: GenerationSettings, padded_prompt: int) -> int:
    """The memory buffer: `mem_len`, at most the whole past (the padded prompt and the new tokens): a longer
    buffer would hold nothing more, so the outputs are the same and no buffer the program cannot allocate is
    asked for."""
    whole = padded_prompt + s.max_new_tokens
    return min(s.mem_len, whole) if s.mem_len else whole


def _round_up(n: int, k: int) -> int:
    return -(-n // k) * k


# ------------------------------------------------------------------------------------ the prompt pass
def _forward(model, input_ids, mems, content_mask, query_mask=None, causal=False):
    """One pass over `input_ids [B, S]` with memories `mems` (list of `[B, M, D]`).

    content_mask `[B, S, M + S]`, query_mask `[B, 1, M + S]` (or None: no query): True = may NOT attend. The
    query row sits one past the segment (position S), so it predicts the token after the segment's last.
    causal: the content mask blocks every key after its query, so only the distances `klen .. 0` are encoded
    (the original's `attn_type="uni"`: `klen + 1` of them instead of `klen + qlen`; a blocked score reads
    another row's value and is masked away), about half the position term's work.
    Returns `(logits [B, n_token] float32 or None, layer inputs: list of [B, S, D])`.
    """
    backbone = model.backbone
    c = backbone.config
    batch, qlen = tf.shape(input_ids)[0], input_ids.shape[1]
    klen = mems[0].shape[1] + qlen
    content = backbone.embed(input_ids)
    pos_emb = backbone.position_encoding(qlen=qlen, klen=klen)[:1]  # the forward direction only (no bi_data)
    if causal:  # its rows for the distances klen .. 0, as "uni" encodes them (a no-op for a "uni" model)
        pos_emb = pos_emb[:, :klen + 1]
    biases = None if c.untie_r else (backbone.r_w_bias, backbone.r_r_bias, backbone.r_s_bias)
    same_segment = tf.zeros([batch, qlen, klen], tf.bool)  # every token in segment 0 (module docstring)
    query, kwargs = None, {}
    if query_mask is not None:
        query = tf.tile(tf.cast(backbone.mask_emb, backbone.compute_dtype), [batch, 1, 1])
        kwargs = dict(query_mask=query_mask, query_seg_diff=same_segment[:, :1],
                      query_pos=tf.fill([batch, 1], qlen))
    layer_inputs = []
    for layer, mem in zip(backbone.xl_layers, mems):
        layer_inputs.append(content)
        content, query = layer(content, query, pos_emb=pos_emb, mems=mem, content_mask=content_mask,
                               seg_diff=same_segment, biases=biases, training=False, **kwargs)
    logits = None if query is None else model.lm_head(query, backbone.word_embedding)[:, 0]
    return logits, layer_inputs


def _segment_masks(mem_real, real, causal):
    """Content `[B, S, M+S]` and query `[B, 1, M+S]` masks (True = may NOT attend) of a prompt segment."""
    mlen, qlen = mem_real.shape[1], real.shape[1]
    blocked = tf.logical_not(tf.concat([mem_real, real], 1))[:, None, :]  # padding and empty slots
    rows = tf.range(qlen)[:, None]
    cols = tf.range(mlen + qlen)[None, :]
    content = blocked
    if causal:
        content = content | (cols > rows + mlen)[None]
    content = content & tf.logical_not(tf.equal(cols, rows + mlen))[None]  # a token sees itself
    return content, blocked


# ------------------------------------------------------------------------------------------- the steps
def _ring(model, mems, mem_real, prompt_len: int):
    """The memory after the prompt as the steps keep it: each layer's keys and values `[B, H, R, Dh]` (projections
    of the cached layer inputs), R = M + 1 slots, position p in slot `p % R` (a ring: a step writes one slot and
    moves nothing), and `[B, R]` bool, True = a real position."""
    shift = prompt_len % (mem_real.shape[1] + 1)
    ring = lambda x, axis: tf.roll(tf.concat([tf.zeros_like(x[:, :1]), x], 1), shift, axis)  # noqa: E731
    kv = []
    for layer, mem in zip(model.backbone.xl_layers, mems):
        keys, values = layer.rel_attn._project_keys_values(mem)  # [B, M, H, Dh]
        kv.append(tuple(tf.transpose(ring(x, 1), [0, 2, 1, 3]) for x in (keys, values)))
    return kv, ring(mem_real, 1)


def _loop_constants(model, mem_len: int):
    """What every step reads unchanged, arranged once before the loop in the layout the step's products read
    (XLA would otherwise copy a transpose of each inside every step: 3.6 of 8.2 ms of a step of the 4 x 256 model
    at a 512-token memory, bench/generation_profile.py), position-wise kernels cut into column pieces (two-row
    products on two threads, `layers/column_pieces.py`): per layer, the projected relative encoding `[H, Dh, P]`
    of the distances `M + 1 .. 0` (column `M + 1 - d` holds distance d: every distance a step needs), the q, k
    and v projections side by side, the output projection and the feed-forward kernels; and the word embedding
    transposed, `[D, n_token]` (the LM head's); all in the compute dtype."""
    pos_emb = model.backbone.position_encoding(qlen=1, klen=mem_len + 1)[:1]
    layers = []
    for layer in model.backbone.xl_layers:
        att = layer.rel_attn
        layers.append(_LayerConstants(
            position_keys=tf.transpose(att._project_positions(pos_emb, 1)[0], [1, 2, 0]),
            qkv=att._projection_pieces("qkv"), output=att._output_pieces(), feed_forward=layer.ff.kernel_pieces()))
    embedding = tf.cast(model.backbone.word_embedding, model.backbone.compute_dtype)
    return layers, column_pieces.split_columns(tf.transpose(embedding))


_LayerConstants = collections.namedtuple("_LayerConstants", "position_keys qkv output feed_forward")


def _attend(att, q, keys, values, k_r, biases, rows, blocked):
    """`RelativeAttention._core` for one query row `q [B, H, Dh]` over ring slots (`keys`, `values`
    `[B, H, R, Dh]`): content + position (`k_r [H, Dh, P]`, the encoding column of each slot's distance,
    `rows [R]`) + segment ("same") scores, `blocked [B, R]` (True = may NOT attend) -> `[B, H, Dh]`. One row per
    call: XLA runs these one-row products as fast loops, two rows as slower batched matrix products (measured)."""
    r_w, r_r, r_s = (att._w(b) for b in biases)
    ac = tf.einsum("bnd,bnjd->bnj", q + r_w, keys)
    bd = tf.gather(tf.einsum("bnd,ndp->bnp", q + r_r, k_r), rows, axis=2)
    ef = tf.einsum("bnd,nd->bn", q + r_s, att._w(att.seg_embed)[0])[:, :, None]
    score = tf.cast(ac + bd + ef, tf.float32) * att.scale
    score = tf.where(blocked[:, None, :], tf.constant(MASK_VALUE, tf.float32), score)
    return tf.einsum("bnj,bnjd->bnd", tf.cast(tf.nn.softmax(score, -1), att.compute_dtype), values)


def _step(model, token, t, kv, real, constants):
    """One position: `token [B]`'s content stream at `t` (keys and values into slot `t % R`) and the query stream
    at `t + 1` over the ring; the query does not see slot `(t + 1) % R` (position t - M). Returns `(logits
    [B, n_token], kv, real)`: `XLNetLayer`'s numbers on `[mems; token]` (tested against the backbone on the whole
    prefix) with one position projected and no copy of the memory per step. `constants`: `_loop_constants`."""
    backbone = model.backbone
    batch, slots = tf.shape(token)[0], real.shape[1]
    slot, ids = t % slots, tf.range(slots)
    real = real | tf.equal(ids, slot)[None]
    content_rows = slots - tf.math.floormod(t - ids, slots)  # distance d = (t - j) mod R at row M + 1 - d
    content_blocked = tf.logical_not(real)
    query_blocked = content_blocked | tf.equal(ids, (t + 1) % slots)[None]
    where = tf.stack([tf.repeat(tf.range(batch), backbone.config.n_head), tf.tile(tf.range(backbone.config.n_head),
                      [batch]), tf.fill([batch * backbone.config.n_head], slot)], 1)
    h = backbone.embed(token[:, None])
    g = tf.tile(tf.cast(backbone.mask_emb, backbone.compute_dtype), [batch, 1, 1])
    # the two streams as two rows of one [B, 2, D] input: every position-wise matmul (projections, feed-forward)
    # reads its weights once for both (one position per step is bound by reading them)
    hg = tf.concat([h, g], 1)
    shared = None if backbone.config.untie_r else (backbone.r_w_bias, backbone.r_r_bias, backbone.r_s_bias)
    per_layer, embedding_pieces = constants
    new_kv = []
    for layer, (keys, values), c in zip(backbone.xl_layers, kv, per_layer):
        att = layer.rel_attn
        biases = shared or (att.r_w_bias, att.r_r_bias, att.r_s_bias)
        # q, k and v of both rows in one product (the content row's key and value: a one-row product [1, D] x
        # [D, D] was a slow loop in XLA, 1.0 of 4.6 ms of a step of the 4 x 256 model)
        q, k_new, v_new = tf.unstack(  # each [B, 2, H, Dh]
            tf.reshape(column_pieces.product(hg, c.qkv), [batch, 2, 3, att.n_head, att.d_head]), axis=2)
        keys = tf.tensor_scatter_nd_update(keys, where, tf.reshape(k_new[:, 0], [-1, att.d_head]))
        values = tf.tensor_scatter_nd_update(values, where, tf.reshape(v_new[:, 0], [-1, att.d_head]))
        new_kv.append((keys, values))
        content = _attend(att, q[:, 0], keys, values, c.position_keys, biases, content_rows, content_blocked)
        query = _attend(att, q[:, 1], keys, values, c.position_keys, biases, content_rows - 1, query_blocked)
        attended = att._post_attention(hg, tf.stack([content, query], 1), False, output_pieces=c.output)
        hg = layer.ff(attended, training=False, kernel_pieces=c.feed_forward)
    return model.lm_head.transposed_logits(hg[:, 1], embedding_pieces), new_kv, real


# -------------------------------------------------------------------------------------------- choosing
def _mix32(x):
    """murmur3's 32-bit finalizer (a bijective mixer) on uint32."""
    x = tf.bitwise.bitwise_xor(x, tf.bitwise.right_shift(x, tf.constant(16, tf.uint32)))
    x = x * tf.constant(0x85EBCA6B, tf.uint32)
    x = tf.bitwise.bitwise_xor(x, tf.bitwise.right_shift(x, tf.constant(13, tf.uint32)))
    x = x * tf.constant(0xC2B2AE35, tf.uint32)
    return tf.bitwise.bitwise_xor(x, tf.bitwise.right_shift(x, tf.constant(16, tf.uint32)))


def gumbel_noise(seed, row_keys, step, n_token: int):
    """`[B, n_token]` float32 Gumbel(0, 1) noise, a pure function of `(seed, row_keys [B], step, token)` (uint32
    scalars/vectors; a counter-based hash, so a row's draws depend on its key, never on its batch)."""
    base = _mix32(tf.bitwise.bitwise_xor(row_keys, _mix32(seed)))
    base = _mix32(base + tf.cast(step, tf.uint32) * tf.constant(0x9E3779B9, tf.uint32))
    tokens = _mix32(tf.cast(tf.range(n_token), tf.uint32) + tf.constant(0x632BE5AB, tf.uint32))
    bits = _mix32(tf.bitwise.bitwise_xor(base[:, None], tokens[None, :]))
    uniform = (tf.cast(tf.bitwise.right_shift(bits, tf.constant(8, tf.uint32)), tf.float32) + 0.5) * 2.0 ** -24
    return -tf.math.log(-tf.math.log(uniform))


# What shapes a compiled program (seed, temperature, top_p and the penalty are its inputs: no retrace for them)
_Structure = collections.namedtuple("_Structure", "greedy top_k top_p penalty layout max_new_tokens stop_ids "
                                                  "jit_compile")


def _structure(s: GenerationSettings) -> _Structure:
    return _Structure(s.temperature == 0, s.top_k, s.top_p < 1.0, s.repetition_penalty != 1.0, s.layout,
                      s.max_new_tokens, s.stop_ids, s.jit_compile)


def _values(s: GenerationSettings) -> Dict[str, tf.Tensor]:
    return {"seed": tf.constant(s.seed & 0xFFFFFFFF, tf.uint32), "temperature": tf.constant(s.temperature, tf.float32),
            "top_p": tf.constant(s.top_p, tf.float32), "penalty": tf.constant(s.repetition_penalty, tf.float32)}


def sampling_logits(logits, seen, structure: _Structure, values):
    """The logits whose softmax the next token is drawn from: repetition penalty on `seen [B, V]` (True =
    in the prompt or output), then `/ temperature`, then top-k and top-p (filtered tokens get -1e30).

    `structure.greedy` None: greedy or sampling is decided at run time (`temperature == 0` is greedy; the
    division then uses 1); `values["top_k"]`, when given, is a run-time k in `[0, structure.top_k]` (0 = off)."""
    x = logits
    if structure.penalty:
        pen = values["penalty"]
        x = tf.where(seen, tf.where(x > 0, x / pen, x * pen), x)
    if structure.greedy:
        return x
    temperature = values["temperature"]
    if structure.greedy is None:
        temperature = tf.where(temperature > 0, temperature, tf.ones_like(temperature))
    x = x / temperature
    if structure.top_k:
        best = tf.math.top_k(x, k=min(structure.top_k, x.shape[-1])).values
        if "top_k" in values:  # a run-time k within the compiled bound
            k = tf.cast(values["top_k"], tf.int32)
            kth = tf.gather(best, tf.maximum(tf.minimum(k, best.shape[-1]) - 1, 0), axis=1)[:, None]
            x = tf.where((k > 0) & (x < kth), NEG, x)
        else:
            x = tf.where(x < best[:, -1:], NEG, x)
    if structure.top_p:
        ordered = tf.sort(x, axis=-1, direction="DESCENDING")
        before = tf.math.cumsum(tf.nn.softmax(ordered, -1), axis=-1, exclusive=True)
        cut = tf.reduce_min(tf.where(before < values["top_p"], ordered, -NEG), -1, keepdims=True)
        x = tf.where((values["top_p"] < 1.0) & (x < cut), NEG, x)  # top_p = 1 keeps every token
    return x


def _choose(logits, seen, step, row_keys, structure: _Structure, values, forced=None):
    """`(token [B], log-prob under the model [B], log-prob under the sampling distribution [B])`."""
    x = sampling_logits(logits, seen, structure, values)
    if structure.greedy:
        token = tf.argmax(x, -1, output_type=tf.int32)
    else:
        noise = gumbel_noise(values["seed"], row_keys, step, x.shape[-1])
        token = tf.argmax(x + noise, -1, output_type=tf.int32)
        if structure.greedy is None:  # decided at run time
            token = tf.where(values["temperature"] > 0, token, tf.argmax(x, -1, output_type=tf.int32))
    if forced is not None:
        token = forced
    pick = lambda v: tf.gather(v, token, batch_dims=1)  # noqa: E731
    sampled = tf.zeros_like(pick(logits)) if structure.greedy else pick(tf.nn.log_softmax(x, -1))
    if structure.greedy is None:
        sampled = tf.where(values["temperature"] > 0, sampled, tf.zeros_like(sampled))
    return token, pick(tf.nn.log_softmax(logits, -1)), sampled


# ----------------------------------------------------------------------------------------- the program
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
    mem_len = _memory_length(s, _round_up(max(len(p) for p in prompts), s.pad_multiple))
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
    program = _program_for(model, _structure(s))
    out = program(tf.constant(ids), tf.constant(mask), tf.constant((keys & 0xFFFFFFFF).astype(np.uint32)),
                  _values(s), None if forced is None else tf.constant(forced), mem_len, seg, bool(return_logits))
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


_PROGRAMS: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def _program_for(model, structure: _Structure):
    """The `tf.function` of `(model, structure)` (it holds the model weakly: the cache never keeps it alive)."""
    per_model = _PROGRAMS.setdefault(model, {})
    if structure not in per_model:
        ref = weakref.ref(model)
        per_model[structure] = tf.function(lambda *args: _run(ref(), structure, *args),
                                           jit_compile=structure.jit_compile, autograph=False)
    return per_model[structure]


def _run(model, st: _Structure, ids, mask, row_keys, values, forced, mem_len: int, seg: int, return_logits: bool):
    """The program: prompt pass, first choice, `tf.while_loop` of one-position steps. ids `[B, Lp]` int32,
    mask `[B, Lp]` bool (True = real), row_keys `[B]` uint32, forced `[B, N]` int32 or None."""
    c = model.backbone.config
    batch, n_new, vocab = tf.shape(ids)[0], st.max_new_tokens, c.n_token
    dtype = model.backbone.compute_dtype
    mems = [tf.zeros([batch, mem_len, c.d_model], dtype) for _ in range(c.n_layer)]
    mem_real = tf.zeros([batch, mem_len], tf.bool)

    # ---- the prompt, segment by segment; the last segment's query predicts the first new token
    # (the first segment reads no memory: before it every slot is empty, and a fully masked slot adds exactly 0
    # to each softmax while the relative distances between real positions stay the same, so the logits are the
    # same to float rounding (~2e-6, the order of the sums); the pass attends over S keys, not M + S: at a
    # 512-token prompt and M = 768, 2.5x fewer. A row without any real token, which callers refuse, would now
    # spread its attention over S blocked keys instead of M + S: meaningless either way.)
    n_seg = ids.shape[1] // seg
    for i in range(n_seg):
        part, real = ids[:, i * seg:(i + 1) * seg], mask[:, i * seg:(i + 1) * seg]
        read = (mems, mem_real) if i else ([m[:, :0] for m in mems], mem_real[:, :0])
        content_mask, query_mask = _segment_masks(read[1], real, causal=st.layout == "causal")
        logits, inputs = _forward(model, part, read[0], content_mask, query_mask if i == n_seg - 1 else None,
                                  causal=st.layout == "causal")
        mems = [cache_mems(x, m, mem_len, None) for x, m in zip(inputs, mems)]  # last M of [mems; inputs]
        mem_real = tf.concat([mem_real, real], 1)[:, -mem_len:]

    seen = tf.zeros([batch, vocab], tf.bool)
    if st.penalty:
        where = tf.stack([tf.repeat(tf.range(batch), ids.shape[1]), tf.reshape(ids, [-1])], 1)
        seen = tf.tensor_scatter_nd_max(tf.zeros([batch, vocab], tf.int32), where,
                                        tf.reshape(tf.cast(mask, tf.int32), [-1])) > 0
    stop_ids = tf.constant(list(st.stop_ids) or [-1], tf.int32)
    columns = tf.range(n_new)

    def record(k, logits, seen, finished, lengths, stopped, buffers):
        token, lp, slp = _choose(logits, seen, k, row_keys, st, values, None if forced is None else forced[:, k])
        live = tf.logical_not(finished)
        at_k = tf.equal(columns, k)[None, :] & live[:, None]
        ids_out, lp_out, slp_out, logits_out = buffers
        ids_out = tf.where(at_k, token[:, None], ids_out)
        lp_out = tf.where(at_k, lp[:, None], lp_out)
        slp_out = tf.where(at_k, slp[:, None], slp_out)
        if return_logits:
            logits_out = tf.where(at_k[:, :, None], logits[:, None, :], logits_out)
        hit = live & tf.reduce_any(tf.equal(token[:, None], stop_ids[None, :]), -1)
        if st.penalty:
            seen = seen | tf.cast(tf.one_hot(token, vocab, dtype=tf.int32), tf.bool)
        return (token, seen, finished | hit, lengths + tf.cast(live, tf.int32), stopped | hit,
                (ids_out, lp_out, slp_out, logits_out))

    buffers = (tf.fill([batch, n_new], PADDING_ID), tf.zeros([batch, n_new]), tf.zeros([batch, n_new]),
               tf.zeros([batch, n_new, vocab] if return_logits else [batch, 1, 1]))
    none = tf.zeros([batch], tf.bool)
    token, seen, finished, lengths, stopped, buffers = record(
        tf.constant(0), logits, seen, none, tf.zeros([batch], tf.int32), none, buffers)

    # ---- one position per step: the token's content stream at t, the query stream at t + 1
    constants = _loop_constants(model, mem_len)
    start = ids.shape[1] - 1  # the token chosen at step k sits at position start + k

    def body(k, token, kv, real, seen, finished, lengths, stopped, buffers):
        logits, kv, real = _step(model, token, start + k, kv, real, constants)
        token, seen, finished, lengths, stopped, buffers = record(k, logits, seen, finished, lengths, stopped,
                                                                  buffers)
        return k + 1, token, kv, real, seen, finished, lengths, stopped, buffers

    limit = values.get("max_new_tokens", n_new)  # a run-time bound <= n_new (the buffers' width)

    def cond(k, token, kv, real, seen, finished, *rest):
        return (k < limit) & tf.logical_not(tf.reduce_all(finished))

    kv, real = _ring(model, mems, mem_real, ids.shape[1])
    state = tf.while_loop(cond, body, (tf.constant(1), token, kv, real, seen, finished, lengths, stopped, buffers),
                          maximum_iterations=max(n_new - 1, 0))
    lengths, stopped, (ids_out, lp_out, slp_out, logits_out) = state[6], state[7], state[8]
    return {"ids": ids_out, "log_probs": lp_out, "sampling_log_probs": slp_out, "lengths": lengths,
            "stopped": stopped, "logits": logits_out if return_logits else None}


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
    st = _structure(settings)
    mem_len = _memory_length(settings, _round_up(prompt_len, settings.pad_multiple))
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
        out = _run(model, st, input_ids, attention_mask > 0, keys, values, None, mem_len, seg, False)
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
    int32 in `[1, max_new_tokens]`. Outputs as `_run`'s, `[B, max_new_tokens]` wide (a row ends at its `lengths`).
    The caller enforces the bounds; greedy and sampling share the program (greedy is decided per request)."""
    check_model(model, layout, stop_ids)
    if prompt_len % min(segment_len, prompt_len):
        raise ValueError(f"prompt_len {prompt_len} must be a multiple of segment_len {segment_len} (or below it)")
    st = _Structure(greedy=None, top_k=int(max_top_k), top_p=True, penalty=True, layout=layout,
                    max_new_tokens=int(max_new_tokens), stop_ids=tuple(int(i) for i in stop_ids), jit_compile=True)
    mem_len = prompt_len + int(max_new_tokens)
    seg = min(segment_len, prompt_len)

    @tf.function(jit_compile=True, autograph=False)
    def program(ids, mask, row_keys, values):
        return _run(model, st, ids, mask, row_keys, values, None, mem_len, seg, False)
    return program


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
