"""Hugging Face's BartForConditionalGeneration (`model_type: bart`) as attnseq's transformer:
post-norm layers, learned positions whose table keeps two rows before position 0's, a
LayerNorm on embeddings plus positions, one byte-level BPE vocabulary, the decoder starting
from `</s>` and `<s>` forced first (docs/guides/pretrained.md).
"""

from pathlib import Path
from typing import Any

import torch

from attnseq.config.choices import Positions
from attnseq.config.schema import TrainConfig
from attnseq.data.bart_tokenizer import BartTokenizer, read_tokenizer_files
from attnseq.data.tokenizers import TokenizerPair
from attnseq.errors import UserError
from attnseq.models.pretrained import (
    FAMILIES,
    LOGITS_BIAS,
    SIDES,
    Tensors,
    _generation_settings,
    _layer_shapes,
    _start_id,
    check_layer_settings,
    check_special_ids,
    check_tensors,
    marian_names,
    seq2seq_config,
)

POSITION_OFFSET = 2  # BartLearnedPositionalEmbedding: position p is row p + 2


class BartFamily:
    """Hugging Face's BART as attnseq's transformer (`FAMILIES["bart"]`): the shared
    vocabulary's embeddings (one matrix when tie_word_embeddings, else one per side and the
    output projection's own), learned positions with BART's offset, `layernorm_embedding`
    on both sides, the model's activation and embedding scale, final_logits_bias.

    Args:
        folder: the model folder (config.json, weights, vocab.json and merges.txt).

    Raises:
        UserError: transformers is missing, or config.json is no BART config attnseq can
            express.
    """

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.config = _bart_config(folder)
        self.generation = _generation_settings(folder)
        self.tied = bool(self.config.tie_word_embeddings)
        where = folder / "config.json"
        check_layer_settings(self.config, where)
        for key in ("pad_token_id", "eos_token_id"):
            token_id = getattr(self.config, key)
            if token_id is None or not 0 <= token_id < self.config.vocab_size:
                raise UserError(f"{where}: {key} {token_id} is not an id of the vocabulary")

    def train_config(self) -> TrainConfig:
        """The TrainConfig of the model: its transformer and the decoding `generate` does."""
        cfg = seq2seq_config(f"bart {self.folder.name}", self.config, self.generation)
        model = cfg.model
        model.positions, model.position_offset = Positions.learned, POSITION_OFFSET
        model.embed_norm = True  # layernorm_embedding
        model.tie_embeddings = model.share_src_tgt_embeddings = self.tied
        return cfg

    def tokenizers(self) -> TokenizerPair:
        """The source and target sides of the folder's BartTokenizer, checked against the
        config's vocabulary size and special ids."""
        files = read_tokenizer_files(self.folder)
        start = _start_id(self.config, "eos_token_id")
        source, target = (BartTokenizer(files, side, start) for side in ("source", "target"))
        where = self.folder / "config.json"
        if source.vocab_size != self.config.vocab_size:
            raise UserError(
                f"{self.folder / 'vocab.json'} has {source.vocab_size} tokens, {where} has "
                f"vocab_size={self.config.vocab_size}: the tokenizer is not this model's"
            )
        check_special_ids(self.config, target, where)
        return TokenizerPair(source, target)

    def tensors(self) -> Tensors:
        """The names and shapes of BartForConditionalGeneration's weights."""
        config = self.config
        d, ff, vocab = config.d_model, config.encoder_ffn_dim, config.vocab_size
        positions = (config.max_position_embeddings + POSITION_OFFSET, d)
        required: dict[str, tuple[int, ...]] = {}
        optional: dict[str, tuple[int, ...]] = {"final_logits_bias": (1, vocab)}
        tied: dict[str, str] = {}
        embeddings = ("model.encoder.embed_tokens.weight", "model.decoder.embed_tokens.weight")
        if self.tied:
            required["model.shared.weight"] = (vocab, d)
            tied.update(dict.fromkeys((*embeddings, "lm_head.weight"), "model.shared.weight"))
        else:  # each its own matrix; model.shared is kept, not read
            required.update(dict.fromkeys((*embeddings, "lm_head.weight"), (vocab, d)))
            optional["model.shared.weight"] = (vocab, d)
        for side, layers in (
            ("encoder", config.encoder_layers),
            ("decoder", config.decoder_layers),
        ):
            required[f"model.{side}.embed_positions.weight"] = positions
            required[f"model.{side}.layernorm_embedding.weight"] = (d,)
            required[f"model.{side}.layernorm_embedding.bias"] = (d,)
            for index in range(layers):
                for name, shape in _layer_shapes(side, d, ff).items():
                    required[f"model.{side}.layers.{index}.{name}"] = shape
        return Tensors(required, optional, tied)

    def state_dict(self, hf_state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """attnseq's state dict of `TransformerSeq2Seq` from BART's tensors, each name and
        shape checked first (`tensors`)."""
        check_tensors(hf_state, self.tensors(), str(self.folder))
        config = self.config
        names = bart_names(config.encoder_layers, config.decoder_layers, self.tied)
        state = {ours: hf_state[theirs] for ours, theirs in names.items() if theirs in hf_state}
        bias = hf_state.get("final_logits_bias")  # transformers zeroes a missing one
        state[LOGITS_BIAS] = torch.zeros(config.vocab_size) if bias is None else bias.reshape(-1)
        return state


def bart_names(enc_layers: int, dec_layers: int, tied: bool) -> dict[str, str]:
    """{attnseq's name: BartForConditionalGeneration's name} of every tensor of
    `TransformerSeq2Seq`, the table both the import and the export (bart_export.py) read:
    Marian's (`marian_names`; `tied`: one matrix, model.shared.weight, for both embeddings
    and the output projection) with BART's position tables and layernorm_embedding."""
    names = marian_names(enc_layers, dec_layers, shared=tied, tied=tied)
    for side, ours in zip(SIDES, ("src", "tgt"), strict=True):
        names[f"{ours}_positions.table.weight"] = f"model.{side}.embed_positions.weight"
        for kind in ("weight", "bias"):
            names[f"{ours}_embed_norm.{kind}"] = f"model.{side}.layernorm_embedding.{kind}"
    return names


def _bart_config(folder: Path) -> Any:
    """transformers' BartConfig of the folder (its defaults for what config.json leaves out);
    UserError when transformers is missing or the config is refused."""
    try:
        from transformers import BartConfig
    except ImportError:
        raise UserError(
            "reading a BART model needs transformers: pip install 'attnseq[hf]'"
        ) from None
    try:
        return BartConfig.from_pretrained(folder, local_files_only=True)
    except Exception as error:  # transformers' checks raise several kinds
        raise UserError(
            f"{folder / 'config.json'} is no valid BART config ({type(error).__name__}: {error})"
        ) from None


FAMILIES["bart"] = BartFamily
