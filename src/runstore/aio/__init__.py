"""runstore's services, awaited: the async twin of every service Protocol, on every layer.

``aio.sqlite(path)``, ``aio.in_memory()`` and ``aio.postgres(target)`` are async layers;
``aio.build(layer)`` opens one into a container whose services are the async twins of the
sync ones (same methods, arguments, records, errors and ``Result``s, each awaited)::

    from runstore import aio

    async with aio.build(aio.sqlite(".runstore/runstore.db")) as container:
        agents = container.get(aio.AGENT_STORAGE)          # an AsyncAgentStorage, to mypy too
        page = (await agents.messages.list("thread-1")).unwrap()

Each method runs the sync service, unchanged, where it cannot block the event loop:

- SQLite (:func:`sqlite`): on a writer thread that owns the file's read-write connection,
  and reads on ``readers`` reader threads with read-only connections (none for
  ``:memory:``). Writes run one at a time in the order they were called.
- in memory (:func:`in_memory`): on one worker thread, so that calls from several loops and
  threads are serialised as on a database.
- PostgreSQL (:func:`postgres`): on psycopg's async connections (the ``postgresql`` extra).

A container binds no event loop: it and its services may be awaited from any loop and any
thread until its ``async with`` block exits. Cancelling a call that has not started means it
never runs; a write that has started runs to its outcome (committed or rolled back), and the
caller's ``CancelledError`` comes only after it, so the caller's next call sees that outcome
(a retry with the same client id or id is the same write to runstore). Leaving the block
lets the calls already handed over finish, then closes the sync containers in the reverse
order of their opening, on their own threads; the event loop only awaits. A service kept
past the block answers as a closed sync service does.

Importing this package imports no domain, no service and no driver: each name is read from
its module on first use.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from runstore._lazy import lazy_exports
from runstore.aio._runner import AsyncContainer, AsyncLayer, Runner, build
from runstore.aio._tags import (
    ACTION_RUN_STORAGE,
    AGENT_STORAGE,
    DATA_READER,
    DATA_STORE,
    DATABASE_HEALTH,
    EXECUTION_STORAGE,
    GRAPH_CHECKPOINTS,
    SESSION_REPOSITORY,
)
from runstore.exceptions import MissingExtra
from runstore.layers._open import DEFAULT_DB_PATH, check_access

if TYPE_CHECKING:
    from psycopg_pool import AsyncConnectionPool

    from runstore.aio._postgres import configure_postgres_connection
    from runstore.aio._services import (
        AsyncActionRunStorage,
        AsyncAgentRunStore,
        AsyncAgentStorage,
        AsyncCheckpointStore,
        AsyncDatabaseHealth,
        AsyncDataReader,
        AsyncDataStore,
        AsyncExecutionStorage,
        AsyncGraphCheckpointStore,
        AsyncMessageStore,
        AsyncSessionRepository,
        AsyncSessionStorage,
        AsyncThreadStore,
    )
    from runstore.layers import Access as OpenAccess
    from runstore.layers import ConnectionSettings
    from runstore.layers._postgres_database import PostgresSettings

__all__ = [
    "ACTION_RUN_STORAGE",
    "AGENT_STORAGE",
    "DATABASE_HEALTH",
    "DATA_READER",
    "DATA_STORE",
    "DEFAULT_READERS",
    "EXECUTION_STORAGE",
    "GRAPH_CHECKPOINTS",
    "SESSION_REPOSITORY",
    "AsyncActionRunStorage",
    "AsyncAgentRunStore",
    "AsyncAgentStorage",
    "AsyncCheckpointStore",
    "AsyncContainer",
    "AsyncDataReader",
    "AsyncDataStore",
    "AsyncDatabaseHealth",
    "AsyncExecutionStorage",
    "AsyncGraphCheckpointStore",
    "AsyncLayer",
    "AsyncMessageStore",
    "AsyncSessionRepository",
    "AsyncSessionStorage",
    "AsyncThreadStore",
    "Runner",
    "build",
    "configure_postgres_connection",
    "in_memory",
    "postgres",
    "sqlite",
]

_NAMES_OF: dict[str, tuple[str, ...]] = {
    "_services": (
        "AsyncActionRunStorage",
        "AsyncAgentRunStore",
        "AsyncAgentStorage",
        "AsyncCheckpointStore",
        "AsyncDatabaseHealth",
        "AsyncDataReader",
        "AsyncDataStore",
        "AsyncExecutionStorage",
        "AsyncGraphCheckpointStore",
        "AsyncMessageStore",
        "AsyncSessionRepository",
        "AsyncSessionStorage",
        "AsyncThreadStore",
    ),
    "_postgres": ("configure_postgres_connection",),
}

if not TYPE_CHECKING:  # mypy reads the imports above; an unknown name stays an error there
    __getattr__, __dir__ = lazy_exports(__name__, _NAMES_OF)

DEFAULT_READERS = 2
"""Reader threads of :func:`sqlite` on a file (each with its own read-only connection)."""


def sqlite(
    path: str | os.PathLike[str] = DEFAULT_DB_PATH,
    settings: ConnectionSettings | None = None,
    *,
    access: OpenAccess = "create",
    readers: int = DEFAULT_READERS,
) -> AsyncLayer:
    """Every async service on the SQLite database at ``path`` (a file or ``:memory:``).

    ``path``, ``settings`` and ``access`` are those of :func:`runstore.layers.sqlite`. The
    writer thread opens the database as ``access`` says (creating and migrating it unless
    ``"read"``) when the container is built; then each of ``readers`` reader threads opens it
    read-only (``:memory:`` has none: every connection to it is a database of its own, so
    every call runs on the writer). Building raises
    :class:`~runstore.exceptions.DatabaseOpenError` as the sync layer does.

    Raises ``ValueError`` for ``readers`` that is not an int >= 0 and for an ``access`` that
    is none of ``"create"``, ``"write"``, ``"read"``.
    """
    check_access(access)
    if isinstance(readers, bool) or not isinstance(readers, int) or readers < 0:
        raise ValueError(f"readers must be an int >= 0, not {readers!r}")
    from runstore.aio._layers import sqlite as layer

    return layer(path, settings, access=access, readers=readers)


def in_memory() -> AsyncLayer:
    """Every async service kept in memory (:func:`runstore.layers.in_memory`), run on one
    worker thread. For tests and for hosts that keep nothing."""
    from runstore.aio._layers import in_memory as layer

    return layer()


def postgres(
    target: str | AsyncConnectionPool[Any],
    settings: PostgresSettings | None = None,
    *,
    access: OpenAccess = "create",
) -> AsyncLayer:
    """Every async service on the PostgreSQL database ``target`` names: see
    :func:`runstore.aio._postgres.postgres` for ``target``, ``settings`` and ``access``.

    Raises :class:`~runstore.exceptions.MissingExtra` naming the ``postgresql`` extra when
    psycopg is not installed, as :func:`runstore.layers.postgres` does.
    """
    from runstore.layers._open import postgres_extra_problem

    problem = postgres_extra_problem()
    if problem is not None:
        raise MissingExtra(problem)
    from runstore.aio._postgres import postgres as layer

    return layer(target, settings, access=access)
