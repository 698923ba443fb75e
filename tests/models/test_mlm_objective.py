"""BERT's masked-LM objective on the pretraining pipeline (`--objective=mlm`): the records' mask rates,
the model's content-stream prediction with full attention within each part, the loss, and the
manifest's objective checked by the trainer."""

import os

import numpy as np
import pytest
import tensorflow as tf

from tests import data_fixtures
from tfrecords.pretrain import writer as pretrain_data
from tfrecords.manifest import ManifestError, read_manifest
from xlnet_tf.text.tokenization import CLS_ID, MASK_ID, SEP_ID, SPECIAL_SYMBOLS

DATA = dict(seq_len=64, reuse_len=32, num_predict=12, perm_size=16, global_batch_size=8)


def _records(objective, split="train", corpus="austen_moby_slice.txt"):
    out = os.path.join(data_fixtures.tmp_root(), f"mlm_test_{objective}_{split}")
    if not os.path.exists(os.path.join(out, "manifest.json")):
        cfg = pretrain_data.PretrainConfig(**DATA, bi_data=True, seed=5, split=split, objective=objective)
        pretrain_data.build_pretrain_records(os.path.join(data_fixtures.CORPUS_DIR, corpus),
                                             data_fixtures.tiny_spm(), out, cfg, log=None)
    return out


def _compact(directory):
    ds = pretrain_data.pretrain_dataset(directory, **DATA, objective=read_manifest(directory)["params"].get(
        "objective", "plm"), decode=False)
    return {k: np.concatenate([b[k].numpy() for b in ds]) for k in ("input_ids", "segment_ids", "perm_rank",
                                                                   "target_index", "target_ids")}


def test_mlm_records_mask_rates_and_functional_tokens():
    mlm, plm = _compact(_records("mlm")), _compact(_records("plm"))
    n = mlm["input_ids"].shape[0]
    assert n > 1000
    valid = mlm["target_index"] >= 0
    # 15% of each part's non-functional tokens: round(0.15 * 32) + round(0.15 * 29) = 5 + 4 per example.
    assert (valid.sum(1) == 9).all()
    rows = np.repeat(np.arange(n)[:, None], DATA["num_predict"], 1)[valid]
    pos = mlm["target_index"][valid]
    inp, orig = mlm["input_ids"][rows, pos], mlm["target_ids"][valid]
    assert not np.isin(orig, [SEP_ID, CLS_ID]).any()  # functional tokens are never targets
    m = len(orig)
    share = {"mask": (inp == MASK_ID).mean(), "kept": (inp == orig).mean()}
    share["random"] = 1 - share["mask"] - share["kept"]
    tol = 4 * np.sqrt(0.8 * 0.2 / m)  # four binomial standard deviations
    assert abs(share["mask"] - 0.8) < tol and abs(share["kept"] - 0.1) < tol + 0.002, share
    assert abs(share["random"] - 0.1) < tol + 0.002, share  # a random draw can hit the original token
    random_ids = inp[(inp != MASK_ID) & (inp != orig)]
    assert random_ids.min() >= len(SPECIAL_SYMBOLS)  # random replacements are never special symbols
    off = np.ones(mlm["input_ids"].shape, bool)
    off[rows, pos] = False
    assert not (mlm["input_ids"][off] == MASK_ID).any()  # <mask> only at targets
    func = np.isin(mlm["input_ids"], [SEP_ID, CLS_ID])
    assert (func.sum(1) == 3).all() and (mlm["input_ids"][:, -1] == CLS_ID).all()
    assert (mlm["perm_rank"] == -1).all()  # no factorization order
    # Same layout family as PLM: same features, segments, number of steps (same spans sampler and A/B split).
    assert set(plm) == set(mlm) and mlm["input_ids"].shape == plm["input_ids"].shape
    assert (mlm["segment_ids"][:, -1] == 2).all()
    params = read_manifest(_records("mlm"))["params"]
    assert params["objective"] == "mlm" and params["mlm_mask_rate"] == 0.15


def test_mlm_parameters_are_checked(tmp_path):
    bad = [dict(mlm_mask_rate=0.5, match="num_predict"), dict(mlm_mask_rate=0.0, match="mlm_mask_rate"),
           dict(mlm_mask_token_prob=0.95, match="sum"), dict(objective="clm", match="objective")]
    for b in bad:
        match = b.pop("match")
        objective = b.pop("objective", "mlm")
        cfg = pretrain_data.PretrainConfig(**DATA, objective=objective, **b)
        with pytest.raises(pretrain_data.BuildError, match=match):
            cfg.validate()


def _model(objective, seed=0):
    import keras

    from xlnet_tf.config import XLNetConfig
    from xlnet_tf.models import XLNetPretrainer

    keras.utils.set_random_seed(seed)
    config = XLNetConfig(n_token=data_fixtures.TINY_VOCAB, n_layer=2, d_model=32, n_head=2, d_head=16,
                         d_inner=64, mem_len=32, reuse_len=32, bi_data=True, dropout=0.0, dropatt=0.0,
                         initializer_range=0.3)
    return XLNetPretrainer(config, objective=objective)


def _batch(directory):
    ds = pretrain_data.pretrain_dataset(directory, **DATA, objective="mlm")
    return next(iter(ds))


def test_mlm_predicts_from_the_content_stream_with_full_attention_in_each_part():
    features = _batch(_records("mlm"))
    model = _model("mlm")
    out = model(features)
    # Logits = tied LM head on the content output gathered at the targets.
    content = out["content"].numpy()
    tidx = features["target_index"].numpy() if "target_index" in features else None
    mapping = features["target_mapping"].numpy()
    gathered = np.einsum("bpl,bld->bpd", mapping, content)
    expect = model.lm_head(tf.constant(gathered), model.backbone.word_embedding).numpy()
    np.testing.assert_allclose(out["logits"].numpy(), expect, rtol=1e-5, atol=1e-5)
    assert tidx is None and features["input_q"].numpy().sum() == 0
    # The query stream (mask_emb) plays no part.
    model.backbone.mask_emb.assign(model.backbone.mask_emb + 1.0)
    np.testing.assert_allclose(model(features)["logits"].numpy(), out["logits"].numpy(), rtol=1e-5, atol=1e-5)

    # Attention: a change in the new part moves targets on both sides of it in the new part, never the
    # reuse part's (its states are the next segment's memory); a change in the reuse part moves both.
    def targets_moved(position):
        changed = dict(features)
        ids = features["input_ids"].numpy().copy()
        ids[0, position] = 100 if ids[0, position] != 100 else 101
        changed["input_ids"] = tf.constant(ids)
        delta = np.abs(model(changed)["logits"].numpy()[0] - model(features)["logits"].numpy()[0]).max(-1)
        t = np.argmax(mapping[0], -1)[mapping[0].sum(-1) > 0]
        return {int(p) for p, d in zip(t, delta[:len(t)]) if d > 1e-6}

    targets = np.argmax(mapping[0], -1)[mapping[0].sum(-1) > 0]
    new_targets = [int(p) for p in targets if p >= 32]
    reuse_targets = [int(p) for p in targets if p < 32]
    mid = (new_targets[0] + new_targets[-1]) // 2
    mid = mid if mid not in new_targets else mid + 1
    moved = targets_moved(mid)
    assert {p for p in new_targets if p != mid} <= moved
    assert not (moved & set(reuse_targets))
    moved = targets_moved(5 if 5 not in reuse_targets else 6)
    assert set(new_targets) <= moved and set(reuse_targets) - {5, 6} <= moved


def test_mlm_loss_is_the_mean_cross_entropy_at_the_targets():
    features = _batch(_records("mlm"))
    model = _model("mlm")
    out = model(features)
    logits = out["logits"].numpy().astype(np.float64)
    logp = logits - np.log(np.exp(logits - logits.max(-1, keepdims=True)).sum(-1, keepdims=True)) - \
        logits.max(-1, keepdims=True)
    ids = features["target_ids"].numpy()
    mask = features["target_mask"].numpy()
    nll = -np.take_along_axis(logp, ids[..., None], -1)[..., 0]
    expect = (nll * mask).sum() / mask.sum()
    np.testing.assert_allclose(float(model.task_loss(features, out)), expect, rtol=1e-5)
    loss, _, count = model.plm_metrics(features, out)
    np.testing.assert_allclose(float(loss), expect, rtol=1e-5)
    assert int(count) == 9 * DATA["global_batch_size"]


def _run(args):
    from run import pretrain

    return data_fixtures.run_with_flags(pretrain, args)


def _args(record_dir, model_dir, *extra):
    return ["--n_layer=2", "--d_model=32", "--n_head=2", "--d_head=16", "--d_inner=64",
            f"--n_token={data_fixtures.TINY_VOCAB}", "--mem_len=32", "--seq_len=64", "--reuse_len=32",
            "--num_predict=12", "--perm_size=16", "--train_batch_size=8", "--bi_data=true",
            "--learning_rate=3e-3", "--warmup_steps=5", "--adam_epsilon=1e-6", "--dropout=0.0",
            "--dropatt=0.0", f"--record_dir={record_dir}", f"--model_dir={model_dir}",
            f"--spiece_model={data_fixtures.tiny_spm()}", *extra]


def test_trainer_checks_the_objective_and_mlm_trains(tmp_path):
    mlm, plm_heldout = _records("mlm"), _records("plm", "heldout", "sotu_slice.txt")
    with pytest.raises(ManifestError, match="objective.*'mlm' in the records.*'plm'"):
        _run(_args(mlm, tmp_path / "a"))  # --objective defaults to plm
    with pytest.raises(ManifestError, match="objective.*'plm' in the records.*'mlm'"):
        _run(_args(mlm, tmp_path / "b", "--objective=mlm", f"--eval_records_dir={plm_heldout}",
                   "--train_steps=2", "--warmup_steps=1", "--steps_per_loop=2", "--save_steps=2"))
    heldout = _records("mlm", "heldout", "sotu_slice.txt")
    result = _run(_args(mlm, tmp_path / "c", "--objective=mlm", f"--eval_records_dir={heldout}",
                        "--train_steps=40", "--steps_per_loop=20", "--save_steps=40", "--eval_batches=10",
                        "--jit_compile=true"))
    before, after = result["eval"][0], result["eval"][-1]
    # A random model already gets the 10% kept targets (tied embeddings), so it starts near ln(vocab).
    assert after["loss"] < before["loss"] - 0.5, (before, after)
    assert 0 < result["unigram_baseline"]["loss"] < before["loss"]


# ---------------------------------------------------------------------------- next-sentence prediction
def test_next_sentence_label_tells_a_continuation_from_a_random_b():
    rng = np.random.default_rng(0)
    sids = np.repeat(np.arange(400) % 2 == 0, 7)  # 400 sentences of 7 tokens
    bounds = pretrain_data.sentence_bounds(sids)
    labels = []
    for begin in range(0, 2000, 13):
        out = pretrain_data.split_a_and_b_labeled(sids, bounds, begin, 40, rng)
        (a0, a1, b0, b1), is_next = out
        if is_next:  # B starts at the sentence after A's last (A's trimmed tail, as the original, in between)
            assert a1 <= b0 and b0 in bounds and not ((bounds > a1) & (bounds < b0)).any()
        labels.append(is_next)
    assert 0.35 < np.mean(labels) < 0.65
    # the unlabeled split is the same draw
    r1, r2 = np.random.default_rng(3), np.random.default_rng(3)
    assert pretrain_data.split_a_and_b(sids, bounds, 50, 40, r1) == \
        pretrain_data.split_a_and_b_labeled(sids, bounds, 50, 40, r2)[0]


def _nsp_records(objective, nsp):
    out = os.path.join(data_fixtures.tmp_root(), f"nsp_test_{objective}_{nsp}")
    if not os.path.exists(os.path.join(out, "manifest.json")):
        cfg = pretrain_data.PretrainConfig(**DATA, bi_data=True, seed=5, objective=objective, nsp=nsp)
        pretrain_data.build_pretrain_records(os.path.join(data_fixtures.CORPUS_DIR, "austen_moby_slice.txt"),
                                             data_fixtures.tiny_spm(), out, cfg, log=None)
    return out


def test_nsp_records_add_the_label_and_change_nothing_else():
    with_nsp = pretrain_data.pretrain_dataset(_nsp_records("plm", True), **DATA, nsp=True, decode=False)
    plain = pretrain_data.pretrain_dataset(_nsp_records("plm", False), **DATA, decode=False)
    labels = []
    for a, b in zip(with_nsp, plain):
        for k in b:
            np.testing.assert_array_equal(a[k].numpy(), b[k].numpy())
        labels.append(a["is_next"].numpy())
    labels = np.concatenate(labels)
    # Below 1/2 at this short length: with no sentence end within A+B's 29 tokens, B is random (the original).
    assert set(labels) == {0, 1} and 0.15 < labels.mean() < 0.5
    # a PLM build without nsp keeps its fingerprint from before the option existed (no "nsp" key in it)
    assert "nsp" not in pretrain_data.PretrainConfig(**DATA).fingerprint_params()
    assert read_manifest(_nsp_records("plm", True))["schema"]["is_next"].startswith("int64[1]")


def test_nsp_loss_and_trainer_check(tmp_path):
    from xlnet_tf import checkpoints
    from xlnet_tf.config import XLNetConfig
    from xlnet_tf.models import XLNetPretrainer

    features = next(iter(pretrain_data.pretrain_dataset(_nsp_records("mlm", True), **DATA, objective="mlm",
                                                        nsp=True)))
    config = XLNetConfig(n_token=data_fixtures.TINY_VOCAB, n_layer=1, d_model=32, n_head=2, d_head=16,
                         d_inner=64, dropout=0.0, dropatt=0.0)
    model = XLNetPretrainer(config, objective="mlm", nsp=True)
    out = model(features)
    assert out["nsp_logits"].shape == (DATA["global_batch_size"], 2)
    mask = features["target_mask"].numpy()
    lm = model.per_token_loss(features, out).numpy()
    nsp = tf.nn.sparse_softmax_cross_entropy_with_logits(labels=features["is_next"],
                                                         logits=out["nsp_logits"]).numpy()
    expect = ((lm + nsp[:, None]) * mask).sum() / mask.sum()
    np.testing.assert_allclose(float(model.task_loss(features, out)), expect, rtol=1e-5)
    # the held-out metric stays the LM loss alone
    np.testing.assert_allclose(float(model.plm_metrics(features, out)[0]), (lm * mask).sum() / mask.sum(),
                               rtol=1e-5)
    names = checkpoints.model_variables(model)
    assert {"model/nsp/summary/summary/kernel", "model/nsp/output/kernel"} <= set(names)

    with pytest.raises(ManifestError, match="nsp"):
        _run(_args(_records("mlm"), tmp_path / "a", "--objective=mlm", "--nsp"))
    result = _run(_args(_nsp_records("mlm", True), tmp_path / "b", "--objective=mlm", "--nsp", "--train_steps=6",
                        "--steps_per_loop=2", "--save_steps=6"))
    assert np.isfinite(result["history"][-1]["loss"])
