"""Request checks shared by the SavedModel signatures (xlnet_tf/serving/export.py, serving_tagging.py, serving_lm.py):
each failure is an error that names the signature and the input; and `signature_function`, how each signature
becomes a `tf.function`."""

from __future__ import annotations

import tensorflow as tf


def signature_function(fn, input_signature):
    """`fn` as a signature's `tf.function`: `input_signature` fixed, traced by `tf.saved_model.save` itself (hand
    it the function, not a concrete function traced before: the save context is part of the tracing cache key,
    so it would be traced twice), and without autograph (the signatures use explicit `tf.while_loop` / `tf.cond`
    only: a tensor-valued Python condition fails at trace time instead of being converted)."""
    return tf.function(fn, input_signature=input_signature, autograph=False)


def _first_real_column(attention_mask):
    """The first column where some row is real (left-padded inputs), at most the last column."""
    real = tf.reduce_max(tf.cast(attention_mask, tf.int32), axis=0)  # [L]: 1 where some row is real
    first = tf.argmax(tf.concat([real, [1]], 0), output_type=tf.int32)
    return tf.maximum(tf.minimum(first, tf.shape(attention_mask)[1] - 1), 0)


def _trim_left(input_ids, segment_ids, attention_mask):
    """Drops leading columns that are padding in every row (left-padded inputs), keeping >= 1 column."""
    first = _first_real_column(attention_mask)
    return input_ids[:, first:], segment_ids[:, first:], attention_mask[:, first:]


def _rank_is(signature: str, name: str, tensor, rank: int):
    """`tensor`, checked at run time to have `rank` dimensions (a loaded signature called in Python with a
    tensor of another rank raises TypeError and then runs the function anyway)."""
    # EnsureShape checks the run-time shape (tf.rank would be folded to the signature's static rank)
    return tf.ensure_shape(tensor, [None] * rank, name=f"{signature}_{name}_must_be_rank_{rank}")


def _valid_utf8(name: str, text, rank: int = 1, signature: str = "serving_default"):
    """`text` unchanged, after asserting its rank and that every element is valid UTF-8 without control
    characters other than tab and line ends (the message names the input)."""
    text = _rank_is(signature, name, text, rank)
    flat = tf.reshape(text, [-1])
    clean = tf.strings.unicode_transcode(flat, "UTF-8", "UTF-8", errors="replace", replacement_char=0xFFFD)
    check = tf.debugging.Assert(tf.reduce_all(tf.equal(clean, flat)),
                                [f"{signature}: {name} holds invalid UTF-8; send UTF-8 text (the record "
                                 "builders reject such input too)"])
    with tf.control_dependencies([check]):  # the builders' rule (tfrecords/tables.decode_lines): no control
        # character but tab and line ends
        plain = tf.strings.regex_full_match(flat, r"[^\x00-\x08\x0b\x0c\x0e-\x1f\x7f]*")
    control = tf.debugging.Assert(tf.reduce_all(plain), [
        f"{signature}: {name} holds a control character other than tab and line ends; remove it (the record "
        "builders reject such input too)"])
    with tf.control_dependencies([check, control]):
        return tf.identity(text)


def _same_batch(names, *tensors, signature: str = "serving_default"):
    """Asserts the inputs of one request have the same batch size."""
    first = tf.shape(tensors[0])[0]
    return [tf.debugging.Assert(tf.equal(tf.shape(t)[0], first),
                                [f"{signature}: {name} and {names[0]} must have the same batch size"])
            for name, t in zip(names[1:], tensors[1:])]
