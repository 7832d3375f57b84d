"""Hugging Face's MBartForConditionalGeneration (`model_type: mbart`) with mBART-50's tokenizer
as attnseq's transformer: BART's learned positions two rows on and `layernorm_embedding`, with
pre-norm layers and a final LayerNorm in the encoder and the decoder, the language codes of
MBart50Tokenizer (docs/guides/pretrained.md).
"""

from pathlib import Path

import torch

from attnseq.config.choices import Norm
from attnseq.config.schema import TrainConfig
from attnseq.data.multilingual_tokenizer import MBart50Tokenizer
from attnseq.data.tokenizers import TokenizerPair
from attnseq.errors import UserError
from attnseq.models.bart_family import BartFamily
from attnseq.models.m2m100_family import (
    add_final_norms,
    final_norm_state,
    force_the_target_language,
    hf_config,
    language_tokenizers,
    tokenizer_class,
)
from attnseq.models.pretrained import FAMILIES, Tensors, _generation_settings, _start_id

# mBART-cc25's tokenizer writes its codes after </s> and starts the decoder from the target's
CC25 = "MBartTokenizer"


class MBartFamily(BartFamily):
    """Hugging Face's mBART as attnseq's transformer (`FAMILIES["mbart"]`): BART's tensors
    (`BartFamily`) with the final LayerNorms of pre-norm stacks, the decoder starting from
    `</s>` with the target language's code forced first.

    Args:
        folder: the model folder (config.json, weights, tokenizer files).

    Raises:
        UserError: transformers is missing, or config.json is no mBART config attnseq can
            express.
    """

    def __init__(self, folder: Path) -> None:  # BART's checks of an mBART config
        self.folder = folder
        self.config = hf_config(folder, "MBartConfig", "mBART")
        self.generation = _generation_settings(folder)
        self.tied = bool(self.config.tie_word_embeddings)
        self.pair: TokenizerPair | None = None

    def train_config(self) -> TrainConfig:
        """BART's TrainConfig with pre-norm layers."""
        cfg = super().train_config()
        cfg.name = f"mbart {self.folder.name}"
        cfg.model.norm = Norm.pre
        force_the_target_language(cfg, self.tokenizers())
        return cfg

    def tokenizers(self) -> TokenizerPair:
        """The source and target sides of the folder's MBart50Tokenizer; UserError for
        mBART-cc25's MBartTokenizer."""
        if self.pair is not None:  # built once: the config reads its target language
            return self.pair
        if tokenizer_class(self.folder, ("MBart50Tokenizer", CC25)) == CC25:
            raise UserError(
                f"{self.folder / 'tokenizer_config.json'} names MBartTokenizer (mBART-cc25: "
                "codes after </s>, the decoder starting from the target's code), which attnseq "
                "does not read; it reads mBART-50's MBart50Tokenizer"
            )
        start = _start_id(self.config, "eos_token_id")
        self.pair = language_tokenizers(self, MBart50Tokenizer, start)
        return self.pair

    def tensors(self) -> Tensors:
        """The names and shapes of MBartForConditionalGeneration's weights."""
        return add_final_norms(super().tensors(), self.config.d_model)

    def state_dict(self, hf_state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """attnseq's state dict of `TransformerSeq2Seq` from mBART's tensors, each name and
        shape checked first (`tensors`)."""
        return {**super().state_dict(hf_state), **final_norm_state(hf_state)}


FAMILIES["mbart"] = MBartFamily
