"""Flag groups the runners share, defined into a runner's own `FlagValues`.

Each runner owns a `flags.FlagValues()` and defines its flags into it only when it runs (its `__main__`, or
`tests/data_fixtures.run_with_flags`), never at import: two runners imported into one process keep their
own defaults (SQuAD's --max_seq_length=512 is not the classifier's 128).
"""

import functools
import os

from absl import app, flags

from xlnet_tf import cli
from xlnet_tf.config import XLNetConfig
from xlnet_tf.errors import UserError
from xlnet_tf.training.xla_clustering import MODES as XLA_CLUSTERING_MODES


class Definer:
    """`Definer(fv).string(name, default, help)` = `d.string(..., flag_values=fv)`."""

    def __init__(self, fv: flags.FlagValues):
        self.fv = fv

    def __getattr__(self, kind):
        return functools.partial(getattr(flags, f"DEFINE_{kind}"), flag_values=self.fv)


def apply_xla_clustering(fv: flags.FlagValues) -> None:
    """`--xla_clustering=fusible`: adds its TF_XLA_FLAGS (`xlnet_tf.training.xla_clustering.FUSIBLE_FLAGS`) to this
    process's environment, which TensorFlow reads once when it loads. UserError with --jit_compile
    (`xla_clustering.check`, the check `training.TrainLoopConfig` makes too) and once TensorFlow is loaded (a runner
    called inside a Python process that imported it: the flags would not take effect)."""
    import sys

    from xlnet_tf.training import xla_clustering

    if "xla_clustering" not in fv or fv.xla_clustering == "off":
        return
    xla_clustering.check(fv.xla_clustering, fv.jit_compile)
    if "tensorflow" in sys.modules:
        raise UserError(f"--xla_clustering={fv.xla_clustering} must be set before TensorFlow loads, and this "
                        "process has loaded it: run the runner as a process of its own (python run/<runner>.py)")
    os.environ["TF_XLA_FLAGS"] = xla_clustering.with_fusible_flags(os.environ.get("TF_XLA_FLAGS", ""))


def start(fv: flags.FlagValues, run):
    """What a runner does once its flags `fv` are parsed: the process settings that must precede TensorFlow
    (`apply_xla_clustering`), then `run()` (its value returned). `run_main` and the tests' in-process calls
    (tests/data_fixtures.run_with_flags) both start here."""
    apply_xla_clustering(fv)
    return run()


def run_main(fv: flags.FlagValues, define, run, argv=None) -> None:
    """The entry point of a runner: define its flags into `fv`, parse the command line (`argv`, default
    sys.argv) with absl.app, refuse stray positional arguments in one line (every runner takes flags only), then
    `run()`; a user error it raises is reported in one line (exit status 2).

    The runner's flags join absl's global namespace (the same flag objects) so that absl.app parses them
    together with its own (--helpfull, --flagfile, logging) and prints them in --help."""
    import sys

    define(fv)
    flags.FLAGS.append_flag_values(fv)
    for module, module_flags in fv.flags_by_module_dict().items():
        for flag in module_flags:
            flags.FLAGS.register_flag_by_module(module, flag)
            flags.FLAGS.register_key_flag_for_module(sys.argv[0], flag)  # listed by --help

    d = Definer(fv)
    if "verbose" not in fv:
        d.bool("verbose", False, "Show the traceback of a user error (bad flag, file or data) too.")

    def parsed_main(argv):
        if len(argv) > 1:  # e.g. `--do_eval true`: a boolean flag takes no separate value
            report_user_error(UserError(f"unexpected arguments {argv[1:]}: every option is a flag (--name=value)"))
        fv.mark_as_parsed()
        try:
            start(fv, run)  # not returned: absl.app exits with main's value, and a runner's results are no exit status
        except USER_ERRORS as e:
            if fv.verbose:
                raise
            report_user_error(e)

    app.run(parsed_main, argv=argv, flags_parser=cli.parse_flags_or_report)


# What a user fixes: reported in one line, not a traceback (the one convention of xlnet_tf/cli.py).
USER_ERRORS = cli.user_errors()
report_user_error = cli.report_user_error
parse_flags_or_report = cli.parse_flags_or_report


def parse(fv: flags.FlagValues, define, argv) -> flags.FlagValues:
    """Define (once) and parse `argv` (argv[0] = program name) into a runner's `fv`: the library way to run
    a runner in-process (tests, notebooks). `fv.unparse_flags()` resets it to the defaults."""
    if not list(fv):
        define(fv)
    fv.unparse_flags()
    fv(list(argv))
    return fv


def define_strategy_flags(fv: flags.FlagValues):
    d = Definer(fv)
    d.string("tpu", None, "TPU name or address: trains with TPUStrategy (no fallback).")
    d.enum("strategy", "default", ["default", "one_device", "mirrored", "multi_worker"],
                      "tf.distribute strategy when --tpu is not given (multi_worker reads TF_CONFIG).")
    d.integer("num_cpu_replicas", 0, "Split the CPU into this many logical devices "
                         "(CPU-only --strategy=mirrored).", lower_bound=0)


def define_model_flags(fv: flags.FlagValues):
    d = Definer(fv)
    d.string("model_config_path", None, "XLNet config JSON (the released xlnet_config.json "
                        "or ours). Without it the size flags below are used.")
    for name, default, help_ in (("n_layer", 12, "Layers."), ("d_model", 768, "Hidden size."),
                                 ("n_head", 12, "Attention heads."), ("d_head", 64, "Head size."),
                                 ("d_inner", 3072, "Feed-forward size."),
                                 ("n_token", 32000, "Vocabulary size (must match the SentencePiece model).")):
        d.integer(name, default, help_, lower_bound=1)
    d.enum("ff_activation", "gelu", ["gelu", "gelu_exact", "relu"], "Feed-forward activation.")
    d.bool("untie_r", True, "Per-layer attention biases.")
    d.float("dropout", 0.1, "Dropout.", lower_bound=0.0, upper_bound=0.99)
    d.float("dropatt", 0.1, "Attention-probability dropout.", lower_bound=0.0, upper_bound=0.99)
    d.integer("clamp_len", -1, "Clamp relative distances (-1 = off).", lower_bound=-1)
    d.bool("same_length", False, "Same-length attention (uni only).")
    d.float("init_range", 0.02, "Std of the normal initializer.", lower_bound=0.0)
    d.bool("remat", False, "Rematerialize each layer's activations in training (XLNetBackbone remat): the same "
                           "losses and gradients in less memory, for a second forward pass per layer.")
    d.string("init_checkpoint", None, "Initial weights: our checkpoint (file or directory), "
                        "the converted/original release, or HF model.safetensors.")


def define_optimizer_flags(fv: flags.FlagValues, learning_rate=1e-4, warmup_steps=0, weight_decay=0.0,
                           adam_epsilon=1e-8):
    d = Definer(fv)
    d.float("learning_rate", learning_rate, "Peak learning rate.", lower_bound=0.0)
    d.integer("warmup_steps", warmup_steps, "Linear warm-up steps (from 0).", lower_bound=0)
    d.enum("decay_method", "poly", ["poly", "cos"], "Decay after warm-up.")
    d.float("min_lr_ratio", 0.0, "Final learning rate / peak.", lower_bound=0.0, upper_bound=1.0)
    d.float("weight_decay", weight_decay, "Decoupled weight decay (AdamW).", lower_bound=0.0)
    d.float("adam_epsilon", adam_epsilon, "Adam epsilon.", lower_bound=0.0)
    d.float("clip", 1.0, "Global-norm gradient clipping (0 = off).", lower_bound=0.0)
    d.enum("clip_mode", "global", ["global", "per_replica"],
                      "global: clip the global gradient (one device = any number of replicas); "
                      "per_replica: clip each replica's share before the cross-replica sum, as the "
                      "original on TPU (the effective threshold grows with the replica count).")
    d.float("lr_layer_decay_rate", 1.0, "Per-layer decay: layer i of n gets rate^(n-1-i).",
            lower_bound=0.0, upper_bound=1.0)
    d.enum("lr_layer_decay_mode", "learning_rate", ["learning_rate", "gradient"],
                      "learning_rate: scale the learning rate of layer i (and of the embeddings, "
                      "rate^n); gradient: the original, scale the clipped gradients of layer i only "
                      "(under Adam mostly cancelled, acting through epsilon).")
    d.enum("adam_variant", "standard", ["standard", "original", "no_bias_correction", "tf1"],
                      "standard: bias-corrected Adam(W); original: the original release's choice "
                      "(no_bias_correction with --weight_decay > 0, else tf1); no_bias_correction: "
                      "the original's AdamWeightDecayOptimizer; tf1: TF1 AdamOptimizer (epsilon added "
                      "before bias correction).")


def define_loop_flags(fv: flags.FlagValues, train_steps=1000, steps_per_loop=100, save_steps=1000,
                      train_batch_size=16):
    d = Definer(fv)
    d.string("model_dir", None, "Checkpoints, summaries and results (required).")
    d.string("record_dir", None, "Records to train/evaluate on (tfrecords/build_*.py), with "
                        "their manifest.json.")
    d.integer("train_batch_size", train_batch_size, "Global batch size per optimizer step "
                         "(across replicas and accumulated micro-batches).", lower_bound=1)
    d.integer("train_steps", train_steps, "Optimizer steps.", lower_bound=1)
    d.integer("steps_per_loop", steps_per_loop, "Steps per host loop (one tf.function call).", lower_bound=1)
    d.integer("save_steps", save_steps, "Checkpoint every N steps (a multiple of "
                         "steps_per_loop).", lower_bound=1)
    d.integer("keep_checkpoints", 5, "Checkpoints kept.", lower_bound=1)
    d.integer("keep_checkpoint_steps", 0, "Also keep every checkpoint whose step is a multiple "
                         "of this, in <model_dir>/kept/ckpt-<step> (0 = none; a multiple of --save_steps).",
              lower_bound=0)
    d.bool("jit_compile", False, "Compile the train step with XLA.")
    d.enum("xla_clustering", "off", list(XLA_CLUSTERING_MODES), "fusible: TensorFlow's XLA auto-clustering of the "
           "fusible ops only (TF_XLA_FLAGS, set before TensorFlow loads; needs --nojit_compile): the matmuls stay "
           "TensorFlow's oneDNN kernels, which run at the bfloat16 rate on CPUs with bfloat16 arithmetic where XLA's "
           "CPU dots do not, and XLA fuses the ops around them; on one replica without loss scaling the clipped AdamW "
           "update is then one XLA program (said in the log otherwise). With --mixed_precision=bfloat16 the fastest "
           "training step measured on an AMX Xeon (bench/speed/README.md).")
    d.enum("mixed_precision", "float32", ["float32", "bfloat16", "float16"],
                      "Compute dtype (variables stay float32).")
    d.integer("seed", 0, "Seed of weight initialization and dropout.")


def define_finetune_flags(fv: flags.FlagValues, max_seq_length=128):
    """Flags of the fine-tuning runners (classifier, RACE, SQuAD)."""
    d = Definer(fv)
    d.bool("do_train", False, "Fine-tune.")
    d.bool("do_eval", False, "Evaluate (eval_results.json in --model_dir).")
    d.bool("do_predict", False, "Write predictions.")
    d.string("spiece_model_file", None, "SentencePiece model (checked against the records).")
    d.integer("max_seq_length", max_seq_length, "Sequence length (must match the records).", lower_bound=3)
    d.integer("eval_batch_size", 32, "Global eval batch size.", lower_bound=1)
    d.integer("predict_batch_size", 32, "Global predict batch size.", lower_bound=1)
    d.integer("gradient_accumulation_steps", 1, "Micro-batches per optimizer step: the "
                         "per-step batch is --train_batch_size, split into this many micro-batches.", lower_bound=1)
    d.bool("eval_all_checkpoints", False, "Evaluate every kept checkpoint (best and last "
                      "reported), not only the latest.")
    d.multi_integer("eval_checkpoint_steps", [], "With --do_train=false: evaluate only the kept checkpoints of "
                    "these steps (repeat the flag; each must be kept in --model_dir), e.g. a dev-chosen "
                    "checkpoint on test.",
                    lower_bound=1)
    d.enum("summary_type", "last", ["last", "first", "mean", "attn"], "Sequence summary.")
    d.bool("use_summ_proj", True, "tanh projection after the summary.")
    d.bool("uncased", False, "The records/model are uncased (checked against the records).")
    d.integer("shuffle_buffer", 2048, "Training shuffle buffer (examples).", lower_bound=1)
    d.string("data_dir", None, "Raw task files: missing records are built into --record_dir.")
    d.string("eval_split", "dev", "Split evaluated by --do_eval.")
    d.string("predict_split", "test", "Split predicted by --do_predict.")
    define_sidecar_flags(fv, export=True)


def define_sidecar_flags(fv: flags.FlagValues, export: bool):
    """`--mode=continuous_eval` and its flags (run/sidecar_eval.py; pretraining: run/pretrain.py)."""
    d = Definer(fv)
    d.enum("mode", "default", ["default", "continuous_eval"], "continuous_eval: the sidecar evaluator: evaluate "
           "every checkpoint another process (the trainer) writes into --model_dir as it appears, until the run's "
           "final step (--train_steps) or --eval_timeout_seconds without a new one" +
           ("; with --export_dir, export each new best as the next TF Serving version." if export else "."))
    d.float("eval_timeout_seconds", 3600.0, "--mode=continuous_eval: stop after this long without a new checkpoint.",
            lower_bound=0.0)
    d.float("eval_poll_seconds", 10.0, "--mode=continuous_eval: seconds between looks at --model_dir.",
            lower_bound=0.0)
    if export:
        d.string("export_dir", None, "--mode=continuous_eval: the TF Serving base directory the best checkpoints "
                 "are exported into, one version each (a model server watching it serves the newest).")
        d.integer("exports_to_keep", 5, "--mode=continuous_eval: versions kept in --export_dir (the newest).",
                  lower_bound=1)


def require(FLAGS, *names):
    """Required flags are checked when a runner starts, not with absl validators (a runner's flags can be
    defined and parsed before the run, e.g. to read a flag file's values)."""
    missing = [f"--{n}" for n in names if getattr(FLAGS, n) in (None, "")]
    if missing:
        raise UserError(f"Missing required flag(s): {', '.join(missing)}")


def check_output_file(flag: str, path) -> None:
    """A file a runner writes when it is done (`--output`, `--output_json`): refused before any work when it
    could not be written then (a folder, or a folder that does not exist)."""
    from xlnet_tf import files

    if not path:
        return
    parent = os.path.dirname(os.path.abspath(path)) if "://" not in path else os.path.dirname(path)
    if files.isdir(path):
        raise UserError(f"--{flag}={path} is a directory; give a file name")
    if not files.isdir(parent):
        raise UserError(f"--{flag}={path}: the folder {parent} does not exist; create it or give another path")


def model_config_from_flags(FLAGS, **runtime) -> XLNetConfig:
    """The model config: `--model_config_path` if given, else the size flags; run-time knobs on top."""
    knobs = dict(dropout=FLAGS.dropout, dropatt=FLAGS.dropatt, clamp_len=FLAGS.clamp_len,
                 same_length=FLAGS.same_length, initializer_range=FLAGS.init_range, **runtime)
    if FLAGS.model_config_path:
        return XLNetConfig.from_json_file(FLAGS.model_config_path, **knobs)
    return XLNetConfig(n_layer=FLAGS.n_layer, d_model=FLAGS.d_model, n_head=FLAGS.n_head,
                       d_head=FLAGS.d_head, d_inner=FLAGS.d_inner, n_token=FLAGS.n_token,
                       ff_activation=FLAGS.ff_activation, untie_r=FLAGS.untie_r, **knobs)


def optimizer_settings(FLAGS):
    """The typed optimizer settings (`optimization.OptimizerSettings`) of the optimizer flags; UserError naming the
    flags when the warm-up would not end within the run."""
    from xlnet_tf.training.optimization import OptimizerSettings

    if FLAGS.warmup_steps > FLAGS.train_steps:
        raise UserError(f"--warmup_steps={FLAGS.warmup_steps} exceeds --train_steps={FLAGS.train_steps}: the warm-up "
                        "must end within the run; lower --warmup_steps or raise --train_steps")

    return OptimizerSettings(
        learning_rate=FLAGS.learning_rate, train_steps=FLAGS.train_steps, warmup_steps=FLAGS.warmup_steps,
        min_lr_ratio=FLAGS.min_lr_ratio, decay=FLAGS.decay_method, weight_decay=FLAGS.weight_decay,
        adam_epsilon=FLAGS.adam_epsilon, clip=FLAGS.clip, lr_layer_decay_rate=FLAGS.lr_layer_decay_rate,
        lr_layer_decay_mode=FLAGS.lr_layer_decay_mode, adam_variant=FLAGS.adam_variant)


def loop_config(FLAGS, seq_len: int):
    """The typed loop settings (`training.TrainLoopConfig`) of the loop flags; `seq_len`: tokens per example
    (for tokens/s in the progress lines)."""
    from xlnet_tf.training.loop import TrainLoopConfig

    return TrainLoopConfig(
        model_dir=FLAGS.model_dir, train_steps=FLAGS.train_steps, steps_per_loop=FLAGS.steps_per_loop,
        save_steps=FLAGS.save_steps, keep_checkpoints=FLAGS.keep_checkpoints,
        keep_checkpoint_steps=FLAGS.keep_checkpoint_steps, jit_compile=FLAGS.jit_compile,
        global_batch_size=FLAGS.train_batch_size, seq_len=seq_len,
        gradient_accumulation_steps=getattr(FLAGS, "gradient_accumulation_steps", 1), clip_mode=FLAGS.clip_mode,
        xla_clustering=getattr(FLAGS, "xla_clustering", "off"))


def dtype_policy(FLAGS) -> str:
    from xlnet_tf.training import loop as training

    return training.dtype_policy(FLAGS.mixed_precision)


def micro_batch_size(FLAGS, num_replicas: int) -> int:
    """Global micro-batch (`--train_batch_size / --gradient_accumulation_steps`), checked to split evenly."""
    from xlnet_tf.training import loop as training

    return training.micro_batch_size(FLAGS.train_batch_size, FLAGS.gradient_accumulation_steps, num_replicas)
