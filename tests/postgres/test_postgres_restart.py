"""A PostgreSQL server restarted under a built container: the calls made while it is down
are typed failures, the unit in flight at the restart is not half-applied, and the same
container serves reads and writes once the server is back.

The test runs a server of its own (the session's server stays up for every other test),
stopped in teardown whatever happened. Every call of the container runs on one worker
thread (a unit of work belongs to the thread that made it), so that the main thread can
stop the server while a unit waits inside its transaction.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from datetime import UTC, datetime
from typing import Any, TypeVar

import psycopg
import pytest
from returns.result import Failure, Result, Success

from postgres.server import TestServer
from runstore.layers import Container, build, postgres
from runstore.layers._postgres_database import PostgresSettings
from runstore.services import DataReader, DataStore, ExecutionStorage, NewExecution, Outcome
from runstore.services.agents import AgentStorage
from runstore.services.errors import StorageFailure, StorageFailureKind
from runstore.services.test_runs import RunId, RunStart, RunStatus
from runstore.testing import make_item

T = TypeVar("T")

HOLD = 4_242
"""The advisory lock a trigger on ``test_cases`` waits for, so that a batch stops inside its
transaction after its rows were written."""

BATCH = 50
"""Items of the batch in flight at the restart."""

_WAITS_IN_THE_TRIGGER = """
CREATE FUNCTION hold_test_cases() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN PERFORM pg_advisory_xact_lock_shared(4242); RETURN NULL; END $$;
CREATE TRIGGER hold_test_cases AFTER INSERT ON test_cases
FOR EACH STATEMENT EXECUTE FUNCTION hold_test_cases();
"""


@pytest.fixture
def server() -> Iterator[TestServer]:
    """A server of this test's own, stopped and removed after it, even on failure."""
    own = TestServer(durable=True)
    try:
        yield own
    finally:
        own.stop()


class _Worker:
    """The container, built and used on one thread."""

    def __init__(self, dsn: str) -> None:
        self._thread = ThreadPoolExecutor(max_workers=1)
        # connect_timeout_s=1: a call while the server is down fails after 1 s, not 10
        layer = postgres(dsn, PostgresSettings(connect_timeout_s=1, busy_budget_ms=2_000))
        self._built = build(layer)
        self.container: Container = self.call(self._built.__enter__)

    def submit(self, fn: Callable[[Container], T]) -> Future[T]:
        return self._thread.submit(fn, self.container)

    def call(self, fn: Callable[[], T]) -> T:
        return self._thread.submit(fn).result(timeout=60)

    def run(self, fn: Callable[[Container], T]) -> T:
        return self.submit(fn).result(timeout=60)

    def close(self) -> None:
        try:
            self.call(lambda: self._built.__exit__(None, None, None))
        finally:
            self._thread.shutdown(wait=True)


def _begin(c: Container, project: str) -> Result[Any, Any]:
    start = RunStart(project, f"inv-{project}", datetime.now(UTC))
    return c.get(DataStore).begin_run(start)


def _batch(c: Container, run_id: RunId, prefix: str) -> Result[Any, Any]:
    items = [make_item(f"tests/test_{prefix}.py::test_{i}", Outcome.PASSED) for i in range(BATCH)]
    return c.get(DataStore).record_results(run_id, items)


def _claim(c: Container) -> Result[Any, Any]:
    return c.get(ExecutionStorage).claim("p", "w1", 60_000)


def _append(c: Container, text: str) -> Result[Any, Any]:
    return c.get(AgentStorage).messages.append("t", role="user", content=text)


def _connection_failure(outcome: Result[Any, Any], what: str) -> None:
    assert isinstance(outcome, Failure), f"{what}: {outcome!r}"
    failure = outcome.failure()
    assert isinstance(failure, StorageFailure), f"{what}: {failure!r}"
    assert failure.kind is StorageFailureKind.CONNECTION, f"{what}: {failure!r}"


def _wait_for_the_held_batch(admin: psycopg.Connection[Any]) -> None:
    """Until a session waits for :data:`HOLD` (the batch is inside its transaction)."""
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        waiting = admin.execute(
            "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND objid = %s"
            " AND NOT granted", (HOLD,)
        ).fetchone()
        if waiting is not None and waiting[0]:
            return
        time.sleep(0.01)
    raise AssertionError("the batch never reached the held trigger")


def test_a_restart_gives_typed_failures_and_the_same_container_recovers(
    server: TestServer,
) -> None:
    worker = _Worker(server.dsn)
    try:
        first = worker.run(lambda c: _begin(c, "alpha")).unwrap()
        assert _batch_ok(worker, first, "before")
        worker.run(lambda c: c.get(ExecutionStorage).create(NewExecution("p", "job"))).unwrap()
        worker.run(lambda c: c.get(AgentStorage).threads.create("t", project_id="p")).unwrap()
        worker.run(lambda c: _append(c, "before")).unwrap()
        with psycopg.connect(server.dsn, autocommit=True) as admin:
            admin.execute(_WAITS_IN_THE_TRIGGER)
            admin.execute("SELECT pg_advisory_lock(%s)", (HOLD,))
            in_flight = worker.submit(lambda c: _batch(c, first, "in_flight"))
            _wait_for_the_held_batch(admin)
            server.halt()
            _connection_failure(in_flight.result(timeout=60), "the batch in flight")

        # while the server is down
        _connection_failure(worker.run(lambda c: _begin(c, "beta")), "begin_run")
        _connection_failure(worker.run(_claim), "claim")
        _connection_failure(worker.run(lambda c: _append(c, "down")), "append")

        server.start()
        # back: the same container reads and writes, with nothing of the cut batch stored
        stored = worker.run(lambda c: c.get(DataReader).tests(first)).unwrap()
        names = {t.nodeid.split("::")[0] for t in stored}
        assert names == {"tests/test_before.py"}  # the in-flight batch is wholly absent
        assert len(stored) == BATCH
        assert _batch_ok(worker, first, "after")
        finished = worker.run(
            lambda c: c.get(DataStore).finish_run(first, RunStatus.PASSED, datetime.now(UTC))
        ).unwrap()
        assert finished.counts["passed"] == 2 * BATCH
        claimed = worker.run(_claim).unwrap()
        assert claimed is not None
        assert claimed.lease_owner == "w1"
        appended = worker.run(lambda c: _append(c, "after")).unwrap()
        assert appended.seq == 2  # the append refused while down took no seq
        assert isinstance(worker.run(lambda c: _begin(c, "beta")), Success)
    finally:
        worker.close()


def _batch_ok(worker: _Worker, run_id: RunId, prefix: str) -> bool:
    return worker.run(lambda c: _batch(c, run_id, prefix)) == Success(BATCH)
