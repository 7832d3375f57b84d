"""Checkpoint averaging: copies average to the same model, two models to their mean, models that
do not match (or head masks that differ) are refused, and so is one file given twice;
`attnseq average` writes a checkpoint that loads."""

import os
import shutil
from pathlib import Path
from typing import Any

import pytest
import torch
from helpers import one_line_exit_2, tiny_config
from typer.testing import CliRunner

from attnseq.cli.app import app
from attnseq.config.conversion import config_to_dict
from attnseq.data.tokenizers import TokenizerPair, train_tokenizer
from attnseq.errors import UserError
from attnseq.io.checkpoint import load_checkpoint, save_checkpoint
from attnseq.models.loading import model_for
from attnseq.training.averaging import average_checkpoints

TEXTS = ["March 3, 1998", "1998-03-03", "12/05/2001"]


def write_checkpoint(path: Path, seed: int, *overrides: str) -> dict[str, Any]:
    """A checkpoint as training writes it (random weights from `seed`)."""
    cfg = tiny_config(*overrides)
    char = train_tokenizer("char", TEXTS)
    tokenizers = TokenizerPair(char, char)
    torch.manual_seed(seed)
    model = model_for(cfg, tokenizers)
    optimizer = torch.optim.Adam(model.parameters())
    payload = {
        "config": config_to_dict(cfg),
        "tokenizers": tokenizers.state(),
        "model": model.state_dict(),
        "optimizer": optimizer.state_dict(),
        "scheduler": {},
        "progress": {"step": seed},
        "rng": {"torch": torch.get_rng_state()},
    }
    save_checkpoint(path, payload)
    return payload


def test_average_of_copies_is_the_same_model(tmp_path: Path) -> None:
    original = write_checkpoint(tmp_path / "a.pt", seed=1)
    shutil.copyfile(tmp_path / "a.pt", tmp_path / "copy.pt")
    averaged = average_checkpoints([tmp_path / "a.pt", tmp_path / "copy.pt"])
    assert averaged["model"].keys() == original["model"].keys()
    for name, tensor in original["model"].items():
        assert torch.equal(averaged["model"][name], tensor), name
        assert averaged["model"][name].dtype == tensor.dtype
    assert averaged["config"] == original["config"]
    assert averaged["tokenizers"] == original["tokenizers"]
    assert not {"optimizer", "scheduler", "progress", "rng"} & averaged.keys()


def test_average_of_two_models_is_their_mean(tmp_path: Path) -> None:
    first = write_checkpoint(tmp_path / "a.pt", seed=1)
    second = write_checkpoint(tmp_path / "b.pt", seed=2)
    averaged = average_checkpoints([tmp_path / "a.pt", tmp_path / "b.pt"])
    for name, tensor in first["model"].items():
        expected = (tensor.double() + second["model"][name].double()) / 2
        torch.testing.assert_close(averaged["model"][name], expected.float())
    assert averaged["averaged_from"] == [str(tmp_path / "a.pt"), str(tmp_path / "b.pt")]
    # the average is a working model
    model = model_for(tiny_config(), TokenizerPair.from_state(averaged["tokenizers"]))
    model.load_state_dict(averaged["model"])


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["model.hidden=64"], "shape"),  # same names, other shapes
        (["model.family=transformer"], "different parameters"),
        (["model.dropout=0.3"], "different model configurations (model.dropout)"),
    ],
)
def test_mismatched_checkpoints_are_refused(
    tmp_path: Path, overrides: list[str], message: str
) -> None:
    write_checkpoint(tmp_path / "a.pt", 1)
    write_checkpoint(tmp_path / "b.pt", 2, *overrides)
    with pytest.raises(UserError, match=message.replace("(", r"\(").replace(")", r"\)")):
        average_checkpoints([tmp_path / "a.pt", tmp_path / "b.pt"])


def test_cli_average(tmp_path: Path) -> None:
    runner = CliRunner()
    write_checkpoint(tmp_path / "a.pt", 1)
    write_checkpoint(tmp_path / "b.pt", 2)
    out = tmp_path / "avg" / "averaged.pt"
    result = runner.invoke(
        app, ["average", str(tmp_path / "a.pt"), str(tmp_path / "b.pt"), "--out", str(out)]
    )
    assert result.exit_code == 0, result.output
    loaded = load_checkpoint(out)
    expected = average_checkpoints([tmp_path / "a.pt", tmp_path / "b.pt"])
    for name, tensor in expected["model"].items():
        assert torch.equal(loaded["model"][name], tensor)

    missing = runner.invoke(
        app, ["average", str(tmp_path / "a.pt"), str(tmp_path / "c.pt"), "-o", str(out)]
    )
    assert missing.exit_code == 2
    assert "checkpoint not found" in missing.stderr


def test_one_file_given_twice_is_refused_by_any_path(tmp_path: Path) -> None:
    write_checkpoint(tmp_path / "a.pt", 1)
    write_checkpoint(tmp_path / "b.pt", 2)
    (tmp_path / "sub").mkdir()
    (tmp_path / "link.pt").symlink_to(tmp_path / "a.pt")
    os.link(tmp_path / "a.pt", tmp_path / "hard.pt")
    out = tmp_path / "avg.pt"
    for again in ["a.pt", "sub/../a.pt", "link.pt", "hard.pt"]:
        args = [str(tmp_path / name) for name in ("a.pt", again, "b.pt")]
        result = CliRunner().invoke(app, ["average", *args, "--out", str(out)])
        one_line_exit_2(result, f"{args[0]} and {args[1]} are the same checkpoint file")
        assert not out.exists()
    with pytest.raises(UserError, match="same checkpoint file"):
        average_checkpoints([tmp_path / "b.pt", tmp_path / "a.pt", tmp_path / "link.pt"])


def masked(path: Path, name: str, mask: list[float]) -> None:
    """Set the head mask `name` of the checkpoint at `path` to `mask`, as pruning does."""
    payload = load_checkpoint(path)
    payload["model"][name] = torch.tensor(mask)
    save_checkpoint(path, {k: v for k, v in payload.items() if k not in ("format", "version")})


MASK = "decoder_layers.0.cross_attn.head_mask"


def test_checkpoints_with_different_head_masks_are_refused(tmp_path: Path) -> None:
    write_checkpoint(tmp_path / "a.pt", 1, "model.family=transformer")
    write_checkpoint(tmp_path / "b.pt", 2, "model.family=transformer")
    masked(tmp_path / "b.pt", MASK, [1.0, 0.0])
    out = tmp_path / "avg.pt"
    args = ["average", str(tmp_path / "a.pt"), str(tmp_path / "b.pt"), "--out", str(out)]
    result = CliRunner().invoke(app, args)
    one_line_exit_2(result, "different head masks", MASK, "[1 0] there and [1 1] here")
    assert not out.exists()


def test_checkpoints_pruned_alike_average_with_their_mask(tmp_path: Path) -> None:
    write_checkpoint(tmp_path / "a.pt", 1, "model.family=transformer")
    write_checkpoint(tmp_path / "b.pt", 2, "model.family=transformer")
    for name in ("a.pt", "b.pt"):
        masked(tmp_path / name, MASK, [0.0, 1.0])
    averaged = average_checkpoints([tmp_path / "a.pt", tmp_path / "b.pt"])
    assert averaged["model"][MASK].tolist() == [0.0, 1.0]


def test_a_checkpoint_without_head_masks_keeps_every_head(tmp_path: Path) -> None:
    """A missing head mask counts as all ones: equal to an unpruned one, not to a pruned one."""
    write_checkpoint(tmp_path / "a.pt", 1, "model.family=transformer")
    write_checkpoint(tmp_path / "b.pt", 2, "model.family=transformer")
    payload = load_checkpoint(tmp_path / "b.pt")
    payload["model"] = {k: v for k, v in payload["model"].items() if not k.endswith("head_mask")}
    save_checkpoint(
        tmp_path / "b.pt", {k: v for k, v in payload.items() if k not in ("format", "version")}
    )
    averaged = average_checkpoints([tmp_path / "a.pt", tmp_path / "b.pt"])
    assert averaged["model"][MASK].tolist() == [1.0, 1.0]
    masked(tmp_path / "a.pt", MASK, [1.0, 0.0])
    with pytest.raises(UserError, match="different head masks"):
        average_checkpoints([tmp_path / "a.pt", tmp_path / "b.pt"])


@pytest.mark.slow
def test_the_state_of_a_training_run_is_never_written_over_unless_forced(tmp_path: Path) -> None:
    """A run's last.pt holds what resuming reads (optimizer, scheduler, progress, rng), which
    an average leaves out: --out that holds it, under any name, is refused with the bytes
    kept; --force replaces it. The output is never an input, --force or not."""
    run = tmp_path / "run" / "checkpoints"
    write_checkpoint(run / "best.pt", 1)
    write_checkpoint(run / "last.pt", 2)
    os.link(run / "last.pt", tmp_path / "renamed.pt")  # the content decides, not the name
    (tmp_path / "link.pt").symlink_to(run / "last.pt")
    before = (run / "last.pt").read_bytes()
    for out in (run / "last.pt", tmp_path / "renamed.pt", tmp_path / "link.pt"):
        result = CliRunner().invoke(app, ["average", str(run / "best.pt"), "--out", str(out)])
        one_line_exit_2(
            result,
            f"--out {out} holds the state of a training run (optimizer, scheduler, progress, rng)",
            "give --force to replace it",
        )
        assert (run / "last.pt").read_bytes() == before
    result = CliRunner().invoke(
        app, ["average", str(run / "best.pt"), str(run / "last.pt"), "--out", str(run / "last.pt")]
    )
    one_line_exit_2(result, "is the input CHECKPOINT")
    forced = ["average", str(run / "best.pt"), str(run / "last.pt"), "--force"]
    one_line_exit_2(CliRunner().invoke(app, [*forced, "--out", str(tmp_path / "link.pt")]))
    assert (run / "last.pt").read_bytes() == before
    result = CliRunner().invoke(
        app, ["average", str(run / "best.pt"), "--out", str(run / "last.pt"), "--force"]
    )
    assert result.exit_code == 0, result.output
    assert not {"optimizer", "progress"} & load_checkpoint(run / "last.pt").keys()
    assert (tmp_path / "renamed.pt").read_bytes() == before  # a new file, not written in place
    # an average holds no training state: averaging into it again needs no --force
    result = CliRunner().invoke(
        app, ["average", str(run / "best.pt"), "--out", str(run / "last.pt")]
    )
    assert result.exit_code == 0, result.output
