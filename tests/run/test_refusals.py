"""Every runner refuses bad input in one line, before it writes anything, and then runs once corrected.

One table, every entry point of `run/` (the test below fails when a runner has no rows): each row is a command
line that must be refused with a one-line user error matching its pattern (naming the flag, file or field),
after which every file of the test's world (records, model_dirs, checkpoints, data) and of the row's scratch
folder is byte for byte as it was, and no path the row names under the scratch folder was created. The corrected
command of each runner (the row's base, without the bad flag) then succeeds on the same world.

The world is built once: tiny tagging and classifier runs (records + a 2-step model_dir), SQuAD and multiple-choice
records, pretraining records, a tiny pretrained LM (the original checkpoint layout), data files with CR-only line
endings and control characters.
"""

import json
import os
import shutil

import pytest

from tests import data_fixtures

REPO = data_fixtures.REPO_ROOT
DATA = os.path.join(REPO, "data", "finetune")
MODEL = ["--n_layer=1", "--d_model=32", "--n_head=2", "--d_head=16", "--d_inner=64",
         f"--n_token={data_fixtures.TINY_VOCAB}", "--dropout=0.0", "--dropatt=0.0"]
LOOP = ["--train_batch_size=8", "--train_steps=2", "--steps_per_loop=1", "--save_steps=2", "--eval_batch_size=8"]
TAGGER = MODEL + LOOP + ["--spiece_model_file={spm}", "--max_seq_length=32", "--doc_stride=16", "--tagset=universal",
                         "--record_dir={tag_records}", "--model_dir={tag_model}"]
TAGGER_DATA = TAGGER + ["--data_dir={tag_data}"]
CLASSIFIER = MODEL + LOOP + ["--spiece_model_file={spm}", "--max_seq_length=32", "--task=tsv",
                             "--record_dir={cls_records}", "--model_dir={cls_model}"]
CLASSIFIER_DATA = CLASSIFIER + ["--data_dir={cls_data}"]
SQUAD = MODEL + LOOP + ["--spiece_model_file={spm}", "--max_seq_length=64", "--doc_stride=32", "--max_query_length=16",
                        "--record_dir={squad_records}", "--model_dir={tmp}/m", "--init_checkpoint={lm_ckpt}"]
RACE = MODEL + LOOP + ["--spiece_model_file={spm}", "--max_seq_length=48", "--max_qa_length=16",
                       "--record_dir={race_records}", "--model_dir={tmp}/m", "--init_checkpoint={lm_ckpt}"]
PRETRAIN = MODEL + ["--mem_len=16", "--seq_len=32", "--reuse_len=16", "--num_predict=6", "--perm_size=8",
                    "--train_batch_size=4", "--bi_data=true", "--train_steps=1", "--steps_per_loop=1", "--save_steps=1",
                    "--record_dir={pt_records}", "--model_dir={tmp}/m", "--spiece_model={spm}"]
GENERATE = ["--checkpoint={lm}", "--spiece_model={spm}", "--prompt=The war ended", "--max_new_tokens=2",
            "--nojit_compile", "--output={tmp}/out.jsonl"]
EXPORT_LM = ["--task=lm", "--checkpoint={lm}", "--model_dir={lm}", "--export_spiece_model={spm}",
             "--export_dir={tmp}/e", "--export_max_prompt_tokens=16", "--export_max_new_tokens=4",
             "--export_max_batch_size=2"]
EVALUATE_LM = ["--checkpoint={lm}", "--spiece_model={spm}", f"--input_glob={data_fixtures.CORPUS_GLOB}",
               "--seg_len=16", "--mem_len=16", "--max_tokens=64", "--output_json={tmp}/lm.json"]
CONVERT = ["--original_checkpoint={lm}/xlnet_model.ckpt", "--config={lm}/xlnet_config.json", "--output_dir={tmp}/conv"]

# runner, base command line, the bad flags, the one-line message (a regex)
ROWS = [
    # records reused with changed build options, and their text settings
    ("run_tagger", TAGGER_DATA + ["--do_eval"], ["--label_column=1", "--tagset=brown"],
     r"tag_records/manifest.json: the records were built with other settings: label_list: \[.*\] in the records, "
     r"\[.*\] from these flags; tagset: 'universal' in the records, 'brown' from these flags; label_column: -1 in "
     r"the records, 1 from these flags; give the flags"),
    ("run_tagger", TAGGER_DATA + ["--do_eval"], ["--labels_file={tag_labels_reordered}"],
     r"label_list: \['\.', 'ADJ', .*\] in the records, \['X', '\.', 'ADJ', .*\] from these flags"),
    ("run_tagger", TAGGER_DATA + ["--do_eval"], ["--tagset=brown"],
     r"tagset: 'universal' in the records, 'brown' from these flags"),
    ("run_tagger", TAGGER_DATA + ["--do_eval"], ["--label_all_pieces"],
     r"label_all_pieces: False in the records, True from these flags"),
    ("run_tagger", TAGGER_DATA + ["--do_eval"], ["--uncased"], r"text.uncased: False in the records, True from these"),
    ("run_tagger", TAGGER_DATA + ["--do_eval"], ["--doc_stride=8"], r"doc_stride: 16 in the records, 8 from these"),
    ("run_tagger", TAGGER_DATA + ["--do_eval"], ["--max_seq_length=64"],
     r"max_seq_length: 32 in the records, 64 from these flags"),
    ("run_tagger", TAGGER + ["--do_eval"], ["--uncased"], r"text.uncased: False in the records, True given"),
    # ... refused before a fresh model_dir is made (the records are checked first)
    ("run_tagger", TAGGER + ["--do_eval"], ["--do_train", "--model_dir={tmp}/m", "--uncased"],
     r"text.uncased: False in the records, True given"),
    ("run_tagger", TAGGER + ["--do_eval"], ["--do_train", "--model_dir={tmp}/m", "--doc_stride=8"],
     r"doc_stride: 16 in the records, 8 given"),
    ("run_classifier", CLASSIFIER + ["--do_eval"], ["--do_train", "--model_dir={tmp}/m", "--uncased"],
     r"text.uncased: False in the records, True given"),
    # a label list that differs from the model's: refused before the new records are built
    ("run_tagger", TAGGER_DATA + ["--do_eval"], ["--labels_file={tag_labels_reordered}", "--record_dir={tmp}/rec"],
     r"--model_dir=.*tag_model holds a run with other settings.* labels: \['\.', .*\] there, \['X', '\.', .*\] now"),
    # the model_dir of another model; no weights to score
    ("run_tagger", TAGGER_DATA + ["--do_eval"], ["--n_layer=2"], r"--model_dir=.*tag_model.* n_layer: 1 there, 2 now"),
    ("run_tagger", TAGGER_DATA + ["--do_eval"], ["--model_dir={tmp}/fresh"],
     r"--do_eval without --do_train: no checkpoint in --model_dir=.*fresh and no --init_checkpoint"),
    # a named tag set reused for other data (the POS recipe's --tagset=universal on the entity slice)
    ("run_tagger", TAGGER_DATA + ["--do_eval"], ["--data_dir={ner_data}", "--record_dir={tmp}/rec",
                                                 "--model_dir={tmp}/m", "--do_train"],
     r"--tagset=universal with the labels of .*wnut16/train.txt: 'B-company', .* are not universal tags; drop "
     r"--tagset=universal"),
    # a metric applied to labels it does not fit
    ("run_tagger", TAGGER_DATA + ["--do_eval"], ["--metrics=entities"],
     r"--metrics=entities on the labels of --record_dir=.*: '\.', 'ADJ', .* are not entity tags"),
    # data the builder refuses, before any record is written
    ("run_tagger", TAGGER_DATA + ["--do_eval"], ["--data_dir={cr_data}", "--record_dir={tmp}/rec"],
     r"cr_data/train.txt:1: a carriage return inside the line \(CR-only line endings\?\)"),
    ("run_tagger", TAGGER_DATA + ["--do_eval"], ["--data_dir={control_data}", "--record_dir={tmp}/rec"],
     r"control_data/train.txt:3: control character U\+0007"),
    # a process setting TensorFlow reads once: with a step XLA compiles whole, or after TensorFlow loaded
    ("run_classifier", CLASSIFIER + ["--do_eval"], ["--do_train", "--model_dir={tmp}/m", "--xla_clustering=fusible",
                                                    "--jit_compile"],
     r"--xla_clustering=fusible clusters the ops that run outside XLA, but --jit_compile compiles the whole step "
     r"with XLA: give --nojit_compile"),
    ("run_classifier", CLASSIFIER + ["--do_eval"], ["--do_train", "--model_dir={tmp}/m", "--xla_clustering=fusible"],
     r"--xla_clustering=fusible must be set before TensorFlow loads, and this process has loaded it"),
    ("run_classifier", CLASSIFIER_DATA + ["--do_eval"], ["--uncased"],
     r"cls_records/manifest.json: the records were built with other settings: text.uncased: False in the records"),
    ("run_classifier", CLASSIFIER_DATA + ["--do_eval"], ["--max_segments=2"],
     r"max_segments: 1 in the records, 2 from these flags"),
    ("run_classifier", CLASSIFIER + ["--do_eval"], ["--max_seq_length=64"], r"max_seq_length: 32 in the records, 64 given"),
    ("run_classifier", CLASSIFIER + ["--do_eval"], ["--task=sst2"], r"task: 'tsv' in the records, 'sst-2' given"),
    ("run_classifier", CLASSIFIER_DATA + ["--do_eval"], ["--d_inner=128"], r"d_inner: 64 there, 128 now"),
    ("run_classifier", CLASSIFIER_DATA + ["--do_eval"], ["--n_token=2000"],
     rf"{data_fixtures.TINY_VOCAB}-piece SentencePiece model but the model has n_token=2000"),
    ("run_squad", SQUAD + ["--do_eval"], ["--doc_stride=16"], r"doc_stride: 32 in the records, 16 given"),
    ("run_squad", SQUAD + ["--do_eval"], ["--predict_file={squad_dev}", "--max_query_length=8"],
     r"max_query_length: 16 in the records, 8 from these flags"),
    # the sidecar evaluator plans too: it only evaluates, reads built records, waits for the trainer's run
    ("run_classifier", CLASSIFIER + ["--do_eval"], ["--mode=continuous_eval", "--do_train"],
     r"--mode=continuous_eval evaluates checkpoints another process trains: leave out --do_train"),
    ("run_classifier", CLASSIFIER + ["--do_eval"], ["--mode=continuous_eval", "--data_dir={cls_data}"],
     r"--record_dir=.*cls_records: the dev records are missing or stale; the evaluator reads records"),
    ("run_squad", SQUAD + ["--do_eval"], ["--mode=continuous_eval", "--export_dir={spm}"],
     r"--export_dir=.*sp.model is a file"),
    ("run_squad", SQUAD + ["--do_eval"], ["--mode=continuous_eval", "--eval_timeout_seconds=0",
                                         "--eval_poll_seconds=0"],
     r"--model_dir=.*/m: no training run appeared in 0 s"),
    ("run_race", RACE + ["--do_eval"], ["--max_qa_length=32"], r"max_qa_length: 16 in the records, 32 given"),
    ("run_race", RACE + ["--do_eval"], ["--uncased"], r"text.uncased: False in the records, True given"),
    ("pretrain", PRETRAIN, ["--seq_len=64", "--mem_len=32"], r"pt_records/manifest.json: the records were built with other settings: seq_len: 32 in the records, 64 given"),
    ("pretrain", PRETRAIN, ["--mode=continuous_eval"], r"Missing required flag\(s\): --eval_records_dir"),
    ("pretrain", PRETRAIN, ["--mode=continuous_eval", "--eval_records_dir={pt_records}", "--eval_timeout_seconds=0",
                            "--eval_poll_seconds=0"], r"--model_dir=.*/m: no training run appeared in 0 s"),
    ("pretrain", PRETRAIN, ["--n_token=2000"], r"SentencePiece model but the model has n_token=2000"),
    # values the program could not finish, ids outside the vocabulary
    ("generate", GENERATE, ["--max_new_tokens=100000000"], r"--max_new_tokens must be at most 4096"),
    # an output the run could not write when done: refused before the work
    ("generate", GENERATE, ["--output={tmp}/no_folder/out.jsonl"], r"--output=.*/no_folder/out.jsonl: the folder "),
    ("evaluate_lm", EVALUATE_LM, ["--output_json={tmp}"], r"--output_json=.* is a directory; give a file name"),
    ("generate", GENERATE, ["--stop_ids=5000"], r"--stop_ids: \[5000\] outside the model's vocabulary \(ids 0 to 999\)"),
    ("export_savedmodel", EXPORT_LM, ["--export_max_new_tokens=100000"],
     r"--export_max_new_tokens must be at most 4096"),
    ("export_savedmodel", EXPORT_LM, ["--export_dtype=bfloat16"],
     r"--export_dtype=bfloat16 with --task=lm: the LM export's decoding program is XLA-compiled"),
    ("export_savedmodel", EXPORT_LM, ["--export_stop_ids=5000"], r"--export_stop_ids: \[5000\] outside the model's"),
    # an export of weights that were neither trained nor loaded
    ("export_savedmodel", ["--export_dir={tmp}/e"], ["--model_dir={untrained_model}"],
     r"No checkpoint in --model_dir=.*untrained_model; pass --checkpoint"),
    ("evaluate_lm", EVALUATE_LM, ["--input_glob={tmp}/none*.txt"], r"--input_glob=.*none\*\.txt matches no files"),
    ("convert_checkpoint", CONVERT, ["--output_dir={tag_model}"],
     r"--output_dir=.*tag_model holds files a conversion does not write \(ckpt-2.data-00000-of-00001, "),
    ("convert_checkpoint", CONVERT, ["--to_hf", "--checkpoint={untrained_model}"],
     r"No checkpoint in --checkpoint=.*untrained_model: nothing trained to export"),
    ("convert_checkpoint", CONVERT, ["--to_hf", "--checkpoint={tag_model}", "--output_dir={cls_model}"],
     r"--output_dir=.*cls_model holds files a Hugging Face export does not write"),
    ("convert_checkpoint", CONVERT, ["--config={wide_config}"],
     r"lm/xlnet_model.ckpt does not fit the model .* shape mismatches \(3\)"),
    ("benchmark", ["--flagfiles={tiny_flags}", "--results_dir={tmp}/r", "--quick"], ["--flagfiles="],
     r"--flagfiles and --results_dir are required"),
    ("benchmark", ["--flagfiles={tiny_flags}", "--results_dir={tmp}/r", "--quick"],
     ["--flagfiles={tiny_flags},{tmp}/none.flags"], r"--flagfiles: .*none.flags does not exist"),
]
# corrected runs too slow for the default suite (benchmark runs each flag file in its own process:
# tests/run/test_benchmark_runner.py runs it end to end)
SLOW_CORRECTED = {"benchmark"}


def entry_points():
    """The runners of run/: the modules with a command line (`run_main`)."""
    out = []
    for name in sorted(os.listdir(os.path.join(REPO, "run"))):
        if name.endswith(".py") and name != "common_flags.py":
            with open(os.path.join(REPO, "run", name), encoding="utf-8") as f:
                if "common_flags.run_main(" in f.read():
                    out.append(name[:-3])
    return out


def _write(path, text):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", encoding="utf-8", newline="") as f:
        f.write(text)


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    from run import run_classifier, run_tagger
    from tfrecords.pretrain import writer as pretrain_data
    from tfrecords import race_data, squad_data
    from xlnet_tf import checkpoints
    from xlnet_tf.config import XLNetConfig
    from xlnet_tf.models import XLNetPretrainer

    root = tmp_path_factory.mktemp("refusals")
    w = {"spm": data_fixtures.tiny_spm()}
    # tagging: a slice of the shipped Brown POS set, its labels reordered, and two broken copies
    tag = root / "tag_data"
    tag.mkdir()
    for split in ("train", "dev"):
        blocks = open(os.path.join(DATA, "brown_pos", f"{split}.txt"), encoding="utf-8").read().split("\n\n")
        _write(str(tag / f"{split}.txt"), "\n\n".join(blocks[:40]).strip("\n") + "\n")
    labels = open(os.path.join(DATA, "brown_pos", "labels.txt"), encoding="utf-8").read().split()
    _write(str(root / "labels_reordered.txt"), "\n".join(labels[-1:] + labels[:-1]) + "\n")
    train = open(tag / "train.txt", encoding="utf-8").read()
    _write(str(root / "cr_data" / "train.txt"), train.replace("\n", "\r"))
    lines = train.split("\n")
    lines[2] = lines[2].replace("\t", "\x07\t", 1)
    _write(str(root / "control_data" / "train.txt"), "\n".join(lines))
    for broken in ("cr_data", "control_data"):
        shutil.copy(tag / "dev.txt", root / broken / "dev.txt")
    w["ner_data"] = os.path.join(DATA, "wnut16")
    w.update(tag_data=str(tag), tag_labels_reordered=str(root / "labels_reordered.txt"), cr_data=str(root / "cr_data"),
             control_data=str(root / "control_data"), tag_records=str(root / "tag_records"),
             tag_model=str(root / "tag_model"))
    data_fixtures.run_with_flags(run_tagger, _fill(TAGGER_DATA + ["--do_train"], w, root))
    untrained = root / "untrained_model"
    untrained.mkdir()
    for name in ("export_info.json", "xlnet_config.json"):  # a model_dir whose run wrote no checkpoint
        shutil.copy(root / "tag_model" / name, untrained / name)
    w["untrained_model"] = str(untrained)
    # classification: the shipped topic set, a 2-step run
    w.update(cls_data=os.path.join(DATA, "topic"), cls_records=str(root / "cls_records"),
             cls_model=str(root / "cls_model"))
    data_fixtures.run_with_flags(run_classifier, _fill(CLASSIFIER_DATA + ["--do_train"], w, root))
    # SQuAD and multiple-choice records
    squad = json.load(open(os.path.join(DATA, "squad_wordnet", "dev-v1.1.json"), encoding="utf-8"))
    squad["data"] = squad["data"][:2]
    w["squad_dev"] = str(root / "squad_dev.json")
    _write(w["squad_dev"], json.dumps(squad))
    w["squad_records"] = str(root / "squad_records")
    squad_data.build_squad_records(w["spm"], w["squad_records"], predict_file=w["squad_dev"], max_seq_length=64,
                                   doc_stride=32, max_query_length=16, log=None)
    w["race_records"] = str(root / "race_records")
    race_data.build_race_records(os.path.join(DATA, "mc_wordnet"), w["spm"], w["race_records"], max_seq_length=48,
                                 max_qa_length=16, splits=("dev",), task="mc_wordnet", eval_batch_size=8)
    # pretraining records and a tiny pretrained LM (original layout)
    w["pt_records"] = str(root / "pt_records")
    pretrain_data.build_pretrain_records(
        os.path.join(data_fixtures.CORPUS_DIR, "sotu_slice.txt"), w["spm"], w["pt_records"],
        pretrain_data.PretrainConfig(seq_len=32, reuse_len=16, num_predict=6, perm_size=8, global_batch_size=4,
                                     bi_data=True, seed=3), log=None)
    config = XLNetConfig(n_token=data_fixtures.TINY_VOCAB, n_layer=1, d_model=32, n_head=2, d_head=16, d_inner=64)
    lm = root / "lm"
    w["lm_ckpt"] = checkpoints.save_original_checkpoint(XLNetPretrainer(config), str(lm / "xlnet_model.ckpt"))
    config.to_json_file(str(lm / "xlnet_config.json"))
    w["lm"] = str(lm)
    w["wide_config"] = str(root / "wide_config.json")
    config.replace(d_inner=128).to_json_file(w["wide_config"])
    w["tiny_flags"] = str(root / "tiny_topic.flags")  # what benchmark runs (its own records and model_dir)
    _write(w["tiny_flags"], "\n".join(_fill(MODEL + ["--spiece_model_file={spm}", "--max_seq_length=32", "--task=tsv",
                                                    "--data_dir={cls_data}", "--train_batch_size=8"], w, root)) + "\n")
    w["root"] = str(root)
    return w


def _fill(args, world, tmp):
    return [a.format(**world, tmp=tmp) for a in args]


def _everything(world, tmp):
    """What "nothing changed" compares: every file of the world and of the scratch folder."""
    return data_fixtures.snapshot(world["root"]), data_fixtures.snapshot(str(tmp))


def _named_paths(args, tmp):
    """The paths under the scratch folder that a command line names."""
    return [a.split("=", 1)[1] for a in args if "=" in a and a.split("=", 1)[1].startswith(str(tmp))]


def test_every_runner_has_rows_and_a_corrected_run():
    assert sorted({row[0] for row in ROWS}) == entry_points() == sorted(CORRECTED)


@pytest.mark.parametrize("runner, base, bad, message", ROWS, ids=[f"{r[0]}:{' '.join(r[2])}" for r in ROWS])
def test_a_refused_run_names_the_cause_in_one_line_and_changes_nothing(world, tmp_path, runner, base, bad, message):
    import importlib

    from run import common_flags

    module = importlib.import_module(f"run.{runner}")
    args = _fill(base + bad, world, tmp_path)
    before = _everything(world, tmp_path)
    absent = [p for p in _named_paths(args, tmp_path) if not os.path.exists(p)]
    with pytest.raises(common_flags.USER_ERRORS) as caught:
        data_fixtures.run_with_flags(module, args)
    text = str(caught.value)
    assert "\n" not in text.strip(), text
    assert __import__("re").search(message.format(**world, tmp=tmp_path), text), text
    assert _everything(world, tmp_path) == before
    assert not [p for p in absent if os.path.exists(p)]


# each runner's corrected command: its rows' bad flags left out
CORRECTED = {"run_tagger": TAGGER_DATA + ["--do_eval"], "run_classifier": CLASSIFIER_DATA + ["--do_eval"],
             "run_squad": SQUAD + ["--do_eval"], "run_race": RACE + ["--do_eval"], "pretrain": PRETRAIN,
             "generate": GENERATE, "export_savedmodel": EXPORT_LM, "evaluate_lm": EVALUATE_LM,
             "convert_checkpoint": CONVERT, "benchmark": ["--flagfiles={tiny_flags}", "--results_dir={tmp}/r", "--quick"]}


@pytest.mark.parametrize("runner", [pytest.param(r, marks=pytest.mark.slow) if r in SLOW_CORRECTED else r
                                    for r in entry_points()])
def test_the_corrected_run_succeeds(world, tmp_path, runner):
    import importlib

    module = importlib.import_module(f"run.{runner}")
    data_fixtures.run_with_flags(module, _fill(CORRECTED[runner], world, tmp_path))
