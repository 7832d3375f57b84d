"""What the tests of the multilingual families share (tests/models/test_m2m100_family.py,
tests/models/test_mbart_family.py, tests/data/test_multilingual_tokenizer.py): the texts, one
teacher-forced batch through both models, transformers' `generate` beside attnseq's decoding,
and each equivalence as one assertion over a stand-in (tests/multilingual_stand_ins.py)."""

import dataclasses
import functools
import json
import shutil
from pathlib import Path
from typing import Any

import pytest
import torch
from marian_stand_ins import UNKNOWN_CHARACTERS
from multilingual_stand_ins import imported, reference

from attnseq.decoding import decode
from attnseq.errors import UserError
from attnseq.models.loading import TrainedModel, load_trained_model

SOURCES = [
    "A man rides his bike across a bridge.",
    "Zwei Hunde spielen im Schnee.",
    f"A woman {UNKNOWN_CHARACTERS} sings.",
    "Enfants.",
]
TARGETS = [
    "Ein Mann fährt mit dem Fahrrad über eine Brücke.",
    "Two dogs play in the snow.",
    "Une femme chante.",
    "Children playing on the beach with a big red ball and a small dog.",
]
TOLERANCE = 1e-5
# another source and target language of each tokenizer kind than its folder's
OTHER_LANGUAGES = {
    "m2m100": ("fr", "en"),
    "nllb": ("deu_Latn", "eng_Latn"),
    "mbart50": ("fr_XX", "en_XX"),
}


def hf_tokenizer(folder: Path, languages: tuple[str, str] | None = None) -> Any:
    """transformers' tokenizer of the folder, set to `languages` (source, target) if given."""
    tokenizer = reference(folder)[1]
    if languages is None:
        languages = (
            imported(folder).tokenizers.src.language,
            imported(folder).tokenizers.tgt.language,
        )
    tokenizer.src_lang, tokenizer.tgt_lang = languages
    return tokenizer


@functools.cache
def with_languages(folder: Path, src: str, tgt: str) -> TrainedModel:
    return load_trained_model(folder, [f"data.src_lang_code={src}", f"data.tgt_lang_code={tgt}"])


def forward_both(
    folder: Path, dtype: torch.dtype = torch.float32
) -> tuple[Any, Any, Any, torch.Tensor]:
    """One teacher-forced batch through both models: (transformers' output, attnseq's output,
    the labels (B, T), -100 at padding, the source mask (B, S))."""
    hf = reference(folder)[0]
    ours = imported(folder).model
    batch = hf_tokenizer(folder)(SOURCES, text_target=TARGETS, return_tensors="pt", padding=True)
    labels = batch["labels"].masked_fill(batch["labels"] == hf.config.pad_token_id, -100)
    start = torch.full((len(SOURCES), 1), ours.bos_id)
    tgt_in = torch.cat([start, batch["labels"][:, :-1]], dim=1)  # (B, T): </s> CODE target
    with torch.no_grad():
        theirs = hf.to(dtype)(
            input_ids=batch["input_ids"],
            attention_mask=batch["attention_mask"],
            decoder_input_ids=tgt_in,
            output_attentions=True,
        )
        lengths = batch["attention_mask"].sum(dim=1)
        mine = ours.to(dtype)(batch["input_ids"], lengths, tgt_in, need_weights=True)
    hf.float(), ours.float()
    return theirs, mine, labels, batch["attention_mask"].bool()


GENERATE = [(1, 1.0, 30, 2), (4, 1.0, 30, 2), (4, 0.6, 20, 3), (4, 0.0, 16, 0), (1, 1.0, 12, 0)]
VALID = 24  # source sentences of Multi30k's validation split (English)


@functools.cache
def valid_sources() -> list[str]:
    from conftest import SHARED_DATA

    return (SHARED_DATA / "multi30k" / "val.en").read_text(encoding="utf-8").splitlines()[:VALID]


def generated(folder: Path, trained: TrainedModel, **settings: Any) -> tuple[list[list[int]], Any]:
    """transformers' outputs (without the start token, EOS and padding) of the sources in
    `trained`'s languages, its forced first token given, and the batch."""
    hf = reference(folder)[0]
    languages = (trained.tokenizers.src.language, trained.tokenizers.tgt.language)
    batch = hf_tokenizer(folder, languages)(valid_sources(), return_tensors="pt", padding=True)
    pad, eos = hf.config.pad_token_id, hf.config.eos_token_id
    forced = trained.cfg.decoding.forced_first_token
    with torch.no_grad():
        out = hf.generate(**batch, bad_words_ids=[[pad]], forced_bos_token_id=forced, **settings)
    outputs = []
    for row in out[:, 1:].tolist():
        row = row[: row.index(eos)] if eos in row else row
        outputs.append([token for token in row if token != pad])
    return outputs, batch


def decoded(trained: TrainedModel, batch: Any, **changes: Any) -> list[list[int]]:
    settings = dataclasses.replace(trained.cfg.decoding, **changes)
    lengths = batch["attention_mask"].sum(dim=1)
    return [
        found[0].tokens for found in decode(trained.model, batch["input_ids"], lengths, settings)
    ]


def generate_and_decode(
    folder: Path, trained: TrainedModel, beam: int, alpha: float, new_tokens: int, ngram: int
) -> tuple[list[list[int]], list[list[int]]]:
    expected, batch = generated(
        folder,
        trained,
        do_sample=False,
        num_beams=beam,
        length_penalty=alpha,
        max_new_tokens=new_tokens,
        no_repeat_ngram_size=ngram,
    )
    got = decoded(
        trained,
        batch,
        beam=beam,
        length_penalty=alpha,
        max_output_ratio=0.0,
        # with a forced EOS, the last of the new tokens is it
        max_output_extra=new_tokens - int(trained.cfg.decoding.eos_at_limit),
        no_repeat_ngram=ngram,
        min_length=0,
    )
    return expected, got


def refused(folder: Path, overrides: list[str] | None = None) -> str:
    with pytest.raises(UserError) as error:
        load_trained_model(folder, overrides)
    message = str(error.value)
    assert "\n" not in message
    return message


def edited_copy(source: Path, tmp_path: Path, name: str = "config.json", **changes: Any) -> Path:
    folder = tmp_path / "model"
    shutil.copytree(source, folder)
    settings = json.loads((folder / name).read_text())
    (folder / name).write_text(json.dumps({**settings, **changes}))
    return folder


def assert_teacher_forcing_matches(folder: Path) -> None:
    """The log-probability of every target token within 1e-5 in fp32, and of every token of
    the vocabulary within 1e-9 in fp64."""
    theirs, mine, labels, _ = forward_both(folder)
    real = labels != -100
    index = labels.clamp(min=0).unsqueeze(-1)
    expected = theirs.logits.log_softmax(-1).gather(-1, index).squeeze(-1)[real]
    got = mine.logits.log_softmax(-1).gather(-1, index).squeeze(-1)[real]
    assert (expected - got).abs().max() < TOLERANCE
    theirs, mine, _, _ = forward_both(folder, torch.float64)
    difference = theirs.logits.log_softmax(-1) - mine.logits.log_softmax(-1)
    assert difference[real].abs().max() < 1e-9


def assert_attention_matches(folder: Path) -> None:
    """Every weight of every real query position within 1e-5: M2M100 gives padding positions
    the zero row where attnseq computes one of its own, and no real position attends to them."""
    theirs, mine, labels, source = forward_both(folder)
    target = labels != -100
    pairs = {
        "cross": (theirs.cross_attentions, mine.attention, target),
        "decoder self": (theirs.decoder_attentions, mine.decoder_self_attention, target),
        "encoder self": (theirs.encoder_attentions, mine.encoder_self_attention, source),
    }
    for name, (layers, weights, queries) in pairs.items():
        expected = torch.stack(layers, dim=1)  # (B, L, H, T, S) as attnseq returns them
        assert expected.shape == weights.shape, name
        difference = (expected - weights).abs().permute(0, 3, 1, 2, 4)  # (B, T, L, H, S)
        assert difference[queries].max() < TOLERANCE, name


def assert_generate_matches(
    folder: Path, beam: int, alpha: float, new_tokens: int, ngram: int
) -> None:
    """The folder's languages: every output token-identical to `generate`'s, the target's
    code first."""
    trained = imported(folder)
    expected, got = generate_and_decode(folder, trained, beam, alpha, new_tokens, ngram)
    code = trained.tokenizers.tgt.language_id()
    assert all(output[0] == code for output in expected)
    assert got == expected


def assert_other_languages_match(folder: Path, kind: str) -> None:
    """data.src_lang_code and data.tgt_lang_code set the source's first token and the forced
    first output token, as transformers' src_lang and forced_bos_token_id do."""
    src, tgt = OTHER_LANGUAGES[kind]
    trained = with_languages(folder, src, tgt)
    pair = trained.tokenizers
    assert (pair.src.language, pair.tgt.language) == (src, tgt)
    assert trained.cfg.decoding.forced_first_token == pair.tgt.codes[tgt]
    batch = hf_tokenizer(folder, (src, tgt))(SOURCES, text_target=TARGETS)
    assert pair.src.encode_batch(SOURCES) == batch["input_ids"]
    assert [[*ids, pair.tgt.eos_id] for ids in pair.tgt.encode_batch(TARGETS)] == batch["labels"]
    expected, got = generate_and_decode(folder, trained, 4, 1.0, 20, 2)
    assert all(output[0] == pair.tgt.codes[tgt] for output in expected)
    assert got == expected
    # the folder's own languages give other outputs
    assert decoded(imported(folder), generated(folder, trained)[1]) != expected


def assert_sampling_starts_with_the_forced_token(folder: Path) -> None:
    trained = imported(folder)
    source = trained.tokenizers.src
    ids = source.encode_batch(valid_sources()[:6])
    lengths = torch.tensor([len(row) for row in ids])
    batch = {
        "input_ids": torch.nn.utils.rnn.pad_sequence(
            [torch.tensor(row) for row in ids], batch_first=True, padding_value=source.pad_id
        ),
        "attention_mask": torch.arange(int(lengths.max())) < lengths.unsqueeze(1),
    }
    code = trained.tokenizers.tgt.language_id()
    drawn = decoded(trained, batch, sample=True, beam=1, num_samples=1, seed=3)
    assert all(tokens[0] == code for tokens in drawn)
    free = decoded(trained, batch, sample=True, beam=1, forced_first_token=None, seed=3)
    assert any(tokens[:1] != [code] for tokens in free)


def assert_same_ids_without_tokenizer_json(folder: Path, tmp_path: Path) -> None:
    """The folder's sentencepiece.bpe.model (and tokenizer_config.json) give the ids its
    tokenizer.json gives."""
    copy = edited_copy(folder, tmp_path)
    (copy / "tokenizer.json").unlink()
    pair, expected = load_trained_model(copy).tokenizers, imported(folder).tokenizers
    for side, other in ((pair.src, expected.src), (pair.tgt, expected.tgt)):
        assert side.encode_batch(SOURCES + TARGETS) == other.encode_batch(SOURCES + TARGETS)
