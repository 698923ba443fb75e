"""Checkpoint loading: the original TF1 layout (written here with tf.compat.v1), Hugging Face
safetensors, our own checkpoints, and clear errors when a checkpoint does not fit the config."""

import json

import numpy as np
import pytest
import tensorflow as tf
import transformers
from transformers.models.xlnet.modeling_xlnet import load_tf_weights_in_xlnet

from run.convert_checkpoint import convert
from tests.parity_utils import TINY, hf_config, hf_forward, make_pair, max_diff, random_inputs
from xlnet_tf import checkpoints
from xlnet_tf.config import XLNetConfig
from xlnet_tf.errors import UserError
from xlnet_tf.models import XLNetPretrainer

CONFIG = XLNetConfig(**{**TINY, "dropout": 0.0, "dropatt": 0.0})


def original_shapes(config):
    """Variable names and shapes of the original release (reference §4.3), built independently."""
    d, h, dh, n = config.d_model, config.n_head, config.d_head, config.n_layer
    bias = [n, h, dh] if config.untie_r else [h, dh]
    shapes = {"model/transformer/word_embedding/lookup_table": [config.n_token, d],
              "model/transformer/mask_emb/mask_emb": [1, 1, d],
              "model/transformer/r_w_bias": bias, "model/transformer/r_r_bias": bias,
              "model/transformer/r_s_bias": bias, "model/transformer/seg_embed": [n, 2, h, dh],
              "model/lm_loss/bias": [config.n_token]}
    for i in range(n):
        p = f"model/transformer/layer_{i}"
        for k in "qkvor":
            shapes[f"{p}/rel_attn/{k}/kernel"] = [d, h, dh]
        for ln in ("rel_attn", "ff"):
            shapes[f"{p}/{ln}/LayerNorm/gamma"] = [d]
            shapes[f"{p}/{ln}/LayerNorm/beta"] = [d]
        shapes[f"{p}/ff/layer_1/kernel"] = [d, config.d_inner]
        shapes[f"{p}/ff/layer_1/bias"] = [config.d_inner]
        shapes[f"{p}/ff/layer_2/kernel"] = [config.d_inner, d]
        shapes[f"{p}/ff/layer_2/bias"] = [d]
    return shapes


def write_tf1_checkpoint(prefix, arrays, with_optimizer_slots=True):
    """A TF1-style checkpoint: tf.compat.v1 variables with the original names, saved by a v1 Saver."""
    graph = tf.Graph()
    with graph.as_default():
        variables = []
        for name, value in arrays.items():
            variables.append(tf.compat.v1.get_variable(name, initializer=tf.constant(value)))
            if with_optimizer_slots:
                variables.append(tf.compat.v1.get_variable(name + "/adam_m", initializer=tf.zeros_like(value)))
        variables.append(tf.compat.v1.train.get_or_create_global_step())
        saver = tf.compat.v1.train.Saver(variables)
        with tf.compat.v1.Session() as sess:
            sess.run(tf.compat.v1.global_variables_initializer())
            saver.save(sess, prefix)
    return prefix


def random_arrays(config, seed=0, extra=None):
    rng = np.random.RandomState(seed)
    arrays = {n: (rng.randn(*s) * 0.4).astype(np.float32) for n, s in original_shapes(config).items()}
    for name in arrays:
        if name.endswith("gamma"):
            arrays[name] += 1.0
    arrays.update(extra or {})
    return arrays


def _inputs(config, seed=0):
    return random_inputs(np.random.RandomState(seed), 2, 8, config.n_token, n_pred=3, left_pad=[0, 2])


def test_original_layout_through_converter_matches_hf(tmp_path):
    head = {"start_logits/dense/kernel": np.ones([CONFIG.d_model, 1], np.float32)}
    arrays = random_arrays(CONFIG, extra=head)
    prefix = write_tf1_checkpoint(str(tmp_path / "orig" / "xlnet_model.ckpt"), arrays)
    config_path = tmp_path / "xlnet_config.json"
    CONFIG.to_json_file(str(config_path), original_only=True)

    summary = convert(str(tmp_path / "out"), original_checkpoint=prefix, config=str(config_path))
    assert summary["heads"] == ["model/lm_loss/bias", "start_logits/dense/kernel"]
    assert json.load(open(tmp_path / "out" / "xlnet_config.json"))["d_model"] == CONFIG.d_model

    ours = XLNetPretrainer(XLNetConfig.from_json_file(str(tmp_path / "out" / "xlnet_config.json"),
                                                      dropout=0.0, dropatt=0.0))
    report = checkpoints.load_init_checkpoint(ours, str(tmp_path / "out"), require_heads=True)
    assert "start_logits/dense/kernel" in report["skipped"]
    # Hugging Face's own TF1 loader reads the same checkpoint.
    hf = transformers.XLNetLMHeadModel(hf_config(CONFIG)).eval()
    load_tf_weights_in_xlnet(hf, hf.config, prefix)
    inputs = _inputs(CONFIG)
    ref, _ = hf_forward(hf, inputs)
    assert max_diff(ours(inputs)["logits"], ref.logits.numpy()) <= 1e-5
    # The converted checkpoint is in the original layout (stacked per-layer tensors).
    names = dict(tf.train.list_variables(str(tmp_path / "out" / "xlnet_model.ckpt")))
    assert names["model/transformer/r_w_bias"] == [CONFIG.n_layer, CONFIG.n_head, CONFIG.d_head]
    assert not any("adam" in n or n == "global_step" for n in names)


def test_untie_r_false_original_layout(tmp_path):
    config = CONFIG.replace(untie_r=False)
    arrays = random_arrays(config, seed=1)
    prefix = write_tf1_checkpoint(str(tmp_path / "xlnet_model.ckpt"), arrays)
    ours = XLNetPretrainer(config)
    checkpoints.load_init_checkpoint(ours, prefix, require_heads=True)
    np.testing.assert_array_equal(ours.backbone.r_w_bias.numpy(), arrays["model/transformer/r_w_bias"])
    np.testing.assert_array_equal(ours.backbone.xl_layers[1].rel_attn.seg_embed.numpy(),
                                  arrays["model/transformer/seg_embed"][1])
    # save -> load round trip gives the same outputs
    checkpoints.save_original_checkpoint(ours, str(tmp_path / "again" / "xlnet_model.ckpt"))
    clone = XLNetPretrainer(config)
    checkpoints.load_init_checkpoint(clone, str(tmp_path / "again"))
    inputs = _inputs(config)
    assert max_diff(clone(inputs)["logits"], ours(inputs)["logits"]) == 0.0


def test_mismatches_are_listed(tmp_path):
    arrays = random_arrays(CONFIG, extra={"model/transformer/bogus": np.zeros([3], np.float32)})
    del arrays["model/transformer/layer_1/ff/layer_2/bias"]
    prefix = write_tf1_checkpoint(str(tmp_path / "xlnet_model.ckpt"), arrays)
    with pytest.raises(checkpoints.CheckpointMismatchError) as err:
        checkpoints.load_init_checkpoint(XLNetPretrainer(CONFIG), prefix)
    message = str(err.value)
    assert "layer_1/ff/layer_2/bias" in message and "model/transformer/bogus" in message
    # a config that does not fit (d_inner) names the shapes
    with pytest.raises(checkpoints.CheckpointMismatchError, match="layer_0/ff/layer_1/kernel"):
        good = write_tf1_checkpoint(str(tmp_path / "good" / "xlnet_model.ckpt"), random_arrays(CONFIG))
        checkpoints.load_init_checkpoint(XLNetPretrainer(CONFIG.replace(d_inner=32)), good)
    with pytest.raises(checkpoints.CheckpointMismatchError, match="n_layer"):
        checkpoints.load_init_checkpoint(XLNetPretrainer(CONFIG.replace(n_layer=3)), good)
    with pytest.raises(FileNotFoundError, match="no checkpoint"):
        checkpoints.load_init_checkpoint(XLNetPretrainer(CONFIG), str(tmp_path / "nowhere"))
    with pytest.raises(ValueError, match="--config"):
        convert(str(tmp_path / "o"), original_checkpoint=good)


def test_hf_safetensors_through_converter(tmp_path):
    hf, reference, config = make_pair(seed=3)
    hf.save_pretrained(str(tmp_path / "hf"), safe_serialization=True)
    convert(str(tmp_path / "out"), hf_safetensors=str(tmp_path / "hf" / "model.safetensors"),
            hf_config=str(tmp_path / "hf" / "config.json"))
    ours = XLNetPretrainer(XLNetConfig.from_json_file(str(tmp_path / "out" / "xlnet_config.json")))
    checkpoints.load_init_checkpoint(ours, str(tmp_path / "out"), require_heads=True)
    inputs = _inputs(config)
    ref, _ = hf_forward(hf, inputs)
    assert max_diff(ours(inputs)["logits"], ref.logits.numpy()) <= 1e-5
    # safetensors load directly too (directory form)
    direct = XLNetPretrainer(config)
    checkpoints.load_init_checkpoint(direct, str(tmp_path / "hf"), require_heads=True)
    assert max_diff(direct(inputs)["logits"], ref.logits.numpy()) <= 1e-5


@pytest.mark.parametrize("activation", ["gelu", "gelu_new", "relu"])
def test_a_hugging_face_model_is_imported_as_what_it_computes(tmp_path, activation):
    """Hugging Face's `gelu` is the erf form (ours `gelu_exact`), `gelu_new` the tanh form (ours `gelu`): a model
    saved by transformers and read with `from_checkpoint` gives its logits, and the config maps back unchanged."""
    from tests.parity_utils import randomize_

    hf = transformers.XLNetLMHeadModel(transformers.XLNetConfig(
        vocab_size=53, d_model=16, n_layer=2, n_head=2, d_inner=24, ff_activation=activation, dropout=0.0)).eval()
    randomize_(hf, seed=5)
    hf.save_pretrained(str(tmp_path / "hf"), safe_serialization=True)
    ours = XLNetPretrainer.from_checkpoint(str(tmp_path / "hf"), require_heads=True,
                                           config_overrides={"dropout": 0.0, "dropatt": 0.0})
    assert ours.config.ff_activation == {"gelu": "gelu_exact", "gelu_new": "gelu", "relu": "relu"}[activation]
    assert ours.config.to_hf_dict()["ff_activation"] == activation
    inputs = _inputs(ours.config)
    ref, _ = hf_forward(hf, inputs)
    assert max_diff(ours(inputs)["logits"], ref.logits.numpy()) <= 1e-5


def test_an_untied_hugging_face_head_is_refused(tmp_path):
    """An output matrix of its own (`tie_word_embeddings=False`) cannot be represented: refused, by the config
    and by the weights, instead of replaced by the word embedding."""
    from tests.parity_utils import randomize_

    hf = transformers.XLNetLMHeadModel(transformers.XLNetConfig(
        vocab_size=53, d_model=16, n_layer=2, n_head=2, d_inner=24, tie_word_embeddings=False)).eval()
    randomize_(hf, seed=6)
    state = {k: v.detach().numpy().copy() for k, v in hf.state_dict().items()}
    assert not np.array_equal(state["lm_loss.weight"], state["transformer.word_embedding.weight"])
    with pytest.raises(UserError, match="tie_word_embeddings=false"):
        XLNetConfig.from_hf_dict(hf.config.to_dict())
    with pytest.raises(checkpoints.CheckpointMismatchError, match="lm_loss.weight differs from the word embedding"):
        checkpoints.load_hf_weights(XLNetPretrainer(XLNetConfig(**{**TINY, "d_head": 8})), state)


def test_our_object_checkpoint_restores_backbone(tmp_path):
    _, source, config = make_pair(seed=4)
    path = tf.train.Checkpoint(model=checkpoints.trackable_weights(source)).write(
        str(tmp_path / "train" / "ckpt-7"))
    target = XLNetPretrainer(config)
    assert checkpoints.detect_format(path) == "ours"
    checkpoints.load_init_checkpoint(target, path)
    inputs = _inputs(config)
    np.testing.assert_array_equal(target.backbone(inputs["input_ids"])["content"].numpy(),
                                  source.backbone(inputs["input_ids"])["content"].numpy())
    with pytest.raises(checkpoints.CheckpointMismatchError):
        checkpoints.load_init_checkpoint(XLNetPretrainer(config.replace(n_layer=3)), path)
