"""Exports a fine-tuned (or pretrained, for `embedding` and `lm`) XLNet as a TF Serving SavedModel.

  python run/export_savedmodel.py --model_dir=out/mrpc --export_dir=serving/mrpc --version=1
  python run/export_savedmodel.py --checkpoint=out/squad/ckpt-8000 --model_dir=out/squad \
      --export_dir=serving/squad --version=2
  python run/export_savedmodel.py --task=lm --checkpoint=demo_output/model/final \
      --export_spiece_model=demo_output/spiece.model --export_dir=serving/lm

`--task=lm` exports a pretrained permutation-LM (a pretraining run's final/, the original release, a Hugging Face
XLNetLMHeadModel) with `generate` (= `serving_default`: raw prompts in, continuations out, every decoding value
a request input within the `--export_max_*` bounds checked in the graph) and `features` (xlnet_tf/serving/lm.py).

Writes `<export_dir>/<version>/` with the signatures `serving_default` (raw UTF-8 strings, tokenized
in-graph with the SentencePiece model embedded in the SavedModel), `from_ids`, `features` (per-token states and
the pooled summary) and, for a tagger, `from_words` (pre-split words), plus
`assets.extra/tf_serving_warmup_requests` (each task's module in xlnet_tf/serving/ describes its signatures).
The task, labels, lengths, a tagger's `doc_stride` and the SentencePiece model come from
`<model_dir>/export_info.json`, written by the fine-tuning runners; flags override them. A tagger's request may
take at most `--export_max_windows` windows per sentence.
Query it: `saved_model_cli show --dir serving/mrpc/1 --all`, or from Python (import tensorflow_text first):
`tf.saved_model.load(path).signatures["serving_default"](text=tf.constant(["..."]), ...)`.
"""

import os


from absl import flags

from run import common_flags
from xlnet_tf.errors import UserError

FLAGS = flags.FlagValues()  # this tool's own flags, defined when it runs (run/common_flags.py)
EXPORT_DTYPES = ("float32", "bfloat16")  # --export_dtype: the runners' --mixed_precision names (loop.dtype_policy)


def define_flags(fv: flags.FlagValues = FLAGS):
    """The export flags, then the `--task=lm` ones (`define_lm_flags`), into `fv`."""
    d = common_flags.Definer(fv)
    d.string("model_dir", None, "Fine-tuning model directory (xlnet_config.json, export_info.json, checkpoints).")
    d.string("checkpoint", None, "Weights to export (default: the latest checkpoint of --model_dir). Any format "
             "--init_checkpoint accepts.")
    d.enum("task", None, ["classifier", "regression", "squad", "race", "embedding", "tagging", "lm"],
           "Default: from export_info.json. lm: a pretrained model's generate and features signatures.")
    d.string("export_dir", None, "Base directory of the exported versions.")
    d.integer("version", 1, "Version sub-directory (TF Serving serves the highest).", lower_bound=0)
    d.string("export_spiece_model", None, "SentencePiece model (default: export_info.json's).")
    d.integer("export_max_seq_length", None, "Maximum length (default: export_info.json's).", lower_bound=3)
    d.integer("export_max_windows", None, "Tagging: the most windows of max_seq_length tokens one sentence of a "
              "request may take (a longer one is refused; default xlnet_tf.serving.tagging.DEFAULT_MAX_WINDOWS).",
              lower_bound=1)
    d.enum("export_dtype", "float32", list(EXPORT_DTYPES), "The served model's compute dtype: bfloat16 runs the "
           "model as Keras mixed_bfloat16 (outputs float32) and stores its weights rounded once to bfloat16, "
           "LayerNorm's in float32 (xlnet_tf/serving/half_weights.py: the same outputs, half the bytes), for CPUs "
           "with bfloat16 arithmetic (AVX-512 BF16, AMX; elsewhere emulated and slower); its predictions equal "
           "float32's except at near-ties (bench/speed/README.md, where it is timed in a process with "
           "--xla_clustering=fusible's TF_XLA_FLAGS). Not for --task=lm.")
    define_lm_flags(fv)


def define_lm_flags(fv: flags.FlagValues = FLAGS):
    """The `--task=lm` bounds and decoding flags."""
    d = common_flags.Definer(fv)
    d.string("model_config_path", None, "--task=lm: xlnet_config.json (default: next to --checkpoint).")
    d.integer("export_max_prompt_tokens", 512, "--task=lm: prompt tokens read (a longer prompt keeps its last "
              "ones, reported per row).", lower_bound=1)
    d.integer("export_max_new_tokens", 256, "--task=lm: the largest max_new_tokens a request may ask.",
              lower_bound=1)
    d.integer("export_max_top_k", 100, "--task=lm: the largest top_k a request may ask.", lower_bound=1)
    d.integer("export_max_batch_size", 16, "--task=lm: the most prompts of one generate request.", lower_bound=1)
    d.enum("export_layout", "causal", ["causal", "bidirectional_prompt"], "--task=lm: how the prompt's tokens see "
           "each other (xlnet_tf/inference/generation.py).")
    d.list("export_stop_ids", ["7"], "--task=lm: token ids that end a continuation (default <eod>).")


def export_lm(checkpoint, export_dir, version=1, spiece_model=None, model_config_path=None, max_seq_length=None,
              **bounds):
    """A pretrained LM's export (`generate`, `features`); `bounds`: `xlnet_tf.serving.lm.GenerationBounds` fields.
    Refuses, before building anything, what `run/generate.py` refuses (a fine-tuning directory, weights without
    the LM head, a masked LM, another SentencePiece model) and bounds out of range."""
    check_destination(export_dir, version)
    if not checkpoint:
        raise UserError("--task=lm needs --checkpoint: a pretraining run's model_dir/final (or model_dir), the "
                        "original release or a Hugging Face XLNetLMHeadModel's model.safetensors")
    if not spiece_model or not os.path.isfile(spiece_model):
        raise UserError(f"--export_spiece_model={spiece_model} does not exist: give the model's SentencePiece model")
    import numpy as np

    from xlnet_tf.inference.pretrained_lm import lm_tokenizer, load_lm
    from xlnet_tf import serving
    from xlnet_tf.inference import generation
    from xlnet_tf.serving.lm import GenerationBounds

    tokenizer, info = lm_tokenizer(checkpoint, spiece_model, spiece_flag="--export_spiece_model")
    try:
        bounds = GenerationBounds(**bounds)
    except ValueError as e:
        raise UserError(str(e).replace("GenerationBounds.", "--export_", 1)) from None
    model = load_lm(checkpoint, model_config_path, tokenizer, spiece_model, spiece_flag="--export_spiece_model")
    generation.check_model(model, bounds.layout, bounds.stop_ids, "--export_stop_ids")
    options = dict(uncased=info.text.uncased if info else False, keep_accents=info.text.keep_accents if info else False,
                   generation=bounds)
    warmup = {"prompt": np.array([b"XLNet warm-up request for TF Serving."]), "max_new_tokens": np.array(1, np.int32),
              "temperature": np.array(0.0, np.float32), "top_k": np.array(0, np.int32),
              "top_p": np.array(1.0, np.float32), "repetition_penalty": np.array(1.0, np.float32),
              "seed": np.array(0, np.int32)}
    return serving.export(model, "lm", spiece_model, export_dir, version,
                          max_seq_length or bounds.max_prompt_tokens, warmup, **options)


def check_destination(export_dir: str, version: int) -> None:
    """Refuses, before any model is built (and before TensorFlow is imported), an `--export_dir` that is a file and
    a version already exported (an export never replaces one TF Serving may be serving)."""
    from xlnet_tf import files

    if files.exists(export_dir) and not files.isdir(export_dir):
        raise UserError(f"--export_dir={export_dir} is a file; give a directory (the versions go under it)")
    path = os.path.join(export_dir, str(version))
    if files.exists(path):
        raise UserError(f"{path} exists: choose another --version (TF Serving loads the highest) or another "
                        "--export_dir")


def check_spiece_model(spiece_model: str, info, weights: str) -> None:
    """The SentencePiece model served with must be the one the weights were trained with: the checksum in
    export_info.json (fine-tuning) or in a pretraining run's facts (`pretrain_info`)."""
    from xlnet_tf.artifacts import pretrain_info
    from xlnet_tf.text.tokenization import file_sha256

    sha = file_sha256(spiece_model)
    recorded = info.text.spiece_sha256 if info else None
    if recorded and recorded != sha:
        raise UserError(f"--export_spiece_model={spiece_model} has sha256 {sha}, but export_info.json says the model "
                        f"was trained with the SentencePiece model of sha256 {recorded}: export with that model")
    if weights:
        pretrain_info.check_final(weights, spiece_sha256=sha, spiece_flag=f"--export_spiece_model={spiece_model}")


def export_from_model_dir(model_dir, export_dir, version=1, checkpoint=None, task=None, spiece_model=None,
                          max_seq_length=None, max_windows=None, extra_files=None, dtype="float32"):
    """Library entry point of the CLI; returns the export path. The flags are checked before TensorFlow and the
    model code are imported. `dtype`: --export_dtype (float32 | bfloat16: Keras mixed_bfloat16)."""
    from xlnet_tf.artifacts import export_info
    from xlnet_tf import files
    from xlnet_tf.artifacts.text_settings import TextSettings

    check_destination(export_dir, version)
    if dtype not in EXPORT_DTYPES:
        raise UserError(f"--export_dtype={dtype}: one of {', '.join(EXPORT_DTYPES)}")
    if model_dir and not files.isdir(model_dir):
        raise UserError(f"--model_dir={model_dir} " + ("is a file, not a model directory"
                                                       if files.exists(model_dir) else "does not exist"))
    recorded = export_info.read_optional(model_dir) if model_dir else None
    info = recorded.to_dict() if recorded else {}
    task = task or info.get("task")
    if task is None:
        raise UserError(f"--task is required: no export_info.json in --model_dir={model_dir}")
    spiece_model = spiece_model or info.get("spiece_model_file")
    if not spiece_model or not os.path.exists(spiece_model):
        raise UserError(f"SentencePiece model not found ({spiece_model!r}); pass --export_spiece_model")
    check_spiece_model(spiece_model, recorded, checkpoint or model_dir)
    max_seq_length = max_seq_length or info.get("max_seq_length")
    if not max_seq_length:
        raise UserError("--export_max_seq_length is required (no export_info.json)")
    import numpy as np

    from xlnet_tf import checkpoints
    from xlnet_tf import serving
    from xlnet_tf.config import XLNetConfig
    from xlnet_tf.models import model_from_export_info
    from xlnet_tf.serving.tagging import DEFAULT_MAX_WINDOWS
    from xlnet_tf.training import finetuning
    from xlnet_tf.training.loop import dtype_policy

    config = XLNetConfig.from_json_file(os.path.join(model_dir, "xlnet_config.json"), dropout=0.0, dropatt=0.0)
    # the task model as the export info describes it (the mapping `Task.from_checkpoint` uses too); the head
    # kind follows `task`, which may override the recorded one
    model = model_from_export_info(config, info, task, dtype=dtype_policy(dtype))
    if checkpoint is None:
        found = finetuning.list_checkpoints(model_dir)
        if not found:
            raise UserError(f"No checkpoint in --model_dir={model_dir}; pass --checkpoint")
        checkpoint = found[-1]
    checkpoints.load_init_checkpoint(model, checkpoint, require_heads=task != "embedding")
    text = recorded.text if recorded else TextSettings(None)
    options = dict(uncased=text.uncased, keep_accents=text.keep_accents,
                   labels=info.get("labels"),
                   text_pair=info.get("text_pair", False), max_query_length=info.get("max_query_length", 64),
                   max_qa_length=info.get("max_qa_length", 128),
                   max_answer_length=info.get("max_answer_length", 64),
                   max_segments=info.get("max_segments") or 1,
                   qa_truncation=info.get("qa_truncation") or "tail",
                   split_unknown=True if info.get("split_unknown") is None else info["split_unknown"])
    if task == "tagging":
        if not info.get("doc_stride"):
            raise UserError(f"export_info.json of --model_dir={model_dir} has no doc_stride (a tagging run's "
                            "windows): export from the tagging run's model_dir")
        options.update(doc_stride=info["doc_stride"], max_windows=max_windows or DEFAULT_MAX_WINDOWS)
    sample = "XLNet warm-up request for TF Serving."
    warmup = {"squad": {"question": np.array([b"What is warmed up?"]), "context": np.array([sample.encode()])},
              "race": {"article": np.array([sample.encode()]), "question": np.array([b"What is it?"]),
                       "options": np.array([[b"a", b"b", b"c", b"d"]])}}.get(
        task, {"text": np.array([sample.encode()]), **({"text_b": np.array([sample.encode()])}
                                                      if options["text_pair"] else {})})
    return serving.export(model, task, spiece_model, export_dir, version, max_seq_length, warmup,
                          extra_files=extra_files, **options)


def run():
    """The command line's export (user errors raised: `run_main` reports them in one line)."""
    if not FLAGS.export_dir or not (FLAGS.model_dir or FLAGS.checkpoint):
        raise UserError("--export_dir and --model_dir (or --checkpoint with --model_dir) are required")
    if FLAGS.task == "lm":
        if FLAGS.export_dtype != "float32":
            raise UserError(f"--export_dtype={FLAGS.export_dtype} with --task=lm: the LM export's decoding program is "
                            "XLA-compiled, where bfloat16 dots do not run at the bfloat16 rate; export it in float32")
        try:
            stop_ids = tuple(int(i) for i in FLAGS.export_stop_ids)
        except ValueError:
            raise UserError(f"--export_stop_ids={','.join(FLAGS.export_stop_ids)}: give comma-separated token "
                            "ids") from None
        path = export_lm(FLAGS.checkpoint or (FLAGS.model_dir and os.path.join(FLAGS.model_dir, "final")),
                         FLAGS.export_dir, FLAGS.version, FLAGS.export_spiece_model, FLAGS.model_config_path,
                         FLAGS.export_max_seq_length, max_prompt_tokens=FLAGS.export_max_prompt_tokens,
                         max_new_tokens=FLAGS.export_max_new_tokens, max_top_k=FLAGS.export_max_top_k,
                         max_batch_size=FLAGS.export_max_batch_size, layout=FLAGS.export_layout,
                         stop_ids=stop_ids)
    else:
        path = export_from_model_dir(FLAGS.model_dir, FLAGS.export_dir, FLAGS.version, FLAGS.checkpoint, FLAGS.task,
                                     FLAGS.export_spiece_model, FLAGS.export_max_seq_length,
                                     FLAGS.export_max_windows, dtype=FLAGS.export_dtype)
    print(f"Exported to {path}")
    return path


if __name__ == "__main__":
    common_flags.run_main(FLAGS, define_flags, run)
