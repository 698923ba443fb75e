"""tfrecords/pretrain/writer.py (with pretrain_config, pretrain_rows, pretrain_examples, pretrain_reader) and
manifest.py: builder, stream layout, reader, validation."""

import dataclasses
import filecmp
import json
import os
import shutil

import numpy as np
import pytest

from tests import data_fixtures as F
from tfrecords.readers import corpus as corpus_lib
from tfrecords import inspect_records
from tfrecords import manifest as manifest_lib
from tfrecords.pretrain import writer as PD
from tfrecords.pretrain import rows as pretrain_rows
from tfrecords.pretrain.config import BuildError, PretrainConfig, record_file_name
from tfrecords.pretrain.examples import iter_steps
from tfrecords.pretrain.reader import (
    COMPACT_NAMES,
    OUTPUT_NAMES,
    decode_compact,
    make_pretrain_dataset_fn,
    pretrain_dataset,
)
from xlnet_tf.text import layout
from xlnet_tf.text.tokenization import CLS_ID, EOD_ID, SEP_ID

S = F.SMALL
READ = dict(seq_len=S["seq_len"], reuse_len=S["reuse_len"], num_predict=S["num_predict"],
            global_batch_size=S["global_batch_size"])


def raw_records(directory):
    m = manifest_lib.read_manifest(directory)
    p = m["params"]
    recs = list(inspect_records.iter_records(manifest_lib.check_record_files(m), p["seq_len"],
                                             p["num_predict"]))
    return m, {k: np.stack([r[k] for r in recs]) for k in recs[0]}


def file_records(directory, name, seq_len, num_predict):
    recs = list(inspect_records.iter_records([os.path.join(directory, name)], seq_len,
                                             num_predict))
    return {k: np.stack([r[k] for r in recs]) for k in recs[0]}


def same_dirs(a, b):
    names = sorted(n for n in os.listdir(a) if not n.startswith("."))
    assert names == sorted(n for n in os.listdir(b) if not n.startswith("."))
    for n in names:
        if n.endswith(".tfrecord") or n == "manifest.json":
            assert filecmp.cmp(os.path.join(a, n), os.path.join(b, n), shallow=False), n


# ---- builder -----------------------------------------------------------------------------------

def test_manifest_and_files():
    d = F.built_records()
    m = manifest_lib.read_manifest(d)
    assert m["params"] == {**dataclasses.asdict(PretrainConfig()), **S}
    names = [e["name"] for e in m["files"]]
    assert names == [f"train-{p}-{s:05d}-of-00003.tfrecord" for p in range(2) for s in range(3)]
    assert m["spiece_model"]["sha256"] == F.tiny_tokenizer().sha256
    assert m["stream_layout"]["per_replica_batch_size"] == 4
    for e in m["files"]:
        assert e["num_examples"] == e["num_steps"] * S["global_batch_size"] > 0
        assert e["num_bytes"] == os.path.getsize(os.path.join(d, e["name"]))
        assert os.path.isfile(os.path.join(d, e["name"] + ".json"))
    assert m["totals"]["num_examples"] == sum(e["num_examples"] for e in m["files"])
    # every document is used once per pass
    assert sum(e["num_docs"] for e in m["files"]) == 2 * m["inputs"]["num_docs"]
    assert not [n for n in os.listdir(d) if ".tmp" in n]


def test_record_invariants_over_all_records():
    d = F.built_records()
    ds = pretrain_dataset(d, num_replicas=2, **READ)
    L, R = S["seq_len"], S["reuse_len"]
    n = 0
    for x in ds.as_numpy_iterator():
        ids, pm, tm = x["input_ids"], x["perm_mask"], x["target_mapping"]
        tmask, q = x["target_mask"], x["input_q"]
        func = (ids == SEP_ID) | (ids == CLS_ID)
        is_t = q.astype(bool)
        diag = np.diagonal(pm, axis1=1, axis2=2)
        assert (diag[is_t] == 1).all()  # a target never sees itself (query stream)
        assert (diag[~is_t] == 0).all()  # others see themselves (content stream)
        assert not (is_t & func).any()  # <sep>/<cls> are never targets
        # the reuse part never sees the new part; the new part sees all of the reuse part
        assert (pm[:, :R, R:] == 1).all() and (pm[:, R:, :R] == 0).all()
        for b in range(ids.shape[0]):
            for lo, hi in ((0, R), (R, L)):
                blk = pm[b, lo:hi, lo:hi]
                # masked-or-functional = columns that plain context rows cannot see
                mof = np.zeros(hi - lo, bool)
                ctx_rows = np.flatnonzero(~is_t[b, lo:hi] & ~func[b, lo:hi]
                                          & (blk.diagonal() == 0))
                mof = blk[ctx_rows].max(0).astype(bool) if ctx_rows.size else mof
                ctx = ~mof
                assert (blk[np.ix_(ctx, ctx)] == 0).all()  # context sees context
                assert (blk[np.ix_(ctx, mof)] == 1).all()  # ... and no masked/functional
                assert (mof[func[b, lo:hi]]).all()  # <sep>/<cls> are in the order
                # masked/functional tokens see all context
                assert (blk[np.ix_(mof, ctx)] == 0).all()
                # the order among masked/functional tokens is a strict total order
                sub = blk[np.ix_(mof, mof)]
                seen = (sub == 0).sum(1) - (blk.diagonal()[mof] == 0)
                assert sorted(seen.tolist()) == list(range(int(mof.sum())))
        # target_mapping rows one-hot or zero, consistent with target_mask/ids/input_q
        rows = tm.sum(-1)
        assert set(np.unique(tm)) <= {0.0, 1.0} and set(np.unique(rows)) <= {0.0, 1.0}
        np.testing.assert_array_equal(rows, tmask)
        np.testing.assert_array_equal(tm.sum(1), q)
        pos = tm.argmax(-1)
        real = tmask.astype(bool)
        np.testing.assert_array_equal(x["target_ids"][real],
                                      np.take_along_axis(ids, pos, 1)[real])
        assert (x["target_ids"][~real] == 0).all()
        # padding slots only at the end of the P slots
        assert (np.sort(-tmask, axis=1) == -tmask).all()
        assert (x["attention_mask"] == 1).all()
        assert ((x["segment_ids"] >= 0) & (x["segment_ids"] <= 2)).all()
        n += ids.shape[0]
    m = manifest_lib.read_manifest(d)
    assert n == m["totals"]["num_examples"]
    assert m["totals"]["num_padded_slots"] > 0  # functional tokens were drawn sometimes


def test_padding_only_when_functional_tokens_were_drawn():
    cfg = F.small_config()
    data, sids, _ = pretrain_rows.load_shard_rows(F.CORPUS_GLOB, F.tiny_spm(), cfg, 0, 0)
    ws = F.tiny_tokenizer().word_start_table()
    rng = np.random.default_rng(0)
    n = 0
    for step in iter_steps(data, sids, cfg, ws, rng):
        for ex in step:
            func = (ex.input_ids == SEP_ID) | (ex.input_ids == CLS_ID)
            assert ex.is_masked.sum() == cfg.num_predict
            assert ex.is_masked[:cfg.reuse_len].sum() == 5
            assert (ex.target_index < 0).sum() == (ex.is_masked & func).sum()
            n += 1
        if n > 400:
            break


@pytest.mark.parametrize("bi_data", [True, False])
def test_stream_continuity_and_row_layout(bi_data):
    cfg = F.small_config(bi_data=bi_data, num_passes=1)
    d = F.built_records(bi_data=bi_data, num_passes=1)
    B, R, L = cfg.global_batch_size, cfg.reuse_len, cfg.seq_len
    bc = B // cfg.num_replicas
    for shard in range(cfg.num_shards):
        name = record_file_name("train", 0, shard, cfg.num_shards)
        rec = file_records(d, name, L, cfg.num_predict)
        steps = rec["input_ids"].shape[0] // B
        ids = rec["input_ids"].reshape(steps, B, L)
        seg = rec["segment_ids"].reshape(steps, B, L)
        rows, _, stream = pretrain_rows.load_shard_rows(F.CORPUS_GLOB, F.tiny_spm(), cfg, 0, shard)
        assert rows.shape[0] == B and 0 < steps <= (rows.shape[1] - L) // R + 1
        for t in range(steps):
            for r in range(B):
                # record (t, r) = reuse rows[r, tR:(t+1)R], then A starting right after it
                np.testing.assert_array_equal(ids[t, r, :R], rows[r, t * R:(t + 1) * R])
                la = int((seg[t, r, R:] == 0).sum()) - 1
                np.testing.assert_array_equal(ids[t, r, R:R + la],
                                              rows[r, (t + 1) * R:(t + 1) * R + la])
                if t + 1 < steps:  # row r of step t+1 continues row r of step t
                    k = min(la, R)
                    np.testing.assert_array_equal(ids[t + 1, r, :k], ids[t, r, R:R + k])
        if bi_data:
            for k in range(cfg.num_replicas):
                fwd = rows[k * bc:k * bc + bc // 2]
                bwd = rows[k * bc + bc // 2:(k + 1) * bc]
                np.testing.assert_array_equal(bwd, fwd[:, ::-1])
        # forward rows are consecutive chunks of the shard's token stream
        fwd_rows = (rows.reshape(cfg.num_replicas, 2, bc // 2, -1)[:, 0].reshape(-1, rows.shape[1])
                    if bi_data else rows)
        flat = fwd_rows.reshape(-1)
        np.testing.assert_array_equal(flat, stream[:flat.shape[0]])
        assert stream.shape[0] - flat.shape[0] < fwd_rows.shape[0]
        assert (stream == EOD_ID).sum() > 0


def test_make_rows_layout_small():
    ids = np.arange(48)
    sids = (ids // 5) % 2 == 0
    rows, rs = pretrain_rows.make_rows(ids, sids, global_batch_size=8, num_replicas=2, bi_data=True)
    # 4 chunks of 12; replica 0: chunks 0,1 then reversed; replica 1: chunks 2,3 then reversed
    expect = [ids[0:12], ids[12:24], ids[0:12][::-1], ids[12:24][::-1],
              ids[24:36], ids[36:48], ids[24:36][::-1], ids[36:48][::-1]]
    np.testing.assert_array_equal(rows, np.stack(expect))
    np.testing.assert_array_equal(rs[2], sids[0:12][::-1])
    rows, _ = pretrain_rows.make_rows(ids, sids, global_batch_size=4, num_replicas=2, bi_data=False)
    np.testing.assert_array_equal(rows, ids.reshape(4, 12))


def test_split_a_and_b_matches_original_loops():
    def original(sids, begin, tot_len, rng):  # the original control flow, same draws
        n = len(sids)
        if begin + tot_len >= n:
            return None
        end, cuts = begin + 1, []
        while end < n:
            if sids[end] != sids[end - 1]:
                if end - begin >= tot_len:
                    break
                cuts.append(end)
            end += 1
        if not cuts or rng.random() < 0.5:
            a_end = end if not cuts else cuts[rng.integers(len(cuts))]
            b_len = max(1, tot_len - (a_end - begin))
            b_begin = int(rng.integers(0, n - b_len))
            b_end = b_begin + b_len
            while b_begin > 0 and sids[b_begin - 1] == sids[b_begin]:
                b_begin -= 1
            while b_end < n - 1 and sids[b_end - 1] == sids[b_end]:
                b_end += 1
        else:
            a_end = cuts[rng.integers(len(cuts))]
            b_begin, b_end = a_end, end
        while (a_end - begin) + (b_end - b_begin) > tot_len:
            if a_end - begin > b_end - b_begin:
                a_end -= 1
            else:
                b_end -= 1
        if a_end >= n or b_end >= n:
            return None
        return begin, a_end, b_begin, b_end

    gen = np.random.default_rng(0)
    for trial in range(300):
        n = int(gen.integers(40, 400))
        sids = np.cumsum(gen.random(n) < gen.choice([0.02, 0.1, 0.4])) % 2 == 0
        begin, tot_len = int(gen.integers(0, n // 2)), int(gen.integers(2, 60))
        seed = int(gen.integers(1 << 30))
        got = pretrain_rows.split_a_and_b(sids, pretrain_rows.sentence_bounds(sids), begin, tot_len,
                               np.random.default_rng(seed))
        assert got == original(sids, begin, tot_len, np.random.default_rng(seed)), trial
        if got is not None:
            assert (got[1] - got[0]) + (got[3] - got[2]) == tot_len
    # the pair rule of the new part is the layout's (tests/text/test_text_packing.py checks it against the loop)
    assert pretrain_rows.shrink_pair is layout.shrink_pair


def test_tokenize_documents_sentence_ids():
    tok = F.tiny_tokenizer()
    ids, sids = pretrain_rows.tokenize_documents(tok, [["the nation", "a war"], ["peace"]])
    n1, n2, n3 = (len(tok.encode(s)) for s in ("the nation", "a war", "peace"))
    assert ids.tolist() == (tok.encode("the nation") + tok.encode("a war") + [EOD_ID]
                            + tok.encode("peace") + [EOD_ID])
    # <eod> shares the id of its document's last sentence
    assert sids.tolist() == [True] * n1 + [False] * (n2 + 1) + [True] * (n3 + 1)


def test_a_line_that_encodes_to_nothing_still_flips_the_sentence_id():
    """As the original `_create_data`: "a war" and "peace" around an empty encoding share one id (one
    sentence to the A/B split); the <eod> takes the id of the document's last line, also an empty one."""
    tok = F.tiny_tokenizer()
    empty = "\u0301"  # a lone combining accent: removed by the normalization, no pieces
    assert tok.encode(empty) == []
    ids, sids = pretrain_rows.tokenize_documents(tok, [["the nation", "a war", empty, "peace"],
                                                       ["war", empty]])
    n = [len(tok.encode(s)) for s in ("the nation", "a war", "peace", "war")]
    assert ids.tolist() == (tok.encode("the nation") + tok.encode("a war") + tok.encode("peace") + [EOD_ID]
                            + tok.encode("war") + [EOD_ID])
    # lines 0..3 (T F T F), then line 4 "war" T, line 5 empty F: its <eod> gets F
    assert sids.tolist() == ([True] * n[0] + [False] * n[1] + [False] * (n[2] + 1) + [True] * n[3]
                             + [False])


def test_records_are_compact_and_old_ones_are_refused(tmp_path):
    """perm_rank is stored + 1 (0 = context): at seq 512 a record is <= 2.5 KB (it was ~6 KB with -1
    varints), decoding is unchanged (the decode tests above), and format-1 records get a clear error."""
    out = str(tmp_path / "r512")
    cfg = PretrainConfig(seq_len=512, reuse_len=256, num_predict=85, perm_size=256, global_batch_size=2,
                            num_replicas=1, bi_data=False, seed=1)
    m = PD.build_pretrain_records(F.CORPUS_GLOB, F.tiny_spm(), out, cfg, log=None)
    per_example = m["totals"]["num_bytes"] / m["totals"]["num_examples"]
    assert m["totals"]["num_examples"] >= 4 and per_example <= 2500, per_example
    import tensorflow as tf

    raw = next(iter(tf.data.TFRecordDataset(os.path.join(out, m["files"][0]["name"])))).numpy()
    stored = list(tf.train.Example.FromString(raw).features.feature["perm_rank"].int64_list.value)
    assert min(stored) == 0 and len(stored) == 512  # no negative varints left
    rec = next(inspect_records.iter_records(manifest_lib.check_record_files(manifest_lib.read_manifest(out)),
                                            512, 85))
    assert int(rec["perm_rank"].min()) == -1  # read back as rank, -1 for context
    m.pop("_path", None), m.pop("_dir", None)
    manifest_lib.write_manifest(out, {**m, "format_version": 1})
    with pytest.raises(manifest_lib.ManifestError, match="format_version 1 .*rebuild the records"):
        manifest_lib.read_manifest(out)


def test_determinism_across_processes_and_tasks(tmp_path):
    ref = F.built_records()
    same_dirs(ref, F.built_records(num_processes=2))
    out = str(tmp_path / "tasks")
    cfg = F.small_config()
    assert PD.build_pretrain_records(F.CORPUS_GLOB, F.tiny_spm(), out, cfg, task_id=1,
                                     num_tasks=2, log=None) is None
    assert not os.path.exists(os.path.join(out, "manifest.json"))
    assert PD.build_pretrain_records(F.CORPUS_GLOB, F.tiny_spm(), out, cfg, task_id=0,
                                     num_tasks=2, log=None) is not None
    same_dirs(ref, out)
    other = F.built_records(seed=8)
    assert not filecmp.cmp(os.path.join(ref, "train-0-00000-of-00003.tfrecord"),
                           os.path.join(other, "train-0-00000-of-00003.tfrecord"), shallow=False)


def test_resume_skips_finished_shards(tmp_path):
    ref = F.built_records()
    out = str(tmp_path / "resume")
    shutil.copytree(ref, out)
    os.remove(os.path.join(out, "manifest.json"))
    victim = os.path.join(out, "train-1-00001-of-00003.tfrecord")
    os.remove(victim)
    with open(victim + ".tmp-99999", "wb") as f:  # left by a killed process
        f.write(b"partial")
    keep = os.path.join(out, "train-0-00000-of-00003.tfrecord")
    mtime = os.stat(keep).st_mtime_ns
    logs = []
    PD.build_pretrain_records(F.CORPUS_GLOB, F.tiny_spm(), out, F.small_config(),
                              log=logs.append)
    assert sum("skip finished" in s for s in logs) == 5
    assert os.stat(keep).st_mtime_ns == mtime
    same_dirs(ref, out)
    assert not os.path.exists(victim + ".tmp-99999")
    with pytest.raises(BuildError, match="already holds records built from other parameters"):
        PD.build_pretrain_records(F.CORPUS_GLOB, F.tiny_spm(), out, F.small_config(seed=1),
                                  log=None)


# ---- reader ------------------------------------------------------------------------------------

def test_reader_outputs_static_shapes_and_names():
    import tensorflow as tf

    ds = pretrain_dataset(F.built_records(), num_replicas=2, **READ)
    spec = ds.element_spec
    assert tuple(sorted(spec)) == tuple(sorted(OUTPUT_NAMES))
    b, L, P = 4, S["seq_len"], S["num_predict"]
    shapes = {"input_ids": [b, L], "segment_ids": [b, L], "perm_mask": [b, L, L],
              "target_mapping": [b, P, L], "target_mask": [b, P], "target_ids": [b, P],
              "input_q": [b, L], "attention_mask": [b, L]}
    for k, s in shapes.items():
        assert spec[k].shape.as_list() == s, k
        assert spec[k].dtype == (tf.int32 if k in ("input_ids", "segment_ids", "target_ids")
                                 else tf.float32)


def test_reader_compact_mode_decodes_identically():
    import tensorflow as tf

    d = F.built_records()
    dense = pretrain_dataset(d, num_replicas=2, **READ).take(4)
    compact = pretrain_dataset(d, num_replicas=2, decode=False, **READ).take(4)
    assert tuple(sorted(compact.element_spec)) == tuple(sorted(COMPACT_NAMES))
    decode = tf.function(lambda f: decode_compact(f, S["reuse_len"]))
    for a, b in zip(dense.as_numpy_iterator(), compact):
        b = decode(b)
        for k in OUTPUT_NAMES:
            np.testing.assert_array_equal(a[k], b[k].numpy(), err_msg=k)


def test_reader_per_replica_sharding_keeps_stream_order():
    import tensorflow as tf

    d = F.built_records()
    _, raw = raw_records(d)
    B = S["global_batch_size"]
    both = list(pretrain_dataset(d, num_replicas=2, **READ).take(6).as_numpy_iterator())
    r0 = list(pretrain_dataset(d, replica_id=0, num_replicas=2, **READ).take(3)
              .as_numpy_iterator())
    ctx1 = tf.distribute.InputContext(num_input_pipelines=2, input_pipeline_id=1,
                                      num_replicas_in_sync=2)
    r1 = list(make_pretrain_dataset_fn(d, **READ)(ctx1).take(3).as_numpy_iterator())
    ctx = tf.distribute.InputContext(num_input_pipelines=1, input_pipeline_id=0,
                                     num_replicas_in_sync=2)
    interleaved = list(make_pretrain_dataset_fn(d, **READ)(ctx).take(6).as_numpy_iterator())
    for t in range(3):
        for k, rep in ((0, r0), (1, r1)):
            # replica k at step t gets rows [4k, 4k+4) of step t, in order
            want = raw["input_ids"][t * B + 4 * k:t * B + 4 * k + 4]
            np.testing.assert_array_equal(rep[t]["input_ids"], want)
            np.testing.assert_array_equal(both[2 * t + k]["input_ids"], want)
            np.testing.assert_array_equal(interleaved[2 * t + k]["perm_mask"],
                                          both[2 * t + k]["perm_mask"])
    with pytest.raises(ValueError, match="num_replicas"):
        pretrain_dataset(d, num_replicas=3, input_context=ctx, **READ)


def test_reader_repeat_and_no_shuffle_with_mems():
    d = F.built_records(bi_data=False, num_replicas=1, num_passes=1)
    total = manifest_lib.read_manifest(d)["totals"]["num_steps"]
    ds = pretrain_dataset(d, repeat=True, **READ)
    assert len(list(ds.take(total + 2).as_numpy_iterator())) == total + 2
    with pytest.raises(ValueError, match="stream order"):
        pretrain_dataset(d, shuffle_buffer=8, **READ)
    shuffled = pretrain_dataset(d, shuffle_buffer=8, uses_mems=False, seed=1, **READ)
    assert len(list(shuffled.as_numpy_iterator())) == total
    # records without bi_data can be read with any replica count dividing the batch
    assert len(list(pretrain_dataset(d, num_replicas=4, **READ).as_numpy_iterator())) \
        == 4 * total


def test_manifest_validation_names_the_field(tmp_path):
    d = F.built_records()
    good = dict(READ, num_replicas=2)
    for field, bad in (("seq_len", 128), ("reuse_len", 16), ("num_predict", 11),
                       ("global_batch_size", 16), ("num_replicas", 1)):
        kw = dict(good, **{field: bad})
        with pytest.raises(manifest_lib.ManifestError, match=f"other settings: {field}: [0-9]+ in the records, {bad} given"):
            pretrain_dataset(d, **kw)
    other = tmp_path / "other.model"
    other.write_bytes(b"not the same model")
    with pytest.raises(manifest_lib.ManifestError, match="tokenized with the SentencePiece model of sha256 [0-9a-f]{64}, not the one given"):
        pretrain_dataset(d, spiece_model=str(other), **good)
    with pytest.raises(manifest_lib.ManifestError, match="perm_size: 16 in the records, 8 given"):
        pretrain_dataset(d, perm_size=8, **good)
    pretrain_dataset(d, spiece_model=F.tiny_spm(), perm_size=16, bi_data=True, **good)


def test_reader_errors_on_missing_empty_truncated_corrupt(tmp_path):
    import tensorflow as tf

    good = dict(READ, num_replicas=2)
    with pytest.raises(manifest_lib.ManifestError, match="does not exist"):
        pretrain_dataset(str(tmp_path / "nope"), **good)
    (tmp_path / "empty").mkdir()
    with pytest.raises(manifest_lib.ManifestError, match="is empty"):
        pretrain_dataset(str(tmp_path / "empty"), **good)
    d = str(tmp_path / "copy")
    shutil.copytree(F.built_records(), d)
    name = os.path.join(d, "train-0-00001-of-00003.tfrecord")
    data = open(name, "rb").read()
    with open(name, "wb") as f:
        f.write(data[:-100])
    with pytest.raises(manifest_lib.ManifestError, match="truncated"):
        pretrain_dataset(d, **good)
    corrupt = bytearray(data)
    corrupt[len(data) // 2:len(data) // 2 + 8] = b"\x00" * 8
    with open(name, "wb") as f:
        f.write(bytes(corrupt))
    ds = pretrain_dataset(d, **good)
    with pytest.raises((tf.errors.DataLossError, tf.errors.InvalidArgumentError)):
        for _ in ds:
            pass
    os.remove(name)
    with pytest.raises(manifest_lib.ManifestError, match="missing"):
        pretrain_dataset(d, **good)
    m = json.load(open(os.path.join(d, "manifest.json")))
    m["files"] = []
    json.dump(m, open(os.path.join(d, "manifest.json"), "w"))
    with pytest.raises(manifest_lib.ManifestError, match="no examples"):
        pretrain_dataset(d, **good)
    os.remove(os.path.join(d, "manifest.json"))
    with pytest.raises(manifest_lib.ManifestError, match="unfinished"):
        pretrain_dataset(d, **good)


# ---- bad builder input -------------------------------------------------------------------------

def _build(tmp_path, glob_, **overrides):
    return PD.build_pretrain_records(glob_, F.tiny_spm(), str(tmp_path / "out"),
                                     F.small_config(**overrides), log=None)


def test_bad_corpus_inputs(tmp_path):
    empty = tmp_path / "empty.txt"
    empty.write_text("\n  \n\n", encoding="utf-8")
    with pytest.raises(corpus_lib.CorpusError, match="no documents"):
        _build(tmp_path, str(empty))
    with pytest.raises(corpus_lib.CorpusError, match="matches no files"):
        _build(tmp_path, str(tmp_path / "none*.txt"))
    text = open(os.path.join(F.CORPUS_DIR, "sotu_slice.txt"), "rb").read()
    cut = text.index(b"\n", 5000) + 1
    bad = tmp_path / "bad" / "bad.txt"
    bad.parent.mkdir()
    bad.write_bytes(text[:cut] + b"caf\xe9 latin-1 line\n" + text[cut:])
    with pytest.raises(corpus_lib.CorpusError,
                       match=rf"bad\.txt: invalid UTF-8 at byte offset {cut + 3}"):
        _build(tmp_path, str(bad), num_shards=1)
    m = _build(tmp_path, str(bad), num_shards=1, num_passes=1, skip_invalid_utf8=True)
    assert m["inputs"]["num_invalid_lines"] == 1 and m["totals"]["num_invalid_lines"] == 1
    short = tmp_path / "short.txt"
    short.write_text("A short document.\n\nAnother one.\n", encoding="utf-8")
    with pytest.raises(BuildError, match="fewer than one step"):
        PD.build_pretrain_records(str(short), F.tiny_spm(), str(tmp_path / "o2"),
                                  F.small_config(num_shards=1), log=None)
    with pytest.raises(BuildError, match="num_shards"):
        PD.build_pretrain_records(str(short), F.tiny_spm(), str(tmp_path / "o3"),
                                  F.small_config(num_shards=3), log=None)


@pytest.mark.parametrize("overrides,match", [
    (dict(perm_size=12), "perm_size=12 must divide both halves"),
    (dict(reuse_len=40, perm_size=16), "perm_size=16 must divide"),
    (dict(reuse_len=0), "reuse_len must be in"),
    (dict(reuse_len=62), "reuse_len must be in"),
    (dict(global_batch_size=6), "bi_data needs an even per-replica batch"),
    (dict(global_batch_size=9, bi_data=False), "multiple of num_replicas"),
    (dict(num_predict=0), "num_predict"),
])
def test_bad_parameters(tmp_path, overrides, match):
    with pytest.raises(BuildError, match=match):
        _build(tmp_path, F.CORPUS_GLOB, **overrides)
    assert not os.path.exists(tmp_path / "out")  # refused before any work


def test_record_bytes_per_example_is_linear_in_seq_len(tmp_path, record_property):
    sizes = {}
    for L in (256, 512):
        d = F.built_records(seq_len=L, reuse_len=L // 2, perm_size=L // 2,
                            num_predict=85 * L // 512, global_batch_size=2, num_replicas=1,
                            bi_data=False, num_shards=1, num_passes=1)
        t = manifest_lib.read_manifest(d)["totals"]
        sizes[L] = t["num_bytes"] / t["num_examples"]
    record_property("record_bytes_per_example_512", round(sizes[512]))
    print(f"\nrecord bytes/example: seq_len 256: {sizes[256]:.0f}, seq_len 512: "
          f"{sizes[512]:.0f} (dense float32 perm_mask + target_mapping at 512: "
          f"{4 * (512 * 512 + 85 * 512)} bytes)")
    assert sizes[512] < 8 * 1024  # O(L): a few bytes per position
    assert 1.6 < sizes[512] / sizes[256] < 2.4


def test_inspect_in_process():
    lines = []
    stats = inspect_records.inspect(F.built_records(), index=13, out=lines.append)
    text = "\n".join(lines)
    assert "factorization order, new part" in text and "(all invariants hold)" in text
    assert "example #13: step 1, row 5 (forward), replica 1" in text
    assert stats["examples_read"] == manifest_lib.read_manifest(F.built_records())["totals"][
        "num_examples"]
    assert 1.0 < stats["target_run_length_mean"]


MIRRORED_SCRIPT = r'''
import sys
import numpy as np
import tensorflow as tf
cpu = tf.config.list_physical_devices("CPU")[0]
tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
sys.path.insert(0, sys.argv[1])
from tfrecords.pretrain.reader import make_pretrain_dataset_fn, pretrain_dataset
d = sys.argv[2]
kw = dict(seq_len=64, reuse_len=32, num_predict=10, global_batch_size=8)
strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
dist = strategy.distribute_datasets_from_function(make_pretrain_dataset_fn(d, **kw))
it = iter(dist)
for t in range(3):
    x = next(it)
    got = strategy.experimental_local_results(x["input_ids"])
    for k in range(2):
        ds = pretrain_dataset(d, replica_id=k, num_replicas=2, **kw)
        want = next(iter(ds.skip(t)))["input_ids"].numpy()
        assert np.array_equal(got[k].numpy(), want), (t, k)
    assert strategy.experimental_local_results(x["perm_mask"])[1].shape == (4, 64, 64)
print("MIRRORED_OK")
'''


@pytest.mark.slow  # per-replica rows in the default run: test_reader_per_replica_sharding_keeps_stream_order;
# the mirrored pipeline end to end: tests/training/test_distributed.py
def test_distribute_datasets_from_function_with_mirrored_strategy(tmp_path):
    """Each of 2 replicas gets its own rows of every step, in stream order."""
    import subprocess
    import sys

    script = tmp_path / "mirrored.py"
    script.write_text(MIRRORED_SCRIPT)
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", CUDA_VISIBLE_DEVICES="-1")
    r = subprocess.run([sys.executable, str(script), F.REPO_ROOT, F.built_records()],
                       capture_output=True, text=True, timeout=180, env=env)
    assert r.returncode == 0 and "MIRRORED_OK" in r.stdout, r.stderr[-3000:]
