"""The typed key of every runstore service Protocol, one :class:`Tag` each.

``container.get(DATA_STORE)`` is a ``DataStore`` to a type checker, and
``Layer.service(AGENT_STORAGE, factory)`` checks that ``factory`` makes an ``AgentStorage``.
The tags are made from the Protocols' full names, so importing this module imports no
service module: a layer can name a domain's services without loading the domain.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

from runstore.layers._layer import Tag

if TYPE_CHECKING:
    from runstore.services.agents import AgentStorage
    from runstore.services.clock import Clock
    from runstore.services.graphs import GraphCheckpointStore
    from runstore.services.health import DatabaseHealth
    from runstore.services.ledger import ActionRunStorage, ExecutionStorage
    from runstore.services.sessions import SessionRepository
    from runstore.services.test_runs import DataReader, DataStore

__all__ = [
    "ACTION_RUN_STORAGE",
    "AGENT_STORAGE",
    "CLOCK",
    "DATABASE_HEALTH",
    "DATA_READER",
    "DATA_STORE",
    "EXECUTION_STORAGE",
    "GRAPH_CHECKPOINTS",
    "SESSION_REPOSITORY",
]

CLOCK: Final[Tag[Clock]] = Tag("runstore.services.clock.Clock")
"""The clock every writing service reads (:class:`~runstore.services.Clock`)."""

DATA_STORE: Final[Tag[DataStore]] = Tag("runstore.services.test_runs.DataStore")
"""Test-run writes (:class:`~runstore.services.DataStore`)."""

DATA_READER: Final[Tag[DataReader]] = Tag("runstore.services.test_runs.DataReader")
"""Test-run reads (:class:`~runstore.services.DataReader`)."""

EXECUTION_STORAGE: Final[Tag[ExecutionStorage]] = Tag(
    "runstore.services.ledger.ExecutionStorage"
)
"""The execution ledger's executions (:class:`~runstore.services.ExecutionStorage`)."""

ACTION_RUN_STORAGE: Final[Tag[ActionRunStorage]] = Tag(
    "runstore.services.ledger.ActionRunStorage"
)
"""The execution ledger's action runs (:class:`~runstore.services.ActionRunStorage`)."""

AGENT_STORAGE: Final[Tag[AgentStorage]] = Tag("runstore.services.agents.AgentStorage")
"""Agent threads, runs, messages and checkpoints (:class:`~runstore.services.AgentStorage`)."""

GRAPH_CHECKPOINTS: Final[Tag[GraphCheckpointStore]] = Tag(
    "runstore.services.graphs.GraphCheckpointStore"
)
"""Graph checkpoints of agent threads (:class:`~runstore.services.GraphCheckpointStore`)."""

SESSION_REPOSITORY: Final[Tag[SessionRepository]] = Tag(
    "runstore.services.sessions.SessionRepository"
)
"""Tree-shaped agent sessions (:class:`~runstore.services.SessionRepository`)."""

DATABASE_HEALTH: Final[Tag[DatabaseHealth]] = Tag("runstore.services.health.DatabaseHealth")
"""The health of the database under the services (:class:`~runstore.services.DatabaseHealth`)."""
