"""Char and word tokenizers: special ids, round trips, unknowns, saving and checkpoint state."""

import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import torch

from attnseq.data.generated import make_splits
from attnseq.data.tokenizers import (
    BOS_ID,
    EOS_ID,
    PAD_ID,
    UNK_ID,
    CharTokenizer,
    Tokenizer,
    Vocabulary,
    WordTokenizer,
    load_tokenizer,
    output_ids,
    tokenizer_from_state,
    tokenizer_kinds,
    train_tokenizer,
)


def test_special_ids_are_fixed() -> None:
    assert (PAD_ID, UNK_ID, BOS_ID, EOS_ID) == (0, 1, 2, 3)
    for kind in ("char", "word"):
        tok = train_tokenizer(kind, ["a b"])
        assert (tok.pad_id, tok.unk_id, tok.bos_id, tok.eos_id) == (0, 1, 2, 3)
        assert tok.ids_to_pieces([0, 1, 2, 3]) == ["<pad>", "<unk>", "<s>", "</s>"]


def test_vocabulary_order_frequency_then_alphabetical() -> None:
    vocab = Vocabulary.from_counts(Counter({"b": 2, "c": 5, "a": 2, "d": 1}))
    assert vocab.tokens == ["c", "a", "b", "d"]
    assert [vocab.token_to_id(t) for t in "cabd"] == [4, 5, 6, 7]
    assert len(vocab) == 8
    assert vocab.token_to_id("zzz") == UNK_ID
    assert vocab.id_to_token(99) == "<unk>"
    cut = Vocabulary.from_counts(Counter({"b": 2, "c": 5, "a": 2, "d": 1}), min_freq=2, max_size=2)
    assert cut.tokens == ["c", "a"]
    with pytest.raises(ValueError, match="twice"):
        Vocabulary(["x", "x"])
    with pytest.raises(ValueError, match="twice"):
        Vocabulary(["</s>"])


def test_char_tokenizer_golden_and_round_trip_with_spaces() -> None:
    tok = train_tokenizer("char", ["abba c", "cab"])
    # counts: a 3, b 3, c 2, " " 1 -> a, b (tie: alphabetical), c, " "
    assert isinstance(tok, CharTokenizer)
    assert tok.vocab_size == 4 + 4
    assert tok.encode("ab c") == [4, 5, 7, 6]
    assert tok.pieces("ab c") == ["a", "b", " ", "c"]
    for text in ["ab c", "  cab  ", "c a b", ""]:
        assert tok.decode(tok.encode(text)) == text


def test_word_tokenizer_golden_and_round_trip() -> None:
    tok = train_tokenizer("word", ["the cat sat", "the  dog\tsat", "the end"])
    assert isinstance(tok, WordTokenizer)
    assert tok.ids_to_pieces(range(4, tok.vocab_size)) == ["the", "sat", "cat", "dog", "end"]
    assert tok.encode("the dog sat") == [4, 7, 5]
    assert tok.pieces(" the\n dog  sat ") == ["the", "dog", "sat"]
    assert tok.decode(tok.encode("the  dog\tsat")) == "the dog sat"  # single spaces


def test_unknown_tokens_and_ids() -> None:
    tok = train_tokenizer("word", ["a b c"])
    assert tok.encode("a zebra c") == [tok.encode("a")[0], UNK_ID, tok.encode("c")[0]]
    assert tok.decode(tok.encode("a zebra c")) == "a <unk> c"
    assert tok.decode([4, 999, 5]) == "a <unk> b"  # ids outside the vocabulary
    chars = train_tokenizer("char", ["abc"])
    assert chars.encode("aXc") == [chars.encode("a")[0], UNK_ID, chars.encode("c")[0]]
    # Special tokens typed in text are not control ids (a stray EOS would cut decoding short).
    assert tok.encode("a </s> <s> <pad> b") == [4, UNK_ID, UNK_ID, UNK_ID, 5]


def test_decode_stops_at_eos_and_drops_pad_and_bos() -> None:
    tok = train_tokenizer("word", ["a b c"])
    a, b, c = tok.encode("a b c")
    assert tok.decode([BOS_ID, a, PAD_ID, b, EOS_ID, c, c]) == "a b"
    assert tok.decode(torch.tensor([BOS_ID, c, b, EOS_ID, PAD_ID])) == "c b"  # (T,) tensor
    assert tok.ids_to_pieces(torch.tensor([BOS_ID, c, EOS_ID])) == ["<s>", "c", "</s>"]


def test_output_ids_is_the_rule_every_decoder_follows() -> None:
    assert list(output_ids([BOS_ID, 7, PAD_ID, 99, EOS_ID, 8])) == [7, 99]  # ids >= V kept
    assert list(output_ids(torch.tensor([5, 6]))) == [5, 6]
    assert all(type(i) is int for i in output_ids(torch.tensor([5, 6])))


def test_check_state_names_kind_and_version() -> None:
    state = train_tokenizer("char", ["ab"]).state_dict()
    CharTokenizer.check_state(state, 1)
    with pytest.raises(ValueError, match="for a 'char' tokenizer, not 'word'"):
        WordTokenizer.check_state(state, 1)
    with pytest.raises(ValueError, match="unsupported char tokenizer state version 1"):
        CharTokenizer.check_state(state, 2)


def test_min_freq_and_max_size() -> None:
    texts = ["a a a b b c"]
    assert train_tokenizer("word", texts, min_freq=2).ids_to_pieces([4, 5]) == ["a", "b"]
    assert train_tokenizer("word", texts, min_freq=2).vocab_size == 6
    assert train_tokenizer("word", texts, max_size=1).vocab_size == 5
    assert train_tokenizer("word", texts, max_size=1).encode("b") == [UNK_ID]


def test_training_is_deterministic_regardless_of_text_order() -> None:
    pairs = make_splits("dates", {"train": 500}, seed=0)["train"]
    texts = [src for src, _ in pairs]
    assert train_tokenizer("char", texts) == train_tokenizer("char", texts[::-1])


def _checkpoint_like(tok: Tokenizer) -> dict[str, Any]:
    return {"tokenizers": {"src": tok.state_dict()}, "step": 3}


@pytest.mark.parametrize("kind", ["char", "word"])
def test_state_dict_round_trip_through_torch_save_weights_only(kind: str, tmp_path: Path) -> None:
    tok = train_tokenizer(kind, ["the 3rd of March 1998", "Mar 3 '98 ünïcode"])
    state = tok.state_dict()
    assert state["kind"] == kind
    json.dumps(state)  # plain values only
    path = tmp_path / "ckpt.pt"
    torch.save(_checkpoint_like(tok), path)
    loaded = torch.load(path, weights_only=True)
    restored = tokenizer_from_state(loaded["tokenizers"]["src"])
    assert type(restored) is type(tok)
    assert restored == tok
    text = "the 3rd of Mar ü"
    assert restored.encode(text) == tok.encode(text)


@pytest.mark.parametrize("kind", ["char", "word"])
def test_save_load_json(kind: str, tmp_path: Path) -> None:
    tok = train_tokenizer(kind, ["x y z", "z z y ß"])
    path = tmp_path / f"{kind}.json"
    tok.save(path)
    assert json.loads(path.read_text(encoding="utf-8"))["kind"] == kind
    for restored in (load_tokenizer(path), Tokenizer.load(path), type(tok).load(path)):
        assert restored == tok
        assert restored.decode(restored.encode("z y ß")) == "z y ß"
    other = WordTokenizer if kind == "char" else CharTokenizer
    with pytest.raises(ValueError, match="not"):
        other.load(path)


def test_bad_states_and_kinds() -> None:
    assert set(tokenizer_kinds()) >= {"char", "word"}
    with pytest.raises(ValueError, match="valid kinds: char, word"):
        tokenizer_from_state({"kind": "bpe"})
    with pytest.raises(ValueError, match="valid kinds"):
        train_tokenizer("bpe", ["a"])
    state = train_tokenizer("word", ["a"]).state_dict()
    with pytest.raises(ValueError, match="special tokens"):
        tokenizer_from_state({**state, "specials": ["<pad>", "<s>", "<unk>", "</s>"]})
    with pytest.raises(ValueError, match="version"):
        tokenizer_from_state({**state, "version": 99})


def test_load_rejects_non_json(tmp_path: Path) -> None:
    path = tmp_path / "vocab.json"
    path.write_text("not json", encoding="utf-8")
    with pytest.raises(ValueError, match="not a saved tokenizer"):
        load_tokenizer(path)
