"""The packages that re-export names lazily: importing one loads none of its modules, and its
table of names agrees with ``__all__`` and with the imports mypy reads."""

from __future__ import annotations

import ast
import importlib
import inspect
import subprocess
import sys

import pytest

LAZY = ["runstore.services", "runstore.testing"]


def _type_checking_imports(package: str) -> dict[str, tuple[str, ...]]:
    """What the package's ``if TYPE_CHECKING:`` block imports: module (relative) -> names."""
    tree = ast.parse(inspect.getsource(importlib.import_module(package)))
    found: dict[str, tuple[str, ...]] = {}
    for node in tree.body:
        if isinstance(node, ast.If) and ast.unparse(node.test) == "TYPE_CHECKING":
            for child in node.body:
                assert isinstance(child, ast.ImportFrom), ast.unparse(child)
                module = (child.module or "").removeprefix(package + ".")
                found[module] = tuple(alias.name for alias in child.names)
    return found


@pytest.mark.parametrize("package", LAZY)
def test_the_table_lists_all_and_what_mypy_reads(package: str) -> None:
    module = importlib.import_module(package)
    table: dict[str, tuple[str, ...]] = module._NAMES_OF
    listed = [name for names in table.values() for name in names]
    assert sorted(listed) == sorted(module.__all__)
    assert _type_checking_imports(package) == table


@pytest.mark.parametrize("package", LAZY)
def test_importing_the_package_loads_none_of_its_modules(package: str) -> None:
    probe = (
        "import sys\n"
        f"import {package}\n"
        f"print(sorted(m for m in sys.modules if m.startswith('{package}.')))\n"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                          check=True, timeout=60)
    assert done.stdout.strip() == "[]"


def test_reading_a_name_loads_only_its_module() -> None:
    probe = (
        "import sys\n"
        "from runstore.services import DataReader\n"
        "print(sorted(m for m in sys.modules if m.startswith('runstore.services.')))\n"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                          check=True, timeout=60)
    loaded = set(eval(done.stdout))  # a printed list of module names
    assert "runstore.services.test_runs" in loaded
    assert not loaded & {
        "runstore.services.agents", "runstore.services.sessions",
        "runstore.services.ledger",
    }


@pytest.mark.parametrize("package", LAZY)
def test_an_unknown_name_is_an_attribute_error(package: str) -> None:
    module = importlib.import_module(package)
    name = "NoSuchName"
    with pytest.raises(AttributeError, match=f"{package!r} has no attribute {name!r}"):
        getattr(module, name)
    assert not hasattr(module, name)
