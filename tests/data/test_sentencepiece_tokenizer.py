"""SentencePiece tokenizer: ids shared with the other kinds, round trips on real text,
checkpoint-safe state, and the training cache."""

import io
from pathlib import Path

import pytest
import torch

import attnseq.data.sentencepiece_tokenizer as spm_module
from attnseq.data.sentencepiece_tokenizer import SentencePieceTokenizer, train_sentencepiece
from attnseq.data.tokenizers import (
    BOS_ID,
    EOS_ID,
    PAD_ID,
    UNK_ID,
    Tokenizer,
    tokenizer_from_state,
    tokenizer_kinds,
    train_tokenizer,
)

N_LINES = 200


@pytest.fixture
def cache(cache: Path) -> Path:
    """The sentencepiece models' folder of conftest.py's private cache."""
    return cache / "spm"


@pytest.fixture
def multi30k_lines(shared_data: Path) -> dict[str, list[str]]:
    lines: dict[str, list[str]] = {}
    for lang in ("de", "en"):
        with (shared_data / f"multi30k/train.{lang}").open(encoding="utf-8") as source:
            lines[lang] = [next(source).rstrip("\n") for _ in range(N_LINES)]
    return lines


@pytest.mark.parametrize("model_type", ["bpe", "unigram"])
def test_round_trip_on_real_text(
    cache: Path, multi30k_lines: dict[str, list[str]], model_type: str
) -> None:
    texts = multi30k_lines["de"] + multi30k_lines["en"]
    tok = train_sentencepiece(texts, vocab_size=500, model_type=model_type)
    assert tok.vocab_size == 500
    for text in texts:
        ids = tok.encode(text)
        assert ids and min(ids) > EOS_ID  # no specials from text, no BOS/EOS added
        # SentencePiece restores the spacing itself (runs of spaces collapse to one).
        assert tok.decode(ids) == " ".join(text.split())
        assert len(tok.pieces(text)) == len(ids)
        assert tok.ids_to_pieces(ids) == tok.pieces(text)
    assert tok.encode_batch(texts[:5]) == [tok.encode(text) for text in texts[:5]]


# Texts whose spacing, normalization or characters could make a word's ids depend on its
# neighbours: runs of spaces, other whitespace, characters NFKC turns into spaces or removes,
# combining marks after a space, the meta symbol itself, full-width forms, control characters.
AWKWARD_TEXTS = [
    "a  b",
    "  lead",
    "trail  ",
    "a\tb",
    "tab\t\tx",
    "a\u00a0b",
    "a \u00a0 b",
    "\u00a0",
    "x \u200b y",
    "\u200b",
    "a \u0301 b",
    "é e\u0301",
    "ｱ ﾞ",
    "a▁b",
    "▁",
    "a\u3000b",
    "Ａ Ｂ",
    "①２",
    "x\u2028y",
    " ",
    "",
    "a\x01b",
    "ﬁ ﬂ",
    "Å Å",
    "\ufeffa b",
    "a \ufe0f b",
]


@pytest.mark.parametrize("model_type", ["bpe", "unigram"])
def test_encode_flat_gives_the_library_ids_word_by_word(
    cache: Path,
    multi30k_lines: dict[str, list[str]],
    model_type: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    texts = multi30k_lines["de"] + multi30k_lines["en"]
    tok = train_sentencepiece(texts, vocab_size=300, model_type=model_type)
    probe = AWKWARD_TEXTS + texts + [text.upper() for text in texts] + AWKWARD_TEXTS
    expected = [tok.encode(text) for text in probe]  # the library, one text at a time
    assert tok.encode_batch(probe) == expected
    assert tok.encode_batch(probe) == expected  # every word known now
    flat, lengths = tok.encode_flat(probe)
    assert flat.dtype == "int32" and lengths.tolist() == [len(ids) for ids in expected]
    assert tok.encode_batch([]) == [] and tok.encode_batch([""]) == [[]]
    assert tok.encode_batch(["a\x00b", "c d"]) == [tok.encode("a\x00b"), tok.encode("c d")]
    monkeypatch.setattr(spm_module, "WORD_CACHE_SIZE", 50)  # the known words start again
    fresh = SentencePieceTokenizer(tok.model_proto)
    assert fresh.encode_batch(probe[:40]) + fresh.encode_batch(probe[40:]) == expected


def test_special_ids_match_the_other_tokenizers(cache: Path) -> None:
    tok = train_sentencepiece(["a small corpus", "of two lines"], vocab_size=40)
    assert (tok.pad_id, tok.unk_id, tok.bos_id, tok.eos_id) == (0, 1, 2, 3)
    assert tok.ids_to_pieces([PAD_ID, UNK_ID, BOS_ID, EOS_ID]) == ["<pad>", "<unk>", "<s>", "</s>"]
    ids = tok.encode("a small")
    # decode: drops <s> and <pad>, stops at </s>, writes out-of-range ids as <unk>
    assert tok.decode([BOS_ID, *ids, EOS_ID, *tok.encode("lines"), PAD_ID]) == "a small"
    assert tok.decode(torch.tensor([BOS_ID, *ids, PAD_ID])) == "a small"
    assert tok.decode([*ids, 10_000]) == "a small<unk>"
    assert tok.ids_to_pieces([10_000]) == ["<unk>"]
    assert EOS_ID not in tok.encode("text with </s> in it")


def test_tiny_corpus_gets_a_smaller_vocabulary(cache: Path) -> None:
    for model_type in ("bpe", "unigram"):
        tok = train_sentencepiece(["abc abd", "abe"], vocab_size=8000, model_type=model_type)
        assert 4 < tok.vocab_size < 8000
        assert tok.decode(tok.encode("abd abe")) == "abd abe"


def test_state_survives_torch_save_and_json(cache: Path, tmp_path: Path) -> None:
    tok = train_sentencepiece(["ein Hund läuft", "a dog runs"], vocab_size=30)
    assert "sentencepiece" in tokenizer_kinds()
    buffer = io.BytesIO()
    torch.save({"tokenizers": {"src": tok.state_dict()}}, buffer)
    buffer.seek(0)
    state = torch.load(buffer, weights_only=True)["tokenizers"]["src"]
    rebuilt = tokenizer_from_state(state)
    assert isinstance(rebuilt, SentencePieceTokenizer)
    assert rebuilt == tok and rebuilt.model_proto == tok.model_proto
    assert rebuilt.encode("ein Hund") == tok.encode("ein Hund")
    tok.save(tmp_path / "spm.json")
    assert Tokenizer.load(tmp_path / "spm.json") == tok


def test_training_is_cached(cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    texts = ["the cat sat on the mat", "the dog sat on the log"]
    calls: list[int] = []
    real_train = spm_module._train_model_proto

    def counting(*args: object, **kwargs: object) -> bytes:
        calls.append(1)
        return real_train(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(spm_module, "_train_model_proto", counting)
    first = train_sentencepiece(texts, vocab_size=30)
    assert len(calls) == 1 and len(list(cache.glob("*.model"))) == 1
    second = train_sentencepiece(texts, vocab_size=30)
    assert len(calls) == 1 and second == first  # loaded, not trained
    train_sentencepiece(texts, vocab_size=31)  # other settings: another model
    train_sentencepiece([*texts, "one more"], vocab_size=30)  # other texts: another model
    assert len(calls) == 3 and len(list(cache.glob("*.model"))) == 3


def test_registered_train_options(cache: Path) -> None:
    tok = train_tokenizer(
        "sentencepiece", ["hello world", "hello there"], vocab_size=25, model_type="unigram"
    )
    assert isinstance(tok, SentencePieceTokenizer) and tok.vocab_size <= 25
    with pytest.raises(ValueError, match="unknown sentencepiece options"):
        train_tokenizer("sentencepiece", ["x"], size=3)
    with pytest.raises(ValueError, match="model_type"):
        train_sentencepiece(["x y"], model_type="word")


def test_a_vocabulary_too_small_for_the_data_is_a_user_error(tmp_path, monkeypatch) -> None:
    """sentencepiece refuses a vocabulary smaller than the characters it must keep; attnseq
    says so in one line (the value depends on the data, so the config check cannot know)."""
    from helpers import tiny_config

    from attnseq.errors import UserError
    from attnseq.training.run import run_training

    monkeypatch.setenv("ATTNSEQ_CACHE", str(tmp_path / "cache"))
    cfg = tiny_config("data.tokenizer=sentencepiece", "data.spm_vocab_size=8")
    with pytest.raises(UserError, match=r"data.spm_vocab_size=8\): Vocabulary size is smaller"):
        run_training(cfg, tmp_path / "run")
    assert not (tmp_path / "run" / "checkpoints").exists()


class CountedTexts:
    """Texts that count how often they are read and which one was read last."""

    def __init__(self, texts: list[str]) -> None:
        self.texts, self.passes = texts, 0

    def __iter__(self):
        self.passes += 1
        yield from self.texts


def test_trains_on_a_streamed_sample(
    cache: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """data.spm_input_sentence_size: the trainer gets the texts as a stream (an iterator, not a
    list) and keeps a sample of that many; the corpus is read twice (hash, then training)."""
    words = [f"w{i}" for i in range(60)]
    texts = CountedTexts([" ".join(words[i : i + 5]) for i in range(50)] * 8)
    received: list[tuple[str, int]] = []
    real_run = spm_module._run_trainer

    def spying(corpus, settings, model) -> None:
        stream = iter(corpus) is corpus and not isinstance(corpus, list)
        received.append((stream, settings["input_sentence_size"]))
        real_run(corpus, settings, model)

    monkeypatch.setattr(spm_module, "_run_trainer", spying)
    with caplog.at_level("INFO", logger="attnseq"):
        sampled = train_sentencepiece(texts, vocab_size=40, input_sentence_size=150)
    assert texts.passes == 2 and received == [(True, 150)]
    assert "on 400 texts (a sample of 150)" in caplog.text
    assert sampled.vocab_size <= 40
    whole = train_sentencepiece(texts, vocab_size=40, input_sentence_size=0)
    assert received[1] == (True, 0)
    assert len(list(cache.glob("*.model"))) == 2  # the sample size is part of the cache key
    assert whole.encode("w1 w2 w3") and sampled.encode("w1 w2 w3")
    for wrong in (-1, 40):
        with pytest.raises(ValueError, match="input_sentence_size must be 0 .every text. or > 100"):
            train_sentencepiece(texts, input_sentence_size=wrong)
