"""Zero-shot fill-in-the-blank: score candidate words for a blank with a pretrained XLNet's LM head.

A question is a passage, a query sentence with one blank (`_`) and candidate words. Each candidate is written
into the blank and scored by `log P(candidate pieces | every other token)`, the context on both sides of the
blank visible, as XLNet's permutation objective trains it to predict: the candidate's pieces come last in the
factorization order, left to right among themselves. Concretely, for a sequence `passage <sep> query <sep>
<cls>` (segments A, B, CLS, as pretraining packs records) with the candidate's pieces at `t_1 < ... < t_k`:

- `perm_mask[i, t_m] = 1` (1 = i may NOT attend to j) for every non-candidate position i, so no context state
  sees a candidate piece (the answer cannot leak through the content stream);
- `perm_mask[t_n, t_m] = 1` for `m >= n`: piece n's query stream sees the earlier candidate pieces, not itself
  or later ones (its content stream, cached for later pieces, also sees itself, as XLNet's content stream does);
- `target_mapping` picks `t_1..t_k`; the score is the sum of their log-probabilities (nats), the probability of
  the whole word, so candidates of different piece counts compare fairly.

An MLM-pretrained model (objective `mlm`) reads the candidate's pieces as `<mask>` and scores each from the
rest (the usual masked-LM approximation to the word's probability). Rows are padded on the left to a fixed
length (`attention_mask`: 1 = real token, 0 = padding) so one compiled function scores every batch; a passage
that does not fit keeps its last pieces (the text nearest the query).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, List, Sequence

import numpy as np
import tensorflow as tf

from xlnet_tf.text.layout import CLS_ID, MASK_ID, PAD_ID, SEG_ID_A, SEG_ID_B, SEG_ID_CLS, SEG_ID_PAD, SEP_ID

BLANK = "_"


class BlankError(ValueError):
    """A question that cannot be scored (no blank, or a candidate that does not tokenize at the blank)."""


@dataclass(frozen=True)
class FilledRow:
    """One candidate written into the blank: token ids, segment ids and where the candidate's pieces are."""
    input_ids: List[int]
    segment_ids: List[int]
    candidate: List[int]  # positions of the candidate's pieces in input_ids, ascending


def candidate_pieces(tokenizer, before: str, word: str, after: str):
    """`(ids of before + word + after, positions of word's pieces)`. Tokenized as one string (as RACE packing
    fills a blank), the word's pieces located by tokenizing the prefixes; raises BlankError where the joint
    tokenization does not start with the prefixes' (a piece across the blank's edge)."""
    ids_before = tokenizer.encode(before) if before.strip() else []
    ids_word = tokenizer.encode(before + word)
    ids_all = tokenizer.encode(before + word + after)
    if ids_word[:len(ids_before)] != ids_before or ids_all[:len(ids_word)] != ids_word or len(ids_word) == len(ids_before):
        raise BlankError(f"candidate {word!r} does not tokenize on its own at the blank of {before + BLANK + after!r}")
    return ids_all, list(range(len(ids_before), len(ids_word)))


def fill(tokenizer, passage: str, query: str, word: str, seq_len: int) -> FilledRow:
    """`passage <sep> query-with-word <sep> <cls>`, the passage cut from the left to fit `seq_len`."""
    if query.count(BLANK) != 1:
        raise BlankError(f"the query must hold exactly one {BLANK!r}: {query!r}")
    before, _, after = query.partition(BLANK)
    query_ids, positions = candidate_pieces(tokenizer, before, word, after)
    room = seq_len - len(query_ids) - 3
    if room < 0:
        raise BlankError(f"the query with {word!r} is {len(query_ids)} pieces: more than seq_len {seq_len} - 3")
    passage_ids = tokenizer.encode(passage)[-room:] if room else []
    ids = passage_ids + [SEP_ID] + query_ids + [SEP_ID, CLS_ID]
    segments = [SEG_ID_A] * (len(passage_ids) + 1) + [SEG_ID_B] * (len(query_ids) + 1) + [SEG_ID_CLS]
    offset = len(passage_ids) + 1
    return FilledRow(ids, segments, [offset + p for p in positions])


def features(rows: Sequence[FilledRow], seq_len: int, max_pieces: int, mlm: bool = False) -> Dict[str, np.ndarray]:
    """Batch features of `rows`, left-padded to `seq_len`; `target_mapping [B, max_pieces, seq_len]` with
    `target_mask [B, max_pieces]` (1 = a candidate piece, 0 = a padded slot)."""
    batch = len(rows)
    input_ids = np.full([batch, seq_len], PAD_ID, np.int32)
    segment_ids = np.full([batch, seq_len], SEG_ID_PAD, np.int32)
    attention = np.zeros([batch, seq_len], np.float32)
    perm = np.zeros([batch, seq_len, seq_len], np.float32)
    mapping = np.zeros([batch, max_pieces, seq_len], np.float32)
    target_ids = np.zeros([batch, max_pieces], np.int32)
    weights = np.zeros([batch, max_pieces], np.float32)
    for b, row in enumerate(rows):
        if len(row.candidate) > max_pieces:
            raise BlankError(f"a candidate of {len(row.candidate)} pieces: more than max_pieces {max_pieces} "
                             "(give the scorer a larger max_pieces)")
        pad = seq_len - len(row.input_ids)
        input_ids[b, pad:] = row.input_ids
        segment_ids[b, pad:] = row.segment_ids
        attention[b, pad:] = 1.0
        targets = [pad + p for p in row.candidate]
        perm[b][:, targets] = 1.0
        for n, t in enumerate(targets):
            perm[b, t, targets[:n]] = 0.0
            mapping[b, n, t] = 1.0
            target_ids[b, n] = input_ids[b, t]
            weights[b, n] = 1.0
        if mlm:
            input_ids[b, targets] = MASK_ID
            perm[b] = 0.0
    return {"input_ids": input_ids, "segment_ids": segment_ids, "attention_mask": attention, "perm_mask": perm,
            "target_mapping": mapping, "target_ids": target_ids, "target_mask": weights}


class BlankScorer:
    """Scores candidates for blanks with an `XLNetPretrainer` (LM head; dropout off, bi_data off)."""

    def __init__(self, model, tokenizer, seq_len: int = 256, max_pieces: int = 8, batch_size: int = 16):
        self.model, self.tokenizer = model, tokenizer
        self.seq_len, self.max_pieces, self.batch_size = seq_len, max_pieces, batch_size
        self.mlm = getattr(model, "objective", "plm") == "mlm"
        spec = {"input_ids": tf.TensorSpec([None, seq_len], tf.int32),
                "segment_ids": tf.TensorSpec([None, seq_len], tf.int32),
                "attention_mask": tf.TensorSpec([None, seq_len], tf.float32),
                "perm_mask": tf.TensorSpec([None, seq_len, seq_len], tf.float32),
                "target_mapping": tf.TensorSpec([None, max_pieces, seq_len], tf.float32),
                "target_ids": tf.TensorSpec([None, max_pieces], tf.int32),
                "target_mask": tf.TensorSpec([None, max_pieces], tf.float32)}

        @tf.function(input_signature=[spec])
        def log_probs(batch):
            logits = tf.cast(self.model(batch, training=False)["logits"], tf.float32)
            logp = -tf.nn.sparse_softmax_cross_entropy_with_logits(labels=batch["target_ids"], logits=logits)
            return tf.reduce_sum(logp * batch["target_mask"], axis=1)

        self._log_probs = log_probs

    def score_rows(self, rows: Sequence[FilledRow]) -> np.ndarray:
        """`[len(rows)]` log-probabilities (nats) of each row's candidate."""
        out = []
        for start in range(0, len(rows), self.batch_size):
            batch = features(rows[start:start + self.batch_size], self.seq_len, self.max_pieces, self.mlm)
            out.append(self._log_probs({k: tf.constant(v) for k, v in batch.items()}).numpy())
        return np.concatenate(out) if out else np.zeros([0], np.float32)

    def score(self, passage: str, query: str, candidates: Sequence[str]) -> np.ndarray:
        """`[len(candidates)]` log-probabilities of each candidate in the blank of `query` after `passage`."""
        return self.score_rows([fill(self.tokenizer, passage, query, c, self.seq_len) for c in candidates])

    def score_questions(self, questions: Sequence[Dict]) -> List[np.ndarray]:
        """RACE-format cloze questions (`article`, `questions[0]`, `options[0]`) -> per-question candidate
        scores, batched across questions."""
        rows, sizes = [], []
        for q in questions:
            options = q["options"][0]
            rows.extend(fill(self.tokenizer, q["article"], q["questions"][0], o, self.seq_len) for o in options)
            sizes.append(len(options))
        flat = self.score_rows(rows)
        return np.split(flat, np.cumsum(sizes)[:-1]) if sizes else []
