"""The execution ledger on PostgreSQL: ``PostgresExecutionStorage`` and
``PostgresActionRunStorage``.

A small adapter. The services are the SQLite layer's load and apply hooks
(``_ledger_sqlite``) over the shared skeleton (``_ledger_shared``), their statements run
through the test-run layer's SQLite-to-PostgreSQL translation (``_postgres_test_runs``), so
both backends run the same statements and the same rules, and give the same ids
(``exe_<n>``, ``act_<n>``), sequence numbers and fencing tokens, all taken from the
``execution_counters`` rows with ``UPDATE ... RETURNING``. What differs is how a unit of work
keeps its facts true until it commits, since PostgreSQL runs writers at once where SQLite's
``BEGIN IMMEDIATE`` runs them one by one.

Isolation, per unit of work. Every write is one ``READ COMMITTED`` transaction of the shared
:class:`PostgresDatabase` (a SAVEPOINT inside another unit) that takes, before it reads a
fact it decides on, the row lock that keeps the fact true:

- ``create``: ``SELECT ... FOR UPDATE`` of the ``execution_seq`` counter row first, so
  creates run one at a time (they would wait on that row for their sequence number anyway)
  and the idempotency key, id and parent lookups see every create committed before.
- ``claim``: the project's oldest queued and oldest lease-expired executions, each read
  with ``FOR UPDATE SKIP LOCKED``: concurrent workers lock different rows, never the same
  one, and never wait for each other's candidates; then the ``fencing_token`` counter row
  (held for the few statements until COMMIT).
- ``renew``, ``finish``, ``cancel``: the execution's row ``FOR UPDATE`` before its status
  and fencing token are checked, so no claim can come between the check and the write.
- Action-run writes (``queue``, ``requeue``, ``start``, ``record_*``, ``finish``): the
  fence's execution row ``FOR SHARE`` before the fence is checked (writers of one
  execution's runs go on together; a claim, renew or finish of that execution waits for
  them, and they for it), then the run row ``FOR UPDATE``; ``queue`` locks the
  ``action_run_seq`` counter row before it looks up the idempotency key or the id.

Locks are always taken in the order execution row, counter row, run row, so the units
cannot deadlock among themselves (a deadlock with other code is retried, then ``Busy``).
Reads (``get``, ``list``) are single statements: each sees the rows committed when it
began, or its own unit's uncommitted rows inside one.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, TypeVar

import psycopg
from returns.result import Failure, Result, Success

from runstore.layers._layer import Container, Layer, merge
from runstore.layers._ledger_sqlite import (
    _SELECT_ACTION_RUN,
    SqliteActionRunStorage,
    SqliteExecutionStorage,
)
from runstore.layers._postgres_database import PostgresDatabase
from runstore.layers._postgres_errors import from_psycopg
from runstore.layers._postgres_test_runs import _as_sqlite, _Dialect
from runstore.layers._tags import ACTION_RUN_STORAGE, EXECUTION_STORAGE
from runstore.services._ledger_rules import ActionRunRow, CreateFacts, ExecutionDraft
from runstore.services.clock import Clock
from runstore.services.errors import Busy, StorageFailure
from runstore.services.ledger import (
    ActionRunError,
    ActionRunStorage,
    ExecutionError,
    ExecutionStorage,
    Fence,
)

__all__ = [
    "PostgresActionRunStorage",
    "PostgresExecutionStorage",
    "postgres_ledger",
]

T = TypeVar("T")
E = TypeVar("E")

_LOCK_COUNTER = "SELECT value FROM execution_counters WHERE name = ? FOR UPDATE"
_OLDEST_QUEUED = (
    "SELECT seq, id FROM executions WHERE project_id = ? AND status = 'queued' "
    "ORDER BY seq LIMIT 1 FOR UPDATE SKIP LOCKED"
)
_OLDEST_EXPIRED = (
    "SELECT seq, id FROM executions WHERE project_id = ? AND status = 'running' "
    "AND lease_expires_at_ms <= ? ORDER BY seq LIMIT 1 FOR UPDATE SKIP LOCKED"
)
_STATE = "SELECT status, fencing_token FROM executions WHERE id = ? FOR UPDATE"
_SHARE_EXECUTION = "SELECT 1 FROM executions WHERE id = ? FOR SHARE"
_LOCK_RUN = f"{_SELECT_ACTION_RUN} FOR UPDATE"


class _LedgerDialect(_Dialect):
    """The SQLite statements of the ledger hooks, run on PostgreSQL, in plain units of work
    (the ledger takes row locks, not the test runs' advisory lock)."""

    def __init__(self, db: PostgresDatabase) -> None:
        super().__init__(db, lock=0)

    def transact(
        self, operation: str, fn: Callable[[], Result[T, E]]
    ) -> Result[T, E | Busy | StorageFailure]:
        return self._pg.transact(operation, fn)


def _run_query(
    db: _Dialect, operation: str, sql: str, params: tuple[Any, ...], table: str
) -> Result[list[Any], Busy | StorageFailure]:
    """Run one read statement; a failing one is ``Busy`` or ``StorageFailure``."""
    try:
        return Success(db.execute(sql, params))
    except psycopg.Error as exc:
        return Failure(from_psycopg(exc, operation=operation, table=table))


class PostgresExecutionStorage(SqliteExecutionStorage):
    """``ExecutionStorage`` on the ``executions`` table of a :class:`PostgresDatabase` (see
    the module docstring for the locks of each unit of work)."""

    def __init__(self, db: PostgresDatabase, clock: Clock) -> None:
        self._dialect = _LedgerDialect(db)
        super().__init__(_as_sqlite(self._dialect), clock)

    def _query(
        self, operation: str, sql: str, params: tuple[Any, ...]
    ) -> Result[list[Any], ExecutionError]:
        return _run_query(self._dialect, operation, sql, params, "executions")

    def _create_facts(self, draft: ExecutionDraft) -> CreateFacts:
        self._dialect.execute(_LOCK_COUNTER, ("execution_seq",))
        return super()._create_facts(draft)

    def _claimable(self, project_id: str, now_ms: int) -> Iterable[tuple[int, str]]:
        expired = self._dialect.one(_OLDEST_EXPIRED, (project_id, now_ms))
        queued = self._dialect.one(_OLDEST_QUEUED, (project_id,))
        return [(row[0], row[1]) for row in (expired, queued) if row is not None]

    def _state(self, execution_id: str) -> tuple[str, int] | None:
        state = self._dialect.one(_STATE, (execution_id,))
        return None if state is None else (state[0], state[1])


class PostgresActionRunStorage(SqliteActionRunStorage):
    """``ActionRunStorage`` on the ``action_runs`` table of a :class:`PostgresDatabase`;
    ``executions`` must be the execution ledger of the same database (see the module
    docstring for the locks of each unit of work)."""

    def __init__(self, db: PostgresDatabase, clock: Clock, executions: ExecutionStorage) -> None:
        self._dialect = _LedgerDialect(db)
        super().__init__(_as_sqlite(self._dialect), clock, executions)

    def _query(
        self, operation: str, sql: str, params: tuple[Any, ...]
    ) -> Result[list[Any], ActionRunError]:
        return _run_query(self._dialect, operation, sql, params, "action_runs")

    def _authorise(self, fence: Fence, project_id: str | None) -> Result[None, ActionRunError]:
        self._dialect.execute(_SHARE_EXECUTION, (fence.execution_id,))
        return super()._authorise(fence, project_id)

    def _row(self, run_id: str) -> ActionRunRow | None:
        found = self._dialect.one(_LOCK_RUN, (run_id,))
        return None if found is None else ActionRunRow(*found)

    def _keyed(self, execution_id: str, idempotency_key: str) -> ActionRunRow | None:
        self._dialect.execute(_LOCK_COUNTER, ("action_run_seq",))
        return super()._keyed(execution_id, idempotency_key)

    def _run_exists(self, run_id: str) -> bool:
        self._dialect.execute(_LOCK_COUNTER, ("action_run_seq",))
        return super()._run_exists(run_id)


def postgres_ledger() -> Layer:
    """The execution ledger, ``ExecutionStorage`` and ``ActionRunStorage``, on the
    container's :class:`PostgresDatabase` (requires it and a ``Clock``)."""

    def executions(c: Container) -> ExecutionStorage:
        return PostgresExecutionStorage(c.get(PostgresDatabase), c.get(Clock))

    def action_runs(c: Container) -> ActionRunStorage:
        return PostgresActionRunStorage(
            c.get(PostgresDatabase), c.get(Clock), c.get(ExecutionStorage)
        )

    return merge(
        Layer.service(EXECUTION_STORAGE, executions, requires=(PostgresDatabase, Clock)),
        Layer.service(
            ACTION_RUN_STORAGE, action_runs, requires=(PostgresDatabase, Clock, ExecutionStorage)
        ),
    )


def _check_protocols(
    db: PostgresDatabase, clock: Clock
) -> tuple[ExecutionStorage, ActionRunStorage]:
    """Static check that both classes satisfy their Protocols (mypy reads this)."""
    executions = PostgresExecutionStorage(db, clock)
    return executions, PostgresActionRunStorage(db, clock, executions)
