"""Numbered schema migrations and the runner that applies them.

Migrations are the files ``NNNN_<slug>.sql`` shipped in this package, applied in id order.
The journal table ``runstore_migrations`` records each one's id, name, sha256 checksum, the
time it was applied (epoch ms) and whether it finished. Released migrations are never edited:
a changed file is refused as drift.

Each pending migration is applied in its own ``BEGIN IMMEDIATE`` transaction that first
re-reads the journal, so two processes opening an old database at once both succeed and
every migration is applied exactly once. Before anything is applied the whole database is
checked; a database with a migration this code does not know, a checksum that differs, or a
half-applied migration is refused with a typed error and left as it is.
"""

from __future__ import annotations

import functools
import hashlib
import re
import time
from collections.abc import Callable
from importlib import resources
from typing import TYPE_CHECKING

import attrs
from returns.result import Failure, Result, Success

from runstore.services.errors import (
    Busy,
    HalfAppliedMigration,
    MigrationDrift,
    MigrationError,
    StorageFailure,
    UnknownMigration,
)

if TYPE_CHECKING:  # the layers import this package; only the type is needed here
    from runstore.layers._sqlite_database import SqliteDatabase

__all__ = [
    "JOURNAL_TABLE",
    "AppliedMigration",
    "Migration",
    "MigrationStatus",
    "apply_migrations",
    "migration_status",
    "shipped_migrations",
]

JOURNAL_TABLE = "runstore_migrations"

_FILE_NAME = re.compile(r"^(\d{4})_([a-z0-9_]+)\.sql$")
_CREATES = re.compile(
    r"\bCREATE\s+(?:UNIQUE\s+|VIRTUAL\s+)?(?:TABLE|INDEX|TRIGGER|VIEW)\s+"
    r"(?:IF\s+NOT\s+EXISTS\s+)?[\"`\[]?(\w+)",
    re.IGNORECASE,
)


@attrs.frozen
class Migration:
    """One shipped migration: ``id`` (its number), ``name`` (the slug), its SQL and sha256."""

    id: int
    name: str
    sql: str = attrs.field(repr=False)
    checksum: str

    @property
    def creates(self) -> tuple[str, ...]:
        """Names of the tables, indexes, triggers and views this migration creates."""
        return _created_names(self.sql)


@functools.lru_cache(maxsize=64)
def _created_names(sql: str) -> tuple[str, ...]:
    """The names a migration script creates (scanned once per script and process)."""
    return tuple(_CREATES.findall(sql))


@attrs.frozen
class AppliedMigration:
    """One journal row: ``applied_at_ms`` is epoch ms UTC; ``finished`` is False only for a
    migration that did not complete."""

    id: int
    name: str
    checksum: str
    applied_at_ms: int
    finished: bool


@attrs.frozen
class MigrationStatus:
    """What the journal of one database says against the shipped migrations.

    ``applied`` are the journal rows in id order, ``pending`` the ids still to apply,
    ``problems`` every reason the database would be refused (empty when it is healthy).
    """

    applied: tuple[AppliedMigration, ...]
    pending: tuple[int, ...]
    problems: tuple[MigrationError, ...]

    @property
    def healthy(self) -> bool:
        """Whether nothing would be refused (pending migrations are not a problem)."""
        return not self.problems


def shipped_migrations() -> tuple[Migration, ...]:
    """Return every migration shipped in this package, in id order.

    The files are read once per process: they are package data, and opening a database
    consults them several times (each migration re-checks the journal under its lock).

    Raises ``ValueError`` for a misnamed file or a duplicate id (a packaging bug).
    """
    return _read_shipped()


@functools.cache
def _read_shipped() -> tuple[Migration, ...]:
    found: dict[int, Migration] = {}
    for entry in resources.files(__name__).iterdir():
        if not entry.name.endswith(".sql"):
            continue
        match = _FILE_NAME.match(entry.name)
        if match is None:
            raise ValueError(f"migration file {entry.name!r} is not named NNNN_slug.sql")
        number = int(match.group(1))
        if number in found:
            raise ValueError(f"two migration files share id {number:04d}")
        sql = entry.read_text(encoding="utf-8")
        found[number] = Migration(
            id=number,
            name=match.group(2),
            sql=sql,
            checksum=hashlib.sha256(sql.encode("utf-8")).hexdigest(),
        )
    return tuple(found[number] for number in sorted(found))


def _journal_exists(db: SqliteDatabase) -> bool:
    found = db.scalar(
        "SELECT count(*) FROM sqlite_schema WHERE type = 'table' AND name = ?", (JOURNAL_TABLE,)
    )
    return bool(found == 1)


def _read_journal(db: SqliteDatabase) -> tuple[AppliedMigration, ...]:
    if not _journal_exists(db):
        return ()
    rows = db.execute(
        f"SELECT id, name, checksum, applied_at_ms, finished FROM {JOURNAL_TABLE} ORDER BY id"
    )
    return tuple(
        AppliedMigration(
            id=r[0], name=r[1], checksum=r[2], applied_at_ms=r[3], finished=bool(r[4])
        )
        for r in rows
    )


def _problems(
    db: SqliteDatabase,
    applied: tuple[AppliedMigration, ...],
    shipped: tuple[Migration, ...],
) -> tuple[MigrationError, ...]:
    by_id = {m.id: m for m in shipped}
    problems: list[MigrationError] = []
    unknown = tuple(a.id for a in applied if a.id not in by_id)
    if unknown:
        problems.append(UnknownMigration(ids=unknown))
    for row in applied:
        migration = by_id.get(row.id)
        if migration is None:
            continue
        if not row.finished:
            problems.append(
                HalfAppliedMigration(
                    id=row.id, name=row.name, detail="journal row never marked finished"
                )
            )
        elif row.checksum != migration.checksum:
            problems.append(
                MigrationDrift(
                    id=row.id, name=row.name, expected=migration.checksum, actual=row.checksum
                )
            )
    journalled = {a.id for a in applied}
    existing = {
        r[0].lower()
        for r in db.execute("SELECT name FROM sqlite_schema WHERE name NOT LIKE 'sqlite_%'")
    }
    for migration in shipped:
        if migration.id in journalled:
            continue
        present = sorted(n for n in migration.creates if n.lower() in existing)
        if present:
            problems.append(
                HalfAppliedMigration(
                    id=migration.id,
                    name=migration.name,
                    detail="not in the journal, yet these objects exist: " + ", ".join(present),
                )
            )
    return tuple(problems)


def migration_status(db: SqliteDatabase) -> Result[MigrationStatus, StorageFailure | Busy]:
    """Read the migration status of ``db`` without writing anything.

    Returns ``StorageFailure`` or ``Busy`` when the database cannot be read.
    """
    shipped = shipped_migrations()

    def read() -> Result[MigrationStatus, StorageFailure | Busy]:
        applied = _read_journal(db)
        done = {a.id for a in applied}
        return Success(
            MigrationStatus(
                applied=applied,
                pending=tuple(m.id for m in shipped if m.id not in done),
                problems=_problems(db, applied, shipped),
            )
        )

    return db.read("migration status", read)


def apply_migrations(
    db: SqliteDatabase, *, up_to: int | None = None
) -> Result[tuple[int, ...], MigrationError | StorageFailure | Busy]:
    """Apply every pending migration to ``db``, each in its own ``BEGIN IMMEDIATE`` unit.

    ``up_to`` stops after that migration id (for making fixture databases of older
    schemas); None applies all. Returns the ids this call applied, in order (empty when
    another process applied them first or nothing was pending). Refuses, before writing
    anything, with ``UnknownMigration``, ``MigrationDrift`` or ``HalfAppliedMigration``
    (the first problem found); each unit re-reads the journal under the write lock and
    refuses the same way if another process changed it meanwhile. A failing migration
    script returns ``StorageFailure`` and leaves no trace of itself (its unit rolls back,
    journal row included); ``Busy`` when the write lock stays taken past the budget.
    """
    status = migration_status(db)
    if isinstance(status, Failure):
        return status
    current = status.unwrap()
    if current.problems:
        return Failure(current.problems[0])
    shipped = {m.id: m for m in shipped_migrations()}
    applied_now: list[int] = []
    for number in current.pending:
        if up_to is not None and number > up_to:
            break
        migration = shipped[number]
        outcome = db.transact(
            f"apply migration {number:04d}", _applier(db, migration)
        )
        if isinstance(outcome, Failure):
            return outcome
        if outcome.unwrap():
            applied_now.append(number)
    return Success(tuple(applied_now))


def _applier(
    db: SqliteDatabase, migration: Migration
) -> Callable[[], Result[bool, MigrationError]]:
    return lambda: _apply_one(db, migration)


def _apply_one(db: SqliteDatabase, migration: Migration) -> Result[bool, MigrationError]:
    db.execute(
        f"CREATE TABLE IF NOT EXISTS {JOURNAL_TABLE} ("
        " id INTEGER PRIMARY KEY,"
        " name TEXT NOT NULL,"
        " checksum TEXT NOT NULL,"
        " applied_at_ms INTEGER NOT NULL,"
        " finished INTEGER NOT NULL DEFAULT 0 CHECK (finished IN (0, 1))"
        ") STRICT"
    )
    # Re-check under the write lock: another process may have applied it meanwhile.
    applied = _read_journal(db)
    problems = _problems(db, applied, shipped_migrations())
    if problems:
        return Failure(problems[0])
    if any(a.id == migration.id for a in applied):
        return Success(False)
    db.execute(
        f"INSERT INTO {JOURNAL_TABLE} (id, name, checksum, applied_at_ms, finished)"
        " VALUES (?, ?, ?, ?, 0)",
        (migration.id, migration.name, migration.checksum, int(time.time() * 1000)),
    )
    db.execute(migration.sql)
    db.execute(f"UPDATE {JOURNAL_TABLE} SET finished = 1 WHERE id = ?", (migration.id,))
    return Success(True)
