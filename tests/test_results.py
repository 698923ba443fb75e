"""eval_results.json (xlnet_tf.results): one versioned shape for every runner, recorded as evaluations happen."""

import json

import pytest

from xlnet_tf import results


def test_record_appends_replaces_and_picks_best(tmp_path):
    d = str(tmp_path)
    results.record(d, "classifier", "accuracy", 100, {"accuracy": 0.5}, split="dev", checkpoint="c-100")
    results.record(d, "classifier", "accuracy", 200, {"accuracy": 0.7}, split="dev")
    r = results.record(d, "classifier", "accuracy", 300, {"accuracy": 0.6}, split="dev")
    assert [e["step"] for e in r.evaluations] == [100, 200, 300]
    assert r.best["step"] == 200 and r.last["step"] == 300
    # a resumed run re-evaluates step 300: replaced, not duplicated
    r = results.record(d, "classifier", "accuracy", 300, {"accuracy": 0.8}, split="dev")
    assert [e["step"] for e in r.evaluations] == [100, 200, 300] and r.best["accuracy"] == 0.8
    on_disk = json.load(open(tmp_path / "eval_results.json"))
    assert on_disk["schema"] == "xlnet_tf.eval_results" and on_disk["version"] == 1
    assert on_disk["best"] == on_disk["last"] == {"step": 300, "split": "dev", "checkpoint": None, "accuracy": 0.8}
    assert results.load(d).to_dict() == on_disk


def test_lower_is_better_for_the_pretraining_loss(tmp_path):
    for step, loss in ((0, 9.0), (100, 5.0), (200, 5.5)):
        r = results.record(str(tmp_path), "pretrain", "loss", step, {"loss": loss}, higher_is_better=False)
    assert r.best["step"] == 100 and r.last["step"] == 200


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
