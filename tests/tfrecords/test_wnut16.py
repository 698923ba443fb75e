"""The WNUT 2016 NER set builder (tfrecords/sets/wnut16.py) and its shipped slice (data/finetune/wnut16)."""

import os

import pytest

from tfrecords.readers import conll
from tfrecords.sets import wnut16
from xlnet_tf.text import tagging

SLICE = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "data",
                     "finetune", "wnut16")

RAW = ("@paulwalk\tO\nEmpire\tB-facility\nState\tI-facility\nBuilding\tI-facility\n&amp;\tO\n\t\n"
       "Greek\tB-other\nFestival\tI-other\nat\tO\nSt\tB-geo-loc\nJohns\tI-geo-loc\n\t\n"
       "@paulwalk\tO\nEmpire\tB-facility\nState\tI-facility\nBuilding\tI-facility\n&amp;\tO\n\n"
       "Greek\tB-other\nFestival\tI-other\nat\tO\nSt\tB-facility\nJohns\tI-facility\n")


def test_parse_reads_tab_separated_tweets_and_unescapes_html():
    tweets = wnut16.parse(RAW, "ner.txt")
    assert len(tweets) == 4
    assert tweets[0] == (("@paulwalk", "Empire", "State", "Building", "&"),
                         ("O", "B-facility", "I-facility", "I-facility", "O"))
    assert wnut16.unescape("&lt;3") == "<3" and wnut16.unescape("&nbsp;") == "&nbsp;"  # no whitespace in a word


def test_deduplicate_keeps_the_first_copy_and_counts_disagreeing_ones():
    tweets, dropped, conflicting = wnut16.deduplicate(wnut16.parse(RAW, "ner.txt"))
    assert (len(tweets), dropped, conflicting) == (2, 2, 1)
    assert tweets[1][1] == ("B-other", "I-other", "O", "B-geo-loc", "I-geo-loc")


@pytest.mark.parametrize("line, needle", [("word\tB-person\textra", "ner.txt:1"), ("word\tB-PER", "ner.txt:1"),
                                          ("word", "ner.txt:1")])
def test_parse_refuses_bad_lines_naming_them(line, needle):
    with pytest.raises(wnut16.Wnut16Error, match=needle):
        wnut16.parse(line + "\n", "ner.txt")


def test_the_split_depends_on_the_tweet_only():
    words = ("Pretty", "bad", "storm", "here")
    assert wnut16.split_of(words) == wnut16.split_of(list(words))
    assert {wnut16.split_of((f"tweet{i}",)) for i in range(200)} == set(wnut16.SPLITS)


def test_the_shipped_slice_is_what_the_builder_makes():
    """Its labels are the wnut16 tag set, every tweet sits in the split its hash gives, no tweet is twice."""
    with open(os.path.join(SLICE, "labels.txt"), encoding="utf-8") as f:
        assert f.read().split() == list(tagging.KNOWN_TAGSETS["wnut16"]) == wnut16.labels()
    seen = set()
    for split in ("train", "dev"):
        sentences = conll.read_conll(os.path.join(SLICE, f"{split}.txt"))
        assert len(sentences) == {"train": 200, "dev": 100}[split]
        for s in sentences:
            assert wnut16.split_of(s.words) == split, s.source
            assert s.words not in seen and set(s.labels) <= set(wnut16.labels())
            seen.add(s.words)
            tagging.check_tagset("wnut16", s.labels)
    with open(os.path.join(SLICE, "train.txt"), encoding="utf-8") as f:
        text = f.read()
    assert wnut16.conll_text([(s.words, s.labels) for s in conll.read_conll(os.path.join(SLICE, "train.txt"))]) == text


def test_a_known_tag_set_refuses_other_labels():
    tagging.check_tagset("universal", ["NOUN", "."])
    tagging.check_tagset("my_tags", ["anything"])  # a free name: recorded, not checked
    with pytest.raises(ValueError, match=r"'B-person' is not a universal tag; drop --tagset=universal"):
        tagging.check_tagset("universal", ["NOUN", "B-person"])
