"""bench/labelled_paths.py: every LABEL=PATH flag of the benchmarks refuses the same mistakes in one line."""

import pytest

from bench import cli, labelled_paths
from bench.studies.transfer import domain_shift
from xlnet_tf.errors import UserError


def test_entries_are_read_in_order_and_a_kept_word_is_its_own_path(tmp_path):
    a, b = tmp_path / "a.tsv", tmp_path / "b=c.tsv"
    a.write_text("x")
    b.write_text("x")
    parsed = labelled_paths.parse("sets", [f"tweets={a}", f"spam={b}", "random"], keep=("random",))
    assert list(parsed.items()) == [("tweets", str(a)), ("spam", str(b)), ("random", "random")]
    assert labelled_paths.parse("x", ["1x=/not/made/yet.json"], exists=None) == {"1x": "/not/made/yet.json"}


@pytest.mark.parametrize("entries, message", [
    (["tweets"], "--sets: 'tweets' is not LABEL=PATH"), (["=a"], "is not LABEL=PATH"), (["a="], "is not LABEL=PATH"),
    (["a=/nonexistent/file.tsv"], "--sets: a=/nonexistent/file.tsv does not exist"),
])
def test_a_bad_entry_is_a_one_line_error_naming_the_flag(entries, message):
    with pytest.raises(UserError, match=message):
        labelled_paths.parse("sets", entries)


def test_a_label_given_twice_is_refused_not_overwritten(tmp_path):
    path = tmp_path / "a.tsv"
    path.write_text("x")
    with pytest.raises(ValueError, match="--sets: the label 'a' is given twice"):
        labelled_paths.parse("sets", [f"a={path}", f"a={path}"], error=ValueError)


def test_domain_shift_refuses_a_set_without_a_path_before_loading_anything():
    cli.parse(domain_shift.FLAGS, domain_shift.define_flags, ["--checkpoint=x", "--spiece_model=y", "--sets=tweets"])
    with pytest.raises(UserError, match="--sets: 'tweets' is not LABEL=PATH"):
        domain_shift.main()
