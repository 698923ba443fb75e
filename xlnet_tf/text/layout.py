"""The layout of XLNet's inputs: what every packer (xlnet_tf/text/packing.py, packing_tf.py) follows.

Special ids are those of the released `spiece.model` (and of the SentencePiece models tfrecords/spm.py trains):
`<unk>` 0, `<s>` 1, `</s>` 2, `<cls>` 3, `<sep>` 4, `<pad>` 5, `<mask>` 6, `<eod>` 7, `<eop>` 8. Segment ids are
the original's `SEG_ID_*`: 0 = A (with its `<sep>`), 1 = B (with its `<sep>`), 2 = `<cls>`, 4 = padding; the
model only asks "same segment or not". Padding positions hold id 0, not `<pad>`: the original pads
with 0 (`PADDING_ID`), and `attention_mask` (1 = real token, 0 = padding) is what hides them.

The layouts (L = the sequence length):

| task | tokens | padding | truncation |
|---|---|---|---|
| classification, regression (`pack_pair`) | `A <sep> [B <sep>] <cls>` | left | pair: `shrink_pair(L - 3)`; single: `A[:L - 2]` |
| long document of S segments | the same over `S * L` tokens, read as `[S, L]` | left (as a whole) | as above at `S * L` |
| multiple choice, each choice (`pack_choice`; qa = `choice_text`) | `context <sep> qa <sep> <cls>` | left | qa to `max_qa_length` (its tail or head), context to what is left |
| SQuAD window (`pack_squad_window`) | `P <sep> Q <sep> <cls>` | right | the caller's windows (doc stride) |
| pretraining row | `reuse part, A <sep> B <sep> <cls>` | none | `shrink_pair` on the new part |

`<cls>` comes last: the sequence summary reads the last position, which left padding keeps at `L - 1` (SQuAD's
right padding records `cls_index` instead).
"""

from __future__ import annotations

from typing import Tuple

UNK_ID = 0
S_ID = 1  # <s>
S_END_ID = 2  # </s>
CLS_ID = 3
SEP_ID = 4
PAD_ID = 5  # <pad>: a vocabulary entry, not what padding positions hold (PADDING_ID)
MASK_ID = 6
EOD_ID = 7
EOP_ID = 8

SEG_ID_A = 0
SEG_ID_B = 1
SEG_ID_CLS = 2
SEG_ID_SEP = 3  # defined by the original, unused
SEG_ID_PAD = 4

PADDING_ID = 0  # the id at padding positions (the original's)

LEFT, RIGHT = "left", "right"
PADDING_SIDE = {"classifier": LEFT, "regression": LEFT, "race": LEFT, "squad": RIGHT, "tagging": LEFT}


def shrink_pair(len_a: int, len_b: int, budget: int) -> Tuple[int, int]:
    """The lengths A and B keep to fit `budget` tokens: the original's `_truncate_seq_pair` (remove the last
    token of the longer, of B on ties, until they fit) in closed form."""
    excess = len_a + len_b - budget
    if excess <= 0:
        return len_a, len_b
    d = min(excess, max(0, len_a - len_b))
    len_a, excess = len_a - d, excess - d
    d = min(excess, max(0, len_b - len_a))
    len_b, excess = len_b - d, excess - d
    return len_a - excess // 2, len_b - (excess + 1) // 2


def choice_text(question: str, option: str) -> str:
    """The text of one multiple-choice option (the original `run_race.py`): a cloze question's every `_` filled
    by the option, else `question + " " + option`. Its in-graph twin is `packing_tf.choice_text`."""
    if "_" in question:
        return question.replace("_", option)
    return " ".join([question, option])
