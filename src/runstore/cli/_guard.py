"""The check every reading command makes before it opens the database for real.

Opening through the layers migrates the file, so a command that only reads must first make
sure the file already is a runstore database: it exists, is not empty and holds the
migration journal. The check opens the file read-only and changes nothing about it.
"""

from __future__ import annotations

import os

from returns.result import Failure, Success

from runstore.cli._output import fail
from runstore.layers import SqliteDatabase
from runstore.migrations import JOURNAL_TABLE
from runstore.services.errors import StorageFailure, StorageFailureKind

__all__ = ["cannot_open_reason", "require_runstore_database"]


def cannot_open_reason(path: str, failure: object) -> str:
    """The one-line reason ``path`` could not be opened, with a hint for an unwritable folder.

    SQLite in WAL mode needs to create ``PATH-shm`` and ``PATH-wal`` beside the file even to
    read it, so an existing file that cannot be opened usually sits in a read-only folder.
    """
    reason = f"cannot open {path}: {failure}"
    if (
        isinstance(failure, StorageFailure)
        and failure.kind is StorageFailureKind.CANT_OPEN
        and os.path.isfile(path)
    ):
        reason += f" (the folder of {path} must be writable: SQLite WAL needs it)"
    return reason


def _no_database(path: str, output_format: str) -> None:
    fail(
        f"no runstore database at {path} (record a run with `pytest --runstore` "
        "or run `runstore db migrate`)",
        output_format=output_format,
    )


def require_runstore_database(path: str, output_format: str) -> None:
    """End the command (exit 1) unless ``path`` is an existing runstore database.

    Refused, with the file left untouched (bytes and mode): a missing or empty file, a
    file that cannot be read as SQLite, and a SQLite file without the ``runstore_migrations``
    journal. ``:memory:`` passes (there is nothing to protect).
    """
    if path == ":memory:":
        return
    if not os.path.isfile(path) or os.path.getsize(path) == 0:
        _no_database(path, output_format)
    opened = SqliteDatabase.open_read_only(path)
    if isinstance(opened, Failure):
        fail(cannot_open_reason(path, opened.failure()), output_format=output_format)
    database = opened.unwrap()
    try:
        found = database.read(
            "find the migration journal",
            lambda: Success(
                database.scalar(
                    "SELECT count(*) FROM sqlite_schema WHERE type = 'table' AND name = ?",
                    (JOURNAL_TABLE,),
                )
            ),
        )
    finally:
        database.close()
    if isinstance(found, Failure):
        fail(f"cannot open {path}: {found.failure()}", output_format=output_format)
    if not found.unwrap():
        _no_database(path, output_format)
