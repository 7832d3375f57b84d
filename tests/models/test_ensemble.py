"""Ensembles: one member equals its model exactly, two identical members equal one, two different
members give the hand-averaged probabilities at every step (each with its own decoder state,
through greedy decoding, beam search and sampling, across families), the attention is the
members' mean, and the command line decodes several checkpoints or refuses them (exit 2)."""

import json
import math
from pathlib import Path

import pytest
import torch
from helpers import (
    BOS,
    EOS,
    FAMILIES,
    PAD,
    SOURCE_ONLY,
    copy_only_checkpoint,
    make_model,
    random_batch,
    untrained_checkpoint,
    with_fresh_weights,
)
from torch import Tensor
from typer.testing import CliRunner

from attnseq.cli.app import app
from attnseq.config.choices import TaskType
from attnseq.decoding import DecodingConfig, decode, max_output_lengths
from attnseq.errors import UserError
from attnseq.io.checkpoint import load_checkpoint, save_checkpoint
from attnseq.models.ensemble import EnsembleModel, _check_joinable, load_ensemble
from attnseq.models.loading import load_trained_model
from attnseq.models.seq2seq import Seq2Seq

runner = CliRunner()
SETTINGS = [
    DecodingConfig(),  # greedy
    DecodingConfig(beam=4, nbest=3, length_penalty=0.6),
    DecodingConfig(sample=True, temperature=1.5, num_samples=2, seed=3),
]


def outputs(model: Seq2Seq, settings: DecodingConfig) -> list[list[tuple[list[int], float]]]:
    src, lengths = random_batch(6, seed=9)
    return [[(h.tokens, h.score) for h in nbest] for nbest in decode(model, src, lengths, settings)]


@torch.no_grad()
def ensemble_score(
    members: list[Seq2Seq], src: Tensor, length: int, tokens: list[int], ended: bool
) -> float:
    """log P(tokens (+ EOS if `ended`) | src) under the mean of the members' probabilities,
    written out with one teacher-forced pass per member (no decoder state)."""
    tgt_in = torch.tensor([[BOS, *tokens]])  # (1, T)
    probs = torch.stack(
        [
            torch.softmax(m(src[:length].unsqueeze(0), torch.tensor([length]), tgt_in).logits, -1)
            for m in members
        ]
    ).mean(dim=0)[0]  # (T, V)
    probs[:, [PAD, BOS]] = 0.0  # never_pad_or_bos, renormalised by nothing: as decoding does
    scored = [*tokens, EOS] if ended else tokens
    return sum(math.log(float(probs[t, y])) for t, y in enumerate(scored))


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("settings", SETTINGS)
def test_an_ensemble_of_one_is_its_model_exactly(family: str, settings: DecodingConfig) -> None:
    model = make_model(family, seed=1)
    assert outputs(EnsembleModel([model]), settings) == outputs(model, settings)


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("settings", SETTINGS)
def test_two_identical_members_equal_one(family: str, settings: DecodingConfig) -> None:
    alone = outputs(make_model(family, seed=1), settings)
    pair = outputs(
        EnsembleModel([make_model(family, seed=1), make_model(family, seed=1)]), settings
    )
    for one, two in zip(alone, pair, strict=True):
        assert [tokens for tokens, _ in two] == [tokens for tokens, _ in one]
        assert [score for _, score in two] == pytest.approx([score for _, score in one], abs=1e-5)


def test_a_step_is_the_log_of_the_mean_probability() -> None:
    first, second = make_model("luong", seed=1), make_model("transformer", seed=2)
    ensemble = EnsembleModel([first, second])
    src, lengths = random_batch(5, seed=3)
    prev = torch.full((5,), BOS)
    got, _, _ = ensemble.decode_step(prev, ensemble.start_decoding(src, lengths))
    by_hand = []
    for model in (first, second):
        logits, _, _ = model.decode_step(prev, model.start_decoding(src, lengths))
        by_hand.append(torch.softmax(logits, dim=-1))
    expected = ((by_hand[0] + by_hand[1]) / 2).log()  # (B, V)
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-5)
    assert not torch.allclose(expected, by_hand[0].log(), atol=1e-3)  # the members differ


@pytest.mark.slow
@pytest.mark.parametrize("settings", SETTINGS)
def test_every_output_scores_the_mean_probability_along_its_tokens(
    settings: DecodingConfig,
) -> None:
    # an RNN and a transformer: each keeps its own state, reordered by the beams
    members = [make_model("bahdanau", seed=4), make_model("transformer", seed=5)]
    ensemble = EnsembleModel(members)
    src, lengths = random_batch(6, seed=9)
    limits = max_output_lengths(lengths, settings.max_output_ratio, settings.max_output_extra)
    for row, nbest in enumerate(decode(ensemble, src, lengths, settings)):
        for hypothesis in nbest:
            ended = len(hypothesis.tokens) < int(limits[row])  # else stopped at the limit
            n = int(lengths[row])
            expected = ensemble_score(members, src[row], n, hypothesis.tokens, ended)
            assert hypothesis.score == pytest.approx(expected, abs=1e-4)


@pytest.mark.slow
def test_teacher_forced_pass_and_attention_are_the_means() -> None:
    first, second = make_model("transformer", seed=1), make_model("transformer", seed=2)
    src, lengths = random_batch(3, seed=1)
    tgt_in = torch.tensor([[BOS, 5, 6], [BOS, 7, 8], [BOS, 9, 4]])
    both = EnsembleModel([first, second])(src, lengths, tgt_in, need_weights=True)
    one, two = (m(src, lengths, tgt_in, need_weights=True) for m in (first, second))
    mean = (torch.softmax(one.logits, -1) + torch.softmax(two.logits, -1)) / 2
    torch.testing.assert_close(both.logits, mean.log(), atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(both.attention, (one.attention + two.attention) / 2)
    # members of two families: the first one's attention (their shapes differ)
    mixed = EnsembleModel([make_model("luong"), first])(src, lengths, tgt_in, need_weights=True)
    assert mixed.attention.shape == make_model("luong")(src, lengths, tgt_in, True).attention.shape


# -------------------------------------------------------------------------- checkpoints
@pytest.fixture(scope="module")
def ensemble_checkpoints(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Two checkpoints of one config with different weights, and one of another task."""
    folder = tmp_path_factory.mktemp("ensemble")
    first = untrained_checkpoint(folder / "a.pt", "data.test_size=4")
    second = with_fresh_weights(first, folder / "b.pt", seed=11)
    other = untrained_checkpoint(folder / "reverse.pt", "data.name=reverse", "data.test_size=4")
    return {"a": first, "b": second, "reverse": other}


@pytest.mark.slow
def test_load_ensemble_of_one_checkpoint_is_that_checkpoint(ensemble_checkpoints) -> None:
    alone = load_ensemble([ensemble_checkpoints["a"]])
    assert not isinstance(alone.model, EnsembleModel)
    pair = load_ensemble([ensemble_checkpoints["a"], ensemble_checkpoints["b"]])
    assert isinstance(pair.model, EnsembleModel) and len(pair.model.members) == 2
    assert pair.payload["ensemble"] == [str(ensemble_checkpoints[k].resolve()) for k in ("a", "b")]


@pytest.mark.slow
def test_sources_are_cut_for_the_member_with_the_shortest_limit(
    ensemble_checkpoints, tmp_path
) -> None:
    payload = load_checkpoint(ensemble_checkpoints["b"])
    payload["config"]["data"]["max_src_len"] = 7
    save_checkpoint(tmp_path / "short.pt", payload)
    assert load_ensemble([ensemble_checkpoints["a"]]).cfg.data.max_src_len > 7
    assert (
        load_ensemble([ensemble_checkpoints["a"], tmp_path / "short.pt"]).cfg.data.max_src_len == 7
    )


@pytest.mark.slow
def test_members_of_another_task_or_copy_setting_are_refused(ensemble_checkpoints) -> None:
    first, second = (load_trained_model(ensemble_checkpoints[k]) for k in ("a", "b"))
    second.cfg.data.task = TaskType.summarization
    with pytest.raises(UserError, match="tasks .summarization vs translation. differ"):
        _check_joinable(ensemble_checkpoints["a"], first, ensemble_checkpoints["b"], second)
    second.cfg.data.task, second.cfg.model.copy = first.cfg.data.task, True
    with pytest.raises(UserError, match="copy settings"):
        _check_joinable(ensemble_checkpoints["a"], first, ensemble_checkpoints["b"], second)


def translate(*args: str):
    text = "12 March 2001\n\nJune 5, 1999\n"
    return runner.invoke(app, ["translate", *args, "--device", "cpu"], input=text)


@pytest.mark.slow
@pytest.mark.parametrize("flags", [["--beam", "1"], ["--beam", "3", "--nbest", "2"]])
def test_cli_ensemble_of_a_checkpoint_with_itself_equals_it(ensemble_checkpoints, flags) -> None:
    a = str(ensemble_checkpoints["a"])
    alone, twice = translate(a, *flags), translate(a, a, *flags)
    assert alone.exit_code == 0 and twice.exit_code == 0, twice.output
    assert [line.rsplit(" ||| ", 1)[0] for line in twice.stdout.splitlines()] == [
        line.rsplit(" ||| ", 1)[0] for line in alone.stdout.splitlines()
    ]
    mixed = translate(a, str(ensemble_checkpoints["b"]), "decoding.beam=3", *flags)
    assert mixed.exit_code == 0, mixed.output


@pytest.mark.slow
def test_cli_refuses_an_ensemble_of_other_vocabularies(ensemble_checkpoints) -> None:
    a, other = str(ensemble_checkpoints["a"]), str(ensemble_checkpoints["reverse"])
    for command in (["translate", a, other], ["eval", a, other]):
        result = runner.invoke(app, [*command, "--device", "cpu"], input="abc\n")
        assert result.exit_code == 2, result.output
        assert f"{other} cannot join an ensemble with {a}" in result.stderr
        assert "tokenizers (vocabularies)" in result.stderr and "Traceback" not in result.output
    missing = runner.invoke(app, ["translate", a, "missing.pt"], input="abc\n")
    assert missing.exit_code == 2 and "missing.pt" in missing.stderr


@pytest.mark.slow
def test_cli_eval_names_and_records_the_ensemble(ensemble_checkpoints, tmp_path: Path) -> None:
    a, b = str(ensemble_checkpoints["a"]), str(ensemble_checkpoints["b"])
    result = runner.invoke(app, ["eval", a, b, "--out", str(tmp_path), "--device", "cpu"])
    assert result.exit_code == 0, result.output
    folder = tmp_path / "a" / "test.greedy+ensemble2"
    assert f"wrote {folder}/" in result.stdout
    record = json.loads((folder / "metrics.json").read_text())
    assert record["ensemble"] == [str(Path(p).resolve()) for p in (a, b)]


@pytest.mark.slow
def test_copy_models_sample_and_ensemble_like_greedy(tmp_path: Path) -> None:

    checkpoint = str(copy_only_checkpoint(tmp_path / "copy.pt", "decoding.max_output_extra=2"))
    expected = f"{SOURCE_ONLY} " * 2 + SOURCE_ONLY + "\n"  # the source-only word, copied
    for args in (
        [checkpoint, "--beam", "1"],
        [checkpoint, checkpoint, "--beam", "1"],
        [checkpoint, checkpoint, "--beam", "2"],
        [checkpoint, "--sample", "--top-k", "1"],
        [checkpoint, checkpoint, "--sample", "--top-p", "0.5"],  # P(copy) = 0.88
    ):
        result = runner.invoke(app, ["translate", *args, "--device", "cpu"], input=SOURCE_ONLY)
        assert result.exit_code == 0, result.output
        assert result.stdout == expected, args
