"""The execution ledger on a real PostgreSQL server, beyond the contract: processes claiming
one queue, a stale worker in another process, concurrent units racing for one fact, a client
killed inside its transaction, and the schema's own refusals."""

from __future__ import annotations

import multiprocessing
import os
import signal
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import psycopg
import pytest
from returns.result import Failure, Result, Success
from test_ledger_concurrency import claim_until_empty, reclaim, stale_worker_writes

from runstore.layers import build, postgres
from runstore.layers._postgres_database import PostgresDatabase
from runstore.services import (
    ActionRun,
    ActionRunStatus,
    ActionRunStorage,
    Execution,
    ExecutionId,
    ExecutionStatus,
    ExecutionStorage,
    Fence,
    IllegalTransition,
    NewActionRun,
    NewExecution,
    StaleFencingToken,
    StorageFailure,
    StorageFailureKind,
)

WORKERS = 8
EXECUTIONS = 400


@pytest.fixture
def dsn(postgres_dsn: str) -> str:
    """A fresh database with the runstore schema (migrated by opening it once)."""
    with build(postgres(postgres_dsn)):
        pass
    return postgres_dsn


def _counters(dsn: str) -> dict[str, int]:
    with psycopg.connect(dsn) as connection:
        return dict(connection.execute("SELECT name, value FROM execution_counters").fetchall())


def _running(executions: ExecutionStorage, lease_ms: int = 600_000) -> Execution:
    executions.create(NewExecution("q", "job")).unwrap()
    claimed = executions.claim("q", "A", lease_ms).unwrap()
    assert claimed is not None
    return claimed


# -- 8 processes claiming one queue ------------------------------------------------------------


def test_eight_processes_claim_every_execution_exactly_once(dsn: str) -> None:
    with build(postgres(dsn)) as container:
        executions: ExecutionStorage = container.get(ExecutionStorage)
        for i in range(EXECUTIONS):
            executions.create(NewExecution("q", f"job {i}")).unwrap()
    context = multiprocessing.get_context("spawn")
    owners = [f"w{i}" for i in range(WORKERS)]
    with context.Pool(WORKERS) as pool:
        results = pool.starmap(claim_until_empty, [(dsn, owner, postgres) for owner in owners])
    claims = [claim for worker in results for claim in worker]
    ids = [execution_id for execution_id, _ in claims]
    assert len(ids) == EXECUTIONS
    assert len(set(ids)) == EXECUTIONS  # none claimed twice
    assert sorted(token for _, token in claims) == list(range(1, EXECUTIONS + 1))
    with build(postgres(dsn)) as container:
        executions = container.get(ExecutionStorage)
        page = executions.list("q", status=ExecutionStatus.SUCCEEDED, limit=1_000).unwrap()
        assert len(page.items) == EXECUTIONS
        assert {e.attempts for e in page.items} == {1}
        by_id: dict[str, object] = {e.id: e.output for e in page.items}
        for worker, owner in zip(results, owners, strict=True):
            assert all(by_id[execution_id] == owner for execution_id, _ in worker)
    assert _counters(dsn)["fencing_token"] == EXECUTIONS


# -- a stale worker in another process ---------------------------------------------------------


def test_a_stale_worker_in_another_process_is_refused_every_write(dsn: str) -> None:
    with build(postgres(dsn)) as container:
        executions: ExecutionStorage = container.get(ExecutionStorage)
        runs: ActionRunStorage = container.get(ActionRunStorage)
        held = _running(executions, lease_ms=1)
        run = runs.queue(NewActionRun("q", held.id, "write"), held.fence).unwrap()
        started = runs.start(run.id, held.fence).unwrap()
    time.sleep(0.01)
    context = multiprocessing.get_context("spawn")
    with context.Pool(1) as pool:
        execution_id, token = pool.apply(reclaim, (dsn, postgres))
        refused = pool.apply(
            stale_worker_writes, (dsn, run.id, held.id, held.fencing_token, postgres)
        )
    assert (execution_id, token) == (held.id, held.fencing_token + 1)
    stale = StaleFencingToken(held.id, held.fencing_token, token)
    assert refused == [stale] * 6
    with build(postgres(dsn)) as container:
        executions = container.get(ExecutionStorage)
        assert executions.renew(held.id, held.fencing_token, 60_000) == Failure(stale)
        late = executions.finish(held.id, held.fencing_token, ExecutionStatus.SUCCEEDED)
        assert late == Failure(stale)
        runs = container.get(ActionRunStorage)
        assert runs.list("q").unwrap().items == (started,)
        fence = Fence(ExecutionId(held.id), token)
        assert runs.finish(run.id, fence, ActionRunStatus.SUCCEEDED).unwrap().status == "succeeded"


# -- concurrent units racing for one fact (each thread its own container) ----------------------


def _race(dsn: str, threads: int, call: Callable[[Any, int], Result[Any, Any]]) -> list[object]:
    """Run ``call(container, index)`` in ``threads`` threads released at once; return the
    outcomes, in thread order."""
    barrier = threading.Barrier(threads)
    outcomes: list[object] = [None] * threads

    def run(index: int) -> None:
        with build(postgres(dsn)) as container:
            container.get(ExecutionStorage)  # open the pool before the start line
            barrier.wait()
            outcomes[index] = call(container, index)

    workers = [threading.Thread(target=run, args=(i,)) for i in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    return outcomes


def test_concurrent_creates_with_one_key_store_one_execution(dsn: str) -> None:
    new = NewExecution("q", "job", input={"n": 1}, idempotency_key="once")
    outcomes = _race(dsn, 8, lambda c, _: c.get(ExecutionStorage).create(new))
    first = outcomes[0]
    assert isinstance(first, Success)
    assert outcomes == [first] * 8
    assert first.unwrap().id == "exe_1"
    assert _counters(dsn)["execution_seq"] == 1


def test_concurrent_queues_with_one_key_store_one_run(dsn: str) -> None:
    with build(postgres(dsn)) as container:
        held = _running(container.get(ExecutionStorage))
    new = NewActionRun("q", held.id, "write", idempotency_key="once")
    outcomes = _race(dsn, 8, lambda c, _: c.get(ActionRunStorage).queue(new, held.fence))
    first = outcomes[0]
    assert isinstance(first, Success)
    assert outcomes == [first] * 8
    assert first.unwrap().id == "act_1"


def test_concurrent_starts_of_one_run_start_it_once(dsn: str) -> None:
    with build(postgres(dsn)) as container:
        held = _running(container.get(ExecutionStorage))
        run = container.get(ActionRunStorage).queue(NewActionRun("q", held.id, "a"), held.fence)
    run_id = run.unwrap().id
    outcomes = _race(dsn, 8, lambda c, _: c.get(ActionRunStorage).start(run_id, held.fence))
    started = [o for o in outcomes if isinstance(o, Success)]
    assert len(started) == 1
    refused = [o.failure() for o in outcomes if isinstance(o, Failure)]
    assert len(refused) == 7
    assert all(isinstance(error, IllegalTransition) for error in refused)


def test_a_claim_racing_a_finish_never_takes_the_finished_execution(dsn: str) -> None:
    """The lease expired: one thread finishes under the old token while others claim."""
    with build(postgres(dsn)) as container:
        held = _running(container.get(ExecutionStorage), lease_ms=1)
    time.sleep(0.01)

    def call(container: Any, index: int) -> Result[Any, Any]:
        executions: ExecutionStorage = container.get(ExecutionStorage)
        if index == 0:
            return executions.finish(held.id, held.fencing_token, ExecutionStatus.SUCCEEDED)
        return executions.claim("q", "B", 600_000)

    outcomes = _race(dsn, 4, call)
    with build(postgres(dsn)) as container:
        final = container.get(ExecutionStorage).get(held.id).unwrap()
    claimed = [o.unwrap() for o in outcomes if isinstance(o, Success) and o.unwrap() is not None]
    claimed = [e for e in claimed if e.status is ExecutionStatus.RUNNING]
    assert len(claimed) <= 1
    if final.status is ExecutionStatus.SUCCEEDED:  # the finish came first: nobody claimed
        assert claimed == []
    else:  # a claim came first: the finish under the old token was refused
        assert final.status is ExecutionStatus.RUNNING
        assert [final] == claimed


# -- a client killed inside its transaction ----------------------------------------------------


def write_then_hang(dsn: str, execution_id: str, token: int, ready: Any) -> None:
    """Queue three runs and finish the execution inside one unit of work, then hang in it."""
    with build(postgres(dsn)) as container:
        db = container.get(PostgresDatabase)
        runs: ActionRunStorage = container.get(ActionRunStorage)
        executions: ExecutionStorage = container.get(ExecutionStorage)
        fence = Fence(ExecutionId(execution_id), token)

        def unit() -> Result[None, object]:
            for name in ("a", "b", "c"):
                runs.queue(NewActionRun("q", ExecutionId(execution_id), name), fence).unwrap()
            executions.create(NewExecution("q", "half")).unwrap()
            ready.set()
            time.sleep(120)
            return Success(None)

        db.transact("hang", unit)


def test_a_client_killed_mid_transaction_leaves_nothing_half_applied(dsn: str) -> None:
    with build(postgres(dsn)) as container:
        held = _running(container.get(ExecutionStorage))
    before = _counters(dsn)
    context = multiprocessing.get_context("spawn")
    ready = context.Event()
    child = context.Process(target=write_then_hang, args=(dsn, held.id, held.fencing_token, ready))
    child.start()
    try:
        assert ready.wait(60), "the writer never reached the middle of its transaction"
        assert child.pid is not None
        os.kill(child.pid, signal.SIGKILL)
        child.join(30)
    finally:
        if child.is_alive():
            child.kill()
    assert child.exitcode == -signal.SIGKILL
    assert _counters(dsn) == before
    with build(postgres(dsn)) as container:
        executions: ExecutionStorage = container.get(ExecutionStorage)
        runs: ActionRunStorage = container.get(ActionRunStorage)
        assert runs.list("q").unwrap().items == ()
        assert executions.list("q").unwrap().items == (held,)
        # The killed client's row locks went with it: the same writes go through at once.
        got: ActionRun = runs.queue(NewActionRun("q", held.id, "a"), held.fence).unwrap()
        assert (got.id, got.seq) == ("act_1", 1)
        assert executions.create(NewExecution("q", "next")).unwrap().id == "exe_2"


# -- the schema's own refusals -----------------------------------------------------------------


@pytest.fixture
def raw(dsn: str) -> Iterator[psycopg.Connection[Any]]:
    with psycopg.connect(dsn, autocommit=True) as connection:
        yield connection


def test_the_schema_refuses_writing_runs_of_an_execution_that_is_not_running(
    dsn: str, raw: psycopg.Connection[Any]
) -> None:
    with build(postgres(dsn)) as container:
        executions: ExecutionStorage = container.get(ExecutionStorage)
        runs: ActionRunStorage = container.get(ActionRunStorage)
        held = _running(executions)
        run = runs.queue(NewActionRun("q", held.id, "a"), held.fence).unwrap()
        executions.finish(held.id, held.fencing_token, ExecutionStatus.SUCCEEDED).unwrap()
        queued = executions.create(NewExecution("q", "later")).unwrap()
    message = "action runs are written only while their execution is running"
    with pytest.raises(psycopg.errors.IntegrityError, match=message) as update:
        raw.execute("UPDATE action_runs SET status = 'running' WHERE id = %s", (run.id,))
    assert update.value.sqlstate == "23000"
    for execution_id in (queued.id, "missing"):
        with pytest.raises(psycopg.errors.IntegrityError, match=message):
            raw.execute(
                "INSERT INTO action_runs (id, project_id, execution_id, seq, action_id, input, "
                "status, phase, attempt, queued_at_ms) "
                "VALUES ('x', 'q', %s, 99, 'a', 'null', 'queued', 'queued', 1, 0)",
                (execution_id,),
            )
    with pytest.raises(psycopg.errors.IntegrityError, match="immutable"):
        raw.execute("UPDATE executions SET status = 'queued' WHERE id = %s", (held.id,))
    with build(postgres(dsn)) as container:
        assert container.get(ActionRunStorage).list("q").unwrap().items == (run,)


def test_a_duplicate_key_written_past_the_service_is_refused_by_the_index(
    dsn: str, raw: psycopg.Connection[Any]
) -> None:
    with build(postgres(dsn)) as container:
        held = _running(container.get(ExecutionStorage))
        runs: ActionRunStorage = container.get(ActionRunStorage)
        runs.queue(NewActionRun("q", held.id, "a", idempotency_key="k"), held.fence).unwrap()
    with pytest.raises(psycopg.errors.UniqueViolation):
        raw.execute(
            "INSERT INTO action_runs (id, project_id, execution_id, seq, action_id, input, "
            "status, phase, attempt, queued_at_ms, idempotency_key) "
            "VALUES ('x', 'q', %s, 99, 'a', 'null', 'queued', 'queued', 1, 0, 'k')",
            (held.id,),
        )


# -- units that fail ---------------------------------------------------------------------------


def test_an_enclosing_unit_that_fails_rolls_back_its_ledger_writes_and_numbers(dsn: str) -> None:
    with build(postgres(dsn)) as container:
        db = container.get(PostgresDatabase)
        executions: ExecutionStorage = container.get(ExecutionStorage)
        runs: ActionRunStorage = container.get(ActionRunStorage)
        before = _counters(dsn)

        def unit() -> Result[None, str]:
            held = _running(executions)
            runs.queue(NewActionRun("q", held.id, "a"), held.fence).unwrap()
            assert runs.list("q").unwrap().items  # seen inside the unit
            return Failure("changed my mind")

        assert db.transact("outer", unit) == Failure("changed my mind")
        assert _counters(dsn) == before
        assert executions.list("q").unwrap().items == ()
        assert runs.list("q").unwrap().items == ()
        assert executions.create(NewExecution("q", "again")).unwrap().id == "exe_1"


def test_a_claim_whose_write_fails_gives_its_fencing_token_back(
    dsn: str, raw: psycopg.Connection[Any]
) -> None:
    raw.execute(
        "CREATE FUNCTION refuse_doomed() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
        "IF NEW.lease_owner = 'doomed' THEN RAISE EXCEPTION 'refused'; END IF; "
        "RETURN NEW; END; $$"
    )
    raw.execute(
        "CREATE TRIGGER refuse_doomed BEFORE UPDATE ON executions "
        "FOR EACH ROW EXECUTE FUNCTION refuse_doomed()"
    )
    with build(postgres(dsn)) as container:
        executions: ExecutionStorage = container.get(ExecutionStorage)
        queued = executions.create(NewExecution("q", "job")).unwrap()
        before = _counters(dsn)
        failed = executions.claim("q", "doomed", 60_000).failure()
        assert isinstance(failed, StorageFailure)
        assert (failed.kind, failed.sqlstate) == (StorageFailureKind.OTHER, "P0001")
        assert _counters(dsn) == before
        assert executions.get(queued.id).unwrap() == queued
        claimed = executions.claim("q", "fine", 60_000).unwrap()
        assert claimed is not None
        assert claimed.fencing_token == 1
