"""A Hugging Face model folder, or `hf:ORG/NAME[@REVISION]`, read as an attnseq checkpoint: the
config, the tokenizers and the weights of attnseq's own transformer, the family chosen by
config.json's `model_type` (`FAMILIES`: marian). Every name and shape is checked before
anything is built; docs/guides/pretrained.md says what maps to what.
"""

import json
import logging
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from attnseq.config.choices import Activation, ModelFamily, Norm, Positions
from attnseq.config.conversion import config_to_dict
from attnseq.config.schema import TrainConfig
from attnseq.data.marian_tokenizer import MarianTokenizer, read_tokenizer_files
from attnseq.data.tokenizers import TokenizerPair
from attnseq.errors import UserError
from attnseq.io.checkpoint import CHECKPOINT_FORMAT, CHECKPOINT_VERSION
from attnseq.io.hf_hub import hub_folder, is_hub_id

log = logging.getLogger("attnseq")

SAFETENSORS = "model.safetensors"
SAFETENSORS_INDEX = "model.safetensors.index.json"
PYTORCH_BIN = "pytorch_model.bin"
# transformers' activation names -> attnseq's (config/choices.py, Activation); the first name
# of each is the one an export writes (`MARIAN_ACTIVATIONS`): gelu_pytorch_tanh is torch's own
# tanh GELU, which attnseq computes, and swish is OPUS-MT's spelling of SiLU
ACTIVATIONS = {
    "relu": Activation.relu,
    "gelu": Activation.gelu,
    "gelu_pytorch_tanh": Activation.gelu_tanh,
    "gelu_new": Activation.gelu_tanh,
    "swish": Activation.silu,
    "silu": Activation.silu,
}
MARIAN_ACTIVATIONS = {ours: name for name, ours in reversed(ACTIVATIONS.items())}
# transformers' generate defaults for what attnseq's decoding reads (GenerationConfig)
GENERATION_DEFAULTS: dict[str, Any] = {
    "num_beams": 1,
    "max_length": 20,
    "max_new_tokens": None,
    "min_length": 0,
    "length_penalty": 1.0,
    "early_stopping": False,
    "no_repeat_ngram_size": 0,
    "forced_eos_token_id": None,
    "forced_bos_token_id": None,
    "bad_words_ids": None,
}


def is_pretrained_reference(path: str | Path) -> bool:
    """Whether `path` names a Hugging Face model rather than a checkpoint file: an hf: id or a
    folder (a run directory stands for its checkpoint before this is asked). A path that
    cannot be looked up (a name too long) is left to the checkpoint reader, which says so."""
    try:
        return is_hub_id(path) or Path(path).is_dir()
    except OSError:
        return False


def pretrained_payload(path: str | Path) -> dict[str, Any]:
    """What an attnseq checkpoint of the model at `path` (a folder or an hf: id) holds:
    format, version, config, tokenizers, model (its state dict), and "pretrained" (where it
    came from), ready for `load_trained_model`'s checks.

    Raises:
        UserError: no config.json, a model_type attnseq does not read, tokenizer files missing
            or inconsistent with the config, weights missing, not a plain state dict, or of
            names or shapes that do not fit the config.
    """
    folder = hub_folder(path) if is_hub_id(path) else Path(path)
    model_type = read_model_type(folder)
    family = FAMILIES[model_type](folder)
    return {
        "format": CHECKPOINT_FORMAT,
        "version": CHECKPOINT_VERSION,
        "config": config_to_dict(family.train_config()),
        "tokenizers": family.tokenizers().state(),
        "model": family.state_dict(read_weights(folder)),
        "pretrained": {"source": str(path), "folder": str(folder), "model_type": model_type},
    }


def read_json(path: Path) -> dict[str, Any]:
    """A JSON object file; UserError when it is none."""
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
        raise UserError(f"{path} is not readable JSON ({error})") from None
    if not isinstance(value, dict):
        raise UserError(f"{path} holds a JSON {type(value).__name__}, not an object")
    return value


def read_model_type(folder: Path) -> str:
    """config.json's model_type, one of `FAMILIES`; UserError otherwise."""
    supported = ", ".join(sorted(FAMILIES))
    config = folder / "config.json"
    if not config.is_file():
        raise UserError(
            f"{folder} is a folder, not a checkpoint file, and holds no config.json of a Hugging "
            "Face model; pass a checkpoint such as RUN/checkpoints/best.pt, the run directory "
            "RUN, a Hugging Face model folder or hf:ORG/NAME"
        )
    model_type = read_json(config).get("model_type")
    if model_type not in FAMILIES:
        found = "no model_type" if model_type is None else f"model_type {model_type!r}"
        raise UserError(f"{config} has {found}; attnseq reads the model types {supported}")
    return str(model_type)


def read_weights(folder: Path) -> dict[str, torch.Tensor]:
    """The folder's weights by their Hugging Face names, as float32: model.safetensors (or
    its shards), else pytorch_model.bin, which only torch's weights-only unpickler reads."""
    if (folder / SAFETENSORS).is_file():
        return _safetensors([folder / SAFETENSORS])
    if (folder / SAFETENSORS_INDEX).is_file():
        shards = read_json(folder / SAFETENSORS_INDEX).get("weight_map", {})
        return _safetensors([folder / name for name in sorted(set(shards.values()))])
    if (folder / PYTORCH_BIN).is_file():
        return _pytorch_bin(folder / PYTORCH_BIN)
    raise UserError(f"{folder} holds no weights: neither {SAFETENSORS} nor {PYTORCH_BIN}")


def _safetensors(paths: list[Path]) -> dict[str, torch.Tensor]:
    try:
        from safetensors.torch import load_file
    except ImportError:
        raise UserError(
            "reading model.safetensors needs safetensors: pip install 'attnseq[hf]'"
        ) from None
    state: dict[str, torch.Tensor] = {}
    for path in paths:
        try:
            state.update(load_file(path))
        except Exception as error:  # a truncated or foreign file fails in many ways
            raise UserError(f"cannot read {path} ({type(error).__name__}: {error})") from None
    return {name: tensor.float() for name, tensor in state.items()}


def _pytorch_bin(path: Path) -> dict[str, torch.Tensor]:
    try:
        with warnings.catch_warnings():  # torch warns of pickle protocols it did not write
            warnings.simplefilter("ignore", UserWarning)
            state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as error:  # the weights-only unpickler refuses objects; nothing runs
        first = str(error).splitlines()[0] if str(error) else type(error).__name__
        raise UserError(
            f"{path} is not a plain state dict of tensors, so attnseq does not read it (the "
            f"weights-only loader refused it: {first}; nothing in it was run); a "
            "model.safetensors beside config.json is read instead"
        ) from None
    if not isinstance(state, dict) or not all(torch.is_tensor(v) for v in state.values()):
        raise UserError(f"{path} is not a state dict of tensors")
    return {str(name): tensor.float() for name, tensor in state.items()}


@dataclass(frozen=True)
class Tensors:
    """What a family expects of a weights file: {Hugging Face name: shape} of every tensor it
    maps, the optional ones (read and checked, not mapped), and tied copies (name: the name
    whose tensor it must equal)."""

    required: dict[str, tuple[int, ...]]
    optional: dict[str, tuple[int, ...]]
    tied: dict[str, str]


def check_tensors(folder_state: dict[str, torch.Tensor], expected: Tensors, what: str) -> None:
    """UserError naming the tensors of `folder_state` that are missing, unexpected, of the
    wrong shape, or tied copies that differ from their original."""
    shapes = {**expected.required, **expected.optional}
    for name in expected.tied:
        shapes.setdefault(name, expected.required[expected.tied[name]])
    missing = [name for name in expected.required if name not in folder_state]
    unexpected = [name for name in folder_state if name not in shapes]
    wrong = [
        f"{name} {tuple(tensor.shape)} (the config needs {shapes[name]})"
        for name, tensor in folder_state.items()
        if name in shapes and tuple(tensor.shape) != shapes[name]
    ]
    untied = [
        f"{name} (tied to {original})"
        for name, original in expected.tied.items()
        if name in folder_state
        and original in folder_state
        and not torch.equal(folder_state[name], folder_state[original])
    ]
    problems = tensor_problems(
        ("wrong shape", wrong),
        ("missing", missing),
        ("unexpected", unexpected),
        ("different from the tensor the config ties them to", untied),
    )
    if problems:
        raise UserError(f"{what}: its weights do not fit its config.json ({problems})")


def tensor_problems(*groups: tuple[str, list[str]]) -> str:
    """'label: a, b, c ...; label: d' of the (label, tensor names) groups that have names,
    the first three names of each; "" when none has any."""
    return "; ".join(
        f"{label}: {', '.join(names[:3])}{' ...' if len(names) > 3 else ''}"
        for label, names in groups
        if names
    )


def check_layer_settings(config: Any, where: Path) -> None:
    """UserError for a config (transformers' config of a BART-like model) whose encoder and
    decoder differ where attnseq's transformer has one setting, or whose activation attnseq
    lacks."""
    pairs = [
        ("encoder_attention_heads", "decoder_attention_heads"),
        ("encoder_ffn_dim", "decoder_ffn_dim"),
    ]
    for first, second in pairs:
        if getattr(config, first) != getattr(config, second):
            raise UserError(
                f"{where}: {first}={getattr(config, first)} and {second}="
                f"{getattr(config, second)} differ; attnseq's transformer has one value"
            )
    if config.activation_function not in ACTIVATIONS:
        raise UserError(
            f"{where}: activation_function {config.activation_function!r}; attnseq has "
            f"{', '.join(ACTIVATIONS)}"
        )


def seq2seq_config(name: str, config: Any, generation: dict[str, Any]) -> TrainConfig:
    """The TrainConfig of a BART-like config (Marian's, BART's): a post-norm transformer of
    its widths, layer counts, dropouts, activation and embedding scale with a logits bias,
    sequences as long as its position table holds (the source with EOS, BOS + target), and
    the decoding `generate` does with `generation`; the positions and the embeddings' ties
    are the family's to set."""
    cfg = TrainConfig(name=name)
    model = cfg.model
    model.family, model.norm = ModelFamily.transformer, Norm.post
    model.d_model, model.heads = config.d_model, config.encoder_attention_heads
    model.enc_layers, model.dec_layers = config.encoder_layers, config.decoder_layers
    model.ff_dim = config.encoder_ffn_dim
    model.max_positions = config.max_position_embeddings
    model.dropout, model.attention_dropout = config.dropout, config.attention_dropout
    model.activation_dropout = config.activation_dropout
    model.activation = ACTIVATIONS[config.activation_function]
    model.scale_embeddings = bool(config.scale_embedding)
    model.output_bias = True  # final_logits_bias
    cfg.data.max_src_len = cfg.data.max_tgt_len = max(config.max_position_embeddings - 1, 1)
    _set_decoding(cfg, generation, config.eos_token_id)
    bad = generation["bad_words_ids"] or []
    start = _start_id(config)
    # what attnseq never generates: <pad>, and the start token unless it is EOS (BART's)
    never = [[config.pad_token_id]] + ([[start]] if start != config.eos_token_id else [])
    if any(words not in never for words in bad):
        log.warning("%s: bad_words_ids other than <pad> are not applied", name)
    return cfg


def check_special_ids(config: Any, target: Any, where: Path) -> None:
    """UserError unless the config's pad and EOS ids are the target tokenizer's."""
    for key, token_id in (("pad_token_id", target.pad_id), ("eos_token_id", target.eos_id)):
        if getattr(config, key) != token_id:
            raise UserError(
                f"{where}: {key}={getattr(config, key)}, but the tokenizer's is {token_id}"
            )


class MarianFamily:
    """Hugging Face's MarianMTModel (OPUS-MT) as attnseq's transformer: post-norm layers,
    sinusoids split in halves, the model's activation, embedding scale and logits bias, shared
    or separate vocabularies, the decoder starting from <pad> (docs/guides/pretrained.md).

    Args:
        folder: the model folder (config.json, weights, tokenizer files).

    Raises:
        UserError: transformers is missing, or config.json is no Marian config attnseq can
            express.
    """

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.config = _marian_config(folder)
        self.generation = _generation_settings(folder)
        config = self.config
        self.src_size = config.vocab_size
        share = bool(config.share_encoder_decoder_embeddings)
        self.tgt_size = config.vocab_size if share else config.decoder_vocab_size
        # transformers ties the embeddings (source with target, target with the output
        # projection) only with tie_word_embeddings; untied, each has a matrix of its own
        self.tied = bool(config.tie_word_embeddings)
        self.shared = share and self.tied
        self._check_expressible()

    def _check_expressible(self) -> None:
        """UserError for what attnseq's transformer has one setting of where Marian has two."""
        config, where = self.config, self.folder / "config.json"
        check_layer_settings(config, where)
        if (
            config.share_encoder_decoder_embeddings
            and config.decoder_vocab_size != config.vocab_size
        ):
            raise UserError(
                f"{where}: share_encoder_decoder_embeddings with decoder_vocab_size="
                f"{config.decoder_vocab_size} and vocab_size={config.vocab_size}"
            )
        pad = config.pad_token_id
        if pad is None or not 0 <= pad < min(self.src_size, self.tgt_size):
            raise UserError(f"{where}: pad_token_id {pad} is not an id of both vocabularies")

    def train_config(self) -> TrainConfig:
        """The TrainConfig of the model: its transformer and the decoding `generate` does."""
        cfg = seq2seq_config(f"marian {self.folder.name}", self.config, self.generation)
        model = cfg.model
        model.positions = Positions.sinusoidal_split
        model.tie_embeddings = self.tied
        model.share_src_tgt_embeddings = self.shared
        return cfg

    def tokenizers(self) -> TokenizerPair:
        """The source and target sides of the folder's MarianTokenizer, checked against the
        config's vocabulary sizes and special ids."""
        files = read_tokenizer_files(self.folder)
        start = _start_id(self.config)
        source, target = (MarianTokenizer(files, side, start) for side in ("source", "target"))
        where = self.folder / "config.json"
        names = ("vocab.json", "target_vocab.json" if target.separate_vocabs else "vocab.json")
        sizes = (("vocab_size", self.src_size), ("decoder_vocab_size", self.tgt_size))
        for tokenizer, name, (key, size) in zip((source, target), names, sizes, strict=True):
            if tokenizer.vocab_size != size:
                raise UserError(
                    f"{self.folder / name} has {tokenizer.vocab_size} pieces, {where} has "
                    f"{key}={size}: the tokenizer is not this model's"
                )
        check_special_ids(self.config, target, where)
        return TokenizerPair(source, target)

    def tensors(self) -> Tensors:
        """The names and shapes of MarianMTModel's weights."""
        config = self.config
        d, ff = config.d_model, config.encoder_ffn_dim
        required: dict[str, tuple[int, ...]] = {"final_logits_bias": (1, self.tgt_size)}
        optional: dict[str, tuple[int, ...]] = {}
        tied: dict[str, str] = {}
        if self.shared:
            required["model.shared.weight"] = (self.src_size, d)
            tied.update(dict.fromkeys(EMBEDDING_COPIES, "model.shared.weight"))
            tied["lm_head.weight"] = "model.shared.weight"
        else:
            required["model.encoder.embed_tokens.weight"] = (self.src_size, d)
            required["model.decoder.embed_tokens.weight"] = (self.tgt_size, d)
            if config.share_encoder_decoder_embeddings:  # untied: kept, not read
                optional["model.shared.weight"] = (self.src_size, d)
            if self.tied:
                tied["lm_head.weight"] = "model.decoder.embed_tokens.weight"
            else:
                required["lm_head.weight"] = (self.tgt_size, d)
        for side, layers in (
            ("encoder", config.encoder_layers),
            ("decoder", config.decoder_layers),
        ):
            for index in range(layers):
                for name, shape in _layer_shapes(side, d, ff).items():
                    required[f"model.{side}.layers.{index}.{name}"] = shape
        positions = (config.max_position_embeddings, d)
        optional.update({f"model.{side}.embed_positions.weight": positions for side in SIDES})
        return Tensors(required, optional, tied)

    def state_dict(self, hf_state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """attnseq's state dict of `TransformerSeq2Seq` from MarianMTModel's tensors, each
        name and shape checked first (`tensors`)."""
        check_tensors(hf_state, self.tensors(), str(self.folder))
        _check_positions(hf_state, self.config, self.folder)
        config = self.config
        names = marian_names(config.encoder_layers, config.decoder_layers, self.shared, self.tied)
        state = {ours: hf_state[theirs] for ours, theirs in names.items()}
        state[LOGITS_BIAS] = state[LOGITS_BIAS].reshape(-1)  # (1, V) -> (V,)
        return state


SIDES = ("encoder", "decoder")
EMBEDDING_COPIES = ("model.encoder.embed_tokens.weight", "model.decoder.embed_tokens.weight")
# Marian's sublayer names -> attnseq's (models/transformer_layers.py)
SUBLAYERS = {
    "self_attn_layer_norm": "self_block.norm",
    "encoder_attn_layer_norm": "cross_block.norm",
    "encoder_attn": "cross_attn",
    "self_attn": "self_attn",
    "fc1": "ff.inner",
    "fc2": "ff.outer",
    "final_layer_norm": "ff_block.norm",
}


LOGITS_BIAS = "output_proj.bias"  # Marian's final_logits_bias, (1, V) there and (V,) here


def marian_names(enc_layers: int, dec_layers: int, shared: bool, tied: bool) -> dict[str, str]:
    """{attnseq's name: MarianMTModel's name} of every tensor of `TransformerSeq2Seq`, the
    table both the import and the export (huggingface_export.py) read. Tied tensors name one
    Marian tensor: `shared` (one embedding for both sides, tied with the output projection:
    model.shared.weight), else `tied` (the output projection is the decoder's embedding)."""
    src, tgt = (
        ("model.shared.weight",) * 2
        if shared
        else ("model.encoder.embed_tokens.weight", "model.decoder.embed_tokens.weight")
    )
    names = {
        "src_embed.weight": src,
        "tgt_embed.weight": tgt,
        "output_proj.weight": tgt if tied else "lm_head.weight",
        LOGITS_BIAS: "final_logits_bias",
    }
    for side, layers in (("encoder", enc_layers), ("decoder", dec_layers)):
        for index in range(layers):
            for name in _layer_shapes(side, 1, 1):
                marian = f"model.{side}.layers.{index}.{name}"
                names[str(_layer_name(marian))] = marian
    return names


def _start_id(config: Any, fallback: str = "pad_token_id") -> int:
    """The id the decoder starts from: decoder_start_token_id, else the config's `fallback`
    id (<pad> for Marian, </s> for BART, mBART and M2M100)."""
    start = config.decoder_start_token_id
    return int(getattr(config, fallback) if start is None else start)


def _layer_shapes(side: str, d: int, ff: int) -> dict[str, tuple[int, ...]]:
    """Every tensor of one Marian layer of `side`, by its name inside the layer."""
    attentions = ("self_attn", "encoder_attn") if side == "decoder" else ("self_attn",)
    shapes: dict[str, tuple[int, ...]] = {}
    for attention in attentions:
        for projection in ("q_proj", "k_proj", "v_proj", "out_proj"):
            shapes[f"{attention}.{projection}.weight"] = (d, d)
            shapes[f"{attention}.{projection}.bias"] = (d,)
        shapes[f"{attention}_layer_norm.weight"] = shapes[f"{attention}_layer_norm.bias"] = (d,)
    shapes.update(
        {"fc1.weight": (ff, d), "fc1.bias": (ff,), "fc2.weight": (d, ff), "fc2.bias": (d,)}
    )
    shapes["final_layer_norm.weight"] = shapes["final_layer_norm.bias"] = (d,)
    return shapes


def _layer_name(name: str) -> str | None:
    """attnseq's name of a Marian layer tensor (model.decoder.layers.2.fc1.bias ->
    decoder_layers.2.ff.inner.bias); None for a tensor outside the layers."""
    parts = name.split(".")
    if len(parts) < 5 or parts[0] != "model" or parts[2] != "layers":
        return None
    stack = "encoder.layers" if parts[1] == "encoder" else "decoder_layers"
    inside = ".".join(parts[4:])
    for marian, ours in SUBLAYERS.items():  # the longer names first: *_layer_norm before *
        if inside.startswith(marian + "."):
            return f"{stack}.{parts[3]}.{ours}{inside[len(marian) :]}"
    return None


def _check_positions(hf_state: dict[str, torch.Tensor], config: Any, folder: Path) -> None:
    """A stored position table (older files keep one) must be the sinusoids attnseq computes."""
    from attnseq.models.positional import SplitSinusoidalPositionalEncoding

    stored = [f"model.{side}.embed_positions.weight" for side in SIDES]
    if not any(name in hf_state for name in stored):
        return
    table = SplitSinusoidalPositionalEncoding(config.d_model, config.max_position_embeddings).table
    for name in stored:
        if name in hf_state and not torch.allclose(hf_state[name], table, atol=1e-5):
            raise UserError(
                f"{folder}: {name} is not Marian's sinusoidal table, which attnseq computes "
                "(a model with trained positions is another family)"
            )


def _marian_config(folder: Path) -> Any:
    """transformers' MarianConfig of the folder (its defaults for what config.json leaves
    out); UserError when transformers is missing or the config is refused."""
    try:
        from transformers import MarianConfig
    except ImportError:
        raise UserError(
            "reading a Marian model needs transformers: pip install 'attnseq[hf]'"
        ) from None
    try:
        return MarianConfig.from_pretrained(folder, local_files_only=True)
    except Exception as error:  # transformers' checks raise several kinds
        raise UserError(
            f"{folder / 'config.json'} is no valid Marian config ({type(error).__name__}: {error})"
        ) from None


def _generation_settings(folder: Path) -> dict[str, Any]:
    """What `generate` decodes with: generation_config.json's settings, else config.json's,
    else transformers' defaults (`GENERATION_DEFAULTS`)."""
    source = folder / "generation_config.json"
    values = read_json(source if source.is_file() else folder / "config.json")
    return {
        key: default if values.get(key) is None else values[key]
        for key, default in GENERATION_DEFAULTS.items()
    }


def _set_decoding(cfg: TrainConfig, generation: dict[str, Any], eos_id: int) -> None:
    """cfg.decoding as `generate` decodes with `generation`: beam, |Y|^alpha length penalty,
    its stopping rule, the limit max_new_tokens (or max_length with the start token) with a
    forced EOS last, min_length, no_repeat_ngram_size, forced_bos_token_id as every output's
    first token. <pad> is never generated in attnseq, as opus-mt's bad_words_ids ask; other
    bad words and sampling are not applied."""
    decoding = cfg.decoding
    decoding.beam = max(int(generation["num_beams"]), 1)
    decoding.length_penalty = float(generation["length_penalty"])
    decoding.length_penalty_offset = 0.0
    decoding.stop_at_current_length = generation["early_stopping"] != "never"
    decoding.eos_at_limit = generation["forced_eos_token_id"] == eos_id
    new_tokens = generation["max_new_tokens"]
    generated = int(generation["max_length"]) - 1 if new_tokens is None else int(new_tokens)
    decoding.max_output_ratio = 0.0
    decoding.max_output_extra = max(generated - int(decoding.eos_at_limit), 1)
    decoding.min_length = max(int(generation["min_length"]) - 1, 0)
    decoding.no_repeat_ngram = int(generation["no_repeat_ngram_size"])
    forced_first = generation["forced_bos_token_id"]
    decoding.forced_first_token = None if forced_first is None else int(forced_first)
    if generation["early_stopping"] is True:
        log.warning("early_stopping=true of generate is approximated by its default rule")


# model_type -> family; bart_family.py, which builds on the helpers above, adds "bart" (the
# package's __init__ imports it, as data/ does its tokenizer kinds)
FAMILIES: dict[str, Any] = {"marian": MarianFamily}
