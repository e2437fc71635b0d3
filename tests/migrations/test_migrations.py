"""Migrations: fresh databases, upgrades from every released schema, refusals, races.

Expectations come from ``shipped_migrations()``: other migrations are added over time and
nothing here counts them by hand.
"""

from __future__ import annotations

import hashlib
import multiprocessing
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import apsw
import pytest
from returns.result import Failure, Success

import runstore.migrations as migrations_module
from runstore.layers import SqliteDatabase, open_database
from runstore.migrations import (
    JOURNAL_TABLE,
    Migration,
    apply_migrations,
    migration_status,
    shipped_migrations,
)
from runstore.services import (
    HalfAppliedMigration,
    MigrationDrift,
    StorageFailure,
    StorageFailureKind,
    UnknownMigration,
)

HERE = Path(__file__).resolve().parent
FIXTURES = sorted((HERE / "fixtures").glob("schema_*.db"))
SHIPPED = shipped_migrations()
SHIPPED_IDS = [m.id for m in SHIPPED]


def journal(db: SqliteDatabase) -> list[tuple[Any, ...]]:
    return db.execute(
        f"SELECT id, name, checksum, finished FROM {JOURNAL_TABLE} ORDER BY id"
    )


def expected_journal(ids: list[int] | None = None) -> list[tuple[Any, ...]]:
    wanted = SHIPPED_IDS if ids is None else ids
    return [(m.id, m.name, m.checksum, 1) for m in SHIPPED if m.id in wanted]


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def snapshot(path: Path) -> tuple[str, list[str]]:
    """The file's bytes and the folder's listing: what 'untouched' means here."""
    return sha256(path), sorted(p.name for p in path.parent.iterdir())


def migrated(path: Path) -> None:
    """Create a fully migrated database at ``path`` and close it."""
    open_database(path).unwrap().close()


def tamper(path: Path, *statements: str) -> None:
    """Change ``path`` behind runstore's back, with a plain connection."""
    conn = apsw.Connection(str(path))
    try:
        for sql in statements:
            conn.execute(sql)
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    finally:
        conn.close()


# -- fresh databases -------------------------------------------------------------------------


def test_shipped_migrations_are_numbered_and_named() -> None:
    assert sorted(set(SHIPPED_IDS)) == SHIPPED_IDS
    assert SHIPPED_IDS[0] == 1
    for migration in SHIPPED:
        assert migration.checksum == hashlib.sha256(migration.sql.encode()).hexdigest()
        assert migration.name.replace("_", "").isalnum()


@pytest.mark.parametrize("where", ["file", "memory"])
def test_a_fresh_database_gets_every_migration(tmp_path: Path, where: str) -> None:
    path = ":memory:" if where == "memory" else str(tmp_path / "deep" / "fresh.db")
    db = open_database(path).unwrap()
    try:
        assert journal(db) == expected_journal()
        status = migration_status(db).unwrap()
        assert status.healthy
        assert status.pending == ()
        assert [a.id for a in status.applied] == SHIPPED_IDS
        assert apply_migrations(db) == Success(())
        assert db.execute("PRAGMA integrity_check") == [("ok",)]
        assert db.execute("PRAGMA foreign_key_check") == []
    finally:
        db.close()


def test_reopening_applies_nothing_and_keeps_the_journal(tmp_path: Path) -> None:
    migrated(tmp_path / "db")
    first = open_database(tmp_path / "db").unwrap()
    rows = first.execute(f"SELECT * FROM {JOURNAL_TABLE}")
    first.close()
    again = open_database(tmp_path / "db").unwrap()
    try:
        assert again.execute(f"SELECT * FROM {JOURNAL_TABLE}") == rows
    finally:
        again.close()


def test_up_to_stops_after_that_migration(tmp_path: Path) -> None:
    db = SqliteDatabase.open(tmp_path / "partial.db").unwrap()
    try:
        assert apply_migrations(db, up_to=SHIPPED_IDS[0]) == Success((SHIPPED_IDS[0],))
        assert journal(db) == expected_journal(SHIPPED_IDS[:1])
        assert migration_status(db).unwrap().pending == tuple(SHIPPED_IDS[1:])
        assert apply_migrations(db) == Success(tuple(SHIPPED_IDS[1:]))
        assert journal(db) == expected_journal()
    finally:
        db.close()


def test_every_table_is_strict_and_every_foreign_key_is_indexed(tmp_path: Path) -> None:
    db = open_database(tmp_path / "schema.db").unwrap()
    try:
        tables = db.execute(
            "SELECT name, strict FROM pragma_table_list"
            " WHERE schema = 'main' AND type = 'table' AND name NOT LIKE 'sqlite_%'"
        )
        assert [name for name, strict in tables if not strict] == []
        unindexed = []
        for (table, _) in tables:
            leading = {
                db.scalar(f"SELECT name FROM pragma_index_info('{index}') WHERE seqno = 0")
                for (index,) in db.execute(f"SELECT name FROM pragma_index_list('{table}')")
            }
            if db.scalar(f"SELECT pk FROM pragma_table_info('{table}') WHERE pk = 1") is not None:
                leading.add(
                    db.scalar(f"SELECT name FROM pragma_table_info('{table}') WHERE pk = 1")
                )
            unindexed += [
                f"{table}.{column}"
                for (column,) in db.execute(
                    f"SELECT \"from\" FROM pragma_foreign_key_list('{table}') WHERE seq = 0"
                )
                if column not in leading
            ]
        assert unindexed == []
    finally:
        db.close()


# -- upgrades from every released schema ------------------------------------------------------


def test_there_is_a_fixture_for_the_empty_and_the_first_schema() -> None:
    names = [path.name for path in FIXTURES]
    assert "schema_0000_empty.db" in names
    assert f"schema_0001_{SHIPPED[0].name}.db" in names


@pytest.mark.parametrize("fixture", FIXTURES, ids=[path.stem for path in FIXTURES])
def test_every_fixture_upgrades_to_the_latest_schema(fixture: Path, tmp_path: Path) -> None:
    original = sha256(fixture)
    copy = tmp_path / fixture.name
    shutil.copyfile(fixture, copy)
    before = (
        _read_only(copy, lambda db: journal(db) if _has_journal(db) else [])
        if copy.stat().st_size
        else []
    )
    # A fixture only ever holds released migrations, unchanged since their release.
    assert before == expected_journal([row[0] for row in before])

    db = open_database(copy).unwrap()
    try:
        assert journal(db) == expected_journal()
        old_rows = {row[0]: row for row in before}
        for row in db.execute(f"SELECT id, name, checksum, finished FROM {JOURNAL_TABLE}"):
            assert old_rows.get(row[0], row) == row
        assert db.execute("PRAGMA integrity_check") == [("ok",)]
        assert db.execute("PRAGMA foreign_key_check") == []
        assert migration_status(db).unwrap().healthy
        assert db.scalar("PRAGMA journal_mode") == "wal"
    finally:
        db.close()
    assert sha256(fixture) == original


def _has_journal(db: SqliteDatabase) -> bool:
    return bool(
        db.scalar("SELECT count(*) FROM sqlite_schema WHERE name = ?", (JOURNAL_TABLE,))
    )


def _read_only(path: Path, read: Callable[[SqliteDatabase], Any]) -> Any:
    db = SqliteDatabase.open_read_only(path).unwrap()
    try:
        return read(db)
    finally:
        db.close()


def test_status_of_an_old_database_changes_nothing(tmp_path: Path) -> None:
    fixture = next(p for p in FIXTURES if p.name.startswith("schema_0001_"))
    copy = tmp_path / fixture.name
    shutil.copyfile(fixture, copy)
    before = snapshot(copy)

    status = _read_only(copy, lambda db: migration_status(db).unwrap())

    assert status.healthy
    assert status.pending == tuple(SHIPPED_IDS[1:])
    assert sha256(copy) == before[0]


# -- refusals: before anything is touched, never rewritten -------------------------------------


def _refused(path: Path) -> Any:
    before = snapshot(path)
    connections = len(apsw.connections())

    result = open_database(path)

    assert isinstance(result, Failure)
    assert snapshot(path) == before, "a refused database must be left exactly as it was"
    assert len(apsw.connections()) == connections
    return result.failure()


@pytest.mark.parametrize("journal_mode", ["wal", "delete"])
def test_a_newer_database_is_refused(tmp_path: Path, journal_mode: str) -> None:
    path = tmp_path / "newer.db"
    migrated(path)
    newer = SHIPPED_IDS[-1] + 1_000
    tamper(
        path,
        f"PRAGMA journal_mode = {journal_mode}",
        f"INSERT INTO {JOURNAL_TABLE} (id, name, checksum, applied_at_ms, finished)"
        f" VALUES ({newer}, 'from_the_future', '{'0' * 64}', 0, 1)",
    )

    assert _refused(path) == UnknownMigration((newer,))


@pytest.mark.parametrize("journal_mode", ["wal", "delete"])
def test_a_drifted_database_is_refused(tmp_path: Path, journal_mode: str) -> None:
    path = tmp_path / "drift.db"
    migrated(path)
    first = SHIPPED[0]
    tamper(
        path,
        f"PRAGMA journal_mode = {journal_mode}",
        f"UPDATE {JOURNAL_TABLE} SET checksum = '{'f' * 64}' WHERE id = {first.id}",
    )

    assert _refused(path) == MigrationDrift(first.id, first.name, first.checksum, "f" * 64)


def test_an_unfinished_journal_row_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "unfinished.db"
    migrated(path)
    last = SHIPPED[-1]
    tamper(path, f"UPDATE {JOURNAL_TABLE} SET finished = 0 WHERE id = {last.id}")

    error = _refused(path)
    assert isinstance(error, HalfAppliedMigration)
    assert (error.id, error.name) == (last.id, last.name)
    assert "finished" in error.detail


def test_objects_without_a_journal_row_are_refused(tmp_path: Path) -> None:
    path = tmp_path / "orphans.db"
    migrated(path)
    last = next(m for m in reversed(SHIPPED) if m.creates)
    tamper(path, f"DELETE FROM {JOURNAL_TABLE} WHERE id = {last.id}")

    error = _refused(path)
    assert isinstance(error, HalfAppliedMigration)
    assert (error.id, error.name) == (last.id, last.name)
    assert "exist" in error.detail


def test_objects_of_the_first_migration_without_any_journal_are_refused(tmp_path: Path) -> None:
    path = tmp_path / "no_journal.db"
    first = SHIPPED[0]
    tamper(path, "PRAGMA journal_mode = delete", first.sql)

    error = _refused(path)
    assert isinstance(error, HalfAppliedMigration)
    assert error.id == first.id


def test_a_failing_migration_leaves_no_trace(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    broken = Migration(
        id=SHIPPED_IDS[-1] + 1,
        name="broken",
        sql="CREATE TABLE half_done (x INTEGER) STRICT; INSERT INTO nowhere VALUES (1);",
        checksum="0" * 64,
    )
    monkeypatch.setattr(migrations_module, "shipped_migrations", lambda: (*SHIPPED, broken))
    db = SqliteDatabase.open(tmp_path / "broken.db").unwrap()
    try:
        result = apply_migrations(db)
        assert isinstance(result, Failure)
        error = result.failure()
        assert isinstance(error, StorageFailure)
        assert error.kind is StorageFailureKind.OTHER
        assert f"{broken.id:04d}" in error.operation
        assert journal(db) == expected_journal()
        assert db.scalar("SELECT count(*) FROM sqlite_schema WHERE name = 'half_done'") == 0
        assert migration_status(db).unwrap().pending == (broken.id,)
    finally:
        db.close()


# -- many processes at once ------------------------------------------------------------------


@pytest.mark.parametrize(("start", "processes"), [("fresh", 8), ("old", 2)])
def test_processes_opening_one_file_at_once_all_succeed(
    tmp_path: Path, start: str, processes: int
) -> None:
    """8 processes on a fresh file, 2 on an old one: no failures, each migration once."""
    from _open_worker import open_once  # beside this file; spawned children import it too

    path = tmp_path / "race" / "runs.db"
    if start == "old":
        path.parent.mkdir()
        shutil.copyfile(next(p for p in FIXTURES if p.name.startswith("schema_0001_")), path)
    context = multiprocessing.get_context("spawn")
    barrier = context.Barrier(processes)
    results = context.Queue()
    workers = [
        context.Process(target=open_once, args=(str(path), barrier, results))
        for _ in range(processes)
    ]
    for worker in workers:
        worker.start()
    outcomes = [results.get(timeout=120) for _ in workers]
    for worker in workers:
        worker.join(timeout=30)

    assert outcomes == ["ok"] * processes
    assert [worker.exitcode for worker in workers] == [0] * processes
    db = SqliteDatabase.open_read_only(path).unwrap()
    try:
        assert journal(db) == expected_journal()
        assert db.execute(f"SELECT id, count(*) FROM {JOURNAL_TABLE} GROUP BY id") == [
            (i, 1) for i in SHIPPED_IDS
        ]
        assert db.execute("PRAGMA integrity_check") == [("ok",)]
    finally:
        db.close()
