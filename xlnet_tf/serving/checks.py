"""Request checks shared by the SavedModel signatures of every task (xlnet_tf/serving/): each failure is an error
that names the signature and the input, raised in the graph before any output is computed; and
`signature_function`, how each signature becomes a `tf.function`."""

from __future__ import annotations

from typing import Dict, List, Mapping, Sequence

import tensorflow as tf


def signature_function(fn, input_signature):
    """`fn` as a signature's `tf.function`: `input_signature` fixed, traced by `tf.saved_model.save` itself (hand
    it the function, not a concrete function traced before: the save context is part of the tracing cache key,
    so it would be traced twice), and without autograph (the signatures use explicit `tf.while_loop` / `tf.cond`
    only: a tensor-valued Python condition fails at trace time instead of being converted)."""
    return tf.function(fn, input_signature=input_signature, autograph=False)


def string_spec(name: str, rank: int = 1) -> tf.TensorSpec:
    """A raw-text input of a signature: `rank` dimensions of any size (the first is the batch)."""
    return tf.TensorSpec([None] * rank, tf.string, name=name)


def first_real_column(attention_mask):
    """`attention_mask [N, L]` (1 = real token), left-padded rows -> the first column where some row is real, at
    most the last column (a scalar int32)."""
    real = tf.reduce_max(tf.cast(attention_mask, tf.int32), axis=0)  # [L]: 1 where some row is real
    first = tf.argmax(tf.concat([real, [1]], 0), output_type=tf.int32)
    return tf.maximum(tf.minimum(first, tf.shape(attention_mask)[1] - 1), 0)


def trim_left(input_ids, segment_ids, attention_mask):
    """Left-padded `[N, L]` inputs without their leading columns that are padding in every row (>= 1 column
    kept)."""
    first = first_real_column(attention_mask)
    return input_ids[:, first:], segment_ids[:, first:], attention_mask[:, first:]


def rank_is(signature: str, name: str, tensor, rank: int):
    """`tensor`, checked at run time to have `rank` dimensions (a loaded signature called in Python with a
    tensor of another rank raises TypeError and then runs the function anyway)."""
    # EnsureShape checks the run-time shape (tf.rank would be folded to the signature's static rank)
    return tf.ensure_shape(tensor, [None] * rank, name=f"{signature}_{name}_must_be_rank_{rank}")


def valid_utf8(name: str, text, rank: int = 1, signature: str = "serving_default"):
    """`text` unchanged, after asserting its rank and that every element is valid UTF-8 without control
    characters other than tab and line ends (the message names the input)."""
    text = rank_is(signature, name, text, rank)
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


def same_batch(names: Sequence[str], *tensors, signature: str = "serving_default") -> List[tf.Operation]:
    """Asserts that the inputs of one request have the same batch size (none for a single input)."""
    first = tf.shape(tensors[0])[0]
    return [tf.debugging.Assert(tf.equal(tf.shape(t)[0], first),
                                [f"{signature}: {name} and {names[0]} must have the same batch size"])
            for name, t in zip(names[1:], tensors[1:])]


def checked_texts(signature: str, texts: Mapping[str, tf.Tensor], ranks: Dict[str, int] = None,
                  checks: Sequence[tf.Operation] = ()) -> List[tf.Tensor]:
    """The raw-text inputs of one request (name -> tensor, in signature order), returned in that order once every
    check passed: the same batch size, `checks` (the task's own), then each input's rank (`ranks`, default 1) and
    `valid_utf8`."""
    ranks = ranks or {}
    asserts = same_batch(list(texts), *texts.values(), signature=signature) + list(checks)
    with tf.control_dependencies(asserts):
        return [valid_utf8(name, text, rank=ranks.get(name, 1), signature=signature) for name, text in texts.items()]
