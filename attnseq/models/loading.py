"""A trained model from its checkpoint (`load_trained_model`): the one loader of eval, translate,
visualize-alignment, the Python API and the scripts. A checkpoint is a file anyone can hand over,
so its structure is checked before use, each problem one UserError naming the checkpoint and what
is wrong with it; a Hugging Face model folder (or hf:ORG/NAME) is read as the checkpoint it would
be (models/pretrained.py) and checked alike.
"""

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from attnseq.config.choices import Hierarchy
from attnseq.config.conversion import config_from_dict
from attnseq.config.schema import TrainConfig
from attnseq.config.threads import torch_default_threads
from attnseq.data.multilingual_tokenizer import use_language_codes
from attnseq.data.segments import SourceSegmenter
from attnseq.data.tokenizers import TokenizerPair
from attnseq.errors import UserError
from attnseq.io.checkpoint import load_checkpoint
from attnseq.models import build_model
from attnseq.models.head_mask import optional_entry
from attnseq.models.pretrained import is_pretrained_reference, pretrained_payload, tensor_problems
from attnseq.models.seq2seq import Seq2Seq, Vocabularies

# torch's own thread count, read as attnseq loads torch, before any command sets one
torch_default_threads()

# entry -> the type a checkpoint must hold there
_REQUIRED = {"config": dict, "tokenizers": dict, "model": dict}


@dataclass
class TrainedModel:
    """What a checkpoint holds for inference: the model (CPU, eval mode), its resolved config
    (overrides applied), its tokenizers, and the raw payload for anything else."""

    model: Seq2Seq
    cfg: TrainConfig
    tokenizers: TokenizerPair
    payload: dict[str, Any]

    def __repr__(self) -> str:
        """One line, e.g. "TrainedModel(transformer, 1,234,567 parameters, vocab 8000/8000,
        step 1200, payload: config, tokenizers, model, optimizer, ...)": the payload's entries
        by name, never their contents (weights, optimizer and RNG state)."""
        family = self.cfg.model.family.value
        if "ensemble" in self.payload:
            family = f"ensemble of {len(self.payload['ensemble'])} {family}"
        parameters = sum(parameter.numel() for parameter in self.model.parameters())
        vocab = f"vocab {self.tokenizers.src.vocab_size}/{self.tokenizers.tgt.vocab_size}"
        progress = self.payload.get("progress")
        step = progress.get("step") if isinstance(progress, dict) else None
        words = [family, f"{parameters:,} parameters", vocab]
        if isinstance(step, int):
            words.append(f"step {step}")
        words.append(f"payload: {', '.join(map(str, self.payload))}")
        return f"TrainedModel({', '.join(words)})"


def model_for(cfg: TrainConfig, tokenizers: TokenizerPair) -> Seq2Seq:
    """An untrained model of `cfg.model` over the tokenizers' vocabularies."""
    tgt = tokenizers.tgt
    vocab = Vocabularies(
        src_size=tokenizers.src.vocab_size,
        tgt_size=tgt.vocab_size,
        pad_id=tgt.pad_id,
        bos_id=tgt.bos_id,
        eos_id=tgt.eos_id,
        unk_id=tgt.unk_id,
        joint=tokenizers.joint,
    )
    segmenter = None
    if cfg.model.attention.hierarchy is not Hierarchy.none:  # segments from the source's ids
        segmenter = SourceSegmenter.from_tokenizer(tokenizers.src, cfg.model.attention.max_segments)
    return build_model(cfg.model, vocab, segmenter)


def check_structure(path: Path, payload: dict[str, Any]) -> None:
    """UserError unless `payload` has a config, tokenizers and a state dict of tensors."""
    for key, kind in _REQUIRED.items():
        if not isinstance(payload.get(key), kind):
            found = "missing" if key not in payload else f"a {type(payload[key]).__name__}"
            raise UserError(
                f"{path} is not a usable attnseq checkpoint: its {key!r} entry is {found}, "
                f"not a {kind.__name__}"
            )
    not_tensors = [name for name, value in payload["model"].items() if not torch.is_tensor(value)]
    if not_tensors:
        raise UserError(f"{path}: model entry {not_tensors[0]!r} is not a tensor")


def load_trained_model(path: Path, overrides: list[str] | None = None) -> TrainedModel:
    """Load and check a checkpoint, apply `overrides` (key=value) to its config, build its
    model and load the weights. A Hugging Face model folder or hf:ORG/NAME[@REVISION] is read
    as the checkpoint it would be (models/pretrained.py).

    Raises:
        UserError: the file is missing or not an attnseq checkpoint, its structure is broken
            (see the module docstring), or an override is invalid.
    """
    read = pretrained_payload if is_pretrained_reference(path) else load_checkpoint
    payload = read(path)
    check_structure(path, payload)
    try:
        config_from_dict(payload["config"])
    except Exception as error:  # UserError for a bad value; others for a mangled structure
        raise UserError(f"{path}: its config is not a valid attnseq config ({error})") from None
    cfg = config_from_dict(payload["config"], overrides)  # a bad override: the user's error
    try:
        tokenizers = TokenizerPair.from_state(payload["tokenizers"])
    except UserError:
        raise
    except Exception as error:  # a damaged state fails in many ways inside the tokenizers
        raise UserError(
            f"{path}: its tokenizer state is broken ({type(error).__name__}: {error})"
        ) from None
    use_language_codes(cfg, tokenizers)  # a multilingual model's data.*_lang_code
    model = model_for(cfg, tokenizers)
    load_weights(path, model, payload["model"])
    return TrainedModel(model.eval(), cfg, tokenizers, payload)


def load_weights(path: Path, model: Seq2Seq, state: dict[str, torch.Tensor]) -> None:
    """`model.load_state_dict(state)`, or a UserError naming the tensors that do not fit."""
    expected = model.state_dict()
    missing = [name for name in expected if name not in state and not optional_entry(name)]
    unexpected = [name for name in state if name not in expected]
    wrong = [
        f"{name} {tuple(state[name].shape)} (the config needs {tuple(tensor.shape)})"
        for name, tensor in expected.items()
        if name in state and state[name].shape != tensor.shape
    ]
    problems = tensor_problems(
        ("wrong shape", wrong), ("missing", missing), ("unexpected", unexpected)
    )
    if problems:
        raise UserError(
            f"{path}: its weights do not fit the model its config describes ({problems})"
        )
    model.load_state_dict(state)
