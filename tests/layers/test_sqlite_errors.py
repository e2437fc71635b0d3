"""Error values compare by value, and ``from_apsw`` classifies by SQLite's result codes.

Every class is produced by a real SQLite situation where one is cheap to build; the
classification of exceptions without codes is checked on constructed ones.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import apsw
import pytest
from returns.result import Failure, Success

from runstore.layers._sqlite_errors import from_apsw, is_busy, is_programmer_error
from runstore.services import (
    Busy,
    Conflict,
    HalfAppliedMigration,
    IllegalTransition,
    InvalidInput,
    MigrationDrift,
    NotFound,
    StorageFailure,
    StorageFailureKind,
    UnknownMigration,
)

# -- values ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "make",
    [
        lambda: NotFound("run", "7"),
        lambda: Conflict("run", "7", "already finished", expected="running", actual="done"),
        lambda: IllegalTransition("run", "7", "done", "running"),
        lambda: InvalidInput("started_at", "naive datetime"),
        lambda: Busy("persist", 15_000),
        lambda: StorageFailure("persist", StorageFailureKind.UNIQUE, 2067, "UNIQUE failed", "t"),
        lambda: UnknownMigration((9,)),
        lambda: MigrationDrift(1, "database_meta", "a" * 64, "b" * 64),
        lambda: HalfAppliedMigration(1, "database_meta", "journal row never marked finished"),
    ],
)
def test_errors_compare_by_value(make: Callable[[], object]) -> None:
    first, second = make(), make()
    assert first is not second
    assert first == second
    assert hash(first) == hash(second)
    assert Failure(first) == Failure(second)
    assert Failure(first) != Success(second)
    assert str(first) == str(second)
    assert "\n" not in str(first)


def test_different_values_differ() -> None:
    assert Failure(NotFound("run", "7")) != Failure(NotFound("run", "8"))
    values: list[object] = [NotFound("run", "7"), InvalidInput("run", "7")]
    assert values[0] != values[1]
    assert Busy("a", 1) != Busy("a", 2)


def test_errors_are_immutable() -> None:
    error = NotFound("run", "7")
    with pytest.raises(AttributeError):
        error.key = "8"  # type: ignore[misc]


# -- classification of real SQLite errors -----------------------------------------------------


@pytest.fixture
def connection() -> Iterator[apsw.Connection]:
    conn = apsw.Connection(":memory:")
    conn.pragma("foreign_keys", 1)
    conn.execute(
        """
        CREATE TABLE parent (id INTEGER PRIMARY KEY);
        CREATE TABLE child (
            id INTEGER PRIMARY KEY,
            key TEXT UNIQUE,
            parent_id INTEGER REFERENCES parent (id),
            name TEXT NOT NULL,
            size INTEGER CHECK (size > 0)
        );
        CREATE TABLE tag (name TEXT PRIMARY KEY) WITHOUT ROWID;
        CREATE TABLE guarded (x INTEGER);
        CREATE TRIGGER guard BEFORE INSERT ON guarded
            BEGIN SELECT RAISE(ABORT, 'guarded rows are read-only'); END;
        INSERT INTO parent (id) VALUES (1);
        INSERT INTO child (id, key, parent_id, name, size) VALUES (1, 'a', 1, 'one', 1);
        INSERT INTO tag (name) VALUES ('slow');
        """
    )
    yield conn
    conn.close()


def _raised(run: Callable[[], object]) -> apsw.Error:
    with pytest.raises(apsw.Error) as caught:
        run()
    return caught.value


@pytest.mark.parametrize(
    ("sql", "kind", "code"),
    [
        (
            "INSERT INTO child (id, key, name, size) VALUES (2, 'a', 'x', 1)",
            StorageFailureKind.UNIQUE,
            apsw.SQLITE_CONSTRAINT_UNIQUE,
        ),
        (
            "INSERT INTO child (id, key, name, size) VALUES (1, 'b', 'x', 1)",
            StorageFailureKind.PRIMARY_KEY,
            apsw.SQLITE_CONSTRAINT_PRIMARYKEY,
        ),
        (
            "INSERT INTO tag (name) VALUES ('slow')",
            StorageFailureKind.PRIMARY_KEY,
            apsw.SQLITE_CONSTRAINT_PRIMARYKEY,
        ),
        (
            "INSERT INTO child (id, key, parent_id, name, size) VALUES (3, 'c', 99, 'x', 1)",
            StorageFailureKind.FOREIGN_KEY,
            apsw.SQLITE_CONSTRAINT_FOREIGNKEY,
        ),
        (
            "INSERT INTO child (id, key, name, size) VALUES (4, 'd', NULL, 1)",
            StorageFailureKind.NOT_NULL,
            apsw.SQLITE_CONSTRAINT_NOTNULL,
        ),
        (
            "INSERT INTO child (id, key, name, size) VALUES (5, 'e', 'x', 0)",
            StorageFailureKind.CHECK,
            apsw.SQLITE_CONSTRAINT_CHECK,
        ),
        (
            "INSERT INTO guarded (x) VALUES (1)",
            StorageFailureKind.CONSTRAINT,
            apsw.SQLITE_CONSTRAINT_TRIGGER,
        ),
        ("SELECT * FROM nowhere", StorageFailureKind.OTHER, apsw.SQLITE_ERROR),
    ],
)
def test_constraint_and_sql_errors(
    connection: apsw.Connection, sql: str, kind: StorageFailureKind, code: int
) -> None:
    error = from_apsw(_raised(lambda: connection.execute(sql)), operation="op", table="child")

    assert isinstance(error, StorageFailure)
    assert (error.kind, error.code, error.operation, error.table) == (kind, code, "op", "child")
    assert error.message


def test_locked(connection: apsw.Connection) -> None:
    cursor = connection.execute("SELECT name FROM tag")
    next(cursor)
    exc = _raised(lambda: connection.execute("DROP TABLE tag"))
    cursor.close()

    error = from_apsw(exc, operation="drop")
    assert isinstance(error, StorageFailure)
    assert error.kind is StorageFailureKind.LOCKED
    assert error.code & 0xFF == apsw.SQLITE_LOCKED


def test_busy(tmp_path: Path) -> None:
    first = apsw.Connection(str(tmp_path / "busy.db"))
    second = apsw.Connection(str(tmp_path / "busy.db"))
    try:
        first.execute("CREATE TABLE t (x INTEGER); BEGIN IMMEDIATE; INSERT INTO t VALUES (1)")
        exc = _raised(lambda: second.execute("BEGIN IMMEDIATE"))
        assert is_busy(exc)
        assert from_apsw(exc, operation="write", waited_ms=12) == Busy("write", 12)
    finally:
        first.execute("ROLLBACK")
        first.close()
        second.close()


def test_full(tmp_path: Path) -> None:
    conn = apsw.Connection(str(tmp_path / "full.db"))
    try:
        conn.execute("CREATE TABLE t (data BLOB)")
        conn.execute(f"PRAGMA max_page_count = {conn.pragma('page_count') + 1}")
        exc = _raised(lambda: conn.execute("INSERT INTO t VALUES (zeroblob(100000))"))
        error = from_apsw(exc, operation="fill")
        assert isinstance(error, StorageFailure)
        assert (error.kind, error.code) == (StorageFailureKind.FULL, apsw.SQLITE_FULL)
    finally:
        conn.close()


def test_read_only(tmp_path: Path) -> None:
    apsw.Connection(str(tmp_path / "ro.db")).execute("CREATE TABLE t (x INTEGER)")
    conn = apsw.Connection(str(tmp_path / "ro.db"), flags=apsw.SQLITE_OPEN_READONLY)
    try:
        error = from_apsw(_raised(lambda: conn.execute("INSERT INTO t VALUES (1)")), operation="w")
        assert isinstance(error, StorageFailure)
        assert error.kind is StorageFailureKind.READ_ONLY
    finally:
        conn.close()


def test_cant_open_and_not_a_database(tmp_path: Path) -> None:
    missing = _raised(
        lambda: apsw.Connection(str(tmp_path / "no" / "db"), flags=apsw.SQLITE_OPEN_READONLY)
    )
    error = from_apsw(missing, operation="open")
    assert isinstance(error, StorageFailure)
    assert error.kind is StorageFailureKind.CANT_OPEN

    (tmp_path / "text").write_bytes(b"plain text, not SQLite " * 100)
    conn = apsw.Connection(str(tmp_path / "text"))
    try:
        exc = _raised(lambda: conn.execute("SELECT * FROM sqlite_schema"))
    finally:
        conn.close()
    error = from_apsw(exc, operation="open")
    assert isinstance(error, StorageFailure)
    assert error.kind is StorageFailureKind.NOT_A_DATABASE


def test_interrupted() -> None:
    conn = apsw.Connection(":memory:")
    try:
        conn.execute("CREATE TABLE t (x INTEGER)")
        conn.set_progress_handler(lambda: True, 100)  # a true answer interrupts
        exc = _raised(
            lambda: conn.execute(
                "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 100000)"
                " SELECT count(*) FROM n"
            )
        )
    finally:
        conn.close()
    error = from_apsw(exc, operation="scan")
    assert isinstance(error, StorageFailure)
    assert error.kind is StorageFailureKind.INTERRUPTED


# -- exceptions without codes, and misuse ------------------------------------------------------


@pytest.mark.parametrize(
    ("exc", "kind", "code"),
    [
        (apsw.IOError("no codes"), StorageFailureKind.IO, apsw.SQLITE_IOERR),
        (apsw.CorruptError("no codes"), StorageFailureKind.CORRUPT, apsw.SQLITE_CORRUPT),
        (apsw.FullError("no codes"), StorageFailureKind.FULL, apsw.SQLITE_FULL),
        (apsw.LockedError("no codes"), StorageFailureKind.LOCKED, apsw.SQLITE_LOCKED),
        (apsw.ReadOnlyError("no codes"), StorageFailureKind.READ_ONLY, apsw.SQLITE_READONLY),
        (apsw.Error("no codes"), StorageFailureKind.OTHER, -1),
    ],
)
def test_exceptions_without_codes_are_classified_by_class(
    exc: apsw.Error, kind: StorageFailureKind, code: int
) -> None:
    error = from_apsw(exc, operation="op")
    assert isinstance(error, StorageFailure)
    assert (error.kind, error.code) == (kind, code)


def test_an_extended_code_set_on_an_exception_wins() -> None:
    exc: Any = apsw.IOError("from a VFS")
    exc.extendedresult = apsw.SQLITE_IOERR_FSYNC
    error = from_apsw(exc, operation="sync")
    assert isinstance(error, StorageFailure)
    assert (error.kind, error.code) == (StorageFailureKind.IO, apsw.SQLITE_IOERR_FSYNC)

    busy: Any = apsw.BusyError("recovering")
    busy.extendedresult = apsw.SQLITE_BUSY_RECOVERY
    assert is_busy(busy)
    assert from_apsw(busy, operation="r") == Busy("r", 0)


def test_misuse_is_told_apart(connection: apsw.Connection) -> None:
    bindings = _raised(lambda: connection.execute("SELECT ?", (1, 2)))
    closed_conn = apsw.Connection(":memory:")
    closed_conn.close()
    closed = _raised(lambda: closed_conn.execute("SELECT 1"))

    assert is_programmer_error(bindings)
    assert is_programmer_error(closed)
    assert is_programmer_error(apsw.MisuseError("x"))
    assert not is_programmer_error(apsw.ConstraintError("x"))
    assert not is_programmer_error(ValueError("x"))
    assert not is_busy(ValueError("x"))
    error = from_apsw(closed, operation="op")  # classifying one never fails
    assert isinstance(error, StorageFailure)
    assert error.kind is StorageFailureKind.OTHER
