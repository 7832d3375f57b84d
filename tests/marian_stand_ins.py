"""Random-weight stand-ins for Hugging Face Marian (OPUS-MT) models, built offline with
transformers: sentencepiece models trained on a few hundred lines of the shared corpora, a
vocab.json as OPUS-MT models have it (</s> 0, <unk> 1, the pieces, <pad> last), and
`MarianMTModel(MarianConfig(...)).save_pretrained`, weights scaled so that outputs are decisive.

`SHAPES` names the variants the tests use; `marian_folder` builds one (once per test run with
`built_once`); `imported` reads one as attnseq does, `reference` as transformers does."""

import functools
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

if TYPE_CHECKING:
    from attnseq.models.loading import TrainedModel

# characters that appear in no training line: the sentencepiece models do not know them
UNKNOWN_CHARACTERS = "☃ 𝄞 ꙮ ⸘"
LANGUAGE_TOKENS = (">>fra<<", ">>deu<<")
# teacher-forced pairs the tests compare the two models on (one with unknown characters)
SOURCES = [
    "Ein Mann fährt mit dem Fahrrad über eine Brücke.",
    "Zwei Hunde spielen im Schnee.",
    f"Eine Frau {UNKNOWN_CHARACTERS} singt.",
    "Kinder.",
]
TARGETS = [
    "A man rides his bike across a bridge.",
    "Two dogs play in the snow.",
    "A woman sings.",
    "Children playing on the beach with a big red ball and a small dog.",
]


@dataclass(frozen=True)
class Shape:
    """One stand-in: its MarianConfig settings and how its tokenizer and weights are kept."""

    config: dict[str, Any]
    separate_vocabs: bool = False  # a target_vocab.json of its own
    weights: str = "safetensors"  # or "bin": pytorch_model.bin with every tied copy
    generation: dict[str, Any] = field(default_factory=dict)
    # added to EOS's logit bias: with repeats forbidden, outputs end after a varying number
    # of tokens (the tokens ranked above EOS get used up); without, most run to the limit
    eos_bias: float = 5.0
    weight_scale: float = 1.5  # the weights' std times sqrt(fan-in)


SHAPES = {
    # opus-mt-de-en's architecture in small: swish, scaled embeddings, one shared vocabulary
    "shared": Shape(
        {
            "d_model": 32,
            "encoder_layers": 2,
            "decoder_layers": 2,
            "encoder_attention_heads": 4,
            "decoder_attention_heads": 4,
            "encoder_ffn_dim": 64,
            "decoder_ffn_dim": 64,
            "activation_function": "swish",
            "scale_embedding": True,
        },
        generation={"num_beams": 4, "max_length": 24, "bad_words_ids": "pad"},
        eos_bias=3.5,
    ),
    # separate source and target vocabularies and embeddings, gelu, unscaled embeddings
    "separate": Shape(
        {
            "d_model": 24,
            "encoder_layers": 1,
            "decoder_layers": 3,
            "encoder_attention_heads": 2,
            "decoder_attention_heads": 2,
            "encoder_ffn_dim": 40,
            "decoder_ffn_dim": 40,
            "activation_function": "gelu",
            "scale_embedding": False,
            "share_encoder_decoder_embeddings": False,
        },
        separate_vocabs=True,
        eos_bias=2.0,
    ),
    # relu, an output projection of its own (not tied), eight heads of 8, kept as a .bin
    "untied": Shape(
        {
            "d_model": 64,
            "encoder_layers": 3,
            "decoder_layers": 1,
            "encoder_attention_heads": 8,
            "decoder_attention_heads": 8,
            "encoder_ffn_dim": 48,
            "decoder_ffn_dim": 48,
            "activation_function": "relu",
            "scale_embedding": True,
            "tie_word_embeddings": False,
        },
        weights="bin",
    ),
}


def corpus_lines(data: Path, language: str, count: int, skip: int = 0) -> list[str]:
    """`count` lines of German or English (Multi30k train) or French (Tatoeba)."""
    if language == "fr":
        rows = (data / "tatoeba" / "eng-fra.txt").read_text(encoding="utf-8").splitlines()
        return [row.split("\t")[1] for row in rows[skip : skip + count]]
    lines = (data / "multi30k" / f"train.{language}").read_text(encoding="utf-8").splitlines()
    return lines[skip : skip + count]


def _train_spm(lines: list[str], prefix: Path, vocab_size: int) -> None:
    import sentencepiece as spm

    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(lines),
        model_prefix=str(prefix),
        vocab_size=vocab_size,
        model_type="unigram",
        character_coverage=1.0,
        hard_vocab_limit=False,
        num_threads=1,
        minloglevel=2,
    )


def _pieces(model: Path) -> list[str]:
    import sentencepiece as spm

    processor = spm.SentencePieceProcessor(model_file=str(model))
    return [
        processor.id_to_piece(index)
        for index in range(processor.get_piece_size())
        if not (processor.is_control(index) or processor.is_unknown(index))
    ]


def _vocab(pieces: list[str], pad_last: bool) -> dict[str, int]:
    """</s> 0, <unk> 1, the pieces (every 13th left out: a piece the vocabulary lacks reads
    as <unk>), the language tokens, <pad> last (or at 2)."""
    kept = [piece for index, piece in enumerate(pieces) if index % 13 != 5]
    tokens = ["</s>", "<unk>"] + ([] if pad_last else ["<pad>"])
    for piece in [*kept, *LANGUAGE_TOKENS]:
        if piece not in tokens:
            tokens.append(piece)
    if pad_last:
        tokens.append("<pad>")
    return {token: index for index, token in enumerate(tokens)}


def write_tokenizer(folder: Path, data: Path, separate_vocabs: bool) -> dict[str, dict[str, int]]:
    """source.spm (German), target.spm (English), vocab.json (and target_vocab.json) and
    MarianTokenizer's own files in `folder`; returns the vocabularies."""
    from transformers import MarianTokenizer

    work = folder / "spm"
    work.mkdir()
    _train_spm(corpus_lines(data, "de", 400), work / "source", 300)
    _train_spm(corpus_lines(data, "en", 400), work / "target", 260)
    source, target = _pieces(work / "source.model"), _pieces(work / "target.model")
    files = {"source_spm": work / "source.model", "target_spm": work / "target.model"}
    if separate_vocabs:  # <pad> at 2 in both: one pad_token_id serves both embeddings
        vocabs = {"vocab.json": _vocab(source, False), "target_vocab.json": _vocab(target, False)}
    else:
        vocabs = {"vocab.json": _vocab(source + target, True)}
    for name, vocab in vocabs.items():
        (work / name).write_text(json.dumps(vocab, ensure_ascii=False), encoding="utf-8")
    tokenizer = MarianTokenizer(
        vocab=str(work / "vocab.json"),
        target_vocab_file=str(work / "target_vocab.json") if separate_vocabs else None,
        separate_vocabs=separate_vocabs,
        source_lang="de",
        target_lang="en",
        **{name: str(path) for name, path in files.items()},
    )
    tokenizer.save_pretrained(folder)
    for path in sorted(work.iterdir()):
        path.unlink()
    work.rmdir()
    return vocabs


def decisive(
    model: torch.nn.Module, seed: int, eos_bias: float, scale: float, positions: bool = False
) -> None:
    """Every weight drawn anew, large enough that the outputs are far from uniform: the
    layer norms' gains and biases, the attention and FFN biases and final_logits_bias too
    (EOS's raised by `eos_bias`; through the decoder's final LayerNorm in a model without
    one), learned position tables with `positions` (a sinusoidal table is kept)."""
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, tensor in model.state_dict().items():
            if "embed_positions" in name and not positions:
                continue
            noise = torch.randn(tensor.shape, generator=generator)
            if name.endswith(("layer_norm.weight", "layernorm_embedding.weight")):
                tensor.copy_(1.0 + 0.3 * noise)
            elif name.endswith("bias"):
                tensor.copy_(0.3 * noise)
            else:  # weights: std `scale` / sqrt(fan-in)
                tensor.copy_(noise * scale / tensor.shape[-1] ** 0.5)
        eos = model.config.eos_token_id
        if hasattr(model, "final_logits_bias"):
            model.final_logits_bias[0, eos] += eos_bias
        else:  # M2M100 has none: EOS's logit rises through the decoder's final LayerNorm
            row = model.lm_head.weight[eos]
            model.model.decoder.layer_norm.bias += eos_bias * row / row.dot(row)


def marian_folder(folder: Path, data: Path, name: str, seed: int = 0) -> Path:
    """Build the stand-in `name` of `SHAPES` in `folder` (config.json, weights, tokenizer)."""
    from transformers import MarianConfig, MarianMTModel

    shape = SHAPES[name]
    vocabs = write_tokenizer(folder, data, shape.separate_vocabs)
    vocab = vocabs["vocab.json"]
    target = vocabs.get("target_vocab.json", vocab)
    settings = {
        "vocab_size": len(vocab),
        "decoder_vocab_size": len(target),
        "pad_token_id": vocab["<pad>"],
        "decoder_start_token_id": vocab["<pad>"],
        "eos_token_id": 0,
        "forced_eos_token_id": 0,
        "max_position_embeddings": 96,
        **shape.config,
    }
    torch.manual_seed(seed)
    model = MarianMTModel(MarianConfig(**settings)).eval()
    decisive(model, seed, shape.eos_bias, shape.weight_scale)
    generation = dict(shape.generation)
    if generation.get("bad_words_ids") == "pad":
        generation["bad_words_ids"] = [[vocab["<pad>"]]]
    for key, value in generation.items():
        setattr(model.generation_config, key, value)
    if shape.weights == "bin":
        model.save_pretrained(folder)
        state = {key: value.clone() for key, value in model.state_dict().items()}
        (folder / "model.safetensors").unlink()
        torch.save(state, folder / "pytorch_model.bin")  # with the tied and position copies
    else:
        model.save_pretrained(folder)
    return folder


@functools.cache
def imported(folder: Path) -> "TrainedModel":
    """The Marian folder as attnseq reads it (once a folder)."""
    from attnseq.models.loading import load_trained_model

    return load_trained_model(folder)


@functools.cache
def reference(folder: Path) -> tuple[Any, Any]:
    """transformers' MarianMTModel (eager attention: it returns its weights) and tokenizer."""
    from transformers import MarianMTModel, MarianTokenizer

    model = MarianMTModel.from_pretrained(folder, attn_implementation="eager").eval()
    return model, MarianTokenizer.from_pretrained(folder)


def tokenizer_texts() -> list[str]:
    """1000 lines each of German, English and French that the stand-ins' tokenizers are not
    trained on, and texts of unknown characters, language tokens, blanks and special tokens."""
    from conftest import SHARED_DATA

    texts = [
        line
        for language in ("de", "en", "fr")
        for line in corpus_lines(SHARED_DATA, language, 1000, skip=5000)
    ]
    specials = [
        f"{UNKNOWN_CHARACTERS} und {UNKNOWN_CHARACTERS[0]}x",
        ">>fra<< Ein Hund läuft.",
        ">>deu<<",
        "",
        "   zwei  Leerzeichen  ",
        "ein </s> im Text <unk> <pad>",
    ]
    return texts + specials
