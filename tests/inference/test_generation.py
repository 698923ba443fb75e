"""Generation with memories (xlnet_tf/inference/generation.py, run/generate.py) on tiny random models: the one-position cached
step equals recomputing the prefix, teacher forcing scores as lm_eval, the first token as Hugging Face, a batch
row as the row alone; sampling is seeded; bad inputs are one-line errors naming the field or flag."""

import dataclasses
import functools
import json
import os
import subprocess
import sys

import numpy as np
import pytest

from tests import data_fixtures
from tests.tie_safe import assert_no_near_ties

TOL = 1e-5
TINY = dict(n_token=53, n_layer=2, d_model=16, n_head=2, d_head=8, d_inner=24, dropout=0.0, dropatt=0.0)
REPO = data_fixtures.REPO_ROOT


@functools.lru_cache(maxsize=None)
def _model(mem_len=None, n_token=53, attn_type="bi", objective="plm"):
    """A tiny XLNetPretrainer with N(0, 0.4) weights (LayerNorm gammas around 1): peaked, varied predictions."""
    import keras

    from xlnet_tf.config import XLNetConfig
    from xlnet_tf.models import XLNetPretrainer

    keras.utils.set_random_seed(0)
    model = XLNetPretrainer(XLNetConfig(**{**TINY, "n_token": n_token}, mem_len=mem_len, attn_type=attn_type),
                            objective=objective)
    rng = np.random.default_rng(7)
    for w in model.weights:
        value = rng.normal(0.0, 0.4, w.shape) + (1.0 if w.path.endswith("gamma") else 0.0)
        w.assign(value.astype(np.float32))
    return model


def _settings(**kw):
    from xlnet_tf.inference.generation import GenerationSettings

    return GenerationSettings(**{"stop_ids": (), "jit_compile": False, **kw})


def _top2(logits):
    """The two best values of each row: what an argmax comparison needs to be tie-free."""
    return np.sort(np.asarray(logits), -1)[..., -2:]


def _max_diff(a, b):
    return float(np.max(np.abs(np.asarray(a, np.float64) - np.asarray(b, np.float64))))


def _log_softmax(x):
    x = np.asarray(x, np.float64)
    x = x - x.max(-1, keepdims=True)
    return x - np.log(np.exp(x).sum(-1, keepdims=True))


# ---------------------------------------------------------------------------------------------- exactness
def test_causal_cache_equals_recomputing_the_prefix():
    """52 one-position steps under XLA, memory buffer 8 (crossed 7 times), the prompts read in two segments:
    every step's logits equal the whole prefix recomputed with the same window, and the greedy tokens too."""
    from xlnet_tf.inference.generation import generate
    from bench.speed.generation_reference import recompute_logits

    model = _model()
    prompts = [[11, 12, 13, 14, 15], [21, 22]]
    settings = _settings(max_new_tokens=52, mem_len=8, segment_len=4, jit_compile=True)
    out = generate(model, prompts, settings, return_logits=True)
    for b, prompt in enumerate(prompts):
        ids, ref = recompute_logits(model, prompt, max_new_tokens=52, window=8, bucket=64)
        diff = _max_diff(out.logits[b], ref)
        print(f"row {b}: max |cached - recomputed| = {diff:.2e}")
        assert diff <= TOL
        assert_no_near_ties(_top2(ref))
        assert out.rows[b].token_ids == ids
        np.testing.assert_allclose(out.rows[b].log_probs, _log_softmax(ref)[np.arange(52), ids], atol=TOL)
        assert out.rows[b].sampling_log_probs == [0.0] * 52 and out.rows[b].stop_reason == "max_new_tokens"


def test_bidirectional_prompt_cache_equals_recomputing_the_prefix():
    from xlnet_tf.inference.generation import generate
    from bench.speed.generation_reference import recompute_logits

    model = _model()
    prompt = [31, 9, 40, 12, 17, 25]
    out = generate(model, [prompt], _settings(max_new_tokens=20, mem_len=10, layout="bidirectional_prompt"),
                   return_logits=True)
    ids, ref = recompute_logits(model, prompt, continuation_ids=out.rows[0].token_ids, layout="bidirectional_prompt",
                                window=10)
    print(f"bidirectional_prompt: max |cached - recomputed| = {_max_diff(out.logits[0], ref):.2e}")
    assert _max_diff(out.logits[0], ref) <= TOL
    causal = recompute_logits(model, prompt, continuation_ids=ids[:1], layout="causal")[1]
    assert _max_diff(causal[0], ref[0]) > 1e-3  # the prompt's reading differs


@pytest.mark.parametrize("mem_len, seg_len, length", [(40, 20, 40), (3, 1, 14)])
def test_teacher_forcing_scores_as_lm_eval(mem_len, seg_len, length):
    """The generation path on a given text gives lm_eval's per-token log-likelihood with the same memory: the
    whole past (mem_len 40, lm_eval in segments of 20), and a window of 3 (lm_eval one token per segment)."""
    from xlnet_tf.inference import lm_eval
    from xlnet_tf.inference.generation import teacher_force

    model = _model(mem_len=mem_len)
    text = np.random.default_rng(length).integers(9, 53, length).astype(np.int32)
    nll = lm_eval.token_nll(model, text[None], seg_len=seg_len, use_mems=True)[0]
    log_probs = teacher_force(model, text[:1], text[1:], _settings(mem_len=mem_len))
    print(f"mem_len {mem_len}: max |generation - lm_eval| = {_max_diff(-log_probs, nll[1:]):.2e}")
    assert _max_diff(-log_probs, nll[1:]) <= TOL


def test_first_token_logits_equal_hugging_face():
    """bidirectional_prompt = Hugging Face's layout (prompt + a dummy hidden from all, target_mapping on it);
    causal = the same with a causal perm_mask."""
    import torch

    from tests.parity_utils import make_pair
    from xlnet_tf.inference.generation import generate

    hf, ours, config = make_pair(seed=8)
    prompt = [int(i) for i in np.random.default_rng(3).integers(9, config.n_token, 7)]
    length = len(prompt) + 1
    mapping = torch.zeros(1, 1, length)
    mapping[0, 0, -1] = 1.0
    for layout, perm in (("bidirectional_prompt", torch.zeros(1, length, length)),
                         ("causal", torch.triu(torch.ones(length, length))[None])):
        perm[:, :, -1] = 1.0
        with torch.no_grad():
            ref = hf(input_ids=torch.tensor([prompt + [0]]), token_type_ids=torch.zeros(1, length, dtype=torch.long),
                     perm_mask=perm, target_mapping=mapping).logits[0, 0].numpy()
        out = generate(ours, [prompt], _settings(max_new_tokens=1, layout=layout), return_logits=True)
        print(f"{layout}: max |ours - Hugging Face| = {_max_diff(out.logits[0, 0], ref):.2e}")
        assert _max_diff(out.logits[0, 0], ref) <= TOL


# ---------------------------------------------------------------------------------------------- batching
PROMPTS = [[14, 31, 27], [40, 41, 9, 12, 33, 35, 19, 20, 50], [11, 23, 18, 44, 45, 46, 10, 30, 29, 28, 17, 16, 15, 52]]


def test_a_batch_gives_each_row_what_it_gives_alone():
    """Left-padded rows of 3, 9 and 14 tokens, memory 16 (crossed): the tokens and log-probabilities of each
    alone; a stop id ends each row where its own output first has it."""
    from xlnet_tf.inference.generation import generate

    model = _model()
    settings = _settings(max_new_tokens=20, mem_len=16, pad_multiple=16)  # one padded length: one trace alone
    batched = generate(model, PROMPTS, settings, return_logits=True)
    alone = [generate(model, [p], settings, return_logits=True) for p in PROMPTS]
    for b, single in enumerate(alone):
        assert _max_diff(batched.logits[b], single.logits[0]) <= TOL
        assert_no_near_ties(_top2(single.logits[0]))
        assert batched.rows[b].token_ids == single.rows[0].token_ids
        np.testing.assert_allclose(batched.rows[b].log_probs, single.rows[0].log_probs, atol=TOL)
    stop = batched.rows[1].token_ids[4]
    stopped = generate(model, PROMPTS, dataclasses.replace(settings, stop_ids=(stop,)))
    for b, row in enumerate(stopped.rows):
        full = batched.rows[b].token_ids
        if stop in full:
            assert row.token_ids == full[:full.index(stop) + 1] and row.stop_reason == "stop_id"
        else:
            assert row.token_ids == full and row.stop_reason == "max_new_tokens"
    assert stopped.rows[1].stop_reason == "stop_id" and len(stopped.rows[1].token_ids) <= 5


def test_a_prompt_longer_than_the_memory_keeps_its_last_tokens_and_says_so():
    from xlnet_tf.inference.generation import generate

    model = _model()
    settings = _settings(max_new_tokens=8, mem_len=6)
    with pytest.warns(UserWarning, match=r"prompts\[0\] has 14 tokens, more than the memory buffer"):
        long = generate(model, [PROMPTS[2]], settings, return_logits=True)
    short = generate(model, [PROMPTS[2][-6:]], settings, return_logits=True)
    assert long.rows[0].prompt_truncated and long.rows[0].prompt_tokens == 6
    assert not short.rows[0].prompt_truncated
    assert_no_near_ties(_top2(short.logits[0]))
    assert long.rows[0].token_ids == short.rows[0].token_ids


def test_the_serving_function_generates_as_generate():
    import tensorflow as tf

    from xlnet_tf.inference.generation import generate, serving_function

    model = _model()
    settings = _settings(max_new_tokens=20, mem_len=16, pad_multiple=16, temperature=0.9, top_k=20, seed=3)
    ids = np.zeros((3, 16), np.int32)
    mask = np.zeros((3, 16), np.int32)
    for b, p in enumerate(PROMPTS):
        ids[b, 16 - len(p):], mask[b, 16 - len(p):] = p, 1
    serve = serving_function(model, settings, prompt_len=16)
    out = serve(tf.constant(ids), tf.constant(mask), tf.constant(3), tf.constant(0.9), tf.constant(1.0),
                tf.constant(1.0))
    ref = generate(model, PROMPTS, settings, return_logits=True)
    assert_no_near_ties(_top2(_sampling_scores(PROMPTS, ref, settings, [0, 1, 2])))
    for b, row in enumerate(ref.rows):
        n = int(out["lengths"][b])
        assert out["token_ids"][b, :n].numpy().tolist() == row.token_ids
        np.testing.assert_allclose(out["log_probs"][b, :n].numpy(), row.log_probs, atol=TOL)


# ---------------------------------------------------------------------------------------------- sampling
def _sampling_scores(prompts, out, settings, keys):
    """`[B, N, V]`: what each sampled token is the argmax of (the sampling logits plus the row's noise)."""
    import tensorflow as tf

    from xlnet_tf.inference import generation

    structure, values = generation.program_structure(settings), generation.program_values(settings)
    scores = []
    for k in range(out.logits.shape[1]):
        seen = np.zeros(out.logits.shape[::2], bool)
        for b, (prompt, row) in enumerate(zip(prompts, out.rows)):
            seen[b, list(prompt) + row.token_ids[:k]] = True
        x = generation.sampling_logits(tf.constant(out.logits[:, k]), tf.constant(seen), structure, values)
        noise = generation.gumbel_noise(values["seed"], tf.constant(keys, tf.uint32), k, x.shape[-1])
        scores.append((x + noise).numpy())
    return np.stack(scores, 1)


def test_sampling_is_seeded_reproducible_and_independent_of_the_batch():
    from xlnet_tf.inference.generation import generate

    model = _model()
    settings = _settings(max_new_tokens=20, mem_len=16, temperature=0.9, top_k=20, top_p=0.95,
                         repetition_penalty=1.3, seed=1)
    first = generate(model, PROMPTS[1:], settings, row_keys=[5, 6], return_logits=True)
    again = generate(model, PROMPTS[1:], settings, row_keys=[5, 6], return_logits=True)
    other = generate(model, PROMPTS[1:], dataclasses.replace(settings, seed=2), row_keys=[5, 6], return_logits=True)
    assert [r.token_ids for r in first.rows] == [r.token_ids for r in again.rows]
    assert [r.log_probs for r in first.rows] == [r.log_probs for r in again.rows]
    assert [r.token_ids for r in first.rows] != [r.token_ids for r in other.rows]
    for row in first.rows:
        assert all(lp <= 0 for lp in row.log_probs) and all(lp <= 0 for lp in row.sampling_log_probs)
        assert row.sampling_log_probs != row.log_probs  # temperature, penalty and filters change the distribution

    alone = generate(model, PROMPTS[2:], settings, row_keys=[6], return_logits=True)
    assert _max_diff(alone.logits[0], first.logits[1]) <= TOL
    assert_no_near_ties(_top2(_sampling_scores(PROMPTS[2:], alone, settings, [6])))
    assert alone.rows[0].token_ids == first.rows[1].token_ids


def test_top_k_of_one_is_greedy():
    from xlnet_tf.inference.generation import generate

    model = _model()
    greedy = generate(model, PROMPTS, _settings(max_new_tokens=20, mem_len=16), return_logits=True)
    top1 = generate(model, PROMPTS, _settings(max_new_tokens=20, mem_len=16, temperature=1.5, top_k=1, seed=4))
    assert_no_near_ties(_top2(greedy.logits))
    assert [r.token_ids for r in top1.rows] == [r.token_ids for r in greedy.rows]
    assert all(lp == 0.0 for r in top1.rows for lp in r.sampling_log_probs)  # a point mass


# ---------------------------------------------------------------------------------------------- bad inputs
@pytest.mark.parametrize("field, value", [
    ("max_new_tokens", 0), ("temperature", -0.5), ("top_p", 0.0), ("top_p", 1.5), ("top_k", -1),
    ("repetition_penalty", 0.0), ("layout", "sideways"), ("mem_len", 0), ("stop_ids", (-1,)), ("segment_len", 0),
    ("native_step", "yes"), ("jit_compile", 1)])
def test_bad_settings_name_the_field(field, value):
    from run import generate as runner
    from xlnet_tf.errors import UserError
    from xlnet_tf.inference.generation import LAYOUTS, GenerationSettings

    assert runner.LAYOUTS == LAYOUTS

    with pytest.raises(UserError, match=rf"^GenerationSettings\.{field} ") as caught:
        GenerationSettings(**{field: value})
    assert "\n" not in str(caught.value)


def test_bad_prompts_and_models_name_what_is_wrong():
    from xlnet_tf.config import XLNetConfig
    from xlnet_tf.errors import UserError
    from xlnet_tf.inference.generation import generate
    from xlnet_tf.models import XLNetClassifier

    cases = [
        (_model(), [], r"^prompts: none given"),
        (_model(), [[12, 13], []], r"^prompts\[1\] is empty"),
        (_model(), [[12, 99]], r"^prompts\[0\] holds ids outside the vocabulary \[0, 53\): \[99\]"),
        (XLNetClassifier(XLNetConfig(**TINY), num_labels=2), [[12]], r"^model: XLNetClassifier has no LM head"),
        (_model(objective="mlm"), [[12]], r"^model: objective 'mlm'"),
    ]
    for model, prompts, message in cases:
        with pytest.raises(UserError, match=message) as caught:
            generate(model, prompts, _settings())
        assert "\n" not in str(caught.value)
    with pytest.raises(UserError, match=r"^GenerationSettings\.layout 'bidirectional_prompt' needs"):
        generate(_model(attn_type="uni"), [[12]], _settings(layout="bidirectional_prompt"))
    with pytest.raises(UserError, match=r"^forced_ids: shape \[1, max_new_tokens=4\]"):
        generate(_model(), [[12]], _settings(max_new_tokens=4), forced_ids=[[1, 2]])
    n_token = _model().backbone.config.n_token
    with pytest.raises(UserError, match=rf"^forced_ids: ids outside the model's vocabulary \(0 to {n_token - 1}\)"):
        generate(_model(), [[12]], _settings(max_new_tokens=2), forced_ids=[[1, n_token]])
    with pytest.raises(UserError, match=rf"^GenerationSettings.stop_ids: \[{n_token}\] outside the model's vocab"):
        generate(_model(), [[12]], _settings(stop_ids=(n_token,)))
    with pytest.raises(UserError, match=r"^GenerationSettings.max_new_tokens must be at most 4096"):
        _settings(max_new_tokens=10 ** 8)


def test_a_memory_longer_than_the_whole_past_changes_nothing():
    """mem_len beyond the padded prompt and the new tokens holds nothing more: the buffer is the whole past, the
    outputs are the same (and no buffer the program cannot allocate is asked for)."""
    from xlnet_tf.inference.generation import generate

    model = _model()
    whole = generate(model, PROMPTS, _settings(max_new_tokens=6), return_logits=True)
    huge = generate(model, PROMPTS, _settings(max_new_tokens=6, mem_len=10 ** 9), return_logits=True)
    np.testing.assert_array_equal(huge.logits, whole.logits)


# ---------------------------------------------------------------------------------------------- the runner
@pytest.fixture(scope="module")
def pretrained(tmp_path_factory):
    """A tiny pretrained model's final/ (as a pretraining run writes its weights and config)."""
    from xlnet_tf import checkpoints

    final = tmp_path_factory.mktemp("generate") / "final"
    model = _model(n_token=data_fixtures.TINY_VOCAB)
    checkpoints.save_original_checkpoint(model, str(final / "xlnet_model.ckpt"))
    model.config.replace(bi_data=True, reuse_len=8, mem_len=16).to_json_file(str(final / "xlnet_config.json"))
    return final


def test_the_runner_writes_json_lines(pretrained, tmp_path):
    prompts = tmp_path / "prompts.txt"
    prompts.write_text("The war ended in the spring.\n\nThe people of the town\n", encoding="utf-8")
    out = tmp_path / "generated.jsonl"
    from run import generate as runner

    # in process (the command line's own start-up and one-line errors: test_a_bad_flag_is_one_line...)
    data_fixtures.run_with_flags(runner, [
        f"--checkpoint={pretrained}", f"--spiece_model={data_fixtures.tiny_spm()}", "--prompt=Congress shall",
        f"--prompts_file={prompts}", "--max_new_tokens=6", "--temperature=0.8", "--top_k=10", "--seed=3",
        "--nojit_compile", "--stop_ids=", f"--output={out}"])
    rows = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]
    assert [r["prompt"] for r in rows] == ["Congress shall", "The war ended in the spring.", "The people of the town"]
    for r in rows:
        assert len(r["token_ids"]) == len(r["log_probs"]) == 6 and r["stop_reason"] == "max_new_tokens"
        assert all(lp <= 0 for lp in r["log_probs"]) and isinstance(r["text"], str)
        assert r["prompt_truncated"] is False and r["prompt_tokens"] > 0


def test_a_bad_flag_is_one_line_and_exit_status_2(pretrained):
    proc = subprocess.run([sys.executable, os.path.join(REPO, "run", "generate.py"), f"--checkpoint={pretrained}",
                           "--spiece_model=x.model", "--prompt=hello", "--max_new_tokens=0"],
                          capture_output=True, text=True, cwd=REPO, timeout=120)
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("generate.py: error: flag --max_new_tokens=0: "), lines


def _runner_error(args):
    from run import common_flags
    from run import generate as runner

    with pytest.raises(common_flags.USER_ERRORS) as caught:
        data_fixtures.run_with_flags(runner, args)
    assert "\n" not in str(caught.value)
    return str(caught.value)


def test_the_runner_refuses_a_finetuned_model_dir_and_bad_values(pretrained, tmp_path):
    from xlnet_tf import checkpoints
    from xlnet_tf.config import XLNetConfig
    from xlnet_tf.artifacts.export_info import ExportInfo
    from xlnet_tf.files import write_json_atomic
    from xlnet_tf.models import XLNetClassifier

    spm = data_fixtures.tiny_spm()
    directory = str(tmp_path / "classifier")
    model = XLNetClassifier(XLNetConfig(**{**TINY, "n_token": data_fixtures.TINY_VOCAB}), num_labels=2)
    checkpoints.save_original_checkpoint(model, os.path.join(directory, "xlnet_model.ckpt"))
    model.config.to_json_file(os.path.join(directory, "xlnet_config.json"))
    info = ExportInfo.for_run(task="classifier", max_seq_length=32, num_labels=2, summary_type="last",
                              use_summ_proj=True, spiece_model_file=spm)
    write_json_atomic(os.path.join(directory, "export_info.json"), info.to_dict())
    message = _runner_error([f"--checkpoint={directory}", f"--spiece_model={spm}", "--prompt=hello"])
    assert message.startswith(f"--checkpoint={directory} is a fine-tuning model_dir (export_info.json: task "
                              "'classifier')"), message
    base = [f"--checkpoint={pretrained}", f"--spiece_model={spm}"]
    assert _runner_error(base + ["--prompt=hi", "--top_p=0"]).startswith("--top_p must be in (0, 1]")
    assert _runner_error(base + ["--prompt=hi", "--stop_ids=7,x"]).startswith("--stop_ids=7,x: give comma-separated")
    assert _runner_error(base).startswith("no prompts: give --prompt")
    assert _runner_error(base + ["--prompt=  "]).startswith("prompt 0 ('  ') has no tokens")
