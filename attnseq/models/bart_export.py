"""Export of a transformer checkpoint as a Hugging Face BART folder
(`huggingface_export.EXPORT_FAMILIES["bart"]`) that `BartForConditionalGeneration` and
`BartTokenizer` read: BartConfig's settings, the tensors through the import's name table
(`bart_family.bart_names`), the byte-level BPE files the checkpoint's tokenizers hold.
"""

from typing import Any

import torch

from attnseq.config.choices import Norm, Positions
from attnseq.config.schema import TrainConfig
from attnseq.data.bart_tokenizer import OPTIONAL_FILES, REQUIRED_FILES, BartTokenizer
from attnseq.data.tokenizers import TokenizerPair
from attnseq.models.bart_family import POSITION_OFFSET, bart_names
from attnseq.models.huggingface_export import (
    EXPORT_FAMILIES,
    ExportFamily,
    named_tensors,
    pretrained_files,
    seq2seq_settings,
)


def bart_problems(cfg: TrainConfig, tokenizers: TokenizerPair) -> list[str]:
    """The transformer settings a BART folder cannot express."""
    model = cfg.model
    problems = []
    if model.norm is Norm.pre:
        problems.append("model.norm=pre (BART's layers are post-norm, without a final LayerNorm)")
    if model.positions is not Positions.learned:
        problems.append(
            f"model.positions={model.positions.name} (BART's positions are a learned table: "
            f"learned, with model.position_offset={POSITION_OFFSET})"
        )
    elif model.position_offset != POSITION_OFFSET:
        problems.append(
            f"model.position_offset={model.position_offset} (BART's table keeps "
            f"{POSITION_OFFSET} rows before position 0's)"
        )
    if not model.embed_norm:
        problems.append("model.embed_norm=false (BART's layernorm_embedding follows the positions)")
    shared = model.share_src_tgt_embeddings
    if shared is None:  # resolved as build_model resolves it
        shared = model.tie_embeddings and tokenizers.joint
    if model.tie_embeddings and not shared:
        problems.append(
            "model.tie_embeddings=true with separate source and target embeddings (BART ties "
            "the output projection to one matrix of both sides, or has three of their own)"
        )
    return problems


def bart_tokenizer_problem(tokenizers: TokenizerPair) -> str | None:
    """Why the tokenizers are not one BartTokenizer's two sides, or None."""
    src, tgt = tokenizers.src, tokenizers.tgt
    if not (isinstance(src, BartTokenizer) and isinstance(tgt, BartTokenizer)):
        kinds = "/".join(sorted({src.kind, tgt.kind}))
        return f"{kinds} tokenizers (a BART folder holds one BartTokenizer for both sides)"
    if src.files != tgt.files:
        return "the tokenizers of two BART models (one folder holds one BartTokenizer)"
    return None


def bart_config(cfg: TrainConfig, model: torch.nn.Module, tokens: TokenizerPair) -> dict:
    """BartConfig's settings of the checkpoint's transformer: one vocabulary, the output
    projection tied to the shared embedding or all three untied."""
    target: Any = tokens.tgt
    return {
        **seq2seq_settings(cfg, tokens),
        "architectures": ["BartForConditionalGeneration"],
        "bos_token_id": target.start_id,  # <s>, which every encoded text begins with
        "tie_word_embeddings": model.output_proj.weight is model.tgt_embed.weight,
    }


def bart_state(model: torch.nn.Module, cfg: TrainConfig) -> dict[str, torch.Tensor]:
    """BartForConditionalGeneration's tensors by name of the model's (`named_tensors`)."""
    m = cfg.model
    tied = model.output_proj.weight is model.tgt_embed.weight
    return named_tensors(model, bart_names(m.enc_layers, m.dec_layers, tied), "BART")


EXPORT_FAMILIES["bart"] = ExportFamily(
    name="BART",
    model_type="bart",
    config_class="BartConfig",
    tokenizer_names=REQUIRED_FILES + OPTIONAL_FILES,
    model_problems=bart_problems,
    tokenizer_problem=bart_tokenizer_problem,
    config=bart_config,
    state=bart_state,
    tokenizer_files=pretrained_files,
)
