"""Word alignment files and word ids (attnseq/data/word_alignments.py): Pharaoh and NAACL gold
links, sure and possible files combined, links checked against the sentences' word counts,
the word of each piece for every tokenizer kind."""

from pathlib import Path

import pytest

from attnseq.data.word_alignments import (
    LinkOutsideSentence,
    format_pharaoh,
    read_gold,
    read_gold_file,
    read_naacl,
    read_pharaoh,
    word_counts,
    word_ids,
    write_pharaoh,
)


# ------------------------------------------------------------------------- gold files
def test_read_pharaoh_sure_and_possible_links() -> None:
    sure, possible = read_pharaoh(["0-0 1?2 2-1", "", "3-1 3?1 0?0\n"])
    assert sure == [{(0, 0), (2, 1)}, set(), {(3, 1)}]
    assert possible == [{(0, 0), (1, 2), (2, 1)}, set(), {(3, 1), (0, 0)}]
    with pytest.raises(ValueError, match="line 2: cannot parse link '1:2'"):
        read_pharaoh(["0-0", "1:2"])
    with pytest.raises(ValueError, match="'-1-0'"):
        read_pharaoh(["-1-0"])


def test_read_gold_combines_sure_and_possible_files(tmp_path: Path) -> None:
    (tmp_path / "s").write_text("0-0\n1-1 2?2\n", encoding="utf-8")
    (tmp_path / "p").write_text("0-0 0-1\n1-2\n", encoding="utf-8")
    sure, possible = read_gold(tmp_path / "s", str(tmp_path / "p"))
    assert sure == [{(0, 0)}, {(1, 1)}]
    # union: the sure (1,1) and the sure-file's possible (2,2) stay possible
    assert possible == [{(0, 0), (0, 1)}, {(1, 1), (2, 2), (1, 2)}]
    assert read_gold(tmp_path / "s") == read_pharaoh(tmp_path / "s")
    with pytest.raises(ValueError, match="2 sentences but the possible file has 1"):
        read_gold(tmp_path / "s", ["0-0"])


def test_read_naacl() -> None:
    lines = ["1 1 1 S", "1 2 3 P", "3 2 1", "3 0 4 P", "3 1 2 S 0.8"]
    sure, possible = read_naacl(lines, n_sentences=4)
    assert sure == [{(0, 0)}, set(), {(1, 0), (0, 1)}, set()]  # NULL link (0 4) skipped
    assert possible == [{(0, 0), (1, 2)}, set(), {(1, 0), (0, 1)}, set()]
    assert len(read_naacl(lines)[0]) == 3
    with pytest.raises(ValueError, match="S|P"):
        read_naacl(["1 1 1 X"])


def test_real_wpt03_gold(shared_data: Path) -> None:
    folder = shared_data / "alignments" / "wpt03_enfr"
    sure, possible = read_gold(folder / "test.sure.pharaoh", folder / "test.possible.pharaoh")
    assert len(sure) == len(possible) == 447
    assert sum(map(len, sure)) == 4038
    assert sum(map(len, possible)) == 4038 + 13400  # README: 4,038 S and 13,400 P links
    assert all(s <= p for s, p in zip(sure, possible, strict=True))
    # the sure file alone reads as sure == possible; the NAACL file holds the same links
    assert read_pharaoh(folder / "test.sure.pharaoh") == (sure, sure)
    assert read_naacl(folder / "test.wa.nonullalign", n_sentences=447) == (sure, possible)
    # i = English index, j = French index: every link fits the sentence lengths
    english = (folder / "test.en").read_text(encoding="utf-8").splitlines()
    french = (folder / "test.fr").read_text(encoding="utf-8").splitlines()
    for links, en, fr in zip(possible, english, french, strict=True):
        n_en, n_fr = len(en.split()), len(fr.split())
        assert all(i < n_en and j < n_fr for i, j in links)


# -------------------------------------------------------------------- pieces -> words
def test_word_ids_for_the_three_kinds() -> None:
    assert word_ids(["the", "dog", "."], "word") == [0, 1, 2]
    # spaces (also repeated, leading, trailing) belong to no word
    assert word_ids(list(" ab  c "), "char") == [-1, 0, 0, -1, -1, 1, -1]
    assert word_ids(list("a b"), "char") == [0, -1, 1]
    pieces = ["▁the", "▁un", "believ", "able", "▁cat", ","]
    assert word_ids(pieces, "sentencepiece") == [0, 1, 1, 1, 2, 2]
    # a first piece without "▁" still starts word 0; a lone "▁" starts the word it precedes
    assert word_ids(["un", "▁x"], "sentencepiece") == [0, 1]
    assert word_ids(["▁", "Ö", "▁x"], "sentencepiece") == [0, 0, 1]
    assert word_ids([], "char") == []
    with pytest.raises(ValueError, match="word, char, sentencepiece"):
        word_ids(["a"], "bpe")


def test_pharaoh_round_trip(tmp_path: Path) -> None:
    alignments = [{(0, 0), (2, 1), (1, 1), (10, 3)}, set(), {(3, 0)}]
    write_pharaoh(tmp_path / "a.pharaoh", alignments)
    text = (tmp_path / "a.pharaoh").read_text()
    assert text == "0-0 1-1 2-1 10-3\n\n3-0\n"  # sorted by (source, target), 0-based
    sure, possible = read_pharaoh(tmp_path / "a.pharaoh")
    assert sure == alignments and possible == alignments
    line = format_pharaoh({(1, 2)}, possible={(0, 0), (1, 2)})
    assert line == "0?0 1-2" and read_pharaoh([line]) == ([{(1, 2)}], [{(0, 0), (1, 2)}])


def test_gold_reader_checks_links_against_the_word_counts() -> None:
    lengths, sides = word_counts(["a b c"], ["x y"])
    assert read_gold_file(["0-0 2-1"], lengths=lengths, sides=sides)[0] == [{(0, 0), (2, 1)}]
    with pytest.raises(LinkOutsideSentence, match="link 3-0 .* 3 source and 2 target words"):
        read_gold_file(["0-0 3-0"], lengths=lengths, sides=sides)
    with pytest.raises(LinkOutsideSentence, match="link 0-2"):
        read_gold_file(["0-0 0-2"], lengths=lengths, sides=sides)
