"""Continue prompts with a pretrained XLNet (xlnet_tf/inference/generation.py), one JSON line per prompt.

  python run/generate.py --checkpoint=demo_output/model/final --spiece_model=demo_output/spiece.model \
      --prompt="The history of the valley" --prompt="In the spring" --max_new_tokens=40 \
      --temperature=0.8 --top_p=0.9 --seed=1 --output=generated.jsonl

Prompts come from repeated --prompt and/or --prompts_file (one per line, blank lines skipped); each output line
holds `prompt`, `text` (the continuation, stop token left out), `token_ids`, `log_probs` (each token's
log-probability under the model's distribution), `sampling_log_probs`, `stop_reason`, `prompt_tokens` and
`prompt_truncated` (the prompt was longer than --mem_len: its last tokens were read; also printed).
--layout=causal reads every token left to right (exact cache); bidirectional_prompt lets the prompt's tokens
see each other (pretraining's context, Hugging Face's layout).

Refused in one line before any model is built (the checks run/evaluate_lm.py makes): a fine-tuning model_dir
or weights without the LM head, a SentencePiece model other than the one `final/pretrained_model.json`
records, a masked-LM model; then bad decoding values (naming the flag) and empty prompts.
"""

import json
import os

from absl import flags

from run import common_flags

FLAGS = flags.FlagValues()
# xlnet_tf.inference.generation.LAYOUTS (tests/inference/test_generation.py checks), not imported: that loads TensorFlow, and a bad
# flag is reported before it is
LAYOUTS = ("causal", "bidirectional_prompt")


def define_flags(fv: flags.FlagValues = FLAGS):
    d = common_flags.Definer(fv)
    d.string("checkpoint", None, "A pretrained model: model_dir/final, a pretraining run's model_dir, the original "
             "release's directory or a Hugging Face XLNetLMHeadModel's model.safetensors. It must hold the LM "
             "head; a fine-tuned model does not.")
    d.string("model_config_path", None, "xlnet_config.json (default: next to the checkpoint).")
    d.string("spiece_model", None, "The model's SentencePiece model.")
    d.multi_string("prompt", [], "A prompt (repeat the flag for several).")
    d.string("prompts_file", None, "A UTF-8 file of prompts, one per line (blank lines skipped).")
    d.string("output", None, "Write the results here as JSON lines (default: only printed).")
    d.integer("batch_size", 8, "Prompts generated together (left-padded; each row gives what it gives alone).",
              lower_bound=1)
    d.integer("max_new_tokens", 32, "Tokens to generate per prompt.", lower_bound=1)
    d.float("temperature", 0.0, "0 = greedy; > 0 samples from softmax(logits / temperature).", lower_bound=0.0)
    d.integer("top_k", 0, "Sample among the k most likely tokens (0 = all).", lower_bound=0)
    d.float("top_p", 1.0, "Sample among the smallest set of tokens of probability >= top_p, in (0, 1].",
            upper_bound=1.0)
    d.float("repetition_penalty", 1.0, "CTRL's penalty on tokens already in the prompt or output (1 = off).")
    d.list("stop_ids", ["7"], "Token ids that end a continuation (default <eod>; empty = none).")
    d.integer("seed", 0, "Seed of the sampling noise (the same seed gives the same samples).")
    d.enum("layout", "causal", list(LAYOUTS), "causal: every token sees only earlier ones; bidirectional_prompt: "
           "the prompt's tokens see each other.")
    d.integer("mem_len", 0, "Memory buffer in tokens (0 = the whole prompt and continuation); longer prompts keep "
              "their last tokens (reported).", lower_bound=0)
    d.integer("segment_len", 512, "Prompt tokens read per pass.", lower_bound=1)
    d.bool("padding_text", False, "Prepend a long neutral paragraph and <eod> to every prompt (the original "
           "authors' advice for short prompts).")
    d.bool("jit_compile", True, "Compile the decoding loop with XLA.")


def read_prompts():
    """The prompts of --prompt and --prompts_file, in that order; a UserError when there are none."""
    prompts = list(FLAGS.prompt)
    if FLAGS.prompts_file:
        from tfrecords.readers import corpus

        if not os.path.isfile(FLAGS.prompts_file):
            raise common_flags.UserError(f"--prompts_file={FLAGS.prompts_file} does not exist")
        try:
            lines, _ = corpus.read_text_file(FLAGS.prompts_file, source=f"--prompts_file={FLAGS.prompts_file}")
        except corpus.CorpusError as e:
            raise common_flags.UserError(str(e)) from None
        prompts += [line for line in lines if line]
    if not prompts:
        raise common_flags.UserError("no prompts: give --prompt (repeatable) or --prompts_file")
    return prompts


def settings_from_flags():
    """`GenerationSettings` of the decoding flags; a bad value is a UserError naming the flag."""
    from xlnet_tf.errors import UserError
    from xlnet_tf.inference.generation import GenerationSettings

    try:
        stop_ids = tuple(int(i) for i in FLAGS.stop_ids)
    except ValueError:
        raise common_flags.UserError(f"--stop_ids={','.join(FLAGS.stop_ids)}: give comma-separated token ids") from None
    try:
        return GenerationSettings(
            max_new_tokens=FLAGS.max_new_tokens, temperature=FLAGS.temperature, top_k=FLAGS.top_k, top_p=FLAGS.top_p,
            repetition_penalty=FLAGS.repetition_penalty, stop_ids=stop_ids, seed=FLAGS.seed, layout=FLAGS.layout,
            mem_len=FLAGS.mem_len or None, segment_len=FLAGS.segment_len, padding_text=FLAGS.padding_text,
            jit_compile=FLAGS.jit_compile)
    except UserError as e:  # the fields are named as the flags
        raise common_flags.UserError(str(e).replace("GenerationSettings.", "--", 1)) from None


def run():
    from xlnet_tf.inference.pretrained_lm import lm_tokenizer, load_lm
    from xlnet_tf import files as files_lib
    from xlnet_tf.inference import generation

    common_flags.require(FLAGS, "checkpoint", "spiece_model")
    common_flags.check_output_file("output", FLAGS.output)
    settings = settings_from_flags()
    prompts = read_prompts()
    if not os.path.isfile(FLAGS.spiece_model):
        raise common_flags.UserError(f"--spiece_model={FLAGS.spiece_model} does not exist")
    tokenizer, _ = lm_tokenizer(FLAGS.checkpoint, FLAGS.spiece_model)
    model = load_lm(FLAGS.checkpoint, FLAGS.model_config_path, tokenizer, FLAGS.spiece_model)  # own memory buffer
    generation.check_model(model, settings.layout, settings.stop_ids, "--stop_ids")
    for i, prompt in enumerate(prompts):
        if not tokenizer.encode(prompt):
            raise common_flags.UserError(f"prompt {i} ({prompt!r}) has no tokens: give some text")
    results = []
    for start in range(0, len(prompts), FLAGS.batch_size):
        batch = prompts[start:start + FLAGS.batch_size]
        keys = list(range(start, start + len(batch)))  # a prompt's samples do not depend on --batch_size
        results += generation.generate_text(model, tokenizer, batch, settings, row_keys=keys)
    for i, r in enumerate(results):
        if r["prompt_truncated"]:
            print(f"prompt {i}: longer than --mem_len={FLAGS.mem_len}; its last {r['prompt_tokens']} tokens were read",
                  flush=True)
        print(json.dumps({"prompt": r["prompt"], "text": r["text"], "stop_reason": r["stop_reason"]},
                         ensure_ascii=False), flush=True)
    if FLAGS.output:
        files_lib.write_text_atomic(FLAGS.output, "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in results))
    return results


if __name__ == "__main__":
    common_flags.run_main(FLAGS, define_flags, run)
