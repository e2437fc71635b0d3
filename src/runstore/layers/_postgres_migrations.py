"""Migrations on PostgreSQL: the files of ``runstore/migrations/postgresql`` (the same ids and
names as SQLite's, translated), the same journal table with checksums, and the same refusal
rules (:func:`runstore.migrations.journal_problems` and
:func:`~runstore.migrations.journal_readiness`).

Each pending migration runs in its own transaction that first takes
``pg_advisory_xact_lock(MIGRATION_LOCK)`` and re-reads the journal under it, so processes
opening an old database at once apply every migration exactly once; a database with an
unknown, edited or half-applied migration is refused before anything is written.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from returns.result import Failure, Result, Success

from runstore.layers._postgres_database import PostgresDatabase
from runstore.migrations import (
    JOURNAL_TABLE,
    POSTGRESQL_FOLDER,
    Migration,
    MigrationStatus,
    journal_problems,
    journal_readiness,
    shipped_ids,
    shipped_migrations,
)
from runstore.services.errors import (
    Busy,
    MigrationError,
    NotARunstoreDatabase,
    StorageFailure,
)
from runstore.services.health import AppliedMigration, ReadinessError

__all__ = [
    "MIGRATION_LOCK",
    "apply_migrations",
    "foreign_database",
    "foreign_tables",
    "migration_status",
    "readiness",
]

MIGRATION_LOCK = 0x72756E73746F7265
"""The advisory lock key migrations hold (the bytes of ``runstore`` as a bigint)."""

_EXISTING = (
    "SELECT lower(c.relname) FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace"
    " WHERE n.nspname = current_schema() AND c.relkind IN ('r', 'i', 'v', 'p', 'm')"
    " UNION SELECT lower(t.tgname) FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid"
    " JOIN pg_namespace n ON n.oid = c.relnamespace"
    " WHERE n.nspname = current_schema() AND NOT t.tgisinternal"
)
"""The names of the tables, indexes, views and triggers of the current schema."""


def _journal_exists(db: PostgresDatabase) -> bool:
    return bool(
        db.scalar(
            "SELECT EXISTS (SELECT 1 FROM pg_class c JOIN pg_namespace n"
            " ON n.oid = c.relnamespace WHERE n.nspname = current_schema()"
            " AND c.relname = %s AND c.relkind IN ('r', 'p'))",
            (JOURNAL_TABLE,),
        )
    )


def _read_journal(db: PostgresDatabase) -> tuple[AppliedMigration, ...]:
    if not _journal_exists(db):
        return ()
    rows = db.execute(
        f"SELECT id, name, checksum, applied_at_ms, finished FROM {JOURNAL_TABLE} ORDER BY id"
    )
    return tuple(
        AppliedMigration(id=r[0], name=r[1], checksum=r[2], applied_at_ms=r[3], finished=bool(r[4]))
        for r in rows
    )


def _status(db: PostgresDatabase) -> MigrationStatus:
    shipped = shipped_migrations(POSTGRESQL_FOLDER)
    applied = _read_journal(db)
    existing = {row[0] for row in db.execute(_EXISTING)}
    done = {a.id for a in applied}
    return MigrationStatus(
        applied=applied,
        pending=tuple(m.id for m in shipped if m.id not in done),
        problems=journal_problems(applied, shipped, existing),
    )


def migration_status(db: PostgresDatabase) -> Result[MigrationStatus, StorageFailure | Busy]:
    """The journal of ``db`` against the shipped PostgreSQL migrations, read in one
    snapshot; ``StorageFailure`` or ``Busy`` when it cannot be read."""
    return db.read("migration status", lambda: Success(_status(db)))


def foreign_tables(db: PostgresDatabase) -> tuple[str, ...]:
    """The tables and views of the current schema when it holds no journal (another
    program's), sorted; empty when it has the journal or nothing at all."""
    if _journal_exists(db):
        return ()
    rows = db.execute(
        "SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace"
        " WHERE n.nspname = current_schema() AND c.relkind IN ('r', 'v', 'p', 'm')"
        " ORDER BY c.relname"
    )
    return tuple(row[0] for row in rows)


def foreign_database(db: PostgresDatabase) -> NotARunstoreDatabase | None:
    """The refusal of ``db`` when its schema holds no journal but another program's tables
    or views (named, at most five in the text, all in ``tables``); None when it has the
    journal or holds nothing. Call it inside a read or a unit of work."""
    tables = foreign_tables(db)
    if not tables:
        return None
    shown = ", ".join(tables[:5]) + (", ..." if len(tables) > 5 else "")
    return NotARunstoreDatabase(
        db.shown,
        f"its schema holds another program's tables ({shown}) and no {JOURNAL_TABLE} "
        "journal; runstore adds its schema only to an empty one",
        tables,
    )


def readiness(db: PostgresDatabase) -> Result[None, ReadinessError]:
    """Whether this code can read ``db`` as it is, from its journal alone: the failures of
    :meth:`runstore.services.DatabaseHealth.readiness`, in its order."""

    def read() -> Result[None, ReadinessError]:
        if not _journal_exists(db):
            foreign = foreign_database(db)
            detail = f"it holds no {JOURNAL_TABLE} journal"
            return Failure(foreign or NotARunstoreDatabase(db.shown, detail))
        return journal_readiness(_read_journal(db), shipped_ids(POSTGRESQL_FOLDER))

    return db.read("database readiness", read)


def apply_migrations(
    db: PostgresDatabase, *, up_to: int | None = None
) -> Result[tuple[int, ...], MigrationError | StorageFailure | Busy]:
    """Apply every pending migration to ``db``, each in its own transaction under the
    advisory lock; ``up_to`` stops after that id. Returns the ids this call applied (empty
    when another process applied them first). Refusals and failures are those of
    :func:`runstore.migrations.apply_migrations`; a failing script leaves no trace (its
    transaction rolls back, journal row included).
    """
    status = migration_status(db)
    if isinstance(status, Failure):
        return status
    current = status.unwrap()
    if current.problems:
        return Failure(current.problems[0])
    shipped = {m.id: m for m in shipped_migrations(POSTGRESQL_FOLDER)}
    applied_now: list[int] = []
    for number in current.pending:
        if up_to is not None and number > up_to:
            break
        outcome = db.transact(f"apply migration {number:04d}", _applier(db, shipped[number]))
        if isinstance(outcome, Failure):
            return outcome
        if outcome.unwrap():
            applied_now.append(number)
    return Success(tuple(applied_now))


def _applier(
    db: PostgresDatabase, migration: Migration
) -> Callable[[], Result[bool, MigrationError]]:
    return lambda: _apply_one(db, migration)


def _apply_one(db: PostgresDatabase, migration: Migration) -> Result[bool, MigrationError]:
    db.execute("SELECT pg_advisory_xact_lock(%s)", (MIGRATION_LOCK,))
    db.execute(
        f"CREATE TABLE IF NOT EXISTS {JOURNAL_TABLE} ("
        " id BIGINT PRIMARY KEY,"
        ' name TEXT COLLATE "C" NOT NULL,'
        ' checksum TEXT COLLATE "C" NOT NULL,'
        " applied_at_ms BIGINT NOT NULL,"
        " finished SMALLINT NOT NULL DEFAULT 0 CHECK (finished IN (0, 1)))"
    )
    # Re-check under the lock: another process may have applied it meanwhile.
    current = _status(db)
    if current.problems:
        return Failure(current.problems[0])
    if any(a.id == migration.id for a in current.applied):
        return Success(False)
    db.execute(
        f"INSERT INTO {JOURNAL_TABLE} (id, name, checksum, applied_at_ms, finished)"
        " VALUES (%s, %s, %s, %s, 0)",
        (migration.id, migration.name, migration.checksum, int(time.time() * 1000)),
    )
    db.execute(migration.sql)
    db.execute(f"UPDATE {JOURNAL_TABLE} SET finished = 1 WHERE id = %s", (migration.id,))
    return Success(True)
