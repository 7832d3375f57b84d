"""A checkpoint does not choose which files `attnseq eval` reads or what it downloads: its
data paths stay under this machine's data root, unless the user names them on the command
line."""

from pathlib import Path

import pytest
from helpers import untrained_checkpoint
from typer.testing import CliRunner

from attnseq.cli.app import app
from attnseq.config.choices import DataSource, FileFormat
from attnseq.config.schema import DataConfig
from attnseq.data.locations import check_checkpoint_data, overridden_keys
from attnseq.errors import UserError

PAIRS = [("a b", "b a"), ("c d e", "e d c"), ("a c", "c a")]
SECRET = "a secret\tnot for eval\n"


def local(**fields) -> DataConfig:
    return DataConfig(**{"source": DataSource.local, "format": FileFormat.tsv, **fields})


@pytest.fixture
def root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """This machine's data root ($ATTNSEQ_DATA) for the test."""
    monkeypatch.setenv("ATTNSEQ_DATA", str(tmp_path / "data"))
    monkeypatch.setenv("ATTNSEQ_CACHE", str(tmp_path / "cache"))
    (tmp_path / "data").mkdir()
    return tmp_path / "data"


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"splits": {"test": "/etc/passwd"}}, "data.splits.test='/etc/passwd' is not a path"),
        ({"splits": {"test": "~/notes.tsv"}}, "data.splits.test='~/notes.tsv'"),
        ({"splits": {"test": "../outside.tsv"}}, "data.splits.test='../outside.tsv'"),
        ({"splits": {"test": "a/../../outside"}}, "data.splits.test='a/../../outside'"),
        ({"splits": {"train": "t.tsv", "test": ".."}}, "data.splits.test='..'"),
        ({"root": "/", "splits": {"test": "etc/passwd"}}, "sets data.root='/'"),
        ({"source": DataSource.hub, "hub_name": "x/y", "splits": {"test": "test"}}, "Hub"),
        (
            {"format": FileFormat.parallel, "splits": {"test": "t"}, "src_lang": "x/../../y"},
            "data.src_lang='x/../../y' is not a plain file suffix",
        ),
    ],
)
def test_data_locations_from_a_checkpoint_are_refused(
    root: Path, fields: dict, message: str
) -> None:
    cfg = local(**fields)
    with pytest.raises(UserError, match=f"{message}") as error:
        check_checkpoint_data(cfg, set())
    assert "on the command line to allow it" in str(error.value)
    # the same values given by the user are the user's choice
    given = overridden_keys(
        ["data.root=/", "data.source=hub", "+data.splits.test=x", "data.src_lang=y"]
    )
    check_checkpoint_data(cfg, given)


def test_paths_inside_the_data_root_are_fine(root: Path) -> None:
    inside = {"train": "train.tsv", "valid": "sub/../valid.tsv", "test": "corpus/test"}
    check_checkpoint_data(local(splits=inside), set())
    check_checkpoint_data(local(root=str(root), splits=inside), set())  # the same root
    check_checkpoint_data(DataConfig(), set())  # generated data reads no file
    # evaluating a file the user names: the dataset's own paths are not read
    check_checkpoint_data(local(splits={"test": "/etc/passwd"}), set(), reads_dataset=False)
    with pytest.raises(UserError, match="data.root"):
        check_checkpoint_data(local(root="/"), set(), reads_dataset=False)
    # a whole group given by the user covers the keys under it
    check_checkpoint_data(local(splits={"test": "/abs"}), {"data.splits"})


@pytest.mark.slow
def test_eval_of_a_crafted_checkpoint_exits_2_and_reads_nothing(root: Path, tmp_path: Path) -> None:
    secret = tmp_path / "secret.tsv"
    secret.write_text(SECRET, encoding="utf-8")
    checkpoint = untrained_checkpoint(
        tmp_path / "run" / "checkpoints" / "best.pt",
        "data.source=local",
        "data.format=tsv",
        "data.tokenizer=word",
        f"data.splits.test={secret}",
        pairs=PAIRS,
    )
    out = tmp_path / "out"
    result = CliRunner().invoke(app, ["eval", str(checkpoint), "--out", str(out)])
    assert result.exit_code == 2, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and f"data.splits.test={secret}" in lines[0]
    assert not out.exists()
    # on the command line the path is the user's choice
    allowed = [f"data.splits.test={secret}", "--out", str(out)]
    result = CliRunner().invoke(app, ["eval", str(checkpoint), *allowed])
    assert result.exit_code == 0, result.output
    (refs,) = out.glob("*/test.*/refs.txt")  # one folder per checkpoint, split and decoding
    assert refs.read_text(encoding="utf-8") == "not for eval\n"
