"""A pretrained language model read left to right (evaluation, generation, its export, zero-shot scoring): the
refusals of what is not one, its tokenizer as its records were normalized, and the model with its LM head."""

import os

from xlnet_tf.artifacts import export_info, pretrain_info
from xlnet_tf.errors import UserError
from xlnet_tf.models import XLNetPretrainer
from xlnet_tf.text.tokenization import XLNetTokenizer, file_sha256
from xlnet_tf import checkpoints


def check_checkpoint(checkpoint: str, spiece_model: str, tokenizer_sha256: str, spiece_flag: str = "--spiece_model",
                     objectives=("plm",)):
    """The facts of `--checkpoint` (xlnet_tf.artifacts.pretrain_info; None when it records none), after refusing what is not
    a pretrained left-to-right-readable LM: a fine-tuning model_dir, weights without the LM head, another
    SentencePiece model, a masked-LM (MLM) model (unless `objectives` admits 'mlm': the blank scorer reads an MLM
    model's masks with the content stream)."""
    where = f"--checkpoint={checkpoint}"
    if not os.path.exists(checkpoint) and not os.path.exists(checkpoint + ".index"):
        raise UserError(f"{where} does not exist")
    directory = checkpoint if os.path.isdir(checkpoint) else os.path.dirname(checkpoint)
    finetuned = export_info.read_optional(directory)
    if finetuned is not None:
        raise UserError(
            f"{where} is a fine-tuning model_dir (export_info.json: task {finetuned.task!r}): its weights have no "
            "trained LM head; give a pretraining run's model_dir/final, the original release or a Hugging Face "
            "XLNetLMHeadModel's model.safetensors")
    info = pretrain_info.check_final(checkpoint, spiece_sha256=tokenizer_sha256, need_heads=(pretrain_info.LM_HEAD,),
                                     spiece_flag=f"{spiece_flag}={spiece_model}")
    if info is not None and info.objective not in objectives:
        raise UserError(
            f"{where} was pretrained with objective {info.objective!r} (pretrained_model.json): a masked LM never "
            "trained the query stream this left-to-right reading predicts with; evaluate a 'plm' model")
    heads = checkpoints.head_scopes(checkpoints.variable_names(checkpoints.resolve_weights(checkpoint)))
    if pretrain_info.LM_HEAD not in heads:
        raise UserError(
            f"{where} holds no LM head (no model/lm_loss/bias; its heads: {heads or 'none'}): it is not a "
            "pretrained language model; give a pretraining run's model_dir/final, the original release or a "
            "Hugging Face XLNetLMHeadModel's model.safetensors")
    return info


def lm_tokenizer(checkpoint: str, spiece_model: str, spiece_flag: str = "--spiece_model", objectives=("plm",)):
    """`(tokenizer, facts)` of a pretrained LM (`check_checkpoint`'s refusals first): the tokenizer normalizes as
    the model's records were (a run's facts; the release's default otherwise)."""
    info = check_checkpoint(checkpoint, spiece_model, file_sha256(spiece_model), spiece_flag, objectives)
    tokenizer = XLNetTokenizer(spiece_model, uncased=info.text.uncased if info else False,
                               keep_accents=info.text.keep_accents if info else False)
    return tokenizer, info


def load_lm(checkpoint: str, model_config_path, tokenizer, spiece_model: str, mem_len=None,
            spiece_flag: str = "--spiece_model", objective: str = "plm"):
    """The `XLNetPretrainer` (LM head required) of `checkpoint`, read left to right: memories of `mem_len` (None: the
    caller keeps its own buffer), no pretraining layouts (bi_data is the second half of the rows read backward,
    same_length a pretraining mask), no dropout; refuses a SentencePiece model of another vocabulary size."""
    model = XLNetPretrainer.from_checkpoint(
        checkpoint, config=model_config_path, require_heads=True, objective=objective,
        config_overrides={"mem_len": mem_len, "reuse_len": None, "bi_data": False, "same_length": False,
                          "dropout": 0.0, "dropatt": 0.0})
    if model.config.n_token != tokenizer.vocab_size:
        raise UserError(f"{spiece_flag}={spiece_model} has {tokenizer.vocab_size} pieces but the "
                                     f"model n_token={model.config.n_token}: give the model's own SentencePiece model")
    return model
