"""XLNet's layouts in numpy (xlnet_tf/text/layout.py, packing.py): the truncation rule against the original's loop,
and each packer's positions, segments, padding side and edge cases, computed by hand."""

import numpy as np
import pytest

from xlnet_tf.text import layout, packing


def _original_truncate(len_a, len_b, budget):
    """The original `_truncate_seq_pair`: pop the last token of the longer list (B on ties) until they fit."""
    a, b = list(range(len_a)), list(range(len_b))
    while len(a) + len(b) > budget:
        (a if len(a) > len(b) else b).pop()
    return len(a), len(b)


def test_shrink_pair_is_the_original_loop():
    for len_a in range(25):
        for len_b in range(25):
            for budget in range(52):
                assert layout.shrink_pair(len_a, len_b, budget) == _original_truncate(len_a, len_b, budget)


def test_pair_layout_left_padded_cls_last():
    f, cut = packing.pack_pair([11, 12], [21], 8)
    assert not cut
    np.testing.assert_array_equal(f["input_ids"], [0, 0, 11, 12, 4, 21, 4, 3])
    np.testing.assert_array_equal(f["segment_ids"], [4, 4, 0, 0, 0, 1, 1, 2])
    np.testing.assert_array_equal(f["attention_mask"], [0, 0, 1, 1, 1, 1, 1, 1])
    assert f["attention_mask"].dtype == np.float32 and f["input_ids"].dtype == np.int32
    f, cut = packing.pack_pair([1, 2, 3, 4, 5, 6], [7, 8, 9], 8)  # budget 5: A 6 -> 3, then the tie pops B
    assert cut
    np.testing.assert_array_equal(f["input_ids"], [1, 2, 3, 4, 7, 8, 4, 3])
    f, cut = packing.pack_pair(list(range(100, 110)), None, 5)  # one text: its first L - 2 ids
    np.testing.assert_array_equal(f["input_ids"], [100, 101, 102, 4, 3])
    assert cut


def test_a_second_text_cut_to_nothing_takes_no_separator():
    """The original tests the truncated B (`if tokens_b:`): a B left with no ids adds no `<sep>` (at L = 4 the
    budget of 1 goes to A). The in-graph packer of earlier versions added the `<sep>` anyway."""
    f, cut = packing.pack_pair([11], [21], 4)
    assert cut
    np.testing.assert_array_equal(f["input_ids"], [0, 11, 4, 3])
    np.testing.assert_array_equal(f["segment_ids"], [4, 0, 0, 2])
    empty, cut = packing.pack_pair([5, 6], [], 6)  # an empty B is no B
    np.testing.assert_array_equal(empty["input_ids"], packing.pack_pair([5, 6], None, 6)[0]["input_ids"])
    assert not cut


def test_choice_layout_keeps_the_tail_of_the_question():
    f, cut = packing.pack_choice([1, 2, 3, 4, 5], [7, 8, 9], 9, max_qa_length=2)
    assert cut  # qa 3 -> its last 2 (the original's), context 5 -> 9 - 3 - 2 = 4
    np.testing.assert_array_equal(f["input_ids"], [1, 2, 3, 4, 4, 8, 9, 4, 3])
    np.testing.assert_array_equal(f["segment_ids"], [0, 0, 0, 0, 0, 1, 1, 1, 2])
    f, _ = packing.pack_choice([1, 2, 3, 4, 5], [7, 8, 9], 9, max_qa_length=2, qa_truncation="head")
    np.testing.assert_array_equal(f["input_ids"], [1, 2, 3, 4, 4, 7, 8, 4, 3])
    with pytest.raises(ValueError, match="qa_truncation must be one of"):
        packing.pack_choice([1], [2], 9, 2, qa_truncation="middle")


def test_squad_window_right_padded_with_answer_mask():
    f = packing.pack_squad_window([11, 12, 13], [21, 22], 10)
    np.testing.assert_array_equal(f["input_ids"], [11, 12, 13, 4, 21, 22, 4, 3, 0, 0])
    np.testing.assert_array_equal(f["segment_ids"], [0, 0, 0, 0, 1, 1, 1, 2, 4, 4])
    np.testing.assert_array_equal(f["attention_mask"], [1, 1, 1, 1, 1, 1, 1, 1, 0, 0])
    np.testing.assert_array_equal(f["p_mask"], [0, 0, 0, 1, 1, 1, 1, 0, 1, 1])
    assert f["cls_index"] == 7 and f["attention_mask"].dtype == np.int32
    with pytest.raises(ValueError, match="9 tokens do not fit max_seq_length 8"):
        packing.pack_squad_window([1] * 5, [2], 8)


def test_padding_side_and_overflow():
    right = packing.pad([5, 6], [0, 2], 4, layout.RIGHT)
    np.testing.assert_array_equal(right["input_ids"], [5, 6, 0, 0])
    with pytest.raises(ValueError, match="exceeds max_seq_length 1"):
        packing.pad([5, 6], [0, 2], 1)
    assert layout.PADDING_SIDE["squad"] == layout.RIGHT and layout.PADDING_SIDE["classifier"] == layout.LEFT
