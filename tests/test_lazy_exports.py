"""The packages that re-export names lazily: importing one loads none of its lazy modules, and
its table of names agrees with ``__all__`` and with the imports mypy reads."""

from __future__ import annotations

import ast
import importlib
import inspect
import json
import subprocess
import sys

import pytest

LAZY = [
    "runstore.services", "runstore.testing", "runstore.layers", "runstore.recorder", "runstore.aio"
]


def _type_checking_imports(package: str) -> dict[str, tuple[str, ...]]:
    """What the package's ``if TYPE_CHECKING:`` block imports from the package's own modules:
    module (relative) -> names."""
    tree = ast.parse(inspect.getsource(importlib.import_module(package)))
    found: dict[str, tuple[str, ...]] = {}
    for node in tree.body:
        if isinstance(node, ast.If) and ast.unparse(node.test) == "TYPE_CHECKING":
            for child in node.body:
                assert isinstance(child, ast.Import | ast.ImportFrom), ast.unparse(child)
                source = child.module if isinstance(child, ast.ImportFrom) else None
                if source is not None and source.startswith(package + "."):
                    module = source.removeprefix(package + ".")
                    found[module] = tuple(alias.name for alias in child.names)
    return found


@pytest.mark.parametrize("package", LAZY)
def test_the_table_lists_all_and_what_mypy_reads(package: str) -> None:
    module = importlib.import_module(package)
    table: dict[str, tuple[str, ...]] = module._NAMES_OF
    listed = [name for names in table.values() for name in names]
    assert len(listed) == len(set(listed)), "a name is listed twice"
    assert set(listed) <= set(module.__all__)
    assert _type_checking_imports(package) == table
    # Every other name of __all__ is the package's own, there without a lookup.
    probe = (
        "import json, sys\n"
        f"import {package} as package\n"
        "print(json.dumps(sorted(vars(package))))\n"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                          check=True, timeout=60)
    eager = set(json.loads(done.stdout))
    assert set(module.__all__) - set(listed) <= eager
    assert eager.isdisjoint(listed)


@pytest.mark.parametrize("package", LAZY)
def test_importing_the_package_loads_none_of_its_modules(package: str) -> None:
    probe = (
        "import sys\n"
        f"import {package}\n"
        f"print(sorted(m for m in sys.modules if m.startswith('{package}.')))\n"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                          check=True, timeout=60)
    lazy = {f"{package}.{module}" for module in importlib.import_module(package)._NAMES_OF}
    assert set(eval(done.stdout)) & lazy == set()  # a printed list of module names


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
