"""Sampling decoding: the kept sets of top-k and top-p on hand-made distributions, temperature
against the formula, temperature -> 0 and top-k 1 equal greedy decoding, the seed reproduces,
empirical frequencies match the filtered distribution, samples are scored by the model, and the
command line's sampling options (with their invalid values: exit 2)."""

import math
from pathlib import Path

import pytest
import torch
from helpers import EOS, FAMILIES, make_model, random_batch, table_model, untrained_checkpoint
from typer.testing import CliRunner

from attnseq.cli.app import app
from attnseq.decoding import (
    DecodingConfig,
    decode,
    greedy_decode,
    max_output_lengths,
    sample_decode,
)
from attnseq.decoding.sampling import filter_log_probs

runner = CliRunner()


def sampling(**settings: float) -> DecodingConfig:
    """Decoding settings that sample, with `settings` changed."""
    return DecodingConfig(sample=True, **settings)  # type: ignore[arg-type]


def kept(probs: list[float], **settings: float) -> tuple[set[int], list[float]]:
    """The tokens `filter_log_probs` keeps of one distribution, and its filtered probabilities."""
    log_probs = torch.tensor([probs]).log()
    filtered = filter_log_probs(log_probs, sampling(**settings)).exp()[0]
    return {i for i, p in enumerate(filtered.tolist()) if p > 0}, filtered.tolist()


# ------------------------------------------------------------------------------ filtering
def test_top_k_keeps_the_k_most_probable_and_renormalises() -> None:
    tokens, probs = kept([0.1, 0.4, 0.2, 0.3], top_k=2)
    assert tokens == {1, 3}
    assert probs == pytest.approx([0.0, 0.4 / 0.7, 0.0, 0.3 / 0.7])
    assert kept([0.1, 0.4, 0.2, 0.3], top_k=1)[0] == {1}
    assert kept([0.1, 0.4, 0.2, 0.3], top_k=0)[0] == {0, 1, 2, 3}  # 0 = off
    assert kept([0.1, 0.4, 0.2, 0.3], top_k=9)[0] == {0, 1, 2, 3}  # more than V: all


@pytest.mark.parametrize(
    ("top_p", "expected"),
    [
        (0.4, {1}),  # 0.5 alone reaches 0.4
        (0.75, {1, 3}),  # 0.5 + 0.3 = 0.8 >= 0.75
        (0.85, {1, 3, 2}),  # 0.8 < 0.85 <= 0.95
        (0.99, {0, 1, 2, 3}),
        (1.0, {0, 1, 2, 3}),
        (1e-9, {1}),  # the most probable token always stays
    ],
)
def test_top_p_keeps_the_smallest_nucleus_reaching_p(top_p: float, expected: set[int]) -> None:
    probs = [0.05, 0.5, 0.15, 0.3]
    tokens, filtered = kept(probs, top_p=top_p)
    assert tokens == expected
    mass = sum(probs[i] for i in expected)
    assert filtered == pytest.approx(
        [p / mass if i in expected else 0.0 for i, p in enumerate(probs)]
    )


def test_temperature_is_softmax_of_logits_over_t() -> None:
    probs = [0.1, 0.6, 0.3]
    for t in (0.5, 2.0):
        powered = [p ** (1 / t) for p in probs]
        assert kept(probs, temperature=t)[1] == pytest.approx([p / sum(powered) for p in powered])


def test_temperature_applies_before_top_k_and_top_p() -> None:
    # T = 0.5 squares the probabilities: 0.25, 0.0625, 0.0225, 0.01 (sum 0.345), so top-p 0.8
    # keeps two tokens (0.725 + 0.181) where without the temperature it keeps three
    probs = [0.5, 0.25, 0.15, 0.1]
    assert kept(probs, top_p=0.8)[0] == {0, 1, 2}  # mass before the third: 0.75 < 0.8
    tokens, filtered = kept(probs, temperature=0.5, top_p=0.8)
    assert tokens == {0, 1}
    assert filtered == pytest.approx([0.25 / 0.3125, 0.0625 / 0.3125, 0.0, 0.0])
    # top-p 0.74 over all four: 0.725 < 0.74 keeps two; after top-k 3 the first has
    # 0.25 / 0.335 = 0.746 >= 0.74 on its own
    assert kept(probs, temperature=0.5, top_p=0.74)[0] == {0, 1}
    assert kept(probs, temperature=0.5, top_k=3, top_p=0.74)[0] == {0}


def test_pad_and_bos_are_never_drawn() -> None:
    # PAD and BOS most probable; without them token 4 and EOS are equally likely
    model = table_model([{0: -0.1, 2: -0.1, 4: -3.0, EOS: -3.0}, {EOS: 0.0}])
    src = torch.full((1, 3), 4)
    settings = sampling(num_samples=300)
    (samples,) = sample_decode(model, src, torch.tensor([3]), torch.tensor([3]), settings)
    assert {tuple(s.tokens) for s in samples} == {(), (4,)}


# ------------------------------------------------------------------------ against greedy
@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize(
    "settings",
    [sampling(temperature=1e-6), sampling(top_k=1)],
)
def test_temperature_to_zero_and_top_k_one_are_greedy(family: str, settings) -> None:
    model = make_model(family, seed=2)
    src, lengths = random_batch(8, seed=3)
    limits = max_output_lengths(lengths, 1.5, 2)
    greedy = greedy_decode(model, src, lengths, limits, need_weights=True)
    sampled = sample_decode(model, src, lengths, limits, settings, need_weights=True)
    for g, (s,) in zip(greedy, sampled, strict=True):
        assert s.tokens == g.tokens
        assert s.score == pytest.approx(g.score, abs=1e-5)  # the model's own log-probability
        torch.testing.assert_close(s.attention, g.attention)


def test_each_input_gets_its_own_samples_in_order() -> None:
    model = make_model("transformer", seed=4)
    src, lengths = random_batch(3, seed=5)
    limits = max_output_lengths(lengths, 1.5, 10)  # DecodingConfig' default limits
    greedy = greedy_decode(model, src, lengths, limits)
    settings = sampling(top_k=1, num_samples=4)
    groups = decode(model, src, lengths, settings)
    assert [len(group) for group in groups] == [4, 4, 4]
    for g, group in zip(greedy, groups, strict=True):
        assert all(s.tokens == g.tokens for s in group)
        assert all(s.normalized_score is not None for s in group)


# --------------------------------------------------------------------------- randomness
def test_the_seed_reproduces_and_another_seed_differs() -> None:
    model = make_model("bahdanau", seed=1)
    src, lengths = random_batch(6, seed=2)
    limits = max_output_lengths(lengths, 1.5, 3)

    def draw(seed: int) -> list[list[int]]:
        settings = sampling(temperature=2.0, num_samples=3, seed=seed)
        return [
            s.tokens
            for group in sample_decode(model, src, lengths, limits, settings)
            for s in group
        ]

    assert draw(7) == draw(7)
    assert draw(7) != draw(8)


@pytest.mark.slow
def test_empirical_frequencies_match_the_filtered_distribution() -> None:
    # first token from p = (0.5, 0.25, 0.15, 0.1) over tokens 4..7, then EOS for sure
    first = {4: math.log(0.5), 5: math.log(0.25), 6: math.log(0.15), 7: math.log(0.1)}
    model = table_model([first, {EOS: 0.0}], vocab=8)
    src, lengths, limits = torch.full((1, 2), 4), torch.tensor([2]), torch.tensor([3])
    n = 20000
    nucleus = [0.5, 0.25, 0.15, 0.0]  # top-p 0.8: mass before the last is 0.9 >= 0.8
    squared = [0.25, 0.0625, 0.0225, 0.01]  # temperature 0.5: p^2, summing to 0.345
    cases = [
        (sampling(num_samples=n, seed=1), [0.5, 0.25, 0.15, 0.1]),
        (sampling(top_k=2, num_samples=n, seed=2), [2 / 3, 1 / 3, 0, 0]),
        (sampling(top_p=0.8, num_samples=n, seed=3), [p / 0.9 for p in nucleus]),
        (sampling(temperature=0.5, num_samples=n, seed=4), [p / 0.345 for p in squared]),
    ]
    for settings, expected in cases:
        (samples,) = sample_decode(model, src, lengths, limits, settings)
        counts = [sum(1 for s in samples if s.tokens == [token]) for token in range(4, 8)]
        assert sum(counts) == n  # every sample is one token then EOS
        for count, p in zip(counts, expected, strict=True):
            # 5 standard deviations of a binomial frequency (at least 0.002)
            assert abs(count / n - p) <= 5 * max(math.sqrt(p * (1 - p) / n), 0.0004), settings
        # scored by the model's own distribution, whatever the filtering
        for s in samples[:20]:
            assert s.score == pytest.approx(first[s.tokens[0]], abs=1e-5)


def test_min_length_and_no_repeat_ngram_hold_while_sampling() -> None:
    # EOS is the most probable token at every step; token 4 or 5 otherwise
    model = table_model([{EOS: -0.1, 4: -3.0, 5: -3.0}], vocab=6)
    src = torch.full((1, 2), 4)
    settings = sampling(num_samples=200, seed=1, min_length=2, no_repeat_ngram=1)
    (samples,) = sample_decode(model, src, torch.tensor([2]), torch.tensor([4]), settings)
    assert all(len(s.tokens) >= 2 for s in samples)
    assert all(len(set(s.tokens)) == len(s.tokens) for s in samples)  # no token twice


# -------------------------------------------------------------------------- command line
@pytest.fixture(scope="module")
def four_test_pairs_checkpoint(tmp_path_factory: pytest.TempPathFactory) -> str:
    """An untrained tiny GRU + Bahdanau model of the default task with 4 test pairs."""
    folder = tmp_path_factory.mktemp("sampling")
    return str(untrained_checkpoint(folder / "model.pt", "data.test_size=4"))


def translate(*args: str, text: str = "12 March 2001\n\nJune 5, 1999\n"):
    return runner.invoke(app, ["translate", *args, "--device", "cpu"], input=text)


@pytest.mark.slow
def test_translate_writes_n_samples_per_line_and_the_seed_reproduces(
    four_test_pairs_checkpoint: str,
) -> None:
    args = (
        four_test_pairs_checkpoint,
        "--sample",
        "--temperature",
        "1.5",
        "--num-samples",
        "3",
        "--seed",
        "4",
    )
    first, again = translate(*args), translate(*args)
    assert first.exit_code == 0, first.output
    assert first.stdout == again.stdout
    lines = first.stdout.splitlines()
    assert [line.split(" ||| ")[0] for line in lines] == ["0", "0", "0", "1", "2", "2", "2"]
    assert lines[3] == "1 |||  ||| 0.0000"  # the empty line: one empty entry
    other = translate(*args[:-1], "5")
    assert other.exit_code == 0 and other.stdout != first.stdout


def test_translate_top_k_one_equals_greedy(four_test_pairs_checkpoint: str) -> None:
    greedy = translate(four_test_pairs_checkpoint, "--beam", "1")
    sampled = translate(four_test_pairs_checkpoint, "--sample", "--top-k", "1", "--seed", "3")
    assert greedy.exit_code == 0 and sampled.exit_code == 0, sampled.output
    assert sampled.stdout == greedy.stdout


def test_eval_samples_into_a_folder_of_its_own(
    four_test_pairs_checkpoint: str, tmp_path: Path
) -> None:
    result = runner.invoke(
        app,
        [
            "eval",
            four_test_pairs_checkpoint,
            "--sample",
            "--top-p",
            "0.9",
            "--seed",
            "2",
            "--out",
            str(tmp_path),
        ],
    )
    assert result.exit_code == 0, result.output
    assert "test.sample-t1-k0-p0.9-n1-seed2/" in result.stdout


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--sample", "--temperature", "0"], "temperature must be >= 1e-06"),
        (["--sample", "--temperature", "1e-300"], "temperature must be >= 1e-06"),
        (["--sample", "--temperature", "-1"], "temperature must be >= 1e-06"),
        (["--sample", "--top-p", "0"], "--top-p must be > 0 and <= 1, got 0.0"),
        (["--sample", "--top-p", "1.5"], "--top-p must be > 0 and <= 1, got 1.5"),
        (["--sample", "--top-k", "-1"], "--top-k must be >= 0, got -1"),
        (["--sample", "--num-samples", "0"], "--num-samples must be >= 1, got 0"),
        (["--sample", "--beam", "3"], "--sample draws the outputs and --beam 3 searches"),
        (
            ["--top-k", "5", "--seed", "1"],
            "--top-k, --seed: sampling options, they go with --sample",
        ),
    ],
)
def test_invalid_sampling_options_exit_2(
    four_test_pairs_checkpoint: str, args: list[str], message: str
) -> None:
    for command in ("translate", "eval"):
        result = runner.invoke(
            app, [command, four_test_pairs_checkpoint, *args, "--device", "cpu"], input="a\n"
        )
        assert result.exit_code == 2, result.output
        assert message in result.stderr and "Traceback" not in result.output


def test_nbest_with_sample_and_eval_num_samples_exit_2(four_test_pairs_checkpoint: str) -> None:
    nbest = translate(four_test_pairs_checkpoint, "--sample", "--nbest", "2")
    assert nbest.exit_code == 2, nbest.output
    assert "--sample draws the outputs and --nbest 2 searches" in nbest.stderr
    assert "--num-samples N draws N outputs per input" in nbest.stderr
    result = runner.invoke(
        app, ["eval", four_test_pairs_checkpoint, "--sample", "--num-samples", "2"]
    )
    assert result.exit_code == 2 and "eval scores one output per input" in result.stderr
    result = runner.invoke(app, ["eval", four_test_pairs_checkpoint, "--beam", "2", "--nbest", "2"])
    assert result.exit_code == 2 and "eval scores the best output of each" in result.stderr
