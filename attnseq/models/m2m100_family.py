"""Hugging Face's M2M100ForConditionalGeneration (`model_type: m2m_100`: M2M100 and NLLB) as
attnseq's transformer: pre-norm layers with a final LayerNorm in the encoder and the decoder,
fairseq's sinusoids two rows on, scaled embeddings, the language codes of its tokenizer
(docs/guides/pretrained.md). The helpers here serve mBART too (mbart_family.py).
"""

import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import torch

from attnseq.config.choices import Norm, Positions
from attnseq.config.schema import TrainConfig
from attnseq.data.multilingual_tokenizer import (
    LanguageCodeTokenizer,
    M2M100Tokenizer,
    NllbTokenizer,
    read_tokenizer_files,
)
from attnseq.data.tokenizers import TokenizerPair
from attnseq.errors import UserError
from attnseq.models.pretrained import (
    FAMILIES,
    SIDES,
    Tensors,
    _generation_settings,
    _layer_name,
    _layer_shapes,
    _start_id,
    check_layer_settings,
    check_special_ids,
    check_tensors,
    seq2seq_config,
)

# each stack's final LayerNorm: Hugging Face's name in the stack -> attnseq's
FINAL_NORMS = {"encoder": "encoder.final_norm", "decoder": "decoder_norm"}
EMBEDDINGS = ("model.encoder.embed_tokens.weight", "model.decoder.embed_tokens.weight")


def hf_config(folder: Path, class_name: str, family: str) -> Any:
    """transformers' config `class_name` of the folder (its defaults for what config.json
    leaves out), checked (`check_layer_settings`, `check_vocabulary_ids`); UserError when
    transformers is missing or the config is refused."""
    try:
        import transformers
    except ImportError:
        raise UserError(
            f"reading an {family} model needs transformers: pip install 'attnseq[hf]'"
        ) from None
    try:
        config = getattr(transformers, class_name).from_pretrained(folder, local_files_only=True)
    except Exception as error:  # transformers' checks raise several kinds
        raise UserError(
            f"{folder / 'config.json'} is no valid {family} config ({type(error).__name__}: "
            f"{error})"
        ) from None
    check_layer_settings(config, folder / "config.json")
    check_vocabulary_ids(config, folder / "config.json")
    return config


def check_vocabulary_ids(config: Any, where: Path) -> None:
    """UserError unless the config's pad and EOS ids are ids of its vocabulary."""
    for key in ("pad_token_id", "eos_token_id"):
        token_id = getattr(config, key)
        if token_id is None or not 0 <= token_id < config.vocab_size:
            raise UserError(f"{where}: {key} {token_id} is not an id of the vocabulary")


def tokenizer_class(folder: Path, names: Iterable[str]) -> str | None:
    """tokenizer_config.json's tokenizer_class without "Fast" (None without one); UserError
    for a class not among `names`."""
    path = folder / "tokenizer_config.json"
    try:
        named = json.loads(path.read_text(encoding="utf-8")).get("tokenizer_class")
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, AttributeError):
        return None
    if named is None:
        return None
    named, names = str(named).removesuffix("Fast"), list(names)
    if named not in names:
        raise UserError(
            f"{path} names tokenizer_class {named}; attnseq reads this model type with "
            f"{', '.join(names)}"
        )
    return named


def language_tokenizers(
    family: Any, kind: type[LanguageCodeTokenizer], start: int
) -> TokenizerPair:
    """Both sides of a multilingual model's tokenizer of `kind`, its decoder starting from
    `start`, over the config's vocabulary, the target language the folder's (else the code
    generate is forced to start with), checked against the config's special ids."""
    config, folder = family.config, family.folder
    files = read_tokenizer_files(folder, kind)
    source = kind(files, "source", start, vocab_size=config.vocab_size)
    target = kind(files, "target", start, vocab_size=config.vocab_size)
    forced = family.generation["forced_bos_token_id"]
    by_id = {token_id: code for code, token_id in target.codes.items()}
    if target.language is None and forced in by_id:
        target.set_language(by_id[forced])
    check_special_ids(config, target, folder / "config.json")
    return TokenizerPair(source, target)


def force_the_target_language(cfg: TrainConfig, tokenizers: TokenizerPair) -> None:
    """decoding.forced_first_token: the target language's code, where the folder names one
    (`use_language_codes` sets it again for the language a command chooses)."""
    target = tokenizers.tgt
    if isinstance(target, LanguageCodeTokenizer) and target.language is not None:
        cfg.decoding.forced_first_token = target.language_id()


def add_final_norms(tensors: Tensors, d_model: int) -> Tensors:
    """`tensors` with the final LayerNorm of the encoder and of the decoder."""
    required = dict(tensors.required)
    for side in SIDES:
        required[f"model.{side}.layer_norm.weight"] = required[f"model.{side}.layer_norm.bias"] = (
            d_model,
        )
    return Tensors(required, tensors.optional, tensors.tied)


def final_norm_state(hf_state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """attnseq's tensors of the two final LayerNorms."""
    return {
        f"{ours}.{kind}": hf_state[f"model.{side}.layer_norm.{kind}"]
        for side, ours in FINAL_NORMS.items()
        for kind in ("weight", "bias")
    }


class M2M100Family:
    """Hugging Face's M2M100 and NLLB as attnseq's transformer (`FAMILIES["m2m_100"]`): the
    shared vocabulary's embeddings (one matrix when tie_word_embeddings, else one per side and
    the output projection's own), no logits bias, fairseq's sinusoidal positions with the
    offset pad_token_id + 1, pre-norm layers and final LayerNorms, the decoder starting from
    `</s>` with the target language's code forced first.

    Args:
        folder: the model folder (config.json, weights, tokenizer files).

    Raises:
        UserError: transformers is missing, or config.json is no M2M100 config attnseq can
            express.
    """

    kinds: dict[str, type[LanguageCodeTokenizer]] = {
        "M2M100Tokenizer": M2M100Tokenizer,
        "NllbTokenizer": NllbTokenizer,
    }

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.config = hf_config(folder, "M2M100Config", "M2M100")
        self.generation = _generation_settings(folder)
        self.tied = bool(self.config.tie_word_embeddings)
        self.pair: TokenizerPair | None = None

    def train_config(self) -> TrainConfig:
        """The TrainConfig of the model: its transformer and the decoding `generate` does."""
        cfg = seq2seq_config(f"m2m_100 {self.folder.name}", self.config, self.generation)
        model = cfg.model
        model.norm, model.output_bias = Norm.pre, False
        model.positions = Positions.sinusoidal_fairseq
        model.position_offset = self.config.pad_token_id + 1  # fairseq's first position
        model.tie_embeddings = model.share_src_tgt_embeddings = self.tied
        force_the_target_language(cfg, self.tokenizers())
        return cfg

    def tokenizers(self) -> TokenizerPair:
        """The source and target sides of the folder's M2M100Tokenizer (a vocab.json) or
        NllbTokenizer, as tokenizer_config.json names it."""
        if self.pair is None:  # built once: the config reads its target language
            named = tokenizer_class(self.folder, self.kinds)
            if named is None:
                vocab = (self.folder / "vocab.json").is_file()
                named = "M2M100Tokenizer" if vocab else "NllbTokenizer"
            start = _start_id(self.config, "eos_token_id")
            self.pair = language_tokenizers(self, self.kinds[named], start)
        return self.pair

    def tensors(self) -> Tensors:
        """The names and shapes of M2M100ForConditionalGeneration's weights."""
        config = self.config
        d, ff, vocab = config.d_model, config.encoder_ffn_dim, config.vocab_size
        required: dict[str, tuple[int, ...]] = {}
        # the sinusoids are computed, not read; a file may keep them
        positions = (config.max_position_embeddings + config.pad_token_id + 1, d)
        optional = {f"model.{side}.embed_positions.weights": positions for side in SIDES}
        tied: dict[str, str] = {}
        if self.tied:
            required["model.shared.weight"] = (vocab, d)
            tied.update(dict.fromkeys((*EMBEDDINGS, "lm_head.weight"), "model.shared.weight"))
        else:  # each its own matrix; model.shared is kept, not read
            required.update(dict.fromkeys((*EMBEDDINGS, "lm_head.weight"), (vocab, d)))
            optional["model.shared.weight"] = (vocab, d)
        for side, layers in (
            ("encoder", config.encoder_layers),
            ("decoder", config.decoder_layers),
        ):
            for index in range(layers):
                for name, shape in _layer_shapes(side, d, ff).items():
                    required[f"model.{side}.layers.{index}.{name}"] = shape
        return add_final_norms(Tensors(required, optional, tied), d)

    def state_dict(self, hf_state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """attnseq's state dict of `TransformerSeq2Seq` from M2M100's tensors, each name and
        shape checked first (`tensors`)."""
        check_tensors(hf_state, self.tensors(), str(self.folder))
        if self.tied:
            src_embed = tgt_embed = output = hf_state["model.shared.weight"]
        else:
            src_embed, tgt_embed = (hf_state[name] for name in EMBEDDINGS)
            output = hf_state["lm_head.weight"]
        state = {
            "src_embed.weight": src_embed,
            "tgt_embed.weight": tgt_embed,
            "output_proj.weight": output,
            **final_norm_state(hf_state),
        }
        for name, tensor in hf_state.items():
            mapped = _layer_name(name)
            if mapped is not None:
                state[mapped] = tensor
        return state


FAMILIES["m2m_100"] = M2M100Family
