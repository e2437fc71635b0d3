"""The typed key of every async service, named like its sync twin's in
:mod:`runstore.layers` (``aio.DATA_STORE`` beside ``layers.DATA_STORE``).

``async_container.get(aio.DATA_STORE)`` is an :class:`~runstore.aio.AsyncDataStore` to a type
checker. The tags are made from the async Protocols' full names, so importing this module
imports no service module.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

from runstore.layers._layer import Tag

if TYPE_CHECKING:
    from runstore.aio._services import (
        AsyncActionRunStorage,
        AsyncAgentStorage,
        AsyncDatabaseHealth,
        AsyncDataReader,
        AsyncDataStore,
        AsyncExecutionStorage,
        AsyncGraphCheckpointStore,
        AsyncSessionRepository,
    )

__all__ = [
    "ACTION_RUN_STORAGE",
    "AGENT_STORAGE",
    "DATABASE_HEALTH",
    "DATA_READER",
    "DATA_STORE",
    "EXECUTION_STORAGE",
    "GRAPH_CHECKPOINTS",
    "SESSION_REPOSITORY",
]

_SERVICES = "runstore.aio._services"

DATA_STORE: Final[Tag[AsyncDataStore]] = Tag(f"{_SERVICES}.AsyncDataStore")
"""Test-run writes, awaited (:class:`~runstore.aio.AsyncDataStore`)."""

DATA_READER: Final[Tag[AsyncDataReader]] = Tag(f"{_SERVICES}.AsyncDataReader")
"""Test-run reads, awaited (:class:`~runstore.aio.AsyncDataReader`)."""

EXECUTION_STORAGE: Final[Tag[AsyncExecutionStorage]] = Tag(f"{_SERVICES}.AsyncExecutionStorage")
"""The execution ledger's executions, awaited (:class:`~runstore.aio.AsyncExecutionStorage`)."""

ACTION_RUN_STORAGE: Final[Tag[AsyncActionRunStorage]] = Tag(f"{_SERVICES}.AsyncActionRunStorage")
"""The execution ledger's action runs, awaited (:class:`~runstore.aio.AsyncActionRunStorage`)."""

AGENT_STORAGE: Final[Tag[AsyncAgentStorage]] = Tag(f"{_SERVICES}.AsyncAgentStorage")
"""Agent threads, runs, messages and checkpoints, awaited
(:class:`~runstore.aio.AsyncAgentStorage`)."""

SESSION_REPOSITORY: Final[Tag[AsyncSessionRepository]] = Tag(
    f"{_SERVICES}.AsyncSessionRepository"
)
"""Tree-shaped agent sessions, awaited (:class:`~runstore.aio.AsyncSessionRepository`)."""

DATABASE_HEALTH: Final[Tag[AsyncDatabaseHealth]] = Tag(f"{_SERVICES}.AsyncDatabaseHealth")
"""The health of the database under the services, awaited
(:class:`~runstore.aio.AsyncDatabaseHealth`)."""

GRAPH_CHECKPOINTS: Final[Tag[AsyncGraphCheckpointStore]] = Tag(
    f"{_SERVICES}.AsyncGraphCheckpointStore"
)
"""The graph checkpoints of agent threads, awaited
(:class:`~runstore.aio.AsyncGraphCheckpointStore`)."""
