"""The parameters of a pretraining record build (`PretrainConfig`, validated as a whole), its error, and the
names of its files.

Every parameter that determines the records' content is a field here; a build's fingerprint
(`PretrainConfig.fingerprint_params`) covers them, so records of other parameters are never mixed or silently
reused. The builder is `pretrain_data.py`; the layout of the records is DESIGN §4 and `permutation.py`.
"""

from __future__ import annotations

import dataclasses
import os
from typing import Any, Dict, Tuple

from tfrecords.pretrain import permutation
from xlnet_tf.errors import UserError


class BuildError(UserError):
    """Bad builder input or parameters."""


@dataclasses.dataclass(frozen=True)
class PretrainConfig:
    """Every parameter that determines the records' content."""

    seq_len: int = 512
    reuse_len: int = 256
    num_predict: int = 85
    perm_size: int = 256
    mask_alpha: float = 6.0
    mask_beta: float = 1.0
    max_gram: int = 5
    bi_data: bool = True
    global_batch_size: int = 16
    num_replicas: int = 1
    num_passes: int = 1
    seed: int = 0
    num_shards: int = 1
    uncased: bool = False
    keep_accents: bool = False
    use_eod: bool = True
    split: str = "train"
    skip_invalid_utf8: bool = False
    # "plm": XLNet's permutation LM. "mlm": BERT's masked LM on the same pipeline: the same whole-word
    # spans pick `mlm_mask_rate` of the non-functional tokens of each part; of those, `mlm_mask_token_prob`
    # become <mask>, `mlm_random_token_prob` a random non-special token, the rest stay; no factorization
    # order (perm_rank all plain context), predicted from the content stream.
    objective: str = "plm"
    mlm_mask_rate: float = 0.15
    mlm_mask_token_prob: float = 0.8
    mlm_random_token_prob: float = 0.1
    # Store the next-sentence label of the A/B split (B is A's continuation with probability 1/2, else a
    # random span, as the original builder always did) for an optional NSP loss; off by default, as XLNet.
    nsp: bool = False

    @property
    def num_rows(self) -> int:
        """Independent text streams per shard (half the batch with bi_data)."""
        return self.global_batch_size // 2 if self.bi_data else self.global_batch_size

    @property
    def per_replica_batch_size(self) -> int:
        return self.global_batch_size // self.num_replicas

    def validate(self) -> None:
        """Raise BuildError naming the first bad parameter."""
        L, R, P = self.seq_len, self.reuse_len, self.perm_size
        if L <= 0:
            raise BuildError(f"seq_len must be > 0, got {L}")
        if not 0 < R <= L - 5:
            raise BuildError(f"reuse_len must be in (0, seq_len - 5] so that A and B get at "
                             f"least one token each, got reuse_len={R}, seq_len={L}")
        if P <= 0 or R % P or (L - R) % P:
            raise BuildError(f"perm_size={P} must divide both halves: reuse_len={R} and "
                             f"seq_len - reuse_len={L - R}")
        if self.num_predict <= 0:
            raise BuildError(f"num_predict must be > 0, got {self.num_predict}")
        k0, k1 = permutation.split_num_predict(self.num_predict, L, R)
        if k0 > R or k1 > L - R - 1:
            raise BuildError(f"num_predict={self.num_predict} too large for seq_len={L}")
        if self.mask_alpha <= 0 or self.mask_beta <= 0 or self.max_gram < 1:
            raise BuildError("mask_alpha, mask_beta and max_gram must be positive")
        B, C = self.global_batch_size, self.num_replicas
        if B <= 0 or C <= 0 or B % C:
            raise BuildError(f"global_batch_size={B} must be a positive multiple of "
                             f"num_replicas={C}")
        if self.bi_data and B % (2 * C):
            raise BuildError(f"bi_data needs an even per-replica batch: global_batch_size="
                             f"{B} is not divisible by 2 * num_replicas={2 * C}")
        if self.num_passes < 1 or self.num_shards < 1:
            raise BuildError("num_passes and num_shards must be >= 1")
        if self.seed < 0:
            raise BuildError("seed must be >= 0")
        if not self.split or "-" in self.split or os.sep in self.split:
            raise BuildError(f"bad split name {self.split!r}")
        if self.objective not in OBJECTIVES:
            raise BuildError(f"objective must be one of {OBJECTIVES}, got {self.objective!r}")
        if self.objective == "mlm":
            if not 0 < self.mlm_mask_rate < 1:
                raise BuildError(f"mlm_mask_rate must be in (0, 1), got {self.mlm_mask_rate}")
            pm, pr = self.mlm_mask_token_prob, self.mlm_random_token_prob
            if pm < 0 or pr < 0 or pm + pr > 1:
                raise BuildError(f"mlm_mask_token_prob={pm} and mlm_random_token_prob={pr} must be >= 0 "
                                 "with a sum <= 1")
            k0, k1 = mlm_goals(self)
            if k0 + k1 > self.num_predict:
                raise BuildError(f"mlm_mask_rate={self.mlm_mask_rate} masks {k0 + k1} tokens of "
                                 f"seq_len={L}, more than num_predict={self.num_predict} slots")

    def fingerprint_params(self) -> Dict[str, Any]:
        """The parameters a build's fingerprint covers; the MLM knobs only for MLM builds and `nsp` only
        when on, so permutation-LM records built before these options existed keep their fingerprint."""
        params = dataclasses.asdict(self)
        if not self.nsp:
            params.pop("nsp")
        if self.objective == "plm":
            for k in ("objective", "mlm_mask_rate", "mlm_mask_token_prob", "mlm_random_token_prob"):
                params.pop(k)
        return params


OBJECTIVES = ("plm", "mlm")
NUM_FUNCTIONAL_IN_NEW_PART = 3  # <sep> after A, <sep> after B, <cls>


def mlm_goals(cfg: PretrainConfig) -> Tuple[int, int]:
    """Tokens MLM masks in the (reuse, new) parts: `round(mlm_mask_rate * n)` of each part's n
    non-functional tokens (19 = 10 + 9 of 128 at reuse_len 64)."""
    n0 = cfg.reuse_len
    n1 = cfg.seq_len - cfg.reuse_len - NUM_FUNCTIONAL_IN_NEW_PART
    return int(round(cfg.mlm_mask_rate * n0)), int(round(cfg.mlm_mask_rate * n1))


def record_file_name(split: str, pass_id: int, shard: int, num_shards: int) -> str:
    """`<split>-<pass>-<shard>-of-<num_shards>.tfrecord` (shard numbers zero-padded to 5 digits)."""
    return f"{split}-{pass_id}-{shard:05d}-of-{num_shards:05d}.tfrecord"
