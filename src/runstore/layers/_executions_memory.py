"""The in-memory :class:`~runstore.services.executions.ExecutionStorage`.

All state lives in :class:`~runstore.layers.TxDict` mirrors of the shared
:class:`InMemoryDatabase`, so a unit of work that fails (here or in another in-memory service
calling ``get`` inside its own unit) leaves everything as it was. JSON values are kept as
their stored text and decoded on every read, exactly like the live layer, so callers never
share mutable state with the store.
"""

from __future__ import annotations

import attrs
from returns.result import Failure, Result, Success

from runstore.layers._layer import Container, Layer
from runstore.layers._memory_database import InMemoryDatabase
from runstore.layers._unit_of_work import TxDict
from runstore.services.clock import Clock
from runstore.services.errors import Conflict, IllegalTransition, NotFound
from runstore.services.executions import (
    DEFAULT_LIMIT,
    Execution,
    ExecutionError,
    ExecutionFailure,
    ExecutionId,
    ExecutionStatus,
    ExecutionStorage,
    JsonValue,
    NewExecution,
    ProjectMismatch,
    check_failure,
    check_finish,
    check_held,
    check_lease,
    check_listing,
    check_new_execution,
    check_text,
    check_token,
    dump_failure,
    dump_json,
    load_failure,
    load_json,
    make_page,
    parse_status,
)
from runstore.services.pagination import Page

__all__ = ["InMemoryExecutionStorage", "in_memory_execution_storage"]


@attrs.frozen
class _Row:
    """One execution as the live layer stores it (JSON values as text)."""

    id: ExecutionId
    project_id: str
    status: ExecutionStatus
    seq: int
    name: str
    input: str
    output: str
    failure: str | None
    parent_id: ExecutionId | None
    metadata: str
    idempotency_key: str | None
    request_digest: str
    created_at_ms: int
    updated_at_ms: int
    started_at_ms: int | None = None
    finished_at_ms: int | None = None
    lease_owner: str | None = None
    lease_expires_at_ms: int | None = None
    fencing_token: int = 0
    attempts: int = 0

    def record(self) -> Execution:
        return Execution(
            id=self.id,
            project_id=self.project_id,
            status=self.status,
            seq=self.seq,
            name=self.name,
            input=load_json(self.input),
            output=load_json(self.output),
            failure=load_failure(self.failure),
            parent_id=self.parent_id,
            metadata=load_json(self.metadata),  # type: ignore[arg-type]
            idempotency_key=self.idempotency_key,
            created_at_ms=self.created_at_ms,
            updated_at_ms=self.updated_at_ms,
            started_at_ms=self.started_at_ms,
            finished_at_ms=self.finished_at_ms,
            lease_owner=self.lease_owner,
            lease_expires_at_ms=self.lease_expires_at_ms,
            fencing_token=self.fencing_token,
            attempts=self.attempts,
        )


class InMemoryExecutionStorage:
    """:class:`ExecutionStorage` kept in the mirrors of one :class:`InMemoryDatabase`."""

    def __init__(self, db: InMemoryDatabase, clock: Clock) -> None:
        self._db = db
        self._clock = clock
        self._rows: TxDict[str, _Row] = db.mirror()
        self._keys: TxDict[tuple[str, str], str] = db.mirror()
        self._counters: TxDict[str, int] = db.mirror()

    def _next(self, name: str) -> int:
        value = (self._counters.get(name) or 0) + 1
        self._counters[name] = value
        return value

    def _put(self, row: _Row) -> Execution:
        self._rows[row.id] = row
        return row.record()

    # -- reads ---------------------------------------------------------------------------------

    def get(self, execution_id: ExecutionId) -> Result[Execution, ExecutionError]:
        """See :meth:`ExecutionStorage.get`; ``InvalidInput`` for an id that is not valid text."""
        problem = check_text(execution_id, "execution_id")
        if problem is not None:
            return Failure(problem)
        row = self._rows.get(execution_id)
        if row is None:
            return Failure(NotFound("execution", execution_id))
        return Success(row.record())

    def list(
        self,
        project_id: str,
        *,
        status: ExecutionStatus | None = None,
        limit: int = DEFAULT_LIMIT,
        cursor: str | None = None,
    ) -> Result[Page[Execution], ExecutionError]:
        """See :meth:`ExecutionStorage.list`."""
        wanted = parse_status(status)
        if isinstance(wanted, Failure):
            return Failure(wanted.failure())
        checked = check_listing(project_id, limit, cursor, "e")
        if isinstance(checked, Failure):
            return Failure(checked.failure())
        size, after = checked.unwrap()
        only = wanted.unwrap()
        rows = sorted(
            (
                r
                for r in self._rows.values()
                if r.project_id == project_id
                and r.seq > after
                and (only is None or r.status is only)
            ),
            key=lambda r: r.seq,
        )[: size + 1]
        return Success(make_page([r.record() for r in rows], size, "e", lambda e: e.seq))

    # -- writes --------------------------------------------------------------------------------

    def create(self, new: NewExecution) -> Result[Execution, ExecutionError]:
        """See :meth:`ExecutionStorage.create`."""
        problem = check_new_execution(new)
        if problem is not None:
            return Failure(problem)
        return self._db.transact("create execution", lambda: self._create(new))

    def _create(self, new: NewExecution) -> Result[Execution, ExecutionError]:
        digest = new.digest()
        if new.idempotency_key is not None:
            existing_id = self._keys.get((new.project_id, new.idempotency_key))
            if existing_id is not None:
                existing = self._rows[existing_id]
                if existing.request_digest == digest:
                    return Success(existing.record())
                return Failure(
                    Conflict(
                        "execution",
                        existing.id,
                        f"idempotency key {new.idempotency_key!r} was used for a different request",
                    )
                )
        if new.id is not None and new.id in self._rows:
            return Failure(Conflict("execution", new.id, "an execution with this id exists"))
        if new.parent_id is not None:
            parent = self._rows.get(new.parent_id)
            if parent is None:
                return Failure(NotFound("execution", new.parent_id))
            if parent.project_id != new.project_id:
                return Failure(
                    ProjectMismatch("execution", new.parent_id, new.project_id, parent.project_id)
                )
        seq = self._next("execution_seq")
        now = self._clock.now_ms()
        row = _Row(
            id=new.id if new.id is not None else ExecutionId(f"exe_{seq}"),
            project_id=new.project_id,
            status=ExecutionStatus.QUEUED,
            seq=seq,
            name=new.name,
            input=dump_json(new.input),
            output="null",
            failure=None,
            parent_id=new.parent_id,
            metadata=dump_json(new.metadata),
            idempotency_key=new.idempotency_key,
            request_digest=digest,
            created_at_ms=now,
            updated_at_ms=now,
        )
        if new.idempotency_key is not None:
            self._keys[(new.project_id, new.idempotency_key)] = row.id
        return Success(self._put(row))

    def claim(
        self, project_id: str, owner: str, lease_ms: int
    ) -> Result[Execution | None, ExecutionError]:
        """See :meth:`ExecutionStorage.claim`."""
        problem = (
            check_text(project_id, "project_id")
            or check_text(owner, "owner")
            or check_lease(lease_ms)
        )
        if problem is not None:
            return Failure(problem)

        def claim() -> Result[Execution | None, ExecutionError]:
            now = self._clock.now_ms()
            claimable = [
                r
                for r in self._rows.values()
                if r.project_id == project_id
                and (
                    r.status is ExecutionStatus.QUEUED
                    or (
                        r.status is ExecutionStatus.RUNNING
                        and r.lease_expires_at_ms is not None
                        and r.lease_expires_at_ms <= now
                    )
                )
            ]
            if not claimable:
                return Success(None)
            row = min(claimable, key=lambda r: r.seq)
            token = self._next("fencing_token")
            return Success(
                self._put(
                    attrs.evolve(
                        row,
                        status=ExecutionStatus.RUNNING,
                        started_at_ms=row.started_at_ms if row.started_at_ms is not None else now,
                        lease_owner=owner,
                        lease_expires_at_ms=now + lease_ms,
                        fencing_token=token,
                        attempts=row.attempts + 1,
                        updated_at_ms=now,
                    )
                )
            )

        return self._db.transact("claim execution", claim)

    def _state(self, execution_id: str) -> tuple[str, int] | None:
        row = self._rows.get(execution_id)
        return None if row is None else (row.status.value, row.fencing_token)

    def renew(
        self, execution_id: ExecutionId, fencing_token: int, lease_ms: int
    ) -> Result[Execution, ExecutionError]:
        """See :meth:`ExecutionStorage.renew`."""
        problem = (
            check_text(execution_id, "execution_id")
            or check_token(fencing_token)
            or check_lease(lease_ms)
        )
        if problem is not None:
            return Failure(problem)

        def renew() -> Result[Execution, ExecutionError]:
            held = check_held(execution_id, self._state(execution_id), fencing_token, None)
            if held is not None:
                return Failure(held)
            now = self._clock.now_ms()
            row = self._rows[execution_id]
            return Success(
                self._put(attrs.evolve(row, lease_expires_at_ms=now + lease_ms, updated_at_ms=now))
            )

        return self._db.transact("renew execution lease", renew)

    def finish(
        self,
        execution_id: ExecutionId,
        fencing_token: int,
        status: ExecutionStatus,
        *,
        output: JsonValue = None,
        failure: ExecutionFailure | None = None,
    ) -> Result[Execution, ExecutionError]:
        """See :meth:`ExecutionStorage.finish`."""
        problem = check_text(execution_id, "execution_id") or check_token(fencing_token)
        if problem is not None:
            return Failure(problem)
        checked = check_finish(status, output, failure)
        if isinstance(checked, Failure):
            return Failure(checked.failure())
        target = checked.unwrap()

        def finish() -> Result[Execution, ExecutionError]:
            held = check_held(execution_id, self._state(execution_id), fencing_token, target)
            if held is not None:
                return Failure(held)
            now = self._clock.now_ms()
            row = self._rows[execution_id]
            return Success(
                self._put(
                    attrs.evolve(
                        row,
                        status=target,
                        output=dump_json(output),
                        failure=dump_failure(failure),
                        finished_at_ms=now,
                        updated_at_ms=now,
                        lease_expires_at_ms=None,
                    )
                )
            )

        return self._db.transact("finish execution", finish)

    def cancel(
        self, execution_id: ExecutionId, failure: ExecutionFailure | None = None
    ) -> Result[Execution, ExecutionError]:
        """See :meth:`ExecutionStorage.cancel`."""
        problem = check_text(execution_id, "execution_id") or check_failure(failure, "failure")
        if problem is not None:
            return Failure(problem)

        def cancel() -> Result[Execution, ExecutionError]:
            row = self._rows.get(execution_id)
            if row is None:
                return Failure(NotFound("execution", execution_id))
            if row.status.is_finished:
                return Failure(
                    IllegalTransition(
                        "execution", execution_id, row.status.value, ExecutionStatus.CANCELLED.value
                    )
                )
            now = self._clock.now_ms()
            return Success(
                self._put(
                    attrs.evolve(
                        row,
                        status=ExecutionStatus.CANCELLED,
                        failure=dump_failure(failure),
                        finished_at_ms=now,
                        updated_at_ms=now,
                        lease_expires_at_ms=None,
                    )
                )
            )

        return self._db.transact("cancel execution", cancel)


def _typed(db: InMemoryDatabase, clock: Clock) -> ExecutionStorage:
    return InMemoryExecutionStorage(db, clock)


def in_memory_execution_storage() -> Layer:
    """A layer providing :class:`ExecutionStorage` on the container's :class:`InMemoryDatabase`."""

    def factory(c: Container) -> ExecutionStorage:
        return _typed(c.get(InMemoryDatabase), c.get(Clock))

    return Layer.service(
        ExecutionStorage,  # type: ignore[type-abstract]
        factory,
        requires=(InMemoryDatabase, Clock),
    )
