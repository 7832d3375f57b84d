"""Composing a run's config (attnseq/config/composition.py): a user's file given as config=PATH
wins over a packaged one of the same name and is recorded in the composed config, a file that
cannot be read or composed exits 2 naming it, and an error composition cannot describe keeps
its message."""

from pathlib import Path

import pytest
from helpers import assert_refused, attnseq_in_process, check_train_args, train_in_process
from hydra import compose, initialize_config_dir

from attnseq.config import CONFIG_DIR
from attnseq.config.composition import describe_composition_error
from attnseq.config.schema import register_configs


@pytest.mark.slow
def test_a_users_file_wins_over_a_packaged_one_of_the_same_name(tmp_path: Path) -> None:
    folder = tmp_path / "tmp"
    folder.mkdir()
    mine = folder / "dates_transformer.yaml"  # the name of a packaged experiment
    mine.write_text("# @package _global_\nseed: 777\n")
    for given in ("tmp/dates_transformer.yaml", str(mine)):
        home = {"HOME": str(tmp_path)}  # the linked experiment files stay in tmp
        result = attnseq_in_process(
            "train", f"config={given}", "--cfg", "job", cwd=tmp_path, env=home
        )
        assert result.returncode == 0, result.stderr
        assert "\nseed: 777\n" in "\n" + result.stdout
        assert f"config_file: {mine}" in result.stdout
        # the packaged file's keys are not there: it was not loaded
        assert "name: dates_transformer" not in result.stdout


def test_config_file_is_recorded_in_the_composed_config(tmp_path: Path, monkeypatch) -> None:
    from hydra import compose, initialize_config_dir

    from attnseq.config import CONFIG_DIR
    from attnseq.config.composition import rewrite_config_selector

    monkeypatch.setenv("HOME", str(tmp_path))
    mine = tmp_path / "my exp's ${x}.yaml"  # survives the override grammar
    mine.write_text("# @package _global_\nseed: 9\n")
    args = rewrite_config_selector([f"config={mine}"])
    register_configs()
    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base="1.3"):
        composed = compose("train", overrides=args)
    assert composed.seed == 9 and composed.config_file == str(mine)


@pytest.mark.parametrize(
    ("content", "name", "expected"),
    [
        (None, "missing.yaml", "config file not found"),
        ("seed: 5\n", "nohead.yaml", "has no '# @package _global_' line"),
        ("# @package _global_\nseed: [1\n", "syntax.yaml", "line 3"),
        ("# @package _global_\nseed: 1\nseed: 2\n", "dup.yaml", "line 3"),
        ("# @package _global_\nseed: !!python/object:os.system {}\n", "tag.yaml", "line 2"),
    ],
)
def test_bad_user_files_exit_2_naming_the_file(
    content: str | None, name: str, expected: str, tmp_path: Path, monkeypatch
) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    path = tmp_path / name
    if content is not None:
        path.write_text(content)
    code, output = train_in_process(tmp_path, f"config={path}")
    assert_refused(tmp_path, code, output, expected)
    assert str(path) in output


def test_a_broken_group_file_on_the_search_path_exits_2(tmp_path: Path) -> None:
    group = tmp_path / "mine" / "model"
    group.mkdir(parents=True)
    (group / "broken.yaml").write_text("family: transformer\nheads: 4\nheads: 8\n")
    code, output = train_in_process(
        tmp_path, f"hydra.searchpath=[file://{tmp_path / 'mine'}]", "model=broken"
    )
    assert_refused(tmp_path, code, output, "found duplicate key heads")
    assert f"{group / 'broken.yaml'}, line 3" in output


def test_user_experiment_file(tmp_path: Path) -> None:
    from attnseq.config.composition import rewrite_config_selector

    mine = tmp_path / "mine.yaml"
    mine.write_text(
        "# @package _global_\ndefaults:\n  - override /data: reverse\n\noptim:\n  lr: 0.005\n"
    )
    args = rewrite_config_selector([f"config={mine}"])
    check_train_args(args)
    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base="1.3"):
        cfg = compose("train", overrides=args)
    assert cfg.data.name == "reverse" and cfg.optim.lr == 0.005


def test_describe_error_falls_back_to_message() -> None:
    assert "boom" in describe_composition_error(ValueError("boom"), ["x=1"])
