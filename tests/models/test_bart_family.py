"""A Hugging Face BART model read as attnseq's own transformer (attnseq/models/bart_family.py)
computes what transformers' BartForConditionalGeneration computes: the same teacher-forced
log-probabilities and attention weights in fp32, the same greedy and beam outputs as
`generate` (the decoder starting from </s>, <s> forced first, </s> forced at the limit). The
models are the random-weight stand-ins of
tests/bart_stand_ins.py (`bart_folders`); bad folders are refused in one line."""

import shutil
from pathlib import Path
from typing import Any

import pytest
import torch

pytest.importorskip("transformers", reason="the reference models are transformers' own")

from bart_stand_ins import SHAPES, imported, reference  # noqa: E402
from marian_stand_ins import UNKNOWN_CHARACTERS  # noqa: E402
from pretrained_checks import (  # noqa: E402
    assert_attention_weights_match,
    assert_log_probabilities_match,
    decoded,
    edited_copy,
    generate_outputs,
    refused,
    teacher_forced,
    valid_sources,
)

from attnseq.config.choices import Activation, Positions  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_intra_op_thread")

SOURCES = [
    "A man rides his bike across a bridge.",
    "Zwei Hunde spielen im Schnee.",
    f"A woman {UNKNOWN_CHARACTERS} sings.",
    "Children.",
]
TARGETS = [
    "Ein Mann fährt mit dem Fahrrad über eine Brücke.",
    "Two dogs play in the snow.",
    "A woman sings.",
    "Children playing on the beach with a big red ball and a small dog.",
]


def forward_both(folder: Path, dtype: torch.dtype = torch.float32) -> tuple[Any, Any, Any]:
    """One teacher-forced batch through both models (the labels <s> target </s>)."""
    hf, tokenizer = reference(folder)
    batch = tokenizer(SOURCES, text_target=TARGETS, return_tensors="pt", padding=True)
    return teacher_forced(hf, imported(folder).model, batch, dtype)


@pytest.mark.parametrize("shape", SHAPES)
def test_teacher_forced_log_probabilities_match(bart_folders: dict, shape: str) -> None:
    assert_log_probabilities_match(lambda dtype: forward_both(bart_folders[shape], dtype))


@pytest.mark.parametrize("shape", SHAPES)
def test_every_attention_weight_matches(bart_folders: dict, shape: str) -> None:
    theirs, mine, _ = forward_both(bart_folders[shape])
    assert_attention_weights_match(theirs, mine)


# (num_beams, length_penalty, max_new_tokens, no_repeat_ngram_size). generate's n-grams
# count the start token </s>, which is EOS: size 1 would forbid EOS, attnseq's does not
GENERATE = [(1, 1.0, 30, 2), (4, 1.0, 30, 2), (4, 0.6, 20, 3), (4, 0.0, 16, 0), (1, 1.0, 12, 0)]


def generated(folder: Path, **settings: Any) -> tuple[list[list[int]], Any]:
    """transformers' outputs of Multi30k's English validation sources, and the batch."""
    hf, tokenizer = reference(folder)
    batch = tokenizer(valid_sources("en"), return_tensors="pt", padding=True)
    return generate_outputs(hf, batch, **settings), batch


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize(("beam", "alpha", "new_tokens", "ngram"), GENERATE)
def test_greedy_and_beam_outputs_match_generate(
    bart_folders: dict, shape: str, beam: int, alpha: float, new_tokens: int, ngram: int
) -> None:
    folder = bart_folders[shape]
    expected, batch = generated(
        folder,
        do_sample=False,
        num_beams=beam,
        length_penalty=alpha,
        max_new_tokens=new_tokens,
        no_repeat_ngram_size=ngram,
    )
    assert all(output[0] == 0 for output in expected)  # <s> forced first
    got = decoded(
        imported(folder),
        batch,
        beam=beam,
        length_penalty=alpha,
        max_output_ratio=0.0,
        max_output_extra=new_tokens - 1,  # the last of the new tokens is the forced EOS
        no_repeat_ngram=ngram,
        min_length=0,
    )
    assert got == expected


def test_the_imported_decoding_is_generates_own(bart_folders: dict) -> None:
    """The stand-in's generation_config.json (num_beams 4, max_length 24, forced <s> and
    </s>) becomes the checkpoint's decoding.*: attnseq decodes as a plain `generate()`."""
    folder = bart_folders["tied"]
    expected, batch = generated(folder)
    decoding = imported(folder).cfg.decoding
    assert (decoding.beam, decoding.max_output_extra, decoding.eos_at_limit) == (4, 22, True)
    assert decoding.forced_first_token == 0 and decoding.length_penalty_offset == 0
    assert decoded(imported(folder), batch) == expected
    # without the forced first token the outputs are the model's own choice: others
    assert decoded(imported(folder), batch, forced_first_token=None) != expected


def test_sampling_starts_with_the_forced_token(bart_folders: dict) -> None:
    folder = bart_folders["untied"]
    _, tokenizer = reference(folder)
    batch = tokenizer(valid_sources("en")[:6], return_tensors="pt", padding=True)
    drawn = decoded(imported(folder), batch, sample=True, beam=1, num_samples=1, seed=3)
    assert all(tokens[0] == 0 for tokens in drawn)
    free = decoded(imported(folder), batch, sample=True, beam=1, forced_first_token=None, seed=3)
    assert any(tokens[:1] != [0] for tokens in free)


# ------------------------------------------------------------------------------ the config
def test_the_config_is_barts(bart_folders: dict) -> None:
    tied = imported(bart_folders["tied"]).cfg.model
    assert tied.positions is Positions.learned and tied.position_offset == 2
    assert tied.embed_norm and tied.output_bias and tied.norm.value == "post"
    assert tied.activation is Activation.gelu and not tied.scale_embeddings
    assert tied.tie_embeddings and tied.share_src_tgt_embeddings
    assert (tied.d_model, tied.heads, tied.enc_layers, tied.ff_dim) == (32, 4, 2, 64)
    untied = imported(bart_folders["untied"])
    model = untied.cfg.model
    assert model.activation is Activation.gelu_tanh and model.scale_embeddings
    assert not model.tie_embeddings and not model.share_src_tgt_embeddings
    module = untied.model
    assert module.src_positions.table.weight.shape == (64 + 2, 48)
    assert module.src_embed.weight.data_ptr() != module.tgt_embed.weight.data_ptr()


def test_a_saved_import_needs_neither_its_folder_nor_the_network(
    bart_folders: dict, tmp_path: Path
) -> None:
    import attnseq

    folder = tmp_path / "model"
    shutil.copytree(bart_folders["tied"], folder)
    model = attnseq.load(folder, "cpu")
    expected = model.translate(SOURCES, beam=2, nbest=2)
    saved = model.save(tmp_path / "saved.pt")
    shutil.rmtree(folder)
    again = attnseq.load(saved, "cpu")
    assert again.translate(SOURCES, beam=2, nbest=2) == expected
    assert again.tokenizers.src.kind == "bart"


# ------------------------------------------------------------------------------ refusals
@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"decoder_attention_heads": 2}, "encoder_attention_heads=4 and decoder_attention_heads=2"),
        ({"activation_function": "tanh"}, "activation_function 'tanh'; attnseq has relu"),
        ({"vocab_size": 700}, "has 601 tokens"),
        ({"pad_token_id": 5}, "pad_token_id=5, but the tokenizer's is 1"),
        ({"max_position_embeddings": 32}, "model.encoder.embed_positions.weight (66, 32)"),
        ({"d_model": 40}, "wrong shape"),
    ],
)
def test_a_config_that_does_not_fit_is_refused(
    bart_folders: dict, tmp_path: Path, change: dict, message: str
) -> None:
    assert message in refused(edited_copy(bart_folders["tied"], tmp_path, **change))


@pytest.mark.parametrize("missing", ["vocab.json", "merges.txt"])
def test_a_missing_tokenizer_file_is_refused(
    bart_folders: dict, tmp_path: Path, missing: str
) -> None:
    folder = edited_copy(bart_folders["tied"], tmp_path)
    (folder / missing).unlink()
    assert f"lacks the BART tokenizer's {missing}" in refused(folder)


def test_untied_weights_that_differ_are_refused(bart_folders: dict, tmp_path: Path) -> None:
    """A .bin of a tied model whose copies differ is not the model its config describes."""
    folder = edited_copy(bart_folders["untied"], tmp_path, tie_word_embeddings=True)
    assert "different from the tensor the config ties them to" in refused(folder)
