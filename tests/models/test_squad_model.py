"""XLNet's SQuAD head: parity with HF XLNetForQuestionAnswering (beam search, answer class, loss)."""

import numpy as np
import tensorflow as tf
import torch
import transformers

from tests.parity_utils import TINY, hf_config, max_diff, randomize_
from tests import tie_safe
from xlnet_tf import checkpoints
from xlnet_tf.config import XLNetConfig
from xlnet_tf.models import XLNetForSquad

CONFIG = XLNetConfig(**{**TINY, "dropout": 0.0, "dropatt": 0.0})
KS, KE = 3, 2


def _pair(seed, use_answer_class=True):
    cfg = hf_config(CONFIG)
    cfg.start_n_top, cfg.end_n_top = KS, KE
    hf = transformers.XLNetForQuestionAnswering(cfg).eval()
    randomize_(hf, seed=seed)
    ours = XLNetForSquad(CONFIG, start_n_top=KS, end_n_top=KE, use_answer_class=use_answer_class)
    state = {k: v.detach().numpy() for k, v in hf.state_dict().items()}
    checkpoints.load_hf_weights(ours, state, require_heads=True)
    return hf, ours


def _features(rng, batch=3, length=12):
    ids = rng.randint(0, CONFIG.n_token, (batch, length))
    seg = np.zeros((batch, length), np.int64)
    seg[:, 7:] = 1
    seg[:, 10] = 2
    seg[:, 11:] = 3
    mask = np.ones((batch, length), np.float32)
    mask[:, 11:] = 0.0
    p_mask = np.ones((batch, length), np.float32)
    p_mask[:, :6] = 0.0
    p_mask[:, 10] = 0.0
    return {"input_ids": ids, "segment_ids": seg, "attention_mask": mask, "p_mask": p_mask,
            "cls_index": np.full([batch], 10), "start_positions": np.array([1, 10, 3]),
            "end_positions": np.array([4, 10, 3]), "is_impossible": np.array([0.0, 1.0, 0.0], np.float32)}


def _torch(f, *keys):
    return {k: torch.tensor(f[k]) for k in keys}


def test_beam_search_and_answer_class_match_hf(rng):
    hf, ours = _pair(seed=1)
    f = _features(rng)
    with torch.no_grad():
        ref = hf(**_torch(f, "input_ids", "attention_mask", "p_mask", "cls_index"),
                 token_type_ids=torch.tensor(f["segment_ids"]))
    out = ours(f)
    tie_safe.assert_no_near_ties(ref.start_top_log_probs.numpy())  # then the beams are ordered alike anywhere
    tie_safe.assert_no_near_ties(ref.end_top_log_probs.numpy().reshape(-1, KE, KS).transpose(0, 2, 1))
    np.testing.assert_array_equal(out["start_top_index"].numpy(), ref.start_top_index.numpy())
    assert max_diff(np.exp(out["start_top_log_probs"]), ref.start_top_log_probs.numpy()) <= 1e-5  # HF: probs
    # HF lays the end arrays out end-major ([B, Ke, Ks] flattened); ours are start-major as the original.
    ref_end_index = ref.end_top_index.numpy().reshape(-1, KE, KS).transpose(0, 2, 1).reshape(-1, KS * KE)
    ref_end_probs = ref.end_top_log_probs.numpy().reshape(-1, KE, KS).transpose(0, 2, 1).reshape(-1, KS * KE)
    np.testing.assert_array_equal(out["end_top_index"].numpy(), ref_end_index)
    assert max_diff(np.exp(out["end_top_log_probs"]), ref_end_probs) <= 1e-5
    assert max_diff(out["cls_logits"], ref.cls_logits.numpy()) <= 1e-5
    # every proposed start/end is a valid answer position (p_mask 0)
    allowed = f["p_mask"] == 0
    for key in ("start_top_index", "end_top_index"):
        idx = out[key].numpy()
        assert all(allowed[b, idx[b]].all() for b in range(idx.shape[0]))


def test_training_loss_matches_hf_span_loss(rng):
    hf, ours = _pair(seed=2, use_answer_class=False)
    f = _features(rng)
    hf.train()
    with torch.no_grad():
        ref = hf(**_torch(f, "input_ids", "attention_mask", "p_mask", "start_positions", "end_positions"),
                 token_type_ids=torch.tensor(f["segment_ids"])).loss.item()
    out = ours(f, training=True)
    assert abs(float(ours.task_loss(f, out)) - ref) <= 1e-5


def test_answer_class_loss_and_names(rng):
    _, ours = _pair(seed=3)
    f = _features(rng)
    out = ours(f, training=True)
    span_only = XLNetForSquad(CONFIG, use_answer_class=False)
    span_only.set_weights([w for w, v in zip(ours.get_weights(), ours.weights) if "answer_class" not in v.path])
    bce = tf.nn.sigmoid_cross_entropy_with_logits(labels=f["is_impossible"], logits=out["cls_logits"])
    expected = float(span_only.task_loss(f, span_only(f, training=True))) + 0.5 * float(tf.reduce_mean(bce))
    assert abs(float(ours.task_loss(f, out)) - expected) < 1e-5
    names = set(checkpoints.model_variables(ours))
    assert {"start_logits/dense/kernel", "end_logits/LayerNorm/gamma", "answer_class/dense_1/kernel"} <= names
    assert "answer_class/dense_1/bias" not in names
