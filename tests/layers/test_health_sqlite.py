"""The SQLite layer's health and its three ways of opening a file: what a foreign, empty,
old, newer or half-migrated file answers, and that reading never changes the file."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import apsw
import pytest
from returns.result import Failure, Success

from runstore.exceptions import DatabaseOpenError
from runstore.layers import (
    DATA_READER,
    DATA_STORE,
    DATABASE_HEALTH,
    Container,
    build,
    open_database,
    sqlite,
)
from runstore.migrations import JOURNAL_TABLE, shipped_ids, shipped_migrations
from runstore.services import (
    HalfAppliedMigration,
    NotARunstoreDatabase,
    PendingMigrations,
    StorageFailure,
    StorageFailureKind,
    UnknownMigration,
)
from runstore.services.test_runs import RunRetentionPolicy

FIXTURES = Path(__file__).resolve().parents[1] / "migrations" / "fixtures"


def _snapshot(path: Path) -> tuple[str, int, list[str]]:
    """What "untouched" means: the bytes, the mode and the folder's listing."""
    return (
        hashlib.sha256(path.read_bytes()).hexdigest(),
        path.stat().st_mode,
        sorted(p.name for p in path.parent.iterdir()),
    )


def _migrated(path: Path) -> Path:
    open_database(path).unwrap().close()
    return path


def _foreign(path: Path) -> Path:
    connection = apsw.Connection(str(path))
    connection.execute("CREATE TABLE mine (x INTEGER)")
    connection.close()
    return path


def _tamper(path: Path, *statements: str) -> None:
    connection = apsw.Connection(str(path))
    try:
        for sql in statements:
            connection.execute(sql)
        connection.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    finally:
        connection.close()
    for leftover in path.parent.glob(path.name + "-*"):
        leftover.unlink()


@contextmanager
def _reading(path: Path) -> Iterator[Container]:
    with build(sqlite(path, access="read")) as container:
        yield container


def test_a_migrated_file_is_ready_and_lists_every_shipped_migration(tmp_path: Path) -> None:
    path = _migrated(tmp_path / "runs.db")
    before = _snapshot(path)
    with _reading(path) as container:
        health = container.get(DATABASE_HEALTH)
        assert health.readiness() == Success(None)
        status = health.status().unwrap()
    assert [a.id for a in status.applied] == list(shipped_ids())
    assert [a.checksum for a in status.applied] == [m.checksum for m in shipped_migrations()]
    assert status.pending == ()
    assert _snapshot(path) == before


@pytest.mark.parametrize("make", ["empty", "foreign"])
def test_a_file_without_the_journal_is_not_a_runstore_database(
    tmp_path: Path, make: str
) -> None:
    path = tmp_path / "other.db"
    if make == "empty":
        path.write_bytes(b"")
    else:
        _foreign(path)
    path.chmod(0o640)
    before = _snapshot(path)

    with _reading(path) as container:
        health = container.get(DATABASE_HEALTH)
        ready = health.readiness()
        status = health.status().unwrap()
    with pytest.raises(DatabaseOpenError) as refused, build(sqlite(path, access="write")):
        pass

    if make == "empty":
        assert ready == Failure(
            NotARunstoreDatabase(str(path), f"it holds no {JOURNAL_TABLE} journal")
        )
    else:  # another program's file says so, naming its tables
        assert isinstance(ready, Failure)
        assert isinstance(ready.failure(), NotARunstoreDatabase)
        assert ready.failure().tables != ()
    assert status.applied == ()
    assert status.pending == shipped_ids()
    assert isinstance(refused.value.error, NotARunstoreDatabase)
    assert _snapshot(path) == before


@pytest.mark.parametrize("access", ["read", "write"])
def test_a_missing_file_is_refused_and_not_created(tmp_path: Path, access: str) -> None:
    path = tmp_path / "absent" / "runs.db"
    opened = open_database(path, access=access)  # type: ignore[arg-type]
    assert opened == Failure(NotARunstoreDatabase(str(path), "there is no such file"))
    assert list(tmp_path.iterdir()) == []


def test_an_older_database_is_pending_when_read_and_migrated_when_written(
    tmp_path: Path,
) -> None:
    path = tmp_path / "old.db"
    path.write_bytes(next(FIXTURES.glob("schema_0001_*.db")).read_bytes())
    before = _snapshot(path)

    with _reading(path) as container:
        ready = container.get(DATABASE_HEALTH).readiness()
    assert ready == Failure(PendingMigrations(shipped_ids()[1:]))
    assert _snapshot(path) == before

    with build(sqlite(path, access="write")) as container:
        assert container.get(DATABASE_HEALTH).readiness() == Success(None)


def test_a_newer_database_is_refused_by_readiness(tmp_path: Path) -> None:
    path = _migrated(tmp_path / "runs.db")
    unknown = max(shipped_ids()) + 1
    _tamper(
        path,
        f"INSERT INTO {JOURNAL_TABLE} (id, name, checksum, applied_at_ms, finished)"
        f" VALUES ({unknown}, 'future', 'x', 0, 1)",
    )
    with _reading(path) as container:
        assert container.get(DATABASE_HEALTH).readiness() == Failure(
            UnknownMigration(ids=(unknown,))
        )


def test_an_unfinished_migration_is_refused_by_readiness(tmp_path: Path) -> None:
    path = _migrated(tmp_path / "runs.db")
    last = shipped_migrations()[-1]
    _tamper(path, f"UPDATE {JOURNAL_TABLE} SET finished = 0 WHERE id = {last.id}")
    with _reading(path) as container:
        assert container.get(DATABASE_HEALTH).readiness() == Failure(
            HalfAppliedMigration(last.id, last.name, "journal row never marked finished")
        )


def test_reading_never_writes(tmp_path: Path) -> None:
    path = _migrated(tmp_path / "runs.db")
    before = _snapshot(path)
    with _reading(path) as container:
        assert container.get(DATA_READER).projects() == Success(())
        pruned = container.get(DATA_STORE).prune_runs(RunRetentionPolicy(keep_runs=1))
    assert _snapshot(path) == before
    assert isinstance(pruned, Failure)
    failure = pruned.failure()
    assert isinstance(failure, StorageFailure)
    assert failure.kind is StorageFailureKind.READ_ONLY


def test_the_full_check_reports_a_dangling_reference(tmp_path: Path) -> None:
    path = _migrated(tmp_path / "runs.db")
    _tamper(
        path,
        "PRAGMA foreign_keys = OFF",
        "INSERT INTO files (id, path) VALUES (1, 'x.py')",
        "INSERT INTO test_modules (id, run_id, file_id) VALUES (5, 77, 1)",
    )
    with _reading(path) as container:
        found = container.get(DATABASE_HEALTH).check().unwrap()
    assert found.integrity == ("ok",)
    [violation] = found.foreign_key_violations
    assert (violation.table, violation.rowid, violation.parent) == ("test_modules", 5, "test_runs")
    assert found.problems == ("1 foreign key violations",)
    assert not found.healthy


def test_quick_check_names_a_damaged_file(tmp_path: Path) -> None:
    path = _migrated(tmp_path / "bad.db")
    connection = apsw.Connection(str(path))
    page_size = int(str(connection.pragma("page_size")))
    connection.close()
    data = bytearray(path.read_bytes())
    data[4 * page_size : 15 * page_size] = b"\x5a" * (11 * page_size)
    path.write_bytes(bytes(data))
    with _reading(path) as container:
        checked = container.get(DATABASE_HEALTH).quick_check()
    assert isinstance(checked, Failure)
    assert checked.failure().kind is StorageFailureKind.CORRUPT
