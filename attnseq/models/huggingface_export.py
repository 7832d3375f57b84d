"""Export of a transformer checkpoint to a Hugging Face Marian folder that
`MarianMTModel.from_pretrained`, `MarianTokenizer.from_pretrained` and
`pipeline("translation")` read: config.json and generation_config.json from the checkpoint's
config, model.safetensors through the import's name table (`pretrained.marian_names`), and the
MarianTokenizer files the checkpoint holds. What Marian cannot express is one UserError naming
every such setting (`unsupported_features`); the folder is written whole in a staging folder
and moved into place.
"""

import json
import logging
from pathlib import Path
from typing import Any

import torch

from attnseq.config.choices import AttentionKind, HardMode, ModelFamily, Norm, Positions
from attnseq.config.schema import DecodingConfig, TrainConfig
from attnseq.data.marian_tokenizer import TOKENIZER_FILES, MarianTokenizer
from attnseq.data.tokenizers import TokenizerPair
from attnseq.errors import UserError
from attnseq.io.atomic import write_staged_folder
from attnseq.models.ctranslate2_export import check_export_folder
from attnseq.models.pretrained import (
    LOGITS_BIAS,
    MARIAN_ACTIVATIONS,
    SAFETENSORS,
    marian_names,
)

log = logging.getLogger("attnseq")

EXPORT_FILE = "attnseq_huggingface_export.json"
EXPORT_NAMES = frozenset(
    {"config.json", "generation_config.json", SAFETENSORS, *TOKENIZER_FILES, EXPORT_FILE}
)
"""Every file an export writes: what `force` may replace."""
EXPORT_VERSION = 1


def unsupported_features(cfg: TrainConfig, tokenizers: TokenizerPair) -> list[str]:
    """The settings of a model that a Marian folder cannot express (empty: exportable)."""
    model = cfg.model
    problems = []
    if model.family is not ModelFamily.transformer:
        problems.append(f"model.family={model.family.name} (Marian is a transformer)")
    else:
        problems += _transformer_problems(cfg)
    if model.copy or model.coverage:
        problems.append("model.copy/model.coverage (the pointer-generator's copy distribution)")
    tokenizer = _tokenizer_problem(tokenizers)
    if tokenizer:
        problems.append(tokenizer)
    return problems


def _transformer_problems(cfg: TrainConfig) -> list[str]:
    model, attention = cfg.model, cfg.model.attention
    problems = []
    if model.norm is Norm.pre:
        problems.append("model.norm=pre (Marian's layers are post-norm, without a final LayerNorm)")
    if model.positions is not Positions.sinusoidal_split:
        problems.append(
            f"model.positions={model.positions.name} (Marian's positions are sinusoids with sin "
            "in the first half of the channels and cos in the second: sinusoidal_split)"
        )
    if attention.kind is not AttentionKind.full:
        problems.append(
            f"model.attention.kind={attention.kind.name} (Marian has full attention only)"
        )
    if attention.memory_slots > 0:
        problems.append(
            f"model.attention.memory_slots={attention.memory_slots} (persistent memory keys "
            "and values)"
        )
    if not attention.scaled:
        problems.append("model.attention.scaled=false (Marian divides q.k by sqrt(d_k))")
    if attention.hard is not HardMode.none:
        problems.append(
            f"model.attention.hard={attention.hard.name} (Marian's cross-attention is soft)"
        )
    if model.conv_kernel > 0:
        problems.append(
            f"model.conv_kernel={model.conv_kernel} (the encoder's convolution sublayer)"
        )
    return problems


def _tokenizer_problem(tokenizers: TokenizerPair) -> str | None:
    """Why the tokenizers cannot be written as one MarianTokenizer folder, or None."""
    src, tgt = tokenizers.src, tokenizers.tgt
    if isinstance(src, MarianTokenizer) and isinstance(tgt, MarianTokenizer):
        if src.files != tgt.files:
            return "the tokenizers of two Marian models (one folder holds one MarianTokenizer)"
        if src.pad_id != tgt.pad_id:
            return (
                f"<pad> ids {src.pad_id} (source) and {tgt.pad_id} (target) (Marian has one "
                "pad_token_id)"
            )
        return None
    kinds = "/".join(sorted({src.kind, tgt.kind}))
    return (
        f"attnseq's own {kinds} tokenizers (MarianTokenizer encodes with sentencepiece models "
        "into the ids of its vocab.json and appends </s> to every source, which attnseq's own "
        "sources lack; only a Marian model's tokenizers export)"
    )


def marian_config(cfg: TrainConfig, model: torch.nn.Module, tokens: TokenizerPair) -> dict:
    """MarianConfig's settings of the checkpoint's transformer, its sharing read off the built
    model (model.share_src_tgt_embeddings=None resolves when the model is built)."""
    m = cfg.model
    shared, tied = _sharing(model)
    target = tokens.tgt
    return {
        "architectures": ["MarianMTModel"],
        "vocab_size": tokens.src.vocab_size,
        "decoder_vocab_size": target.vocab_size,
        "d_model": m.d_model,
        "encoder_layers": m.enc_layers,
        "decoder_layers": m.dec_layers,
        "encoder_attention_heads": m.heads,
        "decoder_attention_heads": m.heads,
        "encoder_ffn_dim": m.ff_dim,
        "decoder_ffn_dim": m.ff_dim,
        "activation_function": MARIAN_ACTIVATIONS[m.activation],
        "dropout": m.dropout,
        "attention_dropout": m.attention_dropout,
        "activation_dropout": m.dropout if m.activation_dropout is None else m.activation_dropout,
        "scale_embedding": m.scale_embeddings,
        "max_position_embeddings": m.max_positions,
        "share_encoder_decoder_embeddings": shared,
        "tie_word_embeddings": tied,
        "pad_token_id": target.pad_id,
        "eos_token_id": target.eos_id,
        "decoder_start_token_id": target.bos_id,
        "forced_eos_token_id": target.eos_id if cfg.decoding.eos_at_limit else None,
        "dtype": "float32",
    }


def generation_settings(
    decoding: DecodingConfig, tokens: TokenizerPair, max_positions: int
) -> tuple[dict[str, Any], list[str]]:
    """generate's settings of `decoding` (the inverse of the import's, pretrained.py) and the
    decoding settings generate has no setting for."""
    target = tokens.tgt
    beam = decoding.beam > 1 and not decoding.sample
    settings: dict[str, Any] = {
        "decoder_start_token_id": target.bos_id,
        "eos_token_id": target.eos_id,
        "pad_token_id": target.pad_id,
        "forced_eos_token_id": target.eos_id if decoding.eos_at_limit else None,
        "num_beams": decoding.beam if beam else 1,
        "min_length": decoding.min_length + 1 if decoding.min_length else 0,  # with the start
        "no_repeat_ngram_size": decoding.no_repeat_ngram,
        # attnseq never generates <pad> or the start token
        "bad_words_ids": [[i] for i in sorted({target.pad_id, target.bos_id} - {target.eos_id})],
    }
    missing = []
    if decoding.max_output_ratio == 0:  # max_length counts the start token
        settings["max_length"] = decoding.max_output_extra + int(decoding.eos_at_limit) + 1
    else:
        settings["max_length"] = max_positions
        missing.append(
            f"decoding.max_output_ratio={decoding.max_output_ratio} (generate's limit is one "
            f"length: max_length={max_positions}, the position table's)"
        )
    if beam:  # generate refuses beam settings without beams
        settings["length_penalty"] = decoding.length_penalty
        settings["early_stopping"] = False if decoding.stop_at_current_length else "never"
        if decoding.length_penalty_offset != 0:
            missing.append(
                f"decoding.length_penalty_offset={decoding.length_penalty_offset} (generate "
                "divides by |Y|^alpha)"
            )
        if decoding.coverage_penalty > 0:
            missing.append(f"decoding.coverage_penalty={decoding.coverage_penalty}")
    if decoding.sample:
        settings.update(
            do_sample=True,
            temperature=decoding.temperature,
            top_k=decoding.top_k,
            top_p=decoding.top_p,
        )
    return settings, missing


def marian_state(model: torch.nn.Module, cfg: TrainConfig) -> dict[str, torch.Tensor]:
    """MarianMTModel's tensors by name (float32, each its own copy) from the model's, its
    head masks folded into W^O (head_mask.py)."""
    from attnseq.models.head_mask import folded_state_dict, optional_entry

    m = cfg.model
    state = folded_state_dict(model)
    if LOGITS_BIAS not in state:  # model.output_bias=false: Marian's bias is zero
        state[LOGITS_BIAS] = torch.zeros(model.output_proj.out_features)
    state[LOGITS_BIAS] = state[LOGITS_BIAS].reshape(1, -1)  # (V,) -> (1, V)
    names = marian_names(m.enc_layers, m.dec_layers, *_sharing(model))
    unmapped = [name for name in state if name not in names and not optional_entry(name)]
    if unmapped:  # unsupported_features lets through only what the table maps
        raise ValueError(f"no Marian name for {', '.join(unmapped)}")
    tensors: dict[str, torch.Tensor] = {}
    for ours, theirs in names.items():
        tensors.setdefault(theirs, state[ours].float().contiguous())
    return tensors


def _sharing(model: torch.nn.Module) -> tuple[bool, bool]:
    """(shared, tied) of Marian's config: one embedding matrix for both sides and the output
    projection, or the output projection tied to the target embedding. Untied, transformers
    gives every embedding a matrix of its own, so attnseq's shared source and target
    embedding goes out as two equal ones."""
    tied = model.output_proj.weight is model.tgt_embed.weight
    return tied and model.src_embed is model.tgt_embed, tied


def export_huggingface(checkpoint: Path, out_dir: Path, force: bool = False) -> Path:
    """Write `checkpoint` as a Hugging Face Marian model folder `out_dir`: new, empty, or (with
    `force`) an earlier export whose own files (`EXPORT_NAMES`) are replaced, other files
    staying.

    Raises:
        UserError: `out_dir` is the checkpoint, holds it, is a file, holds files that are not
            an export (or an export without `force`); the model has settings Marian cannot
            express (all of them named); transformers or safetensors is not installed.
        OutputError: the folder cannot be written (full disk, read-only); it is left as it was.
    """
    from attnseq.models.loading import load_trained_model

    check_export_folder(checkpoint, out_dir, force, marker=EXPORT_FILE)
    trained = load_trained_model(checkpoint)
    cfg, tokenizers = trained.cfg, trained.tokenizers
    problems = unsupported_features(cfg, tokenizers)
    if problems:
        raise UserError(
            "cannot export to Hugging Face Marian: the model uses " + "; ".join(problems)
        )
    marian, generation_config, save_file = _hugging_face_writers()
    config = marian(**marian_config(cfg, trained.model, tokenizers))
    settings, missing = generation_settings(cfg.decoding, tokenizers, cfg.model.max_positions)
    generation = generation_config(**settings)
    if missing:
        log.warning(
            "generation_config.json cannot express %s: generate decodes without them",
            "; ".join(missing),
        )
    tensors = marian_state(trained.model, cfg)
    files = tokenizers.src.files  # type: ignore[attr-defined]  # MarianTokenizer's

    def write(staging: Path) -> None:
        config.save_pretrained(staging)
        generation.save_pretrained(staging)
        save_file(tensors, staging / SAFETENSORS, metadata={"format": "pt"})
        for name, data in files.items():
            (staging / name).write_bytes(data)
        marker = {"version": EXPORT_VERSION, "format": "huggingface", "model_type": "marian"}
        (staging / EXPORT_FILE).write_text(json.dumps(marker), encoding="utf-8")

    write_staged_folder(out_dir, write, replaced=EXPORT_NAMES, last=EXPORT_FILE)
    return out_dir


def _hugging_face_writers() -> tuple[Any, Any, Any]:
    """MarianConfig, GenerationConfig and safetensors' save_file (UserError naming the extra
    when they are not installed)."""
    try:
        from safetensors.torch import save_file
        from transformers import GenerationConfig, MarianConfig
    except ImportError:
        raise UserError(
            "exporting to Hugging Face needs transformers and safetensors: "
            "pip install 'attnseq[hf]'"
        ) from None
    return MarianConfig, GenerationConfig, save_file
