"""What the tests of the multilingual families share (tests/models/test_m2m100_family.py,
tests/models/test_mbart_family.py, tests/data/test_multilingual_tokenizer.py): the texts, the
tokenizer set to a pair of languages, `generate` in those languages beside attnseq's decoding,
and each equivalence as one assertion over a stand-in (tests/multilingual_stand_ins.py); what
every pretrained family shares is in tests/pretrained_checks.py."""

import functools
from pathlib import Path
from typing import Any

import torch
from marian_stand_ins import UNKNOWN_CHARACTERS
from multilingual_stand_ins import imported, reference
from pretrained_checks import (
    assert_attention_weights_match,
    assert_log_probabilities_match,
    decoded,
    edited_copy,
    generate_outputs,
    teacher_forced,
    valid_sources,
)

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


def teacher_forced_batch(folder: Path) -> Any:
    """SOURCES and TARGETS tokenized in the folder's languages (the labels </s> CODE target)."""
    return hf_tokenizer(folder)(SOURCES, text_target=TARGETS, return_tensors="pt", padding=True)


def forward_both(folder: Path, dtype: torch.dtype = torch.float32) -> tuple[Any, Any, Any]:
    """One teacher-forced batch through both models in the folder's languages."""
    batch = teacher_forced_batch(folder)
    return teacher_forced(reference(folder)[0], imported(folder).model, batch, dtype)


GENERATE = [(1, 1.0, 30, 2), (4, 1.0, 30, 2), (4, 0.6, 20, 3), (4, 0.0, 16, 0), (1, 1.0, 12, 0)]


def generated(folder: Path, trained: TrainedModel, **settings: Any) -> tuple[list[list[int]], Any]:
    """transformers' outputs of the sources in `trained`'s languages, its forced first token
    given, and the batch."""
    languages = (trained.tokenizers.src.language, trained.tokenizers.tgt.language)
    batch = hf_tokenizer(folder, languages)(valid_sources("en"), return_tensors="pt", padding=True)
    forced = trained.cfg.decoding.forced_first_token
    hf = reference(folder)[0]
    return generate_outputs(hf, batch, forced_bos_token_id=forced, **settings), batch


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


def assert_teacher_forcing_matches(folder: Path) -> None:
    assert_log_probabilities_match(lambda dtype: forward_both(folder, dtype))


def assert_attention_matches(folder: Path) -> None:
    """Every weight of every real query position: M2M100 gives padding positions the zero row
    where attnseq computes one of its own, and no real position attends to them."""
    batch = teacher_forced_batch(folder)
    theirs, mine, labels = teacher_forced(reference(folder)[0], imported(folder).model, batch)
    source = batch["attention_mask"].bool()
    assert_attention_weights_match(theirs, mine, target=labels != -100, source=source)


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
    ids = source.encode_batch(valid_sources("en")[:6])
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
