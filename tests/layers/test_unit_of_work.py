"""Units of work: commit on Success, roll back on Failure and exceptions, savepoints, mirrors.

Row behaviour is checked on ``SqliteDatabase`` (``:memory:`` and a file); mirror
(``TxDict``) and ``on_commit`` behaviour on every unit of work, ``InMemoryDatabase`` included.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, MutableMapping
from pathlib import Path
from typing import Any

import apsw
import pytest
from returns.result import Failure, Result, Success

from runstore.exceptions import TransactionMisuse
from runstore.layers import InMemoryDatabase, SqliteDatabase, TxDict
from runstore.services import Busy, NotFound, StorageFailure, StorageFailureKind

Database = SqliteDatabase | InMemoryDatabase

SCHEMA = """
CREATE TABLE item (id INTEGER PRIMARY KEY, name TEXT NOT NULL UNIQUE) STRICT;
CREATE TABLE files (id INTEGER PRIMARY KEY, path TEXT NOT NULL UNIQUE) STRICT;
CREATE TABLE test_case (
    id INTEGER PRIMARY KEY,
    file_id INTEGER NOT NULL REFERENCES files (id),
    name TEXT NOT NULL
) STRICT;
CREATE INDEX test_case_file ON test_case (file_id);
"""


class Boom(Exception):
    """A programmer error raised inside a unit."""


def _open_sqlite(path: str | Path) -> SqliteDatabase:
    db = SqliteDatabase.open(path).unwrap()
    db.execute(SCHEMA)
    return db


@pytest.fixture(params=["memory", "file"])
def sqlite_db(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[SqliteDatabase]:
    db = _open_sqlite(":memory:" if request.param == "memory" else tmp_path / "uow.db")
    yield db
    db.close()


@pytest.fixture(params=["sqlite-memory", "sqlite-file", "in-memory"])
def unit(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Database]:
    if request.param == "in-memory":
        yield InMemoryDatabase()
        return
    db = _open_sqlite(":memory:" if request.param == "sqlite-memory" else tmp_path / "uow.db")
    yield db
    db.close()


def names(db: SqliteDatabase) -> list[str]:
    return [row[0] for row in db.execute("SELECT name FROM item ORDER BY id")]


def insert(db: SqliteDatabase, name: str) -> int:
    return int(db.scalar("INSERT INTO item (name) VALUES (?) RETURNING id", (name,)))


# -- commit and rollback ---------------------------------------------------------------------


def test_success_commits(sqlite_db: SqliteDatabase) -> None:
    result = sqlite_db.transact("add", lambda: Success(insert(sqlite_db, "a")))

    assert result == Success(1)
    assert names(sqlite_db) == ["a"]
    assert sqlite_db.connection.getautocommit()
    assert not sqlite_db.in_unit


def test_success_is_visible_to_another_connection(tmp_path: Path) -> None:
    db = _open_sqlite(tmp_path / "shared.db")
    other = apsw.Connection(str(tmp_path / "shared.db"))
    try:
        db.transact("add", lambda: Success(insert(db, "a")))
        assert other.execute("SELECT name FROM item").fetchall() == [("a",)]
    finally:
        other.close()
        db.close()


def test_failure_rolls_back_and_is_returned(sqlite_db: SqliteDatabase) -> None:
    def fn() -> Result[int, NotFound]:
        insert(sqlite_db, "a")
        return Failure(NotFound("item", "b"))

    result = sqlite_db.transact("add", fn)

    assert result == Failure(NotFound("item", "b"))
    assert names(sqlite_db) == []
    assert sqlite_db.connection.getautocommit()


def test_exception_rolls_back_and_is_reraised(sqlite_db: SqliteDatabase) -> None:
    def fn() -> Result[int, NotFound]:
        insert(sqlite_db, "a")
        raise Boom("bug")

    with pytest.raises(Boom):
        sqlite_db.transact("add", fn)

    assert names(sqlite_db) == []
    assert sqlite_db.transact("again", lambda: Success(insert(sqlite_db, "b"))) == Success(1)
    assert names(sqlite_db) == ["b"]


def test_driver_error_becomes_a_typed_failure(sqlite_db: SqliteDatabase) -> None:
    sqlite_db.transact("seed", lambda: Success(insert(sqlite_db, "taken")))

    def fn() -> Result[int, NotFound]:
        insert(sqlite_db, "fresh")
        return Success(insert(sqlite_db, "taken"))

    result = sqlite_db.transact("add twice", fn)

    assert isinstance(result, Failure)
    error = result.failure()
    assert isinstance(error, StorageFailure)
    assert error.kind is StorageFailureKind.UNIQUE
    assert error.code == apsw.SQLITE_CONSTRAINT_UNIQUE
    assert error.operation == "add twice"
    assert names(sqlite_db) == ["taken"]


def test_apsw_misuse_is_a_programmer_error_and_rolls_back(sqlite_db: SqliteDatabase) -> None:
    def fn() -> Result[int, NotFound]:
        insert(sqlite_db, "a")
        sqlite_db.execute("INSERT INTO item (name) VALUES (?)", ("b", "extra"))
        return Success(0)

    with pytest.raises(apsw.BindingsError):
        sqlite_db.transact("bad bindings", fn)
    assert names(sqlite_db) == []


def test_a_result_is_required(sqlite_db: SqliteDatabase) -> None:
    def fn() -> Any:
        insert(sqlite_db, "a")
        return 42

    with pytest.raises(TransactionMisuse, match="Success or Failure"):
        sqlite_db.transact("no result", fn)
    assert names(sqlite_db) == []


def test_unit_that_commits_itself_is_refused(sqlite_db: SqliteDatabase) -> None:
    def fn() -> Result[int, NotFound]:
        sqlite_db.execute("COMMIT")
        return Success(0)

    with pytest.raises(TransactionMisuse, match="ended"):
        sqlite_db.transact("self commit", fn)
    assert not sqlite_db.in_unit
    assert sqlite_db.transact("after", lambda: Success(insert(sqlite_db, "a"))) == Success(1)


# -- savepoints ------------------------------------------------------------------------------


def test_failed_savepoint_undoes_only_its_own_writes(sqlite_db: SqliteDatabase) -> None:
    db = sqlite_db

    def inner() -> Result[int, NotFound]:
        insert(db, "inner")
        return Failure(NotFound("item", "x"))

    def outer() -> Result[list[str], NotFound]:
        insert(db, "before")
        nested = db.transact("inner", inner)
        assert nested == Failure(NotFound("item", "x"))
        assert db.depth == 1
        insert(db, "after")
        return Success(names(db))

    assert db.transact("outer", outer) == Success(["before", "after"])
    assert names(db) == ["before", "after"]


def test_savepoint_exception_undoes_only_its_own_writes(sqlite_db: SqliteDatabase) -> None:
    db = sqlite_db

    def inner() -> Result[int, NotFound]:
        insert(db, "inner")
        raise Boom

    def outer() -> Result[None, NotFound]:
        insert(db, "before")
        with pytest.raises(Boom):
            db.transact("inner", inner)
        insert(db, "after")
        return Success(None)

    assert db.transact("outer", outer) == Success(None)
    assert names(db) == ["before", "after"]


def test_savepoint_driver_error_is_a_value_at_its_level(sqlite_db: SqliteDatabase) -> None:
    db = sqlite_db

    def inner() -> Result[int, NotFound]:
        insert(db, "inner")
        return Success(insert(db, "before"))  # UNIQUE violation

    def outer() -> Result[None, NotFound | Busy | StorageFailure]:
        insert(db, "before")
        nested = db.transact("inner", inner)
        assert isinstance(nested, Failure)
        assert nested.failure() == StorageFailure(
            operation="inner",
            kind=StorageFailureKind.UNIQUE,
            code=apsw.SQLITE_CONSTRAINT_UNIQUE,
            message=nested.failure().message,
        )
        insert(db, "after")
        return Success(None)

    assert db.transact("outer", outer) == Success(None)
    assert names(db) == ["before", "after"]


def test_outer_rollback_undoes_committed_inner_savepoints(sqlite_db: SqliteDatabase) -> None:
    db = sqlite_db

    def outer() -> Result[None, NotFound | Busy | StorageFailure]:
        insert(db, "outer")
        assert db.transact("inner", lambda: Success(insert(db, "inner"))) == Success(2)
        deeper = db.transact(
            "inner 2", lambda: db.transact("inner 3", lambda: Success(insert(db, "deep")))
        )
        assert deeper == Success(3)
        return Failure(NotFound("item", "z"))

    assert db.transact("outer", outer) == Failure(NotFound("item", "z"))
    assert names(db) == []


def test_outer_exception_undoes_committed_inner_savepoints(sqlite_db: SqliteDatabase) -> None:
    db = sqlite_db

    def outer() -> Result[None, NotFound]:
        db.transact("inner", lambda: Success(insert(db, "inner")))
        raise Boom

    with pytest.raises(Boom):
        db.transact("outer", outer)
    assert names(db) == []


# -- the seed 000 bug: an id cache that outlives a rolled-back savepoint ----------------------


class FilesIds:
    """A tiny service that caches ``files`` row ids, as the live layers of later issues do.

    ``cache`` is the state that mirrors rows; the test passes a ``TxDict`` (the runstore
    way) or a plain dict (the seed's bug) to show the difference.
    """

    def __init__(self, db: SqliteDatabase, cache: MutableMapping[str, int]) -> None:
        self._db = db
        self.cache = cache

    def ensure(self, path: str) -> Result[int, NotFound | Busy | StorageFailure]:
        def fn() -> Result[int, NotFound]:
            cached = self.cache.get(path)
            if cached is not None:
                return Success(cached)
            file_id = int(
                self._db.scalar("INSERT INTO files (path) VALUES (?) RETURNING id", (path,))
            )
            self.cache[path] = file_id
            return Success(file_id)

        return self._db.transact("ensure file", fn)

    def add_case(self, path: str, name: str) -> Result[int, NotFound | Busy | StorageFailure]:
        def fn() -> Result[int, NotFound | Busy | StorageFailure]:
            return self.ensure(path).map(
                lambda file_id: int(
                    self._db.scalar(
                        "INSERT INTO test_case (file_id, name) VALUES (?, ?) RETURNING id",
                        (file_id, name),
                    )
                )
            )

        return self._db.transact("add case", fn)


def _persist_batch(db: SqliteDatabase, files: FilesIds) -> Result[int, Any]:
    """One outer transaction: a savepoint adds a file and fails, then the file is used again."""

    def doomed() -> Result[int, Any]:
        assert files.ensure("tests/test_a.py") == Success(1)
        return Failure(NotFound("suite", "gone"))

    def batch() -> Result[int, Any]:
        assert db.transact("doomed suite", doomed) == Failure(NotFound("suite", "gone"))
        return files.add_case("tests/test_a.py", "test_one")

    return db.transact("persist run", batch)


def test_cache_entry_of_rolled_back_savepoint_is_gone(sqlite_db: SqliteDatabase) -> None:
    db = sqlite_db
    files = FilesIds(db, db.mirror())

    def batch() -> Result[None, Any]:
        def doomed() -> Result[int, Any]:
            files.ensure("tests/test_a.py")
            assert "tests/test_a.py" in files.cache
            return Failure(NotFound("suite", "gone"))

        db.transact("doomed", doomed)
        assert "tests/test_a.py" not in files.cache
        assert db.execute("SELECT count(*) FROM files") == [(0,)]
        return Success(None)

    assert db.transact("batch", batch) == Success(None)
    assert dict(files.cache) == {}


def test_later_write_recreates_the_row_instead_of_a_stale_id(sqlite_db: SqliteDatabase) -> None:
    db = sqlite_db
    files = FilesIds(db, db.mirror())

    assert _persist_batch(db, files) == Success(1)

    assert db.execute("SELECT id, path FROM files") == [(1, "tests/test_a.py")]
    assert db.execute("SELECT file_id, name FROM test_case") == [(1, "test_one")]
    assert dict(files.cache) == {"tests/test_a.py": 1}
    assert db.execute("PRAGMA foreign_key_check") == []


def test_a_plain_dict_cache_shows_the_seed_bug(sqlite_db: SqliteDatabase) -> None:
    """The control: the same service with a plain dict reuses the stale id and fails."""
    db = sqlite_db
    files = FilesIds(db, {})

    result = _persist_batch(db, files)

    assert isinstance(result, Failure)
    assert result.failure().kind is StorageFailureKind.FOREIGN_KEY
    assert files.cache == {"tests/test_a.py": 1}  # names a row that does not exist
    assert db.execute("SELECT count(*) FROM files") == [(0,)]


# -- mirrors and on_commit, on every unit of work ---------------------------------------------


def test_mirror_changes_stand_on_success(unit: Database) -> None:
    mirror: TxDict[str, int] = unit.mirror()
    mirror["kept"] = 1

    def fn() -> Result[None, NotFound]:
        mirror["a"] = 1
        mirror["kept"] = 2
        return Success(None)

    assert unit.transact("set", fn) == Success(None)
    assert dict(mirror) == {"kept": 2, "a": 1}


def test_mirror_changes_are_undone_on_failure_and_exception(unit: Database) -> None:
    mirror: TxDict[str, int] = unit.mirror()
    mirror.update({"keep": 1, "change": 2, "drop": 3})
    before = dict(mirror)

    def change() -> None:
        mirror["new"] = 4
        mirror["change"] = 20
        mirror["change"] = 200
        del mirror["drop"]
        mirror.pop("keep")
        mirror.setdefault("other", 5)
        mirror["drop"] = 30

    def failing() -> Result[None, NotFound]:
        change()
        return Failure(NotFound("x", "y"))

    def raising() -> Result[None, NotFound]:
        change()
        raise Boom

    assert unit.transact("fail", failing) == Failure(NotFound("x", "y"))
    assert dict(mirror) == before
    with pytest.raises(Boom):
        unit.transact("raise", raising)
    assert dict(mirror) == before

    def clearing() -> Result[None, NotFound]:
        mirror.clear()
        assert len(mirror) == 0
        return Failure(NotFound("x", "y"))

    unit.transact("clear", clearing)
    assert dict(mirror) == before
    assert list(mirror) == list(before)


def test_mirror_follows_nested_units(unit: Database) -> None:
    mirror: TxDict[str, int] = unit.mirror()

    def outer() -> Result[dict[str, int], NotFound]:
        mirror["outer"] = 1
        unit.transact("kept", lambda: _set(mirror, "kept", 2))
        unit.transact("failed", lambda: _set(mirror, "failed", 3, fail=True))
        assert "failed" not in mirror
        assert mirror["kept"] == 2
        return Success(dict(mirror))

    assert unit.transact("outer", outer) == Success({"outer": 1, "kept": 2})
    assert dict(mirror) == {"outer": 1, "kept": 2}

    def outer_fails() -> Result[None, NotFound]:
        unit.transact("kept", lambda: _set(mirror, "inner", 9))
        mirror["outer"] = 100
        return Failure(NotFound("x", "y"))

    unit.transact("outer fails", outer_fails)
    assert dict(mirror) == {"outer": 1, "kept": 2}


def _set(
    mirror: TxDict[str, int], key: str, value: int, *, fail: bool = False
) -> Result[None, NotFound]:
    mirror[key] = value
    return Failure(NotFound("k", key)) if fail else Success(None)


def test_mirror_outside_a_unit_simply_stands(unit: Database) -> None:
    mirror: TxDict[str, int] = unit.mirror()
    mirror["a"] = 1
    del mirror["a"]
    mirror["b"] = 2
    assert dict(mirror) == {"b": 2}
    assert mirror.get("a") is None
    assert mirror.get("a", 7) == 7
    assert repr(mirror) == "TxDict({'b': 2})"


def test_on_commit_runs_only_after_the_outermost_commit(unit: Database) -> None:
    calls: list[str] = []

    def inner() -> Result[None, NotFound]:
        unit.on_commit(lambda: calls.append("inner"))
        return Success(None)

    def outer() -> Result[None, NotFound]:
        unit.on_commit(lambda: calls.append("outer"))
        unit.transact("inner", inner)
        assert calls == []
        return Success(None)

    assert unit.transact("outer", outer) == Success(None)
    assert calls == ["outer", "inner"]


def test_on_commit_runs_after_the_data_is_committed(sqlite_db: SqliteDatabase) -> None:
    db = sqlite_db
    seen: list[tuple[bool, list[str]]] = []

    def fn() -> Result[None, NotFound]:
        insert(db, "a")
        db.on_commit(lambda: seen.append((db.connection.getautocommit(), names(db))))
        return Success(None)

    db.transact("add", fn)
    assert seen == [(True, ["a"])]


def test_on_commit_is_dropped_on_rollback(unit: Database) -> None:
    calls: list[str] = []

    def failing_inner() -> Result[None, NotFound]:
        unit.on_commit(lambda: calls.append("failed inner"))
        return Failure(NotFound("x", "y"))

    def outer() -> Result[None, NotFound]:
        unit.transact("inner", failing_inner)
        unit.on_commit(lambda: calls.append("outer"))
        return Success(None)

    unit.transact("outer", outer)
    assert calls == ["outer"]

    def outer_fails() -> Result[None, NotFound]:
        unit.on_commit(lambda: calls.append("never"))
        unit.transact("inner", lambda: _register(unit, calls, "never inner"))
        return Failure(NotFound("x", "y"))

    unit.transact("outer fails", outer_fails)

    def outer_raises() -> Result[None, NotFound]:
        unit.on_commit(lambda: calls.append("never"))
        raise Boom

    with pytest.raises(Boom):
        unit.transact("outer raises", outer_raises)
    assert calls == ["outer"]


def _register(unit: Database, calls: list[str], name: str) -> Result[None, NotFound]:
    unit.on_commit(lambda: calls.append(name))
    return Success(None)


def test_on_commit_outside_a_unit_runs_at_once(unit: Database) -> None:
    calls: list[int] = []
    unit.on_commit(lambda: calls.append(1))
    assert calls == [1]


def test_unit_from_another_thread_is_refused(unit: Database) -> None:
    errors: list[BaseException] = []

    def other_thread() -> None:
        try:
            unit.transact("elsewhere", lambda: Success(None))
        except BaseException as exc:
            errors.append(exc)

    worker = threading.Thread(target=other_thread)
    worker.start()
    worker.join()

    assert len(errors) == 1
    assert isinstance(errors[0], TransactionMisuse)
    assert not unit.in_unit
    assert unit.transact("here", lambda: Success(1)) == Success(1)


def test_a_result_is_required_in_memory() -> None:
    db = InMemoryDatabase()
    mirror: TxDict[str, int] = db.mirror()

    def fn() -> Any:
        mirror["a"] = 1
        return None

    with pytest.raises(TransactionMisuse):
        db.transact("no result", fn)
    assert dict(mirror) == {}


# -- read ------------------------------------------------------------------------------------


def test_read_returns_what_fn_returns(unit: Database) -> None:
    assert unit.read("ok", lambda: Success(1)) == Success(1)
    assert unit.read("no", lambda: Failure(NotFound("a", "b"))) == Failure(NotFound("a", "b"))


def test_read_keeps_warmed_mirrors_on_success_only(unit: Database) -> None:
    mirror: TxDict[str, int] = unit.mirror()
    unit.read("warm", lambda: _set(mirror, "warm", 1))
    unit.read("cold", lambda: _set(mirror, "cold", 2, fail=True))
    assert dict(mirror) == {"warm": 1}


def test_transact_inside_read_is_refused(unit: Database) -> None:
    def fn() -> Result[None, NotFound]:
        unit.transact("write", lambda: Success(None))
        return Success(None)

    with pytest.raises(TransactionMisuse, match="inside read"):
        unit.read("read", fn)
    assert not unit.in_unit
    assert unit.transact("write", lambda: Success(2)) == Success(2)


def test_transact_inside_a_read_nested_in_a_transact_is_refused(unit: Database) -> None:
    def inner_read() -> Result[None, NotFound]:
        unit.transact("write", lambda: Success(None))
        return Success(None)

    def outer() -> Result[None, NotFound | Busy | StorageFailure]:
        return unit.read("read", inner_read)

    with pytest.raises(TransactionMisuse, match="inside read"):
        unit.transact("outer", outer)
    assert not unit.in_unit

    def outer_after() -> Result[int, NotFound | Busy | StorageFailure]:
        unit.read("read", lambda: Success(None))
        return unit.transact("write after the read", lambda: Success(3))

    assert unit.transact("outer", outer_after) == Success(3)


def test_read_inside_transact_sees_uncommitted_writes(sqlite_db: SqliteDatabase) -> None:
    db = sqlite_db

    def fn() -> Result[list[str], NotFound | Busy | StorageFailure]:
        insert(db, "pending")
        return db.read("look", lambda: Success(names(db)))

    assert db.transact("write then read", fn) == Success(["pending"])


def test_read_that_writes_is_refused_and_rolled_back(sqlite_db: SqliteDatabase) -> None:
    db = sqlite_db
    with pytest.raises(TransactionMisuse, match="changed rows"):
        db.read("sneaky", lambda: Success(insert(db, "a")))
    assert names(db) == []

    def outer() -> Result[None, NotFound | Busy | StorageFailure]:
        insert(db, "outer")
        db.read("sneaky", lambda: Success(insert(db, "b")))
        return Success(None)

    with pytest.raises(TransactionMisuse):
        db.transact("outer", outer)
    assert names(db) == []


def test_read_sees_one_snapshot(tmp_path: Path) -> None:
    db = _open_sqlite(tmp_path / "snap.db")
    writer = apsw.Connection(str(tmp_path / "snap.db"))
    try:

        def fn() -> Result[tuple[int, int], NotFound]:
            first = int(db.scalar("SELECT count(*) FROM item"))
            writer.execute("INSERT INTO item (name) VALUES ('concurrent')")
            second = int(db.scalar("SELECT count(*) FROM item"))
            return Success((first, second))

        assert db.read("two counts", fn) == Success((0, 0))
        assert names(db) == ["concurrent"]
    finally:
        writer.close()
        db.close()


def test_read_driver_error_becomes_a_typed_failure(sqlite_db: SqliteDatabase) -> None:
    result = sqlite_db.read("bad", lambda: Success(sqlite_db.execute("SELECT * FROM nowhere")))
    assert isinstance(result, Failure)
    assert result.failure().kind is StorageFailureKind.OTHER
    assert result.failure().operation == "bad"
