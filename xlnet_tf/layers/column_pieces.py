"""A weight cut into column pieces, and the product of a few rows with it as one product per piece.

For a decoding loop (one or two rows per step, a step that mostly streams weights): the products of the same
rows with the column pieces of a kernel are independent, and XLA's CPU runtime runs independent thunks side by
side. Measured on the 2-core AVX2 host (every output consumed, alternating): lone two-row products with two
pieces against one, [2, 256] x [256, 768] 84 -> 70 us, [2, 256] x [256, 1024] 128 -> 99 us, [2, 1024] x
[1024, 256] 96 -> 88 us; a lone one-row product is slower in pieces (LM head [1, 256] x [256, 8000]: 0.23 ->
0.29 ms), but inside the 4 x 256 model's step (512-token memory, one process, 8 alternating rounds) the LM head
in two pieces gave 3.46 against 3.78 ms per token (median; better in 7 of 8 rounds). The sums over D are the
same sums: the result is the whole product's to float rounding of the same order (no reassociation).
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
