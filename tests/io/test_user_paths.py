"""Output paths are checked before the work, and a write the user can fix (full disk, read-only
folder) ends in one line with exit status 2, the old file intact."""

import errno
import os
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml
from helpers import attnseq_in_process, one_line_exit_2, tiny_config, untrained_checkpoint
from typer.testing import CliRunner

import attnseq.io.atomic
from attnseq.cli.app import app
from attnseq.errors import OutputError, UserError
from attnseq.io.atomic import atomic_write_text
from attnseq.io.checkpoint import load_checkpoint
from attnseq.training.run import run_training

runner = CliRunner()


def test_outputs_that_cannot_be_written_are_refused_first(rnn_checkpoint: Path, tmp_path: Path):
    folder = tmp_path / "folder"
    folder.mkdir()
    a_file = tmp_path / "a_file"
    a_file.write_text("x")
    cases = [
        (["average", str(rnn_checkpoint), "--out", str(folder)], "is a folder; give a file name"),
        (["translate", str(rnn_checkpoint), "-o", str(folder)], "is a folder; give a file name"),
        (["eval", str(rnn_checkpoint), "--out", str(a_file)], "is a file; give a folder"),
        (["eval", str(rnn_checkpoint), "--batch-size", "-5"], "--batch-size must be at least 1"),
        (
            ["visualize-alignment", str(rnn_checkpoint), "--src", "x", "--out", str(folder)],
            "is a folder; give a file name",
        ),
        (
            [
                "visualize-alignment",
                str(rnn_checkpoint),
                "--src",
                "x",
                "--out",
                str(tmp_path / "a.txt"),
            ],
            "unknown format '.txt'; use one of",
        ),
        (
            ["sweep-report", str(tmp_path), "--plot", str(tmp_path / "r.txt")],
            "unknown format '.txt'",
        ),
        (
            ["translate", str(rnn_checkpoint), "-o", str(a_file / "out.txt")],
            "is a file, not a folder",
        ),
    ]
    for args, expected in cases:
        result = runner.invoke(app, args, input="3 March 1998\n")
        one_line_exit_2(result, expected)
    assert a_file.read_text() == "x" and list(folder.iterdir()) == []


def test_a_special_file_is_never_replaced_by_an_output(rnn_checkpoint: Path, tmp_path: Path):
    """An output is renamed over its path: over a named pipe (or, for root, /dev/null itself)
    that would leave a regular file in its place. Each write refuses, before the work."""
    pipe = tmp_path / "pipe"
    os.mkfifo(pipe)
    text = tmp_path / "a.txt"
    text.write_text("3 March 1998\n")
    cases = [
        ["average", str(rnn_checkpoint), "--out", str(pipe)],
        ["translate", str(rnn_checkpoint), "-i", str(text), "-o", str(pipe)],
        ["score", str(rnn_checkpoint), "--src", str(text), "--tgt", str(text), "--out", str(pipe)],
        ["explain", str(rnn_checkpoint), "--src", "3 March", "--out", str(pipe) + ".html"],
    ]
    os.mkfifo(str(pipe) + ".html")
    for args in cases:
        result = runner.invoke(app, args)
        one_line_exit_2(result, "is a named pipe (FIFO), and an output is written to a new file")
    with pytest.raises(UserError, match="cannot write .*pipe: it is a named pipe"):
        atomic_write_text(pipe, "x\n")
    assert pipe.is_fifo() and sorted(p.name for p in tmp_path.iterdir()) == [
        "a.txt",
        "pipe",
        "pipe.html",
    ]


def test_an_output_folder_that_is_a_dangling_link_is_refused_first(
    rnn_checkpoint: Path, tmp_path: Path
) -> None:
    """A symbolic link to a folder that does not exist cannot be made a folder (mkdir says it
    exists): each option that takes an output folder says so before the work."""
    link = tmp_path / "figures"
    link.symlink_to(tmp_path / "gone")
    cases = [
        ["visualize-alignment", str(rnn_checkpoint), "--src", "x", "--tensorboard", str(link)],
        ["eval", str(rnn_checkpoint), "--out", str(link)],
    ]
    for args in cases:
        result = runner.invoke(app, args)
        one_line_exit_2(result, f"{link} is a symbolic link to {tmp_path / 'gone'}")
    assert sorted(path.name for path in tmp_path.iterdir()) == ["figures"]


def fail_fsync_with(code: int, monkeypatch: pytest.MonkeyPatch, after: int = 0) -> None:
    """os.fsync in the atomic writer raises OSError(code) after `after` successful calls."""
    calls = {"n": 0}
    real = os.fsync

    def fsync(fd: int) -> None:
        calls["n"] += 1
        if calls["n"] > after:
            raise OSError(code, os.strerror(code))
        real(fd)

    monkeypatch.setattr(attnseq.io.atomic.os, "fsync", fsync)


@pytest.mark.parametrize("code", [errno.ENOSPC, errno.EROFS, errno.EACCES])
def test_a_fixable_write_failure_is_one_line_and_keeps_the_old_file(
    rnn_checkpoint: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, code: int
) -> None:
    target = tmp_path / "out.txt"
    atomic_write_text(target, "old\n")
    fail_fsync_with(code, monkeypatch)
    result = runner.invoke(app, ["translate", str(rnn_checkpoint), "-o", str(target)], "a\n")
    one_line_exit_2(result, f"cannot write {target}: {os.strerror(code)}")
    assert target.read_text() == "old\n"
    assert [p.name for p in tmp_path.iterdir()] == ["out.txt"]  # no temporary left behind


@pytest.mark.slow
def test_a_full_disk_during_training_keeps_the_last_checkpoint(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The run stops with an OutputError; last.pt is the previous complete save."""
    cfg = tiny_config(
        "trainer.max_steps=9", "trainer.save_every_steps=3", "trainer.validate_every=100"
    )
    writes = {"n": 0}
    real_replace = attnseq.io.atomic.os.replace

    def replace(src, dst):  # count completed writes; the disk fills after last.pt at step 3
        writes["n"] += 1
        real_replace(src, dst)
        if Path(dst).name == "last.pt" and load_checkpoint(dst)["progress"]["step"] == 3:
            fail_fsync_with(errno.ENOSPC, monkeypatch)

    monkeypatch.setattr(attnseq.io.atomic.os, "replace", replace)
    with pytest.raises(OutputError, match="No space left on device"):
        run_training(cfg, tmp_path)
    assert load_checkpoint(tmp_path / "checkpoints" / "last.pt")["progress"]["step"] == 3
    assert not list((tmp_path / "checkpoints").glob(".*.tmp"))


@pytest.mark.slow
def test_the_training_message_says_how_to_continue(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """attnseq train turns an OutputError into one line with the resume=auto command."""

    def fail(cfg, run_dir):
        raise OutputError("cannot write x: No space left on device")

    monkeypatch.setattr("attnseq.training.run.run_training", fail)
    done = attnseq_in_process("train", f"hydra.run.dir={tmp_path / 'run'}", cwd=tmp_path)
    assert done.returncode == 2, done.stderr
    last = done.stderr.strip().splitlines()[-1]
    assert "No space left on device; fix that, then continue with:" in last
    assert "resume=auto" in last and f"hydra.run.dir={tmp_path / 'run'}" in last


def test_an_output_over_an_input_is_refused_by_any_path(tmp_path: Path):
    from attnseq.errors import UserError
    from attnseq.io.user_paths import refuse_output_over_inputs

    source = tmp_path / "s.txt"
    source.write_text("a b\n")
    (tmp_path / "sub").mkdir()
    (tmp_path / "link.txt").symlink_to(source)
    os.link(source, tmp_path / "hard.txt")
    for spelling in [
        source,
        tmp_path / "sub" / ".." / "s.txt",
        tmp_path / "link.txt",
        tmp_path / "hard.txt",
    ]:
        with pytest.raises(UserError, match="is the input --src"):
            refuse_output_over_inputs(spelling, "--out", [("--src", source), ("--gold", None)])
    refuse_output_over_inputs(tmp_path / "new.txt", "--out", [("--src", source)])
    assert source.read_text() == "a b\n"


def test_a_symbolic_link_loop_among_the_paths_is_no_traceback(rnn_checkpoint: Path, tmp_path: Path):
    """Path.resolve raises RuntimeError for a link to itself (Python before 3.13): the
    comparison of outputs with inputs takes such a path as it is, and the command says what
    is wrong with it."""
    from attnseq.io.user_paths import refuse_output_over_inputs

    loop = tmp_path / "loop.pt"
    loop.symlink_to(loop)
    refuse_output_over_inputs(tmp_path / "out.pt", "--out", [("CHECKPOINT", loop)])
    refuse_output_over_inputs(loop, "--out", [("CHECKPOINT", rnn_checkpoint)])
    result = runner.invoke(app, ["average", str(loop), "--out", str(tmp_path / "a.pt")])
    one_line_exit_2(result, str(loop))


def test_a_folder_holding_an_input_is_refused(tmp_path: Path):
    from attnseq.errors import UserError
    from attnseq.io.user_paths import refuse_folder_holding_inputs

    run = tmp_path / "run"
    (run / "checkpoints").mkdir(parents=True)
    checkpoint = run / "checkpoints" / "best.pt"
    checkpoint.write_bytes(b"x")
    for folder in [run, run / "checkpoints", tmp_path]:
        with pytest.raises(UserError, match="holds the input CHECKPOINT"):
            refuse_folder_holding_inputs(folder, "OUT", [("CHECKPOINT", checkpoint)])
    refuse_folder_holding_inputs(tmp_path / "export", "OUT", [("CHECKPOINT", checkpoint)])
    (tmp_path / "other").mkdir()
    refuse_folder_holding_inputs(tmp_path / "other", "OUT", [("CHECKPOINT", checkpoint)])


# ------------------------------------------------------------
# No command writes over one of its own inputs: every output option of every command that
# writes, pointed at each of the command's inputs (by its path, a `../` spelling, a `../`
# spelling through a folder that does not exist yet, a symbolic link or a hard link), ends in one
# line on stderr and exit status 2, with the input byte-identical.
#
# The (command line, inputs) table `CASES` lists each command and output option once; a new
# command or output option is one more row.

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
    "eval",
    "{ck.pt}",
    "{ck2.pt}",
    "--split",
    "{pairs.tsv}",
    "--device",
    "cpu",
    "--gold",
    "{gold.pharaoh}",
    "--gold-possible",
    "{possible.pharaoh}",
    "--gold-src",
    "{src.txt}",
    "--gold-tgt",
    "{tgt.txt}",
    "--out",
    OUT,
)
ALIGN = (
    "align",
    "{ck.pt}",
    "--src",
    "{src.txt}",
    "--tgt",
    "{tgt.txt}",
    "--reverse",
    "{ck2.pt}",
    "--gold",
    "{gold.pharaoh}",
    "--gold-possible",
    "{possible.pharaoh}",
    "--device",
    "cpu",
)
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


@pytest.mark.slow
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


@pytest.mark.slow
def test_an_eval_result_file_linked_to_an_input_is_refused_before_decoding(
    world: Path, tmp_path: Path
) -> None:
    """The result folder's names are known once the checkpoint is loaded; a hyps.txt there that
    links to the gold alignments is refused before the split is decoded."""
    from attnseq.evaluation.checkpoint_eval import result_folder

    folder = result_folder(
        tmp_path / "eval",
        world / "ck.pt",
        None,
        "pairs_tsv",
        tiny_config().decoding,
        extra=["align-gold.pharaoh"],
    )
    folder.mkdir(parents=True)
    (folder / "hyps.txt").symlink_to(world / "gold.pharaoh")
    before = contents(world)
    args = [
        "eval",
        str(world / "ck.pt"),
        "--split",
        str(world / "pairs.tsv"),
        "--device",
        "cpu",
        "--gold",
        str(world / "gold.pharaoh"),
        "--gold-src",
        str(world / "src.txt"),
        "--gold-tgt",
        str(world / "tgt.txt"),
        "--out",
        str(tmp_path / "eval"),
    ]
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


@pytest.mark.slow
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
