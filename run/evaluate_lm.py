"""Held-out language-model evaluation of a pretrained XLNet, left to right, with and without memories.

  python run/evaluate_lm.py --checkpoint=demo_output/model/final --spiece_model=demo_output/spiece.model \
      --input_glob=data/demo/heldout.txt --seg_len=64 --mem_len=256 --output_json=lm_eval.json

Reads the text as one token stream (documents joined by <eod>), segment by segment (xlnet_tf/inference/lm_eval.py):
with memories of the last `--mem_len` tokens (Transformer-XL's cached evaluation; may exceed the training
mem_len) and without (each segment alone). Reports perplexity per token and bits per character of both on
the same tokens.

Refused in one line before any model is built: a fine-tuning model_dir or weights without the LM head, a
SentencePiece model other than the one `final/pretrained_model.json` records (checkpoints without that file,
such as the original release, are taken as they are), a masked-LM model, input globs that match nothing, files
that are empty, blank or not UTF-8 (`--skip_invalid_utf8` skips and counts such lines), and text shorter than one
segment per row. The numeric flags are range-checked when parsed.
"""

import json
import os

from absl import flags

from run import common_flags

FLAGS = flags.FlagValues()


def define_flags(fv: flags.FlagValues = FLAGS):
    d = common_flags.Definer(fv)
    d.string("checkpoint", None, "A pretrained model: model_dir/final, a pretraining run's model_dir, the original "
             "release's directory or a Hugging Face XLNetLMHeadModel's model.safetensors (its config next to it, "
             "or --model_config_path). It must hold the LM head (model/lm_loss/bias); a fine-tuned model does not.")
    d.string("model_config_path", None, "xlnet_config.json (default: next to the checkpoint).")
    d.string("spiece_model", None, "The model's SentencePiece model (checked against the checksum a pretraining "
             "run records in final/pretrained_model.json).")
    d.string("input_glob", None, "Comma-separated globs of UTF-8 text files (one paragraph per line, blank line "
             "between documents).")
    d.bool("skip_invalid_utf8", False, "Skip the lines of --input_glob's files that are not valid UTF-8 (counted "
           "in the report); off: such a line is an error naming the file and line.")
    # ranges checked when the flags are parsed (absl: "flag --seg_len=1: 1 is not integer >= 2")
    d.integer("seg_len", 128, "Tokens per segment (>= 2: a segment's first token is never scored).", lower_bound=2)
    d.integer("mem_len", 256, "Memory length at evaluation (>= 1; relative positions: may exceed the training "
              "one).", lower_bound=1)
    d.integer("batch_size", 1, "Parallel contiguous rows the stream is cut into (>= 1).", lower_bound=1)
    d.integer("max_tokens", 0, "Evaluate the first this many tokens (>= 0; 0 = all).", lower_bound=0)
    d.string("output_json", None, "Write the report here too.")


def read_inputs(input_glob: str, tokenizer, skip_invalid_utf8: bool = False):
    """(files, token ids, lines skipped for invalid UTF-8) of `--input_glob`; every bad file is a UserError
    naming it (tfrecords.readers.corpus.read_text_file)."""
    from tfrecords.readers import corpus
    from xlnet_tf.inference import lm_eval
    from xlnet_tf.text.tokenization import EOD_ID

    source = f"--input_glob={input_glob}"
    try:
        files = corpus.expand_globs(input_glob)
    except corpus.CorpusError:
        raise common_flags.UserError(f"{source} matches no files: give existing text files (comma-separated "
                                     "globs)") from None
    ids, skipped = [], 0
    for path in files:
        lines, bad = corpus.read_text_file(path, skip_invalid_utf8, source=source)
        skipped += bad
        lm_eval.encode_lines(lines, tokenizer, EOD_ID, ids)
        if ids and ids[-1] != EOD_ID:  # a file ends its last document
            ids.append(EOD_ID)
    while ids and ids[-1] == EOD_ID:
        ids.pop()
    return files, ids, skipped


def run():
    from xlnet_tf.inference import lm_eval, pretrained_lm
    from xlnet_tf import files as files_lib

    common_flags.require(FLAGS, "checkpoint", "spiece_model", "input_glob")
    common_flags.check_output_file("output_json", FLAGS.output_json)
    if not os.path.isfile(FLAGS.spiece_model):
        raise common_flags.UserError(f"--spiece_model={FLAGS.spiece_model} does not exist")
    tokenizer, _ = pretrained_lm.lm_tokenizer(FLAGS.checkpoint, FLAGS.spiece_model)
    files, ids, skipped = read_inputs(FLAGS.input_glob, tokenizer, FLAGS.skip_invalid_utf8)
    stream_tokens = len(ids)
    if FLAGS.max_tokens:
        ids = ids[:FLAGS.max_tokens]
    needed = lm_eval.rows_needed(FLAGS.seg_len, FLAGS.batch_size)
    if len(ids) < needed:
        limit = f" (--max_tokens={FLAGS.max_tokens} of {stream_tokens})" if len(ids) < stream_tokens else ""
        raise common_flags.UserError(
            f"--input_glob={FLAGS.input_glob} gives {len(ids)} tokens{limit}, fewer than one segment of "
            f"--seg_len={FLAGS.seg_len} for each of --batch_size={FLAGS.batch_size} rows ({needed}): give more text "
            "or a smaller --seg_len / --batch_size")
    model = pretrained_lm.load_lm(FLAGS.checkpoint, FLAGS.model_config_path, tokenizer, FLAGS.spiece_model, FLAGS.mem_len)
    report = lm_eval.compare(model, ids, FLAGS.seg_len, tokenizer, batch_size=FLAGS.batch_size)
    report.update(checkpoint=FLAGS.checkpoint, files=files, seg_len=FLAGS.seg_len, mem_len=FLAGS.mem_len,
                  batch_size=FLAGS.batch_size, stream_tokens=len(ids), skipped_invalid_utf8_lines=skipped)
    for name in ("with_memories", "without_memories"):
        r = report[name]
        print(f"{name}: perplexity {r['perplexity']:.3f}, {r['bits_per_character']:.4f} bits/char "
              f"({r['tokens']} tokens, {r['characters']} characters)", flush=True)
    if skipped:
        print(f"skipped {skipped} line(s) of invalid UTF-8 (--skip_invalid_utf8)", flush=True)
    if FLAGS.output_json:
        files_lib.write_text_atomic(FLAGS.output_json, json.dumps(report, indent=2))
    return report


if __name__ == "__main__":
    common_flags.run_main(FLAGS, define_flags, run)
