"""Export of a trained transformer to CTranslate2 (OpenNMT's C++ inference engine): the weights
mapped onto `ctranslate2.specs.TransformerSpec` (`transformer_spec`; the mapping is in
docs/internals/models.md), saved as a model folder `ctranslate2.Translator` loads, with the
checkpoint's tokenizers beside it. What the engine lacks is a UserError naming the feature
(`unsupported_features`). The folder is written whole in a staging folder and moved into place.
"""

import json
from pathlib import Path
from typing import Any

import numpy as np
import torch

from attnseq.config.choices import Activation, AttentionKind, HardMode, ModelFamily, Norm
from attnseq.config.schema import TrainConfig
from attnseq.data.sentencepiece_tokenizer import SentencePieceTokenizer
from attnseq.data.tokenizers import Tokenizer, TokenizerPair
from attnseq.errors import UserError
from attnseq.io.atomic import STAGING_PREFIX, write_staged_folder
from attnseq.io.user_paths import (
    check_output_folder,
    refuse_folder_holding_inputs,
    refuse_output_over_inputs,
)

EXPORT_FILE = "attnseq_export.json"
EXPORT_NAMES = frozenset(
    {
        "model.bin",
        "config.json",
        "shared_vocabulary.json",
        "source_vocabulary.json",
        "target_vocabulary.json",
        EXPORT_FILE,
        "source.model",
        "target.model",
        "joint.model",
    }
)
"""Every file an export writes (CTranslate2's and attnseq's): what `force` may replace."""
EXPORT_VERSION = 1
LAYER_NORM_EPS = 1e-5  # torch.nn.LayerNorm's default, what every attnseq LayerNorm uses
# attnseq's activations -> common_spec.Activation's names
ACTIVATIONS = {
    Activation.relu: "RELU",
    Activation.gelu: "GELU",
    Activation.gelu_tanh: "GELUTanh",
    Activation.silu: "SWISH",
}


def unsupported_features(cfg: TrainConfig) -> list[str]:
    """The model features CTranslate2's TransformerSpec cannot express (empty: exportable).
    Post- and pre-norm, every positional table, BART's offset and layernorm_embedding, the
    logits bias, the activations and the embedding scale all map (`transformer_spec`)."""
    model = cfg.model
    if model.family is not ModelFamily.transformer:
        return [f"model.family={model.family.name} (CTranslate2 exports transformers only)"]
    problems = []
    if model.copy or model.coverage:
        problems.append("model.copy/model.coverage (the pointer-generator's copy distribution)")
    if model.attention.kind is not AttentionKind.full:
        problems.append(
            f"model.attention.kind={model.attention.kind.name} (an efficient self-attention "
            "kind; the engine has full attention only)"
        )
    if model.attention.memory_slots > 0:
        problems.append(
            f"model.attention.memory_slots={model.attention.memory_slots} (persistent memory "
            "keys and values; the engine attends over the sequence only)"
        )
    if not model.attention.scaled:
        problems.append(
            "model.attention.scaled=false (unscaled dot products; the engine divides by sqrt(d_k))"
        )
    if model.attention.hard is not HardMode.none:
        problems.append(
            f"model.attention.hard={model.attention.hard.name} (the engine's cross-attention "
            "is soft)"
        )
    if model.conv_kernel > 0:
        problems.append(
            f"model.conv_kernel={model.conv_kernel} (the encoder's convolution sublayer; the "
            "engine's encoder layers have none)"
        )
    return problems


def vocabulary_tokens(tokenizer: Tokenizer) -> list[str]:
    """One string per id: the tokenizer's piece, or "<id:N>" where the piece would not be a
    usable vocabulary entry (empty, holding whitespace, or a duplicate)."""
    pieces = tokenizer.ids_to_pieces(range(tokenizer.vocab_size))
    seen: set[str] = set()
    tokens = []
    for index, piece in enumerate(pieces):
        usable = piece and not any(char.isspace() for char in piece) and piece not in seen
        tokens.append(piece if usable else f"<id:{index}>")
        seen.add(tokens[-1])
    return tokens


def export_ctranslate2(
    checkpoint: Path, out_dir: Path, quantize: str | None = None, force: bool = False
) -> Path:
    """Convert `checkpoint` into a CTranslate2 model folder `out_dir`: new, empty, or (with
    `force`) an earlier export whose own files (`EXPORT_NAMES`) are replaced, other files
    staying. The folder holds CTranslate2's files and attnseq's: attnseq_export.json (the
    run's config and tokenizer states, what `attnseq translate --engine ctranslate2` reads)
    and, for sentencepiece tokenizers, source.model / target.model (or joint.model).

    Raises:
        UserError: `out_dir` is the checkpoint, holds it, is a file, holds files that are not an
            export (or an export without `force`); the model uses a feature the engine lacks;
            ctranslate2 is not installed.
        OutputError: the folder cannot be written (full disk, read-only); it is left as it was.
    """
    from attnseq.models.loading import load_trained_model

    check_export_folder(checkpoint, out_dir, force)
    trained = load_trained_model(checkpoint)
    problems = unsupported_features(trained.cfg)
    if problems:
        raise UserError("cannot export to CTranslate2: the model uses " + "; ".join(problems))
    ctranslate2 = import_ctranslate2()
    spec = transformer_spec(trained.model, trained.cfg, trained.tokenizers)

    class _Converter(ctranslate2.converters.Converter):
        def _load(self):  # type: ignore[no-untyped-def]
            return spec

    def write(staging: Path) -> None:
        # the staging folder is this export's own: convert may replace it
        _Converter().convert(str(staging), quantization=quantize, force=True)
        _write_attnseq_files(staging, trained.cfg, trained.tokenizers)

    write_staged_folder(out_dir, write, replaced=EXPORT_NAMES, last=EXPORT_FILE)
    return out_dir


def check_export_folder(
    checkpoint: Path,
    out_dir: Path,
    force: bool,
    force_name: str = "force=True",
    marker: str = EXPORT_FILE,
) -> None:
    """UserError unless `out_dir` can take an export of `checkpoint` without losing anything:
    not the checkpoint nor a folder holding it, a folder (or none yet) we can write into, and
    either empty or an earlier export (with `force`), which its file `marker` tells apart.
    `force_name`: how the message asks for `force` (a command passes its option)."""
    inputs = [("CHECKPOINT", checkpoint)]
    refuse_output_over_inputs(out_dir, "OUT_DIR", inputs)
    refuse_folder_holding_inputs(out_dir, "OUT_DIR", inputs)
    if out_dir.is_symlink() and not out_dir.exists():
        raise UserError(f"OUT_DIR {out_dir} is a symlink to a missing folder")
    check_output_folder(out_dir, "OUT_DIR")
    if not out_dir.is_dir():
        return
    present = [path.name for path in out_dir.iterdir() if not path.name.startswith(STAGING_PREFIX)]
    if marker in present:
        if not force:
            raise UserError(
                f"OUT_DIR {out_dir} holds an earlier export; pass {force_name} to replace its files"
            )
    elif present:
        shown = ", ".join(sorted(present)[:3]) + (", ..." if len(present) > 3 else "")
        raise UserError(
            f"OUT_DIR {out_dir} holds files that are not an attnseq export ({shown}); "
            "give a new or empty folder"
        )


def import_ctranslate2() -> Any:
    """The ctranslate2 module (UserError naming the extra when it is not installed)."""
    try:
        import ctranslate2
        import ctranslate2.converters
    except ImportError:
        raise UserError(
            "ctranslate2 is not installed: pip install 'attnseq[ct2]' (or pip install ctranslate2)"
        ) from None
    return ctranslate2


def transformer_spec(model: torch.nn.Module, cfg: TrainConfig, tokenizers: TokenizerPair) -> Any:
    """The `TransformerSpec` of a `TransformerSeq2Seq`, weights set: post- or pre-norm (with
    its final LayerNorms), the activation, the embedding scale, layernorm_embedding, the
    logits bias and the special tokens of the model's own tokenizers (an imported model's
    decoder starts from its own start token). The positional encodings go out as the table
    PE(0 .. max_positions - 1) the model computes, for every kind: the engine's own sinusoids
    put sines in the first half of the channels, attnseq's `sinusoidal` interleaves them
    (positional.py), and a learned table with an offset (BART's) starts at row offset."""
    from ctranslate2.specs import common_spec, transformer_spec

    from attnseq.models.head_mask import folded_state_dict

    m = cfg.model
    alignment_layer = m.alignment_layer % m.dec_layers
    # the engine averages the first `alignment_heads` heads: all of them, or head 0 alone
    alignment_heads = 1 if m.alignment_head == 0 else m.heads
    spec = transformer_spec.TransformerSpec.from_config(
        (m.enc_layers, m.dec_layers),
        m.heads,
        pre_norm=m.norm is Norm.pre,
        activation=getattr(common_spec.Activation, ACTIVATIONS[m.activation]),
        alignment_layer=alignment_layer,
        alignment_heads=alignment_heads,
        layernorm_embedding=m.embed_norm,
    )
    _set_special_tokens(spec.config, tokenizers.tgt)
    spec.config.layer_norm_epsilon = LAYER_NORM_EPS
    weights = {name: _array(value) for name, value in folded_state_dict(model).items()}
    for side, ours in ((spec.encoder, "src"), (spec.decoder, "tgt")):
        table = _position_table(getattr(model, f"{ours}_positions"), m.max_positions)
        _set_input(side, weights[f"{ours}_embed.weight"], table, m.scale_embeddings)
        if m.embed_norm:
            _set_norm(side.layernorm_embedding, weights, f"{ours}_embed_norm")
    for index, layer in enumerate(spec.encoder.layer):
        scope = f"encoder.layers.{index}"
        _set_attention(layer.self_attention, weights, f"{scope}.self_attn", self_attention=True)
        _set_norm(layer.self_attention.layer_norm, weights, f"{scope}.self_block.norm")
        _set_ffn(layer.ffn, weights, scope)
    for index, layer in enumerate(spec.decoder.layer):
        scope = f"decoder_layers.{index}"
        _set_attention(layer.self_attention, weights, f"{scope}.self_attn", self_attention=True)
        _set_norm(layer.self_attention.layer_norm, weights, f"{scope}.self_block.norm")
        _set_attention(layer.attention, weights, f"{scope}.cross_attn", self_attention=False)
        _set_norm(layer.attention.layer_norm, weights, f"{scope}.cross_block.norm")
        _set_ffn(layer.ffn, weights, scope)
    if m.norm is Norm.pre:
        _set_norm(spec.encoder.layer_norm, weights, "encoder.final_norm")
        _set_norm(spec.decoder.layer_norm, weights, "decoder_norm")
    spec.decoder.projection.weight = weights["output_proj.weight"]  # tied: the embedding's
    if m.output_bias:  # a pretrained model's logits bias
        spec.decoder.projection.bias = weights["output_proj.bias"]
    spec.register_source_vocabulary(vocabulary_tokens(tokenizers.src))
    spec.register_target_vocabulary(vocabulary_tokens(tokenizers.tgt))
    return spec


def _set_special_tokens(config: Any, target: Tokenizer) -> None:
    """The engine's BOS, EOS, UNK and decoder start tokens: the target tokenizer's own (the
    decoder starts from `bos_id`: attnseq's <s>, Marian's <pad>, BART's </s>)."""
    tokens = vocabulary_tokens(target)
    config.decoder_start_token = tokens[target.bos_id]
    config.bos_token = tokens[getattr(target, "start_id", target.bos_id)]
    config.eos_token, config.unk_token = tokens[target.eos_id], tokens[target.unk_id]


def _array(value: torch.Tensor) -> np.ndarray:
    return value.detach().to("cpu", torch.float32).numpy()


def _position_table(encoding: torch.nn.Module, length: int) -> np.ndarray:
    """PE(0 .. length - 1) as the model's encoding module computes it, (length, d_model)."""
    with torch.no_grad():
        return _array(encoding(torch.arange(length)))


def _set_input(spec: Any, embedding: np.ndarray, table: np.ndarray, scaled: bool) -> None:
    embeddings = spec.embeddings if isinstance(spec.embeddings, list) else [spec.embeddings]
    embeddings[0].weight = embedding  # the encoder has a list (one per source feature)
    spec.scale_embeddings = scaled  # true: sqrt(d_model) * E[x], section 3.4
    spec.position_encodings.encodings = table


def _set_norm(spec: Any, weights: dict[str, np.ndarray], scope: str) -> None:
    spec.gamma = weights[f"{scope}.weight"]
    spec.beta = weights[f"{scope}.bias"]


def _set_linear(spec: Any, weights: dict[str, np.ndarray], *scopes: str) -> None:
    """Linear layers stacked along the output dimension (one fused projection)."""
    spec.weight = np.concatenate([weights[f"{scope}.weight"] for scope in scopes])
    biases = [weights.get(f"{scope}.bias") for scope in scopes]
    if all(bias is not None for bias in biases):
        spec.bias = np.concatenate(biases)


def _set_attention(
    spec: Any, weights: dict[str, np.ndarray], scope: str, self_attention: bool
) -> None:
    q, k, v, out = (f"{scope}.{name}_proj" for name in ("q", "k", "v", "out"))
    if self_attention:
        _set_linear(spec.linear[0], weights, q, k, v)
    else:
        _set_linear(spec.linear[0], weights, q)
        _set_linear(spec.linear[1], weights, k, v)
    _set_linear(spec.linear[-1], weights, out)


def _set_ffn(spec: Any, weights: dict[str, np.ndarray], scope: str) -> None:
    _set_norm(spec.layer_norm, weights, f"{scope}.ff_block.norm")
    _set_linear(spec.linear_0, weights, f"{scope}.ff.inner")
    _set_linear(spec.linear_1, weights, f"{scope}.ff.outer")


def _write_attnseq_files(out_dir: Path, cfg: TrainConfig, tokenizers: TokenizerPair) -> None:
    from attnseq.config.conversion import config_to_dict

    payload = {
        "version": EXPORT_VERSION,
        "config": config_to_dict(cfg),
        "tokenizers": tokenizers.state(),
        "position_limit": cfg.model.max_positions,
    }
    (out_dir / EXPORT_FILE).write_text(json.dumps(payload), encoding="utf-8")
    sides = (
        {"joint": tokenizers.src}
        if tokenizers.joint
        else {
            "source": tokenizers.src,
            "target": tokenizers.tgt,
        }
    )
    for name, tokenizer in sides.items():
        if isinstance(tokenizer, SentencePieceTokenizer):
            (out_dir / f"{name}.model").write_bytes(tokenizer.model_proto)
