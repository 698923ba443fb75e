"""Our RACE records against an independent reference of the ORIGINAL XLNet release's layout.

The reference below is written from the facts of zihangdai/xlnet `run_race.py`
(`get_examples`, `convert_single_example`, its `tokenize_fn`) and `prepro_utils.py`
(`preprocess_text`, `encode_pieces`/`encode_ids`), in its own words; it shares no code with
`tfrecords/race_data.py` or `xlnet_tf/text/` (SentencePiece is driven directly), so that a
change to our tokenization, truncation, segment ids, padding or mask shows up here.

Facts of the original it encodes:
  * text: whitespace runs collapsed (strip + split + join), ``` `` ``` and `''` -> `"`, accents
    stripped (NFKD, combining marks dropped), lowercased when `uncased`; pieces from
    `EncodeAsPieces` with a piece ending "<digit>," re-encoded without its comma (and without a
    leading "▁" the original piece did not have) followed by a "," piece; ids by `PieceToId`;
  * qa text: a question holding "_" gets every "_" replaced by the option, otherwise
    `question + " " + option`; label = ord(answer) - ord("A");
  * per option: qa ids cut to their LAST `max_qa_length`; when context + qa exceed
    `max_seq_length - 3` the context keeps its FIRST `max_seq_length - 3 - len(qa)` ids;
    `context <sep>(4) qa <sep> <cls>(3)`, segments 0 (context + first sep), 1 (qa + second sep),
    2 (cls); LEFT padding with id 0, segment 4, input_mask 1 (the original's mask is 1 = pad,
    0 = real: ours, attention_mask, is 1 = real, so we compare ours with 1 - original);
  * the 4 options' [L] vectors concatenated choice-major into one [4 * L] feature.
"""

import json
import os
import unicodedata

import numpy as np
import pytest

from tests import data_fixtures as F
from tfrecords import race_data as rd

MC = os.path.join(F.REPO_ROOT, "data", "finetune", "mc_wordnet")

# special ids and segment ids of the original data_utils.py / run_race.py
ORIG_CLS, ORIG_SEP = 3, 4
ORIG_SEG_CONTEXT, ORIG_SEG_QA, ORIG_SEG_CLS, ORIG_SEG_PAD = 0, 1, 2, 4
UNDERLINE = "\u2581"


# ---- the reference: the original's tokenization and layout --------------------------------------

def ref_normalize(text, lower=False):
    text = " ".join(text.strip().split())
    text = text.replace("``", '"').replace("''", '"')
    decomposed = unicodedata.normalize("NFKD", text)  # keep_accents=False in run_race.py
    text = "".join(ch for ch in decomposed if not unicodedata.combining(ch))
    return text.lower() if lower else text


def ref_encode(sp, text, lower=False):
    """The original `tokenize_fn`: normalize, pieces (digit-comma re-split), ids."""
    out = []
    for piece in sp.EncodeAsPieces(ref_normalize(text, lower)):
        if len(piece) >= 2 and piece.endswith(",") and piece[-2].isdigit():
            sub = sp.EncodeAsPieces(piece[:-1].replace(UNDERLINE, ""))
            if not piece.startswith(UNDERLINE) and sub[0].startswith(UNDERLINE):
                sub = sub[1:] if sub[0] == UNDERLINE else [sub[0][1:]] + sub[1:]
            out.extend(sub + [","])
        else:
            out.append(piece)
    return [sp.PieceToId(p) for p in out]


def ref_qa_text(question, option):
    return question.replace("_", option) if "_" in question else question + " " + option


def ref_pack_option(context_ids, qa_ids, L, max_qa):
    """One option as the original lays it out (mask polarity of the original: 1 = padding).

    Deliberate difference from the released code (issue #204): there, `tokens = tokens_context`
    aliases the article's list when it is not truncated, so the `append`/`extend` calls of
    options 1-3 also see the earlier options' qa. The intended layout, which we reproduce (and
    our packing implements), builds every option from a fresh copy of the article ids.
    """
    qa = list(qa_ids)
    if len(qa) > max_qa:
        qa = qa[len(qa) - max_qa:]  # keep the LAST max_qa ids
    ctx = list(context_ids)  # fresh copy (see the docstring)
    if len(ctx) + len(qa) > L - 3:
        ctx = ctx[:L - 3 - len(qa)]  # keep the FIRST ids
    ids = ctx + [ORIG_SEP] + qa + [ORIG_SEP, ORIG_CLS]
    seg = ([ORIG_SEG_CONTEXT] * (len(ctx) + 1) + [ORIG_SEG_QA] * (len(qa) + 1)
           + [ORIG_SEG_CLS])
    n_pad = L - len(ids)
    assert n_pad >= 0
    return ([0] * n_pad + ids, [ORIG_SEG_PAD] * n_pad + seg, [1] * n_pad + [0] * len(ids),
            len(ctx) < len(context_ids), len(qa) < len(qa_ids))


def ref_split(sp, split_dir, L, max_qa, lower=False):
    """{guid `file#i`: (input_ids, segment_ids, input_mask [4L] choice-major, label)} and
    counts of truncated contexts / qa texts."""
    out, cut_ctx, cut_qa = {}, 0, 0
    for name in sorted(os.listdir(split_dir)):
        if not name.endswith((".txt", ".json")):
            continue
        with open(os.path.join(split_dir, name), encoding="utf-8") as f:
            art = json.load(f)
        context_ids = ref_encode(sp, art["article"], lower)
        for i, question in enumerate(art["questions"]):
            ids, seg, mask = [], [], []
            for option in art["options"][i]:
                o_ids, o_seg, o_mask, c_cut, q_cut = ref_pack_option(
                    context_ids, ref_encode(sp, ref_qa_text(question, option), lower), L, max_qa)
                ids += o_ids
                seg += o_seg
                mask += o_mask
                cut_ctx += c_cut
                cut_qa += q_cut
            out[f"{name}#{i}"] = (ids, seg, mask, ord(art["answers"][i]) - ord("A"))
    return out, cut_ctx, cut_qa


# ---- ours: records read back raw (no reshaping by our reader) -----------------------------------

def read_records(record_dir, split):
    import tensorflow as tf

    m = rd.read_race_manifest(record_dir)
    guids = rd.read_race_guids(record_dir, split)
    path = os.path.join(record_dir, m["splits"][split]["file"])
    got = {}
    for raw in tf.data.TFRecordDataset(path).as_numpy_iterator():
        feat = tf.train.Example.FromString(raw).features.feature
        vals = {k: list(feat[k].int64_list.value) for k in
                ("input_ids", "segment_ids", "attention_mask", "label", "is_real_example",
                 "example_index")}
        if vals["is_real_example"] == [1]:
            got[guids[vals["example_index"][0]]] = vals
    return got


def assert_same(ref, got, L):
    assert sorted(got) == sorted(ref)
    for guid, (ids, seg, mask, label) in ref.items():
        g = got[guid]
        for key, want in (("input_ids", ids), ("segment_ids", seg),
                          ("attention_mask", 1 - np.asarray(mask))):  # polarity converted
            a, b = np.asarray(g[key]), np.asarray(want)
            assert a.shape == b.shape == (4 * L,), (guid, key, a.shape, b.shape)
            if not np.array_equal(a, b):
                a, b = a.reshape(4, L), b.reshape(4, L)
                j = int(np.nonzero((a != b).any(1))[0][0])
                pos = np.nonzero(a[j] != b[j])[0]
                raise AssertionError(
                    f"{guid} option {j} {key} differs at positions {pos[:10].tolist()}:\n"
                    f"ours     {a[j].tolist()}\noriginal {b[j].tolist()}")
        assert g["label"] == [label], guid


@pytest.fixture(scope="module")
def sp():
    import sentencepiece as spm

    proc = spm.SentencePieceProcessor()
    proc.Load(F.tiny_spm())
    return proc


def converted(examples, L, max_qa):
    """Ours without the record files: `convert_race_examples` (what the builder writes per
    chunk), flattened choice-major to [4L] as the records store it."""
    f = rd.convert_race_examples(F.tiny_tokenizer(), examples, L, max_qa)
    return {ex.guid: {"input_ids": f["input_ids"][k].reshape(-1),
                      "segment_ids": f["segment_ids"][k].reshape(-1),
                      "attention_mask": f["attention_mask"][k].reshape(-1),
                      "label": [int(f["label"][k])]}
            for k, ex in enumerate(examples)}


# (64, 24): most articles and some qa texts cut; (320, 64): no article cut on this slice (its
# longest article + qa needs 258), the case in which the released code aliased (#204)
@pytest.mark.parametrize("L,max_qa,truncated", [(64, 24, True), (320, 64, False)])
def test_mc_wordnet_equals_original_layout(sp, tmp_path, L, max_qa, truncated):
    out = str(tmp_path / "records")
    rd.build_race_records(MC, F.tiny_spm(), out, max_seq_length=L, max_qa_length=max_qa,
                          splits=("dev",), eval_batch_size=32)
    for split in ("dev", "train"):
        ref, cut_ctx, cut_qa = ref_split(sp, os.path.join(MC, split), L, max_qa)
        assert len(ref) == {"dev": 500, "train": 5000}[split]
        if truncated:  # the setting does cut articles (first ids kept) and qa (last ids kept)
            assert cut_ctx > 0.5 * 4 * len(ref) and cut_qa > 0, (cut_ctx, cut_qa)
        else:
            assert cut_ctx == 0, cut_ctx
        if split == "dev":  # the record file, read back raw
            assert_same(ref, read_records(out, split), L)
        else:  # the 5,000 train questions: the conversion the builder runs, called directly
            assert_same(ref, converted(rd.read_race_split(MC, split), L, max_qa), L)


ARTICLE = {
    # accents, `` '' quotes, a digit-comma piece, runs of whitespace: the original normalization
    "article": ("  In 1992,  the  caf\u00e9 on the Rue Fran\u00e7aise sold 2000, maybe 3000, or x2000,\n"
                "croissants.\t``It was na\u00efve,'' she said. The set of red hats is the "
                "intersection of the set of hats and the set of red things. ") * 3,
    "questions": [
        "The _ sold croissants, and the _ was on the Rue Fran\u00e7aise.",  # cloze, two blanks
        "Which word means: a small restaurant where drinks and snacks are sold?",
        "In _, what happened? " + "Many many words make this question long. " * 6,  # cloze, long
    ],
    "options": [["caf\u00e9", "hat", "set", "thing"],
                ["caf\u00e9", "croissant", "intersection", "quote"],
                ["1992,", "2000", "the year 3000, later", "never"]],
    "answers": ["A", "A", "C"],
}


def spm_model(kind, directory):
    """(model path, uncased). "digit_comma": the cased tiny model plus pieces ending in
    "<digit>," (the tiny vocab has none), so that the original's re-split of such pieces, both
    its branches (a piece with and without a leading "▁"), is exercised."""
    if kind != "digit_comma":
        return F.tiny_spm(uncased=kind == "uncased"), kind == "uncased"
    from sentencepiece import sentencepiece_model_pb2

    proto = sentencepiece_model_pb2.ModelProto()
    with open(F.tiny_spm(), "rb") as f:
        proto.ParseFromString(f.read())
    for piece in (UNDERLINE + "1992,", UNDERLINE + "2000,", "0,"):
        proto.pieces.add(piece=piece, score=0.0)
    path = os.path.join(directory, "digit_comma.model")
    with open(path, "wb") as f:
        f.write(proto.SerializeToString())
    return path, False


@pytest.mark.parametrize("kind", ["cased", "uncased", "digit_comma"])
@pytest.mark.parametrize("L,max_qa", [(48, 16), (512, 128)])
def test_cloze_and_normalization_equal_original_layout(tmp_path, L, max_qa, kind):
    import sentencepiece as spm

    model, uncased = spm_model(kind, str(tmp_path))
    proc = spm.SentencePieceProcessor()
    proc.Load(model)
    if kind == "digit_comma":
        pieces = proc.EncodeAsPieces(ref_normalize(ARTICLE["article"]))
        assert {UNDERLINE + "1992,", UNDERLINE + "2000,", "0,"} <= set(pieces)
    os.makedirs(tmp_path / "data" / "dev")
    with open(tmp_path / "data" / "dev" / "a.json", "w", encoding="utf-8") as f:
        json.dump(ARTICLE, f, ensure_ascii=False)
    out = str(tmp_path / "records")
    rd.build_race_records(str(tmp_path / "data"), model, out, max_seq_length=L,
                          max_qa_length=max_qa, splits=("dev",), uncased=uncased)
    ref, cut_ctx, cut_qa = ref_split(proc, str(tmp_path / "data" / "dev"), L, max_qa,
                                     lower=uncased)
    assert (cut_ctx > 0, cut_qa > 0) == ((True, True) if L == 48 else (False, False))
    # the cloze question: both blanks filled, no option appended
    qa0 = ref_qa_text(ARTICLE["questions"][0], "hat")
    assert qa0 == "The hat sold croissants, and the hat was on the Rue Fran\u00e7aise."
    assert rd.make_qa(ARTICLE["questions"][0], "hat") == qa0
    assert_same(ref, read_records(out, "dev"), L)
