"""Random-weight stand-ins for Hugging Face BART models, built offline with transformers: a
byte-level BPE tokenizer trained with `tokenizers` on a few hundred lines of the shared
English corpus, saved as vocab.json and merges.txt with BART's special ids (<s> 0, <pad> 1,
</s> 2, <unk> 3, <mask> last), and `BartForConditionalGeneration(BartConfig(...))
.save_pretrained`, weights scaled so that outputs are decisive (`marian_stand_ins.decisive`).

`SHAPES` names the variants the tests use; `bart_folder` builds one (once per test run with
`built_once`)."""

import functools
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from marian_stand_ins import corpus_lines, decisive

from attnseq.models.loading import TrainedModel, load_trained_model

SPECIALS = ("<s>", "<pad>", "</s>", "<unk>")


@dataclass(frozen=True)
class Shape:
    """One stand-in: its BartConfig settings and its generation config."""

    config: dict[str, Any]
    generation: dict[str, Any] = field(default_factory=dict)
    weights: str = "safetensors"  # or "bin": pytorch_model.bin with every tied copy
    # added to EOS's logit bias (see marian_stand_ins.Shape): outputs of many lengths
    eos_bias: float = 3.5
    weight_scale: float = 1.5


SHAPES = {
    # bart-base's architecture in small: gelu, unscaled embeddings, everything tied
    "tied": Shape(
        {
            "d_model": 32,
            "encoder_layers": 2,
            "decoder_layers": 2,
            "encoder_attention_heads": 4,
            "decoder_attention_heads": 4,
            "encoder_ffn_dim": 64,
            "decoder_ffn_dim": 64,
            "activation_function": "gelu",
            "scale_embedding": False,
        },
        generation={"num_beams": 4, "max_length": 24},
    ),
    # scaled embeddings, gelu's tanh form, an output projection and embeddings of their own,
    # six heads of 8, kept as a .bin
    "untied": Shape(
        {
            "d_model": 48,
            "encoder_layers": 1,
            "decoder_layers": 3,
            "encoder_attention_heads": 6,
            "decoder_attention_heads": 6,
            "encoder_ffn_dim": 40,
            "decoder_ffn_dim": 40,
            "activation_function": "gelu_new",
            "scale_embedding": True,
            "tie_word_embeddings": False,
        },
        weights="bin",
        eos_bias=6.0,
    ),
}


def write_tokenizer(folder: Path, data: Path) -> dict[str, int]:
    """vocab.json and merges.txt of a byte-level BPE trained on 400 English lines (and 100
    German ones, so that some merges span its letters) in `folder`; returns the vocabulary."""
    from tokenizers import ByteLevelBPETokenizer

    bpe = ByteLevelBPETokenizer()
    lines = corpus_lines(data, "en", 400) + corpus_lines(data, "de", 100)
    bpe.train_from_iterator(
        lines, vocab_size=600, min_frequency=2, special_tokens=list(SPECIALS), show_progress=False
    )
    bpe.save_model(str(folder))
    vocab = json.loads((folder / "vocab.json").read_text(encoding="utf-8"))
    vocab["<mask>"] = len(vocab)
    (folder / "vocab.json").write_text(json.dumps(vocab, ensure_ascii=False), encoding="utf-8")
    return vocab


def bart_folder(folder: Path, data: Path, name: str, seed: int = 0) -> Path:
    """Build the stand-in `name` of `SHAPES` in `folder` (config.json, weights, tokenizer)."""
    from transformers import BartConfig, BartForConditionalGeneration

    shape = SHAPES[name]
    vocab = write_tokenizer(folder, data)
    settings = {
        "vocab_size": len(vocab),
        "bos_token_id": vocab["<s>"],
        "pad_token_id": vocab["<pad>"],
        "eos_token_id": vocab["</s>"],
        "decoder_start_token_id": vocab["</s>"],
        "forced_bos_token_id": vocab["<s>"],
        "forced_eos_token_id": vocab["</s>"],
        "max_position_embeddings": 64,
        **shape.config,
    }
    torch.manual_seed(seed)
    model = BartForConditionalGeneration(BartConfig(**settings)).eval()
    decisive(model, seed, shape.eos_bias, shape.weight_scale, positions=True)
    # transformers 5 keeps forced_bos_token_id in the generation config alone
    generation = {"forced_bos_token_id": vocab["<s>"], **shape.generation}
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
    return load_trained_model(folder)


@functools.cache
def reference(folder: Path) -> tuple[Any, Any]:
    """transformers' BartForConditionalGeneration (eager attention: it returns its weights)
    and BartTokenizer."""
    from transformers import BartForConditionalGeneration
    from transformers import BartTokenizer as HFBartTokenizer

    model = BartForConditionalGeneration.from_pretrained(folder, attn_implementation="eager")
    return model.eval(), HFBartTokenizer.from_pretrained(folder)
