"""SQuAD data: offset alignment (xlnet_tf/text/offsets.py), examples (tfrecords/readers/squad_examples.py), features,
records, readers, CLI, bad input (tfrecords/squad_data.py).

The round trips feed the gold answer of every answerable question back as one-hot log-probs at its
gold start / end (in the feature where the start has its maximal context) and require
`squad_postprocess` to return exactly the gold text from the ORIGINAL context: any shifted span
between characters and tokens fails them.
"""

import json
import os
import re
import subprocess
import sys

import numpy as np
import pytest

from tests import data_fixtures as F
from tfrecords import squad_data as sd
from tfrecords.readers import squad_examples as se
from tfrecords.manifest import ManifestError
from xlnet_tf.metrics import squad_postprocess as pp
from xlnet_tf.text import offsets
from xlnet_tf.text import tokenization as T

SQUAD_DIR = os.path.join(F.DATA_DIR, "squad")
FIXTURES = ("train-v1.1.json", "dev-v1.1.json", "train-v2.0.json", "dev-v2.0.json")
SMALL = dict(max_seq_length=64, doc_stride=16, max_query_length=16)


def _tok(uncased=False):
    return T.XLNetTokenizer(F.tiny_spm(uncased), uncased=uncased)


def _load(name):
    with open(os.path.join(SQUAD_DIR, name), encoding="utf-8") as f:
        return json.load(f)


def _cfg(v2, **kw):
    return sd.SquadConfig(**{**SMALL, **kw}, version_2_with_negative=v2)


def _eval_data(examples, feats, L, v2):
    return pp.SquadEvalData(sd.example_entries(examples), sd.stack_eval_features(feats, L), v2)


def _gold_results(data: pp.SquadEvalData, ks=3, ke=2, null_logit=5.0):
    """One-hot log-probs at each feature's gold start/end where the start is max-context;
    `cls_logits` +null_logit for impossible questions, -null_logit otherwise."""
    f = data.features
    n = len(f["example_index"])
    res = {"unique_id": np.arange(n), "start_top_log_probs": np.full([n, ks], -30.0),
           "start_top_index": np.full([n, ks], 0), "end_top_log_probs": np.full([n, ks * ke], -30.0),
           "end_top_index": np.full([n, ks * ke], 0), "cls_logits": np.zeros([n])}
    # distractor beams: the CLS position (never a paragraph token) for every other slot
    res["start_top_index"][:] = f["cls_index"][:, None]
    res["end_top_index"][:] = f["cls_index"][:, None]
    for r in range(n):
        ex = data.examples[f["example_index"][r]]
        res["cls_logits"][r] = null_logit if ex["is_impossible"] else -null_logit
        s, e = f["start_positions"][r], f["end_positions"][r]
        if not f["is_impossible"][r] and f["token_is_max_context"][r, s]:
            res["start_top_index"][r, 1] = s  # not the first beam: beams are searched
            res["start_top_log_probs"][r, 1] = 0.0
            res["end_top_index"][r, ke + 1] = e
            res["end_top_log_probs"][r, ke + 1] = 0.0
    return res


def _assert_round_trip(examples, feats, L, v2):
    data = _eval_data(examples, feats, L, v2)
    preds = pp.compute_predictions(data, _gold_results(data), n_best_size=3, max_answer_length=L)
    checked = 0
    for ex in examples:
        if ex.is_impossible:
            continue
        assert preds.predictions[ex.qas_id] == ex.answers[0]["text"], ex.qas_id
        checked += 1
    if v2:
        fixed = pp.apply_threshold(preds.predictions, preds.null_odds, 0.0)
        for ex in examples:
            assert fixed[ex.qas_id] == ("" if ex.is_impossible else ex.answers[0]["text"])
    return checked


# ---- normalization and tokenization with offsets ---------------------------------------------

UNICODE_TEXTS = [
    "The  café\u00a0in 2,000,000 dollars, ``quoted'' text.",
    "Poke\u0301mon and Pok\u00e9mon", "a\u200bb \u200bword\u200b",
    "東京大学で勉強した。 Then English.", "\u201cCurly\u201d quotes \u00bd \ufb01ne \u2122",
    "\u0301lead mark", "\u0130stanbul \u039f\u0394\u03a5\u03a3",
    "tabs\tand\nnew\r\nlines   ", "'''triple''' ````", "\u00a8 diaeresis", "한국어 텍스트",
]


@pytest.mark.parametrize("lower", [False, True])
@pytest.mark.parametrize("keep_accents", [False, True])
def test_normalize_with_offsets_equals_preprocess_text(lower, keep_accents):
    rng = np.random.RandomState(0)
    pool = list("ab Zé\u0301\u00a0\u200b`'\"ñ,1 \t\n東ﬁ½İΣ\u00a8")
    texts = UNICODE_TEXTS + ["".join(rng.choice(pool, size=rng.randint(0, 30))) for _ in range(300)]
    for text in texts:
        norm, st, en = offsets.normalize_with_offsets(text, lower=lower, keep_accents=keep_accents)
        ref = T.preprocess_text(text, lower=lower, keep_accents=keep_accents)
        assert norm == ref, repr(text)
        assert len(st) == len(en) == len(norm)
        if len(norm):
            assert (st >= 0).all() and (en <= len(text)).all() and (st < en).all()
            assert (np.diff(st) >= 0).all() and (np.diff(en) >= 0).all()
        for k, c in enumerate(norm):  # every non-space output character comes from its span
            if c != " " and c != '"':
                src = T.preprocess_text(text[st[k]:en[k]], lower=lower, remove_space=False,
                                        keep_accents=keep_accents)
                assert c.casefold() in src.casefold(), (repr(text), k, c)


def test_token_spans_cover_the_original_text_and_ids_match_encode():
    tok = _tok()
    contexts = [p["context"] for name in FIXTURES for a in _load(name)["data"]
                for p in a["paragraphs"]]
    for text in contexts + UNICODE_TEXTS:
        plain = offsets.tokenize_with_offsets(tok, text, split_unknown=False)
        assert plain.ids.tolist() == tok.encode(text), repr(text)
        p = offsets.tokenize_with_offsets(tok, text)
        unk_free = T.UNK_ID not in plain.ids.tolist()
        if unk_free:
            assert p.ids.tolist() == plain.ids.tolist()
        own = p.has_own_span
        assert (p.char_start[own] < p.char_end[own]).all()
        assert (np.diff(p.char_start) >= 0).all() and (np.diff(p.char_end) >= 0).all()
        for t in np.flatnonzero(own):  # spans are trimmed of invisible characters
            piece = text[p.char_start[t]:p.char_end[t]]
            assert not offsets._is_blank(piece[0]) and not offsets._is_blank(piece[-1])
        if unk_free and text.isascii():  # visible characters are covered, in order
            covered = "".join(text[a:b] for a, b, o in zip(p.char_start, p.char_end, own) if o)
            assert covered == "".join(c for c in text if not c.isspace())


class _DigitCommaSP:
    """A SentencePiece processor whose pieces glue a (▁-prefixed) digit run to a following ','
    (like `▁2000,` in the released vocabulary), to exercise the original's digit-comma re-split."""

    def __init__(self, sp):
        self.sp = sp

    def _merged(self, text):
        r = self.sp.encode(text, return_type="offset_mapping")
        out, k, pieces, offs = [], 0, r["pieces"], r["offsets"]
        while k < len(pieces):
            j, acc = k, ""
            while j < len(pieces) and re.fullmatch("\u2581?[0-9]+", acc + pieces[j]):
                acc += pieces[j]
                j += 1
            if j > k and j < len(pieces) and pieces[j] == "," and any(c.isdigit() for c in acc):
                out.append((acc + ",", (offs[k][0], offs[j][1])))
                k = j + 1
            else:
                out.append((pieces[k], tuple(offs[k])))
                k += 1
        return out

    def encode(self, text, return_type=None, **kw):
        m = self._merged(text)
        return {"pieces": [p for p, _ in m], "ids": [self.sp.PieceToId(p) for p, _ in m],
                "offsets": [o for _, o in m]}

    def EncodeAsPieces(self, text):
        return [p for p, _ in self._merged(text)]

    def __getattr__(self, name):
        return getattr(self.sp, name)


def test_digit_comma_resplit_keeps_ids_and_offsets():
    base = _tok()
    tok = T.XLNetTokenizer(processor=_DigitCommaSP(base.sp))
    text = "In 2,000,000 years, 1,234 stars and 7, or 12,5 formed by 1990, 3,"
    glued = tok.sp.EncodeAsPieces(T.preprocess_text(text))
    assert any(T._needs_digit_comma_split(p) for p in glued)  # the wrapper does glue
    p = offsets.tokenize_with_offsets(tok, text)
    assert p.ids.tolist() == T.encode_ids(tok.sp, T.preprocess_text(text))
    for ans in ("2,000,000", "1,234", "7", "12,5", "1990", "3"):
        a = text.index(ans)
        s, e = p.char_span_to_tokens(a, a + len(ans))
        assert text[p.char_start[s]:p.char_end[e]] == ans


# ---- round trips ------------------------------------------------------------------------------

@pytest.mark.parametrize("name", FIXTURES)
def test_round_trip_fixtures_with_doc_stride(name):
    dataset = _load(name)
    v2 = "v2.0" in name
    stats = se.SplitStats()
    examples = se.read_squad_examples(dataset, False, v2, stats)
    assert len(examples) == 40 and not stats.skipped
    kept, feats = sd.convert_examples(_tok(), examples, _cfg(v2), False, stats)
    assert len(kept) == 40
    assert stats.counts["num_multi_span_examples"] >= 5  # doc_stride windows exercised
    assert stats.counts["num_out_of_span_features"] >= 3
    checked = _assert_round_trip(kept, feats, SMALL["max_seq_length"], v2)
    assert checked == sum(not ex.is_impossible for ex in kept) >= 23


@pytest.mark.parametrize("name", ["train-v1.1.json", "train-v2.0.json"])
def test_training_labels_point_at_the_gold_text(name):
    v2 = "v2.0" in name
    examples = se.read_squad_examples(_load(name), True, v2)
    kept, feats = sd.convert_examples(_tok(), examples, _cfg(v2), True)
    answered = set()
    for f in feats:
        ex = kept[f.example_index]
        if f.is_impossible:
            assert f.start_position == f.end_position == f.cls_index
            continue
        assert not ex.is_impossible and f.p_mask[f.start_position] == 0 and \
            f.p_mask[f.end_position] == 0
        text = ex.context[f.tok_start_to_orig[f.start_position]:f.tok_end_to_orig[f.end_position]]
        assert text == ex.answers[0]["text"]
        answered.add(ex.qas_id)
    assert answered == {ex.qas_id for ex in kept if not ex.is_impossible}


UNICODE_CASES = [  # (context, answers): every answer must come back exactly
    ("The caf\u00e9 in Z\u00fcrich serves cr\u00e8me br\u00fbl\u00e9e to na\u00efve tourists.",
     ["caf\u00e9", "Z\u00fcrich", "cr\u00e8me br\u00fbl\u00e9e", "na\u00efve"]),
    ("Poke\u0301mon is popular; the re\u0301sume\u0301 was long.",
     ["Poke\u0301mon", "re\u0301sume\u0301", "long"]),
    ("The\u200bword foo\u200bbar and \u200bbaz\u200b end.", ["foo\u200bbar", "baz", "word", "end"]),
    ("\u6771\u4eac\u5927\u5b66\u3067\u52c9\u5f37\u3057\u305f\u3002\u5317\u4eac\u662f\u4e2d\u56fd"
     "\u7684\u9996\u90fd\u3002", ["\u5927\u5b66", "\u5317\u4eac", "\u9996\u90fd",
                                 "\u52c9\u5f37\u3057\u305f"]),
    ("It is 10\u00a0km\u00a0long and costs 5\u00a0000 euros.", ["10\u00a0km", "5\u00a0000", "long"]),
    ("He said \u201chello world\u201d and left.", ["\u201chello world\u201d", "hello", "left"]),
    ("In 2,000,000 years, 1,234 stars formed.", ["2,000,000", "1,234", "stars"]),
    ("She said ``yes'' twice, then ''no'' once.", ["``yes''", "yes", "''no''", "twice"]),
    ("New  York\n\tCity  is   big.", ["New  York\n\tCity", "big"]),
    ("The \ufb01nal score was \u00bd point.", ["\ufb01nal", "\u00bd", "score"]),
    ("\u0130stanbul and \u039f\u0394\u03a5\u03a3\u03a3\u0395\u03a5\u03a3 are names.",
     ["\u0130stanbul", "\u039f\u0394\u03a5\u03a3\u03a3\u0395\u03a5\u03a3", "names"]),
    ("\ud55c\uad6d\uc5b4 \ud14d\uc2a4\ud2b8 and \u00a8dots.", ["\ud14d\uc2a4\ud2b8", "dots"]),
]


def _unicode_dataset():
    paragraphs = []
    for k, (context, answers) in enumerate(UNICODE_CASES):
        qas = [{"id": f"u{k}-{j}", "question": f"Where is answer {j}?", "is_impossible": False,
                "answers": [{"text": a, "answer_start": context.index(a)}]}
               for j, a in enumerate(answers)]
        paragraphs.append({"context": context, "qas": qas})
    return {"version": "v2.0", "data": [{"title": "unicode", "paragraphs": paragraphs}]}


@pytest.mark.parametrize("uncased", [False, True])
@pytest.mark.parametrize("max_seq_length", [40, 96])
def test_unicode_round_trip(uncased, max_seq_length):
    stats = se.SplitStats()
    examples = se.read_squad_examples(_unicode_dataset(), True, True, stats)
    kept, feats = sd.convert_examples(
        _tok(uncased), examples,
        _cfg(True, max_seq_length=max_seq_length, doc_stride=6, max_query_length=8), True, stats)
    assert not stats.skipped and len(kept) == sum(len(a) for _, a in UNICODE_CASES)
    assert _assert_round_trip(kept, feats, max_seq_length, True) == len(kept)
    if max_seq_length == 40:
        assert stats.counts["num_multi_span_examples"] >= 3


def test_answer_inside_a_token_is_widened_and_counted():
    context = "The bookshelves were full."
    ds = {"version": "1.1", "data": [{"title": "t", "paragraphs": [{"context": context, "qas": [
        {"id": "q", "question": "Which?", "answers": [{"text": "shel", "answer_start": 8}]}]}]}]}
    stats = se.SplitStats()
    kept, feats = sd.convert_examples(_tok(), se.read_squad_examples(ds, True, False, stats),
                                      _cfg(False), True, stats)
    f = feats[0]
    text = context[f.tok_start_to_orig[f.start_position]:f.tok_end_to_orig[f.end_position]]
    assert "shel" in text and text in context
    if text != "shel":
        assert stats.warnings["answer_subword_boundary"] == 1


# ---- bad input --------------------------------------------------------------------------------

def _bad_dataset():
    ctx = "Alpha beta gamma delta epsilon zeta eta theta."
    q = "What is the word?"

    def qa(i, **kw):
        base = {"id": f"b{i}", "question": q, "is_impossible": False,
                "answers": [{"text": "gamma", "answer_start": ctx.index("gamma")}]}
        base.update(kw)
        return base

    long_q = " ".join(["word"] * 80) + "?"
    return {"version": "v2.0", "data": [{"title": "bad", "paragraphs": [
        {"context": ctx, "qas": [
            qa(0),                                                           # fine
            qa(1, answers=[{"text": "gamma", "answer_start": 3}]),           # answer_mismatch
            qa(2, answers=[{"text": "gamma", "answer_start": 999}]),         # answer_mismatch
            qa(3, answers=[{"text": "gamma", "answer_start": "12"}]),        # answer_mismatch
            qa(4, question=long_q),                                          # query_truncated
            qa(5, id=None),                                                  # missing_id
            qa(0),                                                           # duplicate_id
            qa(7, question="  "),                                            # empty_question
            qa(8, question=17),                                              # question_not_string
            qa(9, answers=[{"text": "", "answer_start": 0}]),                # empty_answer
            qa(10, answers=[{"text": " ", "answer_start": 5}]),              # empty_answer
            qa(11, answers=[]),                                              # no_answer
            qa(12, is_impossible=True, answers=[]),                          # fine (impossible)
            42,                                                              # invalid_structure
            {k: v for k, v in qa(14).items() if k != "is_impossible"},       # missing_is_impossible
            qa(15, question="Why \ud800?"),                                  # invalid_unicode
        ]},
        {"context": "", "qas": [qa(20)]},                                    # empty_context
        {"context": None, "qas": [qa(21)]},                                  # context_not_string
        {"context": "  \u200b\u200b  ", "qas": [qa(22, answers=[{"text": "\u200b",
                                                                  "answer_start": 2}])]},
        {"context": "Lone \udc00 surrogate.", "qas": [qa(23)]},               # invalid_unicode
        "not a paragraph",                                                   # invalid_structure
    ]}]}


def test_bad_input_is_counted_not_raised(tmp_path):
    src = tmp_path / "bad.json"
    src.write_text(json.dumps(_bad_dataset()), encoding="utf-8")
    out = str(tmp_path / "rec")
    m = sd.build_squad_records(F.tiny_spm(), out, train_file=str(src), predict_file=str(src),
                               max_seq_length=48, doc_stride=16, max_query_length=16, seed=1)
    tr, dv = m["splits"]["train"], m["splits"]["dev"]
    common = {"missing_id": 1, "duplicate_id": 1, "empty_question": 1, "question_not_string": 1,
              "invalid_structure": 2, "invalid_unicode": 2, "empty_context": 1,
              "context_not_string": 1, "empty_paragraph_tokens": 1}
    assert tr["skipped"] == {**common, "answer_mismatch": 3, "empty_answer": 2, "no_answer": 1}
    assert dv["skipped"] == common
    assert tr["warnings"] == {"query_truncated": 1, "missing_is_impossible": 1}
    assert dv["warnings"] == {"query_truncated": 1, "missing_is_impossible": 1,
                              "eval_answer_mismatch": 5}
    assert tr["num_questions_read"] == dv["num_questions_read"] == 20
    assert tr["num_examples"] == 4 and dv["num_examples"] == 10
    # every unkept question is counted once, plus the paragraph that is not an object
    assert tr["num_skipped"] == 20 - 4 + 1 and dv["num_skipped"] == 20 - 10 + 1
    assert tr["samples"]["answer_mismatch"] == ["b1", "b2", "b3"]
    data = pp.load_eval_data(out, "dev")
    assert len(data.examples) == 10
    assert sorted(set(data.features["example_index"].tolist())) == list(range(10))
    # v1.1 build of the same file: the impossible question is dropped and counted
    m1 = sd.build_squad_records(F.tiny_spm(), str(tmp_path / "v1"), train_file=str(src),
                                max_seq_length=48, doc_stride=16, max_query_length=16,
                                version_2_with_negative=False)
    assert m1["splits"]["train"]["skipped"]["impossible_in_v1"] == 1


def test_bad_files_and_arguments_raise_clear_errors(tmp_path):
    notjson = tmp_path / "x.json"
    notjson.write_text("{not json", encoding="utf-8")
    nodata = tmp_path / "y.json"
    nodata.write_text('{"version": "1.1"}', encoding="utf-8")
    for path, msg in ((notjson, "not a UTF-8 JSON"), (nodata, "not a SQuAD file"),
                      (tmp_path / "missing.json", "file not found")):
        with pytest.raises(sd.DataError, match=msg):
            sd.build_squad_records(F.tiny_spm(), str(tmp_path / "o"), train_file=str(path))
    with pytest.raises(sd.DataError, match="different SQuAD versions"):
        sd.build_squad_records(F.tiny_spm(), str(tmp_path / "o"),
                               train_file=os.path.join(SQUAD_DIR, "train-v1.1.json"),
                               predict_file=os.path.join(SQUAD_DIR, "dev-v2.0.json"))
    with pytest.raises(ValueError, match="max_query_length"):
        sd.build_squad_records(F.tiny_spm(), str(tmp_path / "o"),
                               train_file=os.path.join(SQUAD_DIR, "train-v1.1.json"),
                               max_seq_length=20, max_query_length=17)


# ---- records, side files, readers, CLI --------------------------------------------------------

def _build(tmp_path, version="v2.0", **kw):
    out = str(tmp_path / f"rec_{version}")
    m = sd.build_squad_records(F.tiny_spm(), out,
                               train_file=os.path.join(SQUAD_DIR, f"train-{version}.json"),
                               predict_file=os.path.join(SQUAD_DIR, f"dev-{version}.json"),
                               **{**SMALL, **kw})
    return out, m


def test_records_readers_and_side_files(tmp_path):
    import tensorflow as tf

    out, m = _build(tmp_path)
    L = SMALL["max_seq_length"]
    assert m["version"] == "2.0" and m["version_2_with_negative"] is True
    assert m["text"]["spiece_sha256"] == T.file_sha256(F.tiny_spm())
    for k in ("max_seq_length", "doc_stride", "max_query_length"):
        assert m[k] == SMALL[k]
    tr, dv = m["splits"]["train"], m["splits"]["dev"]
    assert tr["num_examples"] == dv["num_examples"] == 40 and tr["num_records"] > 40
    assert {"train.tfrecord", "dev.tfrecord", "dev.features.npz", "dev.examples.json",
            "manifest.json"} == set(os.listdir(out))

    ds = sd.squad_dataset(out, 8, True, L, F.tiny_spm(), repeat=False, doc_stride=16)
    ints = ("input_ids", "segment_ids", "cls_index", "start_positions", "end_positions",
            "unique_id")
    for name, spec in ds.element_spec.items():
        assert spec.dtype == (tf.int32 if name in ints else tf.float32), name
        assert spec.shape.as_list() == ([8, L] if name in sd.SEQUENCE_NAMES else [8]), name
    n = 0
    for b in ds:
        b = {k: v.numpy() for k, v in b.items()}
        n += 8
        rows = np.arange(8)
        cls = b["cls_index"]
        assert (b["input_ids"][rows, cls] == T.CLS_ID).all()
        assert (b["segment_ids"][rows, cls] == T.SEG_ID_CLS).all()
        assert (b["attention_mask"].sum(1) == cls + 1).all()
        assert (b["p_mask"][rows, cls] == 0).all()
        assert ((1 - b["p_mask"]) * (b["segment_ids"] != 0)).sum() == 8  # only CLS besides P
        s, e = b["start_positions"], b["end_positions"]
        imp = b["is_impossible"] == 1
        assert (s[imp] == cls[imp]).all() and (e[imp] == cls[imp]).all()
        assert (s <= e).all() and (b["p_mask"][rows, s][~imp] == 0).all()
        assert (b["is_real_example"] == 1).all()
    assert n == tr["num_records"] // 8 * 8

    # eval: file order, padded to whole batches, nothing dropped
    side = pp.load_eval_data(out, "dev")
    nf = dv["num_records"]
    batches = [{k: v.numpy() for k, v in b.items()}
               for b in sd.squad_dataset(out, 16, False, L, spiece_sha256=m["text"]["spiece_sha256"])]
    assert all(b["input_ids"].shape == (16, L) for b in batches)
    uid = np.concatenate([b["unique_id"] for b in batches])
    real = np.concatenate([b["is_real_example"] for b in batches])
    assert real.sum() == nf and (uid[real == 1] == np.arange(nf)).all() and (uid[real == 0] == -1).all()
    for key in ("start_positions", "end_positions", "cls_index"):
        got = np.concatenate([b[key] for b in batches])[real == 1]
        np.testing.assert_array_equal(got, side.features[key])
    # the round trip through the written side files
    examples = [se.SquadExample(e["id"], e["question"], e["context"], e["answers"],
                                e["is_impossible"]) for e in side.examples]
    preds = pp.compute_predictions(side, _gold_results(side), max_answer_length=L)
    for ex in examples:
        if not ex.is_impossible:
            assert preds.predictions[ex.qas_id] == ex.answers[0]["text"]

    with pytest.raises(ManifestError, match="doc_stride"):
        sd.squad_dataset(out, 8, True, L, doc_stride=128)
    with pytest.raises(ManifestError, match="max_seq_length"):
        sd.squad_dataset(out, 8, True, 128)
    with pytest.raises(sd.DataError, match="max_query_length"):  # a different build, same dir
        _build(tmp_path, max_query_length=8)


def test_cli_builds_v1_records(tmp_path):
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", CUDA_VISIBLE_DEVICES="-1")
    out = str(tmp_path / "cli")
    args = [sys.executable, "tfrecords/build_squad.py", f"--spiece_model={F.tiny_spm()}",
            f"--output_dir={out}", f"--train_file={SQUAD_DIR}/train-v1.1.json",
            f"--predict_file={SQUAD_DIR}/dev-v1.1.json", "--max_seq_length=64",
            "--doc_stride=16", "--max_query_length=16"]
    r = subprocess.run(args, cwd=F.REPO_ROOT, env=env, capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    assert "SQuAD 1.1" in r.stdout and "train: 40 questions -> 40 examples" in r.stdout
    with open(os.path.join(out, "manifest.json"), encoding="utf-8") as f:
        m = json.load(f)
    assert m["version_2_with_negative"] is False and m["splits"]["dev"]["num_examples"] == 40
    r = subprocess.run(args[:4] + [f"--train_file={tmp_path}/nope.json"], cwd=F.REPO_ROOT,
                       env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 2 and "build_squad.py: error:" in r.stderr and "not found" in r.stderr
