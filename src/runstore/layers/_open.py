"""Opening a live database: connect, check, set the file up, migrate; close on any failure."""

from __future__ import annotations

import os

import apsw
from returns.result import Failure, Result, Success

from runstore.layers._sqlite_database import (
    ConnectionSettings,
    SqliteDatabase,
    _connect,
    _prepare_file,
)
from runstore.layers._sqlite_errors import from_apsw
from runstore.migrations import apply_migrations, migration_status
from runstore.services.errors import OpenError

__all__ = ["open_database"]


def open_database(
    path: str | os.PathLike[str], settings: ConnectionSettings | None = None
) -> Result[SqliteDatabase, OpenError]:
    """Open ``path`` (a file, created with its folder, or ``:memory:``) and migrate it.

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
    connection = db.connection
    # A brand-new file holds nothing to lose, so it is set up and migrated without fsyncs
    # (8 of the 10 a fresh open and close cost): a power loss meanwhile can at worst spoil
    # that empty file. The configured durability holds again before anything else is written.
    fresh = (
        not status.unwrap().applied
        and not connection.execute("SELECT 1 FROM sqlite_schema LIMIT 1").fetchall()
    )
    try:
        if fresh:
            connection.pragma("synchronous", "OFF")
        _prepare_file(connection, settings)
        migrated = apply_migrations(db)
    except apsw.Error as exc:
        return Failure(from_apsw(exc, operation="open", waited_ms=settings.busy_timeout_ms))
    finally:
        if fresh:
            connection.pragma("synchronous", settings.synchronous.upper())
    if isinstance(migrated, Failure):
        return Failure(migrated.failure())
    return Success(None)
