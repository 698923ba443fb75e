"""Handing a model to Hugging Face: what `xlnet_tf/serving/hf_export.py` (and `run/convert_checkpoint.py --to_hf`) writes is
loaded by transformers' class for the head, computes our outputs to 1e-5, and imports back to the same weights."""

import json
import os

import numpy as np
import pytest
import torch
import transformers

from tests import data_fixtures
from tests.parity_utils import hf_config, hf_forward, make_pair, max_diff, random_inputs, randomize_
from xlnet_tf import checkpoints
from xlnet_tf.serving import hf_export
from xlnet_tf.config import XLNetConfig
from xlnet_tf.errors import UserError
from xlnet_tf.models import XLNetClassifier, XLNetForSquad, XLNetMultipleChoice, XLNetPretrainer, XLNetTagger

CONFIG = XLNetConfig(n_token=53, d_model=16, n_layer=2, n_head=2, d_head=8, d_inner=24, dropout=0.0, dropatt=0.0)


def _inputs(rng, shape=(3, 9)):
    ids = rng.randint(0, CONFIG.n_token, shape)
    seg = np.zeros(shape, np.int64)
    seg[..., shape[-1] // 2:] = 1
    seg[..., -1] = 2
    mask = np.ones(shape, np.float32)
    mask.reshape(-1, shape[-1])[1, :3] = 0  # left padding
    seg.reshape(-1, shape[-1])[1, :3] = 4
    return {"input_ids": ids, "segment_ids": seg, "attention_mask": mask}


def _hf_call(hf, inputs, **extra):
    with torch.no_grad():
        return hf(input_ids=torch.tensor(inputs["input_ids"]), token_type_ids=torch.tensor(inputs["segment_ids"]),
                  attention_mask=torch.tensor(inputs["attention_mask"]), **extra)


def _exported(model, tmp_path, cls, labels=None):
    """`model` written by the exporter and read back by transformers' `cls`."""
    config, state = hf_export.prepare(model, labels)
    hf_export.write(str(tmp_path / "hf"), config, state)
    assert json.load(open(tmp_path / "hf" / "config.json"))["architectures"] == [cls.__name__]
    return cls.from_pretrained(str(tmp_path / "hf")).eval()


def _same_weights(a, b):
    wa, wb = checkpoints.model_variables(a), checkpoints.model_variables(b)
    assert sorted(wa) == sorted(wb)
    for name in wa:
        np.testing.assert_array_equal(wa[name].numpy(), wb[name].numpy(), err_msg=name)


def test_a_pretrained_model_is_an_lm_head_model_with_our_logits_and_imports_back(tmp_path):
    source, ours, config = make_pair(seed=7)
    hf = _exported(ours, tmp_path, transformers.XLNetLMHeadModel)
    for name, value in source.state_dict().items():  # the very tensors it was imported from
        np.testing.assert_array_equal(hf.state_dict()[name].numpy(), value.numpy(), err_msg=name)
    inputs = random_inputs(np.random.RandomState(0), 2, 8, config.n_token, n_pred=3, left_pad=[0, 2])
    ref, _ = hf_forward(hf, inputs)
    assert max_diff(ours(inputs)["logits"], ref.logits.numpy()) <= 1e-5
    again = XLNetPretrainer.from_checkpoint(str(tmp_path / "hf"), require_heads=True)
    assert again.config.to_hf_dict() == config.to_hf_dict()
    _same_weights(again, ours)


@pytest.mark.parametrize("summary_type, regression", [("last", False), ("first", False), ("last", True)])
def test_a_classifier_is_a_sequence_classification_model_with_our_logits(tmp_path, summary_type, regression):
    rng = np.random.RandomState(1)
    ours = XLNetClassifier(CONFIG, num_labels=3, regression=regression, task_name="topic", summary_type=summary_type)
    ours(_inputs(rng))  # its own random initialization
    labels = None if regression else ["History", "Physics", "Zoology"]
    hf = _exported(ours, tmp_path, transformers.XLNetForSequenceClassification, labels)
    inputs = _inputs(rng)
    key = "score" if regression else "logits"
    got = np.asarray(ours(inputs)[key]).reshape(3, -1)
    assert max_diff(got, _hf_call(hf, inputs).logits.numpy()) <= 1e-5
    if regression:
        assert hf.config.problem_type == "regression" and hf.config.num_labels == 1
    else:
        assert hf.config.id2label == {0: "History", 1: "Physics", 2: "Zoology"}


def test_a_tagger_and_a_squad_model_and_multiple_choice_keep_their_outputs(tmp_path):
    rng = np.random.RandomState(3)
    cfg = hf_config(CONFIG)
    cfg.num_labels = 4
    source = transformers.XLNetForTokenClassification(cfg).eval()
    randomize_(source, seed=4)
    tagger = XLNetTagger(CONFIG, num_labels=4, labels=["ADJ", "NOUN", "VERB", "X"])
    checkpoints.load_hf_weights(tagger, {k: v.detach().numpy() for k, v in source.state_dict().items()},
                                require_heads=True)
    hf = _exported(tagger, tmp_path / "tagger", transformers.XLNetForTokenClassification)
    inputs = _inputs(rng)
    assert max_diff(tagger(inputs)["logits"], _hf_call(hf, inputs).logits.numpy()) <= 1e-5
    assert hf.config.id2label[1] == "NOUN"

    cfg = hf_config(CONFIG)
    cfg.start_n_top, cfg.end_n_top = 3, 2
    source = transformers.XLNetForQuestionAnswering(cfg).eval()
    randomize_(source, seed=5)
    squad = XLNetForSquad(CONFIG, start_n_top=3, end_n_top=2, use_answer_class=True)
    checkpoints.load_hf_weights(squad, {k: v.detach().numpy() for k, v in source.state_dict().items()},
                                require_heads=True)
    hf = _exported(squad, tmp_path / "squad", transformers.XLNetForQuestionAnswering)
    for name, value in source.state_dict().items():
        np.testing.assert_array_equal(hf.state_dict()[name].numpy(), value.numpy(), err_msg=name)

    source = transformers.XLNetForMultipleChoice(hf_config(CONFIG)).eval()
    randomize_(source, seed=6)
    choice = XLNetMultipleChoice(CONFIG, num_choices=4)
    state = {k: v.detach().numpy() for k, v in source.state_dict().items()}
    arrays = checkpoints.hf_state_to_original({k: v for k, v in state.items() if not k.startswith("logits_proj")},
                                              CONFIG)
    arrays["logits/dense/kernel"], arrays["logits/dense/bias"] = state["logits_proj.weight"].T, state["logits_proj.bias"]
    checkpoints.assign_arrays(choice, arrays, "hf", require_heads=True)
    hf = _exported(choice, tmp_path / "choice", transformers.XLNetForMultipleChoice)
    inputs = _inputs(rng, (2, 4, 8))
    assert max_diff(choice(inputs)["logits"], _hf_call(hf, inputs).logits.numpy()) <= 1e-5


@pytest.mark.parametrize("model, message", [
    (lambda: XLNetClassifier(CONFIG, num_labels=2, summary_type="mean"), "summary_type='mean'"),
    (lambda: XLNetPretrainer(CONFIG.replace(d_head=4)), "d_head=4: Hugging Face's XLNet has d_head = d_model / n_head"),
    (lambda: XLNetPretrainer(CONFIG, nsp=True), "NSP head"),
    (lambda: XLNetForSquad(CONFIG, use_answer_class=False), "SQuAD 1.1 model has no answer-class head"),
])
def test_what_transformers_cannot_compute_is_refused_before_writing(tmp_path, model, message):
    built = model()
    built(_inputs(np.random.RandomState(0)) if not isinstance(built, XLNetPretrainer) else
          random_inputs(np.random.RandomState(0), 2, 8, CONFIG.n_token, n_pred=2))
    with pytest.raises(UserError, match=message):
        hf_export.prepare(built)
    assert not os.listdir(tmp_path)


def test_the_converter_hands_a_fine_tuned_tagger_to_transformers(tmp_path):
    """run/convert_checkpoint.py --to_hf on a tagging run's model_dir: transformers' XLNetForTokenClassification
    loads it with the run's tag names and gives the logits our model gives, and the run's SentencePiece model
    travels with it."""
    from run import convert_checkpoint, run_tagger
    from xlnet_tf.models import XLNetTagger as Tagger

    data = os.path.join(data_fixtures.REPO_ROOT, "data", "finetune", "brown_pos")
    data_fixtures.run_with_flags(run_tagger, [
        "--n_layer=1", "--d_model=32", "--n_head=2", "--d_head=16", "--d_inner=64",
        f"--n_token={data_fixtures.TINY_VOCAB}", f"--spiece_model_file={data_fixtures.tiny_spm()}",
        f"--data_dir={data}", f"--record_dir={tmp_path}/records", f"--model_dir={tmp_path}/m", "--do_train",
        "--max_seq_length=32", "--doc_stride=16", "--train_batch_size=8", "--train_steps=2", "--steps_per_loop=1",
        "--save_steps=2"])
    data_fixtures.run_with_flags(convert_checkpoint, ["--to_hf", f"--checkpoint={tmp_path}/m",
                                                      f"--output_dir={tmp_path}/hf"])
    hf = transformers.XLNetForTokenClassification.from_pretrained(str(tmp_path / "hf")).eval()
    info = json.load(open(tmp_path / "m" / "export_info.json"))
    assert [hf.config.id2label[i] for i in range(hf.config.num_labels)] == info["labels"]
    assert os.path.isfile(tmp_path / "hf" / "spiece.model")
    ours = Tagger.from_checkpoint(str(tmp_path / "m"), require_heads=True)
    inputs = {k: v[:, :12] for k, v in _inputs(np.random.RandomState(4), (2, 12)).items()}
    inputs["input_ids"] = np.random.RandomState(5).randint(0, data_fixtures.TINY_VOCAB, (2, 12))
    assert max_diff(ours(inputs)["logits"], _hf_call(hf, inputs).logits.numpy()) <= 1e-5
