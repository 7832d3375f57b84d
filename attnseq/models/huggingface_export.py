"""Export of a transformer checkpoint to a Hugging Face model folder of the family it came
from (`EXPORT_FAMILIES`, chosen by its tokenizers: Marian here, whose folders
`MarianMTModel.from_pretrained`, `MarianTokenizer.from_pretrained` and
`pipeline("translation")` read; BART in bart_export.py): config.json and generation_config.json
from the checkpoint's config, model.safetensors through the import's name table
(`pretrained.marian_names`), and the tokenizer files the checkpoint holds. What the family
cannot express is one UserError naming every such setting (`unsupported_features`); the folder
is written whole in a staging folder and moved into place.
"""

import json
import logging
from collections.abc import Callable
from dataclasses import dataclass
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
EXPORT_VERSION = 1
MODEL_FILES = ("config.json", "generation_config.json", SAFETENSORS)


@dataclass(frozen=True)
class ExportFamily:
    """How a checkpoint goes out as one Hugging Face family: the reverse of its reader in
    pretrained.FAMILIES.

    Attributes:
        name: the family as messages name it ("Marian").
        model_type: config.json's model_type, which the import reads back.
        config_class: transformers' config class (`transformers.MarianConfig`'s name).
        tokenizer_names: every tokenizer file an export of the family may write.
        model_problems: the transformer settings the family cannot express (one entry each,
            named as `key=value (why)`); the attention's are `unsupported_features`' own.
        tokenizer_problem: why the tokenizers are not the family's, or None.
        config: the config class's settings of the checkpoint (`cfg`, the built model, the
            tokenizers).
        state: the family's tensors by name (float32) of the built model.
        tokenizer_files: the tokenizer files by name.
    """

    name: str
    model_type: str
    config_class: str
    tokenizer_names: tuple[str, ...]
    model_problems: Callable[[TrainConfig, TokenizerPair], list[str]]
    tokenizer_problem: Callable[[TokenizerPair], str | None]
    config: Callable[[TrainConfig, torch.nn.Module, TokenizerPair], dict[str, Any]]
    state: Callable[[torch.nn.Module, TrainConfig], dict[str, torch.Tensor]]
    tokenizer_files: Callable[[TokenizerPair], dict[str, bytes]]


def export_family(tokenizers: TokenizerPair) -> ExportFamily:
    """The family a checkpoint exports as: its target tokenizer's kind in `EXPORT_FAMILIES`
    (an imported or fine-tuned model's own), else Marian, which names what it lacks."""
    return EXPORT_FAMILIES.get(tokenizers.tgt.kind, EXPORT_FAMILIES["marian"])


def export_names() -> frozenset[str]:
    """Every file an export of any family writes: what `force` may replace."""
    names = {*MODEL_FILES, EXPORT_FILE}
    for family in EXPORT_FAMILIES.values():
        names.update(family.tokenizer_names)
    return frozenset(names)


def unsupported_features(
    cfg: TrainConfig, tokenizers: TokenizerPair, family: "ExportFamily | None" = None
) -> list[str]:
    """The settings of a model that a folder of `family` (`export_family`'s by default)
    cannot express (empty: exportable)."""
    family = family or export_family(tokenizers)
    model = cfg.model
    problems = []
    if model.family is not ModelFamily.transformer:
        problems.append(f"model.family={model.family.name} ({family.name} is a transformer)")
    else:
        problems += family.model_problems(cfg, tokenizers) + _attention_problems(cfg, family.name)
    if model.copy or model.coverage:
        problems.append("model.copy/model.coverage (the pointer-generator's copy distribution)")
    tokenizer = family.tokenizer_problem(tokenizers)
    if tokenizer:
        problems.append(tokenizer)
    return problems


def _marian_problems(cfg: TrainConfig, tokenizers: TokenizerPair) -> list[str]:
    model = cfg.model
    problems = []
    if model.norm is Norm.pre:
        problems.append("model.norm=pre (Marian's layers are post-norm, without a final LayerNorm)")
    if model.positions is not Positions.sinusoidal_split:
        problems.append(
            f"model.positions={model.positions.name} (Marian's positions are sinusoids with sin "
            "in the first half of the channels and cos in the second: sinusoidal_split)"
        )
    if model.embed_norm:
        problems.append("model.embed_norm=true (BART's LayerNorm on the embeddings)")
    return problems


def _attention_problems(cfg: TrainConfig, name: str) -> list[str]:
    """What a BART-like family `name` (Marian, BART) lacks of attnseq's attention and layers."""
    model, attention = cfg.model, cfg.model.attention
    problems = []
    if attention.kind is not AttentionKind.full:
        problems.append(
            f"model.attention.kind={attention.kind.name} ({name} has full attention only)"
        )
    if attention.memory_slots > 0:
        problems.append(
            f"model.attention.memory_slots={attention.memory_slots} (persistent memory keys "
            "and values)"
        )
    if not attention.scaled:
        problems.append(f"model.attention.scaled=false ({name} divides q.k by sqrt(d_k))")
    if attention.hard is not HardMode.none:
        problems.append(
            f"model.attention.hard={attention.hard.name} ({name}'s cross-attention is soft)"
        )
    if model.conv_kernel > 0:
        problems.append(
            f"model.conv_kernel={model.conv_kernel} (the encoder's convolution sublayer)"
        )
    return problems


def _marian_tokenizer_problem(tokenizers: TokenizerPair) -> str | None:
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
    shared, tied = _sharing(model)
    return {
        **seq2seq_settings(cfg, tokens),
        "architectures": ["MarianMTModel"],
        "decoder_vocab_size": tokens.tgt.vocab_size,
        "share_encoder_decoder_embeddings": shared,
        "tie_word_embeddings": tied,
    }


def seq2seq_settings(cfg: TrainConfig, tokens: TokenizerPair) -> dict[str, Any]:
    """The settings BART-like configs (Marian's, BART's) share: widths, layer counts,
    dropouts, activation, embedding scale, the position table's length, the special ids
    (the inverse of pretrained.seq2seq_config)."""
    m, target = cfg.model, tokens.tgt
    return {
        "vocab_size": tokens.src.vocab_size,
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
    if decoding.forced_first_token is not None:  # BART's <s>
        settings["forced_bos_token_id"] = decoding.forced_first_token
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
    """MarianMTModel's tensors by name of the model's (`named_tensors`)."""
    m = cfg.model
    return named_tensors(
        model, marian_names(m.enc_layers, m.dec_layers, *_sharing(model)), "Marian"
    )


def named_tensors(
    model: torch.nn.Module, names: dict[str, str], family: str
) -> dict[str, torch.Tensor]:
    """The model's tensors (float32, each its own copy) by the names of `names` ({attnseq's
    name: the family's}), its head masks folded into W^O (head_mask.py), the logits bias
    (V,) -> (1, V) and zero where the model has none (model.output_bias=false)."""
    from attnseq.models.head_mask import folded_state_dict, optional_entry

    state = folded_state_dict(model)
    if LOGITS_BIAS not in state:
        state[LOGITS_BIAS] = torch.zeros(model.output_proj.out_features)
    state[LOGITS_BIAS] = state[LOGITS_BIAS].reshape(1, -1)
    unmapped = [name for name in state if name not in names and not optional_entry(name)]
    if unmapped:  # unsupported_features lets through only what the table maps
        raise ValueError(f"no {family} name for {', '.join(unmapped)}")
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
    """Write `checkpoint` as a Hugging Face model folder `out_dir` of its family
    (`export_family`): new, empty, or (with `force`) an earlier export whose own files
    (`export_names`) are replaced, other files staying.

    Raises:
        UserError: `out_dir` is the checkpoint, holds it, is a file, holds files that are not
            an export (or an export without `force`); the model has settings its family
            cannot express (all of them named); transformers or safetensors is not installed.
        OutputError: the folder cannot be written (full disk, read-only); it is left as it was.
    """
    from attnseq.models.loading import load_trained_model

    check_export_folder(checkpoint, out_dir, force, marker=EXPORT_FILE)
    trained = load_trained_model(checkpoint)
    cfg, tokenizers = trained.cfg, trained.tokenizers
    family = export_family(tokenizers)
    problems = unsupported_features(cfg, tokenizers, family)
    if problems:
        raise UserError(
            f"cannot export to Hugging Face {family.name}: the model uses " + "; ".join(problems)
        )
    transformers, generation_config, save_file = _hugging_face_writers()
    config_class = getattr(transformers, family.config_class)
    config = config_class(**family.config(cfg, trained.model, tokenizers))
    settings, missing = generation_settings(cfg.decoding, tokenizers, cfg.model.max_positions)
    generation = generation_config(**settings)
    if missing:
        log.warning(
            "generation_config.json cannot express %s: generate decodes without them",
            "; ".join(missing),
        )
    tensors = family.state(trained.model, cfg)
    files = family.tokenizer_files(tokenizers)

    def write(staging: Path) -> None:
        config.save_pretrained(staging)
        generation.save_pretrained(staging)
        save_file(tensors, staging / SAFETENSORS, metadata={"format": "pt"})
        for name, data in files.items():
            (staging / name).write_bytes(data)
        marker = {
            "version": EXPORT_VERSION,
            "format": "huggingface",
            "model_type": family.model_type,
        }
        (staging / EXPORT_FILE).write_text(json.dumps(marker), encoding="utf-8")

    write_staged_folder(out_dir, write, replaced=export_names(), last=EXPORT_FILE)
    return out_dir


def _hugging_face_writers() -> tuple[Any, Any, Any]:
    """The transformers module (its config classes), GenerationConfig and safetensors'
    save_file (UserError naming the extra when they are not installed)."""
    try:
        import transformers
        from safetensors.torch import save_file
        from transformers import GenerationConfig
    except ImportError:
        raise UserError(
            "exporting to Hugging Face needs transformers and safetensors: "
            "pip install 'attnseq[hf]'"
        ) from None
    return transformers, GenerationConfig, save_file


def pretrained_files(tokenizers: TokenizerPair) -> dict[str, bytes]:
    """The tokenizer files of a pretrained tokenizer pair (both sides hold the same ones)."""
    return dict(tokenizers.src.files)  # type: ignore[attr-defined]  # a pretrained kind's


# tokenizer kind -> the family its checkpoints export as; bart_export.py adds "bart" (the
# package's __init__ imports it, as it does the readers of pretrained.FAMILIES)
EXPORT_FAMILIES: dict[str, ExportFamily] = {
    "marian": ExportFamily(
        name="Marian",
        model_type="marian",
        config_class="MarianConfig",
        tokenizer_names=TOKENIZER_FILES,
        model_problems=_marian_problems,
        tokenizer_problem=_marian_tokenizer_problem,
        config=marian_config,
        state=marian_state,
        tokenizer_files=pretrained_files,
    )
}
