"""The live :class:`~runstore.services.DatabaseHealth`: SQLite's own checks and the migration
journal of the container's :class:`SqliteDatabase`, each in one read-only unit."""

from __future__ import annotations

from collections.abc import Callable

import apsw
from returns.result import Failure, Result, Success

from runstore.layers._layer import Layer
from runstore.layers._sqlite_database import SqliteDatabase
from runstore.layers._tags import DATABASE_HEALTH
from runstore.migrations import migration_status, readiness
from runstore.services.errors import StorageFailure, StorageFailureKind
from runstore.services.health import (
    DatabaseCheck,
    DatabaseHealth,
    ForeignKeyViolation,
    HealthError,
    MigrationStatus,
    ReadinessError,
)

__all__ = ["SqliteDatabaseHealth", "sqlite_health"]


class SqliteDatabaseHealth:
    """The health of one SQLite database (see :class:`~runstore.services.DatabaseHealth`)."""

    def __init__(self, db: SqliteDatabase) -> None:
        self._db = db

    def readiness(self) -> Result[None, ReadinessError]:
        return readiness(self._db)

    def quick_check(self) -> Result[None, HealthError]:
        db = self._db

        def check() -> Result[None, HealthError]:
            found = [str(row[0]) for row in db.execute("PRAGMA quick_check(1)")]
            if found == ["ok"]:
                return Success(None)
            return Failure(
                StorageFailure(
                    operation="quick_check",
                    kind=StorageFailureKind.CORRUPT,
                    code=apsw.SQLITE_CORRUPT,
                    message=found[0] if found else "no answer",
                )
            )

        return db.read("quick_check", check)

    def status(self) -> Result[MigrationStatus, HealthError]:
        return migration_status(self._db)

    def check(self) -> Result[DatabaseCheck, HealthError]:
        db = self._db

        def checks() -> Result[DatabaseCheck, HealthError]:
            integrity = tuple(str(row[0]) for row in db.execute("PRAGMA integrity_check"))
            violations = tuple(
                ForeignKeyViolation(table=r[0], rowid=r[1], parent=r[2], fkid=r[3])
                for r in db.execute("PRAGMA foreign_key_check")
            )
            return migration_status(db).map(
                lambda status: DatabaseCheck(integrity, violations, status)
            )

        return db.read("db check", checks)


def sqlite_health() -> Layer:
    """A layer providing :data:`~runstore.layers.DATABASE_HEALTH` on the container's
    :class:`SqliteDatabase` (requires it)."""
    return Layer.service(
        DATABASE_HEALTH, lambda c: SqliteDatabaseHealth(c.get(SqliteDatabase)),
        requires=(SqliteDatabase,),
    )


_check: Callable[[SqliteDatabase], DatabaseHealth] = SqliteDatabaseHealth
