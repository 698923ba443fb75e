"""Bad input to pretraining and to the consumers of pretrained weights never gives a silently wrong result: each
case is one line `<tool>.py: error: <message>` (exit status 2) naming the file, flag or fact, and leaves every file
as it was.

Cases: resuming a pretraining model_dir with another objective, NSP setting or records (facts in
pretrain_run.json; a model_dir of an earlier version compared on its checkpoint's heads), run/evaluate_lm.py on a
fine-tuned model, on weights without the LM head, with another SentencePiece model of the same size, on a masked-LM
model, on empty / blank / non-UTF-8 / too short input or a glob matching nothing, with out-of-range numbers, and
run/convert_checkpoint.py with a config that does not describe a pretraining run's final weights."""

import glob
import json
import os
import shutil
import subprocess
import sys

import pytest

from tests import data_fixtures

REPO = data_fixtures.REPO_ROOT
PRETRAIN = ["--n_layer=1", "--d_model=32", "--n_head=2", "--d_head=16", "--d_inner=64",
            f"--n_token={data_fixtures.TINY_VOCAB}", "--mem_len=16", "--seq_len=32", "--reuse_len=16",
            "--num_predict=6", "--perm_size=8", "--train_batch_size=4", "--bi_data=true", "--train_steps=1",
            "--steps_per_loop=1", "--save_steps=1", "--dropout=0.0", "--dropatt=0.0"]
SOTU = os.path.join(data_fixtures.CORPUS_DIR, "sotu_slice.txt")


_snapshot = data_fixtures.snapshot


def _records(name, **overrides):
    """A tiny pretraining record set (cached per process; read-only)."""
    from tfrecords.pretrain import writer as pretrain_data

    out = os.path.join(data_fixtures.tmp_root(), f"bad_pretraining_{name}")
    if not os.path.exists(os.path.join(out, "manifest.json")):
        cfg = pretrain_data.PretrainConfig(seq_len=32, reuse_len=16, num_predict=6, perm_size=8, global_batch_size=4,
                                           bi_data=True, seed=3, **overrides)
        pretrain_data.build_pretrain_records(SOTU, data_fixtures.tiny_spm(), out, cfg, log=None)
    return out


def _user_error(module, args, capsys):
    """Runs runner `module` in-process on `args`, expecting a user error; reports it as its entry point does
    (common_flags.report_user_error) and returns the one stderr line, after checking the exit status 2."""
    from run import common_flags

    capsys.readouterr()
    with pytest.raises(common_flags.USER_ERRORS) as caught:
        data_fixtures.run_with_flags(module, args)
    tool = module.__name__.rsplit(".", 1)[-1] + ".py"
    with pytest.raises(SystemExit) as exited:
        common_flags.report_user_error(caught.value, tool=tool)
    assert exited.value.code == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1, lines
    assert lines[0].startswith(f"{tool}: error: ")
    return lines[0][len(f"{tool}: error: "):]


@pytest.fixture(scope="module")
def pretrained(tmp_path_factory):
    """A finished 1-step PLM pretraining run (model_dir `m`, with `m/final`); cases copy it."""
    from run import pretrain

    root = tmp_path_factory.mktemp("bad_pretraining")
    data_fixtures.run_with_flags(pretrain, PRETRAIN + [f"--record_dir={_records('plm')}", f"--model_dir={root}/m",
                                                       f"--spiece_model={data_fixtures.tiny_spm()}"])
    return root


def _copy_run(pretrained, tmp_path):
    model = tmp_path / "m"
    shutil.copytree(pretrained / "m", model)
    return model


# ---- resuming a pretraining model_dir -------------------------------------------------------------------------

def test_the_run_and_its_final_weights_record_their_facts(pretrained):
    from tfrecords import manifest as manifest_lib
    from xlnet_tf.artifacts import pretrain_info
    from xlnet_tf.text.tokenization import file_sha256

    run = pretrain_info.read_run(str(pretrained / "m" / "pretrain_run.json"))
    records = manifest_lib.read_manifest(_records("plm"))
    assert (run.objective, run.nsp, run.seq_len, run.reuse_len, run.num_predict, run.perm_size, run.bi_data,
            run.global_batch_size, run.num_replicas) == ("plm", False, 32, 16, 6, 8, True, 4, 1)
    assert run.records_fingerprint == records["fingerprint"]
    assert run.text.spiece_sha256 == file_sha256(data_fixtures.tiny_spm())
    final = pretrain_info.read_model(str(pretrained / "m" / "final" / "pretrained_model.json"))
    assert final.heads == ["lm_loss"] and final.step == 1 and final.text == run.text
    assert final.config["d_model"] == 32 and final.objective == "plm" and not final.nsp


def test_resuming_with_another_objective_is_refused_and_writes_nothing(pretrained, tmp_path, capsys):
    from run import pretrain

    model = _copy_run(pretrained, tmp_path)
    before = _snapshot(model)
    message = _user_error(pretrain, PRETRAIN + [f"--record_dir={_records('mlm', objective='mlm')}",
                                                f"--model_dir={model}", "--objective=mlm", "--train_steps=2",
                                                "--save_steps=2"], capsys)
    assert message.startswith(f"--model_dir={model} holds a run with other settings; nothing was written."), message
    assert "pretrain_run.json objective: 'plm' there, 'mlm' now" in message
    assert "pretrain_run.json records_fingerprint: " in message  # every difference, in one line
    assert _snapshot(model) == before


def test_resuming_with_nsp_is_refused_in_one_line(pretrained, tmp_path, capsys):
    """Not the 137-line 'objects not bound to checkpointed values' traceback of the checkpoint restore."""
    from run import pretrain

    model = _copy_run(pretrained, tmp_path)
    before = _snapshot(model)
    message = _user_error(pretrain, PRETRAIN + [f"--record_dir={_records('nsp', nsp=True)}", f"--model_dir={model}",
                                                "--nsp", "--train_steps=2", "--save_steps=2"], capsys)
    assert "pretrain_run.json nsp: False there, True now" in message, message
    assert _snapshot(model) == before


def test_resuming_with_nsp_through_the_entry_point_is_one_line(pretrained, tmp_path):
    model = _copy_run(pretrained, tmp_path)
    before = _snapshot(model)
    proc = subprocess.run([sys.executable, os.path.join(REPO, "run", "pretrain.py"), *PRETRAIN,
                           f"--record_dir={_records('nsp', nsp=True)}", f"--model_dir={model}", "--nsp",
                           "--train_steps=2", "--save_steps=2"], capture_output=True, text=True, cwd=str(tmp_path),
                          timeout=300, env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"})
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr[-2000:]
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith(f"pretrain.py: error: --model_dir={model} holds a run with other settings") and (
        "pretrain_run.json nsp: False there, True now" in last), proc.stderr[-2000:]
    assert _snapshot(model) == before


def test_a_model_dir_of_an_earlier_version_is_compared_on_its_checkpoint_heads(pretrained, tmp_path, capsys):
    from run import pretrain

    model = _copy_run(pretrained, tmp_path)
    os.remove(model / "pretrain_run.json")  # as an earlier version left it
    before = _snapshot(model)
    message = _user_error(pretrain, PRETRAIN + [f"--record_dir={_records('nsp', nsp=True)}", f"--model_dir={model}",
                                                "--nsp", "--train_steps=2", "--save_steps=2"], capsys)
    assert "nsp: False there (the heads of ckpt-1), True now" in message, message
    assert _snapshot(model) == before


def test_resuming_from_the_same_records_elsewhere_with_more_steps_continues(pretrained, tmp_path, capsys):
    """Allowed on resume: more --train_steps, another learning rate, the same records in another directory."""
    from run import pretrain
    from xlnet_tf.artifacts import pretrain_info

    model = _copy_run(pretrained, tmp_path)
    moved = tmp_path / "moved_records"
    shutil.copytree(_records("plm"), moved)
    result = data_fixtures.run_with_flags(pretrain, PRETRAIN + [
        f"--record_dir={moved}", f"--model_dir={model}", "--train_steps=2", "--save_steps=2", "--learning_rate=1e-3"])
    assert [r["step"] for r in result["history"]] == [2]
    assert "Resumed from" in capsys.readouterr().out
    assert pretrain_info.read_run(str(model / "pretrain_run.json")).records_dir == str(moved)
    assert pretrain_info.read_model(str(model / "final" / "pretrained_model.json")).step == 2


def test_which_facts_a_resume_may_change():
    from xlnet_tf.artifacts import pretrain_info

    from xlnet_tf.artifacts.text_settings import TextSettings

    run = pretrain_info.PretrainRun(objective="plm", nsp=False, seq_len=32, reuse_len=16, num_predict=6, perm_size=8,
                                    bi_data=True, global_batch_size=4, num_replicas=1, text=TextSettings("a" * 64),
                                    records_fingerprint="f1", records_dir="/r", eval_records_fingerprint="e1")
    same = run.__class__(**{**run.__dict__, "records_dir": "/elsewhere", "mixed_precision": "bfloat16",
                            "eval_records_fingerprint": None})
    assert run.differences(same) == []
    assert same.merged_with(run).eval_records_fingerprint == "e1"  # the held-out records stay recorded
    other = run.__class__(**{**run.__dict__, "num_replicas": 2, "mixed_precision": "float16",
                             "eval_records_fingerprint": "e2", "text": TextSettings("b" * 64)})
    changed = [d.split(":")[0] for d in run.differences(other)]
    assert changed == ["num_replicas", "text.spiece_sha256", "mixed_precision", "eval_records_fingerprint"]
    with pytest.raises(pretrain_info.PretrainInfoError, match="pretrain_run.json: no schema header \\(written by an "
                                                              "earlier version or another tool\\); pretrain into a new"):
        pretrain_info.PretrainRun.from_dict({"objective": "plm"}, where="pretrain_run.json")


# ---- run/evaluate_lm.py ------------------------------------------------------------------------------------------

def _lm_args(checkpoint, *extra, spiece=None, text=SOTU):
    return [f"--checkpoint={checkpoint}", f"--spiece_model={spiece or data_fixtures.tiny_spm()}",
            f"--input_glob={text}", "--seg_len=16", "--mem_len=16", "--max_tokens=64", *extra]


def test_evaluate_lm_reads_a_final_with_its_own_sentencepiece_model(pretrained, tmp_path):
    from run import evaluate_lm

    report = data_fixtures.run_with_flags(evaluate_lm, _lm_args(pretrained / "m" / "final"))
    assert report["with_memories"]["tokens"] > 0 and report["skipped_invalid_utf8_lines"] == 0


def test_another_sentencepiece_model_of_the_same_size_is_refused(pretrained, capsys):
    from run import evaluate_lm
    from xlnet_tf.text.tokenization import XLNetTokenizer, file_sha256

    other = data_fixtures.tiny_spm(uncased=True)
    assert XLNetTokenizer(other).vocab_size == data_fixtures.TINY_VOCAB  # the size alone cannot tell
    final = pretrained / "m" / "final"
    message = _user_error(evaluate_lm, _lm_args(final, spiece=other), capsys)
    assert message == (f"--spiece_model={other} has sha256 {file_sha256(other)}, but {final}/pretrained_model.json "
                       f"says the model was pretrained with the SentencePiece model of sha256 "
                       f"{file_sha256(data_fixtures.tiny_spm())}: give that model (the pretraining run's "
                       "--spiece_model)")


def _finetuned_dir(directory):
    """A fine-tuned classifier's weights (no LM head) with its config and export_info.json."""
    import keras

    from xlnet_tf import checkpoints
    from xlnet_tf.config import XLNetConfig
    from xlnet_tf.artifacts.export_info import ExportInfo
    from xlnet_tf.artifacts.model_dir import write_json_atomic
    from xlnet_tf.models import XLNetClassifier

    keras.utils.set_random_seed(0)
    model = XLNetClassifier(XLNetConfig(n_token=data_fixtures.TINY_VOCAB, n_layer=1, d_model=32, n_head=2, d_head=16,
                                        d_inner=64), num_labels=2)
    checkpoints.save_original_checkpoint(model, os.path.join(directory, "xlnet_model.ckpt"))
    model.config.to_json_file(os.path.join(directory, "xlnet_config.json"))
    info = ExportInfo.for_run(task="classifier", max_seq_length=32, num_labels=2, summary_type="last",
                              use_summ_proj=True, spiece_model_file=data_fixtures.tiny_spm())
    write_json_atomic(os.path.join(directory, "export_info.json"), info.to_dict())
    return directory


def test_a_finetuned_model_dir_is_refused_naming_checkpoint(tmp_path, capsys):
    from run import evaluate_lm

    model = _finetuned_dir(str(tmp_path / "classifier"))
    message = _user_error(evaluate_lm, _lm_args(model), capsys)
    assert message.startswith(f"--checkpoint={model} is a fine-tuning model_dir (export_info.json: task "
                              "'classifier'): its weights have no trained LM head"), message


def test_weights_without_the_lm_head_are_refused(tmp_path, capsys):
    """No fresh LM head standing in for a trained one (the perplexity of 1022.6 of a random head)."""
    from run import evaluate_lm

    model = _finetuned_dir(str(tmp_path / "classifier"))
    os.remove(os.path.join(model, "export_info.json"))
    message = _user_error(evaluate_lm, _lm_args(model), capsys)
    assert message.startswith(f"--checkpoint={model} holds no LM head (no model/lm_loss/bias; its heads: "
                              "['classification_task', 'sequnece_summary']): it is not a pretrained language "
                              "model"), message


def test_a_masked_lm_model_is_refused(pretrained, tmp_path, capsys):
    from run import evaluate_lm

    final = tmp_path / "final"
    shutil.copytree(pretrained / "m" / "final", final)
    info = json.loads((final / "pretrained_model.json").read_text())
    (final / "pretrained_model.json").write_text(json.dumps({**info, "objective": "mlm"}))
    message = _user_error(evaluate_lm, _lm_args(final), capsys)
    assert message.startswith(f"--checkpoint={final} was pretrained with objective 'mlm'"), message
    # the blank scorer (zero-shot cloze) takes it, and reads its candidates as masks as an MLM model is trained
    from bench.studies.cloze import cloze_baselines

    scorers = {name: cloze_baselines.load_scorer(str(path), data_fixtures.tiny_spm(), seq_len=32, max_pieces=3)
               for name, path in (("mlm", final), ("plm", pretrained / "m" / "final"))}
    assert scorers["mlm"].mlm and scorers["mlm"].model.objective == "mlm"
    assert not scorers["plm"].mlm and scorers["plm"].model.objective == "plm"


def test_weights_without_facts_are_taken_as_they_are(pretrained, tmp_path):
    """The original release and Hugging Face weights record no facts: check_final accepts them (None)."""
    from xlnet_tf.artifacts import pretrain_info

    final = tmp_path / "final"
    shutil.copytree(pretrained / "m" / "final", final)
    os.remove(final / "pretrained_model.json")
    assert pretrain_info.check_final(str(final), spiece_sha256="0" * 64, need_heads=("nsp",)) is None
    with pytest.raises(pretrain_info.PretrainInfoError, match=r"pretrained_model.json: the weights hold the heads "
                                                              r"\['lm_loss'\], not \['nsp'\]"):
        pretrain_info.check_final(str(pretrained / "m" / "final" / "xlnet_model.ckpt"), need_heads=("lm_loss", "nsp"))


def _text(tmp_path, name, content: bytes):
    path = tmp_path / name
    path.write_bytes(content)
    return str(path)


@pytest.mark.parametrize("name, content, message", [
    ("empty.txt", b"", "{path} (from --input_glob={path}) is empty: give UTF-8 text, one paragraph per line, a "
                       "blank line between documents (or leave the file out)"),
    ("blank.txt", b"\n  \n\t\n", "{path} (from --input_glob={path}) has only blank lines: give UTF-8 text"),
    ("latin1.txt", b"The first line.\nCaf\xe9 au lait.\n", "{path}, line 2 (from --input_glob={path}): invalid UTF-8 "
                   "(invalid continuation byte at byte offset 3 of the line); fix the file or pass "
                   "--skip_invalid_utf8 to skip such lines (they are counted)"),
    ("short.txt", b"Too short.\n", "--input_glob={path} gives "),
])
def test_unusable_input_text_is_named(pretrained, tmp_path, capsys, name, content, message):
    from run import evaluate_lm

    path = _text(tmp_path, name, content)
    got = _user_error(evaluate_lm, _lm_args(pretrained / "m" / "final", text=path), capsys)
    assert got.startswith(message.format(path=path)), got
    if name == "short.txt":
        assert "fewer than one segment of --seg_len=16 for each of --batch_size=1 rows (16): give more text" in got


def test_max_tokens_too_small_for_a_segment_is_named(pretrained, capsys):
    from run import evaluate_lm

    got = _user_error(evaluate_lm, _lm_args(pretrained / "m" / "final") + ["--max_tokens=10"], capsys)
    assert got.startswith(f"--input_glob={SOTU} gives 10 tokens (--max_tokens=10 of "), got


def test_a_glob_matching_nothing_is_named(pretrained, tmp_path, capsys):
    from run import evaluate_lm

    pattern = str(tmp_path / "nothing*.txt")
    got = _user_error(evaluate_lm, _lm_args(pretrained / "m" / "final", text=pattern), capsys)
    assert got == f"--input_glob={pattern} matches no files: give existing text files (comma-separated globs)"


def test_invalid_utf8_lines_are_skipped_and_counted_on_request(pretrained, tmp_path):
    from run import evaluate_lm

    with open(SOTU, "rb") as f:
        text = f.read()
    path = _text(tmp_path, "mixed.txt", b"Caf\xe9 au lait.\n" + text + b"\xff\xfe\n")
    report = data_fixtures.run_with_flags(evaluate_lm, _lm_args(pretrained / "m" / "final", "--skip_invalid_utf8",
                                                                text=path))
    assert report["skipped_invalid_utf8_lines"] == 2 and report["with_memories"]["tokens"] > 0


@pytest.mark.parametrize("flag, message", [
    ("--seg_len=1", "flag --seg_len=1: 1 is not integer >= 2"),
    ("--mem_len=0", "flag --mem_len=0: 0 is not a positive integer"),
    ("--batch_size=0", "flag --batch_size=0: 0 is not a positive integer"),
    ("--max_tokens=-1", "flag --max_tokens=-1: -1 is not a non-negative integer"),
])
def test_numeric_flags_are_range_checked_when_parsed(flag, message, capsys):
    from run import evaluate_lm

    got = _user_error(evaluate_lm, _lm_args("/nonexistent") + [flag], capsys)
    assert got == message


def test_the_cli_reports_bad_input_in_one_line(tmp_path):
    """Through the entry point: exit status 2, one line, no traceback."""
    empty = _text(tmp_path, "empty.txt", b"")
    cmd = [sys.executable, os.path.join(REPO, "run", "evaluate_lm.py")]
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"}
    proc = subprocess.run(cmd + _lm_args(tmp_path / "nothing_here", text=empty), capture_output=True, text=True,
                          cwd=str(tmp_path), timeout=300, env=env)
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr
    assert proc.stderr.strip().splitlines()[-1] == (f"evaluate_lm.py: error: --checkpoint={tmp_path}/nothing_here "
                                                    "does not exist"), proc.stderr[-2000:]
    proc = subprocess.run(cmd + _lm_args(tmp_path, "--seg_len=1", text=empty), capture_output=True, text=True,
                          cwd=str(tmp_path), timeout=300, env=env)
    # a value out of range is refused while the flags are parsed (common_flags.parse_flags_or_report)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr[-2000:]
    assert proc.stderr.strip().splitlines()[-1] == "evaluate_lm.py: error: flag --seg_len=1: 1 is not integer >= 2"


# ---- run/convert_checkpoint.py -----------------------------------------------------------------------------------

def test_converting_a_final_checks_the_config_and_keeps_its_facts(pretrained, tmp_path, capsys):
    from run import convert_checkpoint
    from xlnet_tf.artifacts import pretrain_info

    final = pretrained / "m" / "final"
    config = json.loads((final / "xlnet_config.json").read_text())
    wrong = tmp_path / "wrong_config.json"
    wrong.write_text(json.dumps({**config, "d_inner": 128}))
    out = tmp_path / "converted"
    message = _user_error(convert_checkpoint, [f"--original_checkpoint={final}/xlnet_model.ckpt", f"--config={wrong}",
                                               f"--output_dir={out}"], capsys)
    assert message == (f"--config={wrong} does not describe the pretrained weights: d_inner: 64 in "
                       f"{final}/pretrained_model.json, 128 in --config={wrong}")
    assert not out.exists()
    convert_checkpoint.convert(str(out), original_checkpoint=f"{final}/xlnet_model.ckpt",
                               config=str(final / "xlnet_config.json"))
    assert pretrain_info.read_model(str(out / "pretrained_model.json")) == pretrain_info.read_model(
        str(final / "pretrained_model.json"))
    with pytest.raises(pretrain_info.PretrainInfoError, match="says the model was pretrained with"):
        pretrain_info.check_final(str(out), spiece_sha256="0" * 64)


# ---- fine-tuning from a pretraining run ----------------------------------------------------------------------

FINETUNE = ["--n_layer=1", "--d_model=32", "--n_head=2", "--d_head=16", "--d_inner=64",
            f"--n_token={data_fixtures.TINY_VOCAB}", "--dropout=0.0", "--dropatt=0.0",
            f"--spiece_model_file={data_fixtures.tiny_spm()}", "--max_seq_length=32", "--train_batch_size=8",
            "--train_steps=1", "--steps_per_loop=1", "--save_steps=1", "--task=tsv",
            f"--data_dir={os.path.join(REPO, 'data', 'finetune', 'topic')}"]


def test_fine_tuning_checks_the_pretrained_facts_and_never_writes_into_a_pretraining_run(pretrained, tmp_path,
                                                                                         capsys):
    """--init_checkpoint of a pretraining run's final/ is checked against the records (SentencePiece model,
    casing, architecture) before anything is written; a pretraining model_dir is never a fine-tuning one."""
    from run import run_classifier

    records = f"--record_dir={tmp_path}/records"
    final = tmp_path / "final"
    shutil.copytree(pretrained / "m" / "final", final)
    facts = json.loads((final / "pretrained_model.json").read_text())
    facts["text"]["spiece_sha256"] = "0" * 64  # pretrained with another SentencePiece model of the same size
    (final / "pretrained_model.json").write_text(json.dumps(facts))
    line = _user_error(run_classifier, FINETUNE + [records, f"--model_dir={tmp_path}/ft", "--do_train",
                                                   f"--init_checkpoint={final}"], capsys)
    assert line.startswith("the records' SentencePiece model (") and f"{'0' * 64}" in line
    assert "pretrained_model.json says the model was pretrained with the SentencePiece model of sha256" in line
    assert not os.path.exists(tmp_path / "ft")

    facts["text"] = {**json.loads((pretrained / "m" / "final" / "pretrained_model.json").read_text())["text"],
                     "uncased": True}
    (final / "pretrained_model.json").write_text(json.dumps(facts))
    line = _user_error(run_classifier, FINETUNE + [records, f"--model_dir={tmp_path}/ft", "--do_train",
                                                   f"--init_checkpoint={final}"], capsys)
    assert line.startswith(f"--init_checkpoint={final}: pretrained with other text settings: uncased: True pretrained, "
                           "False in the records (")
    assert not os.path.exists(tmp_path / "ft")

    before = _snapshot(pretrained / "m")
    line = _user_error(run_classifier, FINETUNE + [records, f"--model_dir={pretrained}/m", "--do_train",
                                                   f"--init_checkpoint={pretrained}/m/final"], capsys)
    assert line == (f"--model_dir={pretrained}/m holds a pretraining run (pretrain_run.json); fine-tune into another "
                    f"--model_dir, with --init_checkpoint={pretrained}/m/final")
    assert _snapshot(pretrained / "m") == before

    # the run's own final/: the facts agree, the run proceeds
    data_fixtures.run_with_flags(run_classifier, FINETUNE + [records, f"--model_dir={tmp_path}/ok", "--do_train",
                                                             f"--init_checkpoint={pretrained}/m/final"])
    assert os.path.exists(tmp_path / "ok" / "ckpt-1.index")


def test_a_kept_checkpoint_carries_its_runs_facts_and_initializes_fine_tuning(pretrained, tmp_path, capsys):
    """A checkpoint kept by --keep_checkpoint_steps (model_dir/kept/ckpt-N, the transfer-against-pretraining-steps
    curve's weights) is checked against its run's facts as final/ is, and fine-tuning from it loads its weights."""
    import numpy as np

    from run import run_classifier
    from xlnet_tf import checkpoints
    from xlnet_tf.artifacts import pretrain_info
    from xlnet_tf.training import loop as training

    model = _copy_run(pretrained, tmp_path)
    kept = training.kept_checkpoint(str(model), 1)
    os.makedirs(os.path.dirname(kept))
    for path in glob.glob(str(model / "ckpt-1.*")):
        shutil.copy(path, kept + path[len(str(model / "ckpt-1")):])
    assert pretrain_info.read_pretrained(kept).objective == "plm"
    with pytest.raises(pretrain_info.PretrainInfoError, match="pretrain_run.json says the model was pretrained with"):
        pretrain_info.check_final(kept, spiece_sha256="0" * 64)
    run = json.loads((model / "pretrain_run.json").read_text())
    run["text"]["spiece_sha256"] = "0" * 64
    (model / "pretrain_run.json").write_text(json.dumps(run))
    line = _user_error(run_classifier, FINETUNE + [f"--record_dir={tmp_path}/records", f"--model_dir={tmp_path}/bad",
                                                   "--do_train", f"--init_checkpoint={kept}"], capsys)
    assert line.startswith("the records' SentencePiece model (") and not os.path.exists(tmp_path / "bad")
    shutil.copy(pretrained / "m" / "pretrain_run.json", model / "pretrain_run.json")
    data_fixtures.run_with_flags(run_classifier, FINETUNE + [f"--record_dir={tmp_path}/records", "--do_train",
                                                             f"--model_dir={tmp_path}/ok", "--learning_rate=0",
                                                             f"--init_checkpoint={kept}"])
    # with a zero learning rate the fine-tuned backbone is the kept checkpoint's, every variable of it
    before = checkpoints.read_object_checkpoint(kept)
    after = checkpoints.read_object_checkpoint(str(tmp_path / "ok" / "ckpt-1"))
    shared = sorted(set(before) & set(after))
    assert "model/transformer/word_embedding/lookup_table" in shared and len(shared) >= 18, sorted(after)
    assert all(np.array_equal(before[n], after[n]) for n in shared)


def test_a_warmup_longer_than_the_run_is_refused_in_one_line_before_anything_is_written(tmp_path, capsys):
    """--warmup_steps above --train_steps (the learning-rate schedule's own check raised a traceback from inside
    the optimizer once the model was built): both kinds of runner name the two flags, and write nothing."""
    from run import pretrain, run_classifier

    line = _user_error(pretrain, PRETRAIN + [f"--record_dir={_records('plm')}", f"--model_dir={tmp_path}/m",
                                             "--train_steps=4", "--warmup_steps=60"], capsys)
    assert line == ("--warmup_steps=60 exceeds --train_steps=4: the warm-up must end within the run; lower "
                    "--warmup_steps or raise --train_steps")
    assert not os.path.exists(tmp_path / "m")
    line = _user_error(run_classifier, FINETUNE + [f"--record_dir={tmp_path}/records", f"--model_dir={tmp_path}/ft",
                                                   "--do_train", "--train_steps=1", "--warmup_steps=2"], capsys)
    assert line.startswith("--warmup_steps=2 exceeds --train_steps=1: ")
    assert not os.path.exists(tmp_path / "ft") and not os.path.exists(tmp_path / "records")
