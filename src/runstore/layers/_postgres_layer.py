"""The PostgreSQL live layer: ``postgres(dsn | pool)``, its database and its health.

Imported only when a PostgreSQL layer is asked for, so nothing else pays for (or needs)
psycopg: it is the ``postgresql`` extra (``pip install 'runstore[postgresql]'``).
"""

from __future__ import annotations

from collections.abc import Iterator

from returns.result import Failure, Result, Success

from runstore.exceptions import DatabaseOpenError
from runstore.layers._layer import Container, Layer, merge
from runstore.layers._open import Access
from runstore.layers._postgres_agents import postgres_agents
from runstore.layers._postgres_database import Pool, PostgresDatabase, PostgresSettings
from runstore.layers._postgres_graphs import postgres_graphs
from runstore.layers._postgres_ledger import postgres_ledger
from runstore.layers._postgres_migrations import (
    apply_migrations,
    foreign_database,
    migration_status,
    readiness,
)
from runstore.layers._postgres_sessions import postgres_sessions
from runstore.layers._postgres_test_runs import postgres_test_runs
from runstore.layers._tags import DATABASE_HEALTH
from runstore.migrations import JOURNAL_TABLE
from runstore.services.errors import NotARunstoreDatabase, OpenError
from runstore.services.health import (
    DatabaseCheck,
    DatabaseHealth,
    HealthError,
    MigrationStatus,
    ReadinessError,
)

__all__ = [
    "PostgresDatabaseHealth",
    "open_postgres",
    "postgres",
    "postgres_database",
    "postgres_health",
    "postgres_services",
]


def open_postgres(
    target: str | Pool, settings: PostgresSettings | None = None, *, access: Access = "create"
) -> Result[PostgresDatabase, OpenError]:
    """Open the database ``target`` names (a DSN, or a caller's pool) as ``access`` says.

    - ``"create"`` (the default): migrate the current schema; one without the migration
      journal must hold no table or view (another program's), else it is refused with
      ``NotARunstoreDatabase`` naming them, and left as it is.
    - ``"write"``: the schema must already hold the journal (``NotARunstoreDatabase``
      otherwise); it is migrated.
    - ``"read"``: nothing is migrated or written: every transaction of the pool's
      connections is read-only (a write fails as ``StorageFailure`` kind ``read_only``);
      ``DatabaseHealth.readiness`` says whether this code can read it. Only a DSN can be
      opened so (a caller's pool keeps its own settings).

    Returns ``StorageFailure`` when the server cannot be reached (kind ``connection``,
    ``cant_open`` for a missing database or a refused login; never with the password),
    ``Busy``, or the refusals of :func:`runstore.migrations.apply_migrations`. The pool
    a DSN opened is closed again on every failure.
    """
    if isinstance(target, str):
        opened = PostgresDatabase.open(target, settings, read_only=access == "read")
        if isinstance(opened, Failure):
            return opened
        db = opened.unwrap()
    else:
        db = PostgresDatabase.on_pool(target, settings)
    if access == "read":
        return Success(db)
    try:
        checked = _check_and_migrate(db, create=access == "create")
    except BaseException:
        db.close()
        raise
    if isinstance(checked, Failure):
        db.close()
        return checked
    return Success(db)


def _check_and_migrate(db: PostgresDatabase, *, create: bool) -> Result[None, OpenError]:
    status = migration_status(db)
    if isinstance(status, Failure):
        return status
    if not status.unwrap().applied:
        found = db.read("database check", lambda: Success(foreign_database(db)))
        if isinstance(found, Failure):
            return found
        foreign = found.unwrap()
        if foreign is not None:
            return Failure(foreign)
        if not create:
            return Failure(NotARunstoreDatabase(db.shown, f"it holds no {JOURNAL_TABLE} journal"))
    migrated = apply_migrations(db)
    if isinstance(migrated, Failure):
        return Failure(migrated.failure())
    return Success(None)


def postgres_database(
    target: str | Pool, settings: PostgresSettings | None = None, *, access: Access = "create"
) -> Layer:
    """A layer providing one :class:`PostgresDatabase` (see :func:`open_postgres`), closed
    with the container (a caller's pool stays open).

    Building it raises :class:`~runstore.exceptions.DatabaseOpenError` carrying the typed
    reason when the database cannot be opened or migrated.
    """

    def factory(_: Container) -> Iterator[PostgresDatabase]:
        opened = open_postgres(target, settings, access=access)
        if isinstance(opened, Failure):
            raise DatabaseOpenError(opened.failure())
        db = opened.unwrap()
        try:
            yield db
        finally:
            db.close()

    return Layer.service(PostgresDatabase, factory)


class PostgresDatabaseHealth:
    """The health of one PostgreSQL database (see :class:`~runstore.services.DatabaseHealth`).

    The server keeps its own pages sound and enforces every foreign key at each statement,
    so ``quick_check`` asks only that it answers, and ``check`` reports ``("ok",)`` and no
    foreign-key violations beside the migration journal's status.
    """

    def __init__(self, db: PostgresDatabase) -> None:
        self._db = db

    def readiness(self) -> Result[None, ReadinessError]:
        return readiness(self._db)

    def quick_check(self) -> Result[None, HealthError]:
        db = self._db

        def answer() -> Result[None, HealthError]:
            db.scalar("SELECT 1")
            return Success(None)

        return db.read("quick_check", answer)

    def status(self) -> Result[MigrationStatus, HealthError]:
        return migration_status(self._db)

    def check(self) -> Result[DatabaseCheck, HealthError]:
        return migration_status(self._db).map(lambda status: DatabaseCheck(("ok",), (), status))


def postgres_health() -> Layer:
    """A layer providing :data:`~runstore.layers.DATABASE_HEALTH` on the container's
    :class:`PostgresDatabase` (requires it)."""
    return Layer.service(
        DATABASE_HEALTH,
        lambda c: PostgresDatabaseHealth(c.get(PostgresDatabase)),
        requires=(PostgresDatabase,),
    )


def postgres(
    target: str | Pool, settings: PostgresSettings | None = None, *, access: Access = "create"
) -> Layer:
    """The PostgreSQL live layer: ``DatabaseHealth``, the test-run services (``DataStore``,
    ``DataReader``), the execution ledger (``ExecutionStorage``, ``ActionRunStorage``),
    agent state (``AgentStorage``), graph checkpoints (``GraphCheckpointStore``) and sessions
    (``SessionRepository``) on the database
    ``target`` names.

    ``target`` is a DSN (``postgresql://user:password@host:5432/dbname`` or
    ``"host=... dbname=..."``; the password never appears in errors or output) or a
    ``psycopg_pool.ConnectionPool`` the caller owns (made with ``kwargs={"autocommit":
    True}`` and ``configure=runstore.layers.configure_postgres_connection``; left open).
    ``access`` is as for :func:`open_postgres`. Requires nothing; the wall clock is the
    ``Clock`` unless a later layer provides one. The database is opened (and, unless read,
    migrated) when the container is built.
    """
    return merge(postgres_database(target, settings, access=access), postgres_services())


def postgres_services() -> Layer:
    """Every service of :func:`postgres` and the wall clock, on the container's
    :class:`PostgresDatabase` (requires it; ``runstore.aio.postgres`` provides one per call)."""
    from runstore.layers import system_clock

    return merge(
        system_clock(),
        postgres_health(),
        postgres_test_runs(),
        postgres_ledger(),
        postgres_agents(),
        postgres_graphs(),
        postgres_sessions(),
    )


def _check_protocol(db: PostgresDatabase) -> DatabaseHealth:
    """Static check that the class satisfies its Protocol (mypy reads this)."""
    return PostgresDatabaseHealth(db)
