"""`XLNetTaggingPreprocessor`: pre-tokenized sentences (lists of words) -> the tagging windows of the records, for
Keras `fit` / `evaluate` / `predict` on an `XLNetTagger`.

A sentence yields one window or several (a long one is split with a stride, never cut), so packing changes the
number of rows: it runs in numpy before Keras's data pipeline, through exactly the record builder's functions
(`tagging.word_piece_ids`, `tagging.pack_sentence`), and the predictions are stitched back to one per word
(`tagging.stitch_examples`). The SentencePiece model travels in the `.keras` archive as `XLNetPreprocessor`'s
does; the exported SavedModel packs in the graph with the twins of the same functions.
"""

from __future__ import annotations

from typing import Dict, List, Optional, Sequence

import keras
import numpy as np

from xlnet_tf.errors import UserError
from xlnet_tf.text import tagging
from xlnet_tf.text.preprocessing import XLNetPreprocessor


@keras.saving.register_keras_serializable(package="xlnet_tf")
class XLNetTaggingPreprocessor(XLNetPreprocessor):
    """Words -> tagging windows (`xlnet_tf/text/tagging.py`'s layout: pieces, `<sep> <cls>`, left-padded).

    Args:
      spiece_model, uncased, keep_accents: as `XLNetPreprocessor`.
      sequence_length: window length L (>= 3).
      doc_stride: pieces between the starts of two windows of a sentence longer than L - 2 pieces.
      label_all_pieces: label every piece of a word (default: the first piece; the others are ignored).

    `windows(sentences, labels=None)` gives the feature arrays `[N_windows, L]` of `tagging.FEATURE_NAMES`
    plus `example_index [N_windows]` (the sentence of each window). Dicts of features pass through `call`.
    """

    def __init__(self, spiece_model=None, sequence_length: int = 128, uncased: bool = False,
                 keep_accents: bool = False, doc_stride: int = 64, label_all_pieces: bool = False, **kwargs):
        tagging.check_window(int(sequence_length), int(doc_stride))
        self.doc_stride = int(doc_stride)
        self.label_all_pieces = bool(label_all_pieces)
        self._tokenizer = None
        super().__init__(spiece_model, sequence_length=sequence_length, uncased=uncased, keep_accents=keep_accents,
                         **kwargs)

    def set_spiece_model(self, spiece_model) -> None:
        from xlnet_tf.text.tokenization import XLNetTokenizer

        super().set_spiece_model(spiece_model)
        self._tokenizer = XLNetTokenizer(model_proto=self._proto, uncased=self.uncased,
                                         keep_accents=self.keep_accents)

    def windows(self, sentences: Sequence[Sequence[str]], labels: Optional[Sequence[Sequence[int]]] = None
                ) -> Dict[str, np.ndarray]:
        """The windows of every sentence (`sentences`: lists of words; `labels`: a label id per word, or None)."""
        self._check_ready()
        if isinstance(sentences, (str, bytes)) or any(isinstance(s, (str, bytes)) for s in sentences):
            raise UserError("XLNetTaggingPreprocessor: pass sentences as lists of words ([['The', 'cat'], ...]); "
                            "a string is not a pre-tokenized sentence")
        if labels is not None and len(labels) != len(sentences):
            raise UserError(f"XLNetTaggingPreprocessor: {len(labels)} label lists for {len(sentences)} sentences")
        rows: List[Dict[str, np.ndarray]] = []
        owner: List[int] = []
        for i, words in enumerate(sentences):
            words = [str(w) for w in words]
            tags = None if labels is None else list(labels[i])
            if tags is not None and len(tags) != len(words):
                raise UserError(f"XLNetTaggingPreprocessor: sentence {i} has {len(words)} words and {len(tags)} "
                                "labels; give one label per word")
            pieces = tagging.word_piece_ids(self._tokenizer, words)
            for window in tagging.pack_sentence(pieces, tags, self.sequence_length, self.doc_stride,
                                                self.label_all_pieces):
                rows.append(window)
                owner.append(i)
        if not rows:
            return {name: np.zeros([0, self.sequence_length], np.float32 if name == "attention_mask" else np.int32)
                    for name in tagging.FEATURE_NAMES} | {"example_index": np.zeros([0], np.int32)}
        out = {name: np.stack([r[name] for r in rows]) for name in tagging.FEATURE_NAMES}
        out["example_index"] = np.asarray(owner, np.int32)
        return out

    def get_config(self):
        config = super().get_config()
        config.pop("max_segments", None)
        config.update(doc_stride=self.doc_stride, label_all_pieces=self.label_all_pieces)
        return config
