"""`TextSettings`: how text became ids for an artifact, recorded once and compared as one object.

Two artifacts agree on their tokenization when their SentencePiece models have the same bytes (`spiece_sha256`;
the path may move) and they normalize text the same way (`uncased`: lower-cased before SentencePiece;
`keep_accents`: accents kept rather than stripped). Record sets, model_dirs and exports store it whole. A
`spiece_sha256` of None says no SentencePiece model file was at hand (a model_dir written without one).
"""

from __future__ import annotations

import dataclasses
from typing import Optional


@dataclasses.dataclass(frozen=True)
class TextSettings:
    spiece_sha256: Optional[str]
    uncased: bool = False
    keep_accents: bool = False

    @classmethod
    def of_model(cls, spiece_model: str, uncased: bool = False, keep_accents: bool = False) -> "TextSettings":
        """The settings of the SentencePiece model file `spiece_model` (its SHA-256 read now)."""
        from xlnet_tf import files

        return cls(files.file_sha256(spiece_model), bool(uncased), bool(keep_accents))
