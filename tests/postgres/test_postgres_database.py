"""The PostgreSQL unit of work on a real server: Result-aware commits, savepoints, mirrors,
SQLSTATE classification, retries, lost connections and password redaction."""

from __future__ import annotations

from collections.abc import Iterator

import psycopg
import pytest
from returns.result import Failure, Result, Success

from runstore.layers._postgres_database import PostgresDatabase, PostgresSettings
from runstore.layers._postgres_errors import redact
from runstore.layers._unit_of_work import TxDict
from runstore.services.errors import Busy, NotFound, StorageFailure, StorageFailureKind


@pytest.fixture
def db(postgres_dsn: str) -> Iterator[PostgresDatabase]:
    opened = PostgresDatabase.open(
        postgres_dsn, PostgresSettings(lock_timeout_ms=50, busy_budget_ms=300)
    ).unwrap()
    opened.execute("CREATE TABLE t (id BIGINT PRIMARY KEY, note TEXT)")
    opened.execute("CREATE TABLE child (id BIGINT REFERENCES t (id))")
    yield opened
    opened.close()


def _ids(db: PostgresDatabase) -> list[int]:
    return [r[0] for r in db.execute("SELECT id FROM t ORDER BY id")]


def _insert(db: PostgresDatabase, value: int) -> Result[int, NotFound]:
    db.execute("INSERT INTO t (id) VALUES (%s)", (value,))
    return Success(value)


def test_success_commits_and_failure_rolls_back(db: PostgresDatabase) -> None:
    assert db.transact("ok", lambda: _insert(db, 1)) == Success(1)

    def fails() -> Result[int, NotFound]:
        _insert(db, 2)
        return Failure(NotFound("t", "2"))

    assert db.transact("no", fails) == Failure(NotFound("t", "2"))
    assert _ids(db) == [1]


def test_an_exception_rolls_back_and_propagates(db: PostgresDatabase) -> None:
    def boom() -> Result[int, NotFound]:
        _insert(db, 3)
        raise KeyError("bug")

    with pytest.raises(KeyError):
        db.transact("boom", boom)
    assert _ids(db) == []


def test_a_nested_failure_undoes_only_its_savepoint_and_its_mirror_changes(
    db: PostgresDatabase,
) -> None:
    cache: TxDict[str, int] = db.mirror()

    def inner() -> Result[int, NotFound]:
        _insert(db, 5)
        cache["inner"] = 5
        return Failure(NotFound("t", "5"))

    def outer() -> Result[int, NotFound]:
        _insert(db, 4)
        cache["outer"] = 4
        assert db.transact("inner", inner) == Failure(NotFound("t", "5"))
        return Success(4)

    assert db.transact("outer", outer) == Success(4)
    assert _ids(db) == [4]
    assert dict(cache) == {"outer": 4}

    def whole() -> Result[int, NotFound]:
        cache["gone"] = 1
        return Failure(NotFound("t", "x"))

    db.transact("whole", whole)
    assert dict(cache) == {"outer": 4}


def test_constraint_errors_are_classified_by_sqlstate(db: PostgresDatabase) -> None:
    db.transact("one", lambda: _insert(db, 1))
    unique = db.transact("dup", lambda: _insert(db, 1))
    assert isinstance(unique, Failure)
    failure = unique.failure()
    assert isinstance(failure, StorageFailure)
    assert (failure.kind, failure.sqlstate, failure.table) == (
        StorageFailureKind.UNIQUE, "23505", "t"
    )

    def orphan() -> Result[None, NotFound]:
        db.execute("INSERT INTO child (id) VALUES (99)")
        return Success(None)

    fk = db.transact("orphan", orphan)
    assert isinstance(fk, Failure)
    assert fk.failure().kind is StorageFailureKind.FOREIGN_KEY


def test_a_constraint_error_in_a_savepoint_is_returned_there(db: PostgresDatabase) -> None:
    db.transact("one", lambda: _insert(db, 1))

    def outer() -> Result[str, NotFound]:
        inner = db.transact("dup", lambda: _insert(db, 1))
        assert isinstance(inner, Failure)
        _insert(db, 2)
        return Success("kept")

    assert db.transact("outer", outer) == Success("kept")
    assert _ids(db) == [1, 2]


def test_serialization_failures_are_retried_then_busy(db: PostgresDatabase) -> None:
    attempts: list[int] = []

    def conflicting() -> Result[None, NotFound]:
        attempts.append(1)
        _insert(db, len(attempts) + 10)
        db.execute("DO $$ BEGIN RAISE EXCEPTION 'x' USING ERRCODE = '40001'; END $$")
        return Success(None)

    outcome = db.transact("serial", conflicting)
    assert isinstance(outcome, Failure)
    assert isinstance(outcome.failure(), Busy)
    assert len(attempts) > 1
    assert _ids(db) == []


def test_a_lock_held_elsewhere_is_busy_after_the_budget(
    db: PostgresDatabase, postgres_dsn: str
) -> None:
    with psycopg.connect(postgres_dsn) as holder:
        holder.execute("SELECT pg_advisory_xact_lock(42)")

        def locked() -> Result[None, NotFound]:
            db.execute("SELECT pg_advisory_xact_lock(42)")
            return Success(None)

        outcome = db.transact("locked", locked)
        assert isinstance(outcome, Failure)
        busy = outcome.failure()
        assert isinstance(busy, Busy)
        assert busy.waited_ms >= 300


def test_a_terminated_connection_fails_typed_and_the_next_unit_recovers(
    db: PostgresDatabase, postgres_dsn: str
) -> None:
    def killed() -> Result[None, NotFound]:
        pid = db.scalar("SELECT pg_backend_pid()")
        with psycopg.connect(postgres_dsn, autocommit=True) as other:
            other.execute("SELECT pg_terminate_backend(%s)", (pid,))
        _insert(db, 7)
        return Success(None)

    outcome = db.transact("killed", killed)
    assert isinstance(outcome, Failure)
    assert outcome.failure().kind is StorageFailureKind.CONNECTION
    assert db.transact("again", lambda: _insert(db, 8)) == Success(8)
    assert _ids(db) == [8]


def test_the_password_never_appears(postgres_dsn: str) -> None:
    params = dict(p.split("=", 1) for p in postgres_dsn.split())
    url = f"postgresql://postgres:s3cr3t-pw@/no_such_database?host={params['host']}"
    opened = PostgresDatabase.open(url)
    assert isinstance(opened, Failure)
    failure = opened.failure()
    # libpq reports a refused connection without a SQLSTATE: a connection failure
    assert failure.kind in (StorageFailureKind.CONNECTION, StorageFailureKind.CANT_OPEN)
    assert "s3cr3t-pw" not in str(failure)
    assert "s3cr3t-pw" not in redact(url)
    assert "password=***" in redact(url)


def test_text_keeps_nul_and_the_escape_character(db: PostgresDatabase) -> None:
    odd = "a\x00b\ufdd0c\ufdd00\\0"

    def write() -> Result[None, NotFound]:
        db.execute("INSERT INTO t (id, note) VALUES (1, %s)", (odd,))
        return Success(None)

    db.transact("write", write)
    assert db.read("read", lambda: Success(db.scalar("SELECT note FROM t"))) == Success(odd)
    found = db.read("find", lambda: Success(db.scalar("SELECT id FROM t WHERE note = %s", (odd,))))
    assert found == Success(1)


def test_a_read_unit_refuses_writes(db: PostgresDatabase) -> None:
    outcome = db.read("sneaky", lambda: _insert(db, 1))
    assert isinstance(outcome, Failure)
    assert outcome.failure().kind is StorageFailureKind.READ_ONLY
