"""Random-weight stand-ins for Hugging Face's multilingual models, built offline with
transformers: M2M100 (M2M100Tokenizer: vocab.json over a sentencepiece BPE model, codes
`__en__`), NLLB (NllbTokenizer: a BPE tokenizer.json with fairseq's id offset, codes
`eng_Latn`) and mBART-50 (MBart50Tokenizer: a unigram tokenizer.json, codes `en_XX`), each
trained on a few hundred lines of English, German and French, and
`...ForConditionalGeneration(Config(...)).save_pretrained`, weights scaled so that outputs are
decisive (`marian_stand_ins.decisive`).

`SHAPES` names the variants the tests use; `multilingual_folder` builds one (once per test run
with `built_once`); `imported` reads one as attnseq does, `reference` as transformers does."""

import functools
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from marian_stand_ins import UNKNOWN_CHARACTERS, corpus_lines, decisive

from attnseq.models.loading import TrainedModel, load_trained_model

SPECIALS = {"<s>": 0, "<pad>": 1, "</s>": 2, "<unk>": 3}  # fairseq's first ids


@dataclass(frozen=True)
class Shape:
    """One stand-in: its model and tokenizer, config settings, languages and generation."""

    model_type: str  # "m2m_100" or "mbart"
    tokenizer: str  # "m2m100", "nllb" or "mbart50"
    config: dict[str, Any]
    languages: tuple[str, str | None]  # tokenizer_config.json's src_lang, tgt_lang
    generation: dict[str, Any] = field(default_factory=dict)
    weights: str = "safetensors"  # or "bin": pytorch_model.bin with every tied copy
    extra_rows: int = 0  # embedding rows past the tokenizer's ids (NLLB's padding rows)
    # added to EOS's logit (`marian_stand_ins.decisive`): outputs of many lengths
    eos_bias: float = 3.5
    weight_scale: float = 1.5


SHAPES = {
    # m2m100_418M's architecture in small: relu, scaled embeddings, everything tied
    "m2m100": Shape(
        "m2m_100",
        "m2m100",
        {
            "d_model": 32,
            "encoder_layers": 2,
            "decoder_layers": 2,
            "encoder_attention_heads": 4,
            "decoder_attention_heads": 4,
            "encoder_ffn_dim": 64,
            "decoder_ffn_dim": 64,
        },
        ("en", "de"),
        generation={"num_beams": 4, "max_length": 24, "forced_eos_token_id": 2},
        eos_bias=6.0,
    ),
    # NLLB's tokenizer, unscaled embeddings and separate matrices, six heads of 8, as a .bin;
    # no target language in tokenizer_config.json: the forced first token names it
    "nllb": Shape(
        "m2m_100",
        "nllb",
        {
            "d_model": 48,
            "encoder_layers": 1,
            "decoder_layers": 3,
            "encoder_attention_heads": 6,
            "decoder_attention_heads": 6,
            "encoder_ffn_dim": 40,
            "decoder_ffn_dim": 40,
            "scale_embedding": False,
            "tie_word_embeddings": False,
        },
        ("eng_Latn", None),
        generation={"forced_bos_token_id": "fra_Latn"},
        weights="bin",
        extra_rows=2,
        eos_bias=2.5,
    ),
    # mbart-large-50's architecture in small: gelu, scaled embeddings, tied
    "mbart50": Shape(
        "mbart",
        "mbart50",
        {
            "d_model": 32,
            "encoder_layers": 2,
            "decoder_layers": 2,
            "encoder_attention_heads": 4,
            "decoder_attention_heads": 4,
            "encoder_ffn_dim": 64,
            "decoder_ffn_dim": 64,
            "activation_function": "gelu",
            "scale_embedding": True,
        },
        ("en_XX", "de_DE"),
        generation={"num_beams": 4, "max_length": 24},
        eos_bias=5.0,
    ),
    # untied, gelu's tanh form, unscaled embeddings, three decoder layers, as a .bin
    "mbart50-untied": Shape(
        "mbart",
        "mbart50",
        {
            "d_model": 48,
            "encoder_layers": 1,
            "decoder_layers": 3,
            "encoder_attention_heads": 6,
            "decoder_attention_heads": 6,
            "encoder_ffn_dim": 40,
            "decoder_ffn_dim": 40,
            "activation_function": "gelu_new",
            "scale_embedding": False,
            "tie_word_embeddings": False,
        },
        ("de_DE", "fr_XX"),
        weights="bin",
        eos_bias=3.0,
    ),
}


def _train_spm(folder: Path, data: Path, model_type: str) -> Path:
    """A sentencepiece model of 300 English and German lines and 200 French ones."""
    import sentencepiece as spm

    lines = [
        *corpus_lines(data, "en", 300),
        *corpus_lines(data, "de", 300),
        *corpus_lines(data, "fr", 200),
    ]
    prefix = folder / f"spm-{model_type}"
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(lines),
        model_prefix=str(prefix),
        vocab_size=500,
        model_type=model_type,
        character_coverage=1.0,
        hard_vocab_limit=False,
        num_threads=1,
        minloglevel=2,
    )
    return prefix.with_suffix(".model")


def _m2m100_tokenizer(folder: Path, data: Path, languages: tuple[str, str | None]) -> Any:
    """vocab.json (fairseq's specials, then the pieces, every 13th left out: a piece the
    vocabulary lacks reads as <unk>) over a BPE sentencepiece.bpe.model."""
    import sentencepiece as spm
    from transformers import M2M100Tokenizer

    model = _train_spm(folder, data, "bpe")
    processor = spm.SentencePieceProcessor(model_file=str(model))
    vocab = dict(SPECIALS)
    for index in range(processor.get_piece_size()):
        if not (processor.is_control(index) or processor.is_unknown(index)) and index % 13 != 5:
            vocab.setdefault(processor.id_to_piece(index), len(vocab))
    (folder / "vocab-work.json").write_text(json.dumps(vocab, ensure_ascii=False), "utf-8")
    src, tgt = languages
    tokenizer = M2M100Tokenizer(
        str(folder / "vocab-work.json"), str(model), src_lang=src, tgt_lang=tgt
    )
    tokenizer.save_pretrained(folder)
    (folder / "vocab-work.json").unlink()
    model.unlink()
    model.with_suffix(".vocab").unlink()
    return tokenizer


def _nllb_tokenizer(folder: Path, data: Path, languages: tuple[str, str | None]) -> Any:
    """tokenizer.json of a BPE sentencepiece model with fairseq's offset (its pieces one id
    up, after <s> <pad> </s> <unk>), the codes after them; sentencepiece.bpe.model beside."""
    from tokenizers.models import BPE
    from transformers import NllbTokenizer
    from transformers.convert_slow_tokenizer import SentencePieceExtractor

    model = _train_spm(folder, data, "bpe")
    extracted = SentencePieceExtractor(str(model)).extract(BPE)
    vocab = dict(SPECIALS)
    for piece, index in sorted(extracted["vocab"].items(), key=lambda item: item[1]):
        if index >= 3:  # sentencepiece's <unk> <s> </s> are fairseq's specials
            vocab[piece] = index + 1
    src, tgt = languages
    tokenizer = NllbTokenizer(
        vocab=vocab,
        merges=extracted["merges"],
        src_lang=src,
        tgt_lang=tgt,
        _spm_precompiled_charsmap=extracted["_spm_precompiled_charsmap"],
    )
    tokenizer.save_pretrained(folder)
    model.rename(folder / "sentencepiece.bpe.model")
    model.with_suffix(".vocab").unlink()
    return tokenizer


def _mbart50_tokenizer(folder: Path, data: Path, languages: tuple[str, str | None]) -> Any:
    """tokenizer.json of a unigram sentencepiece model in fairseq's order, the codes and
    <mask> after the pieces; sentencepiece.bpe.model beside (the name mBART-50 gives it)."""
    from tokenizers.models import Unigram
    from transformers import MBart50Tokenizer
    from transformers.convert_slow_tokenizer import SentencePieceExtractor

    model = _train_spm(folder, data, "unigram")
    extracted = SentencePieceExtractor(str(model)).extract(Unigram)
    src, tgt = languages
    tokenizer = MBart50Tokenizer(
        vocab=extracted["vocab"],
        _spm_precompiled_charsmap=extracted["_spm_precompiled_charsmap"],
        src_lang=src,
        tgt_lang=tgt,
    )
    tokenizer.save_pretrained(folder)
    model.rename(folder / "sentencepiece.bpe.model")
    model.with_suffix(".vocab").unlink()
    return tokenizer


TOKENIZERS = {"m2m100": _m2m100_tokenizer, "nllb": _nllb_tokenizer, "mbart50": _mbart50_tokenizer}


def multilingual_folder(folder: Path, data: Path, name: str, seed: int = 0) -> Path:
    """Build the stand-in `name` of `SHAPES` in `folder` (config.json, weights, tokenizer)."""
    import transformers

    shape = SHAPES[name]
    tokenizer = TOKENIZERS[shape.tokenizer](folder, data, shape.languages)
    ids = tokenizer.get_vocab().values()
    if shape.tokenizer == "m2m100":  # the codes follow vocab.json, then 8 made-up words
        rows = tokenizer.vocab_size + len(tokenizer.lang_code_to_id) + tokenizer.num_madeup_words
    else:
        rows = max(ids) + 1 + shape.extra_rows
    settings = {
        "vocab_size": rows,
        "bos_token_id": 0,
        "pad_token_id": 1,
        "eos_token_id": 2,
        "decoder_start_token_id": 2,
        "forced_eos_token_id": 2,
        "max_position_embeddings": 64,
        **shape.config,
    }
    if shape.model_type == "m2m_100":
        config, model_class = transformers.M2M100Config, transformers.M2M100ForConditionalGeneration
    else:
        config, model_class = transformers.MBartConfig, transformers.MBartForConditionalGeneration
    torch.manual_seed(seed)
    model = model_class(config(**settings)).eval()
    decisive(model, seed, shape.eos_bias, shape.weight_scale, positions=True)
    generation = dict(shape.generation)
    if isinstance(generation.get("forced_bos_token_id"), str):
        generation["forced_bos_token_id"] = tokenizer.convert_tokens_to_ids(
            generation["forced_bos_token_id"]
        )
    for key, value in generation.items():
        setattr(model.generation_config, key, value)
    model.save_pretrained(folder)
    if shape.weights == "bin":
        state = {key: value.clone() for key, value in model.state_dict().items()}
        (folder / "model.safetensors").unlink()
        torch.save(state, folder / "pytorch_model.bin")  # with the tied copies
    return folder


@functools.cache
def imported(folder: Path) -> TrainedModel:
    """The folder as attnseq reads it (once a folder)."""
    return load_trained_model(folder)


@functools.cache
def reference(folder: Path) -> tuple[Any, Any]:
    """transformers' model (eager attention: it returns its weights) and tokenizer."""
    import transformers

    model_type = json.loads((folder / "config.json").read_text())["model_type"]
    model_class = (
        transformers.M2M100ForConditionalGeneration
        if model_type == "m2m_100"
        else transformers.MBartForConditionalGeneration
    )
    model = model_class.from_pretrained(folder, attn_implementation="eager").eval()
    return model, transformers.AutoTokenizer.from_pretrained(folder)


def tokenizer_texts() -> list[str]:
    """1000 lines each of English, German and French that the stand-ins' tokenizers are not
    trained on, and texts of unknown characters, codes, blanks and special tokens."""
    from conftest import SHARED_DATA

    texts = [
        line
        for language in ("en", "de", "fr")
        for line in corpus_lines(SHARED_DATA, language, 1000, skip=5000)
    ]
    specials = [
        f"{UNKNOWN_CHARACTERS} and {UNKNOWN_CHARACTERS[0]}x",
        "",
        "   two  spaces  ",
        "a </s> in the text <unk> <pad> <s> and <mask> too",
        "en_XX __de__ fra_Latn as words",
    ]
    return texts + specials
