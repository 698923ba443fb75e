"""Fine-tuning heads: parity with HF PyTorch XLNet (sequence classification, multiple choice), summary
types, original checkpoint names, losses."""

import numpy as np
import pytest
import tensorflow as tf
import torch
import transformers

from tests.parity_utils import TINY, hf_config, max_diff, randomize_
from xlnet_tf import checkpoints
from xlnet_tf.config import XLNetConfig
from xlnet_tf.heads import SequenceSummary
from xlnet_tf.models import XLNetClassifier, XLNetMultipleChoice

CONFIG = XLNetConfig(**{**TINY, "dropout": 0.0, "dropatt": 0.0})


def _inputs(rng, shape):
    ids = rng.randint(0, CONFIG.n_token, shape)
    seg = np.zeros(shape, np.int64)
    seg[..., shape[-1] // 2:] = 1
    seg[..., -1] = 2
    mask = np.ones(shape, np.float32)
    mask.reshape(-1, shape[-1])[1, :3] = 0
    seg.reshape(-1, shape[-1])[1, :3] = 4
    return {"input_ids": ids, "segment_ids": seg, "attention_mask": mask}


def _state(hf):
    return {k: v.detach().numpy() for k, v in hf.state_dict().items()}


@pytest.mark.parametrize("summary_type", ["last", "first"])
def test_sequence_classification_matches_hf(rng, summary_type):
    cfg = hf_config(CONFIG)
    cfg.num_labels, cfg.summary_type = 3, summary_type
    hf = transformers.XLNetForSequenceClassification(cfg).eval()
    randomize_(hf, seed=1)
    ours = XLNetClassifier(CONFIG, num_labels=3, task_name="hf", summary_type=summary_type)
    checkpoints.load_hf_weights(ours, _state(hf), require_heads=True)
    inputs = _inputs(rng, (3, 9))
    with torch.no_grad():
        ref = hf(input_ids=torch.tensor(inputs["input_ids"]), token_type_ids=torch.tensor(inputs["segment_ids"]),
                 attention_mask=torch.tensor(inputs["attention_mask"])).logits.numpy()
    assert max_diff(ours(inputs)["logits"], ref) <= 1e-5


def test_multiple_choice_matches_hf(rng):
    cfg = hf_config(CONFIG)
    hf = transformers.XLNetForMultipleChoice(cfg).eval()
    randomize_(hf, seed=2)
    ours = XLNetMultipleChoice(CONFIG, num_choices=4)
    state = {k.replace("logits_proj", "mc_scorer"): v for k, v in _state(hf).items()}
    arrays = checkpoints.hf_state_to_original(
        {k: v for k, v in state.items() if not k.startswith("mc_scorer")}, CONFIG)
    arrays["logits/dense/kernel"] = state["mc_scorer.weight"].T
    arrays["logits/dense/bias"] = state["mc_scorer.bias"]
    checkpoints.assign_arrays(ours, arrays, "hf", require_heads=True)
    inputs = _inputs(rng, (2, 4, 8))
    with torch.no_grad():
        ref = hf(input_ids=torch.tensor(inputs["input_ids"]), token_type_ids=torch.tensor(inputs["segment_ids"]),
                 attention_mask=torch.tensor(inputs["attention_mask"])).logits.numpy()
    out = ours(inputs)["logits"]
    assert out.shape == (2, 4)
    assert max_diff(out, ref) <= 1e-5


def test_mean_summary_ignores_padding_and_attn_masks_pads(rng):
    hidden = tf.constant(rng.randn(2, 5, 8).astype(np.float32))
    mask = np.array([[0, 0, 1, 1, 1], [1, 1, 1, 1, 1]], np.float32)
    mean = SequenceSummary(8, "mean", use_proj=False)(hidden, mask).numpy()
    np.testing.assert_allclose(mean[0], hidden.numpy()[0, 2:].mean(0), atol=1e-6)
    attn = SequenceSummary(8, "attn", n_head=2, d_head=4)
    a = attn(hidden, mask).numpy()
    changed = hidden.numpy().copy()
    changed[0, :2] += 10.0  # padding content must not matter
    np.testing.assert_allclose(attn(tf.constant(changed), mask).numpy()[0], a[0], atol=1e-5)
    with pytest.raises(ValueError, match="summary_type"):
        SequenceSummary(8, "max")


def test_original_head_names_and_losses(rng):
    clf = XLNetClassifier(CONFIG, num_labels=3, task_name="mnli", summary_type="attn")
    names = set(checkpoints.model_variables(clf))
    assert {"model/sequnece_summary/summary/kernel", "model/sequnece_summary/summary_bias",
            "model/sequnece_summary/abs_attn/q/kernel", "model/classification_mnli/logit/kernel"} <= names
    assert all(checkpoints.is_head_variable(n) for n in names if not n.startswith("model/transformer/"))
    reg = XLNetClassifier(CONFIG, regression=True, task_name="sts-b")
    assert "model/regression_sts-b/logit/bias" in checkpoints.model_variables(reg)
    inputs = _inputs(rng, (3, 6))
    inputs["label"] = np.array([0.5, 2.0, 4.0], np.float32)
    inputs["is_real_example"] = np.array([1, 1, 0], np.float32)
    out = reg(inputs)
    expected = np.mean((out["score"].numpy()[:2] - inputs["label"][:2]) ** 2)
    assert float(reg.task_loss(inputs, out)) == pytest.approx(expected, rel=1e-5)
    mc = XLNetMultipleChoice(CONFIG)
    assert "logits/dense/kernel" in checkpoints.model_variables(mc)
    assert mc.config.mem_len is None and not mc.config.bi_data


def test_fine_tuning_model_loads_pretrained_backbone(tmp_path):
    from xlnet_tf.models import XLNetPretrainer

    pre = XLNetPretrainer(CONFIG.replace(mem_len=8))
    checkpoints.save_original_checkpoint(pre, str(tmp_path / "xlnet_model.ckpt"))
    clf = XLNetClassifier(CONFIG, num_labels=2)
    report = checkpoints.load_init_checkpoint(clf, str(tmp_path))
    assert "model/lm_loss/bias" in report["skipped"]
    assert "model/classification_task/logit/kernel" in report["missing_heads"]
    np.testing.assert_array_equal(clf.backbone.word_embedding.numpy(), pre.backbone.word_embedding.numpy())
