"""Hugging Face's mBART-50 models read as attnseq's own transformer
(attnseq/models/mbart_family.py) compute what transformers' MBartForConditionalGeneration
computes: the same teacher-forced log-probabilities and attention weights in fp32, the same
greedy and beam outputs as `generate` with the target language's code forced first, in the
folder's languages and in others. The models are the random-weight stand-ins of
tests/multilingual_stand_ins.py (`multilingual_folders`); bad folders, and mBART-cc25's
tokenizer, are refused in one line."""

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
)
from multilingual_stand_ins import SHAPES, imported  # noqa: E402
from pretrained_checks import edited_copy, refused  # noqa: E402

from attnseq.config.choices import Activation, Norm, Positions  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_intra_op_thread")

FAMILY = [name for name, shape in SHAPES.items() if shape.model_type == "mbart"]


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


def test_sampling_starts_with_the_forced_token(multilingual_folders: dict) -> None:
    assert_sampling_starts_with_the_forced_token(multilingual_folders["mbart50-untied"])


def test_the_config_is_mbarts(multilingual_folders: dict) -> None:
    tied = imported(multilingual_folders["mbart50"])
    model = tied.cfg.model
    assert model.positions is Positions.learned and model.position_offset == 2
    assert model.norm is Norm.pre and model.embed_norm and model.output_bias
    assert model.activation is Activation.gelu and model.scale_embeddings
    assert model.tie_embeddings and model.share_src_tgt_embeddings
    assert tied.tokenizers.src.kind == "mbart50" and len(tied.tokenizers.src.codes) == 52
    assert tied.model.src_positions.table.weight.shape == (64 + 2, 32)
    untied = imported(multilingual_folders["mbart50-untied"])
    assert untied.cfg.model.activation is Activation.gelu_tanh
    assert not untied.cfg.model.scale_embeddings and not untied.cfg.model.tie_embeddings
    module = untied.model
    assert module.src_embed.weight.data_ptr() != module.tgt_embed.weight.data_ptr()


# ------------------------------------------------------------------------------ refusals
@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"max_position_embeddings": 32}, "embed_positions.weight (66, 32)"),
        ({"encoder_ffn_dim": 32}, "encoder_ffn_dim=32 and decoder_ffn_dim=64 differ"),
        ({"vocab_size": 500}, "more than the model's vocabulary of 500"),
        ({"eos_token_id": 5}, "eos_token_id=5, but the tokenizer's is 2"),
    ],
)
def test_a_config_that_does_not_fit_is_refused(
    multilingual_folders: dict, tmp_path: Path, change: dict, message: str
) -> None:
    assert message in refused(edited_copy(multilingual_folders["mbart50"], tmp_path, **change))


def test_a_folder_without_tokenizer_files_is_refused(
    multilingual_folders: dict, tmp_path: Path
) -> None:
    folder = edited_copy(multilingual_folders["mbart50"], tmp_path)
    (folder / "tokenizer.json").unlink()
    (folder / "sentencepiece.bpe.model").unlink()
    message = "lacks the mBART-50 tokenizer's tokenizer.json or sentencepiece.bpe.model"
    assert message in refused(folder)


def test_the_sentencepiece_model_gives_tokenizer_jsons_ids(
    multilingual_folders: dict, tmp_path: Path
) -> None:
    assert_same_ids_without_tokenizer_json(multilingual_folders["mbart50"], tmp_path)


def test_mbart_cc25s_tokenizer_is_refused(multilingual_folders: dict, tmp_path: Path) -> None:
    folder = edited_copy(
        multilingual_folders["mbart50"],
        tmp_path,
        "tokenizer_config.json",
        tokenizer_class="MBartTokenizerFast",
    )
    assert "names MBartTokenizer (mBART-cc25" in refused(folder)
