"""Agent state on PostgreSQL: ``PostgresAgentStorage`` (threads, runs, messages, checkpoints).

A small adapter. The stores are the SQLite layer's hooks (``_agents_sqlite``) over the shared
skeletons (``_agents_shared``), their statements run through the test-run layer's
SQLite-to-PostgreSQL translation (``_postgres_test_runs``; the page statement's named
``:name`` parameters become psycopg's ``%(name)s``), so both backends run the same statements
and the same rules and give the same records, sequence numbers and fencing tokens (taken
from the ``agent_counters`` rows with ``UPDATE ... RETURNING``). What differs is how a unit of
work keeps its facts true until it commits, since PostgreSQL runs writers at once where
SQLite's ``BEGIN IMMEDIATE`` runs them one by one.

Isolation, per unit of work. Every write is one ``READ COMMITTED`` transaction of the shared
:class:`PostgresDatabase` (a SAVEPOINT inside another unit) that, before it reads a fact of a
thread, takes the transaction-level advisory lock of the thread's id
(``pg_advisory_xact_lock(AGENTS_LOCK, hashtext(thread_id))``):

- thread ``create``, ``update``, ``delete``, message appends and ``delete_by_run``, and
  checkpoint ``create`` lock the thread they name; run writes (``queue``, ``start``,
  ``claim``, ``renew``, ``reclaim``, ``finish``, ``cancel``) lock the thread of the run,
  found and locked in one statement before the run is read.
- So the writers of one thread run one at a time, each reading the head, counters, the
  client ids, the running run and every run's token the previous one committed: appenders
  get dense sequence numbers ``head_seq + 1 ..`` and a retried client id finds its stored
  message, two claims of one queued run give one holder and one ``IllegalTransition``, and
  a stale token is refused by whichever unit comes second. The single-flight slot (one
  running run per thread) is also the partial unique index ``agent_runs_single_flight`` of
  migration 0004, whatever code writes. Writers of different threads go on together; they
  meet only on the ``agent_counters`` row they take a value of (held until COMMIT).
- No claim picks a row here: every claim and reclaim names its run, so where the ledger's
  queue skips locked candidates (``FOR UPDATE SKIP LOCKED``), a claim of a run another unit
  is writing waits for that unit and then sees what it committed (skipping would answer
  ``NotFound`` for a run that exists).
- A unit that locks a second thread (a run or checkpoint naming a run of another thread,
  which the rules refuse) may meet another doing the reverse; the server ends one of them as
  a deadlock and the unit is retried (then ``Busy``), as every unit of the database is.

Reads run ``REPEATABLE READ READ ONLY`` (one snapshot) and take no lock; a message page is one
statement. The layer keeps no cache across units (another client may write at any moment).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from functools import lru_cache
from typing import Any, TypeVar

import psycopg
from returns.result import Failure, Result

from runstore.layers._agents_sqlite import (
    Keyed,
    SqliteAgentRunStore,
    SqliteCheckpointStore,
    SqliteMessageStore,
    SqliteThreadStore,
)
from runstore.layers._layer import Container, Layer
from runstore.layers._postgres_database import PostgresDatabase, Row
from runstore.layers._postgres_errors import from_psycopg
from runstore.layers._postgres_ledger import _LedgerDialect
from runstore.layers._postgres_test_runs import _as_sqlite
from runstore.layers._tags import AGENT_STORAGE
from runstore.services import _agents_rules as rules
from runstore.services.agents import AgentError, AgentStorage, Message
from runstore.services.clock import Clock
from runstore.services.errors import Busy, StorageFailure
from runstore.services.ledger import ExecutionStorage
from runstore.services.pagination import Page

__all__ = [
    "AGENTS_LOCK",
    "PostgresAgentRunStore",
    "PostgresAgentStorage",
    "PostgresCheckpointStore",
    "PostgresMessageStore",
    "PostgresThreadStore",
    "postgres_agents",
]

T = TypeVar("T")
E = TypeVar("E")

AGENTS_LOCK = 0x61676E74
"""The first key of every thread's advisory lock (the bytes of ``agnt``, an int4); the second
is ``hashtext`` of the thread id."""

_LOCK_THREAD = "SELECT pg_advisory_xact_lock(?, hashtext(?))"
_LOCK_THREAD_OF_RUN = (
    "SELECT pg_advisory_xact_lock(?, hashtext(t.id)) FROM agent_runs r"
    " JOIN agent_threads t ON t.key = r.thread_key WHERE r.id = ?"
)
_NAMED = re.compile(r"(?<![:\w]):([A-Za-z_]\w*)")
_EMPTY_IN = re.compile(r"\bIN\s*\(\s*\)", re.IGNORECASE)


@lru_cache(maxsize=256)
def _named(sql: str) -> str:
    """The psycopg form of a statement with SQLite's ``:name`` parameters; SQLite's empty
    list ``IN ()`` (an empty roles filter: no row) is PostgreSQL's ``IN (NULL)``."""
    return _EMPTY_IN.sub("IN (NULL)", _NAMED.sub(r"%(\1)s", sql.replace("%", "%%")))


class _AgentsDialect(_LedgerDialect):
    """The SQLite statements of the agent hooks, run on PostgreSQL in plain units of work;
    knows whether the innermost unit writes (only a write unit takes locks: the server
    refuses a lock in a read-only transaction, and reads need none)."""

    def __init__(self, db: PostgresDatabase) -> None:
        super().__init__(db)
        self.writing = False

    def execute(self, sql: str, params: Sequence[Any] | Mapping[str, Any] = ()) -> list[Row]:
        if isinstance(params, Mapping):
            return self._pg.execute(_named(sql), params)
        return super().execute(sql, params)

    def _in_mode(self, writing: bool, fn: Callable[[], Result[T, E]]) -> Callable[[], Result[T, E]]:
        """``fn`` run with :attr:`writing` set to ``writing`` (and back after)."""

        def unit() -> Result[T, E]:
            outer, self.writing = self.writing, writing
            try:
                return fn()
            finally:
                self.writing = outer

        return unit

    def transact(
        self, operation: str, fn: Callable[[], Result[T, E]]
    ) -> Result[T, E | Busy | StorageFailure]:
        return super().transact(operation, self._in_mode(True, fn))

    def read(
        self, operation: str, fn: Callable[[], Result[T, E]]
    ) -> Result[T, E | Busy | StorageFailure]:
        return super().read(operation, self._in_mode(False, fn))

    def lock_thread(self, thread_id: str) -> None:
        """Take the advisory lock of thread ``thread_id`` in a write unit (see the module
        docstring); nothing in a read."""
        if self.writing:
            self.execute(_LOCK_THREAD, (AGENTS_LOCK, thread_id))

    def lock_thread_of_run(self, run_id: str) -> None:
        """Take the advisory lock of the thread of run ``run_id`` (none when there is no such
        run) in a write unit; nothing in a read."""
        if self.writing:
            self.execute(_LOCK_THREAD_OF_RUN, (AGENTS_LOCK, run_id))


class _Locks:
    """The row finders of every store, taking the thread's lock first in a write unit."""

    _dialect: _AgentsDialect

    def _thread(self, thread_id: str) -> Keyed[rules.ThreadRow] | None:
        self._dialect.lock_thread(thread_id)
        found: Keyed[rules.ThreadRow] | None = super()._thread(thread_id)  # type: ignore[misc]
        return found

    def _thread_key(self, thread_id: str) -> int | None:
        self._dialect.lock_thread(thread_id)
        key: int | None = super()._thread_key(thread_id)  # type: ignore[misc]
        return key

    def _run(self, run_id: str) -> Keyed[rules.RunRow] | None:
        self._dialect.lock_thread_of_run(run_id)
        found: Keyed[rules.RunRow] | None = super()._run(run_id)  # type: ignore[misc]
        return found


class PostgresThreadStore(_Locks, SqliteThreadStore):
    """Threads in ``agent_threads`` of a :class:`PostgresDatabase`; see
    :class:`~runstore.services.agents.ThreadStore` and the module docstring for its locks."""

    def __init__(self, db: PostgresDatabase, clock: Clock) -> None:
        self._dialect = _AgentsDialect(db)
        super().__init__(_as_sqlite(self._dialect), clock)

    def _delete_thread(self, thread_id: str) -> bool:
        self._dialect.lock_thread(thread_id)
        return super()._delete_thread(thread_id)


class PostgresAgentRunStore(_Locks, SqliteAgentRunStore):
    """Runs in ``agent_runs`` of a :class:`PostgresDatabase`; see
    :class:`~runstore.services.agents.AgentRunStore` and the module docstring for its locks.
    ``executions`` is the ledger of the same database (read inside the run's unit)."""

    def __init__(self, db: PostgresDatabase, clock: Clock, executions: ExecutionStorage) -> None:
        self._dialect = _AgentsDialect(db)
        super().__init__(_as_sqlite(self._dialect), clock, executions)


class PostgresMessageStore(_Locks, SqliteMessageStore):
    """Messages in ``agent_messages`` and ``agent_message_bodies`` of a
    :class:`PostgresDatabase`; see :class:`~runstore.services.agents.MessageStore`.

    An append takes its thread's lock before it looks its client ids up, so the appenders of
    one thread run one at a time and each takes the sequence numbers after the last one
    committed (dense, none lost or handed out twice).
    """

    def __init__(self, db: PostgresDatabase, clock: Clock) -> None:
        self._dialect = _AgentsDialect(db)
        super().__init__(_as_sqlite(self._dialect), clock)

    def _append(self, request: rules.Append) -> Result[tuple[Message, ...], AgentError]:
        self._dialect.lock_thread(request.thread_id)
        return super()._append(request)

    def _list(self, thread_id: str, query: rules.ListQuery) -> Result[Page[Message], AgentError]:
        try:
            return super()._list(thread_id, query)
        except psycopg.Error as exc:
            return Failure(from_psycopg(exc, operation="list messages", table="agent_messages"))


class PostgresCheckpointStore(_Locks, SqliteCheckpointStore):
    """Checkpoints in ``agent_checkpoints`` of a :class:`PostgresDatabase`; see
    :class:`~runstore.services.agents.CheckpointStore` (a create holds its thread's lock)."""

    def __init__(self, db: PostgresDatabase, clock: Clock) -> None:
        self._dialect = _AgentsDialect(db)
        super().__init__(_as_sqlite(self._dialect), clock)


class PostgresAgentStorage(
    rules.AgentStores[
        PostgresThreadStore, PostgresAgentRunStore, PostgresMessageStore, PostgresCheckpointStore
    ]
):
    """The four agent stores on one :class:`PostgresDatabase`; see
    :class:`~runstore.services.agents.AgentStorage` and the module docstring for the locks.

    ``executions`` is the ledger runs are checked against; give it the ``ExecutionStorage``
    of the same container so the check joins the run's unit of work.
    """

    def __init__(self, db: PostgresDatabase, clock: Clock, executions: ExecutionStorage) -> None:
        super().__init__(
            PostgresThreadStore(db, clock),
            PostgresAgentRunStore(db, clock, executions),
            PostgresMessageStore(db, clock),
            PostgresCheckpointStore(db, clock),
        )


def _typed(db: PostgresDatabase, clock: Clock, executions: ExecutionStorage) -> AgentStorage:
    """Checked by mypy: the PostgreSQL layer satisfies the Protocol."""
    return PostgresAgentStorage(db, clock, executions)


def postgres_agents() -> Layer:
    """A layer providing :class:`~runstore.services.agents.AgentStorage` on the container's
    :class:`PostgresDatabase`; requires it, a ``Clock`` and the ``ExecutionStorage`` of the
    same database (runs are checked against it inside their own unit of work)."""

    def factory(c: Container) -> AgentStorage:
        return _typed(c.get(PostgresDatabase), c.get(Clock), c.get(ExecutionStorage))

    return Layer.service(
        AGENT_STORAGE, factory, requires=(PostgresDatabase, Clock, ExecutionStorage)
    )
