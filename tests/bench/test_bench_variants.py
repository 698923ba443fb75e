"""The benchmark's A/B attention variants compute the same function as the production layer."""

import numpy as np
import pytest

from bench.speed import variants
from xlnet_tf.config import XLNetConfig
from xlnet_tf.models import XLNetPretrainer


def _inputs(batch=4, seq_len=12, num_predict=3, mlen=5, d_model=32, seed=0):
    rng = np.random.RandomState(seed)
    mapping = np.zeros((batch, num_predict, seq_len), np.float32)
    for b in range(batch):
        mapping[b, np.arange(num_predict), rng.choice(seq_len, num_predict, replace=False)] = 1
    return {"input_ids": rng.randint(0, 50, (batch, seq_len)).astype(np.int32),
            "segment_ids": rng.randint(0, 2, (batch, seq_len)).astype(np.int32),
            "attention_mask": np.ones((batch, seq_len), np.float32),
            "perm_mask": (rng.rand(batch, seq_len, seq_len) > 0.5).astype(np.float32),
            "target_mapping": mapping,
            }


def _mems(batch=4, mlen=5, d_model=32):
    rng = np.random.RandomState(1)
    return [rng.randn(batch, mlen, d_model).astype(np.float32) for _ in range(2)]


@pytest.mark.parametrize("name", [n for n in variants.VARIANTS if n != "production"])
@pytest.mark.parametrize("bi_data", [False, True])
def test_variant_matches_production(name, bi_data):
    config = XLNetConfig(n_token=50, n_layer=2, d_model=32, n_head=2, d_head=16, d_inner=64, dropout=0.0,
                         dropatt=0.0, bi_data=bi_data, mem_len=5)
    feats = _inputs()
    reference = XLNetPretrainer(config)
    ref = reference(feats, mems=_mems())
    with variants.VARIANTS[name]():
        model = XLNetPretrainer(config)
        model(feats)
        model.set_weights(reference.get_weights())
        out = model(feats, mems=_mems())
    for key in ("logits", "content"):
        np.testing.assert_allclose(out[key].numpy(), ref[key].numpy(), atol=1e-5, err_msg=key)
