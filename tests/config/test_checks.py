"""A user's bad config value ends `attnseq train` with one line and exit status 2, before any run
directory exists: out-of-range values, cross-field conflicts, configs that cannot fit the
machine (a user's config file: tests/config/test_composition.py)."""

import copy
import dataclasses
import math
import random
import types
import typing
from pathlib import Path

import pytest
from helpers import (
    GIB,
    assert_refused,
    check_train_args,
    train_in_process,
)
from typer.testing import CliRunner

from attnseq.cli import hydra_entry
from attnseq.cli.app import app
from attnseq.config.checks import validate
from attnseq.config.choices import ModelFamily
from attnseq.config.conversion import config_from_dict
from attnseq.config.resources import (
    Estimate,
    estimate,
    resource_problems,
    rnn_parameters,
    total_ram,
    transformer_parameters,
)
from attnseq.config.schema import TrainConfig
from attnseq.config.threads import usable_cores
from attnseq.errors import UserError
from attnseq.models import Vocabularies, build_model

BAD_VALUES = [
    (["model.heads=0"], "model.heads must be >= 1, got 0"),
    (["model=transformer", "model.heads=0"], "model.heads must be >= 1, got 0"),
    (["model.hidden=0"], "model.hidden must be >= 1"),
    (["model.hidden=-8"], "model.hidden must be >= 1"),
    (["model.emb_dim=0"], "model.emb_dim must be >= 1"),
    (["model=transformer", "model.enc_layers=0"], "model.enc_layers must be >= 1"),
    (["model=transformer", "model.max_positions=-1"], "model.max_positions must be >= 1"),
    (["optim.lr=nan"], "optim.lr must be a finite number > 0, got nan"),
    (["optim.lr=inf"], "optim.lr must be a finite number > 0"),
    (["optim.betas=[0.9]"], "optim.betas must have 2 values"),
    (["optim.betas=[0.9,1.5]"], "optim.betas must hold numbers >= 0 and < 1"),
    (["seed=-1"], "seed must be >= 0 and <= 4294967295, got -1"),
    (["data.max_sentences=0"], "data.max_sentences must be >= 1"),
    (["data.eval_max_tokens=0"], "data.eval_max_tokens must be >= 1"),
    (["trainer.log_every=0"], "trainer.log_every must be >= 1"),
    (["decoding.max_output_ratio=-1"], "decoding.max_output_ratio must be >= 0"),
    (
        ["data=toy_translation", "trainer.early_stopping_metric=rouge1"],
        "trainer.early_stopping_metric=rouge1 is not computed for data.task=translation",
    ),
    (
        ["data.task=summarization", "trainer.early_stopping_metric=bleu"],
        "not computed for data.task=summarization",
    ),
    (["data.max_examples=-900"], "data.max_examples must be >= 1, got -900"),
    (["optim.plateau_factor=-1"], "optim.plateau_factor must be > 0 and < 1"),
    (["optim.plateau_factor=1.5"], "optim.plateau_factor must be > 0 and < 1"),
    (["model.attention.attn_dim=0"], "model.attention.attn_dim must be >= 1"),
    (["optim.warmup_steps=-10"], "optim.warmup_steps must be >= 0"),
    (["trainer.num_heatmaps=-1"], "trainer.num_heatmaps must be >= 0"),
    (["trainer.threads=0"], "trainer.threads must be >= 1"),
    (["trainer.max_minutes=-1"], "trainer.max_minutes must be > 0"),
    (["trainer.max_minutes=nan"], "trainer.max_minutes must be a finite number"),
    (["trainer.early_stopping_target=nan"], "early_stopping_target must be a finite number"),
    (
        ["decoding.max_output_ratio=0.5", "decoding.max_output_extra=0"],
        "leaves a one-token source no output token",
    ),
    (
        ["model=transformer", "model.positions=learned", "model.max_positions=100"],
        "model.positions=learned has model.max_positions=100 positions",
    ),
    (
        ["data=reverse", "data.vocab_size=2", "data.min_len=1", "data.max_len=3"],
        "has only 14",
    ),
    (
        ["model=transformer", "model.positions=sinusoidal_split", "model.position_offset=2"],
        "model.position_offset=2 shifts the rows of a position table",
    ),
    (["data.tgt_lang_code='en XX'"], "data.tgt_lang_code='en XX' is no language code"),
    (["model.hidden=2000000"], "the model does not fit: rnn (hidden=2000000"),
    (["model=transformer", "model.d_model=1048576"], "the model does not fit: transformer"),
    (["data.train_size=1000000000000"], "the generated data does not fit"),
    (["trainer.threads=100000"], "trainer.threads=100000 is more than the"),
    (["decoding.beam=1000000"], "validation decoding does not fit: decoding.beam=1000000"),
    (["decoding.max_output_extra=10000000000000"], "validation decoding does not fit"),
    (["model.attention.D=" + "1" * 30], "model.attention.D must fit in a 64-bit integer"),
    (["trainer.num_workers=100000"], "trainer.num_workers=100000 is more than the"),
]


@pytest.mark.parametrize(("overrides", "expected"), BAD_VALUES)
def test_bad_values_are_refused_in_one_line_naming_the_problem(
    overrides: list[str], expected: str
) -> None:
    """The checks `attnseq train` runs before its run directory exists (helpers'
    check_train_args: Hydra composes, the checks run)."""
    with pytest.raises(UserError) as error:
        check_train_args(overrides)
    message = str(error.value)
    assert expected in message and "\n" not in message, message


THROUGH_THE_COMMAND = {
    "model.heads=0",
    "optim.lr=nan",
    "data.max_sentences=0",
    "trainer.threads=100000",
}


@pytest.mark.parametrize(
    ("overrides", "expected"),
    [case for case in BAD_VALUES if set(case[0]) & THROUGH_THE_COMMAND],
)
def test_bad_values_exit_2_in_one_line_before_the_run_dir(
    overrides: list[str], expected: str, tmp_path: Path
) -> None:
    """Through the command: exit 2, one `error:` line, no run directory (a value of each of
    the model, optim, data and trainer groups)."""
    code, output = train_in_process(tmp_path, *overrides)
    assert_refused(tmp_path, code, output, expected)


@pytest.mark.slow
def test_a_model_too_large_names_its_sizes(tmp_path: Path) -> None:
    code, output = train_in_process(tmp_path, "model.hidden=2000000", "trainer.device=cpu")
    assert_refused(tmp_path, code, output, "parameters")
    for words in ("TiB with gradients and Adam state", "sentences of", "of available RAM here"):
        assert words in output


def test_several_problems_are_listed_together() -> None:
    with pytest.raises(UserError) as error:
        config_from_dict({}, ["model.hidden=0", "optim.lr=-1", "decoding.beam=0"])
    message = str(error.value)
    for key in ("model.hidden", "optim.lr", "decoding.beam"):
        assert key in message


@pytest.mark.parametrize("value", ["\udcff\udcfe", "a\x07b"])
def test_an_override_yaml_cannot_read_is_named(value: str) -> None:
    """A command-line byte that is not UTF-8 arrives as a lone surrogate, which PyYAML (reading
    each override's value) refuses like a control character: one UserError, no ReaderError."""
    with pytest.raises(UserError, match=r"override 'data.tokenizer=.*': unacceptable character"):
        config_from_dict({}, ["decoding.beam=2", f"data.tokenizer={value}"])


def test_a_length_penalty_that_would_overflow_is_refused() -> None:
    """alpha = 1000 made lp = ((5 + 10) / 6) ** 1000 overflow (OverflowError at validation,
    after the first updates); 10 keeps a 10,000-token output's lp finite in float32."""
    import torch

    from attnseq.decoding.settings import gnmt_length_penalty

    with pytest.raises(UserError, match="decoding.length_penalty must be >= 0 and <= 10"):
        config_from_dict({}, ["decoding.length_penalty=1000"])
    with pytest.raises(OverflowError):
        gnmt_length_penalty(10, 1000.0)
    longest = gnmt_length_penalty(torch.tensor([10_000]), 10.0)
    assert torch.isfinite(longest).all()


def test_checkpoint_configs_are_checked_by_the_same_rules() -> None:
    with pytest.raises(UserError, match="trainer.log_every must be >= 1"):
        config_from_dict({}, ["trainer.log_every=0"])
    validate(TrainConfig())  # the defaults pass


# ---------------------------------------------------------------------------- memory estimates
@pytest.mark.parametrize(
    "overrides",
    [
        {},
        {"rnn": {"cell": "lstm", "layers": 2}, "decoder": "luong", "tie_embeddings": False},
        {"rnn": {"bidirectional": False}, "attention": {"score": "general"}, "enc_hidden": 96},
        {"attention": {"score": "location"}, "max_positions": 50},
        {"family": "transformer"},
        {"family": "transformer", "positions": "learned", "tie_embeddings": False},
        {"family": "transformer", "attention": {"kind": "linformer"}, "max_positions": 256},
        {"family": "transformer", "attention": {"memory_slots": 8, "memory_in_cross": True}},
        {"family": "transformer", "conv_kernel": 31, "d_model": 64},
        # the switches of pretrained models: one shared embedding, final norms (NLLB), learned
        # positions with BART's offset, embedding norms, a logits bias (BART, Marian)
        {"family": "transformer", "norm": "pre", "share_src_tgt_embeddings": True},
        {
            "family": "transformer",
            "norm": "post",
            "positions": "learned",
            "position_offset": 2,
            "embed_norm": True,
            "output_bias": True,
            "share_src_tgt_embeddings": True,
        },
    ],
)
def test_parameter_estimate_matches_the_built_model(overrides: dict) -> None:
    model_cfg = config_from_dict({"model": overrides, "data": {"max_src_len": 50}}).model
    vocab = 37
    model = build_model(model_cfg, Vocabularies(vocab, vocab, 0, 2, 3))
    actual = sum(p.numel() for p in model.parameters())
    family = transformer_parameters if model_cfg.family.name == "transformer" else rnn_parameters
    estimated = family(model_cfg, vocab)
    # a lower bound (what cannot fit is refused), and close: it counts every weight matrix
    assert 0.9 * actual <= estimated <= actual


def test_resource_problems_depend_on_the_machine() -> None:
    cfg = config_from_dict({}, ["model.hidden=4096", "trainer.threads=4"])
    need = estimate(cfg)
    assert isinstance(need, Estimate) and need.parameters > 50_000_000
    big_machine = resource_problems(cfg, ram=1024 * GIB, gpu=None, cores=8)
    assert big_machine == []
    small = resource_problems(cfg, ram=need.device_bytes // 2, gpu=None, cores=2)
    assert len(small) == 2
    assert "the model does not fit" in small[0] and "trainer.threads=4" in small[1]
    on_gpu = resource_problems(cfg, ram=1024 * GIB, gpu=need.device_bytes // 2, cores=8)
    assert len(on_gpu) == 1 and "of free GPU memory here" in on_gpu[0]


def test_the_default_config_is_estimated_small() -> None:
    need = estimate(config_from_dict({}))
    assert 0 < need.device_bytes < 1 * GIB


# ------------------------------------------------------------
# Property-style check of every numeric config key: random values of every kind (negative,
# zero, huge, nan/inf, wrong types) given to `attnseq train` either pass the pre-flight checks
# (exit 0) or end with one `error:` line and exit status 2 - never a traceback, never a run
# directory. The keys come from walking the schema, so a new key is covered without a change here.
#
# Two levels: through the CLI, a seeded sample of command-line values per key (Hydra composes
# each, so this is the slow part); and straight into the checks (`validate`, `resource_problems`),
# many values of the field's own type per key, with both model families.
#
# Hydra itself is not started for accepted values (`run_hydra` is replaced by a recorder): what
# is checked is everything `attnseq train` does before the run directory exists.
# Values of every kind, as the user types them on the command line.

INT_VALUES = [
    "0",
    "-1",
    "1",
    "2",
    "-7",
    "3",
    "1000000",
    "2147483648",
    "9223372036854775808",
    "10000000000000000000000000000000",
    "-99999999999",
    "1.5",
    "abc",
    "nan",
    "true",
    "null",
    "[1,2]",
    "''",
]
FLOAT_VALUES = [
    "0",
    "0.0",
    "-0.0",
    "-1",
    "1",
    "0.5",
    "0.999",
    "1e-300",
    "1e300",
    "nan",
    "inf",
    "-inf",
    "-1e-9",
    "7",
    "abc",
    "null",
    "[0.5]",
    "1" + "0" * 30,
]
LIST_VALUES = [
    "[]",
    "[0.5]",
    "[0.9,0.999]",
    "[0.9,0.999,0.5]",
    "[nan,0.9]",
    "[0.9,inf]",
    "[-0.1,0.5]",
    "[1,0.5]",
    "[abc,0.5]",
    "0.9",
    "null",
    "[[0.9],[0.9]]",
]
CASES_PER_KEY = 1


def numeric_keys(node: type = TrainConfig, prefix: str = "") -> list[tuple[str, list[str]]]:
    """(dotted key, candidate values) for every int, float and list-of-float field."""
    keys: list[tuple[str, list[str]]] = []
    hints = typing.get_type_hints(node)
    for spec in dataclasses.fields(node):
        kind = hints[spec.name]
        if dataclasses.is_dataclass(kind):
            keys += numeric_keys(kind, f"{prefix}{spec.name}.")
            continue
        args = set(typing.get_args(kind)) - {type(None)}
        base = args.pop() if isinstance(kind, types.UnionType) and len(args) == 1 else kind
        if base is bool:
            continue
        if base is int:
            keys.append((f"{prefix}{spec.name}", INT_VALUES))
        elif base is float:
            keys.append((f"{prefix}{spec.name}", FLOAT_VALUES))
        elif typing.get_origin(base) is list and typing.get_args(base) == (float,):
            keys.append((f"{prefix}{spec.name}", LIST_VALUES))
    return keys


def cases() -> list:
    """A fixed random sample of (model family, key, value): the same every run, so a failure
    repeats. model.* keys are tried with both families (each refuses a changed key of the other).

    The default run sends the first key of each group (seed, data, model, model.attention,
    optim, trainer) through the command line with the RNN family; `-m slow` sends every key
    with both families. `test_every_typed_value_is_accepted_or_refused_by_the_checks` gives
    every key's values to the checks of both families by default: the command line adds only
    Hydra's composition and conversion, the same for every key (two compositions per case,
    about half a second; the checks take microseconds)."""
    rng = random.Random(2024)
    sample = []
    groups: set[str] = set()
    for key, values in numeric_keys():
        group = key.rpartition(".")[0]
        for family in (
            ("rnn_bahdanau", "transformer") if key.startswith("model.") else ("rnn_bahdanau",)
        ):
            slow = family == "transformer" or group in groups
            marks = [pytest.mark.slow] if slow else []
            sample += [
                pytest.param(family, key, value, marks=marks)
                for value in rng.sample(values, CASES_PER_KEY)
            ]
        groups.add(group)
    return sample


def test_the_schema_walk_finds_the_numeric_keys() -> None:
    keys = dict(numeric_keys())
    for key in ("seed", "model.heads", "model.attention.D", "optim.betas", "trainer.max_minutes"):
        assert key in keys
    assert "trainer.progress" not in keys and "data.name" not in keys
    assert len(keys) > 50


@pytest.fixture(scope="module")
def started() -> list[object]:
    """Replaces the training of a Hydra job with a recorder of the config it would get: Hydra
    composes and the start checks run as for a real command."""
    calls: list[object] = []
    original = hydra_entry.train_from_hydra
    hydra_entry.train_from_hydra = calls.append  # type: ignore[assignment]
    yield calls
    hydra_entry.train_from_hydra = original


@pytest.mark.slow
@pytest.mark.parametrize(("model", "key", "value"), cases())
def test_any_value_passes_or_exits_2_in_one_line(
    model: str, key: str, value: str, started: list[object], tmp_path: Path
) -> None:
    run_dir = tmp_path / "run"
    before = len(started)
    # The model is CPU-only and small, so accepted values exercise the checks, not the machine.
    args = [f"model={model}", "trainer.device=cpu", f"{key}={value}", f"hydra.run.dir={run_dir}"]
    result = CliRunner().invoke(app, ["train", *args])
    assert result.exit_code in (0, 2), (result.output, result.exception)
    assert "Traceback" not in result.output
    # a refused value leaves no run directory; an accepted one may have taken its lock there
    assert result.exit_code == 0 or not run_dir.exists()
    if result.exit_code == 2:
        lines = result.output.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("error: "), result.output
        assert key in result.output or "does not fit" in result.output
        assert len(started) == before
    else:
        assert result.output == ""
        assert len(started) == before + 1  # accepted: Hydra would start the run now


def typed_values(kind: str, rng: random.Random) -> list:
    """Values of a field's own type: edge cases and random ones of every magnitude."""
    if kind == "list":
        floats = typed_values("float", rng)
        return [[], [0.5], [0.9, 0.999], [0.9, 0.999, 0.5]] + [
            [rng.choice(floats), rng.choice(floats)] for _ in range(10)
        ]
    if kind == "int":
        edges = [0, -1, 1, 2, 3, 7, 2**31, 2**63 - 1, 2**63, -(2**63) - 1, 10**30, -(10**30)]
        return edges + [rng.choice([-1, 1]) * 10 ** rng.randint(0, 20) for _ in range(8)]
    edges = [0.0, -0.0, 1.0, -1.0, 0.5, 0.999, 1e-300, 1e300, math.nan, math.inf, -math.inf]
    return edges + [rng.uniform(-1, 1) * 10 ** rng.randint(-10, 30) for _ in range(8)]


def test_every_typed_value_is_accepted_or_refused_by_the_checks() -> None:
    rng = random.Random(7)
    ram, cores = total_ram(), usable_cores()
    checked = refused = 0
    for family in ModelFamily:
        base = TrainConfig()
        base.model.family = family
        for key, candidates in numeric_keys():
            kind = {id(INT_VALUES): "int", id(FLOAT_VALUES): "float"}.get(id(candidates), "list")
            for value in typed_values(kind, rng):
                cfg = copy.deepcopy(base)
                *parents, leaf = key.split(".")
                node = cfg
                for name in parents:
                    node = getattr(node, name)
                setattr(node, leaf, value)
                checked += 1
                try:
                    validate(cfg)
                except UserError as error:
                    refused += 1
                    assert "\n" not in str(error)  # one value wrong: one line
                    continue
                # accepted: the machine check also ends in a message or passes
                for gpu in (None, 80 * 1024**3):
                    assert isinstance(resource_problems(cfg, ram, gpu, cores), list)
    assert checked > 2000 and 0 < refused < checked
