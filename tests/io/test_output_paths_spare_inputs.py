"""No command writes over one of its own inputs: every output option of every command that
writes, pointed at each of the command's inputs (by its path, a `../` spelling, a `../`
spelling through a folder that does not exist yet, a symbolic link or a hard link), ends in one
line on stderr and exit status 2, with the input byte-identical.

The (command line, inputs) table `CASES` lists each command and output option once; a new
command or output option is one more row."""

import os
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml
from helpers import tiny_config, untrained_checkpoint
from typer.testing import CliRunner

from attnseq.cli.app import app

runner = CliRunner()
OUT = "{out}"  # where a command line's output goes


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder of every input the commands read: checkpoints, text, gold alignments, a file
    of saved attention and a sweep of one finished job."""
    root = tmp_path_factory.mktemp("inputs")
    untrained_checkpoint(root / "ck.pt")
    shutil.copyfile(root / "ck.pt", root / "ck2.pt")
    untrained_checkpoint(root / "tr.pt", "model.family=transformer")
    (root / "src.txt").write_text("3 March 1998\n1 May 2001\n")
    (root / "tgt.txt").write_text("1998-03-03\n2001-05-01\n")
    (root / "text.txt").write_text("3 March 1998\n")
    (root / "pairs.tsv").write_text("3 March 1998\t1998-03-03\n")
    (root / "gold.pharaoh").write_text("0-0 1-0\n0-0\n")
    (root / "possible.pharaoh").write_text("2-0\n\n")
    (root / "saved.npz").write_bytes(b"PK\x05\x06" + bytes(18))
    job = root / "sweep" / "0"
    (job / ".hydra").mkdir(parents=True)
    (root / "sweep" / "multirun.yaml").write_text(yaml.safe_dump({"optimized_metric": "x"}))
    (job / ".hydra" / "overrides.yaml").write_text(yaml.safe_dump(["optim.lr=0.01"]))
    (job / ".hydra" / "config.yaml").write_text(yaml.safe_dump({"seed": 1}))
    (job / "metrics.json").write_text('{"test/bleu": 1.0}\n')
    (root / "sub").mkdir()
    return root


@dataclass(frozen=True)
class Case:
    """A command line with `OUT` where the output goes and `{name}` for the file `name` of
    the `world` folder, and the names of the inputs the output must not replace."""

    name: str
    args: tuple[str, ...]
    inputs: tuple[str, ...]


SWEEP_FILES = ("sweep/multirun.yaml", "sweep/0/.hydra/overrides.yaml", "sweep/0/metrics.json")
EVAL = (
    "eval", "{ck.pt}", "{ck2.pt}", "--split", "{pairs.tsv}", "--device", "cpu",
    "--gold", "{gold.pharaoh}", "--gold-possible", "{possible.pharaoh}",
    "--gold-src", "{src.txt}", "--gold-tgt", "{tgt.txt}", "--out", OUT,
)  # fmt: skip
ALIGN = (
    "align", "{ck.pt}", "--src", "{src.txt}", "--tgt", "{tgt.txt}", "--reverse", "{ck2.pt}",
    "--gold", "{gold.pharaoh}", "--gold-possible", "{possible.pharaoh}", "--device", "cpu",
)  # fmt: skip
ALIGN_INPUTS = ("ck.pt", "src.txt", "tgt.txt", "ck2.pt", "gold.pharaoh", "possible.pharaoh")
CASES = [
    Case(
        "eval --out",
        EVAL,
        ("ck.pt", "ck2.pt", "pairs.tsv", "gold.pharaoh", "possible.pharaoh", "src.txt", "tgt.txt"),
    ),
    Case(
        "translate --output",
        ("translate", "{ck.pt}", "{ck2.pt}", "-i", "{text.txt}", "-o", OUT, "--device", "cpu"),
        ("ck.pt", "ck2.pt", "text.txt"),
    ),
    Case(
        "score --out",
        ("score", "{ck.pt}", "--src", "{src.txt}", "--tgt", "{tgt.txt}", "--out", OUT),
        ("ck.pt", "src.txt", "tgt.txt"),
    ),
    Case("align --out", (*ALIGN, "--out", OUT), ALIGN_INPUTS),
    Case("align --soft", (*ALIGN, "--soft", OUT), ALIGN_INPUTS),
    Case("average --out", ("average", "{ck.pt}", "{ck2.pt}", "--out", OUT), ("ck.pt", "ck2.pt")),
    Case("heads --out", ("heads", "{tr.pt}", "--prune", "1", "--out", OUT), ("tr.pt",)),
    Case("heads --report-dir", ("heads", "{tr.pt}", "--report-dir", OUT), ("tr.pt",)),
    Case(
        "visualize-alignment --out",
        ("visualize-alignment", "{ck.pt}", "--src", "3 March 1998", "--out", OUT),
        ("ck.pt",),
    ),
    Case(
        "visualize-alignment --input --out",
        ("visualize-alignment", "{ck.pt}", "--input", "{text.txt}", "--out", OUT),
        ("ck.pt", "text.txt"),
    ),
    Case(
        "visualize-alignment --tensorboard",
        ("visualize-alignment", "{ck.pt}", "--src", "3 March 1998", "--tensorboard", OUT),
        ("ck.pt",),
    ),
    Case(
        "visualize-alignment --from-saved --out",
        ("visualize-alignment", "--from-saved", "{saved.npz}", "--index", "0", "--out", OUT),
        ("saved.npz",),
    ),
    Case("sweep-report --csv", ("sweep-report", "{sweep}", "--csv", OUT), SWEEP_FILES),
    Case("sweep-report --plot", ("sweep-report", "{sweep}", "--plot", OUT), SWEEP_FILES),
]


def by_path(world: Path, name: str, tmp_path: Path) -> Path:
    return world / name


def by_parent_folder(world: Path, name: str, tmp_path: Path) -> Path:
    return world / "sub" / ".." / name


def by_new_folder_and_parent(world: Path, name: str, tmp_path: Path) -> Path:
    """Through a folder that does not exist (one per test): writing would create it, then land
    on `name`."""
    return world / f"absent-{tmp_path.name}" / ".." / name


def by_symlink(world: Path, name: str, tmp_path: Path) -> Path:
    link = tmp_path / Path(name).name
    link.symlink_to(world / name)
    return link


def by_hard_link(world: Path, name: str, tmp_path: Path) -> Path:
    link = tmp_path / Path(name).name
    os.link(world / name, link)
    return link


SPELLINGS: list[Callable[[Path, str, Path], Path]] = [
    by_path,
    by_parent_folder,
    by_new_folder_and_parent,
    by_symlink,
    by_hard_link,
]


def contents(world: Path) -> dict[Path, bytes | None]:
    """The bytes of every file under `world`, and its folders (None)."""
    return {path: path.read_bytes() if path.is_file() else None for path in world.rglob("*")}


def command_line(case: Case, world: Path, out: Path) -> list[str]:
    """`case.args` with the output and the input names filled in."""
    return [
        str(out) if arg == OUT else str(world / arg[1:-1]) if arg.startswith("{") else arg
        for arg in case.args
    ]


def one_line_exit_2(result, *expected: str) -> None:  # type: ignore[no-untyped-def]
    assert result.exit_code == 2, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert all(word in lines[0] for word in expected), result.stderr
    assert "Traceback" not in result.output


@pytest.mark.parametrize("spelling", SPELLINGS, ids=lambda spelling: spelling.__name__)
@pytest.mark.parametrize(
    ("case", "input_name"),
    [(case, name) for case in CASES for name in case.inputs],
    ids=lambda value: value.name if isinstance(value, Case) else value,
)
def test_an_output_pointed_at_an_input_is_refused_and_the_input_kept(
    world: Path,
    tmp_path: Path,
    case: Case,
    input_name: str,
    spelling: Callable[[Path, str, Path], Path],
) -> None:
    before = contents(world)
    out = spelling(world, input_name, tmp_path)
    result = runner.invoke(app, command_line(case, world, out))
    one_line_exit_2(result, str(out), "is the input", Path(input_name).name)
    assert contents(world) == before


def test_every_command_that_writes_has_a_row() -> None:
    commands = {case.args[0] for case in CASES}
    assert commands == {
        "eval",
        "translate",
        "score",
        "align",
        "average",
        "heads",
        "visualize-alignment",
        "sweep-report",
    }


@pytest.mark.parametrize(
    "args",
    [
        ("align", "{ck.pt}", "--src", "{src.txt}", "--tgt", "{tgt.txt}", "--out", "{src.txt}"),
        ("align", "{ck.pt}", "--src", "{src.txt}", "--tgt", "{tgt.txt}", "--out", "{ck.pt}"),
        ("score", "{ck.pt}", "--src", "{src.txt}", "--tgt", "{tgt.txt}", "--out", "{src.txt}"),
        ("translate", "{ck.pt}", "-i", "{text.txt}", "-o", "{text.txt}"),
        ("average", "{ck.pt}", "{ck2.pt}", "--out", "{ck.pt}"),
        ("heads", "{tr.pt}", "--prune", "2", "--out", "{tr.pt}"),
    ],
    ids=lambda args: " ".join(arg.strip("{}") for arg in args),
)
def test_writing_over_the_named_input_is_refused(world: Path, args: tuple[str, ...]) -> None:
    before = contents(world)
    target = args[-1][1:-1]
    result = runner.invoke(app, command_line(Case("", args, ()), world, Path()))
    one_line_exit_2(result, "is the input", target, "choose another output path")
    assert contents(world) == before


def test_an_eval_result_file_linked_to_an_input_is_refused_before_decoding(
    world: Path, tmp_path: Path
) -> None:
    """The result folder's names are known once the checkpoint is loaded; a hyps.txt there that
    links to the gold alignments is refused before the split is decoded."""
    from attnseq.decoding.settings import DecodingSettings
    from attnseq.evaluation.checkpoint_eval import result_folder

    trainer = tiny_config().trainer
    folder = result_folder(
        tmp_path / "eval",
        world / "ck.pt",
        None,
        "pairs_tsv",
        DecodingSettings.from_trainer(trainer),
        extra=["align-gold.pharaoh"],
    )
    folder.mkdir(parents=True)
    (folder / "hyps.txt").symlink_to(world / "gold.pharaoh")
    before = contents(world)
    args = [
        "eval", str(world / "ck.pt"), "--split", str(world / "pairs.tsv"), "--device", "cpu",
        "--gold", str(world / "gold.pharaoh"), "--gold-src", str(world / "src.txt"),
        "--gold-tgt", str(world / "tgt.txt"), "--out", str(tmp_path / "eval"),
    ]  # fmt: skip
    result = runner.invoke(app, args)
    one_line_exit_2(result, "eval result", "hyps.txt", "is the input --gold")
    assert contents(world) == before
    assert sorted(path.name for path in folder.iterdir()) == ["hyps.txt"]


@pytest.mark.parametrize("spelling", SPELLINGS, ids=lambda spelling: spelling.__name__)
def test_translate_output_over_a_file_of_the_exported_model_is_refused(
    world: Path, tmp_path: Path, spelling: Callable[[Path, str, Path], Path]
) -> None:
    pytest.importorskip("ctranslate2")
    from attnseq.models.ctranslate2_export import export_ctranslate2

    folder = export_ctranslate2(world / "tr.pt", tmp_path / "ct2")
    model_file = folder / "model.bin"
    before = model_file.read_bytes()
    out = spelling(folder, "model.bin", tmp_path)
    args = ["translate", "--engine", "ctranslate2", str(folder), "-o", str(out)]
    result = runner.invoke(app, [*args, "--device", "cpu"], input="3 March 1998\n")
    one_line_exit_2(result, str(out), "is the input CHECKPOINT", "model.bin")
    assert model_file.read_bytes() == before


def test_an_output_folder_beside_or_around_the_inputs_is_no_input(
    world: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """eval writes into a folder of its own under --out: an --out folder that holds the
    checkpoint, or is named like the split, replaces nothing and is taken."""
    shutil.copyfile(world / "ck.pt", tmp_path / "ck.pt")
    (tmp_path / "test").mkdir()
    monkeypatch.chdir(tmp_path)
    for out in ("test", "."):
        result = runner.invoke(app, ["eval", "ck.pt", "--split", "test", "--out", out])
        assert result.exit_code == 0, result.output
        assert len(list(Path(out).glob("ck/test.*/metrics.json"))) == 1
    assert (tmp_path / "ck.pt").read_bytes() == (world / "ck.pt").read_bytes()
