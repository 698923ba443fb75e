"""A mixed-precision model's export with its weights stored in the compute dtype, rounded once.

A `mixed_bfloat16` (or `mixed_float16`) model keeps float32 variables and casts each to bfloat16 where it reads it,
on every call: served as is, every request pays those casts (13 ms of a 4 x 768 classifier's 245 ms at batch 32 on a
2-core AMX Xeon, bench/speed/README.md "Since: the gelu in float32"). `rounded_once` gives its twin in the pure
half-precision policy with the weights rounded once, here, to what those casts give; LayerNormalization keeps its
float32 `gamma` and `beta` (`layers/precision.py`), which the mixed model reads unrounded. So the twin computes
exactly the mixed model's numbers, from half the bytes of weights (`tests/models/test_task_families.py`).
"""

from __future__ import annotations

from xlnet_tf.layers.precision import stores_half


def rounded_once(model):
    """`model` itself unless `stores_half(model)`; then the same model (class and `get_config()`) in the pure
    policy of its compute dtype, with every weight rounded to that dtype (LayerNormalization's stay float32). Its
    outputs equal `model`'s exactly."""
    if not stores_half(model):
        return model
    half = model.dtype_policy.compute_dtype
    twin = type(model).from_config({**model.get_config(), "dtype": half})
    ours, theirs = model.weights, twin.weights
    if [w.path for w in ours] != [w.path for w in theirs]:
        raise ValueError(f"{type(model).__name__}: its {half} twin has other weights than the model "
                         f"({len(theirs)} against {len(ours)}): get_config() does not rebuild it")
    twin.set_weights(model.get_weights())  # each rounded to the twin's dtype (LayerNorm's stay float32)
    return twin
