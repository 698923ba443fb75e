"""A weight cut into column pieces, and the product of a few rows with it as one product per piece.

For a decoding loop (one or two rows per step): XLA's CPU runtime runs a one- or two-row product `[M, D] x
[D, F]` on one thread, at about half the memory bandwidth two threads reach (the step only streams weights,
so that is its speed). The products of the same rows with column pieces of the weight are independent, and
the runtime runs them side by side: on the 2-core AVX2 host, two pieces took a 4 x 256 model's step at a
512-token memory from 2.9-3.6 to 2.2-3.0 ms (three alternating rounds, `bench/generation_speed.py`), and a
lone `[2, 256] x [256, 768]` product from 71 to 21 us. The sums over D are the same sums: the result is
the whole product's to float rounding of the same order (no reassociation across pieces).
"""

from __future__ import annotations

from typing import Sequence, Tuple

import tensorflow as tf

# two threads on the hosts measured; more pieces (4) measured no faster
PIECES = 2


def split_columns(kernel: tf.Tensor, pieces: int = PIECES) -> Tuple[tf.Tensor, ...]:
    """`kernel [D, F]` -> `pieces` column blocks `[D, F_i]`, as even as F allows (F need not divide)."""
    size = kernel.shape[-1]
    edges = [size * i // pieces for i in range(pieces + 1)]
    return tuple(kernel[:, a:b] for a, b in zip(edges, edges[1:]) if b > a)


def product(x: tf.Tensor, pieces: Sequence[tf.Tensor]) -> tf.Tensor:
    """`x [..., D]` times the kernel whose `split_columns` are `pieces` -> `[..., F]`."""
    outs = [tf.tensordot(x, piece, 1) for piece in pieces]
    return tf.concat(outs, -1) if len(outs) > 1 else outs[0]
