"""Graph checkpoints on PostgreSQL: ``PostgresGraphCheckpointStore`` (migration 0018's twin).

A small adapter. The store is the SQLite layer's hooks (``_graphs_sqlite``) over the shared
skeleton (``_graphs_shared``), their statements run through the test-run layer's
SQLite-to-PostgreSQL translation (``_postgres_test_runs``: ``IN (SELECT value FROM
json_each(?))`` becomes ``= ANY(...)``), so both backends run the same statements and the same
rules and give the same records. The upserts (``ON CONFLICT ... DO UPDATE`` / ``DO
NOTHING``) are the same text on both. Text columns are ``COLLATE "C"``, so ``ORDER BY
checkpoint_id`` orders by code point as SQLite's ``BINARY`` does.

Isolation, per unit of work. Every write is one ``READ COMMITTED`` transaction of the shared
:class:`PostgresDatabase` that first takes the advisory lock of each thread it writes (the
agent stores' lock, ``pg_advisory_xact_lock(AGENTS_LOCK, hashtext(thread_id))``, taken in
sorted thread order), so the writers of one thread's graph rows, and of the thread itself,
run one at a time, each seeing what the one before committed, as on SQLite: a put finds
the thread a concurrent first put created, and the collection of values no checkpoint
names (after a prune or delete) runs in one order with the puts of that thread, never
beside an uncommitted one. ``delete_for_runs`` finds the threads of its runs, locks them,
and finds its checkpoints again under the locks. Reads run ``REPEATABLE READ READ ONLY``
(one snapshot) and take no lock. The layer keeps no cache.
"""

from __future__ import annotations

from collections.abc import Sequence

from runstore.layers._graphs_sqlite import SqliteGraphCheckpointStore
from runstore.layers._layer import Container, Layer
from runstore.layers._postgres_agents import _AgentsDialect
from runstore.layers._postgres_database import PostgresDatabase
from runstore.layers._postgres_test_runs import _as_sqlite
from runstore.layers._tags import AGENT_STORAGE, CLOCK, GRAPH_CHECKPOINTS
from runstore.services.agents import AgentStorage
from runstore.services.clock import Clock
from runstore.services.graphs import GraphCheckpointStore

__all__ = ["PostgresGraphCheckpointStore", "postgres_graphs"]


class PostgresGraphCheckpointStore(SqliteGraphCheckpointStore):
    """Graph checkpoints in the ``graph_*`` tables of a :class:`PostgresDatabase`; see
    :class:`~runstore.services.GraphCheckpointStore` and the module docstring for the locks.
    ``agents`` must be the ``AgentStorage`` of the same database."""

    def __init__(self, db: PostgresDatabase, clock: Clock, agents: AgentStorage) -> None:
        self._dialect = _AgentsDialect(db)
        super().__init__(_as_sqlite(self._dialect), clock, agents)

    def _lock(self, thread_ids: Sequence[str]) -> None:
        for thread_id in thread_ids:
            self._dialect.lock_thread(thread_id)


def _typed(db: PostgresDatabase, clock: Clock, agents: AgentStorage) -> GraphCheckpointStore:
    """Checked by mypy: the PostgreSQL layer satisfies the Protocol."""
    return PostgresGraphCheckpointStore(db, clock, agents)


def postgres_graphs() -> Layer:
    """A layer providing :class:`~runstore.services.GraphCheckpointStore` on the container's
    :class:`PostgresDatabase`; requires it, a ``Clock`` and the ``AgentStorage`` of the same
    database (a first put creates its thread through it, inside the put's unit of work)."""

    def factory(c: Container) -> GraphCheckpointStore:
        return _typed(c.get(PostgresDatabase), c.get(CLOCK), c.get(AGENT_STORAGE))

    return Layer.service(
        GRAPH_CHECKPOINTS, factory, requires=(PostgresDatabase, CLOCK, AGENT_STORAGE)
    )
