"""The in-memory :class:`~runstore.services.executions.ExecutionStorage`.

All state lives in :class:`~runstore.layers.TxDict` mirrors of the shared
:class:`InMemoryDatabase`, so a unit of work that fails (here or in another in-memory service
calling ``get`` inside its own unit) leaves everything as it was. Rows are kept in the live
layer's at-rest form (:class:`ExecutionRow`, JSON as text) and turned into records by the same
rules, so callers never share mutable state with the store. The rules themselves (checks and
decisions) live in :mod:`runstore.services._ledger_rules`; this layer only stores and finds.
"""

from __future__ import annotations

from collections.abc import Iterable

from returns.result import Failure, Result, Success

from runstore.layers._layer import Container, Layer
from runstore.layers._ledger_shared import ExecutionStorageBase
from runstore.layers._memory_database import InMemoryDatabase
from runstore.layers._tags import EXECUTION_STORAGE
from runstore.layers._unit_of_work import TxDict
from runstore.services._ledger_rules import (
    Claim,
    CreateFacts,
    ExecutionDraft,
    ExecutionRow,
    Listing,
    Renew,
    execution_page,
    execution_record,
    is_claimable,
)
from runstore.services.clock import Clock
from runstore.services.errors import NotFound
from runstore.services.executions import (
    Execution,
    ExecutionError,
    ExecutionStatus,
    ExecutionStorage,
)
from runstore.services.pagination import Page

__all__ = ["InMemoryExecutionStorage", "in_memory_execution_storage"]


class InMemoryExecutionStorage(ExecutionStorageBase):
    """:class:`ExecutionStorage` kept in the mirrors of one :class:`InMemoryDatabase`."""

    _db: InMemoryDatabase

    def __init__(self, db: InMemoryDatabase, clock: Clock) -> None:
        self._db = db
        self._clock = clock
        self._rows: TxDict[str, ExecutionRow] = db.mirror()
        self._keys: TxDict[tuple[str, str], str] = db.mirror()
        self._counters: TxDict[str, int] = db.mirror()

    def _next(self, name: str) -> int:
        value = (self._counters.get(name) or 0) + 1
        self._counters[name] = value
        return value

    def _put(self, row: ExecutionRow) -> Execution:
        self._rows[row.id] = row
        return execution_record(row)

    # -- facts ---------------------------------------------------------------------------------

    def _get(self, execution_id: str) -> Result[Execution, ExecutionError]:
        row = self._rows.get(execution_id)
        if row is None:
            return Failure(NotFound("execution", execution_id))
        return Success(execution_record(row))

    def _list(self, query: Listing) -> Result[Page[Execution], ExecutionError]:
        rows = sorted(
            (
                r
                for r in self._rows.values()
                if r.project_id == query.project_id
                and r.seq > query.after_seq
                and (query.status is None or r.status == query.status)
            ),
            key=lambda r: r.seq,
        )
        return Success(execution_page(rows[: query.limit + 1], query.limit))

    def _create_facts(self, draft: ExecutionDraft) -> CreateFacts:
        new = draft.new
        keyed = None
        if new.idempotency_key is not None:
            keyed = self._rows.get(self._keys.get((new.project_id, new.idempotency_key), ""))
        parent = None if new.parent_id is None else self._rows.get(new.parent_id)
        return CreateFacts(
            keyed=None if keyed is None else (execution_record(keyed), keyed.request_digest),
            id_taken=new.id in self._rows,
            parent_project=None if parent is None else parent.project_id,
        )

    def _claimable(self, project_id: str, now_ms: int) -> Iterable[tuple[int, str]]:
        return (
            (r.seq, r.id)
            for r in self._rows.values()
            if r.project_id == project_id and is_claimable(r.status, r.lease_expires_at_ms, now_ms)
        )

    def _state(self, execution_id: str) -> tuple[str, int] | None:
        row = self._rows.get(execution_id)
        return None if row is None else (row.status, row.fencing_token)

    # -- writes --------------------------------------------------------------------------------

    def _insert(self, draft: ExecutionDraft) -> Execution:
        row = draft.row(self._next("execution_seq"), self._clock.now_ms())
        if row.idempotency_key is not None:
            self._keys[(row.project_id, row.idempotency_key)] = row.id
        return self._put(row)

    def _grant(self, execution_id: str, claim: Claim, now_ms: int) -> Execution:
        row = self._rows[execution_id]
        return self._put(
            row._replace(
                status=ExecutionStatus.RUNNING.value,
                started_at_ms=now_ms if row.started_at_ms is None else row.started_at_ms,
                lease_owner=claim.owner,
                lease_expires_at_ms=now_ms + claim.lease_ms,
                fencing_token=self._next("fencing_token"),
                attempts=row.attempts + 1,
                updated_at_ms=now_ms,
            )
        )

    def _extend(self, renew: Renew) -> Execution:
        now = self._clock.now_ms()
        row = self._rows[renew.execution_id]
        return self._put(row._replace(lease_expires_at_ms=now + renew.lease_ms, updated_at_ms=now))

    def _end(
        self, execution_id: str, status: str, failure_json: str | None, output_json: str | None
    ) -> Execution:
        now = self._clock.now_ms()
        row = self._rows[execution_id]
        return self._put(
            row._replace(
                status=status,
                output=row.output if output_json is None else output_json,
                failure=failure_json,
                finished_at_ms=now,
                updated_at_ms=now,
                lease_expires_at_ms=None,
            )
        )


def _typed(db: InMemoryDatabase, clock: Clock) -> ExecutionStorage:
    return InMemoryExecutionStorage(db, clock)


def in_memory_execution_storage() -> Layer:
    """A layer providing :class:`ExecutionStorage` on the container's :class:`InMemoryDatabase`."""

    def factory(c: Container) -> ExecutionStorage:
        return _typed(c.get(InMemoryDatabase), c.get(Clock))

    return Layer.service(
        EXECUTION_STORAGE,
        factory,
        requires=(InMemoryDatabase, Clock),
    )
