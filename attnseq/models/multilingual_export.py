"""Export of a transformer checkpoint over a multilingual model's tokenizers as a Hugging Face
folder of that model's family (`huggingface_export.EXPORT_FAMILIES`: M2M100 and NLLB as
`m2m_100`, mBART-50 as `mbart`): the config's settings, the tensors through the import's name
tables with the final LayerNorms, the tokenizer files, tokenizer_config.json naming the
languages the checkpoint was loaded in when they are not the files' own.
"""

import json
from collections.abc import Callable
from typing import Any

import torch

from attnseq.config.choices import Norm, Positions
from attnseq.config.schema import TrainConfig
from attnseq.data.multilingual_tokenizer import (
    COMMON_FILES,
    LanguageCodeTokenizer,
    M2M100Tokenizer,
    MBart50Tokenizer,
    NllbTokenizer,
)
from attnseq.data.tokenizers import TokenizerPair
from attnseq.models.bart_family import POSITION_OFFSET, bart_names
from attnseq.models.huggingface_export import (
    EXPORT_FAMILIES,
    ExportFamily,
    named_tensors,
    seq2seq_settings,
)
from attnseq.models.m2m100_family import FINAL_NORMS
from attnseq.models.pretrained import LOGITS_BIAS, marian_names

TOKENIZER_CONFIG = "tokenizer_config.json"


def _shared(cfg: TrainConfig, tokenizers: TokenizerPair) -> bool:
    """Whether the model has one embedding matrix for both sides, as build_model decides."""
    shared = cfg.model.share_src_tgt_embeddings
    return cfg.model.tie_embeddings and tokenizers.joint if shared is None else shared


def _common_problems(cfg: TrainConfig, tokenizers: TokenizerPair, name: str) -> list[str]:
    """What neither M2M100 nor mBART expresses: post-norm layers, an output projection tied to
    a target embedding of its own."""
    problems = []
    if cfg.model.norm is Norm.post:
        problems.append(f"model.norm=post ({name}'s layers are pre-norm, with final LayerNorms)")
    if cfg.model.tie_embeddings and not _shared(cfg, tokenizers):
        problems.append(
            f"model.tie_embeddings=true with separate source and target embeddings ({name} "
            "ties the output projection to one matrix of both sides, or has three of their own)"
        )
    return problems


def m2m100_problems(cfg: TrainConfig, tokenizers: TokenizerPair) -> list[str]:
    """The transformer settings an M2M100 folder cannot express."""
    model = cfg.model
    problems = _common_problems(cfg, tokenizers, "M2M100")
    offset = tokenizers.tgt.pad_id + 1  # fairseq's first position
    if model.positions is not Positions.sinusoidal_fairseq or model.position_offset != offset:
        problems.append(
            f"model.positions={model.positions.name} with model.position_offset="
            f"{model.position_offset} (M2M100's positions are fairseq's sinusoids, "
            f"sinusoidal_fairseq with the offset {offset})"
        )
    if model.embed_norm:
        problems.append("model.embed_norm=true (M2M100 has no LayerNorm on the embeddings)")
    if model.output_bias:
        problems.append("model.output_bias=true (M2M100 has no logits bias)")
    return problems


def mbart_problems(cfg: TrainConfig, tokenizers: TokenizerPair) -> list[str]:
    """The transformer settings an mBART folder cannot express."""
    model = cfg.model
    problems = _common_problems(cfg, tokenizers, "mBART")
    if model.positions is not Positions.learned or model.position_offset != POSITION_OFFSET:
        problems.append(
            f"model.positions={model.positions.name} with model.position_offset="
            f"{model.position_offset} (mBART's positions are a learned table: learned, with "
            f"the offset {POSITION_OFFSET})"
        )
    if not model.embed_norm:
        problems.append("model.embed_norm=false (mBART's layernorm_embedding follows positions)")
    return problems


def tokenizer_problem(
    kinds: tuple[type[LanguageCodeTokenizer], ...],
) -> Callable[[TokenizerPair], str | None]:
    """Why the tokenizers are not one tokenizer of `kinds`' two sides, or None."""

    def problem(tokenizers: TokenizerPair) -> str | None:
        src, tgt = tokenizers.src, tokenizers.tgt
        if not (isinstance(src, kinds) and isinstance(tgt, kinds) and src.kind == tgt.kind):
            found = "/".join(sorted({src.kind, tgt.kind}))
            return f"{found} tokenizers (the folder holds one {kinds[0].family} tokenizer)"
        if src.files != tgt.files:
            return f"the tokenizers of two {src.family} models (one folder holds one tokenizer)"
        return None

    return problem


def language_files(tokenizers: TokenizerPair) -> dict[str, bytes]:
    """The tokenizer files, tokenizer_config.json naming the checkpoint's languages where the
    files would give others (the source's default, a tgt_lang of their own; a target the
    files leave open is the generation config's forced first token), so the import reads
    them back."""
    src: Any = tokenizers.src
    tgt: Any = tokenizers.tgt
    files = dict(src.files)
    config = json.loads(files.get(TOKENIZER_CONFIG, b"{}").decode("utf-8"))
    own = type(src)(files, "source", src.bos_id).language  # the files' source language
    changes = {}
    if src.language != own:
        changes["src_lang"] = src.language
    if config.get("tgt_lang") is not None and config["tgt_lang"] != tgt.language:
        changes["tgt_lang"] = tgt.language
    if changes:
        config.update(changes)
        files[TOKENIZER_CONFIG] = json.dumps(config, ensure_ascii=False, indent=2).encode()
    return files


def multilingual_config(cfg: TrainConfig, model: torch.nn.Module, tokens: TokenizerPair) -> dict:
    """The config's settings: BART-like ones, <s> as BOS, the sharing read off the model."""
    architecture = (
        "M2M100ForConditionalGeneration"
        if cfg.model.positions is Positions.sinusoidal_fairseq
        else "MBartForConditionalGeneration"
    )
    return {
        **seq2seq_settings(cfg, tokens),
        "architectures": [architecture],
        "bos_token_id": 0,  # <s>, fairseq's first id
        "tie_word_embeddings": model.output_proj.weight is model.tgt_embed.weight,
    }


def _final_norm_names() -> dict[str, str]:
    return {
        f"{ours}.{kind}": f"model.{side}.layer_norm.{kind}"
        for side, ours in FINAL_NORMS.items()
        for kind in ("weight", "bias")
    }


def m2m100_state(model: torch.nn.Module, cfg: TrainConfig) -> dict[str, torch.Tensor]:
    """M2M100ForConditionalGeneration's tensors by name of the model's (`named_tensors`),
    without the logits bias it lacks (zero: `m2m100_problems` refuses one)."""
    m = cfg.model
    tied = model.output_proj.weight is model.tgt_embed.weight
    names = {**marian_names(m.enc_layers, m.dec_layers, tied, tied), **_final_norm_names()}
    tensors = named_tensors(model, names, "M2M100")
    del tensors[names[LOGITS_BIAS]]
    return tensors


def mbart_state(model: torch.nn.Module, cfg: TrainConfig) -> dict[str, torch.Tensor]:
    """MBartForConditionalGeneration's tensors by name of the model's (`named_tensors`)."""
    m = cfg.model
    tied = model.output_proj.weight is model.tgt_embed.weight
    names = {**bart_names(m.enc_layers, m.dec_layers, tied), **_final_norm_names()}
    return named_tensors(model, names, "mBART")


def _names(kinds: tuple[type[LanguageCodeTokenizer], ...]) -> tuple[str, ...]:
    return tuple(dict.fromkeys(n for k in kinds for n in (*k.required, *k.one_of, *COMMON_FILES)))


M2M100_KINDS = (M2M100Tokenizer, NllbTokenizer)
M2M100_EXPORT = ExportFamily(
    name="M2M100",
    model_type="m2m_100",
    config_class="M2M100Config",
    tokenizer_names=_names(M2M100_KINDS),
    model_problems=m2m100_problems,
    tokenizer_problem=tokenizer_problem(M2M100_KINDS),
    config=multilingual_config,
    state=m2m100_state,
    tokenizer_files=language_files,
)
EXPORT_FAMILIES.update({kind.kind: M2M100_EXPORT for kind in M2M100_KINDS})
EXPORT_FAMILIES[MBart50Tokenizer.kind] = ExportFamily(
    name="mBART",
    model_type="mbart",
    config_class="MBartConfig",
    tokenizer_names=_names((MBart50Tokenizer,)),
    model_problems=mbart_problems,
    tokenizer_problem=tokenizer_problem((MBart50Tokenizer,)),
    config=multilingual_config,
    state=mbart_state,
    tokenizer_files=language_files,
)
