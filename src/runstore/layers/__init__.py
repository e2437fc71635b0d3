"""Live and in-memory layers, and the container they are built into.

``sqlite(path)`` is the live layer: one migrated SQLite database and every service on it.
``in_memory()`` provides the same services from memory, for tests and for hosts that keep
nothing. ``build(layer)`` turns either into a container; a service is looked up by its
class or its :class:`Tag`, both typed (``container.get(DataReader)`` and
``container.get(DATA_READER)`` are a ``DataReader`` to mypy)::

    from runstore.layers import DATA_READER, build, sqlite

    with build(sqlite(".runstore/runstore.db")) as container:
        reader = container.get(DATA_READER)

Importing this package imports no domain: each domain's layer module (test runs, the
execution ledger, agents, sessions) is imported when one of its services is first asked of
a container, or when one of its names below is first read.

A container and its services belong to the thread that built it (an SQLite connection may
not cross threads); build one per thread.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from returns.result import Failure

from runstore._lazy import lazy_exports
from runstore.exceptions import DatabaseOpenError, MissingExtra
from runstore.layers._layer import Container, Key, Layer, Tag, build, merge, provide
from runstore.layers._memory_database import InMemoryDatabase
from runstore.layers._open import (
    DEFAULT_DB_PATH,
    GITIGNORE,
    Access,
    database_path_problem,
    find_project_database,
    live,
    make_database_folder,
    open_database,
    resolve_database,
    scrub_database,
    shipped_for,
    shown_database,
)
from runstore.layers._sqlite_database import ConnectionSettings, SqliteDatabase, connect
from runstore.layers._tags import (
    ACTION_RUN_STORAGE,
    AGENT_STORAGE,
    CLOCK,
    DATA_READER,
    DATA_STORE,
    DATABASE_HEALTH,
    EXECUTION_STORAGE,
    GRAPH_CHECKPOINTS,
    SESSION_REPOSITORY,
)
from runstore.layers._unit_of_work import TxDict, UnitOfWork

if TYPE_CHECKING:
    from psycopg_pool import ConnectionPool

    from runstore.layers._agents_memory import InMemoryAgentStorage, in_memory_agents
    from runstore.layers._agents_sqlite import SqliteAgentStorage, sqlite_agents
    from runstore.layers._graphs_memory import InMemoryGraphCheckpointStore, in_memory_graphs
    from runstore.layers._graphs_sqlite import SqliteGraphCheckpointStore, sqlite_graphs
    from runstore.layers._health_memory import InMemoryDatabaseHealth, in_memory_health
    from runstore.layers._health_sqlite import SqliteDatabaseHealth, sqlite_health
    from runstore.layers._ledger_memory import (
        InMemoryActionRunStorage,
        InMemoryExecutionStorage,
        in_memory_ledger,
    )
    from runstore.layers._ledger_sqlite import (
        SqliteActionRunStorage,
        SqliteExecutionStorage,
        sqlite_ledger,
    )
    from runstore.layers._postgres_database import PostgresDatabase, PostgresSettings
    from runstore.layers._sessions_memory import InMemorySessionRepository, in_memory_sessions
    from runstore.layers._sessions_sqlite import SqliteSessionRepository, sqlite_sessions
    from runstore.layers._test_runs_memory import (
        InMemoryDataReader,
        InMemoryDataStore,
        in_memory_test_runs,
    )
    from runstore.layers._test_runs_sqlite import (
        SqliteDataReader,
        SqliteDataStore,
        sqlite_test_runs,
    )
    from runstore.services.clock import Clock

__all__ = [
    "ACTION_RUN_STORAGE",
    "AGENT_STORAGE",
    "CLOCK",
    "DATABASE_HEALTH",
    "DATA_READER",
    "DATA_STORE",
    "DEFAULT_DB_PATH",
    "EXECUTION_STORAGE",
    "GITIGNORE",
    "GRAPH_CHECKPOINTS",
    "SESSION_REPOSITORY",
    "Access",
    "ConnectionSettings",
    "Container",
    "InMemoryActionRunStorage",
    "InMemoryAgentStorage",
    "InMemoryDataReader",
    "InMemoryDataStore",
    "InMemoryDatabase",
    "InMemoryDatabaseHealth",
    "InMemoryExecutionStorage",
    "InMemoryGraphCheckpointStore",
    "InMemorySessionRepository",
    "Key",
    "Layer",
    "PostgresDatabase",
    "PostgresSettings",
    "SqliteActionRunStorage",
    "SqliteAgentStorage",
    "SqliteDataReader",
    "SqliteDataStore",
    "SqliteDatabase",
    "SqliteDatabaseHealth",
    "SqliteExecutionStorage",
    "SqliteGraphCheckpointStore",
    "SqliteSessionRepository",
    "Tag",
    "TxDict",
    "UnitOfWork",
    "build",
    "connect",
    "database_path_problem",
    "find_project_database",
    "in_memory",
    "in_memory_agents",
    "in_memory_database",
    "in_memory_graphs",
    "in_memory_health",
    "in_memory_ledger",
    "in_memory_sessions",
    "in_memory_test_runs",
    "live",
    "make_database_folder",
    "merge",
    "open_database",
    "postgres",
    "provide",
    "resolve_database",
    "scrub_database",
    "shipped_for",
    "shown_database",
    "sqlite",
    "sqlite_agents",
    "sqlite_database",
    "sqlite_graphs",
    "sqlite_health",
    "sqlite_ledger",
    "sqlite_sessions",
    "sqlite_test_runs",
    "system_clock",
]

# Where each domain name of ``__all__`` lives (module: names); read on first access.
_NAMES_OF: dict[str, tuple[str, ...]] = {
    "_agents_memory": ("InMemoryAgentStorage", "in_memory_agents"),
    "_agents_sqlite": ("SqliteAgentStorage", "sqlite_agents"),
    "_graphs_memory": ("InMemoryGraphCheckpointStore", "in_memory_graphs"),
    "_graphs_sqlite": ("SqliteGraphCheckpointStore", "sqlite_graphs"),
    "_health_memory": ("InMemoryDatabaseHealth", "in_memory_health"),
    "_health_sqlite": ("SqliteDatabaseHealth", "sqlite_health"),
    "_ledger_memory": ("InMemoryActionRunStorage", "InMemoryExecutionStorage", "in_memory_ledger"),
    "_ledger_sqlite": ("SqliteActionRunStorage", "SqliteExecutionStorage", "sqlite_ledger"),
    "_sessions_memory": ("InMemorySessionRepository", "in_memory_sessions"),
    "_sessions_sqlite": ("SqliteSessionRepository", "sqlite_sessions"),
    "_test_runs_memory": ("InMemoryDataReader", "InMemoryDataStore", "in_memory_test_runs"),
    "_test_runs_sqlite": ("SqliteDataReader", "SqliteDataStore", "sqlite_test_runs"),
    "_postgres_database": ("PostgresDatabase", "PostgresSettings"),
}

if not TYPE_CHECKING:  # mypy reads the imports above; an unknown name stays an error there
    __getattr__, __dir__ = lazy_exports(__name__, _NAMES_OF)


def _domain(
    module: str, function: str, *, provides: tuple[Key[Any], ...], requires: tuple[Key[Any], ...]
) -> Layer:
    """The layer ``function()`` of ``module``, imported when one of its services is first used."""

    def load() -> Layer:
        layer: Layer = getattr(importlib.import_module(f"{__name__}.{module}"), function)()
        return layer

    return Layer.lazy(load, provides=provides, requires=requires)


_TEST_RUNS_MEMORY_STATE: Tag[object] = Tag(f"{__name__}._test_runs_memory.TestRunsMemoryState")


def sqlite_database(
    path: str | os.PathLike[str],
    settings: ConnectionSettings | None = None,
    *,
    access: Access = "create",
) -> Layer:
    """A layer providing one :class:`SqliteDatabase`, opened as ``access`` says (migrated
    unless ``"read"``; see :func:`open_database`), closed with the container.

    Building it raises :class:`~runstore.exceptions.DatabaseOpenError` carrying the typed
    reason (see :func:`open_database`) when the database cannot be opened or migrated.
    """

    def factory(_: Container) -> Iterator[SqliteDatabase]:
        opened = open_database(path, settings, access=access)
        if isinstance(opened, Failure):
            raise DatabaseOpenError(opened.failure())
        db = opened.unwrap()
        try:
            yield db
        finally:
            db.close()

    return Layer.service(SqliteDatabase, factory)


def in_memory_database() -> Layer:
    """A layer providing a fresh :class:`InMemoryDatabase` (the in-memory unit of work)."""
    return Layer.service(InMemoryDatabase, lambda _c: InMemoryDatabase())


def system_clock() -> Layer:
    """A layer providing the wall clock as :class:`~runstore.services.Clock` (:data:`CLOCK`)."""

    def factory(_: Container) -> Clock:
        from runstore.services.clock import SystemClock

        return SystemClock()

    return Layer.service(CLOCK, factory)


def sqlite(
    path: str | os.PathLike[str] = DEFAULT_DB_PATH,
    settings: ConnectionSettings | None = None,
    *,
    access: Access = "create",
) -> Layer:
    """The live layer: every runstore service on one SQLite database at ``path``.

    ``path`` is a file or ``:memory:``. ``access`` is ``"create"`` (the file is created
    with its folder when missing), ``"write"`` (it must already be a runstore database) or
    ``"read"`` (opened read-only, never migrated: ask ``DATABASE_HEALTH`` for its
    ``readiness()`` before reading; writes fail as ``read_only``); see
    :func:`open_database`. Requires nothing. The database is opened (and, unless read,
    migrated) when the container is built; each domain's services are made, and their
    module imported, when one of them is first asked for.

    Raises ``ValueError`` for an ``access`` that is none of the three.
    """
    from runstore.layers._open import check_access

    check_access(access)
    on_db = (SqliteDatabase, CLOCK)
    return merge(
        sqlite_database(path, settings, access=access),
        system_clock(),
        _domain("_health_sqlite", "sqlite_health", provides=(DATABASE_HEALTH,),
                requires=(SqliteDatabase,)),
        _domain(
            "_ledger_sqlite",
            "sqlite_ledger",
            provides=(EXECUTION_STORAGE, ACTION_RUN_STORAGE),
            requires=on_db,
        ),
        _domain(
            "_agents_sqlite",
            "sqlite_agents",
            provides=(AGENT_STORAGE,),
            requires=(*on_db, EXECUTION_STORAGE),
        ),
        _domain(
            "_graphs_sqlite",
            "sqlite_graphs",
            provides=(GRAPH_CHECKPOINTS,),
            requires=(*on_db, AGENT_STORAGE),
        ),
        _domain(
            "_sessions_sqlite", "sqlite_sessions", provides=(SESSION_REPOSITORY,), requires=on_db
        ),
        _domain(
            "_test_runs_sqlite",
            "sqlite_test_runs",
            provides=(DATA_STORE, DATA_READER),
            requires=on_db,
        ),
    )


def postgres(
    target: str | ConnectionPool[Any],
    settings: PostgresSettings | None = None,
    *,
    access: Access = "create",
) -> Layer:
    """The PostgreSQL live layer: ``DatabaseHealth`` and the test-run services on the database
    ``target`` names, a DSN (``postgresql://user:password@host/dbname``; the password never
    appears in errors or output) or a ``psycopg_pool.ConnectionPool`` the caller owns; see
    :func:`runstore.layers._postgres_layer.postgres`. The other domains follow.

    Raises :class:`~runstore.exceptions.MissingExtra` naming the ``postgresql`` extra when
    psycopg is not installed (nothing else in runstore imports it).
    """
    from runstore.layers._open import postgres_extra_problem

    problem = postgres_extra_problem()
    if problem is not None:
        raise MissingExtra(problem)
    from runstore.layers._postgres_layer import postgres as layer

    return layer(target, settings, access=access)


def in_memory() -> Layer:
    """The in-memory layer: every runstore service, kept in memory. Requires nothing.

    As with :func:`sqlite`, each domain's services are made, and their module imported, when
    one of them is first asked for.
    """
    in_db = (InMemoryDatabase, CLOCK)
    return merge(
        in_memory_database(),
        system_clock(),
        _domain("_health_memory", "in_memory_health", provides=(DATABASE_HEALTH,), requires=()),
        _domain(
            "_ledger_memory",
            "in_memory_ledger",
            provides=(EXECUTION_STORAGE, ACTION_RUN_STORAGE),
            requires=in_db,
        ),
        _domain(
            "_agents_memory",
            "in_memory_agents",
            provides=(AGENT_STORAGE,),
            requires=(*in_db, EXECUTION_STORAGE),
        ),
        _domain(
            "_graphs_memory",
            "in_memory_graphs",
            provides=(GRAPH_CHECKPOINTS,),
            requires=(*in_db, AGENT_STORAGE),
        ),
        _domain(
            "_sessions_memory", "in_memory_sessions", provides=(SESSION_REPOSITORY,), requires=in_db
        ),
        _domain(
            "_test_runs_memory",
            "in_memory_test_runs",
            provides=(_TEST_RUNS_MEMORY_STATE, DATA_STORE, DATA_READER),
            requires=in_db,
        ),
    )
