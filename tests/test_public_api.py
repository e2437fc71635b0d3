"""Each public package's ``__all__`` names exactly its public API.

A name belongs in ``__all__`` when the package defines it at top level without a leading
underscore, or re-exports it from one of its own modules
(``from runstore.layers._x import Name`` in ``runstore/layers/__init__.py``). Imports from
elsewhere (``returns``, ``os``, another runstore package) are the package's own tools and
stay out unless listed on purpose. Every listed name must exist, be listed once and not
be a module.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import types

import pytest

PACKAGES = [
    "runstore",
    "runstore.services",
    "runstore.layers",
    "runstore.testing",
    "runstore.migrations",
    "runstore.exceptions",
    "runstore.cli",
    "runstore.aio",
]


def _is_public(name: str) -> bool:
    return not name.startswith("_")


def _targets(node: ast.expr) -> list[str]:
    if isinstance(node, ast.Name):
        return [node.id]
    if isinstance(node, ast.Tuple | ast.List):
        return [name for element in node.elts for name in _targets(element)]
    return []


def public_names_in(source: str, package: str) -> set[str]:
    """Names a package's ``source`` defines or re-exports from the package's own modules."""
    names: set[str] = set()
    for node in ast.parse(source).body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Assign):
            for target in node.targets:
                names.update(_targets(target))
        elif isinstance(node, ast.AnnAssign | ast.AugAssign):
            names.update(_targets(node.target))
        elif isinstance(node, ast.ImportFrom) and (
            node.level > 0 or (node.module or "").startswith(package + ".")
        ):
            names.update(alias.asname or alias.name for alias in node.names)
    return {name for name in names if _is_public(name)}


def public_names(package: str) -> set[str]:
    """Names ``package`` defines or re-exports from its own modules, read from its source."""
    return public_names_in(inspect.getsource(importlib.import_module(package)), package)


@pytest.mark.parametrize("package", PACKAGES)
def test_all_matches_the_public_names(package: str) -> None:
    module = importlib.import_module(package)
    listed = list(module.__all__)

    assert len(listed) == len(set(listed)), "a name is listed twice"
    missing = public_names(package) - set(listed)
    assert missing == set(), f"public in {package} but not in __all__"
    for name in listed:
        assert hasattr(module, name), f"{package}.__all__ lists {name!r}, which does not exist"
        assert not isinstance(getattr(module, name), types.ModuleType), name
        assert _is_public(name) or (name.startswith("__") and name.endswith("__")), name


@pytest.mark.parametrize("package", PACKAGES)
def test_star_import_gives_exactly_all(package: str) -> None:
    namespace: dict[str, object] = {}
    exec(f"from {package} import *", namespace)  # the point of the test
    namespace.pop("__builtins__", None)
    assert set(namespace) == set(importlib.import_module(package).__all__)


def test_the_rule_catches_an_unlisted_name() -> None:
    """The checker itself: what it counts as public, and what it leaves out."""
    source = (
        "import os\n"
        "from returns.result import Success\n"
        "from runstore.exceptions import RunstoreError\n"
        "from runstore.layers._x import A, B as C\n"
        "from ._y import D\n"
        "E = 1\n"
        "F: int = 2\n"
        "_g = 3\n"
        "def h() -> None: ...\n"
        "class I: ...\n"
        "__all__ = ['A']\n"
    )
    assert public_names_in(source, "runstore.layers") == {"A", "C", "D", "E", "F", "h", "I"}
