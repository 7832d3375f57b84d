"""A Hugging Face Marian model read as attnseq's own transformer (attnseq/models/pretrained.py)
computes what transformers' MarianMTModel computes: the same teacher-forced log-probabilities
and attention weights in fp32, the same greedy and beam outputs as `generate` with the decoding
settings that follow its conventions. The models are the random-weight stand-ins of
tests/marian_stand_ins.py (`marian_folders`); their tokenizers' tests:
tests/data/test_marian_tokenizer.py."""

import shutil
from pathlib import Path
from typing import Any

import pytest
import torch

pytest.importorskip("transformers", reason="the reference models are transformers' own")

from marian_stand_ins import SHAPES, SOURCES, TARGETS, imported, reference  # noqa: E402
from pretrained_checks import (  # noqa: E402
    assert_attention_weights_match,
    assert_log_probabilities_match,
    decoded,
    generate_outputs,
    teacher_forced,
    valid_sources,
)

from attnseq.config.choices import Activation, ModelFamily, Norm, Positions  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_intra_op_thread")


def forward_both(folder: Path, dtype: torch.dtype = torch.float32) -> tuple[Any, Any, Any]:
    """One teacher-forced batch through both models (the decoder fed <pad> + target)."""
    hf, tokenizer = reference(folder)
    batch = tokenizer(SOURCES, text_target=TARGETS, return_tensors="pt", padding=True)
    return teacher_forced(hf, imported(folder).model, batch, dtype)


@pytest.mark.parametrize("shape", SHAPES)
def test_teacher_forced_log_probabilities_match(marian_folders: dict, shape: str) -> None:
    assert_log_probabilities_match(lambda dtype: forward_both(marian_folders[shape], dtype))


@pytest.mark.parametrize("shape", SHAPES)
def test_every_attention_weight_matches(marian_folders: dict, shape: str) -> None:
    theirs, mine, _ = forward_both(marian_folders[shape])
    assert_attention_weights_match(theirs, mine)


# (num_beams, length_penalty, max_new_tokens, no_repeat_ngram_size): with repeats forbidden
# the stand-ins' outputs end at many lengths; without, most run to the limit and its forced EOS
GENERATE = [(1, 1.0, 30, 1), (4, 1.0, 30, 1), (4, 0.6, 20, 2), (4, 0.0, 16, 0), (1, 1.0, 12, 0)]


def generated(folder: Path, settings: dict[str, Any]) -> tuple[list[list[int]], Any]:
    """transformers' outputs of Multi30k's German validation sources, and the batch."""
    hf, tokenizer = reference(folder)
    batch = tokenizer(valid_sources("de"), return_tensors="pt", padding=True)
    return generate_outputs(hf, batch, do_sample=False, **settings), batch


def hf_conventions(beam: int, alpha: float, new_tokens: int, ngram: int) -> dict[str, Any]:
    """attnseq's decoding settings of generate(num_beams, length_penalty, max_new_tokens,
    no_repeat_ngram_size) with its early_stopping=False and forced EOS."""
    return {
        "beam": beam,
        "length_penalty": alpha,
        "length_penalty_offset": 0.0,
        "stop_at_current_length": True,
        "eos_at_limit": True,
        "max_output_ratio": 0.0,
        "max_output_extra": new_tokens - 1,  # the last of the new tokens is the forced EOS
        "no_repeat_ngram": ngram,
        "min_length": 0,
    }


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize(("beam", "alpha", "new_tokens", "ngram"), GENERATE)
def test_greedy_and_beam_outputs_match_generate(
    marian_folders: dict, shape: str, beam: int, alpha: float, new_tokens: int, ngram: int
) -> None:
    folder = marian_folders[shape]
    settings = {
        "num_beams": beam,
        "length_penalty": alpha,
        "max_new_tokens": new_tokens,
        "no_repeat_ngram_size": ngram,
    }
    expected, batch = generated(folder, settings)
    got = decoded(imported(folder), batch, **hf_conventions(beam, alpha, new_tokens, ngram))
    assert got == expected


def test_the_imported_decoding_is_generates_own(marian_folders: dict) -> None:
    """The stand-in's generation_config.json (num_beams 4, max_length 24, bad_words_ids <pad>)
    becomes the checkpoint's decoding.*: attnseq decodes as a plain `generate()` does."""
    folder = marian_folders["shared"]
    hf, tokenizer = reference(folder)
    batch = tokenizer(valid_sources("de"), return_tensors="pt", padding=True)
    with torch.no_grad():
        out = hf.generate(**batch)
    eos, pad = hf.config.eos_token_id, hf.config.pad_token_id
    expected = [[t for t in row[: row.index(eos)] if t != pad] for row in out[:, 1:].tolist()]
    decoding = imported(folder).cfg.decoding
    assert (decoding.beam, decoding.max_output_extra, decoding.eos_at_limit) == (4, 22, True)
    assert decoded(imported(folder), batch) == expected


def test_attnseqs_own_beam_conventions_find_other_outputs(marian_folders: dict) -> None:
    """GNMT's length penalty and the exact stopping rule rank differently from generate's:
    the settings that follow its conventions are needed to give its outputs."""
    folder = marian_folders["shared"]
    expected, batch = generated(
        folder,
        {"num_beams": 4, "length_penalty": 1.0, "max_new_tokens": 30, "no_repeat_ngram_size": 1},
    )
    settings = hf_conventions(4, 1.0, 30, 1)
    own = {**settings, "length_penalty_offset": 5.0, "stop_at_current_length": False}
    assert decoded(imported(folder), batch, **settings) == expected
    assert decoded(imported(folder), batch, **own) != expected


# ------------------------------------------------------------------------------ the config
def test_the_config_is_marians(marian_folders: dict) -> None:
    shared = imported(marian_folders["shared"]).cfg.model
    assert shared.family is ModelFamily.transformer and shared.norm is Norm.post
    assert shared.positions is Positions.sinusoidal_split and shared.output_bias
    assert shared.activation is Activation.silu and shared.scale_embeddings
    assert (shared.d_model, shared.heads, shared.enc_layers, shared.ff_dim) == (32, 4, 2, 64)
    assert shared.share_src_tgt_embeddings and shared.tie_embeddings
    separate = imported(marian_folders["separate"])
    model = separate.cfg.model
    assert model.activation is Activation.gelu and not model.scale_embeddings
    assert not model.share_src_tgt_embeddings and model.tie_embeddings
    assert separate.tokenizers.src.vocab_size != separate.tokenizers.tgt.vocab_size
    untied = imported(marian_folders["untied"]).cfg.model
    assert untied.activation is Activation.relu and not untied.tie_embeddings
    assert not untied.share_src_tgt_embeddings  # transformers ties nothing untied


def test_a_saved_import_needs_neither_its_folder_nor_the_network(
    marian_folders: dict, tmp_path: Path
) -> None:
    import attnseq

    folder = tmp_path / "model"
    shutil.copytree(marian_folders["separate"], folder)
    model = attnseq.load(folder, "cpu")
    expected = model.translate(SOURCES, beam=2, nbest=2)
    saved = model.save(tmp_path / "saved.pt")
    shutil.rmtree(folder)
    again = attnseq.load(saved, "cpu")
    assert again.translate(SOURCES, beam=2, nbest=2) == expected
    assert again.tokenizers.tgt.bos_id == model.tokenizers.tgt.bos_id == 2  # <pad> starts
