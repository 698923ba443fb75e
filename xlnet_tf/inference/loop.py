"""The generation program's body: the prompt pass, the first choice, and a `tf.while_loop` of one-position steps.

Everything in it (gathers, scatters, roll, sort, top_k, the uint32 hash) compiles with XLA; `programs.py` wraps it
in the `tf.function`s that `generate`, a SavedModel and a server call.
"""

from __future__ import annotations

import tensorflow as tf

from xlnet_tf.backbone import cache_mems
from xlnet_tf.inference import decoding, native_step, sampling
from xlnet_tf.text.layout import PADDING_ID


def run(model, st, ids, mask, row_keys, values, forced, mem_len: int, seg: int, return_logits: bool):
    """The program: prompt pass, first choice, `tf.while_loop` of one-position steps.

    st: a `settings.ProgramStructure`; ids `[B, Lp]` int32 left-padded, mask `[B, Lp]` bool (**True = real
    token**), row_keys `[B]` uint32, values the run-time scalars (`sampling`'s; `max_new_tokens` int32 when given:
    a run-time bound `<= st.max_new_tokens`), forced `[B, N]` int32 or None (teacher forcing), mem_len the memory
    buffer M, seg the prompt segment length (it tiles Lp).
    Returns a dict: `ids`, `log_probs`, `sampling_log_probs` `[B, N]` (N = st.max_new_tokens; a row ends at its
    `lengths [B]`), `stopped [B]` (True = ended at a stop id), `logits [B, N, n_token]` float32 or None.
    """
    c = model.backbone.config
    batch, n_new, vocab = tf.shape(ids)[0], st.max_new_tokens, c.n_token
    dtype = model.backbone.compute_dtype

    # ---- the prompt, segment by segment; the last segment's query predicts the first new token
    # (the first segment reads no memory: before it every slot is empty, and a fully masked slot adds exactly 0
    # to each softmax while the relative distances between real positions stay the same, so the logits are the
    # same to float rounding (the order of the sums); the pass attends over S keys, not M + S. A row without any
    # real token, which callers refuse, would now spread its attention over S blocked keys instead of M + S:
    # meaningless either way.)
    def prompt():  # the prompt pass, the ring of keys and values it leaves, and what every step reads unchanged
        mems = [tf.zeros([batch, mem_len, c.d_model], dtype) for _ in range(c.n_layer)]
        mem_real = tf.zeros([batch, mem_len], tf.bool)
        n_seg = ids.shape[1] // seg
        for i in range(n_seg):
            part, real = ids[:, i * seg:(i + 1) * seg], mask[:, i * seg:(i + 1) * seg]
            read = (mems, mem_real) if i else ([m[:, :0] for m in mems], mem_real[:, :0])
            content_mask, query_mask = decoding.segment_masks(read[1], real, causal=st.layout == "causal")
            logits, inputs = decoding.read_segment(model, part, read[0], content_mask,
                                                   query_mask if i == n_seg - 1 else None,
                                                   causal=st.layout == "causal")
            mems = [cache_mems(x, m, mem_len, None) for x, m in zip(inputs, mems)]  # last M of [mems; inputs]
            mem_real = tf.concat([mem_real, real], 1)[:, -mem_len:]
        kv, real = decoding.ring_cache(model, mems, mem_real, ids.shape[1])
        return logits, kv, real, (native_step if st.native else decoding).step_kernels(model, mem_len)

    if st.native:  # the prompt pass compiled (XLA, where st.jit_compile), the steps native ops in a graph loop
        logits, kv, real, kernels = tf.function(prompt, jit_compile=st.jit_compile, autograph=False)()
    else:
        logits, kv, real, kernels = prompt()
    step = native_step.decode_position if st.native else decoding.decode_position

    seen = tf.zeros([batch, vocab], tf.bool)
    if st.penalty:
        where = tf.stack([tf.repeat(tf.range(batch), ids.shape[1]), tf.reshape(ids, [-1])], 1)
        seen = tf.tensor_scatter_nd_max(tf.zeros([batch, vocab], tf.int32), where,
                                        tf.reshape(tf.cast(mask, tf.int32), [-1])) > 0
    stop_ids = tf.constant(list(st.stop_ids) or [-1], tf.int32)
    columns = tf.range(n_new)

    def record(k, logits, seen, finished, lengths, stopped, buffers):
        token, lp, slp = sampling.choose(logits, seen, k, row_keys, st, values,
                                         None if forced is None else forced[:, k])
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
    start = ids.shape[1] - 1  # the token chosen at step k sits at position start + k

    def body(k, token, kv, real, seen, finished, lengths, stopped, buffers):
        logits, kv, real = step(model, token, start + k, kv, real, kernels)
        token, seen, finished, lengths, stopped, buffers = record(k, logits, seen, finished, lengths, stopped,
                                                                  buffers)
        return k + 1, token, kv, real, seen, finished, lengths, stopped, buffers

    limit = values.get("max_new_tokens", n_new)  # a run-time bound <= n_new (the buffers' width)

    def cond(k, token, kv, real, seen, finished, *rest):
        return (k < limit) & tf.logical_not(tf.reduce_all(finished))

    state = tf.while_loop(cond, body, (tf.constant(1), token, kv, real, seen, finished, lengths, stopped, buffers),
                          maximum_iterations=max(n_new - 1, 0))
    lengths, stopped, (ids_out, lp_out, slp_out, logits_out) = state[6], state[7], state[8]
    return {"ids": ids_out, "log_probs": lp_out, "sampling_log_probs": slp_out, "lengths": lengths,
            "stopped": stopped, "logits": logits_out if return_logits else None}
