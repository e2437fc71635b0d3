"""The ``runstore`` pytest plugin: record test runs with ``pytest --runstore``.

Loaded by pytest through the ``pytest11`` entry point. It only registers its options here;
everything else (the recorder, the database layer) is imported when recording is enabled,
so an installed but disabled plugin costs one module of option definitions.

Options:

- ``--runstore`` or the ini value ``runstore = true``: record this run.
- ``--runstore-db PATH``: the database file (default: ``$RUNSTORE_DB``, else
  ``.runstore/runstore.db`` under the directory pytest was invoked from, as the CLI).
- ``--runstore-project NAME``: the project the run belongs to (default: the ini value
  ``runstore_project``, else the name of pytest's rootdir).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import pytest

__all__ = ["pytest_addoption", "pytest_configure"]


def pytest_addoption(parser: pytest.Parser) -> None:
    """Register runstore's command-line options and ini values."""
    group = parser.getgroup("runstore", "record test runs into a runstore database")
    group.addoption(
        "--runstore",
        action="store_true",
        default=False,
        dest="runstore",
        help="record this run into the runstore database (ini: runstore = true).",
    )
    group.addoption(
        "--runstore-db",
        action="store",
        default=None,
        dest="runstore_db",
        metavar="PATH",
        help="runstore database file (default: $RUNSTORE_DB, else .runstore/runstore.db "
        "under the invocation directory).",
    )
    group.addoption(
        "--runstore-project",
        action="store",
        default=None,
        dest="runstore_project",
        metavar="NAME",
        help="project name for the recorded run (default: ini runstore_project, else the "
        "rootdir name).",
    )
    parser.addini("runstore", "record every run into the runstore database", type="bool",
                  default=False)
    parser.addini("runstore_project", "project name for recorded runs", default="")


def pytest_configure(config: pytest.Config) -> None:
    """Install the recorder when recording is enabled; do nothing otherwise."""
    if not (config.getoption("runstore", False) or config.getini("runstore")):
        return
    from runstore.recorder import install

    install(config)
