"""Held-out language-model evaluation of a pretrained XLNet, left to right, with and without memories.

  python run/evaluate_lm.py --checkpoint=demo_output/model/final --spiece_model=demo_output/spiece.model \
      --input_glob=data/demo/heldout.txt --seg_len=64 --mem_len=256 --output_json=lm_eval.json

Reads the text as one token stream (documents joined by <eod>), segment by segment (xlnet_tf/lm_eval.py):
with memories of the last `--mem_len` tokens (Transformer-XL's cached evaluation; may exceed the training
mem_len) and without (each segment alone). Reports perplexity per token and bits per character of both on
the same tokens.
"""

import json
import os

from absl import app, flags

from run import common_flags

FLAGS = flags.FlagValues()


def define_flags(fv: flags.FlagValues = FLAGS):
    d = common_flags.Definer(fv)
    d.string("checkpoint", None, "A pretrained model: model_dir/final, a runner's model_dir, the original release's "
             "directory or a Hugging Face model.safetensors (its config next to it, or --model_config_path).")
    d.string("model_config_path", None, "xlnet_config.json (default: next to the checkpoint).")
    d.string("spiece_model", None, "The model's SentencePiece model.")
    d.string("input_glob", None, "Comma-separated globs of text files (one paragraph per line, blank line "
             "between documents).")
    d.integer("seg_len", 128, "Tokens per segment.")
    d.integer("mem_len", 256, "Memory length at evaluation (relative positions: may exceed the training one).")
    d.integer("batch_size", 1, "Parallel contiguous rows the stream is cut into.")
    d.integer("max_tokens", 0, "Evaluate the first this many tokens (0 = all).")
    d.string("output_json", None, "Write the report here too.")


def run():
    from tfrecords import corpus
    from xlnet_tf import lm_eval
    from xlnet_tf.models import XLNetPretrainer
    from xlnet_tf.tokenization import EOD_ID, XLNetTokenizer

    common_flags.require(FLAGS, "checkpoint", "spiece_model", "input_glob")
    if FLAGS.seg_len < 2 or FLAGS.mem_len < 1 or FLAGS.batch_size < 1:
        raise common_flags.UserError("--seg_len must be >= 2, --mem_len and --batch_size >= 1")
    tokenizer = XLNetTokenizer(FLAGS.spiece_model)
    model = XLNetPretrainer.from_checkpoint(
        FLAGS.checkpoint, config=FLAGS.model_config_path,
        # bi_data is the pretraining batch layout (second half of the rows backward): off for reading a stream
        config_overrides={"mem_len": FLAGS.mem_len, "reuse_len": None, "bi_data": False, "same_length": False,
                          "dropout": 0.0, "dropatt": 0.0})
    if model.config.n_token != tokenizer.vocab_size:
        raise common_flags.UserError(f"--spiece_model={FLAGS.spiece_model} has {tokenizer.vocab_size} pieces but the "
                                     f"model n_token={model.config.n_token}: give the model's own SentencePiece model")
    files = corpus.expand_globs(FLAGS.input_glob)
    ids = lm_eval.read_stream(files, tokenizer, EOD_ID)
    if FLAGS.max_tokens:
        ids = ids[:FLAGS.max_tokens]
    report = lm_eval.compare(model, ids, FLAGS.seg_len, tokenizer, batch_size=FLAGS.batch_size)
    report.update(checkpoint=FLAGS.checkpoint, files=files, seg_len=FLAGS.seg_len, mem_len=FLAGS.mem_len,
                  batch_size=FLAGS.batch_size, stream_tokens=len(ids))
    for name in ("with_memories", "without_memories"):
        r = report[name]
        print(f"{name}: perplexity {r['perplexity']:.3f}, {r['bits_per_character']:.4f} bits/char "
              f"({r['tokens']} tokens, {r['characters']} characters)", flush=True)
    if FLAGS.output_json:
        tmp = FLAGS.output_json + ".tmp"
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump(report, f, indent=2)
        os.replace(tmp, FLAGS.output_json)
    return report


def main(argv):
    if len(argv) > 1:
        raise app.UsageError(f"Unexpected arguments: {argv[1:]}")
    run()


if __name__ == "__main__":
    common_flags.run_main(FLAGS, define_flags, main)
