"""Hugging Face's M2M100 and NLLB models read as attnseq's own transformer
(attnseq/models/m2m100_family.py) compute what transformers' M2M100ForConditionalGeneration
computes: the same teacher-forced log-probabilities and attention weights in fp32, the same
greedy and beam outputs as `generate` with the target language's code forced first, in the
folder's languages and in others. The models are the random-weight stand-ins of
tests/multilingual_stand_ins.py (`multilingual_folders`); bad folders are refused in one line."""

from pathlib import Path

import pytest

pytest.importorskip("transformers", reason="the reference models are transformers' own")

from multilingual_checks import (  # noqa: E402
    GENERATE,
    assert_attention_matches,
    assert_generate_matches,
    assert_other_languages_match,
    assert_same_ids_without_tokenizer_json,
    assert_sampling_starts_with_the_forced_token,
    assert_teacher_forcing_matches,
    generated,
)
from multilingual_stand_ins import SHAPES, imported  # noqa: E402
from pretrained_checks import decoded, edited_copy, refused  # noqa: E402

from attnseq.config.choices import Activation, Norm, Positions  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_intra_op_thread")

FAMILY = [name for name, shape in SHAPES.items() if shape.model_type == "m2m_100"]


@pytest.mark.parametrize("shape", FAMILY)
def test_teacher_forced_log_probabilities_match(multilingual_folders: dict, shape: str) -> None:
    assert_teacher_forcing_matches(multilingual_folders[shape])


@pytest.mark.parametrize("shape", FAMILY)
def test_every_attention_weight_matches(multilingual_folders: dict, shape: str) -> None:
    assert_attention_matches(multilingual_folders[shape])


@pytest.mark.parametrize("shape", FAMILY)
@pytest.mark.parametrize(("beam", "alpha", "new_tokens", "ngram"), GENERATE)
def test_greedy_and_beam_outputs_match_generate(
    multilingual_folders: dict, shape: str, beam: int, alpha: float, new_tokens: int, ngram: int
) -> None:
    assert_generate_matches(multilingual_folders[shape], beam, alpha, new_tokens, ngram)


@pytest.mark.parametrize("shape", FAMILY)
def test_other_languages_are_chosen_by_their_codes(multilingual_folders: dict, shape: str) -> None:
    assert_other_languages_match(multilingual_folders[shape], SHAPES[shape].tokenizer)


def test_the_imported_decoding_is_generates_own(multilingual_folders: dict) -> None:
    """The stand-in's generation_config.json (num_beams 4, max_length 24, forced </s>) becomes
    the checkpoint's decoding.*, the target language's code forced first: attnseq decodes as a
    plain `generate(forced_bos_token_id=...)`."""
    folder = multilingual_folders["m2m100"]
    trained = imported(folder)
    decoding = trained.cfg.decoding
    assert (decoding.beam, decoding.max_output_extra, decoding.eos_at_limit) == (4, 22, True)
    assert decoding.forced_first_token == trained.tokenizers.tgt.codes["de"]
    expected, batch = generated(folder, trained)
    assert decoded(trained, batch) == expected
    assert decoded(trained, batch, forced_first_token=None) != expected


def test_the_forced_token_names_a_target_the_folder_does_not(multilingual_folders: dict) -> None:
    """The NLLB stand-in's tokenizer_config.json has no tgt_lang: the code its generation
    config forces first is the target language."""
    trained = imported(multilingual_folders["nllb"])
    assert trained.tokenizers.tgt.language == "fra_Latn"
    assert trained.cfg.decoding.forced_first_token == trained.tokenizers.tgt.codes["fra_Latn"]


def test_sampling_starts_with_the_forced_token(multilingual_folders: dict) -> None:
    assert_sampling_starts_with_the_forced_token(multilingual_folders["m2m100"])


def test_the_config_is_m2m100s(multilingual_folders: dict) -> None:
    trained = imported(multilingual_folders["m2m100"])
    model = trained.cfg.model
    assert model.positions is Positions.sinusoidal_fairseq and model.position_offset == 2
    assert model.norm is Norm.pre and not model.embed_norm and not model.output_bias
    assert model.activation is Activation.relu and model.scale_embeddings
    assert model.tie_embeddings and model.share_src_tgt_embeddings
    assert trained.tokenizers.src.kind == "m2m100"
    # vocab.json's pieces, 100 codes and 8 made-up words
    assert trained.model.src_embed.weight.shape[0] == trained.tokenizers.src.vocab_size
    nllb = imported(multilingual_folders["nllb"])
    assert not nllb.cfg.model.scale_embeddings and not nllb.cfg.model.tie_embeddings
    assert nllb.tokenizers.src.kind == "nllb"
    module = nllb.model
    assert module.src_embed.weight.data_ptr() != module.tgt_embed.weight.data_ptr()


# ------------------------------------------------------------------------------ refusals
@pytest.mark.parametrize(
    ("shape", "change", "message"),
    [
        ("m2m100", {"decoder_attention_heads": 2}, "decoder_attention_heads=2 differ"),
        ("m2m100", {"activation_function": "tanh"}, "activation_function 'tanh'; attnseq has"),
        ("m2m100", {"vocab_size": 500}, "more than the model's vocabulary of 500"),
        ("m2m100", {"pad_token_id": 5}, "pad_token_id=5, but the tokenizer's is 1"),
        ("m2m100", {"d_model": 40}, "wrong shape"),
        ("nllb", {"eos_token_id": 900}, "eos_token_id 900 is not an id of the vocabulary"),
    ],
)
def test_a_config_that_does_not_fit_is_refused(
    multilingual_folders: dict, tmp_path: Path, shape: str, change: dict, message: str
) -> None:
    assert message in refused(edited_copy(multilingual_folders[shape], tmp_path, **change))


@pytest.mark.parametrize(
    ("shape", "missing", "message"),
    [
        ("m2m100", ["vocab.json"], "lacks the M2M100 tokenizer's vocab.json"),
        ("m2m100", ["sentencepiece.bpe.model"], "lacks the M2M100 tokenizer's sentencepiece"),
        (
            "nllb",
            ["tokenizer.json", "sentencepiece.bpe.model"],
            "lacks the NLLB tokenizer's tokenizer.json or sentencepiece.bpe.model",
        ),
        (
            "nllb",
            ["tokenizer.json", "tokenizer_config.json"],
            "the NLLB tokenizer files give it no language codes",
        ),
    ],
)
def test_a_missing_tokenizer_file_is_refused(
    multilingual_folders: dict, tmp_path: Path, shape: str, missing: list[str], message: str
) -> None:
    """NLLB's sentencepiece.bpe.model without tokenizer_config.json gives its codes no ids."""
    folder = edited_copy(multilingual_folders[shape], tmp_path)
    for name in missing:
        (folder / name).unlink()
    assert message in refused(folder)


def test_nllbs_sentencepiece_model_gives_tokenizer_jsons_ids(
    multilingual_folders: dict, tmp_path: Path
) -> None:
    assert_same_ids_without_tokenizer_json(multilingual_folders["nllb"], tmp_path)


def test_a_tokenizer_of_another_family_is_refused(
    multilingual_folders: dict, tmp_path: Path
) -> None:
    folder = edited_copy(
        multilingual_folders["m2m100"],
        tmp_path,
        "tokenizer_config.json",
        tokenizer_class="MBart50Tokenizer",
    )
    assert "reads this model type with M2M100Tokenizer, NllbTokenizer" in refused(folder)
