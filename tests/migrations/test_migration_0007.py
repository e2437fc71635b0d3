"""Migration 0007 (ledger fencing) on a database written with migrations 0001-0006.

Old action runs are written with plain SQL as the 0006 schema held them. After the upgrade
they read with no idempotency key, the default retry policy and failures without a code
that are not retryable; a worker holding the execution's claim keeps writing them, with
keys, and the schema refuses writes to runs of an execution that is not running.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from returns.result import Failure, Success

from runstore.layers import Layer, SqliteDatabase, build, merge, sqlite
from runstore.migrations import apply_migrations, shipped_migrations
from runstore.services import (
    ActionRunFailure,
    ActionRunId,
    ActionRunPhase,
    ActionRunStatus,
    ActionRunStorage,
    Clock,
    ExecutionId,
    ExecutionStorage,
    Fence,
    FixedClock,
    NewActionRun,
    PhaseFailed,
    RetryRefused,
)
from runstore.services.ledger import DEFAULT_MAX_ATTEMPTS

OLD_SCHEMA = 6
T0 = 1_700_000_000_000

_OLD_ROWS = """
INSERT INTO executions (id, project_id, seq, name, status, input, output, metadata,
    request_digest, created_at_ms, updated_at_ms, started_at_ms, lease_owner,
    lease_expires_at_ms, fencing_token, attempts)
VALUES ('exe_1', 'p', 1, 'job', 'running', 'null', 'null', '{}', 'd', 0, 0, 0, 'w',
    9999999999999, 7, 1),
    ('exe_2', 'p', 2, 'done', 'queued', 'null', 'null', '{}', 'd', 0, 0, NULL, NULL, NULL, 0, 0);
UPDATE execution_counters SET value = 2 WHERE name = 'execution_seq';
UPDATE execution_counters SET value = 7 WHERE name = 'fencing_token';
INSERT INTO action_runs (id, project_id, execution_id, seq, action_id, input, status, phase,
    attempt, queued_at_ms, started_at_ms, finished_at_ms, effects_status,
    effects_completed_at_ms, effects_failure, failure)
VALUES ('act_1', 'p', 'exe_1', 1, 'upload', '{"n":1}', 'failed', 'finished', 4, 0, 1, 3,
    'failed', 2, '{"name":"Timeout","message":"slow","phase":"effects","details":{"s":9}}',
    '{"name":"Timeout","message":"slow","phase":"effects","details":null}'),
    ('act_2', 'p', 'exe_2', 2, 'later', 'null', 'queued', 'queued', 1, 0, NULL, NULL, NULL,
    NULL, NULL, NULL);
UPDATE execution_counters SET value = 2 WHERE name = 'action_run_seq';
"""


def test_the_schema_before_is_0006() -> None:
    assert [m.id for m in shipped_migrations() if m.id <= OLD_SCHEMA] == [1, 2, 3, 4, 5, 6]
    assert any(m.id == 7 and m.name == "ledger_fencing" for m in shipped_migrations())


@pytest.fixture
def upgraded(tmp_path: Path) -> Path:
    path = tmp_path / "old.db"
    db = SqliteDatabase.open(path).unwrap()
    try:
        assert isinstance(apply_migrations(db, up_to=OLD_SCHEMA), Success)
        db.execute(_OLD_ROWS)
    finally:
        db.close()
    return path


def test_old_action_runs_read_with_the_defaults(upgraded: Path) -> None:
    clock = Layer.value(Clock, FixedClock(T0))
    with build(merge(sqlite(upgraded), clock)) as c:
        runs: ActionRunStorage = c.get(ActionRunStorage)
        old = runs.get(ActionRunId("act_1")).unwrap()
        assert (old.idempotency_key, old.max_attempts, old.attempt) == (
            None, DEFAULT_MAX_ATTEMPTS, 4
        )
        assert old.failure == ActionRunFailure("Timeout", "slow", ActionRunPhase.EFFECTS)
        assert old.effects is not None
        assert old.effects.failure == ActionRunFailure(
            "Timeout", "slow", ActionRunPhase.EFFECTS, {"s": 9}
        )
        fence = Fence(ExecutionId("exe_1"), 7)
        assert runs.requeue(old.id, fence) == Failure(
            RetryRefused(old.id, "not_retryable", 4, DEFAULT_MAX_ATTEMPTS)
        )
        repeat = PhaseFailed(ActionRunFailure("Timeout", "slow", details={"s": 9}))
        assert runs.record_effects(old.id, fence, repeat) == Success(old)


def test_a_worker_holding_the_claim_keeps_writing_after_the_upgrade(upgraded: Path) -> None:
    clock = Layer.value(Clock, FixedClock(T0))
    with build(merge(sqlite(upgraded), clock)) as c:
        runs: ActionRunStorage = c.get(ActionRunStorage)
        executions: ExecutionStorage = c.get(ExecutionStorage)
        fence = executions.get(ExecutionId("exe_1")).unwrap().fence
        new = NewActionRun("p", ExecutionId("exe_1"), "next", idempotency_key="k")
        made = runs.queue(new, fence).unwrap()
        assert (made.id, made.seq, made.idempotency_key) == ("act_3", 3, "k")
        assert runs.queue(new, fence) == Success(made)
        done = runs.finish(made.id, fence, ActionRunStatus.CANCELLED).unwrap()
        assert done.status is ActionRunStatus.CANCELLED
        db = c.get(SqliteDatabase)
        with pytest.raises(Exception, match="only while their execution is running"):
            db.execute("UPDATE action_runs SET input = '1' WHERE id = 'act_2'")
        names = {r[0] for r in db.execute("SELECT name FROM sqlite_schema")}
        assert {
            "action_runs_idempotency",
            "action_runs_insert_needs_running_execution",
            "action_runs_update_needs_running_execution",
        } <= names
        assert db.execute("PRAGMA integrity_check") == [("ok",)]
        assert db.execute("PRAGMA foreign_key_check") == []
