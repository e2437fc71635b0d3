"""The connection factory and the live unit of work against real SQLite situations.

Busy databases (a second connection holding the write lock), SQLite rolling back a whole
transaction under a savepoint (SQLITE_FULL), I/O errors injected by a VFS, use after
``fork()`` and from another thread, and opening files that cannot be opened.
"""

from __future__ import annotations

import os
import random
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import apsw
import pytest
from returns.result import Failure, Result, Success

from runstore.exceptions import ConnectionUsedAfterFork, TransactionMisuse
from runstore.layers import (
    ConnectionSettings,
    SqliteDatabase,
    TxDict,
    _sqlite_database,
    connect,
    open_database,
)
from runstore.services import Busy, NotFound, StorageFailure, StorageFailureKind

FAST = ConnectionSettings(busy_timeout_ms=50, busy_budget_ms=300)

SCHEMA = """
CREATE TABLE item (id INTEGER PRIMARY KEY, name TEXT NOT NULL UNIQUE) STRICT;
CREATE TABLE blob (id INTEGER PRIMARY KEY, data BLOB NOT NULL) STRICT;
"""


def _open(path: Path, settings: ConnectionSettings | None = None) -> SqliteDatabase:
    db = SqliteDatabase.open(path, settings).unwrap()
    db.execute(SCHEMA)
    return db


@pytest.fixture
def file_db(tmp_path: Path) -> Iterator[SqliteDatabase]:
    db = _open(tmp_path / "db.sqlite", FAST)
    yield db
    db.close()


def write(db: SqliteDatabase, sql: str, operation: str = "write") -> Result[list[Any], Any]:
    """Run one statement as its own unit of work."""
    return db.transact(operation, lambda: Success(db.execute(sql)))


def count(db: SqliteDatabase, table: str = "item") -> int:
    return int(db.scalar(f"SELECT count(*) FROM {table}"))


def open_connections() -> int:
    return len(apsw.connections())


# -- the connection factory ------------------------------------------------------------------


def test_factory_creates_the_folder_and_configures_the_connection(tmp_path: Path) -> None:
    path = tmp_path / "a" / "b" / "runs.db"
    db = SqliteDatabase.open(path).unwrap()
    try:
        assert path.is_file()
        assert db.scalar("PRAGMA journal_mode") == "wal"
        assert db.scalar("PRAGMA foreign_keys") == 1
        assert db.scalar("PRAGMA synchronous") == 1  # NORMAL
        assert db.scalar("PRAGMA busy_timeout") == 5_000
        assert db.scalar("PRAGMA recursive_triggers") == 1
        assert db.scalar("PRAGMA auto_vacuum") == 2  # INCREMENTAL, set on the fresh file
    finally:
        db.close()


def test_factory_applies_the_settings(tmp_path: Path) -> None:
    settings = ConnectionSettings(busy_timeout_ms=1_234, synchronous="full")
    db = SqliteDatabase.open(tmp_path / "s.db", settings).unwrap()
    try:
        assert db.scalar("PRAGMA synchronous") == 2  # FULL
        assert db.scalar("PRAGMA busy_timeout") == 1_234
        assert db.settings == settings
    finally:
        db.close()


@pytest.mark.parametrize(("synchronous", "level"), [("normal", 1), ("full", 2), ("extra", 3)])
def test_a_fresh_file_is_migrated_then_keeps_the_chosen_durability(
    tmp_path: Path, synchronous: str, level: int
) -> None:
    """A new file is set up without fsyncs; its connection then has the configured level."""
    settings = ConnectionSettings(synchronous=synchronous)
    for _ in ("fresh", "existing"):
        db = open_database(tmp_path / "d.db", settings).unwrap()
        try:
            assert db.scalar("PRAGMA synchronous") == level
            assert db.scalar("PRAGMA journal_mode") == "wal"
            assert db.scalar("PRAGMA auto_vacuum") == 2  # INCREMENTAL
        finally:
            db.close()


@pytest.mark.parametrize(
    "kwargs",
    [{"synchronous": "sometimes"}, {"busy_timeout_ms": -1}, {"busy_budget_ms": -5}],
)
def test_settings_are_validated(kwargs: dict[str, Any]) -> None:
    with pytest.raises(ValueError, match=r"synchronous|must be >= 0"):
        ConnectionSettings(**kwargs)


def test_memory_database_opens() -> None:
    db = SqliteDatabase.open(":memory:").unwrap()
    try:
        assert db.scalar("PRAGMA foreign_keys") == 1
        assert db.path == ":memory:"
    finally:
        db.close()


def test_double_quoted_string_literals_are_refused(file_db: SqliteDatabase) -> None:
    with pytest.raises(apsw.SQLError, match="no such column"):
        file_db.execute('SELECT "not a string"')
    result = file_db.transact("dqs", lambda: Success(file_db.execute('SELECT "nope"')))
    assert isinstance(result, Failure)
    assert result.failure().kind is StorageFailureKind.OTHER


def test_foreign_keys_are_asserted(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(_sqlite_database, "_enable_foreign_keys", lambda c: None)
    before = open_connections()

    result = connect(tmp_path / "nofk.db")

    assert isinstance(result, Failure)
    assert "foreign keys" in result.failure().message
    assert open_connections() == before


def test_a_directory_is_not_a_database(tmp_path: Path) -> None:
    before = open_connections()
    result = SqliteDatabase.open(tmp_path)
    assert isinstance(result, Failure)
    assert result.failure().kind is StorageFailureKind.CANT_OPEN
    assert open_connections() == before


def test_a_folder_that_cannot_be_created_is_reported(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("x")
    result = SqliteDatabase.open(tmp_path / "file" / "db.sqlite")
    assert isinstance(result, Failure)
    assert result.failure().kind is StorageFailureKind.CANT_OPEN


def test_a_missing_file_is_not_created_when_read_only(tmp_path: Path) -> None:
    result = SqliteDatabase.open_read_only(tmp_path / "missing.db")
    assert isinstance(result, Failure)
    assert result.failure().kind is StorageFailureKind.CANT_OPEN
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("opener", ["open", "open_database"])
def test_a_file_that_is_not_a_database_is_reported_and_closed(tmp_path: Path, opener: str) -> None:
    path = tmp_path / "notes.txt"
    path.write_bytes(b"these are notes, not a database\n" * 200)
    before = open_connections()

    result: Result[Any, Any] = (
        SqliteDatabase.open(path) if opener == "open" else open_database(path)
    )

    assert isinstance(result, Failure)
    assert result.failure().kind is StorageFailureKind.NOT_A_DATABASE
    assert result.failure().operation in {"open", "migration status"}
    assert open_connections() == before
    assert path.read_bytes() == b"these are notes, not a database\n" * 200


def test_close_is_idempotent_and_rolls_back(tmp_path: Path) -> None:
    db = _open(tmp_path / "c.db")
    mirror: TxDict[str, int] = db.mirror()

    def fn() -> Result[None, NotFound]:
        db.execute("INSERT INTO item (name) VALUES ('a')")
        mirror["a"] = 1
        db.close()
        return Success(None)

    with pytest.raises(apsw.ConnectionClosedError):
        db.transact("close inside", fn)
    assert dict(mirror) == {}
    db.close()
    again = _open(tmp_path / "c2.db")
    again.close()
    reopened = SqliteDatabase.open(tmp_path / "c.db").unwrap()
    try:
        assert count(reopened) == 0
    finally:
        reopened.close()


# -- busy ------------------------------------------------------------------------------------


def _blocker(path: Path) -> apsw.Connection:
    """A second connection holding the write lock."""
    other = apsw.Connection(str(path))
    other.execute("BEGIN IMMEDIATE")
    other.execute("INSERT INTO item (name) VALUES ('blocker')")
    return other


def test_a_held_write_lock_makes_the_writer_wait_then_return_busy(file_db: SqliteDatabase) -> None:
    blocker = _blocker(Path(file_db.path))
    mirror: TxDict[str, int] = file_db.mirror()
    calls: list[int] = []

    def fn() -> Result[int, NotFound]:
        calls.append(1)
        mirror["written"] = 1
        file_db.execute("INSERT INTO item (name) VALUES ('one')")
        file_db.execute("INSERT INTO item (name) VALUES ('two')")
        return Success(2)

    try:
        started = time.monotonic()
        result = file_db.transact("write two", fn)
        elapsed_ms = (time.monotonic() - started) * 1000

        assert isinstance(result, Failure)
        busy = result.failure()
        assert isinstance(busy, Busy)
        assert busy.operation == "write two"
        assert busy.waited_ms >= FAST.busy_budget_ms
        assert elapsed_ms >= FAST.busy_budget_ms
        assert elapsed_ms < FAST.busy_budget_ms + 2_000
        assert calls == []  # the write lock was never taken: nothing ran, nothing half-written
        assert dict(mirror) == {}
        assert not file_db.in_unit
    finally:
        blocker.execute("ROLLBACK")
        blocker.close()

    assert count(file_db) == 0
    assert file_db.transact("write two", fn) == Success(2)
    assert [r[0] for r in file_db.execute("SELECT name FROM item ORDER BY id")] == ["one", "two"]


def test_a_writer_that_waits_less_than_the_budget_succeeds(tmp_path: Path) -> None:
    settings = ConnectionSettings(busy_timeout_ms=50, busy_budget_ms=5_000)
    db = _open(tmp_path / "wait.db", settings)
    blocker = _blocker(tmp_path / "wait.db")
    release = threading.Timer(0.1, lambda: blocker.execute("COMMIT"))
    try:
        started = time.monotonic()
        release.start()
        result = write(db, "INSERT INTO item (name) VALUES ('mine') RETURNING id")
        elapsed = time.monotonic() - started
    finally:
        release.join()
        blocker.close()
    try:
        assert result == Success([(2,)])
        assert elapsed >= 0.09
        assert [r[0] for r in db.execute("SELECT name FROM item ORDER BY id")] == [
            "blocker",
            "mine",
        ]
    finally:
        db.close()


def test_a_held_write_lock_does_not_block_readers(file_db: SqliteDatabase) -> None:
    write(file_db, "INSERT INTO item (name) VALUES ('a')")
    blocker = _blocker(Path(file_db.path))
    try:
        assert file_db.read("count", lambda: Success(count(file_db))) == Success(1)
    finally:
        blocker.execute("ROLLBACK")
        blocker.close()


def test_busy_budget_of_zero_tries_once(tmp_path: Path) -> None:
    db = _open(tmp_path / "zero.db", ConnectionSettings(busy_timeout_ms=0, busy_budget_ms=0))
    blocker = _blocker(tmp_path / "zero.db")
    try:
        result = db.transact("once", lambda: Success(None))
        assert isinstance(result, Failure)
        assert isinstance(result.failure(), Busy)
    finally:
        blocker.execute("ROLLBACK")
        blocker.close()
        db.close()


# -- SQLite rolls the whole transaction back under a savepoint --------------------------------


def _limit_pages(db: SqliteDatabase) -> None:
    pages = int(db.scalar("PRAGMA page_count"))
    db.execute(f"PRAGMA max_page_count = {pages + 2}")


def _overflow(db: SqliteDatabase) -> Result[None, NotFound]:
    db.execute("INSERT INTO blob (data) VALUES (zeroblob(200000))")
    return Success(None)


@pytest.mark.parametrize("outer_behaviour", ["propagate", "continue", "swallow"])
def test_full_under_a_savepoint_fails_the_whole_unit(
    file_db: SqliteDatabase, outer_behaviour: str
) -> None:
    db = file_db
    _limit_pages(db)
    mirror: TxDict[str, int] = db.mirror()
    mirror["before"] = 0
    published: list[str] = []
    autocommit_seen: list[bool] = []

    def outer() -> Result[str, Any]:
        db.execute("INSERT INTO item (name) VALUES ('outer')")
        mirror["outer"] = 1
        db.on_commit(lambda: published.append("outer"))
        try:
            inner = db.transact("inner", lambda: _overflow(db))
        except Exception:
            autocommit_seen.append(db.connection.getautocommit())
            if outer_behaviour == "propagate":
                raise
            inner = Failure(NotFound("blob", "?"))
        if outer_behaviour == "continue":
            # Carries on as if only the savepoint failed: must not write outside the unit.
            db.execute("INSERT INTO item (name) VALUES ('after')")
        return Success("done") if outer_behaviour == "swallow" else inner.map(lambda _: "done")

    result = db.transact("persist", outer)

    assert autocommit_seen == [True]  # SQLite really did roll back the whole transaction
    assert isinstance(result, Failure)
    error = result.failure()
    assert isinstance(error, StorageFailure)
    assert error.kind is StorageFailureKind.FULL
    assert error.code == apsw.SQLITE_FULL
    assert error.operation == "persist"
    assert dict(mirror) == {"before": 0}
    assert published == []
    assert count(db) == 0
    assert not db.in_unit

    assert write(db, "INSERT INTO item (name) VALUES ('x')") == Success([])
    assert count(db) == 1


def test_full_at_the_outermost_level_is_a_typed_failure(file_db: SqliteDatabase) -> None:
    db = file_db
    _limit_pages(db)
    result = db.transact("too big", lambda: _overflow(db))
    assert isinstance(result, Failure)
    assert result.failure().kind is StorageFailureKind.FULL
    assert count(db, "blob") == 0


# -- I/O errors (a VFS that fails writes on demand) -------------------------------------------


class _FaultyVFS(apsw.VFS):
    def __init__(self, name: str) -> None:
        self.failing = False
        self.name = name
        super().__init__(name, "")

    def xOpen(self, name: Any, flags: list[int]) -> apsw.VFSFile:
        return _FaultyFile(self, name, flags)


class _FaultyFile(apsw.VFSFile):
    def __init__(self, vfs: _FaultyVFS, name: Any, flags: list[int]) -> None:
        self._vfs = vfs
        super().__init__("", name, flags)

    def xWrite(self, data: bytes, offset: int) -> None:
        if self._vfs.failing:
            error: Any = apsw.IOError("injected write failure")
            error.extendedresult = apsw.SQLITE_IOERR_WRITE  # what SQLite is told
            raise error
        super().xWrite(data, offset)


@pytest.fixture
def faulty(tmp_path: Path) -> Iterator[tuple[_FaultyVFS, SqliteDatabase]]:
    vfs = _FaultyVFS(f"runstore-faulty-{os.getpid()}-{id(tmp_path)}")
    connection = apsw.Connection(str(tmp_path / "faulty.db"), vfs=vfs.name)
    connection.pragma("journal_mode", "wal")
    db = SqliteDatabase(connection, path=str(tmp_path / "faulty.db"))
    db.execute(SCHEMA)
    yield vfs, db
    vfs.failing = False
    db.close()
    vfs.unregister()


def test_an_io_error_at_commit_is_a_typed_failure(
    faulty: tuple[_FaultyVFS, SqliteDatabase],
) -> None:
    vfs, db = faulty
    mirror: TxDict[str, int] = db.mirror()

    def fn() -> Result[None, NotFound]:
        db.execute("INSERT INTO item (name) VALUES ('lost')")
        mirror["lost"] = 1
        vfs.failing = True
        return Success(None)

    result = db.transact("write", fn)
    vfs.failing = False

    assert isinstance(result, Failure)
    error = result.failure()
    assert isinstance(error, StorageFailure)
    assert error.kind is StorageFailureKind.IO
    assert error.code == apsw.SQLITE_IOERR_WRITE
    assert dict(mirror) == {}
    assert count(db) == 0
    assert db.transact("again", lambda: Success(count(db))) == Success(0)
    assert write(db, "INSERT INTO item (name) VALUES ('ok')") == Success([])
    assert count(db) == 1


# -- read-only and corrupt files --------------------------------------------------------------


def test_writing_through_a_read_only_connection_is_a_typed_failure(tmp_path: Path) -> None:
    _open(tmp_path / "ro.db").close()
    db = SqliteDatabase.open_read_only(tmp_path / "ro.db").unwrap()
    try:
        result = write(db, "INSERT INTO item (name) VALUES ('x')")
        assert isinstance(result, Failure)
        assert result.failure().kind is StorageFailureKind.READ_ONLY
        assert result.failure().code == apsw.SQLITE_READONLY
        assert db.read("count", lambda: Success(count(db))) == Success(0)
    finally:
        db.close()


def _corrupt(path: Path) -> None:
    db = _open(path)
    rows = [(f"{i:06d}" * 20,) for i in range(2_000)]

    def fill() -> Result[None, NotFound]:
        db.executemany("INSERT INTO item (name) VALUES (?)", rows)
        return Success(None)

    db.transact("fill", fill)
    db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    db.close()
    noise = random.Random(7).randbytes(4096 * 8)
    with path.open("r+b") as handle:
        handle.seek(4096 * 2)
        handle.write(noise)


def test_reading_a_corrupt_file_is_a_typed_failure(tmp_path: Path) -> None:
    path = tmp_path / "corrupt.db"
    _corrupt(path)
    db = SqliteDatabase.open(path).unwrap()
    try:
        result = db.read(
            "scan",
            lambda: Success(
                (db.execute("SELECT count(*) FROM item"), db.execute("PRAGMA integrity_check"))
            ),
        )
        assert isinstance(result, Failure)
        assert result.failure().kind is StorageFailureKind.CORRUPT
        assert result.failure().code & 0xFF == apsw.SQLITE_CORRUPT
    finally:
        db.close()


# -- fork and threads ------------------------------------------------------------------------


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_a_connection_used_after_fork_raises(file_db: SqliteDatabase) -> None:
    write(file_db, "INSERT INTO item (name) VALUES ('a')")
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child reports through its exit code
        code = 0
        attempts: list[Callable[[], object]] = [
            lambda: file_db.execute("SELECT 1"),
            lambda: file_db.transact("child", lambda: Success(None)),
            lambda: file_db.read("child", lambda: Success(None)),
            lambda: file_db.connection,
        ]
        for bit, attempt in enumerate(attempts):
            try:
                attempt()
                code |= 1 << bit
            except ConnectionUsedAfterFork:
                pass
            except BaseException:
                code |= 1 << bit
        file_db.close()  # must leave the parent's connection alone
        os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert count(file_db) == 1
    assert file_db.transact("parent", lambda: Success(count(file_db))) == Success(1)


def test_statements_from_another_thread_are_refused(file_db: SqliteDatabase) -> None:
    errors: list[BaseException] = []

    def other() -> None:
        for attempt in (
            lambda: file_db.execute("SELECT 1"),
            lambda: file_db.read("r", lambda: Success(None)),
            lambda: file_db.transact("w", lambda: Success(None)),
        ):
            try:
                attempt()
            except BaseException as exc:
                errors.append(exc)

    worker = threading.Thread(target=other)
    worker.start()
    worker.join()

    assert [type(e) for e in errors] == [TransactionMisuse] * 3
    assert file_db.connection.getautocommit()
    assert file_db.transact("here", lambda: Success(count(file_db))) == Success(0)
