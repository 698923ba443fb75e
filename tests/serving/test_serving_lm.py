"""The pretrained LM's export (`--task=lm`, xlnet_tf/serving/lm.py): a tiny pretrained model exported, reloaded
in a fresh process and asked for continuations of raw prompts; they equal xlnet_tf.inference.generation's (greedy and
sampled, a prompt longer than the export keeps its last tokens), `features` equals the backbone, and every bound
is enforced in the graph with an error naming the input."""

import numpy as np
import pytest

from tests import data_fixtures, fresh_serving
from tests.inference.test_generation import _model, _sampling_scores, _top2
from tests.tie_safe import assert_no_near_ties

BOUNDS = dict(max_prompt_tokens=24, max_new_tokens=16, max_top_k=30, max_batch_size=4)
PROMPTS = ["The war ended in the spring.", "Congress shall make no law", "It is a truth universally acknowledged"]
LONG = " ".join(["The people of the town built a mill where the river fell fastest."] * 4)
SAMPLE = dict(max_new_tokens=10, temperature=0.9, top_k=20, top_p=0.9, repetition_penalty=1.3, seed=5)
GREEDY = dict(max_new_tokens=12, temperature=0.0, top_k=0, top_p=1.0, repetition_penalty=1.0, seed=0)
DTYPES = {"max_new_tokens": "int32", "temperature": "float32", "top_k": "int32", "top_p": "float32",
          "repetition_penalty": "float32", "seed": "int32"}


def _request(prompts, **values):
    return {"signature": "generate", "dtypes": DTYPES, "args": {"prompt": prompts, **{**GREEDY, **values}}}


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    from run import export_savedmodel
    from xlnet_tf import checkpoints

    root = tmp_path_factory.mktemp("lm")
    model = _model(n_token=data_fixtures.TINY_VOCAB)
    checkpoints.save_original_checkpoint(model, str(root / "final" / "xlnet_model.ckpt"))
    model.config.to_json_file(str(root / "final" / "xlnet_config.json"))
    path = export_savedmodel.export_lm(str(root / "final"), str(root / "export"), 1, data_fixtures.tiny_spm(),
                                       max_seq_length=32, **BOUNDS)
    requests = {
        "greedy": _request(PROMPTS),
        "sample": _request(PROMPTS, **SAMPLE),
        "default": {**_request(PROMPTS), "signature": "serving_default"},  # one batch size: one XLA compile
        "long": _request([LONG, PROMPTS[0], PROMPTS[1]], max_new_tokens=6),
        "features": {"signature": "features", "args": {"text": PROMPTS}},
        "bad_max_new_tokens": _request(PROMPTS[:1], max_new_tokens=17),
        "zero_max_new_tokens": _request(PROMPTS[:1], max_new_tokens=0),
        "bad_temperature": _request(PROMPTS[:1], temperature=-0.5),
        "bad_top_k": _request(PROMPTS[:1], top_k=31),
        "bad_top_p": _request(PROMPTS[:1], top_p=0.0),
        "big_top_p": _request(PROMPTS[:1], top_p=1.5),
        "bad_penalty": _request(PROMPTS[:1], repetition_penalty=0.0),
        "empty_prompt": _request([PROMPTS[0], "  "]),
        "too_many": _request(PROMPTS * 2),
        "no_prompt": _request([]),
    }
    out, errors = fresh_serving.serve(path, requests, root / "reload")
    return {"model": model, "path": path, "out": out, "errors": errors}


def _reference(model, texts, values):
    """xlnet_tf.inference.generation on the same prompts, with the export's memory buffer."""
    from xlnet_tf.inference import generation
    from xlnet_tf.serving.lm import GenerationBounds
    from xlnet_tf.text.tokenization import XLNetTokenizer

    bounds = GenerationBounds(**BOUNDS)
    tokenizer = XLNetTokenizer(data_fixtures.tiny_spm())
    prompts = [tokenizer.encode(t) for t in texts]
    settings = generation.GenerationSettings(
        max_new_tokens=values["max_new_tokens"], temperature=values["temperature"], top_k=values["top_k"],
        top_p=values["top_p"], repetition_penalty=values["repetition_penalty"], seed=values["seed"],
        mem_len=bounds.prompt_len + bounds.max_new_tokens, jit_compile=False)  # the export's memory buffer
    truncated_prompts = [p[-bounds.max_prompt_tokens:] for p in prompts]
    ref = generation.generate(model, truncated_prompts, settings, return_logits=True)
    return tokenizer, prompts, truncated_prompts, settings, ref


def _check_rows(out, name, tokenizer, ref, n_new):
    from xlnet_tf.inference.generation import STOP_ID

    assert out[f"{name}/token_ids"].shape[1] == n_new
    for b, row in enumerate(ref.rows):
        n = int(out[f"{name}/lengths"][b])
        assert out[f"{name}/token_ids"][b, :n].tolist() == row.token_ids
        np.testing.assert_allclose(out[f"{name}/log_probs"][b, :n], row.log_probs, atol=1e-5)
        np.testing.assert_allclose(out[f"{name}/sampling_log_probs"][b, :n], row.sampling_log_probs, atol=1e-5)
        assert bool(out[f"{name}/stopped"][b]) == (row.stop_reason == STOP_ID)
        body = row.token_ids[:-1] if row.stop_reason == STOP_ID else row.token_ids
        assert out[f"{name}/text"][b].decode() == tokenizer.decode(body)


def test_greedy_requests_generate_as_the_library(served):
    tokenizer, _, prompts, _, ref = _reference(served["model"], PROMPTS, GREEDY)
    for b, row in enumerate(ref.rows):
        assert_no_near_ties(_top2(ref.logits[b, :len(row.token_ids)]))
    _check_rows(served["out"], "greedy", tokenizer, ref, GREEDY["max_new_tokens"])
    assert served["out"]["greedy/prompt_tokens"].tolist() == [len(p) for p in prompts]
    assert not served["out"]["greedy/prompt_truncated"].any()
    assert served["out"]["default/token_ids"].tolist() == served["out"]["greedy/token_ids"].tolist()


def test_sampled_requests_generate_as_the_library(served):
    tokenizer, _, prompts, settings, ref = _reference(served["model"], PROMPTS, SAMPLE)
    scores = _sampling_scores(prompts, ref, settings, [0, 1, 2])
    for b, row in enumerate(ref.rows):
        assert_no_near_ties(_top2(scores[b, :len(row.token_ids)]))
    _check_rows(served["out"], "sample", tokenizer, ref, SAMPLE["max_new_tokens"])
    assert (served["out"]["sample/sampling_log_probs"][:, 0] < 0).all()  # really sampled


def test_a_long_prompt_keeps_its_last_tokens_and_says_so(served):
    values = {**GREEDY, "max_new_tokens": 6}
    tokenizer, full, prompts, _, ref = _reference(served["model"], [LONG, PROMPTS[0], PROMPTS[1]], values)
    assert len(full[0]) > BOUNDS["max_prompt_tokens"]
    for b, row in enumerate(ref.rows):
        assert_no_near_ties(_top2(ref.logits[b, :len(row.token_ids)]))
    _check_rows(served["out"], "long", tokenizer, ref, 6)
    assert served["out"]["long/prompt_truncated"].tolist() == [True, False, False]
    assert served["out"]["long/prompt_tokens"].tolist() == [BOUNDS["max_prompt_tokens"], len(full[1]), len(full[2])]


def test_features_are_the_backbone_states(served):
    from xlnet_tf.text import packing
    from xlnet_tf.text.tokenization import XLNetTokenizer

    tokenizer = XLNetTokenizer(data_fixtures.tiny_spm())
    model, out = served["model"], served["out"]
    for b, text in enumerate(PROMPTS):
        f, _ = packing.pack_pair(tokenizer.encode(text), None, 32)
        ids = np.asarray(f["input_ids"])[None]
        mask = np.asarray(f["attention_mask"], np.float32)[None]
        states = model.backbone(ids, segment_ids=np.asarray(f["segment_ids"])[None], attention_mask=mask,
                                training=False)["content"].numpy()[0]
        n = int(mask.sum())
        np.testing.assert_allclose(out["features/token_states"][b][out["features/attention_mask"][b] > 0],
                                   states[-n:], atol=1e-5)
        np.testing.assert_allclose(out["features/pooled"][b], states[-1], atol=1e-5)


@pytest.mark.parametrize("name, message", [
    ("bad_max_new_tokens", "generate: max_new_tokens must be in [1, 16] (the exported bound)"),
    ("zero_max_new_tokens", "generate: max_new_tokens must be in [1, 16] (the exported bound)"),
    ("bad_temperature", "generate: temperature must be >= 0 (0 = greedy)"),
    ("bad_top_k", "generate: top_k must be in [0, 30] (0 = off; the exported bound)"),
    ("bad_top_p", "generate: top_p must be in (0, 1] (1 = off)"),
    ("big_top_p", "generate: top_p must be in (0, 1] (1 = off)"),
    ("bad_penalty", "generate: repetition_penalty must be > 0 (1 = off)"),
    ("empty_prompt", "generate: every prompt needs at least one token"),
    ("too_many", "generate: prompt must hold 1 to 4 prompts (the exported max_batch_size)"),
    ("no_prompt", "generate: prompt must hold 1 to 4 prompts (the exported max_batch_size)"),
])
def test_a_request_out_of_bounds_is_refused_naming_the_input(served, name, message):
    assert message in served["errors"].get(name, ""), served["errors"].get(name)


def test_the_exporter_refuses_bad_bounds_and_a_model_without_an_lm_head(tmp_path):
    from run import export_savedmodel
    from run.common_flags import UserError
    from xlnet_tf import checkpoints
    from xlnet_tf.config import XLNetConfig
    from xlnet_tf.models import XLNetClassifier

    model = XLNetClassifier(XLNetConfig(**{**dict(n_layer=1, d_model=16, n_head=2, d_head=8, d_inner=24),
                                           "n_token": data_fixtures.TINY_VOCAB}), num_labels=2)
    checkpoints.save_original_checkpoint(model, str(tmp_path / "cls" / "xlnet_model.ckpt"))
    model.config.to_json_file(str(tmp_path / "cls" / "xlnet_config.json"))
    with pytest.raises(UserError, match="holds no LM head"):
        export_savedmodel.export_lm(str(tmp_path / "cls"), str(tmp_path / "e"), 1, data_fixtures.tiny_spm())
    with pytest.raises(UserError, match="does not exist"):
        export_savedmodel.export_lm(str(tmp_path / "none"), str(tmp_path / "e"), 1, data_fixtures.tiny_spm())
    assert not (tmp_path / "e").exists()
