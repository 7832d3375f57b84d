"""The `attnseq` package's namespace (attnseq/__init__.py): `dir(attnseq)`, tab completion and
`from attnseq import *` give the public API of its `_API` table, `__version__` and the module's
dunder names, nothing it imports for itself (`importlib`, `typing`'s names) and no submodule;
and importing or listing it imports nothing heavy."""

import subprocess
import sys

import pytest

import attnseq

# the names of the API table; those of the "Python API" page of the documentation among them
PUBLIC = set(attnseq._API)
DOCUMENTED = {"load", "Model", "Translation", "plot_alignment", "train", "UserError"}


def printed_by_a_fresh_python(code: str) -> list[str]:
    """The lines `code` prints in a new Python process."""
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    return result.stdout.splitlines()


def _undunder(names: list[str]) -> set[str]:
    return {name for name in names if not (name.startswith("__") and name.endswith("__"))}


def test_dir_lists_the_api_and_version_only() -> None:
    names = dir(attnseq)
    assert names == sorted(names)
    assert _undunder(names) == PUBLIC
    assert {"__version__", "__doc__", "__name__", "__all__"} <= set(names)
    assert not {"Any", "TYPE_CHECKING", "importlib", "typing"} & set(names)


def test_dir_leaves_out_submodules_that_using_the_api_binds() -> None:
    assert attnseq.Model.__name__ == "Model"  # imports attnseq.api, which binds attnseq.api
    assert "api" in vars(attnseq)
    assert _undunder(dir(attnseq)) == PUBLIC


def test_all_is_the_api_table_and_every_name_resolves() -> None:
    assert DOCUMENTED <= PUBLIC
    assert set(attnseq.__all__) == PUBLIC | {"__version__"}
    for name in attnseq.__all__:
        assert getattr(attnseq, name) is not None, name
    assert attnseq.UserError.__module__ == "attnseq.errors"


def test_star_import_gives_the_api_and_nothing_else() -> None:
    namespace: dict[str, object] = {}
    exec("from attnseq import *", namespace)
    assert set(namespace) - {"__builtins__"} == PUBLIC | {"__version__"}
    assert namespace["load"] is attnseq.load


def test_listing_a_fresh_package_imports_nothing_heavy() -> None:
    code = (
        "import sys, attnseq; names = dir(attnseq); "
        "print([m for m in ('torch', 'hydra', 'matplotlib') if m in sys.modules]); "
        "print(sorted(n for n in names if not n.startswith('__')))"
    )
    loaded, names = printed_by_a_fresh_python(code)
    assert loaded == "[]"
    assert eval(names) == sorted(PUBLIC)


def test_importing_attnseq_imports_neither_torch_nor_hydra() -> None:
    code = (
        "import sys, attnseq; heavy = ('torch', 'hydra', 'omegaconf', 'typer', 'matplotlib'); "
        "print([name for name in heavy if name in sys.modules]); print(attnseq.__all__)"
    )
    loaded, names = printed_by_a_fresh_python(code)
    assert loaded == "[]"
    assert {"load", "train", "plot_alignment", "Model"} <= set(eval(names))
    with pytest.raises(AttributeError, match="no attribute 'nonexistent'"):
        attnseq.nonexistent  # noqa: B018
