import json

import pytest

from xlnet_tf.config import XLNetConfig

BASE_RELEASE = {"d_head": 64, "d_inner": 3072, "d_model": 768, "ff_activation": "gelu", "n_head": 12,
                "n_layer": 12, "n_token": 32000, "untie_r": True}


def test_reads_released_config_unchanged(tmp_path):
    path = tmp_path / "xlnet_config.json"
    path.write_text(json.dumps(BASE_RELEASE))
    config = XLNetConfig.from_json_file(str(path))
    assert config.to_original_dict() == BASE_RELEASE
    assert config.mem_len is None and config.attn_type == "bi" and config.clamp_len == -1


def test_d_head_may_differ_from_d_model_over_n_head(tmp_path):
    path = tmp_path / "c.json"
    path.write_text(json.dumps({**BASE_RELEASE, "d_head": 40}))
    assert XLNetConfig.from_json_file(str(path)).d_head == 40


def test_round_trip(tmp_path):
    config = XLNetConfig(n_layer=3, mem_len=8, reuse_len=4, bi_data=True, dropout=0.0)
    path = str(tmp_path / "full.json")
    config.to_json_file(path)
    assert XLNetConfig.from_json_file(path) == config
    config.to_json_file(path, original_only=True)
    assert json.load(open(path)) == config.to_original_dict()


@pytest.mark.parametrize("field,value", [
    ("n_layer", 0), ("d_model", -4), ("n_head", 0), ("d_head", 0), ("d_inner", 0), ("n_token", 0),
    ("ff_activation", "swish"), ("attn_type", "sideways"), ("dropout", 1.5), ("dropatt", -0.1),
    ("mem_len", -1), ("reuse_len", -2), ("initializer_range", 0.0)])
def test_invalid_settings_name_the_field(field, value):
    with pytest.raises(ValueError, match=field):
        XLNetConfig(**{field: value})


def test_input_dependent_checks():
    with pytest.raises(ValueError, match="bi_data"):
        XLNetConfig(bi_data=True).validate(batch_size=3)
    XLNetConfig(bi_data=True).validate(batch_size=4)
    with pytest.raises(ValueError, match="reuse_len"):
        XLNetConfig(reuse_len=300).validate(seq_len=256)


def test_unknown_key_and_bad_file(tmp_path):
    path = tmp_path / "c.json"
    path.write_text(json.dumps({**BASE_RELEASE, "n_layers": 3}))
    with pytest.raises(ValueError, match="n_layers"):
        XLNetConfig.from_json_file(str(path))
    path.write_text("{not json")
    with pytest.raises(ValueError, match="c.json"):
        XLNetConfig.from_json_file(str(path))
    with pytest.raises(ValueError, match="not found"):
        XLNetConfig.from_json_file(str(tmp_path / "missing.json"))
