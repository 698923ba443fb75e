"""SentencePiece tokenization with XLNet's text normalization and special ids.

One module used verbatim by the pretraining builder (`tfrecords/`), the fine-tuning
builders and the runners, so that text is normalized identically everywhere.

Normalization (the original `prepro_utils.preprocess_text`):
  1. collapse whitespace (`" ".join(text.strip().split())`),
  2. turn ``` `` ``` and `''` into `"`,
  3. strip accents (NFKD, drop combining marks) unless `keep_accents`,
  4. lowercase if `lower` (the `uncased` option).
Piece encoding (the original `encode_pieces`) re-splits any piece that ends in a digit
followed by a comma, e.g. `▁2000,` -> `▁2000` + `,`.

Plain Python: no TensorFlow and no absl flags here.
"""

from __future__ import annotations

import hashlib
import os
import unicodedata
from typing import Iterable, List, Optional, Sequence, Union

import numpy as np

from xlnet_tf import files
from xlnet_tf.errors import UserError

# ---- special and segment ids: defined once, in the layout (re-exported here) ------------------
from xlnet_tf.text.layout import (  # noqa: E402,F401
    CLS_ID, EOD_ID, EOP_ID, MASK_ID, PAD_ID, S_END_ID, S_ID, SEG_ID_A, SEG_ID_B, SEG_ID_CLS, SEG_ID_PAD,
    SEG_ID_SEP, SEP_ID, UNK_ID)

SPECIAL_SYMBOLS = {
    "<unk>": UNK_ID,
    "<s>": S_ID,
    "</s>": S_END_ID,
    "<cls>": CLS_ID,
    "<sep>": SEP_ID,
    "<pad>": PAD_ID,
    "<mask>": MASK_ID,
    "<eod>": EOD_ID,
    "<eop>": EOP_ID,
}
# Tokens that take part in the factorization order but are never prediction targets.
FUNCTIONAL_IDS = (SEP_ID, CLS_ID)

SPIECE_UNDERLINE = "\u2581"  # "▁"

# A piece "starts a word" if it begins with "▁" or "<" (special symbols), or is one
# punctuation character (the original data_utils._is_start_piece: string.punctuation with the
# apostrophe replaced by a second '"' and without "<=>"; so "'s" continues the word before it).
_START_PUNCTUATION = frozenset('!"#$%&()*+,-./:;?@[\\]^_`{|}~')


def is_word_start_piece(piece: str) -> bool:
    """True if `piece` begins a new word (used for whole-word span masking)."""
    return (piece.startswith(SPIECE_UNDERLINE) or piece.startswith("<")
            or piece in _START_PUNCTUATION)


def preprocess_text(text: str, lower: bool = False, remove_space: bool = True,
                    keep_accents: bool = False) -> str:
    """XLNet text normalization (the original `prepro_utils.preprocess_text`)."""
    if isinstance(text, bytes):
        text = text.decode("utf-8")
    out = " ".join(text.strip().split()) if remove_space else text
    out = out.replace("``", '"').replace("''", '"')
    if not keep_accents and not out.isascii():  # ASCII is invariant under NFKD
        out = unicodedata.normalize("NFKD", out)
        out = "".join(c for c in out if not unicodedata.combining(c))
    if lower:
        out = out.lower()
    return out


def _needs_digit_comma_split(piece: str) -> bool:
    return len(piece) > 1 and piece[-1] == "," and piece[-2].isdigit()


def encode_pieces(sp, text: str, sample: bool = False) -> List[str]:
    """Pieces of already-normalized `text`, with the original digit-comma re-split.

    Args:
      sp: a `sentencepiece.SentencePieceProcessor`.
      text: normalized text (see `preprocess_text`).
      sample: subword regularization (`SampleEncodeAsPieces(text, 64, 0.1)`).
    """
    if sample:
        pieces = sp.SampleEncodeAsPieces(text, 64, 0.1)
    else:
        pieces = sp.EncodeAsPieces(text)
    new_pieces: List[str] = []
    for piece in pieces:
        if _needs_digit_comma_split(piece):
            cur = sp.EncodeAsPieces(piece[:-1].replace(SPIECE_UNDERLINE, ""))
            if piece[0] != SPIECE_UNDERLINE and cur and cur[0][0] == SPIECE_UNDERLINE:
                if len(cur[0]) == 1:
                    cur = cur[1:]
                else:
                    cur[0] = cur[0][1:]
            cur.append(piece[-1])
            new_pieces.extend(cur)
        else:
            new_pieces.append(piece)
    return new_pieces


def encode_ids(sp, text: str, sample: bool = False) -> List[int]:
    """Ids of already-normalized `text` (no special tokens added)."""
    return [sp.PieceToId(p) for p in encode_pieces(sp, text, sample=sample)]


file_sha256 = files.file_sha256  # the SentencePiece model checksum of manifests (xlnet_tf/files.py)


class XLNetTokenizer:
    """SentencePiece model + XLNet normalization, with the special-id layout checked.

    Args:
      model_file: path of a SentencePiece `.model` (or pass `model_proto` bytes).
      model_proto: serialized model, alternative to `model_file`.
      uncased: lowercase the text before encoding (`lower=True` in the original).
      keep_accents: keep accents; default False strips them (the original's default,
        whether cased or uncased).
      check_special_ids: raise ValueError unless `<unk>`0 ... `<eop>`8 match.
      processor: an already loaded `SentencePieceProcessor` (or an object with its
        methods), instead of a model file or proto.
    """

    def __init__(self, model_file: Optional[Union[str, os.PathLike]] = None,
                 model_proto: Optional[bytes] = None, uncased: bool = False,
                 keep_accents: bool = False, check_special_ids: bool = True,
                 processor=None):
        if sum(x is not None for x in (model_file, model_proto, processor)) != 1:
            raise ValueError("pass exactly one of model_file, model_proto or processor")
        if model_file is not None:
            model_file = os.fspath(model_file)
            if not os.path.isfile(model_file):
                raise UserError(f"SentencePiece model not found: {model_file}")
            with open(model_file, "rb") as f:
                model_proto = f.read()
        if processor is None:
            import sentencepiece as spm  # local: keeps the module importable without it

            processor = spm.SentencePieceProcessor()
            try:
                processor.LoadFromSerializedProto(model_proto)
            except (RuntimeError, OSError, TypeError) as e:
                where = model_file or "the given model_proto"
                raise UserError(f"{where} is not a usable SentencePiece model ({e}); give the .model file "
                                "written by spm training (tfrecords/spm.py)") from None
        self.model_file = model_file
        self.model_proto = model_proto
        self.sha256 = hashlib.sha256(model_proto).hexdigest() if model_proto else None
        self.uncased = bool(uncased)
        self.keep_accents = bool(keep_accents)
        self.sp = processor
        self.vocab_size = self.sp.GetPieceSize()
        if check_special_ids:
            try:
                check_special_symbols(self.sp)
            except UserError as e:
                raise UserError(f"{model_file or 'model_proto'}: {e}") from None
        pieces = [self.sp.IdToPiece(i) for i in range(self.vocab_size)]
        self._digit_comma = np.array([_needs_digit_comma_split(p) for p in pieces], bool)
        self._word_start = np.array([is_word_start_piece(p) for p in pieces], bool)

    # -- text -> pieces / ids --------------------------------------------------------------
    def normalize(self, text: str) -> str:
        return preprocess_text(text, lower=self.uncased, keep_accents=self.keep_accents)

    def tokenize(self, text: str, sample: bool = False) -> List[str]:
        """Pieces of raw `text` (normalized here)."""
        return encode_pieces(self.sp, self.normalize(text), sample=sample)

    def encode(self, text: str, sample: bool = False) -> List[int]:
        """Ids of raw `text` (normalized here); no special tokens added."""
        return encode_ids(self.sp, self.normalize(text), sample=sample)

    def encode_batch(self, texts: Sequence[str]) -> List[List[int]]:
        """`[encode(t) for t in texts]`, faster: one batched SentencePiece call; only
        texts containing a digit-comma piece go through the piece-level path."""
        norm = [self.normalize(t) for t in texts]
        out = self.sp.encode(norm, out_type=int, num_threads=1) if norm else []
        dc = self._digit_comma
        for k, ids in enumerate(out):
            if ids and dc[np.asarray(ids)].any():
                out[k] = encode_ids(self.sp, norm[k])
        return out

    def decode(self, ids: Iterable[int]) -> str:
        return self.sp.DecodeIds([int(i) for i in ids])

    def id_to_piece(self, i: int) -> str:
        return self.sp.IdToPiece(int(i))

    def piece_to_id(self, piece: str) -> int:
        return self.sp.PieceToId(piece)

    def word_start_table(self) -> np.ndarray:
        """bool [vocab_size]: `table[id]` is True if the piece starts a word."""
        return self._word_start.copy()


def check_special_symbols(sp) -> None:
    """Raise ValueError unless the model has XLNet's special-id layout."""
    bad = []
    n = sp.GetPieceSize()
    for sym, want in SPECIAL_SYMBOLS.items():
        got = sp.IdToPiece(want) if want < n else None
        if got != sym:
            bad.append(f"{sym} expected at id {want}, found {got!r}")
    if bad:
        raise UserError("SentencePiece model does not have XLNet's special-id layout: "
                         + "; ".join(bad))
