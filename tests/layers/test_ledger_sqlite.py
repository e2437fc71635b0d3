"""The live execution ledger beyond the contract: faults, units of work, schema and plans."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from returns.result import Failure, Result, Success

from runstore.layers import (
    CLOCK,
    Container,
    InMemoryActionRunStorage,
    InMemoryDatabase,
    Layer,
    SqliteDatabase,
    build,
    in_memory,
    merge,
    sqlite,
)
from runstore.migrations import apply_migrations
from runstore.services import (
    ActionRunFailure,
    ActionRunStatus,
    ActionRunStorage,
    Execution,
    ExecutionStatus,
    ExecutionStorage,
    FixedClock,
    InvalidInput,
    JsonValue,
    NewActionRun,
    NewExecution,
    StorageFailure,
    StorageFailureKind,
)

T0 = 1_700_000_000_000


@pytest.fixture
def container(tmp_path: Path) -> Iterator[Container]:
    clock = Layer.value(CLOCK, FixedClock(T0))
    with build(merge(sqlite(tmp_path / "ledger.db"), clock)) as built:
        yield built


def _services(container: Container) -> tuple[SqliteDatabase, ExecutionStorage, ActionRunStorage]:
    return (
        container.get(SqliteDatabase),
        container.get(ExecutionStorage),
        container.get(ActionRunStorage),
    )


def _running(executions: ExecutionStorage) -> Execution:
    executions.create(NewExecution("p", "job")).unwrap()
    claimed = executions.claim("p", "w", 60_000).unwrap()
    assert claimed is not None
    return claimed


def _counters(db: SqliteDatabase) -> dict[str, int]:
    return dict(db.execute("SELECT name, value FROM execution_counters"))


# -- fault injection ---------------------------------------------------------------------------


def test_a_failing_finish_leaves_the_running_execution_intact(container: Container) -> None:
    db, executions, _ = _services(container)
    running = _running(executions)
    db.execute(
        "CREATE TRIGGER fail_finish BEFORE UPDATE ON executions WHEN NEW.status = 'succeeded' "
        "BEGIN SELECT RAISE(ABORT, 'injected'); END"
    )
    got = executions.finish(running.id, running.fencing_token, ExecutionStatus.SUCCEEDED, output=1)
    failure = got.failure()
    assert isinstance(failure, StorageFailure)
    assert failure.kind is StorageFailureKind.CONSTRAINT
    assert executions.get(running.id) == Success(running)
    db.execute("DROP TRIGGER fail_finish")
    done = executions.finish(running.id, running.fencing_token, ExecutionStatus.SUCCEEDED, output=1)
    assert done.unwrap().status is ExecutionStatus.SUCCEEDED


def test_a_failing_claim_gives_its_fencing_token_back(container: Container) -> None:
    db, executions, _ = _services(container)
    executions.create(NewExecution("p", "job")).unwrap()
    db.execute(
        "CREATE TRIGGER fail_claim BEFORE UPDATE ON executions WHEN NEW.status = 'running' "
        "BEGIN SELECT RAISE(ABORT, 'injected'); END"
    )
    before = _counters(db)
    assert isinstance(executions.claim("p", "w", 1_000).failure(), StorageFailure)
    assert _counters(db) == before
    db.execute("DROP TRIGGER fail_claim")
    claimed = executions.claim("p", "w", 1_000).unwrap()
    assert claimed is not None
    assert claimed.fencing_token == before["fencing_token"] + 1


def test_a_failing_queue_and_finish_leave_action_runs_intact(container: Container) -> None:
    db, executions, runs = _services(container)
    execution = _running(executions)
    fence = execution.fence
    db.execute(
        "CREATE TRIGGER fail_queue BEFORE INSERT ON action_runs "
        "BEGIN SELECT RAISE(ABORT, 'injected'); END"
    )
    keyed = NewActionRun("p", execution.id, "a", idempotency_key="k")
    assert isinstance(runs.queue(keyed, fence).failure(), StorageFailure)
    assert runs.list("p").unwrap().items == ()
    db.execute("DROP TRIGGER fail_queue")
    run = runs.queue(keyed, fence).unwrap()
    assert run.id == "act_1"
    assert run.seq == 1
    started = runs.start(run.id, fence).unwrap()
    db.execute(
        "CREATE TRIGGER fail_finish BEFORE UPDATE ON action_runs WHEN NEW.phase = 'finished' "
        "BEGIN SELECT RAISE(ABORT, 'injected'); END"
    )
    failure = ActionRunFailure("E", "m", details={"deep": [{"ü": None}]})
    assert isinstance(
        runs.finish(run.id, fence, ActionRunStatus.FAILED, failure).failure(), StorageFailure
    )
    assert runs.get(run.id) == Success(started)
    db.execute("DROP TRIGGER fail_finish")
    assert runs.finish(run.id, fence, ActionRunStatus.FAILED, failure).unwrap().failure is not None
    assert runs.queue(keyed, fence).unwrap().id == run.id


def test_a_full_database_refuses_the_write_and_keeps_what_was_there(container: Container) -> None:
    db, executions, _ = _services(container)
    first = executions.create(NewExecution("p", "job")).unwrap()
    pages = db.scalar("PRAGMA page_count")
    db.execute(f"PRAGMA max_page_count = {pages}")
    big: JsonValue = {"blob": "x" * 200_000}
    got = executions.create(NewExecution("p", "big", input=big))
    failure = got.failure()
    assert isinstance(failure, StorageFailure)
    assert failure.kind is StorageFailureKind.FULL
    assert executions.list("p").unwrap().items == (first,)
    assert _counters(db)["execution_seq"] == 1
    db.execute("PRAGMA max_page_count = 1073741823")
    second = executions.create(NewExecution("p", "big", input=big)).unwrap()
    assert (second.id, second.seq) == ("exe_2", 2)


# -- units of work -----------------------------------------------------------------------------


def _unit_layers() -> list[tuple[str, Callable[[], Layer]]]:
    return [("sqlite", lambda: sqlite(":memory:")), ("in_memory", in_memory)]


@pytest.mark.parametrize(("name", "factory"), _unit_layers())
def test_another_unit_of_work_sees_and_rolls_back_ledger_rows(
    name: str, factory: Callable[[], Layer]
) -> None:
    clock = Layer.value(CLOCK, FixedClock(T0))
    with build(merge(factory(), clock)) as container:
        executions: ExecutionStorage = container.get(ExecutionStorage)
        runs: ActionRunStorage = container.get(ActionRunStorage)
        db: SqliteDatabase | InMemoryDatabase = (
            container.get(SqliteDatabase) if name == "sqlite" else container.get(InMemoryDatabase)
        )
        seen: list[object] = []

        def host_unit() -> Result[None, InvalidInput]:
            made = _running(executions)
            seen.append(executions.get(made.id).unwrap())
            new = NewActionRun("p", made.id, "a", idempotency_key="k")
            seen.append(runs.queue(new, made.fence).unwrap())
            return Failure(InvalidInput("host", "changed its mind"))

        assert db.transact("host", host_unit) == Failure(InvalidInput("host", "changed its mind"))
        assert len(seen) == 2
        assert executions.list("p").unwrap().items == ()
        assert runs.list("p").unwrap().items == ()
        again = _running(executions)
        assert (again.id, again.seq, again.fencing_token) == ("exe_1", 1, 1)
        queued = runs.queue(NewActionRun("p", again.id, "b", idempotency_key="k"), again.fence)
        assert (queued.unwrap().id, queued.unwrap().action_id) == ("act_1", "b")


# -- schema and plans --------------------------------------------------------------------------


def test_the_migration_applies_on_top_of_the_first_schema(tmp_path: Path) -> None:
    db = SqliteDatabase.open(tmp_path / "old.db").unwrap()
    try:
        assert apply_migrations(db, up_to=1).unwrap() == (1,)
        assert 3 in apply_migrations(db).unwrap()
        assert db.execute("PRAGMA integrity_check") == [("ok",)]
        assert db.execute("PRAGMA foreign_key_check") == []
        tables = {r[0] for r in db.execute("SELECT name FROM sqlite_schema WHERE type = 'table'")}
        assert {"executions", "action_runs", "execution_counters"} <= tables
        columns = {r[1]: r for r in db.execute("PRAGMA table_info(executions)")}
        assert columns["id"][2] == "TEXT"
        assert columns["id"][5] == 1
        assert columns["project_id"][2:4] == ("TEXT", 1)
        assert columns["status"][2:4] == ("TEXT", 1)
    finally:
        db.close()


@pytest.mark.parametrize(
    ("sql", "params"),
    [
        (
            "SELECT seq, id FROM executions WHERE project_id = ? AND status = 'queued' "
            "ORDER BY seq LIMIT 1",
            ("p",),
        ),
        (
            "SELECT seq, id FROM executions WHERE project_id = ? AND status = 'running' "
            "AND lease_expires_at_ms <= ? ORDER BY seq LIMIT 1",
            ("p", 0),
        ),
        (
            "SELECT * FROM executions WHERE project_id = ? AND seq > ? ORDER BY seq LIMIT ?",
            ("p", 0, 5),
        ),
        (
            "SELECT * FROM action_runs WHERE project_id = ? AND execution_id = ? AND seq > ? "
            "ORDER BY seq LIMIT ?",
            ("p", "e", 0, 5),
        ),
        (
            "SELECT * FROM action_runs WHERE project_id = ? AND status = ? AND seq > ? "
            "ORDER BY seq LIMIT ?",
            ("p", "queued", 0, 5),
        ),
        (
            "SELECT * FROM action_runs WHERE execution_id = ? AND idempotency_key = ?",
            ("e", "k"),
        ),
    ],
)
def test_hot_queries_use_an_index_and_no_sort(
    container: Container, sql: str, params: tuple[object, ...]
) -> None:
    db, _, _ = _services(container)
    plan = " | ".join(str(r[-1]) for r in db.execute("EXPLAIN QUERY PLAN " + sql, params))  # type: ignore[arg-type]
    assert "USING INDEX" in plan or "USING COVERING INDEX" in plan, plan
    assert "TEMP B-TREE" not in plan, plan


def test_finished_executions_are_immutable_in_the_schema_too(container: Container) -> None:
    db, executions, _ = _services(container)
    running = _running(executions)
    executions.finish(running.id, running.fencing_token, ExecutionStatus.SUCCEEDED).unwrap()
    with pytest.raises(Exception, match="immutable"):
        db.execute("UPDATE executions SET status = 'queued' WHERE id = ?", (running.id,))


def test_action_runs_are_written_only_while_their_execution_runs_in_the_schema_too(
    container: Container,
) -> None:
    db, executions, runs = _services(container)
    running = _running(executions)
    run = runs.queue(NewActionRun("p", running.id, "a"), running.fence).unwrap()
    executions.finish(running.id, running.fencing_token, ExecutionStatus.SUCCEEDED).unwrap()
    with pytest.raises(Exception, match="only while their execution is running"):
        db.execute("UPDATE action_runs SET status = 'running' WHERE id = ?", (run.id,))
    queued = executions.create(NewExecution("p", "later")).unwrap()
    with pytest.raises(Exception, match="only while their execution is running"):
        db.execute(
            "INSERT INTO action_runs (id, project_id, execution_id, seq, action_id, input, "
            "status, phase, attempt, queued_at_ms) "
            "VALUES ('x', 'p', ?, 99, 'a', 'null', 'queued', 'queued', 1, 0)",
            (queued.id,),
        )
    assert runs.list("p").unwrap().items == (run,)


@pytest.mark.parametrize("column", ["writeback_failure", "effects_failure"])
def test_a_stored_phase_failure_naming_another_phase_reads_as_corrupt(
    container: Container, column: str
) -> None:
    db, executions, runs = _services(container)
    running = _running(executions)
    run = runs.queue(NewActionRun("p", running.id, "a"), running.fence).unwrap()
    phase = column.split("_")[0]
    db.execute(
        f"UPDATE action_runs SET status = 'running', phase = ?, {phase}_status = 'failed', "
        f"{phase}_completed_at_ms = 0, {column} = ? WHERE id = ?",
        (phase, '{"name":"E","message":"m","phase":"queued","details":null}', run.id),
    )
    for got in (
        runs.get(run.id),
        runs.list("p"),
        runs.finish(run.id, running.fence, ActionRunStatus.SUCCEEDED),
    ):
        failure = got.failure()
        assert isinstance(failure, StorageFailure), got
        assert (failure.kind, failure.table) == (StorageFailureKind.CORRUPT, "action_runs")
        assert f"its {phase} failure names phase queued" in failure.message
    assert db.execute("SELECT status, phase FROM action_runs") == [("running", phase)]


def test_the_in_memory_layer_reads_a_damaged_phase_failure_as_corrupt_too() -> None:
    with build(merge(in_memory(), Layer.value(CLOCK, FixedClock(T0)))) as container:
        executions: ExecutionStorage = container.get(ExecutionStorage)
        runs = container.get(ActionRunStorage)
        assert isinstance(runs, InMemoryActionRunStorage)
        running = _running(executions)
        run = runs.queue(NewActionRun("p", running.id, "a"), running.fence).unwrap()
        runs._rows[run.id] = runs._rows[run.id]._replace(
            writeback_status="failed",
            writeback_completed_at_ms=0,
            writeback_failure='{"name":"E","message":"m","phase":"effects","details":null}',
        )
        failure = runs.get(run.id).failure()
        assert isinstance(failure, StorageFailure)
        assert failure.kind is StorageFailureKind.CORRUPT
        assert "its writeback failure names phase effects" in failure.message
