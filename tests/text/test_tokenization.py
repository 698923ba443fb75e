"""xlnet_tf.text.tokenization: normalization, digit-comma split, special ids, batch encoding."""

import pytest

from tests import data_fixtures
from xlnet_tf.text import tokenization as T


def test_special_ids_and_segments():
    assert (T.UNK_ID, T.S_ID, T.S_END_ID, T.CLS_ID, T.SEP_ID, T.PAD_ID, T.MASK_ID, T.EOD_ID,
            T.EOP_ID) == tuple(range(9))
    assert [T.SPECIAL_SYMBOLS[s] for s in
            ["<unk>", "<s>", "</s>", "<cls>", "<sep>", "<pad>", "<mask>", "<eod>", "<eop>"]
            ] == list(range(9))
    assert (T.SEG_ID_A, T.SEG_ID_B, T.SEG_ID_CLS, T.SEG_ID_PAD) == (0, 1, 2, 4)
    assert set(T.FUNCTIONAL_IDS) == {T.SEP_ID, T.CLS_ID}


@pytest.mark.parametrize("text,kw,want", [
    ("  a \t b\n\n c  ", {}, "a b c"),
    ("``quoted''", {}, '"quoted"'),
    ("Café naïve Ångström", {}, "Cafe naive Angstrom"),
    ("Café naïve", {"keep_accents": True}, "Café naïve"),
    ("Café HELLO", {"lower": True}, "cafe hello"),
    ("Café HELLO", {"lower": True, "keep_accents": True}, "café hello"),
    ("a  b", {"remove_space": False}, "a  b"),
    (b"bytes \xc3\xa9", {}, "bytes e"),
])
def test_preprocess_text(text, kw, want):
    assert T.preprocess_text(text, **kw) == want


class FakeSP:
    """A SentencePieceProcessor stand-in with a fixed segmentation table."""

    def __init__(self, table):
        self.table = table
        vocab = list(T.SPECIAL_SYMBOLS)
        for pieces in table.values():
            for p in pieces:
                if p not in vocab:
                    vocab.append(p)
        for p in ("▁2000", ",", "000", "5", "▁", "▁000"):
            if p not in vocab:
                vocab.append(p)
        self.vocab = vocab

    def EncodeAsPieces(self, text):
        return list(self.table[text])

    def PieceToId(self, p):
        return self.vocab.index(p) if p in self.vocab else 0

    def IdToPiece(self, i):
        return self.vocab[i]

    def GetPieceSize(self):
        return len(self.vocab)

    def encode(self, texts, out_type=int, num_threads=1):
        return [[self.PieceToId(p) for p in self.table[t]] for t in texts]


DIGIT_TABLE = {
    "paid 2000, then 1,000, 5, a,": ["▁paid", "▁2000,", "▁then", "▁1", ",", "000,", "▁5,",
                                     "▁a,"],
    "2000": ["▁2000"],
    "000": ["▁000"],
    "5": ["▁", "5"],
    "plain": ["▁plain"],
}


def test_encode_pieces_digit_comma_split():
    sp = FakeSP(DIGIT_TABLE)
    got = T.encode_pieces(sp, "paid 2000, then 1,000, 5, a,")
    # "▁2000," -> "▁2000" ","; "000," (no ▁) -> "▁000" stripped to "000", ","; "▁5," ->
    # re-encoded as "▁" "5": kept since the original piece starts with ▁; "▁a," untouched.
    assert got == ["▁paid", "▁2000", ",", "▁then", "▁1", ",", "000", ",", "▁", "5", ",",
                   "▁a,"]
    assert T.encode_ids(sp, "plain") == [sp.PieceToId("▁plain")]


def test_encode_batch_uses_the_digit_comma_path_when_needed():
    sp = FakeSP(DIGIT_TABLE)
    tok = T.XLNetTokenizer(processor=sp)
    texts = ["paid 2000, then 1,000, 5, a,", "plain"]
    assert tok.encode_batch(texts) == [tok.encode(t) for t in texts]
    assert tok.encode_batch(texts)[0] != sp.encode([texts[0]])[0]  # the fix changed it


def test_special_layout_is_checked():
    sp = FakeSP({"x": ["▁x"]})
    sp.vocab[3], sp.vocab[4] = sp.vocab[4], sp.vocab[3]  # swap <cls>/<sep>
    with pytest.raises(ValueError, match="<cls> expected at id 3"):
        T.XLNetTokenizer(processor=sp)


def test_word_start_pieces():
    assert T.is_word_start_piece("▁the")
    assert T.is_word_start_piece("<sep>") and T.is_word_start_piece(",")
    assert not T.is_word_start_piece("s") and not T.is_word_start_piece("ing")
    # the original's set: string.punctuation without the apostrophe (replaced by a second '"') and "<=>"
    original = set('!"#$%&\"()*+,-./:;?@[\\]^_`{|}~')
    import string
    for ch in string.punctuation:
        assert T.is_word_start_piece(ch) == (ch in original or ch == "<"), ch
    assert not T.is_word_start_piece("'")  # "'s" continues the word before it
    tok = data_fixtures.tiny_tokenizer()
    table = tok.word_start_table()
    assert table.shape == (tok.vocab_size,) and table.dtype == bool
    for i in range(tok.vocab_size):
        assert table[i] == T.is_word_start_piece(tok.id_to_piece(i))
    assert table[T.SEP_ID] and table[T.CLS_ID] and table[T.EOD_ID]


def test_real_model_batch_equals_single_and_normalization():
    tok = data_fixtures.tiny_tokenizer()
    assert tok.sha256 == T.file_sha256(data_fixtures.tiny_spm())
    with open(data_fixtures.CORPUS_DIR + "/sotu_slice.txt", encoding="utf-8") as f:
        lines = [ln for ln in f.read().split("\n") if ln.strip()][:200]
    lines += ["Café  naïve  ``x''", "1,000,000, and 2000, done <eop>", ""]
    assert tok.encode_batch(lines) == [tok.encode(t) for t in lines]
    ids = tok.encode("Hello   world <eop>")
    assert ids[-1] == T.EOP_ID
    assert tok.encode("Café") == tok.encode("Cafe")  # accents stripped by default
    unc = T.XLNetTokenizer(data_fixtures.tiny_spm(), uncased=True)
    assert unc.encode("THE Nation") == tok.encode("the nation")
    assert tok.decode(tok.encode("the nation")) == "the nation"
    assert tok.tokenize("the nation")[0].startswith(T.SPIECE_UNDERLINE)


def test_missing_model_file(tmp_path):
    with pytest.raises(ValueError, match="not found"):
        T.XLNetTokenizer(str(tmp_path / "nope.model"))
