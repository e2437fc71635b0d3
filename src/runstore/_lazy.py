"""Names a package re-exports from its modules, each module imported on first use (PEP 562).

A package keeps its imports under ``if TYPE_CHECKING:`` for mypy and hands the same table of
names to :func:`lazy_exports`, whose two functions become the package's module-level
``__getattr__`` and ``__dir__`` (https://peps.python.org/pep-0562/). Importing the package
then costs nothing per domain; reading a name imports its module once and keeps the value
in the package's namespace, so later reads are plain attribute lookups.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Mapping

__all__ = ["lazy_exports"]


def lazy_exports(
    package: str, names_of: Mapping[str, tuple[str, ...]]
) -> tuple[Callable[[str], object], Callable[[], list[str]]]:
    """The ``__getattr__`` and ``__dir__`` of ``package`` for ``names_of``.

    ``names_of`` maps a module of ``package`` (``"test_runs"`` for
    ``package + ".test_runs"``) to the names it provides. ``__getattr__`` raises
    ``AttributeError`` for a name outside the table, as a module without it would.
    """
    module_of = {name: module for module, names in names_of.items() for name in names}

    def __getattr__(name: str) -> object:
        module = module_of.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(f"{package}.{module}"), name)
        setattr(sys.modules[package], name, value)
        return value

    def __dir__() -> list[str]:
        return sorted({*vars(sys.modules[package]), *module_of})

    return __getattr__, __dir__
