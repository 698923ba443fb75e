"""eval_results.json (xlnet_tf.artifacts.results): one versioned shape for every runner, recorded as evaluations happen."""

import json

import pytest

from xlnet_tf.artifacts import results


def test_record_appends_replaces_and_picks_best(tmp_path):
    d = str(tmp_path)
    results.record(d, "classifier", "accuracy", 100, {"accuracy": 0.5}, split="dev", checkpoint="c-100")
    results.record(d, "classifier", "accuracy", 200, {"accuracy": 0.7}, split="dev")
    r = results.record(d, "classifier", "accuracy", 300, {"accuracy": 0.6}, split="dev")
    assert [e["step"] for e in r.evaluations] == [100, 200, 300]
    assert r.best("dev")["step"] == 200 and r.last("dev")["step"] == 300
    # a resumed run re-evaluates step 300: replaced, not duplicated
    r = results.record(d, "classifier", "accuracy", 300, {"accuracy": 0.8}, split="dev")
    assert [e["step"] for e in r.evaluations] == [100, 200, 300] and r.best("dev")["accuracy"] == 0.8
    on_disk = json.load(open(tmp_path / "eval_results.json"))
    assert on_disk["schema"] == "xlnet_tf.eval_results" and on_disk["version"] == 3
    assert on_disk["best"] == on_disk["last"] == {
        "dev": {"step": 300, "split": "dev", "checkpoint": None, "accuracy": 0.8}}
    assert results.load(d).to_dict() == on_disk


def test_lower_is_better_for_the_pretraining_loss(tmp_path):
    for step, loss in ((0, 9.0), (100, 5.0), (200, 5.5)):
        r = results.record(str(tmp_path), "pretrain", "loss", step, {"loss": loss}, higher_is_better=False)
    assert r.best(None)["step"] == 100 and r.last(None)["step"] == 200


@pytest.mark.parametrize("legacy, task, key, steps", [
    ([{"step": 0, "loss": 9.0}, {"step": 50, "loss": 6.0}], "pretrain", "loss", [0, 50]),
    ({"checkpoints": [{"step": 10, "accuracy": 0.4}], "best": {}, "last": {"step": 10, "accuracy": 0.4}},
     "classifier", "accuracy", [10]),
    ({"num_predictions": 3, "exact_match": 50.0, "f1": 60.0}, "squad", "f1", [-1]),
])
def test_files_written_before_the_schema_are_read(tmp_path, legacy, task, key, steps):
    (tmp_path / "eval_results.json").write_text(json.dumps(legacy))
    r = results.load(str(tmp_path))
    assert (r.task, r.key, [e["step"] for e in r.evaluations]) == (task, key, steps)


def test_best_and_last_are_per_split(tmp_path):
    """A test-split evaluation of the final weights is never reported as the dev split's best or last (version 1
    took both over every split: after a better test score, "best" was the test evaluation), ties go to the earlier
    step, and a version-1 file is read with its best and last recomputed per split."""
    d = str(tmp_path)
    results.record(d, "race", "accuracy", 40, {"accuracy": 0.30}, split="dev")
    results.record(d, "race", "accuracy", 80, {"accuracy": 0.33}, split="dev")
    results.record(d, "race", "accuracy", 120, {"accuracy": 0.33}, split="dev")
    r = results.record(d, "race", "accuracy", 120, {"accuracy": 0.40}, split="test")
    assert r.splits() == ["dev", "test"]
    assert r.last_step == 120 and results.EvalResults("race", "accuracy").last_step is None
    assert r.best("dev")["step"] == 80 and r.last("dev")["step"] == 120 and r.last("dev")["accuracy"] == 0.33
    assert r.best("test")["accuracy"] == 0.40 and r.best("train") is None
    on_disk = json.load(open(tmp_path / "eval_results.json"))
    assert on_disk["best"]["dev"]["step"] == 80 and on_disk["best"]["test"]["split"] == "test"
    version_1 = {**on_disk, "version": 1, "best": on_disk["best"]["test"], "last": on_disk["last"]["test"]}
    (tmp_path / "eval_results.json").write_text(json.dumps(version_1))
    assert results.load(d).to_dict() == on_disk
    (tmp_path / "eval_results.json").write_text(json.dumps({**on_disk, "version": 4}))
    with pytest.raises(results.ResultsError, match="version 4 is not supported"):
        results.load(d)


def test_selected_reports_every_split_at_the_dev_chosen_step(tmp_path):
    """`selected` is the step dev picks and every split there; `best["test"]` is test's own best over the
    checkpoints (an oracle a reader must not report), here a different step."""
    d = str(tmp_path)
    for step, dev, test in ((100, 0.70, 0.60), (200, 0.65, 0.68)):
        r = results.record(d, "classifier", "accuracy", step, {"accuracy": dev}, split="dev")
        r = results.record(d, "classifier", "accuracy", step, {"accuracy": test}, split="test")
    on_disk = json.load(open(tmp_path / "eval_results.json"))
    assert on_disk["selected"] == {"by": "dev", "step": 100, "evaluations": {
        "dev": {"step": 100, "split": "dev", "checkpoint": None, "accuracy": 0.70},
        "test": {"step": 100, "split": "test", "checkpoint": None, "accuracy": 0.60}}}
    assert on_disk["best"]["test"]["step"] == 200  # the oracle
    # test scored only at the last step: dev's choice stands, test has no evaluation there
    r = results.record(d, "classifier", "accuracy", 100, {"accuracy": 0.9}, split="other")
    assert r.selected()["evaluations"]["other"]["accuracy"] == 0.9
    only_test = results.EvalResults("classifier", "accuracy", evaluations=[
        {"step": 5, "split": "test", "accuracy": 0.5}])
    assert only_test.selected()["by"] == "test" and results.EvalResults("classifier", "accuracy").selected() is None
    # version-2 files (no `selected`) are read and get it derived
    legacy = dict(on_disk, version=2)
    del legacy["selected"]
    (tmp_path / "eval_results.json").write_text(json.dumps(legacy))
    assert results.load(d).to_dict()["selected"]["step"] == 100
