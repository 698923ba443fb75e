"""run/benchmark.py: commands per flag file and the results table."""

import json
import os
import sys

from run import benchmark


def test_command_and_table(tmp_path):
    flagfile = tmp_path / "mrpc.flags"
    flagfile.write_text("--task=mrpc\n--train_steps=10\n")
    name, model_dir, cmd = benchmark.command_for(str(flagfile), str(tmp_path / "out"), "/glue", "--seed=3")
    assert name == "mrpc" and cmd[0] == sys.executable and cmd[1].endswith("run_classifier.py")
    assert "--data_dir=/glue/MRPC" in cmd and cmd[-1] == "--seed=3"
    assert benchmark.runner_for("run/flags/race.flags").endswith("run_race.py")
    assert benchmark.runner_for("squad_v2.flags").endswith("run_squad.py")
    os.makedirs(model_dir)
    json.dump({"best": {"step": 5, "f1": 0.8, "accuracy": 0.7}, "last": {"step": 10, "f1": 0.75, "accuracy": 0.7}},
              open(os.path.join(model_dir, "eval_results.json"), "w"))
    with open(os.path.join(model_dir, "train_history.json"), "w") as f:
        f.write(json.dumps({"examples_per_sec": 10.0}) + "\n" + json.dumps({"examples_per_sec": 20.0}) + "\n")
    row = benchmark.summarize(name, model_dir, 12.34, 0)
    assert row["metric"] == "f1" and row["best"] == 0.8 and row["last"] == 0.75 and row["examples_per_sec"] == 15.0
    table = benchmark.write_table([row], str(tmp_path / "out"))
    assert "| mrpc | f1 | 0.8000 | 5 | 0.7500 | 10 | 15.0 | 12.3 | ok |" in table
    assert json.load(open(tmp_path / "out" / "results.json"))[0]["task"] == "mrpc"


def test_flag_files_parse_with_their_runners():
    from absl import flags
    from absl.testing import flagsaver

    from run import run_classifier, run_race, run_squad  # noqa: F401 (define the flags)

    flag_dir = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "run", "flags")
    names = [n for n in os.listdir(flag_dir)
             if n.endswith(".flags") and not n.startswith(("pretrain", "demo", "transfer_cpu"))]
    assert {"mnli.flags", "qqp.flags", "sst2.flags", "cola.flags", "stsb.flags", "mrpc.flags", "rte.flags",
            "race.flags", "squad_v1.flags", "squad_v2.flags"} <= set(names)
    for name in names:
        with flagsaver.flagsaver():
            flags.FLAGS.unparse_flags()
            flags.FLAGS(["x", f"--flagfile={os.path.join(flag_dir, name)}"])
            assert flags.FLAGS.train_steps > 0 and flags.FLAGS.learning_rate > 0, name


def test_transfer_flag_file_parses_and_names_real_tasks():
    """bench/transfer.py's own flag file (the transfer table's command) and the task flag files it runs."""
    import subprocess
    import sys

    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    code = ("import sys; sys.argv=['transfer', '--flagfile=run/flags/transfer_cpu.flags']; "
            "from bench import transfer; from absl import flags; transfer.define_flags(); flags.FLAGS(sys.argv); "
            "F = flags.FLAGS; tasks = transfer.tasks('labeled'); "
            "assert set(F.tasks) <= set(tasks) and set(F.inits) == set(transfer.INITS), F.tasks; "
            "assert all(__import__('os').path.exists(tasks[t].flagfile) for t in F.tasks); "
            "r = transfer.read_flagfile(F.pretrain_flagfile); assert int(r['n_token']) == F.vocab_size; print('ok')")
    out = subprocess.run([sys.executable, "-c", code], cwd=repo, capture_output=True, text=True, timeout=300)
    assert out.stdout.strip().endswith("ok"), out.stderr[-2000:]
