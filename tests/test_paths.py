"""Every repository path that the code, the configs and the documentation name exists: a
docstring that cites `tests/config/test_resources.py`, a results page that runs
`benchmarks/benchmark.py`, a config comment that points at `studies/compare_summarizers.py`.

The rule (`cited_paths`, `names_something`):
- a repository path starts with one of the repository's top folders (`TOP`) right after a
  space, a quote, a bracket or a backtick (not after `/`, `.`, `$` or a word: `../shared/data/x`,
  `$W/test.en`, a URL's path and `RUN/checkpoints/best.pt` belong elsewhere) and ends with a
  file suffix (`.py`, `.md`) or a slash (`docs/results/`); a bare word (`data`) is no path;
- what a user creates (`outputs/`, `multirun/`, `runs/`) starts with no top folder, so it is
  never a repository path;
- a path exists as written or, where it has placeholders (an upper-case word such as NAME, DATE,
  LAYER, or a `*`), some file or folder matches it with each placeholder standing for any name
  (`configs/experiment/NAME.yaml`, `tests/LAYER/test_MODULE.py`);
- in the package's own files a path may also be relative to the package: its docstrings cite a
  neighbour of another layer from the layer's folder (`data/loader.py` for attnseq/data/loader.py).
"""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "attnseq"
TOP = ("attnseq", "tests", "docs", "configs", "scripts", "benchmarks", "studies", "data", ".ci")
# a top folder at the start of a token, then the rest of the path; a path ends before a space,
# a quote, a backtick, a bracket, a comma or a colon
TOPS = "|".join(re.escape(top) for top in TOP)
PATH = re.compile(rf"(?<![\w./$~-])((?:{TOPS})/[\w./*-]*)")
SUFFIX = re.compile(r"\.[A-Za-z0-9]+$")
# an upper-case word of two letters or more stands for a name: NAME, DATE, RUN, test_MODULE
PLACEHOLDER = re.compile(r"(?<![A-Za-z])[A-Z][A-Z0-9]+(?![a-z])")

CITING = sorted(
    [
        *PACKAGE.rglob("*.py"),
        *(ROOT / "configs").rglob("*.yaml"),
        *(ROOT / "docs").rglob("*.md"),
        ROOT / "README.md",
        ROOT / "pyproject.toml",
    ]
)


def cited_paths(text: str) -> list[tuple[int, str]]:
    """(line number, path) of every repository path the text names, in order."""
    found = []
    for number, line in enumerate(text.splitlines(), start=1):
        for match in PATH.finditer(line):
            path = match.group(1).rstrip(".")  # a sentence's full stop is not the suffix
            if path.endswith("/") or SUFFIX.search(path.rsplit("/", 1)[-1]):
                found.append((number, path))
    return found


def names_something(path: str, roots: tuple[Path, ...] = (ROOT,)) -> bool:
    """Whether `path` names an existing file or folder under one of `roots`, as written or,
    with placeholders, as a pattern (every placeholder and `*` standing for any name)."""
    pattern = PLACEHOLDER.sub("*", path).rstrip("/")
    for root in roots:
        if (root / path).exists():
            return True
        if "*" in pattern and next(root.glob(pattern), None) is not None:
            return True
    return False


def test_the_rule_recognises_repository_paths_only() -> None:
    text = (
        "see tests/config/test_resources.py, `benchmarks/benchmark.py` and docs/results/.\n"
        "run outputs/DATE/TIME/ RUN/checkpoints/best.pt ../shared/data/x.tsv $W/test.en\n"
        "https://example.org/docs/page.md data=reverse the tests/ folder; the docs folder"
    )
    assert cited_paths(text) == [
        (1, "tests/config/test_resources.py"),
        (1, "benchmarks/benchmark.py"),
        (1, "docs/results/"),
        (3, "tests/"),
    ]


def test_placeholders_match_some_existing_name() -> None:
    assert names_something("configs/experiment/NAME.yaml")
    assert names_something("tests/LAYER/test_MODULE.py")
    assert names_something("configs/experiment/*.yaml")
    assert names_something("data/README.md")  # an upper-case file name, as written
    assert not names_something("configs/experiment/NAME.json")
    assert not names_something("tests/test_decoding.py")
    assert names_something("data/loader.py", (ROOT, PACKAGE))
    assert not names_something("data/loader.py")


def test_the_citing_files_are_found() -> None:
    assert ROOT / "attnseq" / "decoding" / "beam_search.py" in CITING
    assert ROOT / "docs" / "results" / "benchmark.md" in CITING
    assert len(CITING) > 100


def test_every_cited_repository_path_exists() -> None:
    broken = []
    for citing in CITING:
        roots = (ROOT, PACKAGE) if citing.is_relative_to(PACKAGE) else (ROOT,)
        for number, path in cited_paths(citing.read_text(encoding="utf-8")):
            if not names_something(path, roots):
                broken.append(f"{citing.relative_to(ROOT)}:{number}: {path}")
    assert not broken, "paths that name nothing:\n" + "\n".join(broken)
