"""bench/domain_shift.py's reading of a set's text (the runners' TSV rows, evaluate_lm's paragraphs)."""

from bench import domain_shift
from tests import data_fixtures


def test_sets_are_read_as_the_runners_and_evaluate_lm_read_them(tmp_path):
    tsv = tmp_path / "dev.tsv"
    tsv.write_text("label\ttext\npositive\tSo lucky today :)\nnegative\t \nnegative\tNot again.\n", encoding="utf-8")
    assert domain_shift.read_documents(str(tsv)) == [["So lucky today :)"], ["Not again."]]  # blank text skipped
    txt = tmp_path / "heldout.txt"
    txt.write_text("First paragraph.\nSecond one.\n\n\nAnother document.\n", encoding="utf-8")
    assert domain_shift.read_documents(str(txt)) == [["First paragraph.", "Second one."], ["Another document."]]
    tokenizer = data_fixtures.tiny_tokenizer()
    from xlnet_tf.text.tokenization import EOD_ID

    stream = domain_shift.set_stream(domain_shift.read_documents(str(txt)), tokenizer, max_tokens=10_000)
    pieces = [tokenizer.encode(t) for t in ("First paragraph.", "Second one.", "Another document.")]
    assert stream["ids"] == pieces[0] + pieces[1] + [EOD_ID] + pieces[2] + [EOD_ID]
    assert abs(stream["pieces_per_word"] - sum(map(len, pieces)) / 6) < 1e-9
    assert len(domain_shift.set_stream(domain_shift.read_documents(str(txt)), tokenizer, max_tokens=3)["ids"]) == 3
