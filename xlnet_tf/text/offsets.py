"""Text with character offsets: XLNet's normalization and tokenization, each output keeping its span in the
ORIGINAL text (what SQuAD needs to map answer characters to tokens and predicted tokens back to characters).

Alignment by offsets (the original's banded-LCS alignment, `_convert_index`, is replaced, #7.22): the text is
normalized exactly as `tokenization.preprocess_text` (whitespace collapsed, ``` `` ```/`''` -> `"`, accents
stripped by NFKD + dropping combining marks, lowercased when uncased) while every output character keeps its
`[start, end)` span in the ORIGINAL text (`normalize_with_offsets`); the normalized text is encoded by
SentencePiece with its own offsets (which cover SentencePiece's internal NFKC too), and the original's
digit-comma re-split is applied piece by piece (`tokenize_with_offsets`). Each token thus maps to a character
span of the original text, trimmed of whitespace and zero-width (Cf) characters; the ids equal
`encode_ids(sp, preprocess_text(text))` except that a multi-character `<unk>` piece (e.g. a run of CJK
characters unknown to the vocabulary) is split into one `<unk>` per character (`split_unknown`, default on) so
that answers inside it stay reachable. A normalization that does not reproduce `preprocess_text` raises
ValueError (the SQuAD builder counts the example and skips it): a span is never silently shifted.

The in-graph twin (raw text -> ids with offsets, for serving) is `XLNetPreprocessor`'s, in `preprocessing.py`.
"""

from __future__ import annotations

import dataclasses
import unicodedata
from typing import List, Optional, Tuple

import numpy as np

from xlnet_tf.text import tokenization
from xlnet_tf.text.tokenization import SPIECE_UNDERLINE, UNK_ID


def _is_blank(c: str) -> bool:
    """Whitespace or an invisible format character (zero-width space, joiners, BOM, ...)."""
    return c.isspace() or unicodedata.category(c) == "Cf"


def normalize_with_offsets(text: str, lower: bool = False, keep_accents: bool = False
                           ) -> Tuple[str, np.ndarray, np.ndarray]:
    """`preprocess_text(text, lower, keep_accents=...)` and each output character's source span.

    Returns `(norm, starts, ends)`: `norm` equals `tokenization.preprocess_text(text, lower=lower,
    keep_accents=keep_accents)`; `starts`, `ends` int32 [len(norm)]: output character k comes
    from `text[starts[k]:ends[k]]` (a collapsed space covers its whitespace run, a `"` from
    ``` `` ``` covers both characters, a character expanded by NFKD repeats its span, and dropped
    combining marks extend the span of the character before them).
    """
    chars: List[str] = []
    st: List[int] = []
    en: List[int] = []
    space_from = -1
    for i, c in enumerate(text):  # 1. " ".join(text.strip().split())
        if c.isspace():
            if chars and space_from < 0:
                space_from = i
            continue
        if space_from >= 0:
            chars.append(" ")
            st.append(space_from)
            en.append(i)
            space_from = -1
        chars.append(c)
        st.append(i)
        en.append(i + 1)
    for pair in ("``", "''"):  # 2. quotes, left to right as str.replace
        if pair not in "".join(chars):
            continue
        c2, s2, e2 = [], [], []
        k = 0
        while k < len(chars):
            if k + 1 < len(chars) and chars[k] == pair[0] and chars[k + 1] == pair[1]:
                c2.append('"')
                s2.append(st[k])
                e2.append(en[k + 1])
                k += 2
            else:
                c2.append(chars[k])
                s2.append(st[k])
                e2.append(en[k])
                k += 1
        chars, st, en = c2, s2, e2
    if not keep_accents and not all(c.isascii() for c in chars):  # 3. NFKD, drop combining
        c2, s2, e2 = [], [], []
        lead = None  # start of dropped marks before any output character
        for c, s, e in zip(chars, st, en):
            if c.isascii():
                kept = c
            else:
                kept = "".join(x for x in unicodedata.normalize("NFKD", c)
                               if not unicodedata.combining(x))
            if not kept:
                if e2:
                    e2[-1] = max(e2[-1], e)
                elif lead is None:
                    lead = s
                continue
            for x in kept:
                c2.append(x)
                s2.append(s if lead is None else min(s, lead))
                e2.append(e)
            lead = None
        chars, st, en = c2, s2, e2
    if lower:  # 4. lowercase (per character when it changes the length, e.g. U+0130)
        joined = "".join(chars)
        low = joined.lower()
        if len(low) == len(joined):
            chars = list(low)
        else:
            c2, s2, e2 = [], [], []
            for c, s, e in zip(chars, st, en):
                for x in c.lower():
                    c2.append(x)
                    s2.append(s)
                    e2.append(e)
            if len(c2) == len(low):  # context-dependent forms (final sigma) keep the length
                c2 = list(low)
            chars, st, en = c2, s2, e2
    return "".join(chars), np.asarray(st, np.int32), np.asarray(en, np.int32)


def _sp_encode_offsets(sp, text: str) -> Tuple[List[str], List[int], List[Tuple[int, int]]]:
    """SentencePiece pieces, ids and `[begin, end)` CHARACTER offsets into `text`."""
    try:
        r = sp.encode(text, return_type="offset_mapping")
        return list(r["pieces"]), [int(i) for i in r["ids"]], [tuple(o) for o in r["offsets"]]
    except (TypeError, ValueError):  # sentencepiece < 0.2.1: byte offsets of immutable_proto
        pass
    proto = sp.encode(text, out_type="immutable_proto")
    b2c = np.zeros(len(text.encode("utf-8")) + 1, np.int64)
    pos = 0
    for k, c in enumerate(text):
        n = len(c.encode("utf-8"))
        b2c[pos:pos + n] = k
        pos += n
    b2c[pos] = len(text)
    pieces = list(proto.pieces)
    return ([p.piece for p in pieces], [int(p.id) for p in pieces],
            [(int(b2c[p.begin]), int(b2c[p.end])) for p in pieces])


@dataclasses.dataclass
class ParagraphTokens:
    """A paragraph's tokens and their character spans in the ORIGINAL paragraph text.

    `ids` int32 [T]; `pieces` [T]; `char_start`, `char_end` int32 [T]: token t stands for
    `text[char_start[t]:char_end[t]]` (trimmed of whitespace / zero-width characters; a token
    without visible characters of its own, e.g. a lone `▁`, borrows the span of the next token);
    `has_own_span` bool [T]: the token covers visible characters itself (gold answer boundaries
    are only put on these).
    """

    ids: np.ndarray
    pieces: List[str]
    char_start: np.ndarray
    char_end: np.ndarray
    has_own_span: np.ndarray

    def __len__(self) -> int:
        return len(self.ids)

    def char_span_to_tokens(self, start: int, end: int) -> Optional[Tuple[int, int]]:
        """First and last token (inclusive) whose own span overlaps `[start, end)`; None if none."""
        hit = self.has_own_span & (self.char_end > start) & (self.char_start < end)
        idx = np.flatnonzero(hit)
        if not len(idx):
            return None
        return int(idx[0]), int(idx[-1])


def tokenize_with_offsets(tokenizer: tokenization.XLNetTokenizer, text: str,
                          split_unknown: bool = True) -> ParagraphTokens:
    """Tokenize raw `text` as `tokenizer.encode` does, with original-text spans (see the module
    docstring). Raises ValueError if the tracked normalization differs from `preprocess_text`."""
    sp = tokenizer.sp
    norm, n_st, n_en = normalize_with_offsets(text, lower=tokenizer.uncased,
                                              keep_accents=tokenizer.keep_accents)
    ref = tokenization.preprocess_text(text, lower=tokenizer.uncased,
                                       keep_accents=tokenizer.keep_accents)
    if norm != ref:
        raise ValueError("normalization with offsets differs from preprocess_text")
    pieces, ids, offs = _sp_encode_offsets(sp, norm) if norm else ([], [], [])
    toks: List[Tuple[str, int, int, int]] = []  # piece, id, [i, j) in norm
    for piece, pid, (i, j) in zip(pieces, ids, offs):
        if tokenization._needs_digit_comma_split(piece):  # the original encode_pieces
            sub = piece[:-1].replace(SPIECE_UNDERLINE, "")
            cur, _, sub_offs = _sp_encode_offsets(sp, sub)
            cur, sub_offs = list(cur), list(sub_offs)
            if piece[0] != SPIECE_UNDERLINE and cur and cur[0][0] == SPIECE_UNDERLINE:
                if len(cur[0]) == 1:
                    cur, sub_offs = cur[1:], sub_offs[1:]
                else:
                    cur[0] = cur[0][1:]
            comma = j - 1 if j > i and norm[j - 1] == "," else None
            body_end = comma if comma is not None else j
            base = i
            while base < body_end and norm[base] == " ":
                base += 1
            exact = norm[base:body_end] == sub
            for p, (a, b) in zip(cur, sub_offs):
                span = (base + a, base + b) if exact else (i, body_end)
                toks.append((p, sp.PieceToId(p), *span))
            toks.append((piece[-1], sp.PieceToId(piece[-1]),
                         *((comma, j) if comma is not None else (i, j))))
        elif split_unknown and pid == UNK_ID and j - i > 1:
            for k in range(i, j):
                if norm[k] != " ":
                    toks.append((norm[k], UNK_ID, k, k + 1))
        else:
            toks.append((piece, pid, i, j))
    n = len(toks)
    cs = np.zeros([n], np.int32)
    ce = np.zeros([n], np.int32)
    own = np.zeros([n], bool)
    for t, (_, _, i, j) in enumerate(toks):
        while i < j and _is_blank(norm[i]):
            i += 1
        while j > i and _is_blank(norm[j - 1]):
            j -= 1
        if i < j:
            cs[t], ce[t], own[t] = n_st[i], n_en[j - 1], True
    # tokens without a visible span of their own borrow the next (else the previous) one's
    nxt = -1
    trailing = np.zeros([n], bool)
    for t in range(n - 1, -1, -1):
        if own[t]:
            nxt = t
        elif nxt >= 0:
            cs[t], ce[t] = cs[nxt], ce[nxt]
        else:
            trailing[t] = True
    prev = -1
    for t in range(n):
        if own[t]:
            prev = t
        elif trailing[t] and prev >= 0:
            cs[t], ce[t] = cs[prev], ce[prev]
    return ParagraphTokens(np.asarray([x[1] for x in toks], np.int32), [x[0] for x in toks],
                           cs, ce, own)
