"""What a Keras task model (`xlnet_tf.models.task.Task`) accepts as data: the label checks (class ids, no strings,
no real values for a classification head) and the recognition of raw text batches.

Plain functions over numpy / TF values: `Task.fit` / `evaluate` / `predict` call them before any batch runs.
"""

from __future__ import annotations

from typing import Optional

import numpy as np
import tensorflow as tf

from xlnet_tf.errors import UserError


def num_rows(x) -> Optional[int]:
    """The number of examples in array data `x` (an array, or a dict / tuple of them): the first dimension
    shared by every array; None when unknown (other data, or arrays that disagree)."""
    if x is None or isinstance(x, (str, bytes, list, tf.data.Dataset)):
        return None
    sizes = set()
    for leaf in tf.nest.flatten(x):
        shape = getattr(leaf, "shape", None)
        if shape is None or len(shape) == 0 or shape[0] is None:
            return None
        sizes.add(int(shape[0]))
    return sizes.pop() if len(sizes) == 1 else None


def check_label_values(owner: str, labels, num_classes: Optional[int], real_valued_hint: str = "",
                       strings_message: str = "", ignore: Optional[int] = None) -> None:
    """In-memory labels (array, list, tensor; any shape) must be numbers and, with `num_classes`, class ids:
    integer-valued (`1.0` is accepted) and in `[0, num_classes)`, or `ignore` (a "no label here" value such as
    tagging's -100). Raises `UserError` naming them."""
    values = np.asarray(labels.numpy() if isinstance(labels, (tf.Tensor, tf.Variable)) else labels)
    if values.dtype.kind == "O":  # python objects: strings, or numbers that numpy did not type
        if any(isinstance(v, (str, bytes)) for v in values.ravel()):
            raise UserError(strings_message or f"{owner}: the labels are strings; labels must be numbers")
        try:
            values = values.astype(np.float64)
        except (TypeError, ValueError):
            raise UserError(f"{owner}: labels must be numbers, got {values.ravel()[:3].tolist()}") from None
    if values.dtype.kind in "US":
        raise UserError(strings_message or f"{owner}: the labels are strings; labels must be numbers")
    if values.dtype.kind not in "biuf":
        raise UserError(f"{owner}: labels must be numbers, got dtype {values.dtype}")
    if num_classes is None:
        return
    if values.dtype.kind == "f":
        real = values[~np.equal(values, np.round(values))]  # NaN included
        if real.size:
            raise UserError(f"{owner}: labels must be class ids, integers in [0, {num_classes}); got real values "
                            f"such as {real.ravel()[:3].tolist()}{real_valued_hint}")
    outside = values[((values < 0) | (values >= num_classes)) & ~np.equal(values, ignore if ignore is not None
                                                                          else np.nan)]
    if outside.size:
        raise UserError(f"{owner}: labels must be class ids in [0, {num_classes}); got "
                        f"{sorted(set(outside.ravel().tolist()))[:5]}")


def is_string_dtype(dtype) -> bool:
    if isinstance(dtype, np.dtype):
        return dtype.kind in ("U", "S")
    try:
        return tf.as_dtype(dtype) == tf.string
    except TypeError:
        return False


def is_one_text(value) -> bool:
    """A single string (not a batch): `str`, `bytes`, or a 0-d string array / tensor."""
    if isinstance(value, (str, bytes)):
        return True
    if isinstance(value, (np.ndarray, np.generic)):
        return value.ndim == 0 and value.dtype.kind in ("U", "S", "O")
    return isinstance(value, tf.Tensor) and value.dtype == tf.string and value.shape.rank == 0


def string_array(texts: list) -> np.ndarray:
    """A list of texts as an array `[N]` (an empty list as an empty string array, not numpy's float64)."""
    return np.asarray(texts) if len(texts) else np.zeros([0], dtype=str)


def is_text(value) -> bool:
    """A string, or an array / tensor of strings."""
    if isinstance(value, (str, bytes)):
        return True
    if isinstance(value, (tf.Tensor, tf.RaggedTensor)):
        return value.dtype == tf.string
    return isinstance(value, np.ndarray) and value.dtype.kind in ("U", "S", "O")
