"""Every config file composes into the schema and passes validation; bad values fail clearly."""

import json
import re
from pathlib import Path

import pytest
from helpers import check_train_args, experiment_overrides
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from attnseq.config import CONFIG_DIR
from attnseq.config.checks import validate
from attnseq.config.conversion import config_from_dict, config_to_dict
from attnseq.config.schema import TrainConfig, register_configs
from attnseq.errors import UserError

register_configs()
GROUPS = ["data", "model", "optim", "trainer"]


def group_options(group: str) -> list[str]:
    return sorted(p.stem for p in (CONFIG_DIR / group).glob("*.yaml"))


def compose_train(overrides: list[str]) -> TrainConfig:
    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base="1.3"):
        cfg = OmegaConf.to_object(compose("train", overrides=overrides))
    assert isinstance(cfg, TrainConfig)
    validate(cfg)
    return cfg


@pytest.mark.parametrize(
    "overrides",
    [[f"{g}={o}"] for g in GROUPS for o in group_options(g)]
    + [experiment_overrides(o) for o in group_options("experiment")],
    ids=lambda overrides: overrides[0],
)
def test_every_config_file_composes(overrides: list[str]) -> None:
    compose_train(overrides)


def test_default_is_bahdanau_on_dates() -> None:
    cfg = compose_train([])
    assert cfg.data.name == "dates"
    assert cfg.model.decoder.value == "bahdanau"
    assert cfg.model.attention.score.value == "additive"


def test_overrides_reach_the_dataclasses() -> None:
    cfg = compose_train(["optim.lr=0.0003", "trainer.max_steps=7", "seed=5", "trainer.device=cpu"])
    assert cfg.optim.lr == pytest.approx(3e-4)
    assert (cfg.trainer.max_steps, cfg.seed, cfg.trainer.device) == (7, 5, "cpu")


@pytest.mark.parametrize(
    ("overrides", "expected"),
    [
        (["model.hiden=3"], "Did you mean 'model.hidden'"),
        (["data=nope"], "copy, dates, dialogsum"),
        (["model.rnn.cell=foo"], "expected one of [gru, lstm]"),
        (["trainer.max_steps=abc"], "trainer.max_steps"),
        (["config=nope"], None),
    ],
)
def test_preflight_names_the_problem(overrides: list[str], expected: str | None) -> None:
    from attnseq.config.composition import rewrite_config_selector

    with pytest.raises(UserError) as error:
        check_train_args(rewrite_config_selector(overrides))
    if expected:
        assert expected in str(error.value)


def test_a_split_the_data_config_lacks_is_added_by_its_plain_override() -> None:
    """The data README's `data.splits.valid=dev.tsv` on a data config without a valid split
    (tatoeba) adds it, on one with a valid split (multi30k) replaces it, in a sweep too."""
    from attnseq.config.composition import compose, rewrite_config_selector

    def splits(*args: str) -> dict:
        return dict(compose(rewrite_config_selector(list(args))).data.splits)

    added = splits("data=tatoeba_en_fr", "data.splits.valid=dev.tsv")
    assert added == {"train": "tatoeba/eng-fra.txt", "valid": "dev.tsv"}
    replaced = splits("data=multi30k", "data.splits.valid=dev.tsv")
    assert replaced["valid"] == "dev.tsv" and "test" in replaced
    swept = rewrite_config_selector(["-m", "data=tatoeba_en_fr", "data.splits.valid=a,b"])
    assert swept[-1] == "++data.splits.valid=a,b"
    from hydra.core.override_parser.overrides_parser import OverridesParser

    assert OverridesParser.create().parse_override(swept[-1]).is_sweep_override()


def test_a_missing_name_under_a_mapping_key_says_how_to_add_it() -> None:
    """Composed without the rewrite (Hydra's own words): the message names the `+`."""
    with pytest.raises(UserError) as error:
        check_train_args(["data=tatoeba_en_fr", "data.splits.valid=dev.tsv"])
    assert "add it with a leading +, +data.splits.valid=VALUE" in str(error.value)


@pytest.mark.slow
def test_preflight_checks_every_sweep_value() -> None:
    check_train_args(["-m", "data=reverse,copy"])
    with pytest.raises(UserError, match="data=nope"):
        check_train_args(["-m", "data=reverse,nope"])


def test_cross_field_validation() -> None:
    with pytest.raises(UserError, match="not divisible"):
        compose_train(["model.family=transformer", "model.d_model=30", "model.heads=4"])
    with pytest.raises(UserError, match="model.enc_hidden"):
        compose_train(["model.attention.score=dot", "model.enc_hidden=100"])


@pytest.mark.parametrize(
    ("overrides", "expected"),
    [
        (["model.attention.kind=local"], "kind=local is a transformer setting; model.family=rnn"),
        (
            [
                "model=transformer",
                "model.attention.kind=linformer",
                "model.attention.decoder_self=true",
            ],
            "kind=linformer cannot be causal",
        ),
        (
            [
                "model=transformer",
                "model.attention.kind=longformer",
                "model.attention.decoder_self=true",
            ],
            "kind=longformer cannot be causal",
        ),
        (
            ["model=transformer", "model.attention.kind=linformer", "data.max_src_len=2048"],
            "model.max_positions=1024, shorter than data.max_src_len=2048",
        ),
        (
            ["model=transformer", "model.attention.kind=linformer", "model.attention.proj_dim=0"],
            "proj_dim must be >= 1",
        ),
        (
            ["model=transformer", "model.attention.kind=local", "model.attention.D=0"],
            "model.attention.D must be >= 1",
        ),
        (
            ["model=transformer", "model.attention.kind=strided", "model.attention.stride=0"],
            "stride must be >= 1",
        ),
        (
            [
                "model=transformer",
                "model.attention.kind=strided",
                "model.attention.pattern=fixed",
                "model.attention.summary=9",
            ],
            "summary must be in 1..model.attention.stride=8",
        ),
        (
            [
                "model=transformer",
                "model.attention.kind=longformer",
                "model.attention.global_tokens=-1",
            ],
            "global_tokens",
        ),
        (
            ["model=transformer", "model.attention.kind=performer", "model.attention.features=0"],
            "features must be >= 1",
        ),
    ],
)
def test_attention_kind_validation(overrides: list[str], expected: str) -> None:
    with pytest.raises(UserError, match=re.escape(expected)):
        compose_train(overrides)


@pytest.mark.parametrize("kind", ["local", "strided", "linear", "performer", "bigbird"])
def test_causal_attention_kinds_may_serve_the_decoder(kind: str) -> None:
    cfg = compose_train(
        ["model=transformer", f"model.attention.kind={kind}", "model.attention.decoder_self=true"]
    )
    assert cfg.model.attention.kind.value == kind and cfg.model.attention.decoder_self


@pytest.mark.slow
def test_config_dict_round_trip() -> None:
    cfg = compose_train(["model.rnn.cell=lstm", "optim.lr=0.01"])
    again = config_from_dict(config_to_dict(cfg))
    assert again == cfg


@pytest.mark.slow
def test_config_dict_is_omegaconfs_plain_container() -> None:
    """config_to_dict walks the dataclasses itself: the same dict as OmegaConf's conversion,
    key order and value types included."""
    experiments = ["multi30k_transformer", "dialogsum_hierarchical"]
    for cfg in [TrainConfig(), *(compose_train([f"experiment={name}"]) for name in experiments)]:
        expected = OmegaConf.to_container(OmegaConf.structured(cfg), enum_to_str=True)
        assert json.dumps(config_to_dict(cfg)) == json.dumps(expected)


@pytest.mark.parametrize("name", group_options("experiment"))
def test_packaged_experiments_budget_in_updates_or_epochs(name: str) -> None:
    """A packaged experiment gives the same model on any machine: it ends on its step or epoch
    budget (max_epochs is always finite), never on a wall-clock one."""
    cfg = compose_train(experiment_overrides(name))
    assert cfg.trainer.max_minutes is None, f"{name} budgets in minutes"


def test_the_default_run_stops_when_validation_cannot_improve() -> None:
    """The default task reaches validation exact match 1.0 long before its epoch budget; the
    trainer stops at that ceiling, so the default selects exact match for early stopping."""
    cfg = compose_train([])
    assert cfg.trainer.early_stopping_metric.value == "exact_match"
    assert cfg.trainer.early_stopping_metric.best_possible == 1.0


def test_the_wheel_lists_every_layer_and_maps_configs() -> None:
    """pyproject.toml names the packages one by one (configs/ is mapped to `attnseq.configs`,
    which discovery cannot find): every layer of attnseq/ is named, and the mapped folder is the
    `CONFIG_DIR` a checkout composes from."""
    import tomllib

    root = next(p for p in Path(__file__).resolve().parents if (p / "pyproject.toml").is_file())
    setuptools = tomllib.loads((root / "pyproject.toml").read_text())["tool"]["setuptools"]
    package = root / "attnseq"
    layers = {f"attnseq.{p.name}" for p in package.iterdir() if (p / "__init__.py").is_file()}
    assert set(setuptools["packages"]) == {"attnseq", "attnseq.configs", *layers}
    assert root / setuptools["package-dir"]["attnseq.configs"] == CONFIG_DIR
    assert (CONFIG_DIR / "train.yaml").is_file()


GROUPS_WITH_SCHEMA_NODES = ("data", "model", "optim", "trainer")


def restated_defaults(node: object, defaults: object, prefix: str) -> list[str]:
    """The keys of a group file's `node` whose value is the schema's default."""
    if isinstance(node, dict):
        found = []
        for key, value in node.items():
            default = defaults.get(key, object()) if isinstance(defaults, dict) else object()
            found += restated_defaults(value, default, f"{prefix}.{key}")
        return found
    return [prefix] if node == defaults else []


@pytest.mark.parametrize("group", GROUPS_WITH_SCHEMA_NODES)
def test_group_files_state_only_what_differs_from_the_schema(group: str) -> None:
    """One source of defaults: a group file that repeats a schema default would keep the old
    value after the schema's changes (the group is composed over the schema)."""
    defaults = json.loads(json.dumps(config_to_dict(TrainConfig())))[group]
    restated = []
    for path in sorted((CONFIG_DIR / group).glob("*.yaml")):
        node = OmegaConf.to_container(OmegaConf.load(path)) or {}
        node = {k: v for k, v in node.items() if k != "defaults"}
        restated += [f"{path.name}: {key}" for key in restated_defaults(node, defaults, group)]
    assert not restated, f"these keys repeat the schema's defaults: {restated}"
