"""attnseq/data/bart_tokenizer.py: the tokenizer of a Hugging Face BART folder gives the token
ids, pieces, words and decoded texts of transformers' BartTokenizer, and rebuilds from its state
alone. The folders are the random-weight stand-ins of tests/bart_stand_ins.py
(`bart_folders`)."""

import pickle
from pathlib import Path

import pytest

pytest.importorskip("transformers", reason="the BART stand-ins are built with transformers")

from bart_stand_ins import SHAPES, imported, reference  # noqa: E402
from marian_stand_ins import UNKNOWN_CHARACTERS, corpus_lines  # noqa: E402

from attnseq.data.bart_tokenizer import BartTokenizer  # noqa: E402
from attnseq.data.tokenizers import load_tokenizer  # noqa: E402
from attnseq.data.word_alignments import word_ids  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_intra_op_thread")


def tokenizer_texts() -> list[str]:
    from conftest import SHARED_DATA

    texts = [
        line
        for language in ("en", "de")
        for line in corpus_lines(SHARED_DATA, language, 1000, 5000)
    ]
    specials = [
        f"{UNKNOWN_CHARACTERS} and {UNKNOWN_CHARACTERS[0]}x",
        "",
        "   two  spaces  ",
        "a </s> in the text <unk> <pad> <s> and <mask> too",
        "Tab\tand\nnewline",
    ]
    return texts + specials


@pytest.mark.parametrize("shape", SHAPES)
def test_token_ids_are_bart_tokenizers(bart_folders: dict, shape: str) -> None:
    folder = bart_folders[shape]
    _, tokenizer = reference(folder)
    pair = imported(folder).tokenizers
    texts = tokenizer_texts()
    sources, targets = tokenizer(texts)["input_ids"], tokenizer(text_target=texts)["input_ids"]
    assert pair.src.encode_batch(texts) == sources  # every text, batched
    assert [[*ids, pair.tgt.eos_id] for ids in pair.tgt.encode_batch(texts)] == targets
    for index in range(0, len(texts), 4):  # one at a time
        assert pair.src.encode(texts[index]) == sources[index]
        assert [*pair.tgt.encode(texts[index]), pair.tgt.eos_id] == targets[index]
    for text in texts[::50]:  # one piece per id (heatmap labels, word boundaries)
        assert len(pair.src.pieces(text)) == len(pair.src.encode(text))
        assert len(pair.tgt.pieces(text)) == len(pair.tgt.encode(text))
    # decoding stops at the first EOS (a literal </s> in a text is one, as in BartTokenizer)
    outputs = [ids[: ids.index(pair.tgt.eos_id)] for ids in targets[::4]]
    expected = [tokenizer.decode(ids, skip_special_tokens=True) for ids in outputs]
    assert [pair.tgt.decode(ids) for ids in targets[::4]] == expected


def test_words_of_byte_level_pieces(bart_folders: dict) -> None:
    """`word_ids` of kind "bart": a piece after a space starts a word, <s> and </s> are in
    none, a word's bytes split over pieces stay one word."""
    source = imported(bart_folders["tied"]).tokenizers.src
    text = "Zwei Hunde spielen über ☃ Schnee."
    pieces = source.pieces(text)
    words = word_ids(pieces, source.kind)
    assert words[0] == words[-1] == -1 and pieces[0] == "<s>" and pieces[-1] == "</s>"
    assert max(words) + 1 == len(text.split())
    spelled = ["" for _ in text.split()]
    for piece, word in zip(pieces, words, strict=True):
        if word >= 0:
            spelled[word] += piece
    assert [source.pieces_to_text([piece]).strip() for piece in spelled] == text.split()


def test_the_tokenizer_state_holds_its_files(bart_folders: dict, tmp_path: Path) -> None:
    """A BART tokenizer rebuilds from its state alone (JSON, pickle): the folder it was read
    from is not needed."""
    target = imported(bart_folders["untied"]).tokenizers.tgt
    assert isinstance(target, BartTokenizer)
    target.save(tmp_path / "target.json")
    rebuilt = load_tokenizer(tmp_path / "target.json")
    unpickled = pickle.loads(pickle.dumps(target))
    text = f"Two dogs {UNKNOWN_CHARACTERS} play."
    for other in (rebuilt, unpickled):
        assert other == target and other.encode(text) == target.encode(text)
        assert (other.pad_id, other.eos_id, other.bos_id) == (1, 2, 2)  # </s> starts
