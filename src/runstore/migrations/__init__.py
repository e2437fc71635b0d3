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
import os
import re
import time
from collections.abc import Callable
from collections.abc import Set as AbstractSet
from typing import TYPE_CHECKING

import attrs
from returns.result import Failure, Result, Success

from runstore.services.errors import (
    Busy,
    HalfAppliedMigration,
    MigrationDrift,
    MigrationError,
    NotARunstoreDatabase,
    PendingMigrations,
    StorageFailure,
    UnknownMigration,
)
from runstore.services.health import AppliedMigration, MigrationStatus, ReadinessError

if TYPE_CHECKING:  # the layers import this package; only the type is needed here
    from runstore.layers._sqlite_database import SqliteDatabase

__all__ = [
    "JOURNAL_TABLE",
    "POSTGRESQL_FOLDER",
    "AppliedMigration",
    "Migration",
    "MigrationStatus",
    "apply_migrations",
    "foreign_database",
    "journal_problems",
    "journal_readiness",
    "migration_status",
    "readiness",
    "shipped_ids",
    "shipped_migrations",
]

JOURNAL_TABLE = "runstore_migrations"

_FOLDER = os.path.dirname(__file__)
"""Where the migration files are: package data installed beside this module (the wheel and
an editable install both keep the package as plain files, so they are listed and read with
``os`` rather than ``importlib.resources``, whose import a reading command would pay)."""

POSTGRESQL_FOLDER = os.path.join(_FOLDER, "postgresql")
"""The same migrations for PostgreSQL: the same ids and names, translated (the journal and
the refusal rules here are shared; :mod:`runstore.layers._postgres_migrations` runs them)."""

_FILE_NAME = re.compile(r"^(\d{4})_([a-z0-9_]+)\.sql$")
_CREATES = (
    r"\bCREATE\s+(?:UNIQUE\s+|VIRTUAL\s+)?(?:TABLE|INDEX|TRIGGER|VIEW)\s+"
    r"(?:IF\s+NOT\s+EXISTS\s+)?[\"`\[]?(\w+)"
)
"""What a migration creates (compiled on first use: a reader never scans a migration)."""


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
    return tuple(re.findall(_CREATES, sql, re.IGNORECASE))


def shipped_migrations(folder: str = _FOLDER) -> tuple[Migration, ...]:
    """Return every migration shipped in this package, in id order.

    ``folder`` is SQLite's by default, or :data:`POSTGRESQL_FOLDER`. The files are read
    once per process: they are package data, and opening a database consults them several
    times (each migration re-checks the journal under its lock).

    Raises ``ValueError`` for a misnamed file or a duplicate id (a packaging bug).
    """
    return _read_shipped(folder)


def shipped_ids(folder: str = _FOLDER) -> tuple[int, ...]:
    """Return the ids of the shipped migrations, in order, from their file names alone.

    Cheaper than :func:`shipped_migrations`: no file is read, so code that only checks
    whether a database is current (:func:`readiness`) pays for a folder listing only.

    Raises ``ValueError`` like :func:`shipped_migrations`.
    """
    return tuple(_shipped_names(folder))


@functools.cache
def _shipped_names(folder: str = _FOLDER) -> dict[int, str]:
    """Id -> file name of every shipped migration, in id order (the folder is listed once)."""
    found: dict[int, str] = {}
    for name in os.listdir(folder):
        if not name.endswith(".sql"):
            continue
        match = _FILE_NAME.match(name)
        if match is None:
            raise ValueError(f"migration file {name!r} is not named NNNN_slug.sql")
        number = int(match.group(1))
        if number in found:
            raise ValueError(f"two migration files share id {number:04d}")
        found[number] = name
    return {number: found[number] for number in sorted(found)}


@functools.cache
def _read_shipped(folder: str) -> tuple[Migration, ...]:
    import hashlib  # only migrating and checking checksums reads the files

    shipped: list[Migration] = []
    for number, file_name in _shipped_names(folder).items():
        with open(os.path.join(folder, file_name), encoding="utf-8") as handle:
            sql = handle.read()
        match = _FILE_NAME.match(file_name)
        assert match is not None  # _shipped_names matched it
        shipped.append(
            Migration(
                id=number,
                name=match.group(2),
                sql=sql,
                checksum=hashlib.sha256(sql.encode("utf-8")).hexdigest(),
            )
        )
    return tuple(shipped)


def _journal_exists(db: SqliteDatabase) -> bool:
    found = db.scalar(
        "SELECT count(*) FROM sqlite_schema WHERE type = 'table' AND name = ?", (JOURNAL_TABLE,)
    )
    return bool(found == 1)


_SHOWN_TABLES = 5
"""How many of a foreign file's tables a refusal names in its text (all are in ``tables``)."""


def foreign_database(db: SqliteDatabase) -> NotARunstoreDatabase | None:
    """The refusal of ``db`` when it holds no journal but tables or views of another program.

    None when ``db`` has the journal, or holds nothing at all (an empty file, or an empty
    database: runstore may create its schema there). Reads ``sqlite_schema`` only; call it
    inside a read or a unit of work.
    """
    if _journal_exists(db):
        return None
    tables = tuple(
        row[0]
        for row in db.execute(
            "SELECT name FROM sqlite_schema WHERE type IN ('table', 'view')"
            " AND name NOT LIKE 'sqlite\\_%' ESCAPE '\\' ORDER BY name"
        )
    )
    if not tables:
        return None
    shown = ", ".join(tables[:_SHOWN_TABLES]) + (", ..." if len(tables) > _SHOWN_TABLES else "")
    noun = "table" if len(tables) == 1 else "tables"
    return NotARunstoreDatabase(
        db.path,
        f"it holds another program's {noun} ({shown}) and no {JOURNAL_TABLE} journal;"
        " runstore adds its schema only to a new or empty file",
        tables,
    )


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


def _unfinished(row: AppliedMigration) -> HalfAppliedMigration:
    """The problem of a journal row that was never marked finished."""
    return HalfAppliedMigration(row.id, row.name, "journal row never marked finished")


def _problems(
    db: SqliteDatabase,
    applied: tuple[AppliedMigration, ...],
    shipped: tuple[Migration, ...],
) -> tuple[MigrationError, ...]:
    existing = {
        r[0].lower()
        for r in db.execute("SELECT name FROM sqlite_schema WHERE name NOT LIKE 'sqlite_%'")
    }
    return journal_problems(applied, shipped, existing)


def journal_problems(
    applied: tuple[AppliedMigration, ...],
    shipped: tuple[Migration, ...],
    existing: AbstractSet[str],
) -> tuple[MigrationError, ...]:
    """Every reason to refuse a database, from its journal rows ``applied``, the
    ``shipped`` migrations and the lower-case names of the tables, indexes, triggers and
    views that ``existing`` holds: ``UnknownMigration``, then per journalled migration
    ``HalfAppliedMigration`` (never marked finished) or ``MigrationDrift``, then
    ``HalfAppliedMigration`` for a migration not journalled whose objects exist. The rules
    of every backend (SQLite's and PostgreSQL's runners read ``existing`` each their way).
    """
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
            problems.append(_unfinished(row))
        elif row.checksum != migration.checksum:
            problems.append(
                MigrationDrift(
                    id=row.id, name=row.name, expected=migration.checksum, actual=row.checksum
                )
            )
    journalled = {a.id for a in applied}
    earlier: set[str] = set()  # names an earlier migration creates: a rebuild re-creates them
    for migration in shipped:
        created = {n.lower() for n in migration.creates}
        own, earlier = created - earlier, earlier | created
        if migration.id in journalled:
            continue
        present = sorted(n for n in migration.creates if n.lower() in existing & own)
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


def readiness(db: SqliteDatabase) -> Result[None, ReadinessError]:
    """Whether this code can read ``db`` as it is, from its journal alone.

    The failures and their order are those of
    :meth:`runstore.services.DatabaseHealth.readiness`: ``NotARunstoreDatabase`` (no
    journal; naming the ``tables`` another program keeps there, if any),
    ``UnknownMigration``, ``HalfAppliedMigration`` (a journal row never marked finished),
    ``PendingMigrations``, and ``Busy`` or ``StorageFailure`` when ``db`` cannot be read.
    No migration file is read.
    """

    def read() -> Result[None, ReadinessError]:
        if not _journal_exists(db):
            return Failure(
                foreign_database(db)
                or NotARunstoreDatabase(db.path, f"it holds no {JOURNAL_TABLE} journal")
            )
        return journal_readiness(_read_journal(db), shipped_ids())

    return db.read("database readiness", read)


def journal_readiness(
    applied: tuple[AppliedMigration, ...], shipped: tuple[int, ...]
) -> Result[None, ReadinessError]:
    """Whether code shipping the migrations ``shipped`` can read a database whose journal
    holds ``applied``: ``UnknownMigration``, ``HalfAppliedMigration`` (a row never marked
    finished) or ``PendingMigrations``, in that order. The rules of every backend."""
    unknown = tuple(a.id for a in applied if a.id not in shipped)
    if unknown:
        return Failure(UnknownMigration(ids=unknown))
    unfinished = [row for row in applied if not row.finished]
    if unfinished:
        return Failure(_unfinished(unfinished[0]))
    done = {a.id for a in applied}
    pending = tuple(number for number in shipped if number not in done)
    if pending:
        return Failure(PendingMigrations(ids=pending))
    return Success(None)


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
