"""The README and the documentation site stay true to the code: the commands and config options
they name exist, every option that exists is listed, and the generated reference is current."""

import re
from pathlib import Path

import pytest

from attnseq.cli.app import app
from attnseq.config import CONFIG_DIR
from attnseq.config.reference import GROUPS, render

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
REFERENCE = ROOT / "docs" / "reference" / "configuration.md"
# The generated reference lists everything by construction, so it proves nothing about the rest.
WRITTEN_DOCS = [README, *sorted(p for p in (ROOT / "docs").rglob("*.md") if p != REFERENCE)]

# `attnseq train`, `attnseq visualize-alignment`, ... (not `attnseq/config/...` paths)
COMMAND = re.compile(r"(?<![\w/.-])attnseq ([a-z][a-z-]*)\b(?![/.])")
# `data=reverse`, `model=rnn_bahdanau,rnn_luong`, `config=multi30k_transformer`; placeholders
# in capitals (config=NAME) and paths (config=path/to/my.yaml) are not options.
SELECTION = re.compile(
    r"(?<![\w./+~])(data|model|optim|trainer|hparams_search|config|experiment)=([\w,]+)(?![\w/.])"
)


FENCE = re.compile(r"^```[^\n]*\n(.*?)^```", re.S | re.M)
INLINE = re.compile(r"`([^`\n]+)`")


def code(path: Path) -> str:
    """The code of a Markdown file, fenced blocks and inline spans, where commands are named;
    a transcript line that shows a mistake on purpose (the next line starts with `error:`)
    is left out."""
    text = path.read_text(encoding="utf-8")
    blocks = FENCE.findall(text)
    prose = FENCE.sub("", text)
    lines = "\n".join(blocks).splitlines() + INLINE.findall(prose)
    kept = [
        line
        for line, following in zip(lines, [*lines[1:], ""][: len(lines)], strict=True)
        if not following.startswith("error:")
    ]
    return "\n".join(kept)


def command_names() -> set[str]:
    return {command.name or command.callback.__name__ for command in app.registered_commands}


def options(group: str) -> set[str]:
    return {path.stem for path in (CONFIG_DIR / group).glob("*.yaml")}


def test_the_docs_are_found() -> None:
    assert README.is_file() and len(WRITTEN_DOCS) > 5


@pytest.mark.parametrize("path", WRITTEN_DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_named_command_exists(path: Path) -> None:
    named = set(COMMAND.findall(code(path)))
    assert named <= command_names(), (
        f"{path.name} names unknown commands: {named - command_names()}"
    )


@pytest.mark.parametrize("path", WRITTEN_DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_named_config_option_exists(path: Path) -> None:
    unknown = []
    for group, values in SELECTION.findall(code(path)):
        folder = "experiment" if group == "config" else group
        for value in values.split(","):
            if value and not value.isupper() and value != "null" and value not in options(folder):
                unknown.append(f"{group}={value}")
    assert not unknown, f"{path.name} names options that do not exist: {unknown}"


@pytest.mark.parametrize("group", GROUPS)
def test_the_readme_lists_every_option_of_every_group(group: str) -> None:
    text = README.read_text(encoding="utf-8")
    missing = sorted(name for name in options(group) if f"`{name}`" not in text)
    assert not missing, f"README.md does not list {group} options {missing}"


# The README is the front door (what attnseq is, set-up, a tour, the commands, where things
# are); measured tables and long guides belong to the docs site.
README_MAX_LINES = 220


def test_the_readme_stays_a_front_door() -> None:
    lines = README.read_text(encoding="utf-8").splitlines()
    assert len(lines) <= README_MAX_LINES, f"README.md has {len(lines)} lines; move guides to docs/"
    headings = [line for line in lines if line.startswith("## ")]
    for section in ["## Set-up", "## A five-minute tour", "## Commands", "## Where things are"]:
        assert section in headings, f"README.md lacks {section}"


def test_the_readme_lists_every_command() -> None:
    text = README.read_text(encoding="utf-8")
    missing = sorted(name for name in command_names() if f"attnseq {name}" not in text)
    assert not missing, f"README.md does not show the commands {missing}"


def test_the_configuration_reference_is_generated_from_the_schema() -> None:
    assert REFERENCE.read_text(encoding="utf-8") == render(), (
        "docs/reference/configuration.md is stale: "
        "python -m attnseq.config.reference > docs/reference/configuration.md"
    )


def test_the_reference_documents_every_key_with_help() -> None:
    from attnseq.config.reference import keys

    documented = list(keys())
    assert {"seed", "model.attention.kind", "trainer.keep_last"} <= {d.key for d in documented}
    assert all(doc.help for doc in documented), [doc.key for doc in documented if not doc.help]
