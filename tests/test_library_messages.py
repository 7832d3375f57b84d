"""Library code never spells a command-line flag: its strings (messages, names shown to the user)
name settings and arguments, and the command line (attnseq/cli/) passes the flag the user typed.

Every module under attnseq/ but attnseq/cli/ is parsed; every string constant and every literal
part of an f-string is checked, except docstrings (module, class, function), which may say which
command uses a function. Comments are not in the syntax tree at all."""

import ast
import re
from collections.abc import Callable
from pathlib import Path

import pytest

from attnseq.errors import UserError

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "attnseq"
# A long option: two dashes, a letter, then letters, digits or dashes; not inside a word
# ("a--b") nor a longer run of dashes ("---"). A name that goes on with an underscore is no
# option of attnseq (its command line spells every option with dashes): it is another tool's,
# cited in a help text (sentencepiece's --input_sentence_size).
FLAG = re.compile(r"(?<![\w-])--[a-z][a-z0-9-]+(?!\w)")
# Modules left out of the check, each with its reason.
EXCLUDED: dict[str, str] = {}
# External tools' command lines that the library runs, or prints for the user to run:
# (module, flag) -> the command line.
GIT = "attnseq/training/provenance.py"
RUN = "attnseq/training/run.py"
ALLOWED = {
    (GIT, "--porcelain"): "runs `git status --porcelain`",
    (GIT, "--untracked-files"): "runs `git status --untracked-files=no`",
    (RUN, "--logdir"): "prints `tensorboard --logdir RUN_DIR/tb` to run",
    (RUN, "--backend-store-uri"): "prints `mlflow ui --backend-store-uri URI` to run",
}


def relative(path: Path) -> str:
    return path.relative_to(ROOT).as_posix()


LIBRARY = sorted(
    path
    for path in PACKAGE.rglob("*.py")
    if path.relative_to(PACKAGE).parts[0] != "cli" and relative(path) not in EXCLUDED
)


def docstring_nodes(tree: ast.Module) -> set[int]:
    """ids of the Constant nodes that are a module's, class's or function's docstring."""
    owners = (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)
    found = set()
    for node in ast.walk(tree):
        first = node.body[0] if isinstance(node, owners) and node.body else None
        if (
            isinstance(first, ast.Expr)
            and isinstance(first.value, ast.Constant)
            and isinstance(first.value.value, str)
        ):
            found.add(id(first.value))
    return found


def flags_in(source: str) -> list[tuple[int, str]]:
    """(line, flag) for each flag spelled in a string of `source` that is not a docstring, in
    line order; the literal parts of an f-string are Constant nodes of its JoinedStr, so they
    are seen too."""
    tree = ast.parse(source)
    docstrings = docstring_nodes(tree)
    found = [
        (node.lineno, flag)
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant)
        and isinstance(node.value, str)
        and id(node) not in docstrings
        for flag in FLAG.findall(node.value)
    ]
    return sorted(found)


def test_the_check_sees_messages_and_f_strings_but_not_docstrings() -> None:
    source = '''
"""Module docstring: `attnseq eval --beam 5`."""
class Settings:
    """Class docstring --kind."""
    def check(self, kind: str, n: int) -> None:
        """Function docstring --layer."""
        if kind:
            raise ValueError(f"--kind {kind!r} is unknown")  # comment --head
        message = "pass --force " "to replace"
        table = {"--split": n}
'''
    assert flags_in(source) == [(8, "--kind"), (9, "--force"), (10, "--split")]
    assert flags_in('x = "a--b ---c -e --7 -- x --input_sentence_size"') == []
    assert flags_in('x = "git status --untracked-files=no --porcelain"') == [
        (1, "--porcelain"),
        (1, "--untracked-files"),
    ]


def test_the_lists_name_real_files() -> None:
    for module in [*EXCLUDED, *(module for module, _ in ALLOWED)]:
        assert (ROOT / module).is_file(), module


@pytest.mark.parametrize("path", LIBRARY, ids=relative)
def test_library_strings_spell_no_command_line_flag(path: Path) -> None:
    module = relative(path)
    spelled = [
        f"{module}:{line}: {flag}"
        for line, flag in flags_in(path.read_text(encoding="utf-8"))
        if (module, flag) not in ALLOWED
    ]
    assert not spelled, "name the setting or argument, not the flag:\n" + "\n".join(spelled)


def test_each_allowed_flag_is_still_spelled() -> None:
    """An allow-list entry whose string is gone would silently allow the flag again later."""
    for module, flag in ALLOWED:
        found = [spelled for _, spelled in flags_in((ROOT / module).read_text(encoding="utf-8"))]
        assert flag in found, module


def refusal(call: Callable[[], object]) -> str:
    """The message of the UserError that `call` raises."""
    with pytest.raises(UserError) as error:
        call()
    return str(error.value)


def test_a_message_names_the_argument_and_a_command_passes_its_option(tmp_path: Path) -> None:
    """The pattern the library follows: a name parameter whose default is the library's own
    name, which a command replaces with the flag the user typed."""
    from attnseq.alignment.word_links import check_layer_and_head
    from attnseq.analysis.figures import style_from_options
    from attnseq.config.choices import DataSource
    from attnseq.config.schema import DataConfig
    from attnseq.data.locations import check_checkpoint_data
    from attnseq.models.ctranslate2_export import EXPORT_FILE, check_export_folder
    from attnseq.models.head_mask import prune_count

    layer = refusal(lambda: check_layer_and_head(3, None, 2, 4))
    assert layer == "layer must be in 1..2 for this model, got 3"
    head = refusal(lambda: check_layer_and_head(None, 5, 2, 4, "", ("--layer", "--head")))
    assert head == "--head must be in 1..4 for this model, got 5"

    figsize = refusal(lambda: style_from_options("8", 11.0, "viridis"))
    assert figsize.startswith("figsize must be W,H in inches")
    options = ("--figsize", "--fontsize", "--cmap")
    fontsize = refusal(lambda: style_from_options(None, 0.5, "viridis", options))
    assert fontsize == "--fontsize must be between 1 and 72 points, got 0.5"
    cmap = refusal(lambda: style_from_options(None, 11.0, "nope", options))
    assert cmap.startswith("--cmap: unknown colormap 'nope'")

    fraction = refusal(lambda: prune_count("1.5", 12, 6))
    assert fraction == "prune fraction must be in (0, 1), got 1.5"
    assert refusal(lambda: prune_count("x", 12, 6, "--prune")).startswith("--prune takes a head")

    hub = DataConfig(source=DataSource.hub, hub_name="x/y")
    plain = refusal(lambda: check_checkpoint_data(hub, set()))
    assert plain.endswith("pass data.source=hub on the command line to allow it")
    with_file = refusal(lambda: check_checkpoint_data(hub, set(), local_file="--split PATH"))
    assert with_file.endswith("to allow it, or evaluate a local file with --split PATH")

    out = tmp_path / "out"
    out.mkdir()
    (out / EXPORT_FILE).write_text("{}", encoding="utf-8")
    checkpoint = tmp_path / "model.pt"
    earlier = refusal(lambda: check_export_folder(checkpoint, out, False))
    assert earlier.endswith("holds an earlier export; pass force=True to replace its files")
    earlier = refusal(lambda: check_export_folder(checkpoint, out, False, "--force"))
    assert earlier.endswith("holds an earlier export; pass --force to replace its files")
