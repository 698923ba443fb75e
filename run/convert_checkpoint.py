"""Converts the original XLNet release or Hugging Face safetensors into our `--init_checkpoint` format.

  python run/convert_checkpoint.py --original_checkpoint=xlnet_cased_L-12_H-768_A-12/xlnet_model.ckpt \
      --config=xlnet_cased_L-12_H-768_A-12/xlnet_config.json --output_dir=converted/
  python run/convert_checkpoint.py --hf_safetensors=xlnet-base-cased/model.safetensors \
      --hf_config=xlnet-base-cased/config.json --output_dir=converted/
  python run/convert_checkpoint.py --to_hf --checkpoint=out/mrpc --output_dir=mrpc_hf/

The other way (`--to_hf`): a model of ours (a fine-tuning run's --model_dir, its latest checkpoint with its
export_info.json; or a pretraining run's model_dir or final/) becomes `config.json` + `model.safetensors` (+ the
run's `spiece.model`) that transformers' XLNet class for its head loads and that computes what ours computes
(xlnet_tf/serving/hf_export.py says which class, and refuses what transformers cannot compute before writing).

Writes `<output_dir>/xlnet_model.ckpt.*` (the original release's variable layout, validated against the
config: every backbone variable present with its shape, head scopes carried over, optimizer slots
dropped), a `checkpoint` file and `<output_dir>/xlnet_config.json`. Weights of a pretraining run
(`model_dir/final/`, whose `pretrained_model.json` records their facts) are checked first (--config must describe
them, and they must hold the heads the file lists) and keep that file in `<output_dir>`; checkpoints without it
(the original release, Hugging Face) carry no such facts.
"""

import os


from absl import flags

from run import common_flags

FLAGS = flags.FlagValues()  # defined by define_flags when the converter runs, never at import


def define_flags(fv: flags.FlagValues = FLAGS):
    d = common_flags.Definer(fv)
    d.string("original_checkpoint", None, "Original TF1 checkpoint prefix (xlnet_model.ckpt).")
    d.string("config", None, "xlnet_config.json of the original checkpoint.")
    d.string("hf_safetensors", None, "Hugging Face model.safetensors (file or directory).")
    d.string("hf_config", None, "Hugging Face config.json.")
    d.string("output_dir", None, "Directory for the converted checkpoint (required).")
    d.bool("to_hf", False, "Write --checkpoint (ours) as a Hugging Face model instead.")
    d.string("checkpoint", None, "--to_hf: a fine-tuning run's --model_dir, or a pretraining run's model_dir or "
             "final/.")
    d.string("spiece_model", None, "--to_hf: the SentencePiece model to ship (default: the run's).")


def convert(output_dir, original_checkpoint=None, config=None, hf_safetensors=None, hf_config=None):
    """Library entry point of the CLI; returns the summary of `checkpoints.convert_checkpoint`."""
    from xlnet_tf import checkpoints
    from xlnet_tf.artifacts import pretrain_info
    from xlnet_tf.config import XLNetConfig

    from xlnet_tf.errors import UserError

    if not output_dir:
        raise UserError("--output_dir is required")
    if bool(original_checkpoint) == bool(hf_safetensors):
        raise UserError("Give exactly one of --original_checkpoint (with --config) or --hf_safetensors "
                        "(with --hf_config)")
    if original_checkpoint:
        if not config:
            raise UserError("--original_checkpoint needs --config (its xlnet_config.json)")
        model_config, source, fmt = XLNetConfig.from_json_file(config), original_checkpoint, "original"
    else:
        if not hf_config:
            raise UserError("--hf_safetensors needs --hf_config (its config.json)")
        model_config, source, fmt = checkpoints.config_from_hf_json(hf_config), hf_safetensors, "hf"
    # a pretraining run's final/ records its facts: --config must describe the weights, which must hold the heads
    # it lists; the converted copy keeps the file (consumers check the SentencePiece model against it)
    flag = f"--config={config}" if original_checkpoint else f"--hf_config={hf_config}"
    facts = pretrain_info.check_final(source, config=model_config.to_dict(), config_flag=flag)
    if facts is not None:
        held = checkpoints.head_scopes(checkpoints.variable_names(source))
        missing = [h for h in facts.heads if h not in held]
        if missing:
            raise checkpoints.CheckpointMismatchError(
                f"{source} lacks the heads {missing} that {pretrain_info.MODEL_NAME} next to it lists: the "
                "checkpoint is not the one the file describes")
    check_output_dir(output_dir)

    def write(directory):
        summary = checkpoints.convert_checkpoint(source, fmt, model_config, os.path.join(directory, "xlnet_model.ckpt"))
        model_config.to_json_file(os.path.join(directory, "xlnet_config.json"))
        if facts is not None:
            pretrain_info.write(os.path.join(directory, pretrain_info.MODEL_NAME), facts)
        return summary

    if "://" in output_dir:  # a bucket has no atomic folder rename: written in place
        return write(output_dir)
    from xlnet_tf import files

    with files.directory_written_aside(output_dir) as tmp:  # a failed conversion leaves output_dir as it was
        return write(tmp)


# What a conversion writes: an output_dir holding anything else is not a conversion's, and is never replaced.
OUTPUTS = ("checkpoint", "xlnet_config.json", "pretrained_model.json", "xlnet_model.ckpt.index",
           "xlnet_model.ckpt.data-00000-of-00001")


def check_output_dir(output_dir: str) -> None:
    from xlnet_tf import files
    from xlnet_tf.errors import UserError

    if files.exists(output_dir) and not files.isdir(output_dir):
        raise UserError(f"--output_dir={output_dir} is a file; give a directory")
    if "://" not in output_dir and os.path.isdir(output_dir):
        others = sorted(set(os.listdir(output_dir)) - set(OUTPUTS))
        if others:
            shown = ", ".join(others[:3]) + (", ..." if len(others) > 3 else "")
            raise UserError(f"--output_dir={output_dir} holds files a conversion does not write ({shown}); give a "
                            "new or empty directory")


def to_hf(checkpoint: str, output_dir: str, spiece_model=None) -> str:
    """Library entry point of `--to_hf`; returns `output_dir`. Everything is read and checked (the model built
    and loaded, the names mapped, what transformers cannot compute refused) before the folder is written."""
    from xlnet_tf.artifacts import export_info
    from xlnet_tf import files
    from xlnet_tf.serving import hf_export
    from xlnet_tf.errors import UserError

    if not checkpoint or not output_dir:
        raise UserError("--to_hf needs --checkpoint and --output_dir")
    if "://" in output_dir:
        raise UserError(f"--output_dir={output_dir}: --to_hf writes a local folder (transformers reads one)")
    if not files.exists(checkpoint):
        raise UserError(f"--checkpoint={checkpoint} does not exist")
    if os.path.isdir(output_dir) and sorted(set(os.listdir(output_dir)) - {hf_export.CONFIG_NAME,
                                                                            hf_export.WEIGHTS_NAME, "spiece.model"}):
        raise UserError(f"--output_dir={output_dir} holds files a Hugging Face export does not write; give a new "
                        "or empty directory")
    directory = checkpoint if os.path.isdir(checkpoint) else os.path.dirname(checkpoint)
    recorded = export_info.read_optional(directory)
    if recorded is not None:  # a fine-tuning run: its task model, as the SavedModel exporter builds it
        from xlnet_tf import checkpoints
        from xlnet_tf.training import finetuning
        from xlnet_tf.config import XLNetConfig
        from xlnet_tf.models import model_from_export_info

        config = XLNetConfig.from_json_file(os.path.join(directory, "xlnet_config.json"))
        model = model_from_export_info(config, recorded.to_dict())
        found = finetuning.list_checkpoints(directory) if os.path.isdir(checkpoint) else [checkpoint]
        if not found:
            raise UserError(f"No checkpoint in --checkpoint={checkpoint}: nothing trained to export")
        checkpoints.load_init_checkpoint(model, found[-1], require_heads=True)
        labels, spiece_model = recorded.labels, spiece_model or recorded.spiece_model_file
    else:  # pretrained weights
        from xlnet_tf.models import XLNetPretrainer

        model = XLNetPretrainer.from_checkpoint(checkpoint, require_heads=True)
        labels = None
    config_values, state = hf_export.prepare(model, labels)
    if spiece_model and not os.path.isfile(spiece_model):
        raise UserError(f"--spiece_model={spiece_model} does not exist")
    return hf_export.write(output_dir, config_values, state, spiece_model)


def run():
    """Everything `main` does, reading FLAGS (tests call this after parsing flags)."""
    if FLAGS.to_hf:
        path = to_hf(FLAGS.checkpoint, FLAGS.output_dir, FLAGS.spiece_model)
        print(f"Wrote a Hugging Face model into {path}")
        return path
    summary = convert(FLAGS.output_dir, FLAGS.original_checkpoint, FLAGS.config, FLAGS.hf_safetensors,
                      FLAGS.hf_config)
    print(f"Converted {len(summary['backbone'])} backbone variables and {len(summary['heads'])} head "
          f"variables {summary['heads']} into {FLAGS.output_dir}")
    return summary


if __name__ == "__main__":
    common_flags.run_main(FLAGS, define_flags, run)
