"""What the tests of every pretrained family share (Marian, BART, M2M100 and NLLB, mBART-50):
one teacher-forced batch through transformers' model and attnseq's, the equivalence of their
log-probabilities and attention weights, transformers' `generate` beside attnseq's `decode` on
Multi30k's validation sources, and a bad folder's one-line refusal."""

import dataclasses
import functools
import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch

from attnseq.decoding import decode
from attnseq.errors import UserError
from attnseq.models.loading import TrainedModel, load_trained_model

TOLERANCE = 1e-5  # fp32; fp64 log-probabilities agree within 1e-9
VALID = 24  # source sentences of Multi30k's validation split

# transformers' output, attnseq's output and the labels (B, T), -100 at padding, in a dtype
TeacherForced = tuple[Any, Any, torch.Tensor]


def teacher_forced(
    hf: Any, ours: torch.nn.Module, batch: Any, dtype: torch.dtype = torch.float32
) -> TeacherForced:
    """One tokenized batch (`tokenizer(sources, text_target=targets)`) through both models,
    each decoder fed attnseq's start token and the target but its last token; both models are
    back in fp32 afterwards."""
    labels = batch["labels"].masked_fill(batch["labels"] == hf.config.pad_token_id, -100)
    start = torch.full((batch["labels"].size(0), 1), ours.bos_id)
    tgt_in = torch.cat([start, batch["labels"][:, :-1]], dim=1)  # (B, T)
    with torch.no_grad():
        theirs = hf.to(dtype)(
            input_ids=batch["input_ids"],
            attention_mask=batch["attention_mask"],
            decoder_input_ids=tgt_in,
            output_attentions=True,
        )
        lengths = batch["attention_mask"].sum(dim=1)
        mine = ours.to(dtype)(batch["input_ids"], lengths, tgt_in, need_weights=True)
    hf.float(), ours.float()
    return theirs, mine, labels


def assert_log_probabilities_match(forward: Callable[[torch.dtype], TeacherForced]) -> None:
    """The log-probability of every target token within TOLERANCE in fp32, and of every token
    of the vocabulary within 1e-9 in fp64."""
    theirs, mine, labels = forward(torch.float32)
    real = labels != -100
    index = labels.clamp(min=0).unsqueeze(-1)
    expected = theirs.logits.log_softmax(-1).gather(-1, index).squeeze(-1)[real]
    got = mine.logits.log_softmax(-1).gather(-1, index).squeeze(-1)[real]
    assert (expected - got).abs().max() < TOLERANCE
    theirs, mine, _ = forward(torch.float64)
    difference = theirs.logits.log_softmax(-1) - mine.logits.log_softmax(-1)
    assert difference[real].abs().max() < 1e-9


def assert_attention_weights_match(
    theirs: Any, mine: Any, target: torch.Tensor | None = None, source: torch.Tensor | None = None
) -> None:
    """Every weight of the cross, decoder self and encoder self attention within TOLERANCE; with
    `target` (B, T) and `source` (B, S) masks, only the weights of those query positions."""
    pairs = {
        "cross": (theirs.cross_attentions, mine.attention, target),
        "decoder self": (theirs.decoder_attentions, mine.decoder_self_attention, target),
        "encoder self": (theirs.encoder_attentions, mine.encoder_self_attention, source),
    }
    for name, (layers, weights, queries) in pairs.items():
        expected = torch.stack(layers, dim=1)  # (B, L, H, T, S) as attnseq returns them
        assert expected.shape == weights.shape, name
        difference = (expected - weights).abs().permute(0, 3, 1, 2, 4)  # (B, T, L, H, S)
        assert (difference if queries is None else difference[queries]).max() < TOLERANCE, name


@functools.cache
def valid_sources(language: str, count: int = VALID) -> list[str]:
    """The first `count` sentences of Multi30k's validation split in `language`."""
    from conftest import SHARED_DATA

    path = SHARED_DATA / "multi30k" / f"val.{language}"
    return path.read_text(encoding="utf-8").splitlines()[:count]


def generate_outputs(hf: Any, batch: Any, **settings: Any) -> list[list[int]]:
    """transformers' `generate` outputs of a tokenized batch, <pad> never generated, each
    without the start token, EOS and padding."""
    pad, eos = hf.config.pad_token_id, hf.config.eos_token_id
    with torch.no_grad():
        out = hf.generate(**batch, bad_words_ids=[[pad]], **settings)
    outputs = []
    for row in out[:, 1:].tolist():
        row = row[: row.index(eos)] if eos in row else row
        outputs.append([token for token in row if token != pad])
    return outputs


def decoded(trained: TrainedModel, batch: Any, **changes: Any) -> list[list[int]]:
    """attnseq's best output of every row of a tokenized batch, its decoding settings changed
    by `changes`."""
    settings = dataclasses.replace(trained.cfg.decoding, **changes)
    lengths = batch["attention_mask"].sum(dim=1)
    return [
        found[0].tokens for found in decode(trained.model, batch["input_ids"], lengths, settings)
    ]


def refused(folder: Path, overrides: list[str] | None = None) -> str:
    """The one-line message with which reading the folder is refused."""
    with pytest.raises(UserError) as error:
        load_trained_model(folder, overrides)
    message = str(error.value)
    assert "\n" not in message and "Traceback" not in message
    return message


def edited_copy(source: Path, tmp_path: Path, name: str = "config.json", **changes: Any) -> Path:
    """A copy of the model folder whose JSON file `name` has `changes`."""
    folder = tmp_path / "model"
    shutil.copytree(source, folder)
    settings = json.loads((folder / name).read_text())
    (folder / name).write_text(json.dumps({**settings, **changes}))
    return folder
