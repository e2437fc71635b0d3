"""Opening a live database: connect, check, set the file up, migrate; close on any failure."""

from __future__ import annotations

import contextlib
import os
import re
from pathlib import Path

import apsw
from returns.result import Failure, Result, Success

from runstore.layers._sqlite_database import (
    ConnectionSettings,
    SqliteDatabase,
    _connect,
    _is_memory,
    _prepare_file,
)
from runstore.layers._sqlite_errors import from_apsw
from runstore.migrations import apply_migrations, migration_status
from runstore.services.errors import OpenError

__all__ = [
    "DEFAULT_DB_PATH",
    "GITIGNORE",
    "database_path_problem",
    "find_project_database",
    "make_database_folder",
    "open_database",
]

DEFAULT_DB_PATH = os.path.join(".runstore", "runstore.db")
"""A project's database, relative to the project's folder (pytest's rootdir)."""

GITIGNORE = "# Created by runstore automatically.\n*\n"
"""What a ``.runstore`` folder runstore creates gets as its ``.gitignore`` (as pytest does
for ``.pytest_cache``): the database is a local record, never something to commit."""

_OWN_FOLDER = os.path.dirname(DEFAULT_DB_PATH)


def find_project_database(start: str) -> str | None:
    """The absolute path of the nearest ``.runstore/runstore.db`` at or above ``start``.

    Walks up from ``start`` (a folder) to the file-system root, stopping after the first
    folder that holds ``.git``; None when no folder on the way holds the file. The CLI
    uses it to find the project's database; the pytest plugin to know whether the CLI
    will find the one it wrote.
    """
    here = os.path.abspath(start)
    while True:
        candidate = os.path.join(here, DEFAULT_DB_PATH)
        if os.path.isfile(candidate):
            return candidate
        parent = os.path.dirname(here)
        if parent == here or os.path.exists(os.path.join(here, ".git")):
            return None
        here = parent


_URL = re.compile(r"([A-Za-z][A-Za-z0-9+.-]*)://")


def database_path_problem(path: str) -> str | None:
    """Why ``path`` cannot name a database file, or None when it can.

    A blank or whitespace-only path is ``"the database path is blank"``; an existing
    directory is ``"<path> is a directory; give the database file"``. The CLI (``--db``,
    ``RUNSTORE_DB``) and the pytest plugin (``--runstore-db``, ``RUNSTORE_DB``) refuse such
    a path with this reason as a usage error. A URL (``scheme://...``) is refused naming
    its scheme only, never the rest (it may hold a password), instead of being taken as a
    file name.
    """
    if not path.strip():
        return "the database path is blank"
    url = _URL.match(path)
    if url:  # named by its scheme alone: the rest may hold a password
        return (f"{url.group(1)}:// URLs are not served; give the path of a SQLite "
                "database file")
    if os.path.isdir(path):
        return f"{path} is a directory; give the database file"
    return None


def make_database_folder(path: str | os.PathLike[str]) -> None:
    """Create the folder of the database file ``path`` when it is missing.

    A folder named ``.runstore`` that this call creates gets a ``.gitignore`` holding
    :data:`GITIGNORE`; a folder that exists already, or has another name, is left as it is.
    Never raises: when the folder cannot be made, opening the file reports why.
    """
    folder = Path(os.fspath(path)).parent
    if folder.exists():
        return
    try:
        folder.parent.mkdir(parents=True, exist_ok=True)
        folder.mkdir()
    except OSError:  # made by another process meanwhile, or not makeable: the open says
        return
    if folder.name == _OWN_FOLDER:
        with contextlib.suppress(OSError):
            (folder / ".gitignore").write_text(GITIGNORE, encoding="utf-8")


def open_database(
    path: str | os.PathLike[str], settings: ConnectionSettings | None = None
) -> Result[SqliteDatabase, OpenError]:
    """Open ``path`` (a file, created with its folder, or ``:memory:``) and migrate it.

    A missing folder is made by :func:`make_database_folder` (a new ``.runstore`` folder
    gets its ``.gitignore``).

    Steps: connect with the per-connection settings; read the migration journal and refuse
    a database this code cannot use; only then set the file up (``auto_vacuum`` when
    fresh, the WAL journal, which rewrites the file header) and apply the pending
    migrations, each in its own ``BEGIN IMMEDIATE`` unit.

    Returns the open database, or why it cannot be used: ``StorageFailure`` or ``Busy``
    from opening or migrating (e.g. ``not_a_database``, ``cant_open``), ``UnknownMigration``,
    ``MigrationDrift`` or ``HalfAppliedMigration`` from the check. On a refusal the file's
    bytes are exactly as they were found. On every failure, and when an exception escapes
    (a programmer error, re-raised), the connection is closed again.
    """
    settings = settings or ConnectionSettings()
    if not _is_memory(path):
        make_database_folder(path)
    connected = _connect(path, settings, read_only=False, prepare=False)
    if isinstance(connected, Failure):
        return connected
    db = SqliteDatabase(connected.unwrap(), settings, path=os.fspath(path))
    try:
        opened = _check_and_migrate(db, settings)
    except BaseException:
        db.close()
        raise
    if isinstance(opened, Failure):
        db.close()
        return opened
    return Success(db)


def _check_and_migrate(
    db: SqliteDatabase, settings: ConnectionSettings
) -> Result[None, OpenError]:
    status = migration_status(db)
    if isinstance(status, Failure):
        return status
    problems = status.unwrap().problems
    if problems:
        return Failure(problems[0])
    try:
        _prepare_file(db.connection, settings)
    except apsw.Error as exc:
        return Failure(from_apsw(exc, operation="open", waited_ms=settings.busy_timeout_ms))
    migrated = apply_migrations(db)
    if isinstance(migrated, Failure):
        return Failure(migrated.failure())
    return Success(None)
