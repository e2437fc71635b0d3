"""Which database the CLI uses when neither ``--db`` nor ``RUNSTORE_DB`` names one.

The default database belongs to the project, not to the folder the command runs in: the
pytest plugin writes ``.runstore/runstore.db`` at pytest's rootdir, and the CLI finds it
from any folder below. As git looks for ``.git`` and pytest for its ini file, the search
starts in the current folder and walks up to the file-system root, and the nearest folder
holding ``.runstore/runstore.db`` wins. It does not go above the top of a git repository
(the nearest folder holding ``.git``, a directory or, in worktrees and submodules, a file),
since a database above that belongs to another project. With nothing found the default is
``.runstore/runstore.db`` in the current folder (where ``runstore db migrate`` creates it).

The project's settings (``[tool.runstore]`` of ``pyproject.toml``, ``runstore._config``)
are found the same way: the nearest ``pyproject.toml``, not above the top of a git
repository (:func:`configured`).
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

import attrs

from runstore.layers import DEFAULT_DB_PATH, find_project_database, shown_database

if TYPE_CHECKING:
    from runstore._config import RunstoreConfig
    from runstore.services.test_runs import FlakyPolicy

__all__ = [
    "DatabaseChoice",
    "choose_database",
    "configured",
    "configured_policy",
    "find_project_database",
]


@attrs.frozen
class DatabaseChoice:
    """The database a command uses (a file, or a ``postgresql://`` URL) and where the
    choice came from.

    ``source`` is ``"--db"`` (the option), ``"RUNSTORE_DB"`` (the environment), ``"found"``
    (walking up from the current folder) or ``"default"`` (nothing found: the current
    folder's ``.runstore/runstore.db``, which need not exist).
    """

    path: str
    source: str

    def describe(self) -> str:
        """One line naming the database (a URL without its password) and where the choice
        came from."""
        how = {
            "--db": "from --db",
            "RUNSTORE_DB": "from RUNSTORE_DB",
            "found": "found walking up from the current folder",
            "default": "none found walking up from the current folder",
        }[self.source]
        return f"{shown_database(self.path)} ({how})"


def choose_database(explicit: str | None, source: str) -> DatabaseChoice:
    """The database to use: ``explicit`` (from ``source``) when given, else the project's.

    ``explicit`` is the ``--db`` or ``RUNSTORE_DB`` value and ``source`` names which one
    (``"--db"`` or ``"RUNSTORE_DB"``); with None the current folder's search decides.
    """
    if explicit is not None:
        return DatabaseChoice(explicit, source)
    found = find_project_database(os.getcwd())
    if found is not None:
        return DatabaseChoice(found, "found")
    return DatabaseChoice(DEFAULT_DB_PATH, "default")


def configured() -> RunstoreConfig:
    """The settings of the nearest ``pyproject.toml`` walking up from the current folder
    (not above the top of a git repository, as the database is found; ``runstore._config``);
    a file runstore refuses is a usage error (exit 2) naming the file, key and reason."""
    import click
    from returns.result import Failure

    from runstore._config import find_config, read_config

    found = read_config(find_config(os.getcwd()))
    if isinstance(found, Failure):
        raise click.UsageError(str(found.failure()))
    return found.unwrap()


def configured_policy() -> FlakyPolicy:
    """The flaky policy of :func:`configured` (the defaults without a file)."""
    return configured().flaky
