"""bench.studies.transfer.domain_shift's reading of a set's text (the runners' TSV rows, evaluate_lm's paragraphs)."""

from bench.studies.transfer import domain_shift
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


def test_pieces_the_tokenizer_cannot_spell_are_counted_with_the_characters_behind_them(tmp_path):
    tokenizer = data_fixtures.tiny_tokenizer()
    from xlnet_tf.text.tokenization import UNK_ID

    texts = ["@ann loved it # so good ☃", "@bob no", "plain words here"]
    stream = domain_shift.set_stream([[t] for t in texts], tokenizer, max_tokens=10_000)
    encoded = [tokenizer.encode(t) for t in texts]
    unknown = sum(e.count(UNK_ID) for e in encoded)
    assert unknown >= 4
    assert abs(stream["unknown_piece_share"] - unknown / sum(map(len, encoded))) < 1e-9
    assert stream["unknown_characters"] == "@#☃"  # most frequent first
    clean = domain_shift.set_stream([["plain words here"]], tokenizer, max_tokens=10_000)
    assert (clean["unknown_piece_share"], clean["unknown_characters"]) == (0.0, "")


def test_a_character_in_the_markdown_table_cannot_break_its_row():
    assert domain_shift.markdown_character("@") == "`@`"
    assert domain_shift.markdown_character("|") == "`\\|`"
    assert domain_shift.markdown_character("`") == "`` ` ``"


def test_the_report_table_reads_rows_made_before_the_unknown_count():
    row = {"set": "tweets", "tokens": 100, "pieces_per_word": 2.0, "without_memories_perplexity": 500.0,
           "without_memories_bits_per_character": 3.5, "with_memories_perplexity": 400.0,
           "with_memories_bits_per_character": 3.3}
    out = {"machine": {"cpu": "x", "cores": 2, "vector_extensions": "avx2"}, "checkpoint": "c", "max_tokens": 100,
           "seg_len": 8, "command": "python -m bench.studies.transfer.domain_shift", "rows": [
               row, dict(row, set="spam", unknown_piece_share=0.03, unknown_characters="|@")]}
    md = domain_shift.markdown(out)
    assert "| tweets | 100 | 2.00 | - | 500.0 | 3.500 |" in md
    assert "| spam | 100 | 2.00 | 3.00% (`\\|` `@`) | 500.0 | 3.500 |" in md
