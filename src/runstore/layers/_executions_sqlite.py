"""The live :class:`~runstore.services.executions.ExecutionStorage`: the ``executions`` table.

Every write is one unit of work on the shared :class:`SqliteDatabase` (``BEGIN IMMEDIATE``
outermost, a SAVEPOINT inside another service's unit); reads are single statements, so a
read inside another unit of work sees its uncommitted rows. Sequences and fencing tokens
come from the ``execution_counters`` rows, so they are dense and never reused: a unit that
rolls back gives its numbers back with its rows. The rules (checks and decisions) live in
:mod:`runstore.services._ledger_rules`; this layer holds the SQL that loads and applies.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import apsw
from returns.result import Failure, Result, Success

from runstore.layers._layer import Container, Layer
from runstore.layers._ledger_shared import ExecutionStorageBase
from runstore.layers._sqlite_database import SqliteDatabase
from runstore.layers._sqlite_errors import from_apsw
from runstore.layers._tags import EXECUTION_STORAGE
from runstore.services._ledger_rules import (
    EXECUTION_COLUMNS,
    Claim,
    CreateFacts,
    ExecutionDraft,
    Listing,
    Renew,
    execution_page,
    execution_record,
)
from runstore.services.clock import Clock
from runstore.services.errors import NotFound
from runstore.services.executions import Execution, ExecutionError, ExecutionStorage
from runstore.services.pagination import Page

__all__ = ["SqliteExecutionStorage", "next_counter", "sqlite_execution_storage"]

COLUMNS = ", ".join(EXECUTION_COLUMNS)

_SELECT_BY_ID = f"SELECT {COLUMNS} FROM executions WHERE id = ?"
_SELECT_BY_KEY = (
    f"SELECT {COLUMNS}, request_digest FROM executions WHERE project_id = ? AND idempotency_key = ?"
)
_INSERT = (
    f"INSERT INTO executions ({COLUMNS}, request_digest) "
    f"VALUES ({', '.join('?' * (len(EXECUTION_COLUMNS) + 1))}) RETURNING {COLUMNS}"
)
_OLDEST_QUEUED = (
    "SELECT seq, id FROM executions WHERE project_id = ? AND status = 'queued' ORDER BY seq LIMIT 1"
)
_OLDEST_EXPIRED = (
    "SELECT seq, id FROM executions WHERE project_id = ? AND status = 'running' "
    "AND lease_expires_at_ms <= ? ORDER BY seq LIMIT 1"
)
_CLAIM = (
    "UPDATE executions SET status = 'running', started_at_ms = coalesce(started_at_ms, ?), "
    "lease_owner = ?, lease_expires_at_ms = ?, fencing_token = ?, attempts = attempts + 1, "
    f"updated_at_ms = ? WHERE id = ? RETURNING {COLUMNS}"
)
_STATE = "SELECT status, fencing_token FROM executions WHERE id = ?"
_RENEW = (
    "UPDATE executions SET lease_expires_at_ms = ?, updated_at_ms = ? WHERE id = ? "
    f"RETURNING {COLUMNS}"
)
_END = (
    "UPDATE executions SET status = ?, output = coalesce(?, output), failure = ?, "
    "finished_at_ms = ?, updated_at_ms = ?, lease_expires_at_ms = NULL WHERE id = ? "
    f"RETURNING {COLUMNS}"
)
_COUNTER = "UPDATE execution_counters SET value = value + 1 WHERE name = ? RETURNING value"


def next_counter(db: SqliteDatabase, name: str) -> int:
    """Take the next value of counter ``name`` (inside the caller's unit of work)."""
    value: int = db.execute(_COUNTER, (name,))[0][0]
    return value


class SqliteExecutionStorage(ExecutionStorageBase):
    """:class:`ExecutionStorage` on the ``executions`` table of one :class:`SqliteDatabase`."""

    _db: SqliteDatabase

    def __init__(self, db: SqliteDatabase, clock: Clock) -> None:
        self._db = db
        self._clock = clock

    # -- facts ---------------------------------------------------------------------------------

    def _query(
        self, operation: str, sql: str, params: tuple[Any, ...]
    ) -> Result[list[Any], ExecutionError]:
        try:
            return Success(self._db.execute(sql, params))
        except apsw.Error as exc:
            return Failure(from_apsw(exc, operation=operation, table="executions"))

    def _get(self, execution_id: str) -> Result[Execution, ExecutionError]:
        found = self._query("get execution", _SELECT_BY_ID, (execution_id,))
        if isinstance(found, Failure):
            return Failure(found.failure())
        rows = found.unwrap()
        if not rows:
            return Failure(NotFound("execution", execution_id))
        return Success(execution_record(rows[0]))

    def _list(self, query: Listing) -> Result[Page[Execution], ExecutionError]:
        if query.status is None:
            sql = (
                f"SELECT {COLUMNS} FROM executions WHERE project_id = ? AND seq > ? "
                "ORDER BY seq LIMIT ?"
            )
            params: tuple[Any, ...] = (query.project_id, query.after_seq, query.limit + 1)
        else:
            sql = (
                f"SELECT {COLUMNS} FROM executions WHERE project_id = ? AND status = ? "
                "AND seq > ? ORDER BY seq LIMIT ?"
            )
            params = (query.project_id, query.status, query.after_seq, query.limit + 1)
        return self._query("list executions", sql, params).map(
            lambda rows: execution_page(rows, query.limit)
        )

    def _create_facts(self, draft: ExecutionDraft) -> CreateFacts:
        db, new = self._db, draft.new
        keyed = None
        if new.idempotency_key is not None:
            keyed = db.one(_SELECT_BY_KEY, (new.project_id, new.idempotency_key))
        parent = None
        if new.parent_id is not None:
            parent = db.one("SELECT project_id FROM executions WHERE id = ?", (new.parent_id,))
        return CreateFacts(
            keyed=None if keyed is None else (execution_record(keyed), keyed[-1]),
            id_taken=new.id is not None
            and db.one("SELECT 1 FROM executions WHERE id = ?", (new.id,)) is not None,
            parent_project=None if parent is None else parent[0],
        )

    def _claimable(self, project_id: str, now_ms: int) -> Iterable[tuple[int, str]]:
        expired = self._db.one(_OLDEST_EXPIRED, (project_id, now_ms))
        queued = self._db.one(_OLDEST_QUEUED, (project_id,))
        return [(row[0], row[1]) for row in (expired, queued) if row is not None]

    def _state(self, execution_id: str) -> tuple[str, int] | None:
        state = self._db.one(_STATE, (execution_id,))
        return None if state is None else (state[0], state[1])

    # -- writes --------------------------------------------------------------------------------

    def _insert(self, draft: ExecutionDraft) -> Execution:
        row = draft.row(next_counter(self._db, "execution_seq"), self._clock.now_ms())
        return execution_record(self._db.execute(_INSERT, row)[0])

    def _grant(self, execution_id: str, claim: Claim, now_ms: int) -> Execution:
        token = next_counter(self._db, "fencing_token")
        params = (now_ms, claim.owner, now_ms + claim.lease_ms, token, now_ms, execution_id)
        return execution_record(self._db.execute(_CLAIM, params)[0])

    def _extend(self, renew: Renew) -> Execution:
        now = self._clock.now_ms()
        params = (now + renew.lease_ms, now, renew.execution_id)
        return execution_record(self._db.execute(_RENEW, params)[0])

    def _end(
        self, execution_id: str, status: str, failure_json: str | None, output_json: str | None
    ) -> Execution:
        now = self._clock.now_ms()
        params = (status, output_json, failure_json, now, now, execution_id)
        return execution_record(self._db.execute(_END, params)[0])


def _typed(db: SqliteDatabase, clock: Clock) -> ExecutionStorage:
    return SqliteExecutionStorage(db, clock)


def sqlite_execution_storage() -> Layer:
    """A layer providing :class:`ExecutionStorage` on the container's :class:`SqliteDatabase`."""

    def factory(c: Container) -> ExecutionStorage:
        return _typed(c.get(SqliteDatabase), c.get(Clock))

    return Layer.service(
        EXECUTION_STORAGE,
        factory,
        requires=(SqliteDatabase, Clock),
    )
