"""Forward and forward+backward time of our XLNet vs Hugging Face PyTorch XLNet, same process, same weights.

  python bench/model_step.py --n_layer=4 --d_model=768 --batch=8 --seq_len=128 [--jit_compile]

Two workloads: `content` (fine-tuning path: content stream, mean of the output as the loss) and `plm`
(pretraining path: two streams with a perm mask, `num_predict` targets and the tied LM loss). Prints a
JSON line per workload with milliseconds per step for both implementations and the speed-up ratio.
"""

import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
import torch  # noqa: E402
import transformers  # noqa: E402

from tests.parity_utils import hf_config  # noqa: E402
from bench.run import median_ms  # noqa: E402
from xlnet_tf import checkpoints  # noqa: E402
from xlnet_tf.config import XLNetConfig  # noqa: E402
from xlnet_tf.models import XLNetPretrainer  # noqa: E402


def make_inputs(rng, config, batch, seq_len, num_predict):
    ids = rng.randint(0, config.n_token, (batch, seq_len))
    seg = np.zeros((batch, seq_len), np.int64)
    seg[:, seq_len // 2:] = 1
    perm = (rng.rand(batch, seq_len, seq_len) > 0.5).astype(np.float32)
    mapping = np.zeros((batch, num_predict, seq_len), np.float32)
    for b in range(batch):
        mapping[b, np.arange(num_predict), np.sort(rng.choice(seq_len, num_predict, replace=False))] = 1
    targets = rng.randint(0, config.n_token, (batch, num_predict))
    return {"input_ids": ids, "segment_ids": seg, "attention_mask": np.ones((batch, seq_len), np.float32),
            "perm_mask": perm, "target_mapping": mapping, "target_ids": targets,
            "target_mask": np.ones((batch, num_predict), np.float32)}


def run(args):
    config = XLNetConfig(n_token=args.n_token, n_layer=args.n_layer, d_model=args.d_model,
                         n_head=args.d_model // 64, d_head=64, d_inner=4 * args.d_model, dropout=0.0,
                         dropatt=0.0)
    torch.set_num_threads(args.threads or os.cpu_count())
    hf = transformers.XLNetLMHeadModel(hf_config(config))
    ours = XLNetPretrainer(config)
    checkpoints.load_hf_weights(ours, {k: v.detach().numpy() for k, v in hf.state_dict().items()})
    data = make_inputs(np.random.RandomState(0), config, args.batch, args.seq_len, args.num_predict)
    tf_data = {k: tf.constant(v) for k, v in data.items()}
    pt = {"input_ids": torch.tensor(data["input_ids"]), "token_type_ids": torch.tensor(data["segment_ids"]),
          "attention_mask": torch.tensor(data["attention_mask"])}
    pt_plm = dict(pt, perm_mask=torch.tensor(data["perm_mask"]),
                  target_mapping=torch.tensor(data["target_mapping"]))
    labels = torch.tensor(data["target_ids"])
    variables = ours.trainable_variables

    def tf_content():
        with tf.GradientTape() as tape:
            out = ours.backbone(tf_data["input_ids"], segment_ids=tf_data["segment_ids"],
                                attention_mask=tf_data["attention_mask"], training=True)
            loss = tf.reduce_mean(out["content"])
        return tape.gradient(loss, variables)

    def tf_plm():
        with tf.GradientTape() as tape:
            out = ours(tf_data, training=True)
            loss = ours.compute_plm_loss(tf_data, out)
        return tape.gradient(loss, variables)

    def tf_forward():
        return ours.backbone(tf_data["input_ids"], segment_ids=tf_data["segment_ids"],
                             attention_mask=tf_data["attention_mask"])["content"]

    jit = args.jit_compile
    tf_fns = {"content": tf.function(tf_content, jit_compile=jit),
              "plm": tf.function(tf_plm, jit_compile=jit), "forward": tf.function(tf_forward, jit_compile=jit)}

    def hf_content():
        hf.zero_grad(set_to_none=True)
        out = hf.transformer(**pt)
        out.last_hidden_state.mean().backward()

    def hf_plm():
        hf.zero_grad(set_to_none=True)
        out = hf(**pt_plm, labels=labels)
        out.loss.backward()

    def hf_forward():
        with torch.no_grad():
            return hf.transformer(**pt).last_hidden_state

    hf.train()
    for module in hf.modules():  # dropout is 0 anyway; keep train-mode code paths
        module.training = True
    hf_fns = {"content": hf_content, "plm": hf_plm, "forward": hf_forward}
    results = []
    for name in ("forward", "content", "plm"):
        ours_ms = median_ms(lambda: tf.nest.map_structure(lambda t: None if t is None else t.numpy(), tf_fns[name](),
                                                     expand_composites=True), args.repeats)
        hf_ms = median_ms(hf_fns[name], args.repeats)
        row = {"workload": name, "batch": args.batch, "seq_len": args.seq_len, "n_layer": args.n_layer,
               "d_model": args.d_model, "jit_compile": jit, "ours_ms": round(ours_ms, 1),
               "hf_ms": round(hf_ms, 1), "ratio": round(hf_ms / ours_ms, 3)}
        print(json.dumps(row), flush=True)
        results.append(row)
    return results


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--n_layer", type=int, default=4)
    parser.add_argument("--d_model", type=int, default=768)
    parser.add_argument("--n_token", type=int, default=32000)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--seq_len", type=int, default=128)
    parser.add_argument("--num_predict", type=int, default=21)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--threads", type=int, default=0)
    parser.add_argument("--jit_compile", action="store_true")
    run(parser.parse_args())


if __name__ == "__main__":
    main()
