"""Live and in-memory layers, and the container they are built into.

``sqlite(path)`` is the live layer: one migrated SQLite database and every service on it.
``in_memory()`` provides the same services from memory, for tests and for hosts that keep
nothing. ``build(layer)`` turns either into a container::

    from runstore.layers import build, sqlite
    from runstore.services import Clock

    with build(sqlite(".runstore/runstore.db")) as container:
        clock = container.get(Clock)

A container and its services belong to the thread that built it (an SQLite connection may
not cross threads); build one per thread.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

from returns.result import Failure

from runstore.exceptions import DatabaseOpenError
from runstore.layers._action_runs_memory import InMemoryActionRunStorage, in_memory_execution_ledger
from runstore.layers._action_runs_sqlite import SqliteActionRunStorage, sqlite_execution_ledger
from runstore.layers._agents_memory import InMemoryAgentStorage, in_memory_agent_storage
from runstore.layers._agents_sqlite import SqliteAgentStorage, sqlite_agent_storage
from runstore.layers._executions_memory import InMemoryExecutionStorage
from runstore.layers._executions_sqlite import SqliteExecutionStorage
from runstore.layers._layer import Container, Layer, build, merge, provide
from runstore.layers._memory_database import InMemoryDatabase
from runstore.layers._open import (
    DEFAULT_DB_PATH,
    GITIGNORE,
    database_path_problem,
    find_project_database,
    make_database_folder,
    open_database,
)
from runstore.layers._sessions_memory import InMemorySessionRepository, in_memory_sessions
from runstore.layers._sessions_sqlite import SqliteSessionRepository, sqlite_sessions
from runstore.layers._sqlite_database import ConnectionSettings, SqliteDatabase, connect
from runstore.layers._testruns_memory import (
    InMemoryDataReader,
    InMemoryDataStore,
    in_memory_test_runs,
)
from runstore.layers._testruns_sqlite import SqliteDataReader, SqliteDataStore, sqlite_test_runs
from runstore.layers._unit_of_work import TxDict, UnitOfWork
from runstore.services.clock import Clock, SystemClock

__all__ = [
    "DEFAULT_DB_PATH",
    "GITIGNORE",
    "ConnectionSettings",
    "Container",
    "InMemoryActionRunStorage",
    "InMemoryAgentStorage",
    "InMemoryDataReader",
    "InMemoryDataStore",
    "InMemoryDatabase",
    "InMemoryExecutionStorage",
    "InMemorySessionRepository",
    "Layer",
    "SqliteActionRunStorage",
    "SqliteAgentStorage",
    "SqliteDataReader",
    "SqliteDataStore",
    "SqliteDatabase",
    "SqliteExecutionStorage",
    "SqliteSessionRepository",
    "TxDict",
    "UnitOfWork",
    "build",
    "connect",
    "database_path_problem",
    "find_project_database",
    "in_memory",
    "in_memory_agent_storage",
    "in_memory_database",
    "in_memory_execution_ledger",
    "in_memory_sessions",
    "in_memory_test_runs",
    "make_database_folder",
    "merge",
    "open_database",
    "provide",
    "sqlite",
    "sqlite_agent_storage",
    "sqlite_database",
    "sqlite_execution_ledger",
    "sqlite_sessions",
    "sqlite_test_runs",
    "system_clock",
]


def sqlite_database(
    path: str | os.PathLike[str], settings: ConnectionSettings | None = None
) -> Layer:
    """A layer providing one migrated :class:`SqliteDatabase`, closed with the container.

    Building it raises :class:`~runstore.exceptions.DatabaseOpenError` carrying the typed
    reason (see :func:`open_database`) when the database cannot be opened or migrated.
    """

    def factory(_: Container) -> Iterator[SqliteDatabase]:
        opened = open_database(path, settings)
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
    """A layer providing the wall clock as :class:`~runstore.services.Clock`."""
    return Layer.value(Clock, SystemClock())  # type: ignore[type-abstract]


def sqlite(
    path: str | os.PathLike[str] = DEFAULT_DB_PATH, settings: ConnectionSettings | None = None
) -> Layer:
    """The live layer: every runstore service on one SQLite database at ``path``.

    ``path`` is a file (created with its folder) or ``:memory:``. Requires nothing.
    """
    return merge(
        sqlite_database(path, settings),
        system_clock(),
        sqlite_execution_ledger(),
        sqlite_agent_storage(),
        sqlite_sessions(),
        sqlite_test_runs(),
    )


def in_memory() -> Layer:
    """The in-memory layer: every runstore service, kept in memory. Requires nothing."""
    return merge(
        in_memory_database(),
        system_clock(),
        in_memory_execution_ledger(),
        in_memory_agent_storage(),
        in_memory_sessions(),
        in_memory_test_runs(),
    )
