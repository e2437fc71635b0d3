"""Opening a live database: connect, configure, migrate; close again on any failure."""

from __future__ import annotations

import os

from returns.result import Failure, Result, Success

from runstore.layers._sqlite_database import ConnectionSettings, SqliteDatabase
from runstore.migrations import apply_migrations
from runstore.services.errors import OpenError

__all__ = ["open_database"]


def open_database(
    path: str | os.PathLike[str], settings: ConnectionSettings | None = None
) -> Result[SqliteDatabase, OpenError]:
    """Open ``path`` (a file, created with its folder, or ``:memory:``) and apply pending migrations.

    Returns the open database, or the reason it could not be used: ``StorageFailure`` or
    ``Busy`` from opening, ``UnknownMigration``, ``MigrationDrift`` or
    ``HalfAppliedMigration`` from the migration check. On failure the connection is closed
    and the file is left as it was found.
    """
    opened = SqliteDatabase.open(path, settings)
    if isinstance(opened, Failure):
        return opened
    db = opened.unwrap()
    migrated = apply_migrations(db)
    if isinstance(migrated, Failure):
        db.close()
        return Failure(migrated.failure())
    return Success(db)
