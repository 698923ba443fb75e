"""Flags every runner shares (defined once; runners call the `define_*` functions they need)."""

import functools

from absl import flags

from xlnet_tf.config import XLNetConfig


def _once(define):
    """Runner modules share these groups; defining a group twice in one process is a no-op."""
    done = []

    @functools.wraps(define)
    def wrapper(*args, **kwargs):
        if not done:
            define(*args, **kwargs)
            done.append(True)

    return wrapper


@_once
def define_strategy_flags():
    flags.DEFINE_string("tpu", None, "TPU name or address: trains with TPUStrategy (no fallback).")
    flags.DEFINE_enum("strategy", "default", ["default", "one_device", "mirrored", "multi_worker"],
                      "tf.distribute strategy when --tpu is not given (multi_worker reads TF_CONFIG).")
    flags.DEFINE_integer("num_cpu_replicas", 0, "Split the CPU into this many logical devices "
                         "(CPU-only --strategy=mirrored).")


@_once
def define_model_flags():
    flags.DEFINE_string("model_config_path", None, "XLNet config JSON (the released xlnet_config.json "
                        "or ours). Without it the size flags below are used.")
    for name, default, help_ in (("n_layer", 12, "Layers."), ("d_model", 768, "Hidden size."),
                                 ("n_head", 12, "Attention heads."), ("d_head", 64, "Head size."),
                                 ("d_inner", 3072, "Feed-forward size."),
                                 ("n_token", 32000, "Vocabulary size (must match the SentencePiece model).")):
        flags.DEFINE_integer(name, default, help_)
    flags.DEFINE_enum("ff_activation", "gelu", ["gelu", "gelu_exact", "relu"], "Feed-forward activation.")
    flags.DEFINE_bool("untie_r", True, "Per-layer attention biases.")
    flags.DEFINE_float("dropout", 0.1, "Dropout.")
    flags.DEFINE_float("dropatt", 0.1, "Attention-probability dropout.")
    flags.DEFINE_integer("clamp_len", -1, "Clamp relative distances (-1 = off).")
    flags.DEFINE_bool("same_length", False, "Same-length attention (uni only).")
    flags.DEFINE_float("init_range", 0.02, "Std of the normal initializer.")
    flags.DEFINE_string("init_checkpoint", None, "Initial weights: our checkpoint (file or directory), "
                        "the converted/original release, or HF model.safetensors.")


@_once
def define_optimizer_flags(learning_rate=1e-4, warmup_steps=0, weight_decay=0.0, adam_epsilon=1e-8):
    flags.DEFINE_float("learning_rate", learning_rate, "Peak learning rate.")
    flags.DEFINE_integer("warmup_steps", warmup_steps, "Linear warm-up steps (from 0).")
    flags.DEFINE_enum("decay_method", "poly", ["poly", "cos"], "Decay after warm-up.")
    flags.DEFINE_float("min_lr_ratio", 0.0, "Final learning rate / peak.")
    flags.DEFINE_float("weight_decay", weight_decay, "Decoupled weight decay (AdamW).")
    flags.DEFINE_float("adam_epsilon", adam_epsilon, "Adam epsilon.")
    flags.DEFINE_float("clip", 1.0, "Global-norm gradient clipping (0 = off).")
    flags.DEFINE_enum("clip_mode", "global", ["global", "per_replica"],
                      "global: clip the global gradient (one device = any number of replicas); "
                      "per_replica: clip each replica's share before the cross-replica sum, as the "
                      "original on TPU (the effective threshold grows with the replica count).")
    flags.DEFINE_float("lr_layer_decay_rate", 1.0, "Per-layer decay: layer i of n gets rate^(n-1-i).")
    flags.DEFINE_enum("lr_layer_decay_mode", "learning_rate", ["learning_rate", "gradient"],
                      "learning_rate: scale the learning rate of layer i (and of the embeddings, "
                      "rate^n); gradient: the original, scale the clipped gradients of layer i only "
                      "(under Adam mostly cancelled, acting through epsilon).")
    flags.DEFINE_enum("adam_variant", "standard", ["standard", "original", "no_bias_correction", "tf1"],
                      "standard: bias-corrected Adam(W); original: the original release's choice "
                      "(no_bias_correction with --weight_decay > 0, else tf1); no_bias_correction: "
                      "the original's AdamWeightDecayOptimizer; tf1: TF1 AdamOptimizer (epsilon added "
                      "before bias correction).")


@_once
def define_loop_flags(train_steps=1000, steps_per_loop=100, save_steps=1000, train_batch_size=16):
    flags.DEFINE_string("model_dir", None, "Checkpoints, summaries and results (required).")
    flags.DEFINE_string("record_dir", None, "Records to train/evaluate on (tfrecords/build_*.py), with "
                        "their manifest.json.")
    flags.DEFINE_integer("train_batch_size", train_batch_size, "Global batch size per optimizer step "
                         "(across replicas and accumulated micro-batches).")
    flags.DEFINE_integer("train_steps", train_steps, "Optimizer steps.")
    flags.DEFINE_integer("steps_per_loop", steps_per_loop, "Steps per host loop (one tf.function call).")
    flags.DEFINE_integer("save_steps", save_steps, "Checkpoint every N steps (a multiple of "
                         "steps_per_loop).")
    flags.DEFINE_integer("keep_checkpoints", 5, "Checkpoints kept.")
    flags.DEFINE_bool("jit_compile", False, "Compile the train step with XLA.")
    flags.DEFINE_enum("mixed_precision", "float32", ["float32", "bfloat16", "float16"],
                      "Compute dtype (variables stay float32).")
    flags.DEFINE_integer("seed", 0, "Seed of weight initialization and dropout.")


@_once
def define_finetune_flags(max_seq_length=128):
    """Flags of the fine-tuning runners (classifier, RACE, SQuAD)."""
    flags.DEFINE_bool("do_train", False, "Fine-tune.")
    flags.DEFINE_bool("do_eval", False, "Evaluate (eval_results.json in --model_dir).")
    flags.DEFINE_bool("do_predict", False, "Write predictions.")
    flags.DEFINE_string("spiece_model_file", None, "SentencePiece model (checked against the records).")
    flags.DEFINE_integer("max_seq_length", max_seq_length, "Sequence length (must match the records).")
    flags.DEFINE_integer("eval_batch_size", 32, "Global eval batch size.")
    flags.DEFINE_integer("predict_batch_size", 32, "Global predict batch size.")
    flags.DEFINE_integer("gradient_accumulation_steps", 1, "Micro-batches per optimizer step: the "
                         "per-step batch is --train_batch_size, split into this many micro-batches.")
    flags.DEFINE_bool("eval_all_checkpoints", False, "Evaluate every kept checkpoint (best and last "
                      "reported), not only the latest.")
    flags.DEFINE_enum("summary_type", "last", ["last", "first", "mean", "attn"], "Sequence summary.")
    flags.DEFINE_bool("use_summ_proj", True, "tanh projection after the summary.")
    flags.DEFINE_bool("uncased", False, "The records/model are uncased (checked against the records).")
    flags.DEFINE_integer("shuffle_buffer", 2048, "Training shuffle buffer (examples).")
    flags.DEFINE_string("data_dir", None, "Raw task files: missing records are built into --record_dir.")
    flags.DEFINE_string("eval_split", "dev", "Split evaluated by --do_eval.")
    flags.DEFINE_string("predict_split", "test", "Split predicted by --do_predict.")


def require(FLAGS, *names):
    """Required flags are checked when a runner starts, not with absl validators, so that importing
    several runners into one process (tests) does not make each other's flags mandatory."""
    missing = [f"--{n}" for n in names if getattr(FLAGS, n) in (None, "")]
    if missing:
        raise flags.IllegalFlagValueError(f"Missing required flag(s): {', '.join(missing)}")


def model_config_from_flags(FLAGS, **runtime) -> XLNetConfig:
    """The model config: `--model_config_path` if given, else the size flags; run-time knobs on top."""
    knobs = dict(dropout=FLAGS.dropout, dropatt=FLAGS.dropatt, clamp_len=FLAGS.clamp_len,
                 same_length=FLAGS.same_length, initializer_range=FLAGS.init_range, **runtime)
    if FLAGS.model_config_path:
        return XLNetConfig.from_json_file(FLAGS.model_config_path, **knobs)
    return XLNetConfig(n_layer=FLAGS.n_layer, d_model=FLAGS.d_model, n_head=FLAGS.n_head,
                       d_head=FLAGS.d_head, d_inner=FLAGS.d_inner, n_token=FLAGS.n_token,
                       ff_activation=FLAGS.ff_activation, untie_r=FLAGS.untie_r, **knobs)


def dtype_policy(FLAGS) -> str:
    return {"float32": "float32", "bfloat16": "mixed_bfloat16",
            "float16": "mixed_float16"}[FLAGS.mixed_precision]


def write_export_info(model_dir: str, **info) -> None:
    """`<model_dir>/export_info.json`: what run/export_savedmodel.py needs to rebuild the serving model."""
    import json
    import os

    spm = info.get("spiece_model_file")
    if spm:
        info["spiece_model_file"] = os.path.abspath(spm)
    path = os.path.join(model_dir, "export_info.json")
    with open(path + ".tmp", "w", encoding="utf-8") as f:
        json.dump(info, f, indent=2)
    os.replace(path + ".tmp", path)


def micro_batch_size(FLAGS, num_replicas: int) -> int:
    """Global micro-batch (`--train_batch_size / --gradient_accumulation_steps`), checked to split evenly."""
    k = FLAGS.gradient_accumulation_steps
    if FLAGS.train_batch_size % (k * num_replicas):
        raise flags.IllegalFlagValueError(
            f"--train_batch_size={FLAGS.train_batch_size} must be divisible by --gradient_accumulation_steps={k} "
            f"x {num_replicas} replicas")
    return FLAGS.train_batch_size // k
