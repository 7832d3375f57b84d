"""The shape of the package: short functions, one layer per folder, a README map that names
every module where it lives, and a test module named after each module. A module is one concept,
whatever its length."""

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "attnseq"
MAX_FUNCTION_LINES = 60  # the body; a command's option declarations sit in its signature
# A module docstring says what the module is, its formula, shapes and the one reason that is
# not obvious; explanations, tours and results are pages of docs/.
MAX_MODULE_DOCSTRING_LINES = 30
MAX_MODULE_DOCSTRINGS_LINES = 910  # all of them together, about 6 lines a module
# The layers from the bottom up: each imports only the layers before it (the README's map
# lists them in this order). errors is a single module at the top of the package.
LAYER_ORDER = ("errors", "io", "config", "data", "attention", "models", "decoding", "alignment")
LAYER_ORDER += ("evaluation", "analysis", "training", "api", "cli")
LAYERS = tuple(layer for layer in LAYER_ORDER if layer != "errors")
# Library layers below training and the command line: inference and analysis never need the
# training runtime, and nothing below cli/ imports Hydra at module level.
NOT_TRAINING = ("data", "attention", "models", "decoding", "alignment", "evaluation", "analysis")
NOT_TRAINING += ("io", "config")

MODULES = sorted(PACKAGE.rglob("*.py"))


def relative(path: Path) -> str:
    return str(path.relative_to(ROOT))


def body_lines(function: ast.FunctionDef | ast.AsyncFunctionDef) -> int:
    """Lines from the first statement after the docstring to the end of the function."""
    body = function.body
    first = body[0]
    docstring = isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant)
    if docstring and isinstance(first.value.value, str) and len(body) > 1:
        first = body[1]
    return function.end_lineno - first.lineno + 1


@pytest.mark.parametrize("path", MODULES, ids=relative)
def test_functions_are_short(path: Path) -> None:
    tree = ast.parse(path.read_text())
    long = [
        f"{node.name} ({body_lines(node)} lines)"
        for node in ast.walk(tree)
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
        and body_lines(node) > MAX_FUNCTION_LINES
    ]
    assert not long, f"{relative(path)}: {', '.join(long)}"


def module_docstring_lines(path: Path) -> int:
    """Lines of the module's docstring, its quotes included; 0 without one."""
    body = ast.parse(path.read_text()).body
    first = body[0] if body else None
    if not (isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant)):
        return 0
    return first.end_lineno - first.lineno + 1 if isinstance(first.value.value, str) else 0


@pytest.mark.parametrize("path", MODULES, ids=relative)
def test_module_docstrings_are_short(path: Path) -> None:
    lines = module_docstring_lines(path)
    assert lines <= MAX_MODULE_DOCSTRING_LINES, f"{relative(path)}: a docstring of {lines} lines"


def test_the_module_docstrings_together_are_short() -> None:
    total = sum(module_docstring_lines(path) for path in MODULES)
    assert total <= MAX_MODULE_DOCSTRINGS_LINES, f"module docstrings: {total} lines"


# Modules without a test module of their name, each with the reason; every other module
# attnseq/LAYER/MODULE.py is tested in tests/LAYER/test_MODULE.py (attnseq/errors.py in
# tests/test_errors.py).
WITHOUT_TEST_MODULE = {
    "attnseq/__main__.py": "`python -m attnseq`: two lines that start attnseq/cli/app.py",
    "attnseq/errors.py": "the exception types alone; every layer's refusal tests raise them",
}


def module_test_file(path: Path) -> Path:
    """The test module of a module's name: attnseq/models/rnn.py -> tests/models/test_rnn.py,
    attnseq/errors.py -> tests/test_errors.py."""
    relative_path = path.relative_to(PACKAGE)
    return ROOT / "tests" / relative_path.parent / f"test_{relative_path.name}"


def test_every_module_has_a_test_module_of_its_name() -> None:
    modules = [path for path in MODULES if path.name != "__init__.py"]
    missing = [
        f"{relative(path)}: {relative(module_test_file(path))}"
        for path in modules
        if not module_test_file(path).is_file() and relative(path) not in WITHOUT_TEST_MODULE
    ]
    assert not missing, "modules without their test module:\n" + "\n".join(missing)


def test_the_modules_without_a_test_module_are_so_still() -> None:
    """Each entry of WITHOUT_TEST_MODULE names a module that exists and has no test module."""
    for name in WITHOUT_TEST_MODULE:
        path = ROOT / name
        assert path.is_file(), f"{name} is no module"
        test_file = module_test_file(path)
        assert not test_file.is_file(), f"{name} has {relative(test_file)}: leave it off the list"


def test_each_folder_is_a_layer() -> None:
    folders = {p.name for p in PACKAGE.iterdir() if p.is_dir() and (p / "__init__.py").exists()}
    assert folders == set(LAYERS)
    top = {p.name for p in PACKAGE.glob("*.py")}
    assert top == {"__init__.py", "__main__.py", "errors.py"}


def module_imports(path: Path) -> set[str]:
    """Modules imported at module level (not inside functions)."""
    names = set()
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
    return names


@pytest.mark.parametrize("layer", NOT_TRAINING)
def test_library_layers_import_neither_training_nor_hydra(layer: str) -> None:
    offending = []
    for path in sorted((PACKAGE / layer).rglob("*.py")):
        for name in module_imports(path):
            if name.startswith(("attnseq.training", "attnseq.cli", "hydra", "omegaconf")):
                offending.append(f"{relative(path)} imports {name}")
    assert not offending


def module_name(path: Path) -> str:
    """attnseq/data/prepare.py -> attnseq.data.prepare (a package's __init__ -> the package)."""
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def import_graph() -> dict[str, set[str]]:
    """{module: the attnseq modules it imports anywhere}: at module level, inside functions and
    under TYPE_CHECKING alike, since a circle hidden by a local import is still a circle.
    `from attnseq.x import y` counts as importing attnseq.x.y when that is a module."""
    known = {module_name(path) for path in MODULES}
    graph = {}
    for path in MODULES:
        imported = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                imported.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                imported.add(node.module)
                imported.update(f"{node.module}.{alias.name}" for alias in node.names)
        name = module_name(path)
        graph[name] = {other for other in imported & known if other != name}
    return graph


def test_no_module_imports_itself_through_others() -> None:
    """No import circle between modules; a package's __init__ (which only names its layer's
    parts) is left out, as importing attnseq.x.y runs attnseq.x first anyway."""
    graph = import_graph()
    packages = {name for name in graph if (ROOT / name.replace(".", "/") / "__init__.py").exists()}
    circles = []
    for start in sorted(set(graph) - packages):
        stack, seen = [(start, (start,))], set()
        while stack:  # depth-first search for a way from `start` back to itself
            module, way = stack.pop()
            for imported in sorted(graph[module] - packages):
                if imported == start:
                    circles.append(" -> ".join((*way, start)))
                elif imported not in seen:
                    seen.add(imported)
                    stack.append((imported, (*way, imported)))
    assert not circles, "import circles:\n" + "\n".join(circles)


def layer_of(module: str) -> str | None:
    """attnseq.models.rnn -> "models"; attnseq.api -> "api"; the package itself -> None."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else None


def layer_imports() -> list[tuple[str, str, str]]:
    """(module, its layer, the layer it imports) for every import between two layers,
    wherever it is written: at module level, in a function or under TYPE_CHECKING."""
    edges = []
    for module, imported in import_graph().items():
        own = layer_of(module)
        if own is None or own == "__main__":  # the entry points name the API and the CLI
            continue
        edges += [(module, own, other) for name in imported if (other := layer_of(name)) != own]
    return [(module, own, other) for module, own, other in edges if other is not None]


def test_layers_import_only_the_layers_below_them() -> None:
    upward = [
        f"{module} ({own}) imports {other}"
        for module, own, other in layer_imports()
        if LAYER_ORDER.index(other) > LAYER_ORDER.index(own)
    ]
    assert not upward, "imports against the layer order:\n" + "\n".join(sorted(set(upward)))


def test_the_packages_import_graph_has_no_cycle() -> None:
    """The layers as nodes: no way from a layer back to itself (the layer order forbids it;
    this says so on its own, should the order ever be loosened)."""
    graph: dict[str, set[str]] = {}
    for _module, own, other in layer_imports():
        graph.setdefault(own, set()).add(other)
    for start in graph:
        stack, seen = [start], set()
        while stack:
            for other in graph.get(stack.pop(), ()):
                assert other != start, f"the layers import each other in a circle through {start}"
                if other not in seen:
                    seen.add(other)
                    stack.append(other)


def test_the_readme_map_lists_the_layers_in_their_order() -> None:
    text = (ROOT / "README.md").read_text().split("## Where things are", 1)[1].split("```")[1]
    listed = re.findall(r"^attnseq/(\w+)", text, flags=re.MULTILINE)
    assert listed == list(LAYER_ORDER)


def readme_map() -> dict[str, set[str]]:
    """{folder: module file names} from the README's "Where things are" block."""
    text = (ROOT / "README.md").read_text()
    block = text.split("## Where things are", 1)[1].split("```")[1]
    named: dict[str, set[str]] = {}
    folder = None
    for line in block.splitlines():
        header = re.match(r"attnseq/(\w+)/", line)
        if header:
            folder = header.group(1)
        elif not line.startswith(" "):
            folder = None
        if folder is not None:
            named.setdefault(folder, set()).update(re.findall(r"\b(\w+\.py)\b", line))
    return named


def test_the_readme_map_names_every_module_where_it_is() -> None:
    named = readme_map()
    assert set(named) == set(LAYERS)
    for layer in LAYERS:
        present = {p.name for p in (PACKAGE / layer).glob("*.py")}
        listed = named[layer]
        assert listed <= present, f"README names modules attnseq/{layer}/ lacks: {listed - present}"
        missing = present - listed - {"__init__.py"}
        assert not missing, f"README's map lacks attnseq/{layer}/: {sorted(missing)}"
