"""Bad input never gives a silently wrong result: each case gets a one-line error that names the file, flag or
field, and leaves the files it found as they were.

Cases so far: reruns into a model_dir of another run (fine-tuning and pretraining), unreadable model_dir
files, records tokenized for another vocabulary, stale checkpoint saves, unknown flags."""

import json
import os
import shutil

import pytest
from absl import flags

from tests import data_fixtures

REPO = data_fixtures.REPO_ROOT
TOPIC = os.path.join(REPO, "data", "finetune", "topic")
TINY = ["--n_layer=1", "--d_model=32", "--n_head=2", "--d_head=16", "--d_inner=64",
        f"--n_token={data_fixtures.TINY_VOCAB}", "--dropout=0.0", "--dropatt=0.0",
        f"--spiece_model_file={data_fixtures.tiny_spm()}", "--max_seq_length=32", "--train_batch_size=8",
        "--train_steps=2", "--steps_per_loop=1", "--save_steps=2", "--task=tsv", f"--data_dir={TOPIC}"]

_run = data_fixtures.run_with_flags


_snapshot = data_fixtures.snapshot


@pytest.fixture(scope="module")
def classifier_run(tmp_path_factory):
    """A finished 2-step topic fine-tuning run and its records (reused by every case; cases copy it)."""
    from run import run_classifier

    root = tmp_path_factory.mktemp("bad_inputs")
    args = TINY + [f"--record_dir={root}/records", f"--model_dir={root}/model", "--do_train"]
    _run(run_classifier, args)
    return root


@pytest.fixture(scope="module")
def pretrained(tmp_path_factory):
    """A pretrained-model checkpoint of TINY's size (original layout, backbone and LM head; random weights): what
    `--init_checkpoint` gives runs that only evaluate (scoring needs weights from somewhere)."""
    from xlnet_tf import checkpoints
    from xlnet_tf.config import XLNetConfig
    from xlnet_tf.models import XLNetPretrainer

    config = XLNetConfig(n_token=data_fixtures.TINY_VOCAB, n_layer=1, d_model=32, n_head=2, d_head=16, d_inner=64)
    prefix = str(tmp_path_factory.mktemp("pretrained") / "xlnet_model.ckpt")
    return checkpoints.save_original_checkpoint(XLNetPretrainer(config), prefix)


@pytest.mark.parametrize("flag, field", [
    ("--n_layer=2", "n_layer"),
    ("--d_inner=128", "d_inner"),
    ("--dropout=0.2", "dropout"),
    ("--clamp_len=8", "clamp_len"),
    ("--untie_r=false", "untie_r"),
    ("--summary_type=mean", "summary_type"),
    ("--use_summ_proj=false", "use_summ_proj"),
])
def test_classifier_rerun_with_other_model_settings_fails_and_writes_nothing(classifier_run, tmp_path, flag,
                                                                            field):
    from run import run_classifier
    from xlnet_tf.artifacts.model_dir import ModelDirError

    model = tmp_path / "model"
    shutil.copytree(classifier_run / "model", model)
    before = _snapshot(model)
    with pytest.raises(ModelDirError, match=rf"--model_dir={model}.*{field}: .* there, .* now"):
        _run(run_classifier, TINY + [f"--record_dir={classifier_run}/records", f"--model_dir={model}",
                                     "--do_train", "--train_steps=4", "--save_steps=4", flag])
    assert _snapshot(model) == before


def test_classifier_rerun_with_the_same_settings_resumes(classifier_run, tmp_path):
    """The check passes a genuine resume: same flags, more steps (and a moved SentencePiece path is no
    difference: the model is compared by checksum)."""
    from run import run_classifier

    model = tmp_path / "model"
    shutil.copytree(classifier_run / "model", model)
    moved = tmp_path / "moved_spiece.model"
    shutil.copy(data_fixtures.tiny_spm(), moved)
    _run(run_classifier, TINY + [f"--record_dir={classifier_run}/records", f"--model_dir={model}", "--do_train",
                                 "--train_steps=4", "--save_steps=4", f"--spiece_model_file={moved}"])
    assert os.path.exists(model / "ckpt-4.index")
    info = json.load(open(model / "export_info.json"))
    assert info["spiece_model_file"] == str(moved) and len(info["text"]["spiece_sha256"]) == 64


def test_records_of_another_vocabulary_are_refused(classifier_run, tmp_path):
    from run import run_classifier
    from tfrecords.manifest import ManifestError

    with pytest.raises(ManifestError, match=rf"manifest.json: .*{data_fixtures.TINY_VOCAB}-piece.*n_token=2000"):
        _run(run_classifier, TINY + [f"--record_dir={classifier_run}/records", f"--model_dir={tmp_path}/m",
                                     "--do_train", "--n_token=2000"])
    assert not os.path.exists(tmp_path / "m")


@pytest.mark.parametrize("mode", [["--do_eval"], ["--do_predict", "--predict_split=dev"],
                                  ["--do_eval", "--do_predict", "--predict_split=dev"]])
def test_evaluating_or_predicting_without_weights_is_refused_and_writes_nothing(classifier_run, tmp_path, mode):
    """No checkpoint in a fresh model_dir and no --init_checkpoint: scoring would read random weights (and
    record them as the best result). Refused before the model_dir is created."""
    from run import run_classifier
    from xlnet_tf.errors import UserError

    with pytest.raises(UserError, match=rf"without --do_train: no checkpoint in --model_dir={tmp_path}/m and no "
                                        r"--init_checkpoint \(that would score random weights\)"):
        _run(run_classifier, TINY + [f"--record_dir={classifier_run}/records", f"--model_dir={tmp_path}/m", *mode])
    assert not os.path.exists(tmp_path / "m")


def test_a_failed_init_checkpoint_leaves_the_model_dir_unwritten(classifier_run, tmp_path):
    """The model_dir's config and export info are written only once the run is known to proceed."""
    from run import run_classifier

    with pytest.raises(FileNotFoundError):
        _run(run_classifier, TINY + [f"--record_dir={classifier_run}/records", f"--model_dir={tmp_path}/m",
                                     "--do_train", f"--init_checkpoint={tmp_path}/no_such_checkpoint"])
    assert not os.path.exists(tmp_path / "m")


def test_export_with_another_sentencepiece_model_is_refused_before_building(classifier_run, tmp_path):
    """Serving must tokenize as training did: --export_spiece_model is checked against export_info.json's
    checksum (the uncased model has as many pieces, and would be served silently)."""
    from run import export_savedmodel
    from xlnet_tf.errors import UserError

    other = data_fixtures.tiny_spm(uncased=True)
    with pytest.raises(UserError, match=rf"--export_spiece_model={other} has sha256 [0-9a-f]{{64}}, but "
                                        r"export_info.json says the model was trained with the SentencePiece model of "
                                        r"sha256 [0-9a-f]{64}: export with that model"):
        export_savedmodel.export_from_model_dir(str(classifier_run / "model"), str(tmp_path / "e"),
                                                spiece_model=other)
    assert not os.path.exists(tmp_path / "e")


@pytest.mark.parametrize("tool, args, message", [
    ("tfrecords/build_pretrain.py", ["--seq_len=1"], "flag --seq_len=1: 1 is not integer >= 2"),
    ("tfrecords/build_classifier.py", ["--max_seq_lenght=64"], "Unknown command line flag 'max_seq_lenght'. Did you mean: max_seq_length ?"),
    ("tfrecords/build_race.py", ["--max_qa_length=0"], "flag --max_qa_length=0: 0 is not a positive integer"),
    ("tfrecords/build_squad.py", ["--doc_stride=-1"], "flag --doc_stride=-1: -1 is not a positive integer"),
    ("tfrecords/spm.py", ["--character_coverage=2"], "flag --character_coverage=2: 2.0 is not a number in the range "
                                                     "[0.0, 1.0]"),
    ("tfrecords/inspect_records.py", ["{tmp}/none"], "record directory does not exist: {tmp}/none"),
    ("tfrecords/sets/brown_genre.py", ["--slice_dev_per_label=0"], "flag --slice_dev_per_label=0: 0 is not a positive integer"),
    ("run/evaluate_lm.py", ["--seg_len=1"], "flag --seg_len=1: 1 is not integer >= 2"),
    ("run/pretrain.py", ["--mem_len=-1"], "flag --mem_len=-1: -1 is not a non-negative integer"),
    ("run/generate.py", ["--padding_text", "true"], "unexpected arguments ['true']: every option is a flag (--name=value)"),
])
def test_every_entry_point_reports_a_user_error_in_one_line(tmp_path, tool, args, message):
    """One convention (xlnet_tf/cli.py): `<tool>.py: error: <message>`, exit status 2, builders included."""
    import subprocess
    import sys

    fill = lambda text: text.replace("{tmp}", str(tmp_path))  # noqa: E731
    proc = subprocess.run([sys.executable, os.path.join(REPO, tool), *map(fill, args)], capture_output=True, text=True,
                          cwd=str(tmp_path), timeout=300)
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert proc.stderr.strip().splitlines()[-1] == f"{os.path.basename(tool)}: error: {fill(message)}", proc.stderr
    assert "Traceback" not in proc.stderr and not os.listdir(tmp_path)


def test_unknown_flag_names_the_flag():
    from run import run_classifier

    with pytest.raises(flags.UnrecognizedFlagError, match="learning_rat"):
        _run(run_classifier, ["--learning_rat=1e-3"])


@pytest.mark.parametrize("runner, args, message", [
    ("run_classifier", ["--record_dir={tmp}/none", "--model_dir={tmp}/m", "--do_eval"],
     "record directory does not exist: {tmp}/none"),
    ("run_classifier", ["--record_dir={tmp}/none", "--model_dir={tmp}/m", "--do_eval", "--max_segments=3",
                        "--document_summary=all_segments"],
     "--document_summary=all_segments needs --summary_type=mean or attn (a 'last' summary reads one position)"),
    ("run_squad", ["--record_dir={tmp}/none", "--model_dir={tmp}/m", "--do_eval"],
     "no dev records in --record_dir={tmp}/none: give --predict_file"),
    ("export_savedmodel", ["--model_dir={tmp}", "--export_dir={tmp}/e"],
     "--task is required: no export_info.json in --model_dir={tmp}"),
    ("export_savedmodel", ["--model_dir={tmp}/none", "--export_dir={tmp}/e"], "--model_dir={tmp}/none does not exist"),
    ("export_savedmodel", ["--model_dir={tmp}", "--export_dir={tmp}/a_file"],
     "--export_dir={tmp}/a_file is a file; give a directory (the versions go under it)"),
    pytest.param("export_savedmodel", ["--model_dir={tmp}", "--export_dir={tmp}/e", "--version=3"],
                 "{tmp}/e/3 exists: choose another --version (TF Serving loads the highest) or another --export_dir",
                 marks=pytest.mark.slow),  # in process in the default run: tests/serving/test_serving.py (version exists)
    ("export_savedmodel", ["--model_dir={tmp}", "--export_dir={tmp}/e", "--version=-1"],
     "flag --version=-1: -1 is not a non-negative integer"),
    ("export_savedmodel", ["--model_dir={tmp}"], "--export_dir and --model_dir (or --checkpoint with --model_dir) "
                                                  "are required"),
    ("benchmark", ["--results_dir={tmp}/r"], "--flagfiles and --results_dir are required"),
    # numeric flags are checked when parsed, with their range
    ("run_classifier", ["--bptt_segments=-1"], "flag --bptt_segments=-1: -1 is not a non-negative integer"),
    ("run_classifier", ["--max_segments=300"], "flag --max_segments=300: 300 is not an integer in the range [1, 64]"),
    ("run_classifier", ["--dropout=1.5"], "flag --dropout=1.5: 1.5 is not a number in the range [0.0, 0.99]"),
    ("run_classifier", ["--train_steps=0"], "flag --train_steps=0: 0 is not a positive integer"),
    ("run_classifier", ["--record_dir={tmp}/none", "--model_dir={tmp}/m", "--do_train", "--max_segments=3",
                        "--bptt_segments=3"],
     "--bptt_segments=3 must be at most --max_segments - 1 = 2 (the segments before the last of a document)"),
    ("run_classifier", ["--record_dir={tmp}/none", "--model_dir={tmp}/m", "--do_train", "--bptt_segments=1"],
     "--bptt_segments=1 must be at most --max_segments - 1 = 0 (the segments before the last of a document)"),
    ("run_squad", ["--n_best_size=0"], "flag --n_best_size=0: 0 is not a positive integer"),
    ("run_race", ["--max_qa_length=-5"], "flag --max_qa_length=-5: -5 is not a positive integer"),
])
def test_user_errors_are_one_line_without_a_traceback(tmp_path, runner, args, message):
    import subprocess
    import sys

    fill = lambda text: text.replace("{tmp}", str(tmp_path))  # noqa: E731
    (tmp_path / "a_file").write_text("not a directory")
    (tmp_path / "e" / "3").mkdir(parents=True)
    before = _snapshot(tmp_path)
    proc = subprocess.run([sys.executable, os.path.join(REPO, "run", f"{runner}.py"), *map(fill, args)],
                          capture_output=True, text=True, cwd=str(tmp_path), timeout=300)
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr
    assert proc.stderr.strip().splitlines()[-1] == f"{runner}.py: error: {fill(message)}", proc.stderr[-2000:]
    assert _snapshot(tmp_path) == before and not os.path.exists(tmp_path / "m")  # nothing written


# ---- the model_dir contract, library level ---------------------------------------------------------------

def _config(**overrides):
    from xlnet_tf.config import XLNetConfig

    return XLNetConfig(**{**dict(n_token=100, n_layer=1, d_model=16, n_head=2, d_head=8, d_inner=32), **overrides})


@pytest.mark.parametrize("content, message", [
    ("{not json", "unreadable"),
    ("[1, 2]", "not a JSON object"),
    ('{"n_layer": 1, "colour": "red"}', "Unknown XLNetConfig keys"),
    ('{"n_layer": -1}', "n_layer must be a positive integer"),
])
def test_unusable_config_in_model_dir_is_named(tmp_path, content, message):
    from xlnet_tf.artifacts import model_dir

    (tmp_path / "xlnet_config.json").write_text(content)
    with pytest.raises(model_dir.ModelDirError, match=rf"xlnet_config.json.*{message}|{message}.*"):
        model_dir.prepare(str(tmp_path), _config())
    assert (tmp_path / "xlnet_config.json").read_text() == content


def _race_info(**changes):
    from xlnet_tf.artifacts.export_info import ExportInfo

    return ExportInfo(**{**dict(task="race", max_seq_length=64, max_qa_length=16, summary_type="last",
                                use_summ_proj=True, qa_truncation="tail"), **changes})


def _classifier_info(**changes):
    from xlnet_tf.artifacts.export_info import ExportInfo

    return ExportInfo(**{**dict(task="classifier", max_seq_length=64, labels=["a", "b"], num_labels=2,
                                text_pair=False, summary_type="last", use_summ_proj=True), **changes})


_HEADER = '"schema": "xlnet_tf.artifacts.export_info", "version": 6, '
_TEXT = '"text": {"spiece_sha256": null, "uncased": false, "keep_accents": false}, '


@pytest.mark.parametrize("content, message", [
    ('{' + _HEADER + _TEXT + '"task": "race", "max_seq_length": 64}', "max_qa_length, summary_type, use_summ_proj missing"),
    ('{' + _HEADER + _TEXT + '"task": "ner", "max_seq_length": 64}', "task is 'ner'"),
    ('{' + _HEADER + _TEXT + '"task": "tagging", "max_seq_length": 64}', "num_labels, doc_stride missing"),
    ('{' + _HEADER + '"task": "race", "max_seq_length": 64}', "text required"),
    ('{' + _HEADER + '"text": {"uncased": false}, "task": "race", "max_seq_length": 64}',
     "text must hold spiece_sha256, uncased and keep_accents"),
    ('{"schema": "xlnet_tf.artifacts.export_info", "version": 9, "task": "race"}',
     "xlnet_tf.artifacts.export_info version 9, this code reads version 6 only \\(written by another version\\); re-run the "
     "fine-tuning into a new --model_dir"),
    ('{"schema": "xlnet_tf.artifacts.export_info", "version": 5, "task": "race", "max_seq_length": 64, "max_qa_length": 16,'
     ' "summary_type": "last", "use_summ_proj": true, "uncased": false}', "xlnet_tf.artifacts.export_info version 5"),
    ('{"task": "race", "max_seq_length": 64}', "no schema header \\(written by an earlier version or another tool\\)"),
    ('{' + _HEADER + _TEXT + '"task": "race", "max_seq_length": 64, "max_qa_length": 16, "summary_type": "last", '
     '"use_summ_proj": true, "colour": "red"}', r"unknown field\(s\) \['colour'\]"),
    ('{' + _HEADER + _TEXT + '"task": "classifier", "max_seq_length": 64, "num_labels": 2, "summary_type": "mean", '
     '"use_summ_proj": true, "document_summary": "all_segments"}', "document_summary is for long-document models"),
    ('{' + _HEADER + _TEXT + '"task": "classifier", "max_seq_length": 64, "num_labels": 2, "summary_type": "mean", '
     '"use_summ_proj": true, "max_segments": 3, "mem_len": 8, "document_summary": "every"}',
     "document_summary is 'every'"),
    ('{' + _HEADER + _TEXT + '"task": "race", "max_seq_length": 64, "max_qa_length": 16, "summary_type": "last", '
     '"use_summ_proj": true, "qa_truncation": "middle"}', "qa_truncation is 'middle'"),
    ('{' + _HEADER + _TEXT + '"task": "race", "max_seq_length": 64, "max_qa_length": 16, "summary_type": "last", '
     '"use_summ_proj": true, "split_unknown": false}', "split_unknown is for squad models"),
])
def test_export_info_that_breaks_the_schema_is_named(tmp_path, content, message):
    from xlnet_tf.artifacts import model_dir

    (tmp_path / "export_info.json").write_text(content)
    with pytest.raises(model_dir.ModelDirError, match=f"export_info.json: {message}"):
        model_dir.prepare(str(tmp_path), _config(), _race_info())
    assert (tmp_path / "export_info.json").read_text() == content


def test_export_info_reads_back_what_it_wrote_and_compares_the_text_settings_whole(tmp_path):
    from xlnet_tf.artifacts import export_info, model_dir
    from xlnet_tf.artifacts.text_settings import TextSettings

    model_dir.prepare(str(tmp_path), None, _race_info())
    assert export_info.read(str(tmp_path / "export_info.json")) == _race_info()
    other = _race_info(text=TextSettings("ab" * 32, uncased=True))
    with pytest.raises(model_dir.ModelDirError, match=r"text.spiece_sha256: None there, 'abab.*' now; "
                                                      r"export_info.json text.uncased: False there, True now"):
        model_dir.prepare(str(tmp_path), None, other)


def test_unreadable_export_info_is_named(tmp_path):
    from xlnet_tf.artifacts import model_dir

    (tmp_path / "export_info.json").write_text("{")
    with pytest.raises(model_dir.ModelDirError, match="export_info.json is unreadable"):
        model_dir.prepare(str(tmp_path), _config(), _race_info())


def test_model_dir_that_is_a_file(tmp_path):
    from xlnet_tf.artifacts import model_dir

    path = tmp_path / "file"
    path.write_text("x")
    with pytest.raises(model_dir.ModelDirError, match=f"--model_dir={path} is a file"):
        model_dir.prepare(str(path), _config())


def test_every_difference_is_listed_at_once(tmp_path):
    from xlnet_tf.artifacts import model_dir
    from xlnet_tf.artifacts.text_settings import TextSettings

    model_dir.prepare(str(tmp_path), _config(), _classifier_info(labels=["a", "b"]))
    with pytest.raises(model_dir.ModelDirError) as e:
        model_dir.prepare(str(tmp_path), _config(d_inner=64, dropout=0.3),
                          _classifier_info(labels=["a", "c"], text=TextSettings(None, uncased=True)))
    msg = str(e.value)
    for part in ("xlnet_config.json d_inner: 32 there, 64 now", "xlnet_config.json dropout: 0.1 there, 0.3 now",
                 "export_info.json labels: ['a', 'b'] there, ['a', 'c'] now",
                 "export_info.json text.uncased: False there, True now"):
        assert part in msg, msg
    assert "\n" not in msg


def test_stale_checkpoint_saves_are_removed(tmp_path):
    from xlnet_tf.artifacts import model_dir

    for stale in ("ckpt-300_temp", os.path.join("kept", "ckpt-900_temp")):
        os.makedirs(tmp_path / stale)
        (tmp_path / stale / "part-00000-of-00001.data-00000-of-00001").write_text("half")
    (tmp_path / "ckpt-200.index").write_text("kept")
    lines = []
    model_dir.prepare(str(tmp_path), _config(), log=lines.append)
    assert not os.path.exists(tmp_path / "ckpt-300_temp") and not os.path.exists(tmp_path / "kept" / "ckpt-900_temp")
    assert (tmp_path / "ckpt-200.index").read_text() == "kept"
    assert len(lines) == 2 and all("interrupted checkpoint save" in line for line in lines)


def test_config_written_by_an_older_version_compares_with_defaults(tmp_path):
    """An xlnet_config.json without the fields added later (the released file's keys only) equals a config
    whose extra fields are the defaults."""
    from xlnet_tf.artifacts import model_dir

    _config().to_json_file(str(tmp_path / "xlnet_config.json"), original_only=True)
    model_dir.prepare(str(tmp_path), _config())  # no error
    with pytest.raises(model_dir.ModelDirError, match="mem_len: None there, 16 now"):
        model_dir.prepare(str(tmp_path), _config(mem_len=16))


# ---- pretraining -----------------------------------------------------------------------------------------

PRETRAIN = ["--n_layer=1", "--d_model=32", "--n_head=2", "--d_head=16", "--d_inner=64",
            f"--n_token={data_fixtures.TINY_VOCAB}", "--mem_len=16", "--seq_len=32", "--reuse_len=16",
            "--num_predict=6", "--perm_size=8", "--train_batch_size=4", "--bi_data=true", "--train_steps=1",
            "--steps_per_loop=1", "--save_steps=1"]


def _pretrain_records():
    from tfrecords.pretrain import writer as pretrain_data

    out = os.path.join(data_fixtures.tmp_root(), "bad_inputs_pretrain")
    if not os.path.exists(os.path.join(out, "manifest.json")):
        cfg = pretrain_data.PretrainConfig(seq_len=32, reuse_len=16, num_predict=6, perm_size=8,
                                           global_batch_size=4, bi_data=True, seed=3)
        pretrain_data.build_pretrain_records(os.path.join(data_fixtures.CORPUS_DIR, "sotu_slice.txt"),
                                             data_fixtures.tiny_spm(), out, cfg, log=None)
    return out


def test_pretraining_rerun_with_another_model_fails_and_writes_nothing(tmp_path):
    from run import pretrain
    from xlnet_tf.artifacts.model_dir import ModelDirError

    records = _pretrain_records()
    _run(pretrain, PRETRAIN + [f"--record_dir={records}", f"--model_dir={tmp_path}/m"])
    before = _snapshot(tmp_path / "m")
    with pytest.raises(ModelDirError, match="d_model: 32 there, 64 now.*mem_len: 16 there, 8 now"):
        _run(pretrain, PRETRAIN + [f"--record_dir={records}", f"--model_dir={tmp_path}/m", "--d_model=64",
                                   "--d_head=32", "--mem_len=8", "--train_steps=2", "--save_steps=2"])
    assert _snapshot(tmp_path / "m") == before


def test_pretraining_records_of_another_vocabulary_are_refused(tmp_path):
    from run import pretrain
    from tfrecords.manifest import ManifestError

    with pytest.raises(ManifestError, match="manifest.json: the records were tokenized with a "
                                            f"{data_fixtures.TINY_VOCAB}-piece"):
        _run(pretrain, PRETRAIN + [f"--record_dir={_pretrain_records()}", f"--model_dir={tmp_path}/m",
                                   "--n_token=32000"])
    assert not os.path.exists(tmp_path / "m")


# ---- eval_results.json -----------------------------------------------------------------------------------

@pytest.mark.parametrize("content, message", [
    ("{", "eval_results.json is unreadable"),
    ('"text"', "expected a JSON object"),
    ('{"accuracy": 1}', "not an eval_results.json"),
    ('{"schema": "other", "version": 1}', "schema is 'other'"),
    ('{"schema": "xlnet_tf.eval_results", "version": 7, "task": "race", "key": "accuracy", "evaluations": []}',
     "version 7 is not supported"),
    ('{"schema": "xlnet_tf.eval_results", "version": 1, "task": "race", "evaluations": []}', "missing field 'key'"),
    ('{"schema": "xlnet_tf.eval_results", "version": 1, "task": "poetry", "key": "a", "evaluations": []}',
     "task 'poetry' is not one of"),
    ('{"schema": "xlnet_tf.eval_results", "version": 1, "task": "race", "key": "accuracy", '
     '"evaluations": [{"accuracy": 1}]}', r"evaluations\[0\] has no integer 'step'"),
])
def test_unusable_eval_results_are_named(tmp_path, content, message):
    from xlnet_tf.artifacts import results

    (tmp_path / "eval_results.json").write_text(content)
    with pytest.raises(results.ResultsError, match=message):
        results.record(str(tmp_path), "race", "accuracy", 5, {"accuracy": 0.3})
    assert (tmp_path / "eval_results.json").read_text() == content


def test_results_of_another_task_are_not_mixed(tmp_path):
    from xlnet_tf.artifacts import results

    results.record(str(tmp_path), "squad", "f1", 5, {"f1": 10.0})
    with pytest.raises(results.ResultsError, match="holds squad results, this run records race"):
        results.record(str(tmp_path), "race", "accuracy", 5, {"accuracy": 0.3})


def test_reserved_metric_names_are_refused(tmp_path):
    from xlnet_tf.artifacts import results

    with pytest.raises(ValueError, match=r"metric names \['step'\] are reserved"):
        results.record(str(tmp_path), "race", "accuracy", 5, {"step": 3})


# ---- serving: bad requests are rejected naming the input -------------------------------------------------

@pytest.fixture(scope="module")
def served(classifier_run):
    import tensorflow as tf

    from run import export_savedmodel

    path = export_savedmodel.export_from_model_dir(str(classifier_run / "model"), str(classifier_run / "export"))
    return tf.saved_model.load(path)


def _ids_request(length=10, **changes):
    import numpy as np

    request = {"input_ids": np.full([2, length], 7, np.int32), "segment_ids": np.zeros([2, length], np.int32),
               "attention_mask": np.ones([2, length], np.float32)}
    request.update(changes)
    return request


@pytest.mark.parametrize("changes, message", [
    (dict(input_ids=[[7] * 9 + [data_fixtures.TINY_VOCAB]] * 2), r"input_ids must be in \[0, 1000\)"),
    (dict(input_ids=[[-1] + [7] * 9] * 2), r"input_ids must be in \[0, 1000\)"),
    (dict(segment_ids=[[0] * 9] * 2), "segment_ids must have the shape of input_ids"),
    (dict(attention_mask=[[1.0] * 10]), "attention_mask must have the shape of input_ids"),
    (dict(attention_mask=[[0.5] * 10] * 2), "attention_mask must be 1 .real token. or 0"),
    (dict(length=33), "longer than the exported max_seq_length=32"),
])
def test_from_ids_rejects_bad_requests(served, changes, message):
    import numpy as np
    import tensorflow as tf

    length = changes.pop("length", 10)
    request = _ids_request(length, **{k: np.asarray(v, dtype=("float32" if k == "attention_mask" else "int32"))
                                      for k, v in changes.items()})
    with pytest.raises(tf.errors.InvalidArgumentError, match=message):
        served.signatures["from_ids"](**{k: tf.constant(v) for k, v in request.items()})


def test_from_ids_accepts_a_good_request(served):
    import tensorflow as tf

    out = served.signatures["from_ids"](**{k: tf.constant(v) for k, v in _ids_request(32).items()})
    assert out["logits"].shape[0] == 2


def test_serving_default_rejects_invalid_utf8_naming_the_input(served):
    import tensorflow as tf

    good = served.signatures["serving_default"](text=tf.constant(["Caf\u00e9 \U0001F600 ok", ""]))
    assert good["label"].shape == (2,)
    with pytest.raises(tf.errors.InvalidArgumentError, match="text holds invalid UTF-8"):
        served.signatures["serving_default"](text=tf.constant([b"fine", b"caf\xe9 latin-1"]))
    # the builders' rule for control characters: tab and line ends pass, others are refused naming the input
    lines = served.signatures["serving_default"](text=tf.constant(["two\tcolumns\nand lines\r\n"]))
    assert lines["label"].shape == (1,)
    with pytest.raises(tf.errors.InvalidArgumentError, match="text holds a control character other than tab"):
        served.signatures["serving_default"](text=tf.constant(["a bell \x07 rings"]))


def test_serving_default_rejects_the_wrong_rank(served):
    import tensorflow as tf

    # the loaded signature raises TypeError, then runs the function anyway: it must stop there too
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"(?s)Shape of tensor text \[1,2\] .*serving_default_text_must_be_rank_1"):
        served.signatures["serving_default"](text=tf.constant([["a", "b"]]))
    # every input has the wrong rank here; graph execution checks them in no fixed order, so any may be named
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"(?s)(\w+) \[1,2,10\] .*from_ids_\1_must_be_rank_2"):
        served.signatures["from_ids"](**{k: tf.constant(v[None]) for k, v in _ids_request().items()})


# ---- records are tied to their inputs by content -------------------------------------------------------

def _tiny_task(directory, dev_rows):
    """A two-label tsv task: train.tsv from the topic task's first rows, dev.tsv from `dev_rows`."""
    os.makedirs(directory, exist_ok=True)
    head = open(os.path.join(TOPIC, "train.tsv"), encoding="utf-8").read().splitlines()[:1]
    rows = [r for r in open(os.path.join(TOPIC, "train.tsv"), encoding="utf-8").read().splitlines()[1:]
            if r.split("\t")[0] in ("Physical sciences", "History")][:40]
    with open(os.path.join(directory, "train.tsv"), "w", encoding="utf-8") as f:
        f.write("\n".join(head + rows) + "\n")
    with open(os.path.join(directory, "dev.tsv"), "w", encoding="utf-8") as f:
        f.write("\n".join(head + dev_rows) + "\n")
    return directory


def test_changed_data_rebuilds_the_records_it_shaped(pretrained, tmp_path, capsys):
    from run import run_classifier

    dev = ["History\tThe treaty was signed in the old capital.", "History\tA king ruled the northern lands."]
    data = _tiny_task(str(tmp_path / "task"), dev)
    args = TINY[:-1] + [f"--data_dir={data}", f"--record_dir={tmp_path}/rec", f"--model_dir={tmp_path}/m", "--do_eval",
                        f"--init_checkpoint={pretrained}"]
    _run(run_classifier, args)
    manifest = json.load(open(tmp_path / "rec" / "manifest.json"))
    assert manifest["splits"]["dev"]["label_counts"] == {"History": 2, "Physical sciences": 0}
    before = manifest["splits"]["dev"]["inputs"]
    assert list(before) == [os.path.join(data, "dev.tsv")]
    # same size, same names, other content: a size/name fingerprint would reuse the old records
    text = "\n".join(["label\ttext"] + dev) + "\n"
    changed = text.replace("History\tA king ruled", "Physical sciences\tA king"[:len("History\tA king ruled")])
    assert len(changed) == len(text) and changed != text
    with open(os.path.join(data, "dev.tsv"), "w", encoding="utf-8") as f:
        f.write(changed)
    capsys.readouterr()
    _run(run_classifier, args)
    assert f"dev: {os.path.join(data, 'dev.tsv')} changed since the records were built" in capsys.readouterr().out
    after = json.load(open(tmp_path / "rec" / "manifest.json"))["splits"]["dev"]
    assert after["inputs"] != before and after["label_counts"] == {"History": 1, "Physical sciences": 1}
    # unchanged data: the records are reused as they are
    records = _snapshot(tmp_path / "rec")
    _run(run_classifier, args)
    assert _snapshot(tmp_path / "rec") == records


def test_a_refused_rebuild_changes_nothing_and_the_restored_data_reuses_the_records(tmp_path):
    """Relabel the training file so that its label list changes: the rebuild is refused (the records there
    were built with another label list) and leaves every record file and the manifest as they were; with the
    file restored, the records are reused and still hold the file's labels."""
    from run import run_classifier
    from tfrecords import classifier_data
    from tfrecords.manifest import ManifestError

    data = _tiny_task(str(tmp_path / "task"), ["History\tOne.", "Physical sciences\tTwo."])
    args = TINY[:-1] + [f"--data_dir={data}", f"--record_dir={tmp_path}/rec", "--do_train"]
    _run(run_classifier, args + [f"--model_dir={tmp_path}/m1"])
    built = _snapshot(tmp_path / "rec")
    train = os.path.join(data, "train.tsv")
    original = open(train, encoding="utf-8").read()
    with open(train, "w", encoding="utf-8") as f:
        f.write(original.replace("\nHistory\t", "\nZoology\t"))  # another label_list, the ids swapped
    with pytest.raises(ManifestError, match=r"manifest.json: the records were built with other settings: label_list: "
                                            r"\['History', 'Physical sciences'\] in the records, \['Physical sciences', "
                                            r"'Zoology'\] from these flags"):
        _run(run_classifier, args + [f"--model_dir={tmp_path}/m2"])
    assert _snapshot(tmp_path / "rec") == built
    assert not os.path.exists(tmp_path / "m2")
    with open(train, "w", encoding="utf-8") as f:
        f.write(original)
    _run(run_classifier, args + [f"--model_dir={tmp_path}/m3"])
    assert _snapshot(tmp_path / "rec") == built
    manifest = json.load(open(tmp_path / "rec" / "manifest.json"))
    rows = [ln.split("\t")[0] for ln in original.splitlines()[1:]]
    batch = next(iter(classifier_data.classifier_dataset(str(tmp_path / "rec"), 64, False, split="train",
                                                         max_seq_length=32, drop_remainder=False)))
    real = batch["is_real_example"].numpy() > 0
    assert real.sum() == len(rows) == 40
    stored = [manifest["label_list"][i] for i in batch["label"].numpy()[real]]
    assert stored == [rows[i] for i in batch["example_index"].numpy()[real]]


def test_records_of_another_data_file_are_rebuilt_not_reused(pretrained, tmp_path, capsys):
    from run import run_classifier

    data = _tiny_task(str(tmp_path / "task"), ["History\tOne.", "History\tTwo."])
    args = TINY[:-1] + [f"--record_dir={tmp_path}/rec", f"--model_dir={tmp_path}/m", "--do_eval",
                        f"--init_checkpoint={pretrained}"]
    _run(run_classifier, args + [f"--data_dir={data}"])
    other = _tiny_task(str(tmp_path / "other"), ["Physical sciences\tThree.", "History\tFour.", "History\tFive."])
    capsys.readouterr()
    _run(run_classifier, args + [f"--data_dir={other}", f"--model_dir={tmp_path}/m2"])
    assert "the input files differ" in capsys.readouterr().out
    manifest = json.load(open(tmp_path / "rec" / "manifest.json"))
    assert manifest["splits"]["dev"]["num_examples"] == 3


def test_an_empty_split_is_an_error_and_never_cached(tmp_path):
    from run import run_classifier
    from tfrecords.classifier_data import DataError

    data = _tiny_task(str(tmp_path / "task"), [])
    with pytest.raises(DataError, match="dev.tsv: only a header, no data rows"):
        _run(run_classifier, TINY[:-1] + [f"--data_dir={data}", f"--record_dir={tmp_path}/rec",
                                          f"--model_dir={tmp_path}/m", "--do_eval"])
    assert not os.path.exists(tmp_path / "rec" / "manifest.json")


def test_pretraining_fingerprint_covers_file_content_not_size(tmp_path):
    from tfrecords.pretrain import writer as pretrain_data

    a, b = tmp_path / "a.txt", tmp_path / "b.txt"
    a.write_text("The cat sat on the mat.\nIt was warm.\n\nA new document.\n", encoding="utf-8")
    b.write_text("The dog sat on the mat.\nIt was warm.\n\nA new document.\n", encoding="utf-8")
    cfg = data_fixtures.small_config()
    fa = pretrain_data._fingerprint(cfg, "sha", [str(a)], pretrain_data.input_digests([str(a)]))
    fb = pretrain_data._fingerprint(cfg, "sha", [str(b)], pretrain_data.input_digests([str(b)]))
    assert os.path.getsize(a) == os.path.getsize(b) and fa != fb


def test_changed_pretraining_corpus_is_refused_naming_the_directory(tmp_path):
    from tfrecords.pretrain import writer as pretrain_data

    corpus = tmp_path / "corpus.txt"
    shutil.copy(os.path.join(data_fixtures.CORPUS_DIR, sorted(os.listdir(data_fixtures.CORPUS_DIR))[0]), corpus)
    out = str(tmp_path / "rec")
    cfg = data_fixtures.small_config()
    pretrain_data.build_pretrain_records(str(corpus), data_fixtures.tiny_spm(), out, cfg, log=None)
    records = _snapshot(out)
    text = corpus.read_text(encoding="utf-8")
    corpus.write_text(text.replace("a", "e", 1), encoding="utf-8")
    with pytest.raises(pretrain_data.BuildError, match=f"{out} already holds records built from other input"):
        pretrain_data.build_pretrain_records(str(corpus), data_fixtures.tiny_spm(), out, cfg, log=None)
    assert _snapshot(out) == records


def test_an_empty_squad_split_is_an_error_and_never_cached(pretrained, tmp_path):
    from run import run_squad
    from tfrecords.classifier_data import DataError

    empty = tmp_path / "dev.json"
    empty.write_text(json.dumps({"version": "1.1", "data": [{"title": "T", "paragraphs": [
        {"context": "Nothing is asked here.", "qas": []}]}]}), encoding="utf-8")
    with pytest.raises(DataError, match=f"{empty}: no usable questions for the dev split"):
        _run(run_squad, TINY[:-2] + ["--max_query_length=16", f"--predict_file={empty}", f"--record_dir={tmp_path}/rec",
                                     f"--model_dir={tmp_path}/m", "--do_eval", f"--init_checkpoint={pretrained}"])
    assert not os.path.exists(tmp_path / "rec" / "manifest.json") and not os.path.exists(tmp_path / "m")


def test_squad_scores_only_against_the_file_its_records_came_from(pretrained, tmp_path, capsys):
    from run import run_squad
    from xlnet_tf.errors import UserError

    dev = tmp_path / "dev.json"
    data = json.load(open(os.path.join(REPO, "data", "finetune", "squad_wordnet", "dev-v1.1.json")))
    data["data"] = data["data"][:3]
    dev.write_text(json.dumps(data), encoding="utf-8")
    args = TINY[:-2] + ["--max_query_length=16", "--max_seq_length=64", "--doc_stride=32",
                        f"--record_dir={tmp_path}/rec", "--do_eval",
                        f"--init_checkpoint={pretrained}"]
    _run(run_squad, args + [f"--predict_file={dev}", f"--model_dir={tmp_path}/m"])
    assert "exact_match" in json.load(open(tmp_path / "m" / "eval_results.json"))["last"]["dev"]
    qa = data["data"][0]["paragraphs"][0]["qas"][0]
    qa["answers"] = [{"text": "x", "answer_start": 0}]  # the gold answers change under the records
    dev.write_text(json.dumps(data), encoding="utf-8")
    with pytest.raises(UserError, match=f"{dev} changed since the dev records were built from it"):
        _run(run_squad, args + [f"--model_dir={tmp_path}/m2"])
    assert not os.path.exists(tmp_path / "m2" / "eval_results.json")
    capsys.readouterr()
    _run(run_squad, args + [f"--predict_file={dev}", f"--model_dir={tmp_path}/m3"])
    assert f"dev: {dev} changed since the records were built" in capsys.readouterr().out


@pytest.mark.parametrize("damage, message", [
    (lambda m: m["splits"]["dev"].pop("num_bytes"), "splits/dev/num_bytes is missing"),
    (lambda m: m["spiece_model"].update(vocab_size="1000"), "spiece_model/vocab_size is a str, not int"),
    (lambda m: m["text"].update(uncased=1), "text/uncased is a int, not bool"),
])
def test_a_damaged_record_manifest_names_the_field(pretrained, tmp_path, damage, message):
    from run import run_classifier
    from tfrecords.manifest import ManifestError

    data = _tiny_task(str(tmp_path / "task"), ["History\tOne.", "History\tTwo."])
    args = TINY[:-1] + [f"--record_dir={tmp_path}/rec", f"--model_dir={tmp_path}/m", "--do_eval",
                        f"--init_checkpoint={pretrained}"]
    _run(run_classifier, args + [f"--data_dir={data}"])
    path = tmp_path / "rec" / "manifest.json"
    manifest = json.loads(path.read_text())
    damage(manifest)
    path.write_text(json.dumps(manifest))
    with pytest.raises(ManifestError, match=f"{path}: {message}"):
        _run(run_classifier, args)


def test_a_vocabulary_too_large_for_the_corpus_says_the_largest_size(tmp_path):
    from tfrecords import spm
    from xlnet_tf.errors import UserError

    with pytest.raises(UserError, match=r"--vocab_size=100000 is too large .* at most (\d+) pieces; use --vocab_size=\1"):
        spm.train_spm([os.path.join(data_fixtures.CORPUS_DIR, "sotu_slice.txt")], str(tmp_path / "sp"),
                      vocab_size=100000)
    assert not os.path.exists(tmp_path / "sp.model")


def test_a_tsv_row_with_an_extra_field_names_file_and_line(tmp_path):
    from tfrecords import classifier_data
    from tfrecords.readers import processors

    data = _tiny_task(str(tmp_path / "task"), ["History\tOne.", "History\tTwo\twith a tab inside."])
    with pytest.raises(classifier_data.DataError, match=r"dev.tsv:3: 3 fields but the header has 2"):
        processors.get_processor("tsv").get_examples(data, "dev")


def test_a_damaged_record_file_is_named(pretrained, tmp_path):
    """Same size, other bytes: the size check passes; TensorFlow's CRC error names no file, ours does."""
    from run import run_classifier
    from tfrecords.manifest import ManifestError

    data = _tiny_task(str(tmp_path / "task"), ["History\tOne.", "History\tTwo."])
    args = TINY[:-1] + [f"--data_dir={data}", f"--record_dir={tmp_path}/rec", f"--model_dir={tmp_path}/m", "--do_eval",
                        f"--init_checkpoint={pretrained}"]
    _run(run_classifier, args)
    path = tmp_path / "rec" / "dev.tfrecord"
    raw = bytearray(path.read_bytes())
    raw[len(raw) // 2] ^= 0xFF
    path.write_bytes(bytes(raw))
    with pytest.raises(ManifestError, match=f"{path}: corrupted record"):
        _run(run_classifier, args)


def test_inspect_records_names_a_damaged_record_file(tmp_path):
    import subprocess
    import sys

    records = tmp_path / "records"
    shutil.copytree(data_fixtures.built_records(num_passes=1, num_shards=2), records)
    path = sorted(records.glob("*.tfrecord"))[0]
    raw = bytearray(path.read_bytes())
    raw[len(raw) // 2] ^= 0xFF
    path.write_bytes(bytes(raw))
    before = _snapshot(records)
    proc = subprocess.run([sys.executable, os.path.join(REPO, "tfrecords", "inspect_records.py"), str(records)],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr[-2000:]
    assert proc.stderr.strip().splitlines()[-1].startswith(f"inspect_records.py: error: {path}: corrupted record at ")
    assert _snapshot(records) == before


def test_an_unusable_sentencepiece_model_is_named(tmp_path):
    from xlnet_tf.errors import UserError
    from xlnet_tf.text.tokenization import XLNetTokenizer

    bad = tmp_path / "spiece.model"
    bad.write_bytes(b"\x00not a model" * 20)
    with pytest.raises(UserError, match=f"{bad} is not a usable SentencePiece model"):
        XLNetTokenizer(str(bad))


@pytest.mark.parametrize("name, message", [
    ("model.safetensors", "is not a readable safetensors file"),
    ("xlnet_model.ckpt.index", "not a readable TF checkpoint"),
])
def test_an_unreadable_checkpoint_is_named_with_the_format_expected(tmp_path, name, message):
    from xlnet_tf import checkpoints
    from xlnet_tf.models import XLNetClassifier

    (tmp_path / name).write_bytes(b"\x13garbage bytes, not a checkpoint" * 40)
    path = str(tmp_path / name).replace(".index", "")
    with pytest.raises(checkpoints.CheckpointMismatchError, match=f"{path} {message}|{path}: {message}"):
        checkpoints.load_init_checkpoint(XLNetClassifier(_config()), path)


@pytest.mark.parametrize("argv, code, called", [(["prog"], None, True), (["prog", "stray"], 2, False)])
def test_run_main_exits_zero_after_a_run_and_refuses_stray_arguments(argv, code, called, capsys):
    """A runner's run() returns its results (a dict): the process still exits 0. A positional argument is
    refused in one line before run() starts."""
    from run import common_flags

    calls = []
    name = f"run_main_probe_{len(argv)}"  # run_main adds its flags to absl's global namespace: one name per case
    fv = flags.FlagValues()
    with pytest.raises(SystemExit) as exit_:
        common_flags.run_main(fv, lambda fv: flags.DEFINE_integer(name, 1, "A probe.", flag_values=fv),
                              lambda: calls.append(1) or {"history": []}, argv=argv)
    assert exit_.value.code == code and bool(calls) == called
    if code:
        assert capsys.readouterr().err.strip().endswith(
            "error: unexpected arguments ['stray']: every option is a flag (--name=value)")
