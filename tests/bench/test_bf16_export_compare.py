"""bench/speed/bf16_export_compare.py's counts: a label that changes where float32's top two logits are further apart
than twice the exports' largest logit difference is counted apart from one that changes at a near-tie."""

import numpy as np

from bench.speed import bf16_export_compare


def test_labels_that_differ_are_split_into_near_ties_and_the_rest():
    f32 = np.array([[2.0, 0.0], [0.51, 0.50], [1.0, 0.0], [0.0, 1.0]], np.float32)
    b16 = np.array([[2.0, 0.0], [0.50, 0.51], [1.0, 0.0], [0.0, 1.0]], np.float32)
    r = bf16_export_compare.compare(f32, b16, ["a", "a", "a", "b"], ["a", "b", "b", "b"], ["a", "b", "a", "b"])
    assert (r["labels_differ"], r["differ_at_near_ties"], r["differ_elsewhere"]) == (2, 1, 1)
    assert r["rows_beyond_near_tie"] == 3  # the second row's margin (0.01) is within twice the difference
    assert abs(r["max_logit_difference"] - 0.01) < 1e-6
    assert (r["accuracy_float32"], r["accuracy_bfloat16"]) == (0.75, 0.75)


def test_the_tsv_reader_skips_the_header_and_keeps_quotes(tmp_path):
    path = tmp_path / "dev.tsv"
    path.write_text('label\ttext\nx\tSaid "hi" there\ny\tplain\n', encoding="utf-8")
    assert bf16_export_compare.read_tsv(str(path)) == (["x", "y"], ['Said "hi" there', "plain"])
